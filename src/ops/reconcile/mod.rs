//! `countersink reconcile`: the exact families' counters against their delta ledger, per
//! key, granularity and day, with every unit of drift explained or reported.
//!
//! For one family-day: the outcomes table's rows (known not applied; unknown requests,
//! each all-or-nothing), then, one slice of keys at a time ([`slices`]), the ledger's sum
//! per key and the counters (minute rows summed over the day, and the day row; every
//! shard), and a [`verdict`] per key and granularity, counted in the summary as it comes.
//! Keys come from the ledger, the outcomes table and the key index (when it is on), so an
//! outside writer to a key countersink never wrote is not seen. Memory does not grow with
//! the day's keys: only the keys that are not `ok` are kept, up to a bound.
//!
//! | module | job |
//! |---|---|
//! | [`verdict`] | the pure decision: status, drift, which unknown requests applied |
//! | [`gather`] | the reads: ledger buckets, outcomes, key index, counters |
//! | [`repair`] | `--repair`: one recorded corrective increment per drifting counter row of a closed day |
//! | [`closed`] | `--close` (the closed-day table) and the exact value of a key (`get --exact`) |
//! | [`slice`](mod@slice) | `--slice I/N`: one part of the keys, and the merge of the parts' reports |

pub mod closed;
pub mod gather;
pub mod repair;
pub mod slice;
pub mod verdict;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use scylla::client::session::Session;
use scylla::value::{CqlDate, CqlTimestamp};
use serde::{Deserialize, Serialize};

use crate::bucket::Day;
use crate::config::Config;
use crate::cql_text::{self, EXACT};
use crate::family::{FamilyDef, key_bucket};
use crate::ops::read::{ReadError, Reader};
use crate::sink::cql::session;
use crate::vocabulary::Granularity;

use self::verdict::{Status, Sums, Verdict};

/// What to reconcile and how.
#[derive(Clone, Debug)]
pub struct Options {
    /// The UTC day.
    pub day: Day,
    /// Only keys whose values match these `(key column, value)` pairs (generic family:
    /// `name`, or a tag `k` matched against the canonical tags).
    pub tags: Vec<(String, String)>,
    /// Unexplained drift accepted per key, as a fraction of its exact total, column by
    /// column.
    pub threshold: f64,
    /// Now, in Unix seconds (the day is open until its last writes can have settled).
    pub now_unix_secs: i64,
    /// Keys read concurrently.
    pub concurrency: usize,
    /// The most keys that are not `ok` kept in the report (the summary counts them all).
    pub max_listed: usize,
    /// Only this part of the keys, `(I, N)`: the day's slices `s` with `s % N == I` (see
    /// [`slice`](mod@slice); `N` divides [`slices`]). `None`: every key.
    pub slice: Option<slice::Part>,
}

/// The default of [`Options::max_listed`]: a bound on the report's memory (about half a
/// kilobyte per listed key), far above what an operator reads or a repair run fixes.
pub const MAX_LISTED: usize = 100_000;

/// One key and granularity in the report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyReport {
    /// The key values.
    pub key: Vec<String>,
    /// `minute` (the minute rows summed over the day) or `day` (the day row).
    #[serde(deserialize_with = "slice::label")]
    pub granularity: slice::Label,
    /// The ledger's sum, per column.
    pub exact: BTreeMap<String, i128>,
    /// The counter, per column.
    pub counter: BTreeMap<String, i128>,
    /// Rows known not applied, per column.
    pub known_missing: BTreeMap<String, i128>,
    /// Unresolved unknown requests.
    pub unknown_requests: usize,
    /// `counter - exact`, per column.
    pub drift: BTreeMap<String, i128>,
    /// The status.
    pub status: Status,
    /// For `resolved`: request id → whether it applied.
    pub resolution: BTreeMap<String, bool>,
}

/// Totals of a reconcile run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Keys seen.
    pub keys: usize,
    /// Ledger rows read.
    pub ledger_rows: u64,
    /// Key-granularities per status.
    #[serde(deserialize_with = "slice::labelled")]
    pub statuses: BTreeMap<slice::Label, usize>,
    /// Sum of the ledger over keys and columns (per granularity it is the same).
    pub exact_total: i128,
    /// Sums of the counters: minute rows, day rows.
    #[serde(deserialize_with = "slice::labelled")]
    pub counter_total: BTreeMap<slice::Label, i128>,
    /// |drift| of keys whose drift is explained (explained, resolved, ambiguous).
    pub drift_explained: i128,
    /// |drift| of unexplained keys.
    pub drift_unexplained: i128,
    /// Unknown requests whose outcome is now known (in resolved keys).
    pub unknowns_resolved: usize,
    /// Keys whose unexplained drift exceeds the threshold.
    pub over_threshold: usize,
    /// Key-granularities that are not `ok` beyond [`Options::max_listed`]: counted here,
    /// not listed in [`Report::keys`].
    pub not_listed: usize,
    /// Keys (of the ledger, the outcomes table or the key index) that are not a JSON array
    /// of texts, so name no counter: left out of the verdicts, counted here.
    #[serde(default)]
    pub unreadable_keys: usize,
}

