//! Reading one family-day for reconcile: the ledger (every bucket, paged), the outcomes
//! table, the key index, and the counters of each key (minute rows and day row, every
//! shard summed, through [`Reader`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::StreamExt;
use scylla::client::session::Session;
use scylla::value::CqlDate;

use crate::bucket::Day;
use crate::config::{Config, ConsistencyLevel};
use crate::cql_text::{self, EXACT};
use crate::family::FamilyDef;
use crate::ops::keyindex;
use crate::ops::read::{ReadError, Reader};
use crate::sink::cql::session;
use crate::vocabulary::Granularity;

use super::verdict::{Sums, Unknown};

/// What the outcomes table says about one key and granularity.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyOutcomes {
    /// Rows known not applied (rejected, dropped, unknown resolved as not applied).
    pub known_missing: Sums,
    /// Unresolved unknown requests, their rows summed per request.
    pub unknowns: Vec<Unknown>,
    /// The outcome rows of each unknown request (request id → row numbers), for
    /// `--resolve`.
    pub rows: BTreeMap<String, Vec<i16>>,
}

/// One family-day as the ledger and the outcomes table have it.
#[derive(Debug, Default)]
pub struct DayTruth {
    /// Key (JSON text) → the ledger's sum of the day, per column.
    pub exact: BTreeMap<String, Sums>,
    /// Ledger rows read.
    pub ledger_rows: u64,
    /// Key (JSON text) → its ledger rows of the day.
    pub rows_per_key: BTreeMap<String, u64>,
    /// (key, granularity) → outcomes.
    pub outcomes: BTreeMap<(String, Granularity), KeyOutcomes>,
}

fn store_error(statement: &str, error: impl std::fmt::Display) -> ReadError {
    ReadError::Store {
        statement: statement.to_owned(),
        error: error.to_string(),
    }
}

fn column_sums(family: &FamilyDef, deltas: &BTreeMap<String, i64>, into: &mut Sums) {
    if into.len() < family.columns.len() {
        into.resize(family.columns.len(), 0);
    }
    for (column, delta) in deltas {
        if let Some(i) = family.columns.iter().position(|c| c == column) {
            into[i] += i128::from(*delta);
        }
    }
}

fn negated(deltas: &BTreeMap<String, i64>) -> BTreeMap<String, i64> {
    deltas
        .iter()
        .map(|(c, d)| (c.clone(), d.saturating_neg()))
        .collect()
}

