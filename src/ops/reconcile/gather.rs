//! Reading one family-day for reconcile: the ledger and the key index one bucket at a
//! time (paged), the outcomes table, and the counters of each key (minute rows and day
//! row, every shard summed, through [`Reader`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::StreamExt;
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::CqlDate;

use crate::bucket::Day;
use crate::config::{Config, ConsistencyLevel};
use crate::cql_text::{self, EXACT, KEY_INDEX};
use crate::family::FamilyDef;
use crate::flush::owed;
use crate::ops::keyindex;
use crate::ops::read::{PartitionQuery, ReadError, Reader};
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

/// The outcome rows of one family-day: (key, granularity) → what they say. Read whole:
/// its size follows the writes that did not simply apply, not the number of keys.
pub type DayOutcomes = BTreeMap<(String, Granularity), KeyOutcomes>;

/// What the outcomes table says about one family-day.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DayRecords {
    /// Per key and granularity.
    pub keys: DayOutcomes,
    /// The state directories that still owe rows of this day (an `owed` mark, see
    /// [`crate::flush::owed`]): their spill has not been replayed yet.
    pub owed_by: Vec<String>,
    /// When the latest corrective write of `--repair` was recorded (Unix milliseconds).
    pub last_repair_ms: Option<i64>,
}

/// One key's ledger rows, summed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LedgerKey {
    /// Sums per column.
    pub sums: Sums,
    /// Sums of the positive deltas per column: the most the counter can hold while the
    /// counter write of any of these rows may still be on its way (a pending decrement
    /// has not lowered it yet).
    pub rises: Sums,
    /// Ledger rows.
    pub rows: u64,
}

/// The ledger's sums of the keys of one bucket: key (JSON text) → its rows summed.
pub type LedgerSums = HashMap<String, LedgerKey>;

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

fn positive(deltas: &BTreeMap<String, i64>) -> BTreeMap<String, i64> {
    deltas
        .iter()
        .filter(|(_, d)| **d > 0)
        .map(|(c, d)| (c.clone(), *d))
        .collect()
}

fn negated(deltas: &BTreeMap<String, i64>) -> BTreeMap<String, i64> {
    deltas
        .iter()
        .map(|(c, d)| (c.clone(), d.saturating_neg()))
        .collect()
}

/// The bucket scans of one family-day: the ledger's buckets and the key index's, with
/// their statements prepared once.
pub struct BucketReader<'a> {
    session: &'a Session,
    family: &'a FamilyDef,
    day: Day,
    ledger: (PreparedStatement, String),
    index: Option<(PreparedStatement, String)>,
}

async fn prepare_scan(
    session: &Session,
    text: String,
    consistency: ConsistencyLevel,
) -> Result<(PreparedStatement, String), ReadError> {
    let mut statement = session
        .prepare(text.clone())
        .await
        .map_err(|e| store_error(&text, e))?;
    statement.set_is_idempotent(true);
    statement.set_consistency(session::consistency(consistency));
    statement.set_page_size(5_000);
    Ok((statement, text))
}

impl<'a> BucketReader<'a> {
    /// Prepares the scans (the key index's only when `key_index.enabled`).
    pub async fn new(
        session: &'a Session,
        config: &Config,
        family: &'a FamilyDef,
        day: Day,
    ) -> Result<BucketReader<'a>, ReadError> {
        let keyspace = [("keyspace", config.exact_keyspace())];
        let ledger = prepare_scan(
            session,
            cql_text::statement(EXACT, "select_ledger_bucket", &keyspace),
            config.exact.consistency,
        )
        .await?;
        let index = if config.key_index.enabled {
            let table = keyindex::index_table(config).to_string();
            let text = cql_text::statement(KEY_INDEX, "select_keys", &[("table", &table)]);
            Some(prepare_scan(session, text, ConsistencyLevel::One).await?)
        } else {
            None
        };
        Ok(BucketReader {
            session,
            family,
            day,
            ledger,
            index,
        })
    }

    /// Whether the key index is read.
    pub fn reads_index(&self) -> bool {
        self.index.is_some()
    }

    /// One ledger bucket, paged: its keys' sums and row counts. `rows_read` hears every
    /// row as it is read (for progress).
    pub async fn ledger_bucket(
        &self,
        bucket: i16,
        rows_read: &AtomicU64,
    ) -> Result<LedgerSums, ReadError> {
        let (statement, text) = &self.ledger;
        let mut pager = self
            .session
            .execute_iter(
                statement.clone(),
                (
                    self.family.name.as_str(),
                    CqlDate(self.day.cql_date()),
                    bucket,
                ),
            )
            .await
            .map_err(|e| store_error(text, e))?
            .rows_stream::<(String, i16, BTreeMap<String, i64>)>()
            .map_err(|e| store_error(text, e))?;
        let mut sums = LedgerSums::new();
        while let Some(row) = pager.next().await {
            let (key, _minute, deltas) = row.map_err(|e| store_error(text, e))?;
            let entry = sums.entry(key).or_default();
            column_sums(self.family, &deltas, &mut entry.sums);
            column_sums(self.family, &positive(&deltas), &mut entry.rises);
            entry.rows += 1;
            rows_read.fetch_add(1, Ordering::Relaxed);
        }
        Ok(sums)
    }

    /// One key-index bucket's keys (JSON texts); none when the index is off.
    pub async fn index_bucket(&self, bucket: i16) -> Result<Vec<String>, ReadError> {
        let Some((statement, text)) = &self.index else {
            return Ok(Vec::new());
        };
        let mut pager = self
            .session
            .execute_iter(
                statement.clone(),
                (
                    self.family.name.as_str(),
                    CqlDate(self.day.cql_date()),
                    bucket,
                ),
            )
            .await
            .map_err(|e| store_error(text, e))?
            .rows_stream::<(String,)>()
            .map_err(|e| store_error(text, e))?;
        let mut keys = Vec::new();
        while let Some(row) = pager.next().await {
            keys.push(row.map_err(|e| store_error(text, e))?.0);
        }
        Ok(keys)
    }
}