impl Summary {
    /// Counts one key and granularity's verdict (`exact`, `counter` and `drift` per
    /// column; `resolved`: the unknown requests its verdict settles). An unexplained key
    /// is over the threshold when one of its columns drifts by more than `threshold`
    /// times that column's exact total: a large column does not hide a small one's drift.
    fn count(
        &mut self,
        g: Granularity,
        exact: &[i128],
        counter: &[i128],
        v: &Verdict,
        threshold: f64,
    ) {
        *self.statuses.entry(v.status.as_str()).or_default() += 1;
        let over = v.drift.iter().enumerate().any(|(i, drift)| {
            let exact = exact.get(i).copied().unwrap_or(0);
            drift.abs() as f64 > threshold * exact.abs() as f64
        });
        let exact: i128 = exact.iter().sum();
        let drift: i128 = v.drift.iter().map(|d| d.abs()).sum();
        if g == Granularity::Minute {
            self.exact_total += exact;
        }
        *self.counter_total.entry(g.as_str()).or_default() += counter.iter().sum::<i128>();
        match v.status {
            Status::Explained | Status::Resolved | Status::Ambiguous => {
                self.drift_explained += drift
            }
            Status::Unexplained => {
                self.drift_unexplained += drift;
                if over {
                    self.over_threshold += 1;
                }
            }
            Status::Ok | Status::Open => {}
        }
        if v.status == Status::Resolved {
            self.unknowns_resolved += v.applied.as_ref().map_or(0, Vec::len);
        }
    }
}

/// The result of a run (of one slice, with `--slice`: see [`slice`](mod@slice)).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The family.
    pub family: String,
    /// The day, `YYYY-MM-DD`.
    pub day: String,
    /// Whether the day is closed (else every key is `open`, but one whose counter is
    /// above anything countersink can have written: `unexplained`).
    pub closed: bool,
    /// Why the day is still open (`None` when closed).
    pub open_because: Option<String>,
    /// The state directories (writer id and directory id) that still owe rows of this day
    /// (see [`crate::flush::owed`]): the day stays open until they replayed them.
    pub owed_by: Vec<String>,
    /// When the latest corrective write of `--repair` on this day was recorded (Unix
    /// milliseconds): a repair waits a settle time after it (see [`repair::settle_wait`]).
    #[serde(skip)]
    pub last_repair_ms: Option<i64>,
    /// The keys and granularities that are not `ok` (at most [`Options::max_listed`],
    /// sorted by key): an `ok` key is only counted, so that a run over millions of keys
    /// holds the summary and the exceptions, never every key.
    pub keys: Vec<KeyReport>,
    /// Totals.
    pub summary: Summary,
    /// The slice this report covers (`--slice`); absent for a whole day's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slice: Option<slice::Slice>,
    /// Every unknown request of every `resolved` key, listed or not (request id → whether
    /// it applied, and its outcome rows' numbers), for [`write_resolutions`]. Bounded by
    /// the day's outcome rows, which the run holds anyway.
    #[serde(skip)]
    pub resolved_requests: BTreeMap<String, (bool, Vec<i16>)>,
}

impl Report {
    /// Whether the run passes: no key's unexplained drift exceeds the threshold.
    pub fn passes(&self) -> bool {
        self.summary.over_threshold == 0
    }
}

/// How far a run is, for a progress line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Keys whose verdict is done.
    pub keys_done: u64,
    /// Keys found so far (in the scanned slices).
    pub keys_found: u64,
    /// Slices of the day scanned (see [`slices`]), and how many there are.
    pub slices_scanned: u32,
    /// All slices.
    pub slices: u32,
    /// Ledger rows read.
    pub ledger_rows: u64,
}

