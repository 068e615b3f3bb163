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

/// What `reconcile --close` did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Closed {
    /// Keys whose closed row was written.
    pub written: usize,
    /// Keys whose exact total does not fit the table's 64-bit values: no row written (a
    /// clamped total would be a wrong exact value), each with why.
    pub beyond_i64: Vec<String>,
    /// Keys whose closed row already holds other totals than the ledger's sum now: left
    /// as they are (unless the close overwrites), each with both totals.
    pub differing: Vec<String>,
}

/// A key's closed-row totals per column name (zero columns left out), or why they cannot
/// be kept: a total beyond i64 is refused, never clamped.
pub fn closed_totals(
    columns: &[String],
    key: &str,
    exact: &[i128],
) -> Result<BTreeMap<String, i64>, String> {
    columns
        .iter()
        .zip(exact)
        .filter(|(_, v)| **v != 0)
        .map(|(column, v)| {
            i64::try_from(*v)
                .map(|v| (column.clone(), v))
                .map_err(|_| format!("{key} {column}: exact total {v} is beyond i64"))
        })
        .collect()
}

/// Writes every key's exact total of a closed day (`reconcile --close`), for the keys
/// that pass `tags`. Streams: the ledger is read one bucket at a time, and that bucket's
/// rows written (concurrently) before the next is read. Idempotent: a second close writes
/// the same rows. A key whose total is beyond i64 gets no row and is listed in
/// [`Closed::beyond_i64`]. Each key's closed row is read first: one that holds other
/// totals (a close made before ledger rows went missing, or the ledger changed since) is
/// left as it is and listed in [`Closed::differing`], unless `overwrite`. Refused, with
/// nothing written, once the day's ledger rows may expire ([`super::ledger_expiring`],
/// on the clock when it is called). `now_ms` is the time recorded in the rows.
#[allow(clippy::too_many_arguments)]
pub async fn close_day(
    session: &Session,
    config: &Config,
    family: &FamilyDef,
    day: Day,
    tags: &[(String, String)],
    slice: Option<super::slice::Part>,
    now_ms: i64,
    overwrite: bool,
) -> Result<Closed, ReadError> {
    // As `repair::apply` does, on the clock now (a run can reach its close long after
    // `now_ms`): once the day's ledger rows may expire, its totals are short of what
    // was written, whoever calls.
    let now = crate::bucket::unix_secs(std::time::SystemTime::now()).max(now_ms / 1000);
    if let Some(why) = super::ledger_expiring(config, day, now) {
        return Err(ReadError::Refused(format!("close refused: {why}")));
    }
    let statement = prepare(session, config, "insert_exact_day").await?;
    let select = prepare(session, config, "select_exact_day").await?;
    let buckets = super::gather::BucketReader::new(session, config, family, day).await?;
    let rows_read = std::sync::atomic::AtomicU64::new(0);
    let mut closed = Closed::default();
    // A slice's keys are whole ledger buckets: those whose number is its index modulo
    // its count (see `super::slice`).
    let in_part =
        |bucket: &u16| slice.is_none_or(|(i, n)| super::slice::Slice::holds(i, n, *bucket));
    for bucket in (0..config.exact.buckets).filter(in_part) {
        let sums = buckets.ledger_bucket(bucket as i16, &rows_read).await?;
        let mut keys = Vec::new();
        for (key, ledger) in sums {
            if !super::matches_tags(family, &key, tags) {
                continue;
            }
            match closed_totals(&family.columns, &key, &ledger.sums) {
                Ok(totals) => keys.push((key, totals, ledger.rows)),
                Err(why) => closed.beyond_i64.push(why),
            }
        }
        let writes = keys.into_iter().map(|(key, totals, rows)| {
            let (statement, select) = (&statement, &select);
            async move {
                if !overwrite
                    && let Some(kept) = closed_row(session, select, family, &key, day).await?
                    && kept != totals
                {
                    return Ok(Some(format!(
                        "{key}: exact_by_day holds {kept:?}, the ledger sums to {totals:?}"
                    )));
                }
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
                    .map_err(|e| store_error(statement, e))?;
                Ok::<_, ReadError>(None)
            }
        });
        let mut writes = futures_util::stream::iter(writes).buffer_unordered(64);
        while let Some(result) = writes.next().await {
            match result? {
                None => closed.written += 1,
                Some(why) => closed.differing.push(why),
            }
        }
    }
    Ok(closed)
}

/// The totals of `key`'s closed row of `day` (`select_exact_day` prepared), if it has one.
async fn closed_row(
    session: &Session,
    select: &PreparedStatement,
    family: &FamilyDef,
    key: &str,
    day: Day,
) -> Result<Option<BTreeMap<String, i64>>, ReadError> {
    let result = session
        .execute_unpaged(select, (family.name.as_str(), key, CqlDate(day.cql_date())))
        .await
        .map_err(|e| store_error(select, e))?
        .into_rows_result()
        .map_err(|e| store_error(select, e))?;
    type ClosedRow = (
        Option<BTreeMap<String, i64>>,
        Option<i64>,
        Option<CqlTimestamp>,
    );
    match result
        .rows::<ClosedRow>()
        .map_err(|e| store_error(select, e))?
        .next()
    {
        Some(row) => Ok(Some(
            row.map_err(|e| store_error(select, e))?
                .0
                .unwrap_or_default(),
        )),
        None => Ok(None),
    }
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
    if let Some(totals) = closed_row(session, &closed, family, &key, day).await? {
        let totals = totals
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_total_beyond_i64_is_refused_not_clamped() {
        let columns = ["views".to_owned(), "bytes".to_owned()];
        let fits = closed_totals(&columns, r#"["home"]"#, &[5, 0]).unwrap();
        assert_eq!(fits, BTreeMap::from([("views".to_owned(), 5)]));
        let too_large = i128::from(i64::MAX) + 1;
        let why = closed_totals(&columns, r#"["home"]"#, &[5, too_large]).unwrap_err();
        assert!(why.contains("bytes") && why.contains("beyond i64"), "{why}");
        let too_small = i128::from(i64::MIN) - 1;
        assert!(closed_totals(&columns, r#"["home"]"#, &[too_small, 0]).is_err());
    }
}
