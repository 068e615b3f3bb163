//! `reconcile --repair`: on a closed day, one corrective increment per drifting counter
//! row (`counter += exact - counter`), so that the counters equal the ledger.
//!
//! A corrective increment is a counter write like any other: non-idempotent, sent once.
//! Its outcome row (`repair_unknown`) is written to the outcomes table **before** it is
//! sent, and settled (`repair_applied`, `repair_rejected`) after; an unknown repair stays
//! `repair_unknown`, is reported, and is never sent again — the next reconcile counts it
//! as an unknown request of its key (see [`super::gather`]). Minute rows are compared one
//! by one (the key's ledger rows against its minute partition), the day row as a whole.
//! A sharded family's correction goes to shard 0: the counter is the sum of its shards,
//! so any one shard carries the difference (see [`apply`]).
//!
//! A correction is computed from counters read at ALL, and only once an earlier
//! repair's writes of the day can no longer be on their way ([`settle_wait`]): a counter
//! write whose outcome is unknown has applied at its leader replica or never will once
//! its timeout is long past, and a read at ALL cannot miss what the leader applied. A
//! correction computed from a read that missed it would be counted on top of it.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use scylla::client::session::Session;
use scylla::value::CqlDate;
use serde::Serialize;

use crate::aggregate::Columns;
use crate::bucket::{Day, MINUTES_PER_DAY};
use crate::config::{Config, ConsistencyLevel};
use crate::cql_text::{self, EXACT};
use crate::family::{FamilyDef, key_bucket};
use crate::ops::read::{ReadError, Reader};
use crate::series;
use crate::sink::cql::{CqlSink, session};
use crate::sink::{Outcome, OutcomeRow, PartitionWrite, RowDelta, Sink};
use crate::vocabulary::Granularity;

use super::Report;
use super::verdict::Status;

/// One corrective increment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Correction {
    /// The key values.
    pub key: Vec<String>,
    /// `minute` or `day`.
    pub granularity: &'static str,
    /// The minute of the day, for a minute row (as read: [`MINUTE_OUT_OF_RANGE`] when it
    /// is not one).
    pub minute: Option<i64>,
    /// Column → delta to add.
    pub deltas: BTreeMap<String, i64>,
    /// The outcome: `planned` (dry run), `applied`, `rejected`, `unknown`, or
    /// [`BEYOND_I64`] (not sent: no counter write can carry it).
    pub outcome: String,
}

/// The outcome of a correction that no counter write can carry: a column's
/// `exact - counter` is beyond i64. Never sent; the run fails.
pub const BEYOND_I64: &str = "beyond_i64";

/// The outcome of a correction of a minute row whose minute is not a minute of the day
/// (outside 0..1440: written by an outside writer, in the ledger or the counters). Never
/// sent: its write would land on another day's row, and the run fails.
pub const MINUTE_OUT_OF_RANGE: &str = "minute_out_of_range";

/// `minute` as a minute of the day, if it is one (0 to 1439).
pub fn minute_of_day(minute: i64) -> Option<i16> {
    (0..i64::from(MINUTES_PER_DAY))
        .contains(&minute)
        .then_some(minute as i16)
}

/// The deltas (non-zero, per column name) that take `stored` to `exact`. `Err` when one
/// of them is beyond i64, with the deltas that fit: a correction is sent whole or not at
/// all, never with a column silently left out.
pub fn correction_deltas(
    columns: &[String],
    exact: &[i128],
    stored: &[i64],
) -> Result<BTreeMap<String, i64>, BTreeMap<String, i64>> {
    let mut fits = true;
    let mut deltas = BTreeMap::new();
    for (i, column) in columns.iter().enumerate() {
        let want = exact.get(i).copied().unwrap_or(0);
        let have = i128::from(stored.get(i).copied().unwrap_or(0));
        match i64::try_from(want - have) {
            Ok(0) => {}
            Ok(delta) => {
                deltas.insert(column.clone(), delta);
            }
            Err(_) => fits = false,
        }
    }
    if fits { Ok(deltas) } else { Err(deltas) }
}