impl Progress {
    /// The keys of the whole day, estimated from the slices scanned so far (a key's
    /// slice is a hash of it, so slices hold about as many keys each).
    pub fn keys_estimated(&self) -> u64 {
        if self.slices_scanned == 0 {
            return 0;
        }
        if self.slices_scanned >= self.slices {
            return self.keys_found;
        }
        self.keys_found * u64::from(self.slices) / u64::from(self.slices_scanned)
    }

    /// The progress line, `elapsed` into the run: keys done of the (estimated) total,
    /// rate, ledger rows, time left.
    pub fn line(&self, elapsed: Duration) -> String {
        let total = self.keys_estimated().max(self.keys_done);
        let rate = self.keys_done as f64 / elapsed.as_secs_f64().max(1e-3);
        let approx = if self.slices_scanned < self.slices {
            "~"
        } else {
            ""
        };
        let mut text = format!("keys {}/{approx}{total}", self.keys_done);
        if let Some(percent) = (self.keys_done * 100).checked_div(total) {
            text.push_str(&format!(" ({percent}%)"));
        }
        text.push_str(&format!(
            " {rate:.0} keys/s, ledger rows {}",
            self.ledger_rows
        ));
        if rate > 0.0 && total > self.keys_done {
            let left = (total - self.keys_done) as f64 / rate;
            text.push_str(&format!(", ~{left:.0}s left"));
        }
        text
    }
}

/// How long after its end a day may still receive writes: the accepted-timestamp window,
/// the re-queue age, two flush intervals, and the request timeout (a write sent by the
/// last flush may be on its way that long).
pub fn settle_time(config: &Config) -> Duration {
    config.limits.timestamp_max_past
        + config.flush.requeue_max_age
        + config.flush.interval * 2
        + config.store.request_timeout
}

/// Why `family`'s `day` is still open at `now_unix_secs`, or `None` when it is closed.
///
/// Open while a writer may still send rows for it: the accepted-timestamp window, the
/// re-queue age, two flush intervals and the request timeout since its end
/// ([`settle_time`]); and, whatever
/// the time, while the local state directory (`state.dir`, when it exists) holds rows
/// of that family-day in a spill segment not yet replayed or in a flush the intent
/// journal has not finished: those rows are in the ledger and will reach the counters
/// when replayed. Other writers' state directories are seen through their `owed` marks
/// in the outcomes table ([`reconcile`] reads them).
pub fn open_because(
    config: &Config,
    family: &FamilyDef,
    day: Day,
    now_unix_secs: i64,
) -> Result<Option<String>, ReadError> {
    let day_end = (i64::from(day.0) + 1) * 86_400;
    let settles_at = day_end + settle_time(config).as_secs() as i64;
    if now_unix_secs < settles_at {
        return Ok(Some(format!(
            "writes may still arrive until {} (limits.timestamp_max_past + flush.requeue_max_age + 2 x flush.interval + store.request_timeout after the day)",
            time::OffsetDateTime::from_unix_timestamp(settles_at)
                .ok()
                .and_then(|t| t
                    .format(&time::format_description::well_known::Rfc3339)
                    .ok())
                .unwrap_or_else(|| settles_at.to_string())
        )));
    }
    let dir = &config.state.dir;
    if !dir.is_dir() {
        return Ok(None);
    }
    let date = crate::bucket::format_date(day.date());
    let mut waiting = 0_u64;
    crate::ops::outcomes::scan(dir, |source, record| {
        if source != crate::ops::outcomes::Source::Log
            && record.family == family.name
            && record.day == date
        {
            waiting += 1;
        }
    })
    .map_err(|e| ReadError::Usage(e.to_string()))?;
    Ok((waiting > 0).then(|| {
        format!(
            "{waiting} rows of this day wait in {} (spill not replayed, or a flush the journal has not finished): they reach the counters when that writer replays them",
            dir.display()
        )
    }))
}

/// How long before its ledger rows may start expiring a day is no longer repaired or
/// closed: a day.
pub const EXPIRY_MARGIN: Duration = Duration::from_secs(86_400);

/// When the first ledger row of `day` may expire (Unix seconds): a row expires
/// `exact.ledger_ttl` after it was written, and the earliest rows of a day are written
/// at its start, or up to `limits.timestamp_max_future` before it (a client clock ahead).
pub fn ledger_expires_at(config: &Config, day: Day) -> i64 {
    i64::from(day.0) * 86_400 - config.limits.timestamp_max_future.as_secs() as i64
        + config.exact.ledger_ttl.as_secs() as i64
}

