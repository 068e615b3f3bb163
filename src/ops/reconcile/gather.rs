//! Reading one family-day for reconcile: the ledger and the key index one bucket at a
//! time (paged), the outcomes table, and the counters of each key (minute rows and day
//! row, every shard summed, through [`Reader`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::StreamExt;
use scylla::client::session::Session;
use scylla::deserialize::value::MapIterator;
use scylla::response::{PagingState, PagingStateResponse};
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

impl LedgerKey {
    /// Adds one ledger row's deltas (column name, delta); columns the family does not
    /// have are left out.
    fn add_row<'a>(&mut self, family: &FamilyDef, deltas: impl Iterator<Item = (&'a str, i64)>) {
        let width = family.columns.len();
        if self.sums.len() < width {
            self.sums.resize(width, 0);
        }
        if self.rises.len() < width {
            self.rises.resize(width, 0);
        }
        for (column, delta) in deltas {
            if let Some(i) = family.columns.iter().position(|c| c == column) {
                self.sums[i] += i128::from(delta);
                if delta > 0 {
                    self.rises[i] += i128::from(delta);
                }
            }
        }
        self.rows += 1;
    }

    /// Adds another fold of the same key's rows.
    fn merge(&mut self, other: LedgerKey) {
        for (mine, theirs) in [(&mut self.sums, other.sums), (&mut self.rises, other.rises)] {
            if mine.len() < theirs.len() {
                mine.resize(theirs.len(), 0);
            }
            for (m, t) in mine.iter_mut().zip(theirs) {
                *m += t;
            }
        }
        self.rows += other.rows;
    }
}

/// The ledger's sums of the keys of one bucket: key (JSON text) → its rows summed.
pub type LedgerSums = HashMap<String, LedgerKey>;

/// Rows per page of a bucket scan: a ledger row is about 100 bytes, so a page is about a
/// megabyte; each page is one round trip, and a store that resumes a page by skipping
/// the rows before it (cqlsim) pays less the fewer pages there are.
pub const SCAN_PAGE_ROWS: i32 = 10_000;

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

/// The bucket scans of one family-day: the ledger's buckets and the key index's, with
/// their statements prepared once.
pub struct BucketReader<'a> {
    session: &'a Session,
    family: &'a FamilyDef,
    day: Day,
    ledger: (PreparedStatement, String),
    index: Option<(PreparedStatement, String)>,
    page_rows: i32,
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
    statement.set_page_size(SCAN_PAGE_ROWS);
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
            page_rows: SCAN_PAGE_ROWS,
        })
    }

    /// The same scans with `rows` rows per page (at least 1) instead of
    /// [`SCAN_PAGE_ROWS`]: small pages put one key's rows on several pages.
    pub fn with_page_rows(mut self, rows: i32) -> BucketReader<'a> {
        self.page_rows = rows.max(1);
        self
    }

    /// The rows of one bucket, page after page: `page` gets each page's result, and
    /// returns the rows it took (for `rows_read`).
    async fn scan(
        &self,
        (statement, text): &(PreparedStatement, String),
        bucket: i16,
        mut page: impl FnMut(scylla::response::query_result::QueryRowsResult) -> Result<u64, ReadError>,
    ) -> Result<(), ReadError> {
        let mut statement = statement.clone();
        statement.set_page_size(self.page_rows);
        let values = (
            self.family.name.as_str(),
            CqlDate(self.day.cql_date()),
            bucket,
        );
        let mut paging = PagingState::start();
        loop {
            let (result, next) = self
                .session
                .execute_single_page(&statement, values, paging)
                .await
                .map_err(|e| store_error(text, e))?;
            page(
                result
                    .into_rows_result()
                    .map_err(|e| store_error(text, e))?,
            )?;
            match next {
                PagingStateResponse::HasMorePages { state } => paging = state,
                PagingStateResponse::NoMorePages => return Ok(()),
            }
        }
    }

    /// Whether the key index is read.
    pub fn reads_index(&self) -> bool {
        self.index.is_some()
    }

    /// One ledger bucket, paged: its keys' sums and row counts. `rows_read` hears every
    /// page's rows as they are read (for progress). A partition keeps a key's rows one
    /// after the other (the key is its first clustering column), so they are summed as
    /// they come, read in place from the page, and the key's text is copied once.
    pub async fn ledger_bucket(
        &self,
        bucket: i16,
        rows_read: &AtomicU64,
    ) -> Result<LedgerSums, ReadError> {
        let text = &self.ledger.1;
        let mut sums = LedgerSums::new();
        // The key whose rows are being summed (it may go on over the next page).
        let mut current: Option<(String, LedgerKey)> = None;
        self.scan(&self.ledger, bucket, |page| {
            let mut rows = 0;
            for row in page
                .rows::<(&str, MapIterator<'_, '_, &str, i64>)>()
                .map_err(|e| store_error(text, e))?
            {
                let (key, deltas) = row.map_err(|e| store_error(text, e))?;
                let summing = match &mut current {
                    Some((summed, sum)) if summed == key => sum,
                    _ => {
                        if let Some((done, sum)) = current.take() {
                            fold(&mut sums, done, sum);
                        }
                        &mut current.insert((key.to_owned(), LedgerKey::default())).1
                    }
                };
                let mut unreadable = None;
                summing.add_row(
                    self.family,
                    deltas.map_while(|cell| cell.map_err(|e| unreadable = Some(e)).ok()),
                );
                if let Some(e) = unreadable {
                    return Err(store_error(text, e));
                }
                rows += 1;
            }
            rows_read.fetch_add(rows, Ordering::Relaxed);
            Ok(rows)
        })
        .await?;
        if let Some((done, sum)) = current {
            fold(&mut sums, done, sum);
        }
        Ok(sums)
    }

    /// One key-index bucket's keys (JSON texts); none when the index is off.
    pub async fn index_bucket(&self, bucket: i16) -> Result<Vec<String>, ReadError> {
        let Some(index) = &self.index else {
            return Ok(Vec::new());
        };
        let text = &index.1;
        let mut keys = Vec::new();
        self.scan(index, bucket, |page| {
            let before = keys.len();
            for row in page.rows::<(&str,)>().map_err(|e| store_error(text, e))? {
                keys.push(row.map_err(|e| store_error(text, e))?.0.to_owned());
            }
            Ok((keys.len() - before) as u64)
        })
        .await?;
        Ok(keys)
    }
}

