//! The exact families' outcomes in the store: every row of a counter write that did not
//! simply apply (unknown, rejected, in flight when a process was killed) is also written
//! to the outcomes table (`cql/exact.cql`), so that `countersink reconcile` explains a
//! fleet's drift without the writers' local files (a pod's state directory may be gone).
//!
//! The local logs stay the first record (written before this queue hears of them); the
//! table gets the same rows with idempotent INSERTs, re-sent until applied, in the
//! background of the flushes: they never hold a counter write. Bounded: beyond
//! [`MAX_QUEUED`] rows, or beyond its bytes ([`OutcomeQueue::bounded`]), the oldest are
//! dropped from the queue (counted, and still in the local log). A kill loses the queue, not the rows: each start offers again every
//! record logged past `outcomes.mark` (see [`crate::state::outcomes_mark`]), and rows of
//! requests in flight at a kill are queued by the next start's recovery.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::backoff::Backoff;
use crate::bucket::{self, Day};
use crate::family::Families;
use crate::series;
use crate::sink::bounded::Cutoff;
use crate::sink::{Outcome, OutcomeRow, Sink, WriteError};
use crate::stage::{
    Action, CrashPoints, Decision, Facts, Policy, Sender, StageCx, WriteKind, run_stage,
};
use crate::state::StateDir;
use crate::state::{RecordOutcome, WriteRecord};

use super::record_conversion;
use super::shutdown::Deadline;

/// Most outcome rows waiting to be written.
pub const MAX_QUEUED: usize = 100_000;

/// Most outcome rows per request.
const ROWS_PER_REQUEST: usize = 64;

/// Outcome rows waiting for the store.
#[derive(Debug, Default)]
pub struct OutcomeQueue {
    rows: VecDeque<OutcomeRow>,
    /// The rows' estimated bytes (see `row_bytes`).
    bytes: usize,
    /// The most estimated bytes queued (`None`: no bound in bytes).
    max_bytes: Option<usize>,
    failures: u32,
    not_before: Option<Instant>,
    /// Rows dropped from a full queue.
    pub dropped: u64,
    /// The most rows queued, when a test sets one below [`MAX_QUEUED`].
    limit: Option<usize>,
    /// Keeps one row per primary key, the latest (see [`OutcomeQueue::marks`]).
    latest_only: bool,
}