/// Why `--repair` and `--close` must leave `day` alone at `now_unix_secs`, or `None`:
/// its ledger rows have started expiring, or may within [`EXPIRY_MARGIN`]. The ledger
/// then sums to less than what was written: a repair would take real counts off the
/// counters, a close would keep a total short of them.
pub fn ledger_expiring(config: &Config, day: Day, now_unix_secs: i64) -> Option<String> {
    let expires = ledger_expires_at(config, day);
    let refused_from = expires - EXPIRY_MARGIN.as_secs() as i64;
    (now_unix_secs >= refused_from).then(|| {
        format!(
            "the ledger rows of {} may expire from {} (the day's start - limits.timestamp_max_future + exact.ledger_ttl {}s), and a day is left alone from a day before that: the ledger no longer holds every count of the day",
            crate::bucket::format_date(day.date()),
            rfc3339(expires),
            config.exact.ledger_ttl.as_secs()
        )
    })
}

/// `unix_secs` as an RFC 3339 time (or the number, should it be out of range).
fn rfc3339(unix_secs: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(unix_secs)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| unix_secs.to_string())
}

/// Why a day is open while state directories of other writers still owe rows of it (an
/// `owed` mark in the outcomes table), or `None` when none does.
fn owed_because(owed_by: &[String]) -> Option<String> {
    let (first, rest) = owed_by.split_first()?;
    let others = if rest.is_empty() {
        String::new()
    } else {
        format!(" and {} more", rest.len())
    };
    Some(format!(
        "{} writer state directories ({first}{others}) still hold rows of this day in their spill or buffer (an `owed` mark in the outcomes table): they reach the counters when those writers replay them; repair and close wait for them",
        owed_by.len()
    ))
}