/// The outcome rows of `family`'s `day`, folded per key and granularity, with the days'
/// owed marks and the time of its latest repair.
pub async fn read_outcomes(
    session: &Session,
    config: &Config,
    family: &FamilyDef,
    day: Day,
) -> Result<DayRecords, ReadError> {
    let mut records = DayRecords::default();
    let outcomes = &mut records.keys;
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
        let (
            request_id,
            row,
            outcome,
            granularity,
            key,
            _minute,
            _shard,
            deltas,
            _,
            recorded,
            resolution,
        ) = row.map_err(|e| store_error(&text, e))?;
        if let Some(owner) = request_id.strip_prefix(owed::REQUEST_PREFIX) {
            // A state directory's mark of the whole day, not a request.
            if outcome == owed::OWED {
                records.owed_by.push(owner.to_owned());
            }
            continue;
        }
        if outcome.starts_with("repair_")
            && let Some(at) = recorded
        {
            records.last_repair_ms = records.last_repair_ms.max(Some(at.0));
        }
        let granularity = match granularity.as_str() {
            "day" => Granularity::Day,
            _ => Granularity::Minute,
        };
        let deltas = deltas.unwrap_or_default();
        let entry = outcomes.entry((key.clone(), granularity)).or_default();
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
        let entry = outcomes.entry(place).or_default();
        entry.unknowns = requests
            .into_iter()
            .map(|(request_id, deltas)| Unknown { request_id, deltas })
            .collect();
    }
    Ok(records)
}

/// The reads of one key's counters: its minute partition and its day partition, every
/// column, prepared once per run.
pub struct CounterQueries {
    minute: PartitionQuery,
    day: PartitionQuery,
    width: usize,
}

impl CounterQueries {
    /// Prepares both reads of `family` at `consistency`.
    pub async fn new(
        reader: &Reader,
        family: &FamilyDef,
        consistency: ConsistencyLevel,
    ) -> Result<CounterQueries, ReadError> {
        let columns: Vec<usize> = (0..family.columns.len()).collect();
        Ok(CounterQueries {
            minute: reader
                .partition_query(family, Granularity::Minute, &columns, consistency)
                .await?,
            day: reader
                .partition_query(family, Granularity::Day, &columns, consistency)
                .await?,
            width: columns.len(),
        })
    }
}

/// The counters of one key on `day`: the minute rows summed over the day, and the day
/// row; per column.
pub async fn counters(
    reader: &Reader,
    queries: &CounterQueries,
    values: &[String],
    day: Day,
) -> Result<[Sums; 2], ReadError> {
    let (minute, day_rows) = futures_util::future::try_join(
        reader.read_query(&queries.minute, values, None, day),
        reader.read_query(&queries.day, values, None, day),
    )
    .await?;
    let width = queries.width;
    let mut sums = [vec![0_i128; width], vec![0_i128; width]];
    for row in minute.sums.values() {
        for (s, v) in sums[0].iter_mut().zip(row) {
            *s += i128::from(*v);
        }
    }
    if let Some(row) = day_rows.sums.get(&i64::from(day.0)) {
        for (s, v) in sums[1].iter_mut().zip(row) {
            *s += i128::from(*v);
        }
    }
    Ok(sums)
}
