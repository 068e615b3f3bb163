//! Closed days: `reconcile --close` keeps each key's exact total of a closed day in
//! `exact_by_day` (one row read for an old day, after its ledger rows expire, like seed
//! 000's `views_exact`), and `get --exact` reads a key's exact value: the closed row when
//! there is one, else the live sum of its ledger rows (Netflix's "accurate" read).

use std::collections::BTreeMap;

use futures_util::StreamExt;
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::{CqlDate, CqlTimestamp};

use crate::bucket::Day;
use crate::config::Config;
use crate::cql_text::{self, EXACT};
use crate::family::{FamilyDef, key_bucket};
use crate::ops::read::ReadError;
use crate::sink::cql::session;

async fn prepare(
    session: &Session,
    config: &Config,
    name: &str,
) -> Result<PreparedStatement, ReadError> {
    let text = cql_text::statement(EXACT, name, &[("keyspace", config.exact_keyspace())]);
    let mut statement = session
        .prepare(text.clone())
        .await
        .map_err(|e| ReadError::Store {
            statement: text,
            error: e.to_string(),
        })?;
    statement.set_is_idempotent(true);
    statement.set_consistency(session::consistency(config.exact.consistency));
    Ok(statement)
}

fn store_error(statement: &PreparedStatement, error: impl std::fmt::Display) -> ReadError {
    ReadError::Store {
        statement: statement.get_statement().to_owned(),
        error: error.to_string(),
    }
}

/// Writes every key's exact total of a closed day (`reconcile --close`), for the keys
/// that pass `tags`. Streams: the ledger is read one bucket at a time, and that bucket's
/// rows written (concurrently) before the next is read. Idempotent: a second close writes
/// the same rows. Returns the rows written.
pub async fn close_day(
    session: &Session,
    config: &Config,
    family: &FamilyDef,
    day: Day,
    tags: &[(String, String)],
    now_ms: i64,
) -> Result<usize, ReadError> {
    let statement = prepare(session, config, "insert_exact_day").await?;
    let buckets = super::gather::BucketReader::new(session, config, family, day).await?;
    let rows_read = std::sync::atomic::AtomicU64::new(0);
    let mut written = 0;
    for bucket in 0..config.exact.buckets {
        let sums = buckets.ledger_bucket(bucket as i16, &rows_read).await?;
        let writes = sums
            .into_iter()
            .filter(|(key, _)| super::matches_tags(family, key, tags))
            .map(|(key, (exact, rows))| {
                let statement = &statement;
                async move {
                    let totals: BTreeMap<String, i64> = family
                        .columns
                        .iter()
                        .zip(exact)
                        .filter(|(_, v)| *v != 0)
                        .map(|(c, v)| (c.clone(), i64::try_from(v).unwrap_or(i64::MAX)))
                        .collect();
                    session
                        .execute_unpaged(
                            statement,
                            (
                                family.name.as_str(),
                                key.as_str(),
                                CqlDate(day.cql_date()),
                                totals,
                                i64::try_from(rows).unwrap_or(i64::MAX),
                                CqlTimestamp(now_ms),
                            ),
                        )
                        .await
                        .map_err(|e| store_error(statement, e))
                }
            });
        let mut writes = futures_util::stream::iter(writes).buffer_unordered(64);
        while let Some(result) = writes.next().await {
            result?;
            written += 1;
        }
    }
    Ok(written)
}

/// Where a key's exact value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExactSource {
    /// The closed-day row.
    Closed,
    /// The live ledger rows.
    Ledger,
}

/// A key's exact totals of `day`, per column name: the closed row if the day was closed,
/// else the sum of the key's ledger rows.
pub async fn exact_value(
    session: &Session,
    config: &Config,
    family: &FamilyDef,
    keys: &[String],
    day: Day,
) -> Result<(BTreeMap<String, i128>, ExactSource), ReadError> {
    let key = serde_json::to_string(keys).unwrap_or_default();
    let closed = prepare(session, config, "select_exact_day").await?;
    let result = session
        .execute_unpaged(
            &closed,
            (family.name.as_str(), key.as_str(), CqlDate(day.cql_date())),
        )
        .await
        .map_err(|e| store_error(&closed, e))?
        .into_rows_result()
        .map_err(|e| store_error(&closed, e))?;
    type ClosedRow = (
        Option<BTreeMap<String, i64>>,
        Option<i64>,
        Option<CqlTimestamp>,
    );
    if let Some(row) = result
        .rows::<ClosedRow>()
        .map_err(|e| store_error(&closed, e))?
        .next()
    {
        let (totals, _, _) = row.map_err(|e| store_error(&closed, e))?;
        let totals = totals
            .unwrap_or_default()
            .into_iter()
            .map(|(c, v)| (c, i128::from(v)))
            .collect();
        return Ok((totals, ExactSource::Closed));
    }
    let live = prepare(session, config, "select_ledger_key").await?;
    let bucket = key_bucket(&key, config.exact.buckets);
    let mut pager = session
        .execute_iter(
            live.clone(),
            (
                family.name.as_str(),
                CqlDate(day.cql_date()),
                bucket,
                key.as_str(),
            ),
        )
        .await
        .map_err(|e| store_error(&live, e))?
        .rows_stream::<(i16, BTreeMap<String, i64>)>()
        .map_err(|e| store_error(&live, e))?;
    let mut totals: BTreeMap<String, i128> =
        family.columns.iter().map(|c| (c.clone(), 0)).collect();
    while let Some(row) = pager.next().await {
        let (_, deltas) = row.map_err(|e| store_error(&live, e))?;
        for (column, delta) in deltas {
            *totals.entry(column).or_default() += i128::from(delta);
        }
    }
    Ok((totals, ExactSource::Ledger))
}