/// How many slices a day is read in: a slice is the keys whose hash is `s` modulo this,
/// that is some ledger buckets and some key-index buckets read whole. With the key index
/// on, it is the greatest common divisor of `exact.buckets` and `key_index.buckets`
/// (16 with the defaults, 64 and 16); with a single slice (coprime bucket counts) the
/// whole day is one slice and memory grows with its keys.
pub fn slices(config: &Config) -> u16 {
    let ledger = config.exact.buckets.max(1);
    if !config.key_index.enabled {
        return ledger;
    }
    let (mut a, mut b) = (ledger, config.key_index.buckets.max(1));
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// One key of a slice, before its counters are read.
struct KeyWork {
    key: String,
    exact: Sums,
    /// Its ledger's positive deltas summed (see [`gather::LedgerKey::rises`]).
    rises: Sums,
}

/// Reads one slice: its ledger buckets and key-index buckets, and the keys of the
/// outcomes table that fall in it; the keys that pass the tag filter, each with its
/// ledger sums. `(slice, slices)`: slice number `slice` of `slices`.
async fn read_slice(
    buckets: &gather::BucketReader<'_>,
    config: &Config,
    family: &FamilyDef,
    outcomes: &gather::DayOutcomes,
    tags: &[(String, String)],
    (slice, slices): (u16, u16),
    ledger_rows: &AtomicU64,
) -> Result<Vec<KeyWork>, ReadError> {
    let in_slice = |n: u16| (0..n).filter(move |b| b % slices == slice);
    let mut keys: HashMap<String, gather::LedgerKey> = HashMap::new();
    let ledger =
        in_slice(config.exact.buckets).map(|b| buckets.ledger_bucket(b as i16, ledger_rows));
    for sums in futures_util::future::try_join_all(ledger).await? {
        // A key lives in one bucket: no merging across buckets.
        keys.extend(sums);
    }
    if buckets.reads_index() {
        let index = in_slice(config.key_index.buckets).map(|b| buckets.index_bucket(b as i16));
        for indexed in futures_util::future::try_join_all(index).await? {
            for key in indexed {
                keys.entry(key).or_default();
            }
        }
    }
    for (key, _) in outcomes.keys() {
        if key_bucket(key, slices) as u16 == slice && !keys.contains_key(key) {
            keys.insert(key.clone(), gather::LedgerKey::default());
        }
    }
    let width = family.columns.len();
    Ok(keys
        .into_iter()
        .filter(|(key, _)| matches_tags(family, key, tags))
        .map(|(key, ledger)| {
            let (mut exact, mut rises) = (ledger.sums, ledger.rises);
            exact.resize(width, 0);
            rises.resize(width, 0);
            KeyWork { key, exact, rises }
        })
        .collect())
}

/// Reconciles `family`'s day, streaming: the day is read one slice of keys at a time
/// (see [`slices`]; the next slice is read while the current one's counters are), and
/// each key is counted in the summary as its counters arrive. Memory holds at most three
/// slices of keys, the day's outcome rows, and the keys that are not `ok` (at most
/// [`Options::max_listed`]), whatever the number of keys. `progress` hears how far it is.
pub async fn reconcile(
    session: &Arc<Session>,
    config: &Config,
    family: &FamilyDef,
    options: &Options,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<Report, ReadError> {
    let day = options.day;
    let records = gather::read_outcomes(session, config, family, day).await?;
    let open_because = match open_because(config, family, day, options.now_unix_secs)? {
        Some(why) => Some(why),
        None => owed_because(&records.owed_by),
    };
    let open = open_because.is_some();
    let outcomes = &records.keys;
    let buckets = gather::BucketReader::new(session, config, family, day).await?;
    let reader = Reader::new(session.clone());
    let queries = gather::CounterQueries::new(&reader, family, config.exact.consistency).await?;
    let slices = slices(config);
    let ledger_rows = AtomicU64::new(0);
    let keys_found = AtomicU64::new(0);
    let slices_scanned = AtomicU64::new(0);
    let (buckets, ledger_rows_ref) = (&buckets, &ledger_rows);
    let (keys_found_ref, slices_scanned_ref) = (&keys_found, &slices_scanned);
    // The scan runs beside the counter reads, one slice ahead: polled with them by this
    // task (not only when the reads want more keys), so the reads never wait for it.
    let (slice_tx, slice_rx) = tokio::sync::mpsc::channel::<Vec<KeyWork>>(1);
    let part = options.slice;
    // The day's slices this run reads (all of them, or those of its part).
    let reading = part.map_or(slices, |(_, n)| slices / n);
    let scan = async move {
        for slice in (0..slices).filter(|s| part.is_none_or(|(i, n)| slice::Slice::holds(i, n, *s)))
        {
            let keys = read_slice(
                buckets,
                config,
                family,
                outcomes,
                &options.tags,
                (slice, slices),
                ledger_rows_ref,
            )
            .await?;
            keys_found_ref.fetch_add(keys.len() as u64, Ordering::Relaxed);
            slices_scanned_ref.fetch_add(1, Ordering::Relaxed);
            if slice_tx.send(keys).await.is_err() {
                break;
            }
        }
        Ok::<_, ReadError>(())
    };
    // On an open day a key's ledger was scanned before its counters were read, so a
    // flush between the two (ledger row confirmed, then counter applied) can show a
    // counter above the scanned ledger's ceiling. A key whose counter is above it has its
    // ledger read again, after its counters: every counter write that applied before the
    // counter read had its ledger row confirmed before it, so this read holds it, and the
    // ceiling argument holds (see `verdict::open_ceiling`).
    let second_look = if open {
        Some(gather::KeyLedgerReader::new(session, config, family, day).await?)
    } else {
        None
    };
    let (reader, queries, second_look) = (&reader, &queries, &second_look);
    let width = family.columns.len();
    let verdicts = futures_util::stream::unfold(slice_rx, |mut rx| async move {
        rx.recv().await.map(|keys| (keys, rx))
    })
    .flat_map(futures_util::stream::iter)
    .map(|mut work| async move {
        // A key that is not a JSON array of texts (an outside writer's ledger, outcome or
        // key-index row) names no counter: counted, and the run goes on.
        let Some(values) = crate::ops::keyindex::key_values(&work.key) else {
            return Ok::<_, ReadError>(Err(work.key));
        };
        let counters = gather::counters(reader, queries, &values, day).await?;
        if let Some(ledger) = second_look
            && counters
                .iter()
                .any(|counter| counter.iter().zip(&work.rises).any(|(c, r)| c > r))
        {
            let now = ledger.read(&work.key).await?;
            (work.exact, work.rises) = (now.sums, now.rises);
            work.exact.resize(width, 0);
            work.rises.resize(width, 0);
        }
        Ok(Ok((work, values, counters)))
    })
    .buffer_unordered(options.concurrency.max(1));
    let mut verdicts = std::pin::pin!(verdicts);
    let mut report = Report {
        family: family.name.clone(),
        day: crate::bucket::format_date(day.date()),
        closed: !open,
        open_because,
        owed_by: records.owed_by.clone(),
        last_repair_ms: records.last_repair_ms,
        slice: options.slice.map(|(index, of)| slice::Slice {
            index,
            of,
            threshold: options.threshold,
            tags: options.tags.clone(),
        }),
        ..Report::default()
    };
    let empty = gather::KeyOutcomes::default();
    let judge = async {
        let mut done = 0_u64;
        let mut lookup = (String::new(), Granularity::Minute);
        while let Some(result) = verdicts.next().await {
            let (work, values, counters) = match result? {
                Ok(read) => read,
                Err(key) => {
                    tracing::warn!(key, "A key that is not a JSON array of texts: left out.");
                    report.summary.unreadable_keys += 1;
                    done += 1;
                    continue;
                }
            };
            report.summary.keys += 1;
            lookup.0 = work.key;
            // Exact families have a minute and a day table only.
            for g in Granularity::MINUTE_AND_DAY {
                lookup.1 = g;
                let key_outcomes = outcomes.get(&lookup).unwrap_or(&empty);
                let counter = &counters[g.index()];
                let ceiling =
                    open.then(|| verdict::open_ceiling(&work.rises, &key_outcomes.unknowns));
                let v = verdict::verdict(
                    &work.exact,
                    counter,
                    &key_outcomes.known_missing,
                    &key_outcomes.unknowns,
                    ceiling.as_deref(),
                );
                report
                    .summary
                    .count(g, &work.exact, counter, &v, options.threshold);
                if v.status == Status::Ok {
                    continue;
                }
                if let (Status::Resolved, Some(applied)) = (v.status, &v.applied) {
                    for (unknown, applied) in key_outcomes.unknowns.iter().zip(applied) {
                        let rows = key_outcomes.rows.get(&unknown.request_id);
                        report.resolved_requests.insert(
                            unknown.request_id.clone(),
                            (*applied, rows.cloned().unwrap_or_default()),
                        );
                    }
                }
                if report.keys.len() >= options.max_listed {
                    report.summary.not_listed += 1;
                    continue;
                }
                report.keys.push(key_report(
                    family,
                    values.clone(),
                    g,
                    &work.exact,
                    counter,
                    key_outcomes,
                    &v,
                ));
            }
            done += 1;
            if done.is_multiple_of(1_000) {
                progress(Progress {
                    keys_done: done,
                    keys_found: keys_found.load(Ordering::Relaxed),
                    slices_scanned: slices_scanned.load(Ordering::Relaxed) as u32,
                    slices: u32::from(reading),
                    ledger_rows: ledger_rows.load(Ordering::Relaxed),
                });
            }
        }
        Ok::<_, ReadError>(done)
    };
    let ((), done) = futures_util::future::try_join(scan, judge).await?;
    report.summary.ledger_rows = ledger_rows.load(Ordering::Relaxed);
    // The last line, unless the last key's own line was it.
    if done == 0 || !done.is_multiple_of(1_000) {
        progress(Progress {
            keys_done: done,
            keys_found: keys_found.load(Ordering::Relaxed),
            slices_scanned: u32::from(reading),
            slices: u32::from(reading),
            ledger_rows: report.summary.ledger_rows,
        });
    }
    report
        .keys
        .sort_by(|a, b| (&a.key, a.granularity).cmp(&(&b.key, b.granularity)));
    Ok(report)
}

fn named(family: &FamilyDef, sums: &[i128]) -> BTreeMap<String, i128> {
    family
        .columns
        .iter()
        .zip(sums.iter().copied().chain(std::iter::repeat(0)))
        .map(|(c, v)| (c.clone(), v))
        .collect()
}

fn key_report(
    family: &FamilyDef,
    key: Vec<String>,
    g: Granularity,
    exact: &[i128],
    counter: &[i128],
    outcomes: &gather::KeyOutcomes,
    v: &Verdict,
) -> KeyReport {
    let resolution = match &v.applied {
        Some(applied) => outcomes
            .unknowns
            .iter()
            .zip(applied)
            .map(|(u, a)| (u.request_id.clone(), *a))
            .collect(),
        None => BTreeMap::new(),
    };
    KeyReport {
        key,
        granularity: g.as_str(),
        exact: named(family, exact),
        counter: named(family, counter),
        known_missing: named(family, &outcomes.known_missing),
        unknown_requests: outcomes.unknowns.len(),
        drift: named(family, &v.drift),
        status: v.status,
        resolution,
    }
}

/// Whether a key (JSON text) matches every `(column, value)` filter.
fn matches_tags(family: &FamilyDef, key: &str, tags: &[(String, String)]) -> bool {
    if tags.is_empty() {
        return true;
    }
    let Some(values) = crate::ops::keyindex::key_values(key) else {
        return false;
    };
    tags.iter().all(|(column, value)| {
        if family.is_generic() {
            match column.as_str() {
                "name" => values.first() == Some(value),
                _ => values
                    .get(1)
                    .is_some_and(|tags| tags.split(',').any(|t| t == format!("{column}:{value}"))),
            }
        } else {
            family
                .key_columns
                .iter()
                .position(|c| c == column)
                .is_some_and(|i| values.get(i) == Some(value))
        }
    })
}

/// Writes the resolutions of `resolved` keys, listed or not, to the outcomes table
/// (`--resolve`): each row of each of their unknown requests gets `applied` or
/// `not_applied`. Returns the rows written.
pub async fn write_resolutions(
    session: &Session,
    config: &Config,
    report: &Report,
    day: Day,
    now_ms: i64,
) -> Result<usize, ReadError> {
    let keyspace = [("keyspace", config.exact_keyspace())];
    let text = cql_text::statement(EXACT, "resolve_outcome", &keyspace);
    let mut statement = session
        .prepare(text.clone())
        .await
        .map_err(|e| ReadError::Store {
            statement: text.clone(),
            error: e.to_string(),
        })?;
    statement.set_is_idempotent(true);
    statement.set_consistency(session::consistency(config.exact.consistency));
    let mut written = 0;
    for (request_id, (applied, rows)) in &report.resolved_requests {
        let resolution = if *applied { "applied" } else { "not_applied" };
        for row in rows {
            session
                .execute_unpaged(
                    &statement,
                    (
                        resolution,
                        CqlTimestamp(now_ms),
                        report.family.as_str(),
                        CqlDate(day.cql_date()),
                        request_id.as_str(),
                        *row,
                    ),
                )
                .await
                .map_err(|e| ReadError::Store {
                    statement: text.clone(),
                    error: e.to_string(),
                })?;
            written += 1;
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::Families;
    use crate::state::{SegmentId, Spill, WriteRecord};

    const DAY: Day = Day(20_421);

    fn config(dir: &std::path::Path) -> Config {
        let mut config = Config::default();
        config.generic.exact = true;
        config.state.dir = dir.to_owned();
        config
    }

    fn spilled(family: &str, day: &str) -> WriteRecord {
        serde_json::from_value(serde_json::json!({
            "time": "2025-11-30T23:59:00Z", "writer": "w", "incarnation": 3, "flush_seq": 9,
            "request_id": "w/3/9/0", "row": 0, "outcome": "spilled", "family": family,
            "table": "countersink.counts_by_minute", "granularity": "minute",
            "key": {"name": "a", "tags": ""}, "day": day, "minute": 1439,
            "deltas": {"value": 4}
        }))
        .expect("record")
    }

    #[test]
    fn a_day_is_open_until_late_and_requeued_writes_have_settled() {
        let dir = tempfile::tempdir().unwrap();
        let config = config(dir.path());
        let families = Families::from_config(&config).unwrap();
        let generic = families.by_name("generic").unwrap();
        let end = (i64::from(DAY.0) + 1) * 86_400;
        // The defaults: 1 h late, 10 min re-queued, two flushes of 5 s, a 10 s timeout.
        assert_eq!(
            settle_time(&config),
            Duration::from_secs(3_600 + 600 + 10 + 10)
        );
        let settled = end + settle_time(&config).as_secs() as i64;
        assert!(
            open_because(&config, generic, DAY, end + 1)
                .unwrap()
                .is_some()
        );
        assert!(
            open_because(&config, generic, DAY, settled - 1)
                .unwrap()
                .is_some()
        );
        assert_eq!(open_because(&config, generic, DAY, settled).unwrap(), None);
        // No state directory at all (a job on another host): the time rule only.
        let gone = self::config(&dir.path().join("absent"));
        assert_eq!(open_because(&gone, generic, DAY, settled).unwrap(), None);
    }

    #[test]
    fn a_closed_day_reopens_while_the_local_spill_holds_rows_of_it() {
        let dir = tempfile::tempdir().unwrap();
        let config = config(dir.path());
        let families = Families::from_config(&config).unwrap();
        let generic = families.by_name("generic").unwrap();
        let date = crate::bucket::format_date(DAY.date());
        let late = (i64::from(DAY.0) + 30) * 86_400;
        let mut spill = Spill::open(dir.path(), 1 << 20, None).unwrap();
        // Rows of another day and of another family do not hold this one open.
        let id = |flush_seq| SegmentId::live(3, flush_seq);
        spill
            .write_segment(
                id(1),
                None,
                &[vec![
                    spilled("generic", "2025-11-28"),
                    spilled("views", &date),
                ]],
                &[],
            )
            .unwrap();
        assert_eq!(open_because(&config, generic, DAY, late).unwrap(), None);
        spill
            .write_segment(id(2), None, &[vec![spilled("generic", &date)]], &[])
            .unwrap();
        let why = open_because(&config, generic, DAY, late).unwrap();
        assert!(
            why.as_deref().is_some_and(|w| w.starts_with("1 rows")),
            "{why:?}"
        );
    }

    /// The threshold is per column: 5 of drift in a column whose exact total is 10 is
    /// over 1 %, however large another column is (1 % of both summed, 10.1, hid it).
    #[test]
    fn the_threshold_is_judged_per_column() {
        let unexplained = |drift: Vec<i128>| Verdict {
            status: Status::Unexplained,
            drift,
            applied: None,
        };
        let mut summary = Summary::default();
        let exact = [1_000, 10];
        summary.count(
            Granularity::Minute,
            &exact,
            &[1_000, 15],
            &unexplained(vec![0, 5]),
            0.01,
        );
        assert_eq!(summary.over_threshold, 1, "{summary:?}");
        // Within 1 % of each column (10 of 1 000): not over.
        summary.count(
            Granularity::Day,
            &exact,
            &[1_010, 10],
            &unexplained(vec![10, 0]),
            0.01,
        );
        assert_eq!(summary.over_threshold, 1, "{summary:?}");
        assert_eq!(summary.drift_unexplained, 15);
        // A threshold of 0: any drift in any column.
        summary.count(
            Granularity::Day,
            &exact,
            &[1_000, 11],
            &unexplained(vec![0, 1]),
            0.0,
        );
        assert_eq!(summary.over_threshold, 2);
    }

    #[test]
    fn a_day_whose_ledger_rows_may_expire_within_a_day_is_left_alone() {
        let mut config = Config::default();
        config.exact.ledger_ttl = Duration::from_secs(90 * 86_400);
        config.limits.timestamp_max_future = Duration::from_secs(600);
        let start = i64::from(DAY.0) * 86_400;
        let expires = start - 600 + 90 * 86_400;
        assert_eq!(ledger_expires_at(&config, DAY), expires);
        assert_eq!(ledger_expiring(&config, DAY, start + 2 * 86_400), None);
        assert_eq!(ledger_expiring(&config, DAY, expires - 86_400 - 1), None);
        let why = ledger_expiring(&config, DAY, expires - 86_400).expect("within a day");
        assert!(why.contains("exact.ledger_ttl"), "{why}");
        assert!(ledger_expiring(&config, DAY, expires + 86_400).is_some());
        // The shortest TTL, a day: never repaired nor closed.
        config.exact.ledger_ttl = Duration::from_secs(86_400);
        assert!(ledger_expiring(&config, DAY, start + 86_400).is_some());
    }

    #[test]
    fn the_progress_line_shows_rate_estimate_and_time_left() {
        let p = Progress {
            keys_done: 100_000,
            keys_found: 250_000,
            slices_scanned: 4,
            slices: 16,
            ledger_rows: 300_000,
        };
        assert_eq!(
            p.line(Duration::from_secs(2)),
            "keys 100000/~1000000 (10%) 50000 keys/s, ledger rows 300000, ~18s left"
        );
        let end = Progress {
            keys_done: 1_000,
            keys_found: 1_000,
            slices_scanned: 16,
            slices: 16,
            ledger_rows: 1_000,
        };
        assert_eq!(
            end.line(Duration::from_secs(1)),
            "keys 1000/1000 (100%) 1000 keys/s, ledger rows 1000"
        );
    }

    #[test]
    fn slices_are_the_common_divisor_of_the_bucket_counts() {
        let mut config = Config::default();
        config.key_index.enabled = true;
        assert_eq!(slices(&config), 16, "64 ledger and 16 index buckets");
        config.key_index.buckets = 7;
        assert_eq!(slices(&config), 1);
        config.key_index.enabled = false;
        assert_eq!(slices(&config), 64);
    }

    #[test]
    fn a_key_of_a_slice_is_in_that_slices_ledger_and_index_buckets() {
        let config = Config::default();
        let slices = 16;
        for i in 0..1_000 {
            let key = format!("[\"k{i}\"]");
            let slice = key_bucket(&key, slices) as u16;
            assert_eq!(
                key_bucket(&key, config.exact.buckets) as u16 % slices,
                slice
            );
            assert_eq!(
                key_bucket(&key, config.key_index.buckets) as u16 % slices,
                slice
            );
        }
    }
}