/// One key's ledger rows of a family-day read alone (`select_ledger_key`), prepared once
/// per run: on an open day, the second look at a key whose counter came out above the
/// ceiling of its scanned ledger (see [`super::reconcile`]).
pub struct KeyLedgerReader<'a> {
    session: &'a Session,
    family: &'a FamilyDef,
    day: Day,
    buckets: u16,
    statement: (PreparedStatement, String),
}

impl<'a> KeyLedgerReader<'a> {
    /// Prepares the read.
    pub async fn new(
        session: &'a Session,
        config: &Config,
        family: &'a FamilyDef,
        day: Day,
    ) -> Result<KeyLedgerReader<'a>, ReadError> {
        let keyspace = [("keyspace", config.exact_keyspace())];
        let statement = prepare_scan(
            session,
            cql_text::statement(EXACT, "select_ledger_key", &keyspace),
            config.exact.consistency,
        )
        .await?;
        Ok(KeyLedgerReader {
            session,
            family,
            day,
            buckets: config.exact.buckets,
            statement,
        })
    }

    /// The rows of `key` (JSON text), summed, as they are now.
    pub async fn read(&self, key: &str) -> Result<LedgerKey, ReadError> {
        let (statement, text) = &self.statement;
        let bucket = crate::family::key_bucket(key, self.buckets);
        let mut pager = self
            .session
            .execute_iter(
                statement.clone(),
                (
                    self.family.name.as_str(),
                    CqlDate(self.day.cql_date()),
                    bucket,
                    key,
                ),
            )
            .await
            .map_err(|e| store_error(text, e))?
            .rows_stream::<(i16, BTreeMap<String, i64>)>()
            .map_err(|e| store_error(text, e))?;
        let mut sum = LedgerKey::default();
        while let Some(row) = pager.next().await {
            let (_, deltas) = row.map_err(|e| store_error(text, e))?;
            sum.add_row(self.family, deltas.iter().map(|(c, d)| (c.as_str(), *d)));
        }
        Ok(sum)
    }
}