impl OutcomeQueue {
    /// Queues the rows of exact families among `records`.
    pub fn offer<'a>(
        &mut self,
        families: &Families,
        records: impl IntoIterator<Item = &'a WriteRecord>,
    ) {
        for record in records {
            let exact = families.by_name(&record.family).is_some_and(|f| f.exact);
            if !exact {
                continue;
            }
            let Some(row) = outcome_row(families, record) else {
                continue;
            };
            self.enqueue(row);
        }
    }

    /// The queue of the exact families' outcome rows: at most [`MAX_QUEUED`] rows and
    /// `max_bytes` estimated bytes (see `row_bytes`), the oldest dropped beyond either.
    ///
    /// A row holds its key's JSON, its deltas, its error text and request id: some 0.5 to
    /// 3 KB, so [`MAX_QUEUED`] rows alone could hold 50 to 300 MB, none of it in the
    /// memory budget. The flusher passes `limits.flush_chunk_bytes()`: the share of
    /// `limits.max_pending_bytes` (a quarter) kept for writes on their way to the store,
    /// which these rows are; a user who lowers the memory limit lowers this bound with
    /// it. At the default (64 MiB) the bytes bind before the count once rows average
    /// past some 670 bytes.
    pub fn bounded(max_bytes: usize) -> OutcomeQueue {
        OutcomeQueue {
            max_bytes: Some(max_bytes),
            ..OutcomeQueue::default()
        }
    }

    /// Queues `row` after those waiting, then drops the oldest while the queue is past
    /// its rows or its bytes.
    fn enqueue(&mut self, row: OutcomeRow) {
        self.bytes += row_bytes(&row);
        self.rows.push_back(row);
        let max_rows = self.limit.unwrap_or(MAX_QUEUED);
        let max_bytes = self.max_bytes.unwrap_or(usize::MAX);
        while self.rows.len() > max_rows || self.bytes > max_bytes {
            let Some(oldest) = self.rows.pop_front() else {
                break;
            };
            self.bytes -= row_bytes(&oldest);
            self.dropped += 1;
        }
    }

    /// The queue of the owed marks (see [`super::owed`]): it never drops the latest mark
    /// of a family-day (each day's must reach the table), and keeps only that one. A mark's
    /// primary key in the outcomes table is (family, day, request id `owed/<owner>`, row
    /// 0), the same for every mark of the day, and the queue sends in order: a later
    /// mark overwrites an earlier one in the table, so the earlier need not be sent.
    /// Without that, a day spilled and replayed over and over while the table fails
    /// queued an `owed` and a `replayed` mark per cycle, for ever; now the queue holds at
    /// most one per owed family-day.
    pub fn marks() -> OutcomeQueue {
        OutcomeQueue {
            limit: Some(usize::MAX),
            latest_only: true,
            ..OutcomeQueue::default()
        }
    }

    /// Queues rows as they are, after those waiting (a queue of marks first forgets the
    /// rows these overwrite: see [`OutcomeQueue::marks`]).
    pub fn push_rows(&mut self, rows: impl IntoIterator<Item = OutcomeRow>) {
        let mut rows: Vec<OutcomeRow> = rows.into_iter().collect();
        if self.latest_only {
            // The last row of each key, of the queue and `rows` together.
            let mut later = HashSet::new();
            rows.reverse();
            rows.retain(|row| later.insert(primary_key(row)));
            rows.reverse();
            self.rows.retain(|row| !later.contains(&primary_key(row)));
            self.bytes = self.rows.iter().map(row_bytes).sum();
        }
        for row in rows {
            self.enqueue(row);
        }
    }

    /// Queues at most `rows` rows (a test's small stand-in for [`MAX_QUEUED`]).
    #[cfg(test)]
    pub fn limit(&mut self, rows: usize) {
        self.limit = Some(rows);
    }

    /// The rows waiting, oldest first.
    #[cfg(test)]
    pub fn rows(&self) -> impl Iterator<Item = &OutcomeRow> {
        self.rows.iter()
    }

    /// The estimated bytes of the rows waiting.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Rows waiting.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Sends the waiting rows (unless a back-off says not yet, or `force`), a request per
    /// family-day partition and at most `ROWS_PER_REQUEST` rows, one at a time, until one
    /// fails or the deadline passes; what did not apply stays queued, in its order.
    pub async fn send<S: Sink>(
        &mut self,
        sink: &S,
        backoff: Backoff,
        deadline: &mut Deadline,
        force: bool,
    ) {
        if self.rows.is_empty() || (!force && self.not_before.is_some_and(|t| Instant::now() < t)) {
            return;
        }
        let mut chunks = Vec::new();
        while let Some(first) = self.rows.front() {
            let (family, day) = (first.family.clone(), first.day);
            let count = self
                .rows
                .iter()
                .take(ROWS_PER_REQUEST)
                .take_while(|r| r.family == family && r.day == day)
                .count();
            chunks.push(self.rows.drain(..count).collect::<Vec<_>>());
        }
        // Every row is in a chunk now; those that do not apply come back (`finish`).
        self.bytes = 0;
        let writes = OutcomeWrites {
            sink,
            failed: AtomicBool::new(false),
        };
        let mut stage = OutcomeStage {
            queue: self,
            kept: Vec::new(),
            backoff,
            error: None,
        };
        run_stage(
            &mut stage,
            &writes,
            chunks,
            StageCx {
                // One at a time, and nothing more after a failure (the back-off).
                cutoff: &mut StopAtFailure {
                    deadline,
                    failed: &writes.failed,
                },
                max_in_flight: 1,
                // The outcomes table's column has no age rule and keeps what fails.
                facts: Facts::fresh(force, 0, u32::MAX),
                first_request: 0,
            },
        )
        .await;
    }
}

/// How outcome rows are sent: one idempotent batch per request; a failure stops the
/// sending (see [`StopAtFailure`]).
struct OutcomeWrites<'a, S> {
    sink: &'a S,
    failed: AtomicBool,
}

impl<S: Sink> Sender<Vec<OutcomeRow>> for OutcomeWrites<'_, S> {
    async fn send(&self, rows: &Vec<OutcomeRow>) -> Outcome {
        let outcome = self.sink.write_outcomes(rows).await;
        if outcome != Outcome::Applied {
            self.failed.store(true, Ordering::Relaxed);
        }
        outcome
    }
}

