//! `countersink reconcile`: the exact families' counters against their delta ledger, per
//! key, granularity and day, with every unit of drift explained or reported.
//!
//! For one family-day: the ledger's sum per key (every bucket read), the counters (minute
//! rows summed over the day, and the day row; every shard), the outcomes table's rows
//! (known not applied; unknown requests, each all-or-nothing), then a [`verdict`] per key
//! and granularity. Keys come from the ledger, the outcomes table and the key index (when
//! it is on), so an outside writer to a key countersink never wrote is not seen.
//!
//! | module | job |
//! |---|---|
//! | [`verdict`] | the pure decision: status, drift, which unknown requests applied |
//! | [`gather`] | the reads: ledger buckets, outcomes, key index, counters |
//! | [`repair`] | `--repair`: one recorded corrective increment per drifting counter row of a closed day |
//! | [`closed`] | `--close` (the closed-day table) and the exact value of a key (`get --exact`) |

pub mod closed;
pub mod gather;
pub mod repair;
pub mod verdict;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use scylla::client::session::Session;
use scylla::value::{CqlDate, CqlTimestamp};
use serde::Serialize;

use crate::bucket::Day;
use crate::config::Config;
use crate::cql_text::{self, EXACT};
use crate::family::FamilyDef;
use crate::ops::read::{ReadError, Reader};
use crate::sink::cql::session;
use crate::vocabulary::Granularity;

use self::verdict::{Status, Verdict};

/// What to reconcile and how.
#[derive(Clone, Debug)]
pub struct Options {
    /// The UTC day.
    pub day: Day,
    /// Only keys whose values match these `(key column, value)` pairs (generic family:
    /// `name`, or a tag `k` matched against the canonical tags).
    pub tags: Vec<(String, String)>,
    /// Unexplained drift accepted per key, as a fraction of its exact total.
    pub threshold: f64,
    /// Now, in Unix seconds (the day is open until its last writes can have settled).
    pub now_unix_secs: i64,
    /// Keys read concurrently.
    pub concurrency: usize,
}

/// One key and granularity in the report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct KeyReport {
    /// The key values.
    pub key: Vec<String>,
    /// `minute` (the minute rows summed over the day) or `day` (the day row).
    pub granularity: &'static str,
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
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Keys seen.
    pub keys: usize,
    /// Ledger rows read.
    pub ledger_rows: u64,
    /// Key-granularities per status.
    pub statuses: BTreeMap<&'static str, usize>,
    /// Sum of the ledger over keys and columns (per granularity it is the same).
    pub exact_total: i128,
    /// Sums of the counters: minute rows, day rows.
    pub counter_total: BTreeMap<&'static str, i128>,
    /// |drift| of keys whose drift is explained (explained, resolved, ambiguous).
    pub drift_explained: i128,
    /// |drift| of unexplained keys.
    pub drift_unexplained: i128,
    /// Unknown requests whose outcome is now known (in resolved keys).
    pub unknowns_resolved: usize,
    /// Keys whose unexplained drift exceeds the threshold.
    pub over_threshold: usize,
}

/// The result of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The family.
    pub family: String,
    /// The day, `YYYY-MM-DD`.
    pub day: String,
    /// Whether the day is closed (else every key is `open`).
    pub closed: bool,
    /// Every key and granularity (the caller filters for display).
    pub keys: Vec<KeyReport>,
    /// Totals.
    pub summary: Summary,
    /// The outcome rows of each unknown request (request id → row numbers), for
    /// [`write_resolutions`].
    #[serde(skip)]
    pub request_rows: BTreeMap<String, Vec<i16>>,
    /// Ledger rows per key (JSON text), for [`closed::close_day`].
    #[serde(skip)]
    pub ledger_rows_per_key: BTreeMap<String, u64>,
}

impl Report {
    /// Whether the run passes: no key's unexplained drift exceeds the threshold.
    pub fn passes(&self) -> bool {
        self.summary.over_threshold == 0
    }
}

/// How long after its end a day may still receive writes: the accepted-timestamp window,
/// the re-queue age, and two flush intervals.
pub fn settle_time(config: &Config) -> Duration {
    config.limits.timestamp_max_past + config.flush.requeue_max_age + config.flush.interval * 2
}