/// Reads every ledger bucket of `family`'s `day` (concurrently, paged), and its
/// outcome rows. `progress` hears the ledger rows read so far.
pub async fn read_truth(
    session: &Session,
    config: &Config,
    family: &FamilyDef,
    day: Day,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<DayTruth, ReadError> {
    let keyspace = [("keyspace", config.exact_keyspace())];
    let consistency = session::consistency(config.exact.consistency);
    let text = cql_text::statement(EXACT, "select_ledger_bucket", &keyspace);
    let mut statement = session
        .prepare(text.clone())
        .await
        .map_err(|e| store_error(&text, e))?;
    statement.set_is_idempotent(true);
    statement.set_consistency(consistency);
    statement.set_page_size(5_000);
    let read_rows = std::sync::atomic::AtomicU64::new(0);
    let buckets = (0..config.exact.buckets).map(|bucket| {
        let (statement, text, read_rows) = (&statement, &text, &read_rows);
        async move {
            let mut pager = session
                .execute_iter(
                    statement.clone(),
                    (family.name.as_str(), CqlDate(day.cql_date()), bucket as i16),
                )
                .await
                .map_err(|e| store_error(text, e))?
                .rows_stream::<(String, i16, BTreeMap<String, i64>)>()
                .map_err(|e| store_error(text, e))?;
            let mut sums: BTreeMap<String, (Sums, u64)> = BTreeMap::new();
            let mut rows = 0_u64;
            while let Some(row) = pager.next().await {
                let (key, _minute, deltas) = row.map_err(|e| store_error(text, e))?;
                let entry = sums.entry(key).or_default();
                column_sums(family, &deltas, &mut entry.0);
                entry.1 += 1;
                rows += 1;
                if rows.is_multiple_of(10_000) {
                    let total = read_rows.fetch_add(10_000, std::sync::atomic::Ordering::Relaxed);
                    progress(total + 10_000);
                }
            }
            read_rows.fetch_add(rows % 10_000, std::sync::atomic::Ordering::Relaxed);
            Ok::<_, ReadError>((sums, rows))
        }
    });
    let mut truth = DayTruth::default();
    let mut results = futures_util::stream::iter(buckets).buffer_unordered(16);
    while let Some(result) = results.next().await {
        let (sums, rows) = result?;
        truth.ledger_rows += rows;
        // A key lives in one bucket: no merging across buckets.
        for (key, (sums, rows)) in sums {
            truth.rows_per_key.insert(key.clone(), rows);
            truth.exact.insert(key, sums);
        }
    }
    progress(truth.ledger_rows);
    read_outcomes(session, config, family, day, &mut truth).await?;
    Ok(truth)
}

/// The outcome rows of `family`'s `day`, folded per key and granularity.
async fn read_outcomes(
    session: &Session,
    config: &Config,
    family: &FamilyDef,
    day: Day,
    truth: &mut DayTruth,
) -> Result<(), ReadError> {
    let keyspace = [("keyspace", config.exact_keyspace())];
    let text = cql_text::statement(EXACT, "select_outcomes", &keyspace);
    let mut statement = session
        .prepare(text.clone())
        .await
        .map_err(|e| store_error(&text, e))?;
    statement.set_is_idempotent(true);
    statement.set_consistency(session::consistency(config.exact.consistency));
    type OutcomeCells = (
        String,
        i16,
        String,
        String,
        String,
        Option<i16>,
        Option<i8>,
        Option<BTreeMap<String, i64>>,
        Option<String>,
        Option<scylla::value::CqlTimestamp>,
        Option<String>,
    );
    let mut pager = session
        .execute_iter(statement, (family.name.as_str(), CqlDate(day.cql_date())))
        .await
        .map_err(|e| store_error(&text, e))?
        .rows_stream::<OutcomeCells>()
        .map_err(|e| store_error(&text, e))?;
    // (key, granularity) → request id → summed deltas.
    let mut unknown: BTreeMap<(String, Granularity), BTreeMap<String, Sums>> = BTreeMap::new();
    while let Some(row) = pager.next().await {
        let (request_id, row, outcome, granularity, key, _minute, _shard, deltas, _, _, resolution) =
            row.map_err(|e| store_error(&text, e))?;
        let granularity = match granularity.as_str() {
            "day" => Granularity::Day,
            _ => Granularity::Minute,
        };
        let deltas = deltas.unwrap_or_default();
        let entry = truth
            .outcomes
            .entry((key.clone(), granularity))
            .or_default();
        // How the row moves the expected counter away from the ledger.
        let mut unknown_item = false;
        match (outcome.as_str(), resolution.as_deref()) {
            // Part of the ledger, never applied.
            ("rejected" | "dropped", _) | ("unknown", Some("not_applied")) => {
                column_sums(family, &deltas, &mut entry.known_missing)
            }
            // Part of the ledger, applied.
            ("unknown", Some("applied")) => {}
            ("unknown", _) => unknown_item = true,
            // A repair is not in the ledger: applied, it is counter beyond the ledger;
            // unknown, it is counted as applied and searched like any unknown request.
            ("repair_applied", _) => {
                column_sums(family, &negated(&deltas), &mut entry.known_missing)
            }
            ("repair_unknown", _) => {
                column_sums(family, &negated(&deltas), &mut entry.known_missing);
                unknown_item = true;
            }
            _ => {}
        }
        if unknown_item {
            entry.rows.entry(request_id.clone()).or_default().push(row);
            let sums = unknown
                .entry((key, granularity))
                .or_default()
                .entry(request_id)
                .or_default();
            column_sums(family, &deltas, sums);
        }
    }
    for (place, requests) in unknown {
        let entry = truth.outcomes.entry(place).or_default();
        entry.unknowns = requests
            .into_iter()
            .map(|(request_id, deltas)| Unknown { request_id, deltas })
            .collect();
    }
    Ok(())
}

/// The keys of `family`'s `day` in the key index, as JSON texts (empty when the index is
/// off).
pub async fn indexed_keys(
    session: &Session,
    config: &Config,
    family: &FamilyDef,
    day: Day,
) -> Result<Vec<String>, ReadError> {
    if !config.key_index.enabled {
        return Ok(Vec::new());
    }
    let keys =
        keyindex::keys_of_day(session, config, &family.name, day, ConsistencyLevel::One).await?;
    Ok(keys
        .into_iter()
        .map(|values| serde_json::to_string(&values).unwrap_or_default())
        .collect())
}

/// The counters of one key on `day`: the minute rows summed over the day, and the day
/// row; per column.
pub async fn counters(
    reader: &Arc<Reader>,
    family: &FamilyDef,
    key: &str,
    day: Day,
    consistency: ConsistencyLevel,
) -> Result<[Sums; 2], ReadError> {
    let values = keyindex::key_values(key)
        .ok_or_else(|| ReadError::Usage(format!("unreadable key {key}")))?;
    let columns: Vec<usize> = (0..family.columns.len()).collect();
    let (minute, day_rows) = futures_util::future::try_join(
        reader.partition(
            family,
            Granularity::Minute,
            &values,
            day,
            &columns,
            consistency,
        ),
        reader.partition(
            family,
            Granularity::Day,
            &values,
            day,
            &columns,
            consistency,
        ),
    )
    .await?;
    let mut sums = [vec![0_i128; columns.len()], vec![0_i128; columns.len()]];
    for row in minute.values() {
        for (s, v) in sums[0].iter_mut().zip(row) {
            *s += i128::from(*v);
        }
    }
    if let Some(row) = day_rows.get(&i64::from(day.0)) {
        for (s, v) in sums[1].iter_mut().zip(row) {
            *s += i128::from(*v);
        }
    }
    Ok(sums)
}
