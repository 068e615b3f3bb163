//! The driver wrapper's kind of write: one flush's COUNTER BATCHes through the stage
//! runner ([`crate::stage::run_stage`]), with the wrapper column of the decision table
//! (the counter policy without an age rule).
//!
//! What is the wrapper's own: its requests go through the application's session and its
//! prepared UPDATEs ([`Statements`]); its intents name the application's tables; its
//! records (of the application's tables) go to the outcome logs, whose sizes its group
//! records before they are appended, and to a spill segment of its flush; and its
//! group's end makes the spill's cursor durable first.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use scylla::client::session::Session;
use scylla::statement::batch::BatchType;
use scylla::statement::prepared::PreparedStatement;

use crate::aggregate::Credit;
use crate::sink::cql::classify;
use crate::sink::cql::profile::WriteProfile;
use crate::sink::cql::store::StoreKind;
use crate::sink::{Outcome, WriteError};
use crate::stage::{Action, CrashPoints, Decision, Policy, Sender, WriteKind};
use crate::state::{Cursor, OutcomeLog, RecordOutcome, StateDir, WrapperTable, WriteRecord};
use crate::test_hooks::crash_point;

use super::super::buffer::PendingRow;
use super::super::records::spill_full;
use super::super::statement::{RowValues, split_key};
use super::super::stats::Stage;
use super::{Request, WrapperFlushReport, WrapperFlusher, row_sum, unmerged_error};

/// The application's session and the wrapper's prepared UPDATEs: how a wrapper request
/// is sent. Held apart from the flusher while a flush sends.
pub(super) struct Statements {
    pub(super) session: Arc<Session>,
    pub(super) statements: HashMap<u32, PreparedStatement>,
    pub(super) profile: WriteProfile,
    pub(super) store_kind: StoreKind,
    pub(super) texts: classify::SharedTexts,
}

impl Sender<Request> for Statements {
    async fn send(&self, request: &Request) -> Outcome {
        let Some(statement) = self.statements.get(&request.table.id) else {
            return Outcome::NotAppliedTransient(WriteError::new(
                "prepare_failed",
                format!(
                    "the UPDATE of {} could not be prepared",
                    request.table.qualified_name()
                ),
            ));
        };
        let mut values = Vec::with_capacity(request.rows.len());
        for (key, row) in &request.rows {
            let Some((_, key)) = split_key(key) else {
                return Outcome::NotAppliedPermanent(WriteError::new(
                    "bad_key",
                    "a buffered row key does not decode",
                ));
            };
            values.push(RowValues {
                deltas: &row.deltas,
                key,
            });
        }
        let result = if let [row] = values.as_slice() {
            self.session.execute_unpaged(statement, row).await.map(drop)
        } else {
            let batch = self
                .profile
                .batch(BatchType::Counter, statement, values.len());
            self.session.batch(&batch, &values).await.map(drop)
        };
        match result {
            Ok(()) => Outcome::Applied,
            Err(error) => self
                .texts
                .share(classify::classify(&error, self.store_kind)),
        }
    }
}

/// One wrapper flush being settled.
pub(super) struct WrapperStage<'w> {
    flusher: &'w mut WrapperFlusher,
    /// How far the spill's replay had read rows for this flush: its group consumes that
    /// cursor.
    consumes: Option<Cursor>,
    now_unix_secs: u32,
    /// The drained rows' room in the budget: re-queued rows take theirs from it.
    room: Credit,
    /// Why nothing was sent, when the group commit failed (the spilled rows' error).
    held_error: Option<WriteError>,
    /// Whether the group commit was made.
    committed: bool,
    /// Rows definitely not applied, back to the buffer once every request settled.
    requeue: Vec<(Box<[u8]>, PendingRow)>,
    /// Where each re-queued row was in this flush (a drained key is in one request
    /// once): a row that cannot go back is spilled under that identity, the one its
    /// intent has, so a recovery of this flush finds it in the spill.
    requeued_at: HashMap<Box<[u8]>, (u32, u16)>,
    /// Records for the logs and the spill, by outcome.
    records: HashMap<RecordOutcome, Vec<WriteRecord>>,
    report: WrapperFlushReport,
}