/// The shutdown deadline, or the first failure: the table is not answering, and the
/// rows wait for the back-off.
struct StopAtFailure<'a> {
    deadline: &'a mut Deadline,
    failed: &'a AtomicBool,
}

impl Cutoff for StopAtFailure<'_> {
    fn passed(&mut self) -> bool {
        self.failed.load(Ordering::Relaxed) || self.deadline.passed()
    }

    async fn wait(&mut self) {
        self.deadline.wait().await;
    }
}

/// The outcome rows' kind of write: the queue's chunks of one flush. Nothing is
/// journaled: the local logs hold every row, and a start offers the ones past
/// `outcomes.mark` again.
struct OutcomeStage<'a> {
    queue: &'a mut OutcomeQueue,
    /// Chunks that did not apply, in their order.
    kept: Vec<Vec<OutcomeRow>>,
    backoff: Backoff,
    /// The first failure's error.
    error: Option<WriteError>,
}

impl WriteKind for OutcomeStage<'_> {
    type Request = Vec<OutcomeRow>;

    const POLICY: Policy = Policy::OUTCOMES;

    const CRASH_POINTS: CrashPoints = CrashPoints::NONE;

    fn journal(&mut self) -> Option<&mut StateDir> {
        None
    }

    fn begin(&mut self, _: &[Vec<OutcomeRow>], _: u32) -> std::io::Result<()> {
        Ok(())
    }

    fn apply(&mut self, _: u32, rows: Vec<OutcomeRow>, decision: Decision) {
        if decision.action == Action::Applied {
            self.queue.failures = 0;
            self.queue.not_before = None;
            return;
        }
        if decision.counted.is_some() && self.error.is_none() {
            self.error = decision.action.error().cloned();
        }
        self.kept.push(rows);
    }

    /// What did not apply goes back to the front of the queue, in its order; a failure
    /// backs the queue off.
    fn finish(&mut self) {
        let queue = &mut *self.queue;
        for rows in std::mem::take(&mut self.kept).into_iter().rev() {
            for row in rows.into_iter().rev() {
                queue.bytes += row_bytes(&row);
                queue.rows.push_front(row);
            }
        }
        if let Some(error) = self.error.take() {
            queue.failures = queue.failures.saturating_add(1);
            queue.not_before = Some(Instant::now() + self.backoff.delay(queue.failures));
            tracing::warn!(kind = error.kind, error = %error.text, rows = queue.rows.len(), "Could not write to the outcomes table; the rows are sent again later (they are in the local logs).");
        }
    }

    fn end(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What a queued row holds in memory, estimated: the row, its strings, and its deltas
/// (a map entry each: the column name, the value, some 48 bytes of tree node).
fn row_bytes(row: &OutcomeRow) -> usize {
    const DELTA_ENTRY: usize = size_of::<String>() + size_of::<i64>() + 48;
    size_of::<OutcomeRow>()
        + row.family.len()
        + row.request_id.len()
        + row.outcome.len()
        + row.granularity.len()
        + row.key.len()
        + row
            .deltas
            .keys()
            .map(|column| DELTA_ENTRY + column.len())
            .sum::<usize>()
        + row.error_kind.as_ref().map_or(0, String::len)
        + row.error.as_ref().map_or(0, String::len)
}

/// A row's primary key in the outcomes table (`cql/exact.cql`): its partition (family,
/// day) and its clustering (request id, row).
fn primary_key(row: &OutcomeRow) -> (String, Day, String, u16) {
    (row.family.clone(), row.day, row.request_id.clone(), row.row)
}

/// The outcomes-table row of a record, or None when its key no longer maps to the family.
fn outcome_row(families: &Families, record: &WriteRecord) -> Option<OutcomeRow> {
    let (key, _) = record_conversion::from_record(record, families).ok()?;
    let day = bucket::parse_date(&record.day).and_then(Day::from_date)?;
    let outcome = match record.outcome {
        RecordOutcome::Unknown => "unknown",
        RecordOutcome::Rejected => "rejected",
        RecordOutcome::Spilled => "dropped",
    };
    let recorded_ms =
        time::OffsetDateTime::parse(&record.time, &time::format_description::well_known::Rfc3339)
            .map_or(0, |t| (t.unix_timestamp_nanos() / 1_000_000) as i64);
    Some(OutcomeRow {
        family: record.family.clone(),
        day,
        request_id: record.request_id.clone(),
        row: record.row,
        outcome: outcome.to_owned(),
        granularity: record.granularity.clone(),
        key: series::key_json(key.series()),
        minute: record.minute,
        shard: record.shard,
        deltas: record.deltas.clone(),
        error_kind: record.error.as_ref().map(|e| e.kind.clone()),
        error: record.error.as_ref().map(|e| e.text.clone()),
        recorded_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, FamilyConfig};

    fn families() -> Families {
        let mut config = Config::default();
        let mut views = FamilyConfig::seed_views();
        views.exact = true;
        config.families.push(views);
        Families::from_config(&config).expect("families")
    }

    /// A rejected record of the views family, row `row` of its request, whose error text
    /// is `error_bytes` long.
    fn record(row: u16, error_bytes: usize) -> WriteRecord {
        serde_json::from_value(serde_json::json!({
            "time": "2026-11-30T23:59:00Z", "writer": "w", "incarnation": 1, "flush_seq": 1,
            "request_id": "w/1/1/0", "row": row, "outcome": "rejected", "family": "views",
            "table": "metrics.views_by_minute", "granularity": "minute",
            "key": {"page_id": format!("p{row}")}, "day": "2026-11-30", "minute": 3,
            "deltas": {"views": 1},
            "error": {"kind": "invalid", "text": "x".repeat(error_bytes)},
        }))
        .expect("record")
    }

    /// Rows of some 3 KB each (a long error text), far fewer than [`MAX_QUEUED`], whose
    /// bytes pass the queue's bound: the oldest are dropped and counted, the newest stay,
    /// and the queue's bytes stay within the bound.
    #[test]
    fn rows_past_the_byte_bound_drop_the_oldest_while_under_the_row_bound() {
        const ROWS: u16 = 100;
        const MAX_BYTES: usize = 64 << 10;
        let families = families();
        let records: Vec<WriteRecord> = (0..ROWS).map(|row| record(row, 3_000)).collect();
        let sizes: Vec<usize> = records
            .iter()
            .map(|r| row_bytes(&outcome_row(&families, r).unwrap()))
            .collect();
        assert!(sizes.iter().all(|b| *b > 3_000), "{sizes:?}");
        // The newest rows whose bytes fit.
        let mut kept = 0;
        let mut bytes = 0;
        for size in sizes.iter().rev() {
            if bytes + size > MAX_BYTES {
                break;
            }
            bytes += size;
            kept += 1;
        }
        assert!(kept > 0 && kept < usize::from(ROWS) && usize::from(ROWS) < MAX_QUEUED);
        let mut queue = OutcomeQueue::bounded(MAX_BYTES);
        queue.offer(&families, &records);
        assert_eq!(queue.len(), kept, "as many rows as the bytes hold");
        assert_eq!(
            queue.dropped,
            u64::from(ROWS) - kept as u64,
            "the rest counted"
        );
        assert_eq!(queue.bytes(), bytes, "within {MAX_BYTES}");
        let first_kept = queue.rows().next().unwrap().row;
        assert_eq!(
            usize::from(first_kept),
            usize::from(ROWS) - kept,
            "the oldest went"
        );
    }

    /// Rows sent and not applied (the table is down) come back with their bytes; rows
    /// applied take theirs away.
    #[tokio::test]
    async fn rows_sent_keep_the_queue_bytes_exact() {
        let families = families();
        let records: Vec<WriteRecord> = (0..10).map(|row| record(row, 100)).collect();
        let mut queue = OutcomeQueue::bounded(1 << 20);
        queue.offer(&families, &records);
        let bytes = queue.bytes();
        assert!(bytes > 0);
        let sink = crate::sink::MemorySink::new();
        sink.set_outcomes_available(false);
        let backoff = Backoff::new(std::time::Duration::ZERO, std::time::Duration::ZERO);
        let (_handle, signal) = super::super::shutdown::shutdown_channel();
        let mut deadline = Deadline::new(signal, std::time::Duration::from_secs(60));
        queue.send(&sink, backoff, &mut deadline, true).await;
        assert_eq!((queue.len(), queue.bytes()), (10, bytes), "not applied");
        sink.set_outcomes_available(true);
        queue.send(&sink, backoff, &mut deadline, true).await;
        assert_eq!((queue.len(), queue.bytes()), (0, 0), "applied");
    }
}
