//! The running totals' kind of write: one flush's totals writes through the stage
//! runner ([`crate::stage::run_stage`]) with the `writer_totals` column of the decision
//! table.
//!
//! What is the totals path's own: its intents (writer column, write time, absolute
//! totals and the part of them not known applied), and how a decision is carried out. A
//! write of the book's rows is decided for the request, then row by row for the age
//! rule (each row has its own failure streak, and only closed rows leave memory); a
//! replayed row is its own write, and is carried into the flush's totals segment when it
//! does not apply (see [`super::replay`]).

use crate::sink::bounded::Cutoff;
use crate::sink::{Outcome, OutcomeClass, Sink, TotalsWrite};
use crate::stage::{
    self, Action, CrashPoints, Decision, Facts, Policy, Sender, StageCx, WriteKind, run_stage,
};
use crate::state::{Cursor, FlushId, OutcomeLog, StateDir, WriteRecord};
use crate::telemetry::Ledger;
use crate::test_hooks::crash_point;
use crate::vocabulary::Granularity;

use super::book::{RowId, RowRef};
use super::clock;
use super::records::{self, Recorder, SpilledRow};
use super::replay::Reading;
use super::{Planned, Totals, TotalsReport};

/// A row for the flush's totals segment.
pub(super) struct SpilledTotal {
    /// Its record (the newest total, the part not known applied).
    pub(super) record: WriteRecord,
    /// Its table's granularity.
    pub(super) table: Granularity,
    /// The sum of its part not known applied.
    pub(super) sum: i128,
    /// The flush's request that last wrote it, when no other row of that request stayed
    /// in memory: a row dropped for want of room is journaled as that request's
    /// outcome, so recovery does not home it again. With a row of the request back in
    /// the book, recovery must home them (and this one with them: a drop counted once
    /// too often, never a row lost).
    pub(super) request: Option<u32>,
}

/// A sink sends totals writes with [`Sink::write_totals`].
pub(super) struct TotalsWrites<'s, S>(pub(super) &'s S);

impl<S: Sink> Sender<TotalsWrite> for TotalsWrites<'_, S> {
    fn send<'a>(&'a self, write: &'a TotalsWrite) -> impl Future<Output = Outcome> + Send + 'a {
        self.0.write_totals(write)
    }
}

/// One flush's totals writes being settled.
pub(super) struct TotalsStage<'a> {
    pub(super) totals: &'a mut Totals,
    pub(super) state: &'a mut StateDir,
    pub(super) ledger: &'a Ledger,
    /// Shown the planned writes once their group commit is made (the key index learns
    /// the keys from it).
    pub(super) observe: &'a (dyn Fn(&[TotalsWrite]) + Sync),
    pub(super) flush: FlushId,
    /// What each write stands for, by its position in the group (taken as it settles).
    pub(super) planned: Vec<Option<Planned>>,
    /// The flush's index of the group's first write.
    pub(super) first_request: u32,
    pub(super) last: bool,
    pub(super) now_unix_secs: i64,
    /// RFC 3339 now, for records.
    pub(super) time: String,
    /// Rows for the flush's totals segment.
    pub(super) to_spill: Vec<SpilledTotal>,
    /// Requests a row of which went back to the book (retried, or held).
    pub(super) kept_in_memory: std::collections::HashSet<u32>,
    /// Records of the parts of totals the store refused, for `rejected.jsonl`.
    pub(super) rejected: Vec<WriteRecord>,
    /// Rows released, replayed and spilled (the request counts come from the runner).
    pub(super) report: TotalsReport,
    /// Whether the group commit was made (the chunk of replayed rows was sent).
    pub(super) committed: bool,
    /// The replay cursor the group's end makes durable: past the chunk once its rows
    /// are all settled or carried.
    pub(super) consumed: Option<Cursor>,
}