impl<'w> WrapperStage<'w> {
    pub(super) fn new(
        flusher: &'w mut WrapperFlusher,
        consumes: Option<Cursor>,
        now_unix_secs: u32,
        room: Credit,
        report: WrapperFlushReport,
    ) -> WrapperStage<'w> {
        WrapperStage {
            flusher,
            consumes,
            now_unix_secs,
            room,
            held_error: None,
            committed: false,
            requeue: Vec::new(),
            requeued_at: HashMap::new(),
            records: HashMap::new(),
            report,
        }
    }

    /// What the flush did, but the request counts (the runner's), and whether its group
    /// commit was made.
    pub(super) fn into_report(self) -> (WrapperFlushReport, bool) {
        (self.report, self.committed)
    }

    /// Definitely not applied: back for the next flush, in the room the rows had. A row
    /// that cannot go back (its sum with what arrived since would leave the i64 range, or
    /// no room is left for it) is spilled, under the identity its intent has.
    fn requeue(&mut self) {
        let rows = std::mem::take(&mut self.requeue);
        let f = &mut *self.flusher;
        let refused = f.buffer.requeue(rows, self.now_unix_secs, &mut self.room);
        for (key, row, why) in refused {
            let error = unmerged_error(why);
            let sum = row_sum(&row);
            f.counters.settled(-sum, Stage::Requeued);
            f.counters.settled(sum, Stage::Unsent);
            let (index, position) = self.requeued_at.get(&key).copied().unwrap_or((u32::MAX, 0));
            let Some(table) = split_key(&key).and_then(|(t, _)| f.tables.get(t)) else {
                continue;
            };
            let request = Request {
                table,
                rows: vec![(key, row)],
            };
            let mut spilled = f.records(&request, index, RecordOutcome::Spilled, Some(&error));
            for record in &mut spilled {
                record.row = position;
            }
            self.records
                .entry(RecordOutcome::Spilled)
                .or_default()
                .extend(spilled);
        }
    }
}

impl WriteKind for WrapperStage<'_> {
    type Request = Request;

    const POLICY: Policy = Policy::WRAPPER;

    const CRASH_POINTS: CrashPoints = CrashPoints {
        committed: Some("wrapper_journal_committed"),
        sent: Some("wrapper_sent"),
        settled: None,
        ended: None,
    };

    fn journal(&mut self) -> Option<&mut StateDir> {
        Some(&mut self.flusher.state)
    }

    fn begin(&mut self, requests: &[Request], _first_request: u32) -> std::io::Result<()> {
        let f = &mut *self.flusher;
        let flush = f.flush_id();
        let mut tables: Vec<WrapperTable> = Vec::new();
        for request in requests {
            let table = &request.table;
            if tables.iter().all(|t| t.id != table.id) {
                tables.push(WrapperTable {
                    id: table.id,
                    keyspace: table.keyspace.clone(),
                    name: table.name.clone(),
                    key_columns: table.key_columns().map(str::to_owned).collect(),
                    counters: table.counters.clone(),
                });
            }
        }
        let intents: Vec<_> = requests
            .iter()
            .map(|r| {
                let rows = r
                    .rows
                    .iter()
                    .map(|(k, row)| (&k[..], &row.deltas[..]))
                    .collect();
                (r.table.id, rows)
            })
            .collect();
        let time = crate::bucket::rfc3339(SystemTime::now());
        let begun = f
            .state
            .wrapper_journal_begin(&flush, &time, self.consumes, &tables, &intents);
        self.committed = begun.is_ok();
        if let Err(error) = &begun {
            self.report.journal_failed = true;
            self.held_error = Some(WriteError::new(
                "journal_failed",
                format!("the intent journal could not be written: {error}"),
            ));
        }
        begun
    }

    fn apply(&mut self, index: u32, request: Request, decision: Decision) {
        let sum = request.sum();
        let stage = stage_of(&decision.action);
        let error = decision
            .action
            .error()
            .or(self.held_error.as_ref())
            .cloned();
        let f = &mut *self.flusher;
        if let Some(class) = decision.counted {
            f.counters.write(class);
        }
        if self.consumes.is_some() && !self.committed {
            // Replayed rows of a group that was not committed (its commit failed, or the
            // deadline had passed): nothing consumed them, they stay in the spill and are
            // read again (in the buffer too, they would be sent twice). The flush takes
            // back their count as accepted.
            f.counters.settled(sum, Stage::Requeued);
            return;
        }
        let outcome = match stage {
            Stage::Applied => None,
            Stage::Requeued => {
                for (position, (key, _)) in request.rows.iter().enumerate() {
                    let position = u16::try_from(position).unwrap_or(u16::MAX);
                    self.requeued_at.insert(key.clone(), (index, position));
                }
                self.requeue.extend(request.rows);
                f.counters.settled(sum, Stage::Requeued);
                return;
            }
            Stage::Unknown => Some(RecordOutcome::Unknown),
            Stage::Rejected => Some(RecordOutcome::Rejected),
            Stage::Unsent => {
                self.report.unsent += 1;
                Some(RecordOutcome::Spilled)
            }
        };
        if let Some(outcome) = outcome {
            let records = f.records(&request, index, outcome, error.as_ref());
            self.records.entry(outcome).or_default().extend(records);
        }
        f.counters.settled(sum, stage);
    }

    /// The re-queue, then the logs' sizes in the journal, the spill, the logs.
    fn finish(&mut self) {
        self.requeue();
        let journaled = self.held_error.is_none();
        let f = &mut *self.flusher;
        // Only a flush with records to write needs the logs' sizes (one more fdatasync).
        let has_records = self.records.values().any(|r| !r.is_empty());
        if journaled
            && has_records
            && let Err(error) = f.state.wrapper_journal_logs_at()
        {
            tracing::error!(%error, "Could not record the outcome logs' sizes in the journal; a crash before this flush ends could log some records twice.");
        }
        crash_point("wrapper_logs_at");
        if let Some(spilled) = self.records.remove(&RecordOutcome::Spilled) {
            let count = spilled.len();
            // A batch per row: the segment keeps whole batches, and rows of one request
            // may be kept apart.
            let batches: Vec<Vec<WriteRecord>> = spilled.into_iter().map(|r| vec![r]).collect();
            // A replay's group spills rows it read back from the spill: moved, they need
            // no room (the segment they came from counts against the limit until the
            // cursor passes it), as the sidecar's replay keeps them.
            let moved = if self.consumes.is_some() {
                batches.len()
            } else {
                0
            };
            match f.state.spill_moving(&f.flush_id(), &batches, moved) {
                Ok(kept) => {
                    // Past `state.max_spill_bytes`: not applied, and not to be replayed.
                    let over = batches
                        .into_iter()
                        .zip(kept)
                        .filter(|(_, kept)| !kept)
                        .flat_map(|(batch, _)| batch)
                        .map(|mut record| {
                            record.outcome = RecordOutcome::Rejected;
                            record.error = Some(spill_full(record.error.as_ref()));
                            record
                        });
                    self.records
                        .entry(RecordOutcome::Rejected)
                        .or_default()
                        .extend(over);
                }
                Err(error) => {
                    // The segment is written whole or not at all: counted lost.
                    f.counters.records_lost(count as u64);
                    tracing::error!(%error, records = count, "Could not spill rows that did not apply; they are counted but their details are lost.");
                }
            }
        }
        for (outcome, log) in [
            (RecordOutcome::Unknown, OutcomeLog::Unknown),
            (RecordOutcome::Rejected, OutcomeLog::Rejected),
        ] {
            let Some(records) = self.records.get(&outcome).filter(|r| !r.is_empty()) else {
                continue;
            };
            let appended = f.state.append_recorded(log, records);
            f.count_lost(&appended);
            if let Some((lost, error)) = &appended.failed {
                tracing::error!(
                    file = log.file_name(),
                    records = lost,
                    %error,
                    "Could not record flushed rows that did not apply; they are counted but their details are lost."
                );
            }
        }
        crash_point("wrapper_logged");
    }

    /// The spill's cursor, then the End (see [`WrapperFlusher::end`]).
    fn end(&mut self) -> std::io::Result<()> {
        self.flusher.end(self.consumes);
        Ok(())
    }
}