/// How long to wait before planning a repair of `report`'s day: until `settle` has
/// passed since the latest corrective write recorded for it (`None`: no wait).
pub fn settle_wait(report: &Report, settle: Duration, now: SystemTime) -> Option<Duration> {
    let last = UNIX_EPOCH + Duration::from_millis(u64::try_from(report.last_repair_ms?).ok()?);
    (last + settle)
        .duration_since(now)
        .ok()
        .filter(|wait| !wait.is_zero())
}

/// The corrections of every drifting key of `report` (a closed day), by comparing the
/// key's ledger rows with its counter rows read at ALL (see the module doc).
pub async fn plan(
    session: &Session,
    reader: &Reader,
    config: &Config,
    family: &FamilyDef,
    report: &Report,
    day: Day,
) -> Result<Vec<Correction>, ReadError> {
    let width = family.columns.len();
    let all: Vec<usize> = (0..width).collect();
    let mut corrections = Vec::new();
    for key in &report.keys {
        if matches!(key.status, Status::Ok | Status::Open) || key.drift.values().all(|d| *d == 0) {
            continue;
        }
        // ALL: the corrections must not miss a write one replica has applied.
        let consistency = ConsistencyLevel::All;
        let granularity = if key.granularity == "day" {
            Granularity::Day
        } else {
            Granularity::Minute
        };
        let counter = reader
            .partition(family, granularity, &key.key, day, &all, consistency)
            .await?;
        let correction = |minute: Option<i64>, exact: &[i128], stored: &[i64]| {
            let (deltas, mut outcome) = match correction_deltas(&family.columns, exact, stored) {
                Ok(deltas) => (deltas, "planned"),
                Err(fitting) => (fitting, BEYOND_I64),
            };
            if minute.is_some_and(|m| minute_of_day(m).is_none()) {
                outcome = MINUTE_OUT_OF_RANGE;
            }
            (!deltas.is_empty() || outcome == BEYOND_I64).then(|| Correction {
                key: key.key.clone(),
                granularity: key.granularity,
                minute,
                deltas,
                outcome: outcome.into(),
            })
        };
        match granularity {
            Granularity::Day => {
                let exact: Vec<i128> = family.columns.iter().map(|c| key.exact[c]).collect();
                let stored = counter.get(&i64::from(day.0)).cloned().unwrap_or_default();
                corrections.extend(correction(None, &exact, &stored));
            }
            Granularity::Minute => {
                let exact = ledger_minutes(session, config, family, &key.key, day).await?;
                let minutes: std::collections::BTreeSet<i64> = exact
                    .keys()
                    .map(|m| i64::from(*m))
                    .chain(counter.keys().copied())
                    .collect();
                for minute in minutes {
                    let want = i16::try_from(minute)
                        .ok()
                        .and_then(|m| exact.get(&m).cloned())
                        .unwrap_or_else(|| vec![0; width]);
                    let have = counter.get(&minute).cloned().unwrap_or_default();
                    corrections.extend(correction(Some(minute), &want, &have));
                }
            }
            // Exact families have a minute and a day table only (the configuration
            // refuses others): no report names another granularity.
            Granularity::Hour | Granularity::Total => {}
        }
    }
    Ok(corrections)
}

