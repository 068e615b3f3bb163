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

use std::collections::VecDeque;
use std::time::Instant;

use crate::backoff::Backoff;
use crate::bucket::{self, Day};
use crate::family::Families;
use crate::series;
use crate::sink::{OutcomeRow, Sink};
use crate::stage::{self, Action, Facts, Policy, Sent};
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

    /// Queues at most `rows` rows (a test's small stand-in for [`MAX_QUEUED`]).
    #[cfg(test)]
    pub fn limit(&mut self, rows: usize) {
        self.limit = Some(rows);
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
    /// family-day partition and at most `ROWS_PER_REQUEST` rows, until one fails or
    /// the deadline passes; what did not apply stays queued.
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
        while !self.rows.is_empty() && !deadline.passed() {
            let first = &self.rows[0];
            let (family, day) = (first.family.clone(), first.day);
            let count = self
                .rows
                .iter()
                .take(ROWS_PER_REQUEST)
                .take_while(|r| r.family == family && r.day == day)
                .count();
            let chunk: Vec<OutcomeRow> = self.rows.iter().take(count).cloned().collect();
            // Raced against the deadline like every write of a flush: a write cut off
            // stays queued (it is idempotent) and its rows stay in the local logs, which
            // the next start offers to the table again.
            let answer = tokio::select! {
                answer = sink.write_outcomes(&chunk) => answer,
                () = deadline.wait() => return,
            };
            // The outcomes table's column has no age rule and keeps what fails.
            let facts = Facts::fresh(force, 0, u32::MAX);
            match stage::decide(&Policy::OUTCOMES, Sent::Done(answer), &facts).action {
                Action::Applied => {
                    self.rows.drain(..count);
                    self.failures = 0;
                    self.not_before = None;
                }
                failed => {
                    self.failures = self.failures.saturating_add(1);
                    self.not_before = Some(Instant::now() + backoff.delay(self.failures));
                    let error = failed.error();
                    tracing::warn!(
                        kind = error.map(|e| e.kind),
                        error = error.map(|e| &*e.text),
                        rows = self.rows.len(),
                        "Could not write to the outcomes table; the rows are sent again later (they are in the local logs)."
                    );
                    return;
                }
            }
        }
    }
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