/// Where the deltas of a request go, by the action the decision table chose.
pub(super) fn stage_of(action: &Action) -> Stage {
    match action {
        Action::Applied => Stage::Applied,
        // Back in the buffer: re-queued, or kept unchanged after a failed group commit.
        Action::Retry(_) | Action::Hold => Stage::Requeued,
        Action::Spill(_) => Stage::Unsent,
        Action::LogUnknown(_) => Stage::Unknown,
        Action::LogRejected(_) => Stage::Rejected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::{Facts, Sent, decide};

    fn error() -> WriteError {
        WriteError::new("k", "t")
    }

    /// A request a failed group commit held back is counted under no outcome class
    /// (`countersink_wrapper_writes_total` counts requests sent), and its rows stay in
    /// the buffer for the next flush, or go to the spill at the final flush.
    #[test]
    fn a_request_a_failed_group_commit_kept_back_is_counted_under_no_outcome() {
        for final_flush in [false, true] {
            let facts = Facts::fresh(final_flush, 1, u32::MAX);
            let decision = decide(&Policy::WRAPPER, Sent::Held, &facts);
            assert_eq!(decision.counted, None, "final flush: {final_flush}");
            let kept = if final_flush {
                Stage::Unsent
            } else {
                Stage::Requeued
            };
            assert_eq!(
                stage_of(&decision.action),
                kept,
                "final flush: {final_flush}"
            );
        }
    }

    #[test]
    fn every_action_has_one_stage_and_keeps_its_error() {
        let cases = [
            (Action::Applied, Stage::Applied, None),
            (Action::Retry(Some(error())), Stage::Requeued, Some(error())),
            (Action::Hold, Stage::Requeued, None),
            (Action::Spill(None), Stage::Unsent, None),
            (Action::LogUnknown(error()), Stage::Unknown, Some(error())),
            (Action::LogRejected(error()), Stage::Rejected, Some(error())),
        ];
        for (action, stage, kept) in cases {
            assert_eq!(stage_of(&action), stage, "{action:?}");
            assert_eq!(action.error(), kept.as_ref());
        }
    }
}