/// One key's ledger sums per minute of `day`.
async fn ledger_minutes(
    session: &Session,
    config: &Config,
    family: &FamilyDef,
    keys: &[String],
    day: Day,
) -> Result<BTreeMap<i16, Vec<i128>>, ReadError> {
    let text = cql_text::statement(
        EXACT,
        "select_ledger_key",
        &[("keyspace", config.exact_keyspace())],
    );
    let store_error = |e: &dyn std::fmt::Display| ReadError::Store {
        statement: text.clone(),
        error: e.to_string(),
    };
    let mut statement = session
        .prepare(text.clone())
        .await
        .map_err(|e| store_error(&e))?;
    statement.set_consistency(session::consistency(config.exact.consistency));
    let key = serde_json::to_string(keys).unwrap_or_default();
    let bucket = key_bucket(&key, config.exact.buckets);
    let mut pager = session
        .execute_iter(
            statement,
            (
                family.name.as_str(),
                CqlDate(day.cql_date()),
                bucket,
                key.as_str(),
            ),
        )
        .await
        .map_err(|e| store_error(&e))?
        .rows_stream::<(i16, BTreeMap<String, i64>)>()
        .map_err(|e| store_error(&e))?;
    let mut minutes: BTreeMap<i16, Vec<i128>> = BTreeMap::new();
    while let Some(row) = pager.next().await {
        let (minute, deltas) = row.map_err(|e| store_error(&e))?;
        let sums = minutes
            .entry(minute)
            .or_insert_with(|| vec![0; family.columns.len()]);
        for (column, delta) in deltas {
            if let Some(i) = family.columns.iter().position(|c| *c == column) {
                sums[i] += i128::from(delta);
            }
        }
    }
    Ok(minutes)
}