/// Reconciles `family`'s day. `progress` hears the ledger rows and keys done.
pub async fn reconcile(
    session: &Arc<Session>,
    config: &Config,
    family: &FamilyDef,
    options: &Options,
    progress: &(dyn Fn(&str, u64) + Sync),
) -> Result<Report, ReadError> {
    let day = options.day;
    let day_end = (i64::from(day.0) + 1) * 86_400;
    let closed = options.now_unix_secs >= day_end + settle_time(config).as_secs() as i64;
    let mut truth = gather::read_truth(session, config, family, day, &|rows| {
        progress("ledger rows", rows)
    })
    .await?;
    let mut keys: BTreeSet<String> = truth.exact.keys().cloned().collect();
    keys.extend(truth.outcomes.keys().map(|(k, _)| k.clone()));
    keys.extend(gather::indexed_keys(session, config, family, day).await?);
    let keys: Vec<String> = keys
        .into_iter()
        .filter(|k| matches_tags(family, k, &options.tags))
        .collect();
    let reader = Arc::new(Reader::new(session.clone()));
    let consistency = config.exact.consistency;
    let mut reads = futures_util::stream::iter(keys.iter().map(|key| {
        let reader = reader.clone();
        async move {
            let sums = gather::counters(&reader, family, key, day, consistency).await;
            (key, sums)
        }
    }))
    .buffer_unordered(options.concurrency.max(1));
    let mut report = Report {
        family: family.name.clone(),
        day: crate::bucket::format_date(day.date()),
        closed,
        ..Report::default()
    };
    let width = family.columns.len();
    let mut done = 0_u64;
    while let Some((key, counters)) = reads.next().await {
        let counters = counters?;
        let exact = truth
            .exact
            .get(key)
            .cloned()
            .unwrap_or_else(|| vec![0; width]);
        for g in Granularity::ALL {
            let outcomes = truth
                .outcomes
                .get(&(key.clone(), g))
                .cloned()
                .unwrap_or_default();
            let v = verdict::verdict(
                &exact,
                &counters[g.index()],
                &outcomes.known_missing,
                &outcomes.unknowns,
                !closed,
            );
            report.keys.push(key_report(
                family,
                key,
                g,
                &exact,
                &counters[g.index()],
                &outcomes,
                &v,
            ));
        }
        done += 1;
        if done.is_multiple_of(1_000) {
            progress("keys", done);
        }
    }
    report
        .keys
        .sort_by(|a, b| (&a.key, a.granularity).cmp(&(&b.key, b.granularity)));
    report.summary = summarize(&report.keys, truth.ledger_rows, options.threshold);
    report.ledger_rows_per_key = std::mem::take(&mut truth.rows_per_key);
    for outcomes in truth.outcomes.into_values() {
        for (request, rows) in outcomes.rows {
            report.request_rows.entry(request).or_default().extend(rows);
        }
    }
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
    key: &str,
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
        key: crate::ops::keyindex::key_values(key).unwrap_or_default(),
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

fn summarize(keys: &[KeyReport], ledger_rows: u64, threshold: f64) -> Summary {
    let mut summary = Summary {
        ledger_rows,
        ..Summary::default()
    };
    let mut distinct = BTreeSet::new();
    for k in keys {
        distinct.insert(&k.key);
        *summary.statuses.entry(k.status.as_str()).or_default() += 1;
        let exact: i128 = k.exact.values().sum();
        let drift: i128 = k.drift.values().map(|d| d.abs()).sum();
        if k.granularity == "minute" {
            summary.exact_total += exact;
        }
        *summary.counter_total.entry(k.granularity).or_default() +=
            k.counter.values().sum::<i128>();
        match k.status {
            Status::Explained | Status::Resolved | Status::Ambiguous => {
                summary.drift_explained += drift
            }
            Status::Unexplained => {
                summary.drift_unexplained += drift;
                if drift as f64 > threshold * exact.abs() as f64 {
                    summary.over_threshold += 1;
                }
            }
            Status::Ok | Status::Open => {}
        }
        if k.status == Status::Resolved {
            summary.unknowns_resolved += k.resolution.len();
        }
    }
    summary.keys = distinct.len();
    summary
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

/// Writes the resolutions of `resolved` keys to the outcomes table (`--resolve`): each
/// row of each unknown request gets `applied` or `not_applied`. Returns the rows written.
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
    for key in report.keys.iter().filter(|k| k.status == Status::Resolved) {
        for (request_id, applied) in &key.resolution {
            let resolution = if *applied { "applied" } else { "not_applied" };
            for row in report.request_rows.get(request_id).into_iter().flatten() {
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
    }
    Ok(written)
}