impl WriteKind for TotalsStage<'_> {
    type Request = TotalsWrite;

    const POLICY: Policy = Policy::TOTALS;

    const CRASH_POINTS: CrashPoints = CrashPoints {
        committed: None,
        // Answers in hand, nothing settled: a kill here leaves the journal's intents to
        // recovery, which writes the ones not known applied again (idempotent).
        sent: Some("totals_sent"),
        settled: None,
        ended: None,
    };

    fn journal(&mut self) -> Option<&mut StateDir> {
        Some(self.state)
    }

    fn begin(&mut self, writes: &[TotalsWrite], first_request: u32) -> std::io::Result<()> {
        let planned: Vec<&Planned> = self.planned.iter().flatten().collect();
        let intents = self.totals.intents(writes, &planned, first_request);
        let families = &self.totals.families;
        let consumes = self.totals.replays.read_to();
        self.state
            .journal_begin_kind(&self.flush, &self.time, consumes, families, &intents)?;
        self.committed = true;
        (self.observe)(writes);
        Ok(())
    }

    fn apply(&mut self, index: u32, write: TotalsWrite, decision: Decision) {
        if let Some(class) = decision.counted {
            self.ledger
                .count_write(&self.totals.table_name(&write), class);
        }
        let offset = index.saturating_sub(self.first_request) as usize;
        match self.planned.get_mut(offset).and_then(Option::take) {
            Some(Planned::Book(_)) => {
                let unknown = decision.counted == Some(OutcomeClass::Unknown);
                self.settle_book(index, &write, &decision.action, unknown);
            }
            Some(Planned::Replay(row)) if self.settle_replay(index, row, decision.action) => {
                self.report.rows_replayed += 1;
            }
            Some(Planned::Replay(_)) | None => {}
        }
    }

    /// The flush's totals segment (its own rows, and the replayed rows it carries), the
    /// rejected log, the replay chunk's end.
    fn finish(&mut self) {
        let totals = &mut *self.totals;
        let carried = if self.committed {
            let by = Recorder {
                writer: &totals.writer_id,
                incarnation: totals.incarnation,
                flush_seq: self.flush.flush_seq,
                request_id: self.flush.named_request("replay"),
                row: 0,
                time: &self.time,
            };
            let flush = &self.flush;
            totals
                .replays
                .left(totals.engine.families(), &by, |r| flush.request_id(r))
        } else {
            Ok((Vec::new(), 0))
        };
        let consumes = self.committed.then(|| totals.replays.read_to()).flatten();
        let carried = carried
            .inspect_err(|error| {
                tracing::error!(%error, "Could not write replayed writer totals again; they stay where they were read, and are read again later.");
            })
            .ok();
        let mut to_spill = std::mem::take(&mut self.to_spill);
        for row in &mut to_spill {
            if row
                .request
                .is_some_and(|r| self.kept_in_memory.contains(&r))
            {
                // Other rows of its request are back in the book: dropped, this one must
                // not mark the request dropped (see `SpilledTotal::request`).
                row.request = None;
            }
        }
        let (carried_kept, spilled) = totals.write_spill(
            &self.flush,
            consumes,
            carried,
            to_spill,
            self.ledger,
            self.state,
        );
        self.report.rows_spilled = spilled;
        if spilled > 0 {
            crash_point("totals_spilled");
        }
        if totals.replays.has_rows() {
            // Every row settled or carried: the group's end consumes the chunk, and its
            // refused rows are logged. Else (not sent, or the carrying segment not
            // written) the chunk stays on disk behind the cursor, and the read position
            // goes back before it, so that no later segment's header names a cursor past
            // it; it is read again whole, and its refused rows logged then (once).
            let consumed = self.committed && carried_kept;
            let rewind = (!consumed).then_some(&mut *self.state);
            let refused =
                totals
                    .replays
                    .finish(consumed, rewind, self.ledger, totals.engine.aggregator());
            self.rejected.extend(refused);
            if consumed {
                self.consumed = consumes;
            }
        }
        if !self.rejected.is_empty() {
            let appended = self.state.append_now(OutcomeLog::Rejected, &self.rejected);
            self.ledger.count_appended(OutcomeLog::Rejected, &appended);
        }
    }

    /// Ends the group, making the cursor past its replayed rows durable first when they
    /// are all settled or carried (a cursor an earlier group owes too: see
    /// [`StateDir::journal_end`]).
    fn end(&mut self) -> std::io::Result<()> {
        self.state.journal_end(&self.flush, self.consumed)
    }
}