/// Now, in Unix milliseconds.
fn wall_clock_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Sends the corrections: each recorded as `repair_unknown` first, sent once, then
/// settled. Fills in each correction's outcome. `run_ms` (the run's start, Unix
/// milliseconds) names the requests (`repair/<run_ms>/<n>`); each row's `recorded` is the
/// time of its own write: when it was recorded, then when its write answered (also when
/// the answer left its outcome unknown), so that [`settle_wait`] counts from the latest
/// write a run sent, however long the run took to get to it. Refused, with nothing
/// written, once the day's ledger rows may expire ([`super::ledger_expiring`]).
pub async fn apply(
    session: &Session,
    sink: &CqlSink,
    config: &Config,
    family: &FamilyDef,
    day: Day,
    corrections: &mut [Correction],
    run_ms: i64,
) -> Result<(), ReadError> {
    // Checked here too, not only by the command before its run: a run (or a caller of
    // this library) can reach its corrections after the day's ledger began to expire,
    // and a correction then takes real counts off the counters.
    if let Some(why) = super::ledger_expiring(config, day, wall_clock_ms() / 1000) {
        return Err(ReadError::Refused(format!("repair refused: {why}")));
    }
    let settle_text = cql_text::statement(
        EXACT,
        "settle_repair",
        &[("keyspace", config.exact_keyspace())],
    );
    let store_error = |text: &str, e: &dyn std::fmt::Display| ReadError::Store {
        statement: text.to_owned(),
        error: e.to_string(),
    };
    let mut settle = session
        .prepare(settle_text.clone())
        .await
        .map_err(|e| store_error(&settle_text, &e))?;
    settle.set_is_idempotent(true);
    settle.set_consistency(session::consistency(config.exact.consistency));
    for (n, correction) in corrections.iter_mut().enumerate() {
        if correction.outcome == BEYOND_I64 || correction.outcome == MINUTE_OUT_OF_RANGE {
            continue;
        }
        // A minute row's bucket is its day's first minute plus its minute: never one of
        // another day.
        let minute = match correction.minute.map(minute_of_day) {
            None => None,
            Some(Some(minute)) => Some(minute),
            Some(None) => {
                correction.outcome = MINUTE_OUT_OF_RANGE.into();
                continue;
            }
        };
        let request_id = format!("repair/{run_ms}/{n}");
        let record = OutcomeRow {
            family: family.name.clone(),
            day,
            request_id: request_id.clone(),
            row: 0,
            outcome: "repair_unknown".into(),
            granularity: correction.granularity.into(),
            key: serde_json::to_string(&correction.key).unwrap_or_default(),
            minute,
            shard: None,
            deltas: correction.deltas.clone(),
            error_kind: None,
            error: None,
            recorded_ms: wall_clock_ms(),
        };
        // The record first: a repair never goes out unrecorded.
        if sink.write_outcomes(std::slice::from_ref(&record)).await != Outcome::Applied {
            return Err(ReadError::Store {
                statement: "outcomes".into(),
                error: format!("could not record repair {request_id}; nothing sent"),
            });
        }
        let (granularity, bucket) = match minute {
            Some(minute) => (
                Granularity::Minute,
                day.0 * MINUTES_PER_DAY + u32::from(minute.unsigned_abs()),
            ),
            None => (Granularity::Day, day.0),
        };
        let values: Vec<i64> = family
            .columns
            .iter()
            .map(|c| correction.deltas.get(c).copied().unwrap_or(0))
            .collect();
        let mut columns = Columns::zeroed(values.len());
        for (i, v) in values.iter().enumerate() {
            columns.checked_add_at(i, *v);
        }
        let write = PartitionWrite {
            family: family.id,
            table: granularity,
            series: series::encode(correction.key.iter().map(String::as_str)).into_boxed_slice(),
            // Shard 0 of a sharded family: a counter's value is the sum of its shards
            // (every reader sums them, in the partition key or the clustering key), so
            // `+delta` on any one shard moves the sum by exactly `delta`. Shards only
            // spread a hot key's write load; one corrective write per row needs no
            // spreading, and shard 0 exists for every key.
            shard: family.sharding.as_ref().map(|_| 0),
            epoch: None,
            rows: vec![RowDelta {
                bucket,
                columns,
                requeued_since: 0,
            }],
        };
        let (outcome, error) = match sink.write(&write).await {
            Outcome::Applied => ("repair_applied", None),
            Outcome::NotAppliedTransient(e) | Outcome::NotAppliedPermanent(e) => {
                ("repair_rejected", Some(e))
            }
            Outcome::Unknown(e) => {
                tracing::warn!(
                    request_id,
                    kind = e.kind,
                    "A repair's outcome is unknown: recorded as repair_unknown, not sent again."
                );
                ("repair_unknown", Some(e))
            }
        };
        correction.outcome = match outcome {
            "repair_applied" => "applied",
            "repair_rejected" => "rejected",
            _ => "unknown",
        }
        .into();
        session
            .execute_unpaged(
                &settle,
                (
                    outcome,
                    error.as_ref().map(|e| e.kind),
                    error.as_ref().map(|e| &*e.text),
                    scylla::value::CqlTimestamp(wall_clock_ms()),
                    family.name.as_str(),
                    CqlDate(day.cql_date()),
                    request_id.as_str(),
                    0_i16,
                ),
            )
            .await
            .map_err(|e| store_error(&settle_text, &e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repair_waits_the_settle_time_after_the_latest_recorded_repair() {
        let settle = Duration::from_secs(60);
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut report = Report::default();
        assert_eq!(settle_wait(&report, settle, now), None, "no repair yet");
        report.last_repair_ms = Some(1_000_000_000 - 45_000);
        assert_eq!(
            settle_wait(&report, settle, now),
            Some(Duration::from_secs(15))
        );
        report.last_repair_ms = Some(1_000_000_000 - 60_000);
        assert_eq!(settle_wait(&report, settle, now), None, "settled");
    }

    #[test]
    fn only_a_minute_of_the_day_is_one() {
        assert_eq!(minute_of_day(0), Some(0));
        assert_eq!(minute_of_day(1_439), Some(1_439));
        for outside in [-1, 1_440, 1_500, 70_000, i64::from(i16::MIN), i64::MAX] {
            assert_eq!(minute_of_day(outside), None, "{outside}");
        }
    }

    #[test]
    fn a_correction_beyond_i64_is_refused_whole_not_left_out() {
        let columns = ["views".to_owned(), "bytes".to_owned()];
        let fits = correction_deltas(&columns, &[10, 4], &[3, 4]).unwrap();
        assert_eq!(fits, BTreeMap::from([("views".to_owned(), 7)]));
        let beyond = i128::from(i64::MAX) + 10;
        let refused = correction_deltas(&columns, &[10, beyond], &[3, 4]).unwrap_err();
        assert_eq!(
            refused,
            BTreeMap::from([("views".to_owned(), 7)]),
            "the column that fits is shown, the other is missing: the correction is refused"
        );
        assert!(correction_deltas(&columns, &[i128::from(i64::MIN), 0], &[1, 0]).is_err());
    }
}