/// Adds a key's summed rows to a bucket's sums (merged, should its rows ever not follow
/// one another).
fn fold(sums: &mut LedgerSums, key: String, sum: LedgerKey) {
    match sums.entry(key) {
        std::collections::hash_map::Entry::Occupied(mut entry) => entry.get_mut().merge(sum),
        std::collections::hash_map::Entry::Vacant(entry) => {
            entry.insert(sum);
        }
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
        let unknown_item = fold_outcome(
            family,
            &outcome,
            resolution.as_deref(),
            &deltas,
            &mut entry.known_missing,
        );
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

/// How one outcome row (`outcome`, its `resolution` by `--resolve`, its `deltas`) moves
/// its key's expected counter away from the ledger: what it adds to `known_missing`, and
/// whether it is a row of an unknown request still to search.
fn fold_outcome(
    family: &FamilyDef,
    outcome: &str,
    resolution: Option<&str>,
    deltas: &BTreeMap<String, i64>,
    known_missing: &mut Sums,
) -> bool {
    match (outcome, resolution) {
        // Part of the ledger, never applied.
        ("rejected" | "dropped", _) | ("unknown", Some("not_applied")) => {
            column_sums(family, deltas, known_missing);
            false
        }
        // Part of the ledger, applied.
        ("unknown", Some("applied")) => false,
        ("unknown", _) => true,
        // A repair is not in the ledger: applied (or resolved applied), it is counter
        // beyond the ledger; rejected (or resolved not applied), nothing; unknown, it is
        // counted as applied and searched like any unknown request.
        ("repair_applied", _) | ("repair_unknown", Some("applied")) => {
            column_sums(family, &negated(deltas), known_missing);
            false
        }
        ("repair_unknown", Some("not_applied")) => false,
        ("repair_unknown", _) => {
            column_sums(family, &negated(deltas), known_missing);
            true
        }
        _ => false,
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::Families;

    /// `--resolve` settles an unknown repair like any unknown request: resolved applied,
    /// it counts as an applied repair; resolved not applied, as a rejected one; neither is
    /// searched again.
    #[test]
    fn a_resolved_unknown_repair_is_known_not_searched_again() {
        let families = Families::from_config(&Config::default()).unwrap();
        let generic = families.by_name("generic").unwrap();
        let deltas = BTreeMap::from([("value".to_owned(), 7)]);
        let fold = |outcome: &str, resolution: Option<&str>| {
            let mut known_missing = Sums::new();
            let unknown = fold_outcome(generic, outcome, resolution, &deltas, &mut known_missing);
            known_missing.resize(1, 0);
            (unknown, known_missing)
        };
        assert_eq!(fold("repair_unknown", None), (true, vec![-7]));
        assert_eq!(fold("repair_unknown", Some("applied")), (false, vec![-7]));
        assert_eq!(fold("repair_applied", None), (false, vec![-7]));
        assert_eq!(
            fold("repair_unknown", Some("not_applied")),
            (false, vec![0])
        );
        assert_eq!(fold("repair_rejected", None), (false, vec![0]));
        // The counter writes' own rows, as before.
        assert_eq!(fold("unknown", None), (true, vec![0]));
        assert_eq!(fold("unknown", Some("applied")), (false, vec![0]));
        assert_eq!(fold("unknown", Some("not_applied")), (false, vec![7]));
        assert_eq!(fold("rejected", None), (false, vec![7]));
    }

    #[test]
    fn a_keys_rows_sum_with_their_rises_and_two_folds_of_it_merge_to_one() {
        let families = Families::from_config(&Config::default()).unwrap();
        let generic = families.by_name("generic").unwrap();
        let rows: [&[(&str, i64)]; 3] = [
            &[("value", 5)],
            &[("value", -2), ("unknown column", 9)],
            &[("value", 4)],
        ];
        let mut whole = LedgerKey::default();
        for row in rows {
            whole.add_row(generic, row.iter().copied());
        }
        assert_eq!(
            whole,
            LedgerKey {
                sums: vec![7],
                rises: vec![9],
                rows: 3
            }
        );
        // The same rows split where a page might end, folded apart, then merged.
        let (mut first, mut rest) = (LedgerKey::default(), LedgerKey::default());
        first.add_row(generic, rows[0].iter().copied());
        for row in &rows[1..] {
            rest.add_row(generic, row.iter().copied());
        }
        let mut sums = LedgerSums::new();
        fold(&mut sums, "k".to_owned(), first);
        fold(&mut sums, "k".to_owned(), rest);
        assert_eq!(sums.get("k"), Some(&whole));
        // A row with no column of the family still counts, and sizes the sums.
        let mut other = LedgerKey::default();
        other.add_row(generic, [("nothing", 1)].into_iter());
        assert_eq!((other.sums, other.rises, other.rows), (vec![0], vec![0], 1));
    }
}
