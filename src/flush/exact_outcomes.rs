//! The exact families' outcomes in the store: every row of a counter write that did not
//! simply apply (unknown, rejected, in flight when a process was killed) is also written
//! to the outcomes table (`cql/exact.cql`), so that `countersink reconcile` explains a
//! fleet's drift without the writers' local files (a pod's state directory may be gone).
//!
//! The local logs stay the first record (written before this queue hears of them); the
//! table gets the same rows with idempotent INSERTs, re-sent until applied, in the
//! background of the flushes: they never hold a counter write. Bounded: beyond
//! [`MAX_QUEUED`] rows the oldest are dropped from the queue (counted, and still in the
//! local log). A kill loses the queue, not the rows: each start offers again every
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
            if self.rows.len() >= self.limit.unwrap_or(MAX_QUEUED) {
                self.rows.pop_front();
                self.dropped += 1;
            }
            self.rows.push_back(row);
        }
    }

    /// The queue of the owed marks (see [`super::owed`]): it never drops a mark (each
    /// must reach the table), and keeps only the latest of each family-day. A mark's
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
        }
        for row in rows {
            if self.rows.len() >= self.limit.unwrap_or(MAX_QUEUED) {
                self.rows.pop_front();
                self.dropped += 1;
            }
            self.rows.push_back(row);
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