impl TotalsStage<'_> {
    /// The facts every row of this flush shares (the final flush, now, the maximum age).
    fn shared_facts(&self) -> Facts {
        Facts::fresh(
            self.last,
            u32::try_from(self.now_unix_secs).unwrap_or(u32::MAX),
            self.totals.requeue_max_age_secs,
        )
    }

    /// A write of the book's rows, decided as `action` for the request: confirms them,
    /// or carries out each row's own decision (the age rule reads the row's failure
    /// streak and whether it is closed).
    fn settle_book(&mut self, request: u32, write: &TotalsWrite, action: &Action, unknown: bool) {
        if *action == Action::Applied {
            let mut applied = 0;
            for row in &write.rows {
                let row_ref = RowRef {
                    family: write.family,
                    table: write.table,
                    series: &write.series,
                    bucket: row.bucket,
                };
                applied += self.totals.book.confirm(row_ref, &row.totals);
            }
            self.ledger.update(write.table, |st| {
                st.applied += applied;
                st.in_flight -= applied;
            });
            return;
        }
        let shared = self.shared_facts();
        for (row_index, row) in write.rows.iter().enumerate() {
            let id = RowId {
                family: write.family,
                table: write.table,
                series: write.series.clone(),
                bucket: row.bucket,
            };
            let book = &self.totals.book;
            let facts = Facts {
                closed: book.is_closed(&id, self.now_unix_secs),
                failing_since: book.failing_since(&id),
                ..shared
            };
            match stage::for_row(&Policy::TOTALS, action, &facts) {
                Action::Applied => {
                    let applied = self.totals.book.confirm(id.as_ref(), &row.totals);
                    self.ledger.update(id.table, |st| {
                        st.applied += applied;
                        st.in_flight -= applied;
                    });
                }
                Action::Retry(_) => {
                    let seq = self.flush.flush_seq;
                    self.totals
                        .book
                        .failed(&id, seq, shared.now_unix_secs, unknown);
                    self.kept_in_memory.insert(request);
                }
                Action::Hold => {
                    self.totals.book.hold(&id);
                    self.kept_in_memory.insert(request);
                }
                Action::Spill(error) => {
                    self.spill_row(&id, error.as_ref(), request, row_index);
                }
                Action::LogRejected(error) | Action::LogUnknown(error) => {
                    // A total is never logged unknown (its column sends it again); a
                    // refusal logs the part of the total not applied.
                    self.reject_row(&id, request, row_index, &error, write);
                }
            }
        }
    }

    /// The row's newest total goes to the flush's totals segment (as row `row_index` of
    /// `request`). A closed row leaves memory with it (the age rule spills only closed
    /// rows); the final flush spills open rows too, and memory goes with the process.
    fn spill_row(
        &mut self,
        id: &RowId,
        error: Option<&crate::sink::WriteError>,
        request: u32,
        row_index: usize,
    ) {
        let totals = &mut *self.totals;
        let spilled = totals
            .book
            .spill(id, !self.last, totals.engine.aggregator());
        let timestamp = totals.clock.tick(clock::now_micros());
        let by = Recorder {
            writer: &totals.writer_id,
            incarnation: totals.incarnation,
            flush_seq: self.flush.flush_seq,
            request_id: self.flush.request_id(request),
            row: u16::try_from(row_index).unwrap_or(u16::MAX),
            time: &self.time,
        };
        let record = records::total_record(
            &SpilledRow {
                id,
                writer: &totals.writer,
                total: &spilled.total,
                unconfirmed: &spilled.unconfirmed,
                timestamp,
                error,
            },
            totals.family(id),
            &by,
        );
        self.to_spill.push(SpilledTotal {
            record,
            table: id.table,
            sum: spilled.unconfirmed.sum(),
            request: Some(request),
        });
    }

    /// The store refused the row for good: the part of its total not applied is logged.
    fn reject_row(
        &mut self,
        id: &RowId,
        request: u32,
        row_index: usize,
        error: &crate::sink::WriteError,
        write: &TotalsWrite,
    ) {
        let refused = self.totals.book.reject(id);
        if refused.is_zero() {
            // The confirmed total written again after an unknown write (see
            // `Book::reject`) and refused: nothing of it is missing from the store.
            return;
        }
        let request_id = self.flush.request_id(request);
        let by = Recorder {
            writer: &self.totals.writer_id,
            incarnation: self.totals.incarnation,
            flush_seq: self.flush.flush_seq,
            request_id,
            row: u16::try_from(row_index).unwrap_or(u16::MAX),
            time: &self.time,
        };
        let record = records::rejected_record(id, self.totals.family(id), &refused, error, &by);
        self.rejected.push(record);
        let sum = refused.sum();
        self.ledger.update(id.table, |st| {
            st.rejected += sum;
            st.in_flight -= sum;
        });
        tracing::warn!(table = %self.totals.table_name(write), kind = error.kind, error = %error.text, "Writer totals rejected; the unapplied part is recorded in rejected.jsonl.");
    }

    /// The write of replayed row `row`, decided as `action`; true when it applied. A
    /// replayed row is neither closed nor aged: one that did not apply is carried into
    /// the flush's totals segment, whatever the decision (see [`super::replay`]).
    fn settle_replay(&mut self, request: u32, row: usize, action: Action) -> bool {
        let totals = &mut *self.totals;
        match action {
            Action::Applied => {
                totals.replays.applied(row, self.ledger);
                return true;
            }
            Action::LogRejected(error) | Action::LogUnknown(error) => {
                let by = Recorder {
                    writer: &totals.writer_id,
                    incarnation: totals.incarnation,
                    flush_seq: self.flush.flush_seq,
                    request_id: self.flush.request_id(request),
                    row: 0,
                    time: &self.time,
                };
                let reading = Reading {
                    aggregator: totals.engine.aggregator(),
                    families: totals.engine.families(),
                    ledger: self.ledger,
                    by: &by,
                };
                totals.replays.rejected(row, &error, &reading);
            }
            Action::Spill(error) | Action::Retry(error) => {
                totals.replays.failed(row, request, error);
            }
            Action::Hold => totals.replays.failed(row, request, None),
        }
        false
    }
}

/// Runs one flush's totals writes through the stage runner: see [`Totals::flush`].
#[allow(clippy::too_many_arguments)]
pub(super) async fn run<S: Sink>(
    stage: &mut TotalsStage<'_>,
    sink: &S,
    writes: Vec<TotalsWrite>,
    cutoff: &mut impl Cutoff,
    max_in_flight: usize,
) -> crate::stage::StageReport {
    let facts = stage.shared_facts();
    let first_request = stage.first_request;
    run_stage(
        stage,
        &TotalsWrites(sink),
        writes,
        StageCx {
            cutoff,
            max_in_flight,
            facts,
            first_request,
        },
    )
    .await
}
