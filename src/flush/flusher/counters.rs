//! The counter deltas' kind of write: one chunk's partition writes, through the stage
//! runner ([`crate::stage::run_stage`]) with the counter column of the decision table.
//!
//! What is the counter path's own: the intents (families, keys, rows), the start windows
//! of its group, the age rule (the oldest re-queue time of a write's rows), and how a
//! decision is carried out: re-queued rows go back into the buffer for the one table
//! they were meant for, records go to `unknown.jsonl`, `rejected.jsonl` and the spill
//! segment, and the group's end makes the replay cursor it consumed durable first.

use std::time::SystemTime;

use crate::aggregate::{Credit, Refused};
use crate::bucket;
use crate::sink::{PartitionWrite, Sink};
use crate::stage::{Action, CrashPoints, Decision, Facts, Policy, Sender, WriteKind};
use crate::state::{
    Cursor, ErrorInfo, FlushId, OutcomeLog, RecordOutcome, RecordSource, StateDir, records_of,
};
use crate::vocabulary::Granularity;

use super::super::plan;
use super::super::record_conversion;
use super::{Batch, Flusher, Spilled};

/// A sink sends counter writes with [`Sink::write`].
pub(in crate::flush) struct Writes<'s, S>(pub(in crate::flush) &'s S);

impl<S: Sink> Sender<PartitionWrite> for Writes<'_, S> {
    fn send<'a>(
        &'a self,
        write: &'a PartitionWrite,
    ) -> impl Future<Output = crate::sink::Outcome> + Send + 'a {
        self.0.write(write)
    }
}

/// A group of counter writes to send: a drain chunk's, or a replay chunk's.
pub(in crate::flush) struct Counters {
    pub(in crate::flush) flush: FlushId,
    pub(in crate::flush) writes: Vec<PartitionWrite>,
    /// Their delta sums (minute, day), in flight until the group settles.
    pub(in crate::flush) in_flight: [i128; Granularity::COUNT],
    /// For a group of replayed rows, the replay cursor past exactly those rows: its
    /// group commit consumes it. `None` for a drain chunk.
    pub(in crate::flush) consumes: Option<Cursor>,
    /// Whether this is the final flush.
    pub(in crate::flush) last: bool,
}

/// One group's counter writes being settled.
pub(in crate::flush) struct CounterStage<'f, S> {
    pub(in crate::flush) flusher: &'f mut Flusher<S>,
    pub(in crate::flush) flush: FlushId,
    /// RFC 3339 when the chunk was planned, for the journal and the records.
    pub(in crate::flush) time: String,
    /// The drained rows' room in the memory budget: re-queued rows take theirs from it.
    pub(in crate::flush) credit: &'f mut Credit,
    /// For a group of replayed rows, the replay cursor it consumes (see [`Counters`]).
    pub(in crate::flush) consumes: Option<Cursor>,
    /// What the decisions leave for files.
    pub(in crate::flush) batch: Batch,
    /// Now, Unix seconds (re-queue times).
    pub(in crate::flush) now_unix_secs: u32,
    /// Whether this is the final flush.
    pub(in crate::flush) last: bool,
    /// The drained rows' delta sums (minute, day), in flight until the chunk settles.
    pub(in crate::flush) in_flight: [i128; Granularity::COUNT],
    /// Requests spilled and dropped (the spill full or failing), once finished.
    pub(in crate::flush) spilled: (usize, usize),
    /// Whether the group commit was made.
    pub(in crate::flush) committed: bool,
}

impl<S: Sink> WriteKind for CounterStage<'_, S> {
    type Request = PartitionWrite;

    const POLICY: Policy = Policy::COUNTER;

    const CRASH_POINTS: CrashPoints = CrashPoints {
        committed: Some("journal_committed"),
        sent: Some("sent"),
        settled: Some("settled_in_memory"),
        ended: Some("ended"),
    };

    fn journal(&mut self) -> Option<&mut StateDir> {
        Some(&mut self.flusher.state)
    }

    fn begin(&mut self, writes: &[PartitionWrite], _first_request: u32) -> std::io::Result<()> {
        let f = &mut *self.flusher;
        f.state
            .journal_begin(&self.flush, &self.time, self.consumes, &f.families, writes)?;
        self.committed = true;
        Ok(())
    }

    fn facts(&self, write: &PartitionWrite, shared: Facts) -> Facts {
        if self.consumes.is_some() && self.flusher.ingest_log.is_some() {
            // Replayed rows with a durable listener: they may be answered increments of
            // the ingest log, which must stay on disk until they apply, so a failure
            // spills them again at once rather than re-queueing them in memory.
            return Facts {
                failing_since: Some(shared.now_unix_secs),
                max_age_secs: 0,
                ..shared
            };
        }
        Facts {
            failing_since: write.failing_since(),
            ..shared
        }
    }

    fn apply(&mut self, index: u32, write: PartitionWrite, decision: Decision) {
        if self.consumes.is_some() && !self.committed {
            // Replayed rows of a group that was not committed (its commit failed, or the
            // deadline had passed): nothing consumed them, they stay on disk and are read
            // again (in memory too, they would be sent twice).
            return;
        }
        let CounterStage {
            flusher,
            flush,
            time,
            credit,
            batch,
            now_unix_secs,
            ..
        } = self;
        if let Some(class) = decision.counted {
            flusher
                .ledger
                .count_write(&flusher.table_name(&write), class);
        }
        if let Some(gate) = &mut flusher.ledger_gate {
            // What the state directory owes (see `flush::owed`): replayed rows back in
            // the buffer stay owed until a write carries them.
            let replay = self.consumes.is_some();
            gate.track(flusher.engine.families(), &write, &decision.action, replay);
        }
        let source = RecordSource {
            flush,
            request: index,
            time,
        };
        flusher.execute(
            write,
            decision.action,
            source,
            *now_unix_secs,
            credit,
            batch,
        );
    }

    /// The spill segment (with the rows the final flush held back), the outcome logs and
    /// the exact families' outcome rows, the accounting, and the pending figure.
    fn finish(&mut self) {
        let f = &mut *self.flusher;
        let mut batch = std::mem::take(&mut self.batch);
        // A replay group's spilled writes are rows its chunk read back: moved, not
        // admitted (they need no room in the spill); the held rows after them are fresh.
        let moved = if self.consumes.is_some() {
            batch.spill.len()
        } else {
            0
        };
        batch.spill.append(&mut f.held_spill);
        let (spilled, dropped) = f.spill(&self.flush, batch.spill, moved);
        let held = std::mem::take(&mut f.ledger_held);
        self.spilled = (spilled + held.0, dropped + held.1);
        let [unknown, rejected] = f.state.log_batch(&batch.unknown, &batch.rejected);
        if let Some(gate) = &mut f.ledger_gate {
            gate.record_outcomes(
                f.engine.families(),
                batch.unknown.iter().chain(&batch.rejected),
            );
        }
        f.ledger.count_appended(OutcomeLog::Unknown, &unknown);
        f.ledger.count_appended(OutcomeLog::Rejected, &rejected);
        for g in Granularity::ALL {
            f.ledger
                .update(g, |s| s.in_flight -= self.in_flight[g.index()]);
        }
        if !self.last {
            // Before the group's end: a crash between the two finds the re-queued rows
            // both in this figure and spilled by recovery (an over-count, never an
            // under-count).
            f.write_pending_status();
        }
    }

    /// The replay cursor first (a cursor that cannot be written leaves the group open:
    /// it is the only record that names the cursor), then the End.
    fn end(&mut self) -> std::io::Result<()> {
        self.flusher.state.journal_end(&self.flush, self.consumes)
    }
}

impl<S: Sink> Flusher<S> {
    /// Carries out one action; what must reach a file goes into `batch`.
    pub(super) fn execute(
        &mut self,
        write: PartitionWrite,
        action: Action,
        source: RecordSource<'_>,
        now_unix_secs: u32,
        credit: &mut Credit,
        batch: &mut Batch,
    ) {
        let sum = write.sum();
        let family = &self.families[usize::from(write.family.0)];
        match action {
            Action::Applied => self.ledger.update(write.table, |s| s.applied += sum),
            Action::Retry(_) | Action::Hold => {
                let error = match &action {
                    Action::Retry(Some(error)) => Some(ErrorInfo::of(error)),
                    _ => None,
                };
                let (table, series, shard, epoch) =
                    (write.table, write.series.clone(), write.shard, write.epoch);
                let rows: Vec<_> = match action {
                    Action::Hold => plan::held_rows(write).collect(),
                    _ => plan::requeued_rows(write, now_unix_secs).collect(),
                };
                let (row_count, first_refused) = (rows.len(), batch.spill.len());
                for (row_index, (key, row)) in rows.into_iter().enumerate() {
                    let Some(Refused { key, row: back, .. }) = self
                        .engine
                        .aggregator()
                        .merge_back([(key, row)], credit)
                        .pop()
                    else {
                        continue;
                    };
                    // Summing into the buffer would overflow, or the memory budget has
                    // no room for it: keep it on disk.
                    let bucket = match key.slot().owed_to() {
                        Some((_, bucket)) => bucket,
                        None => key.slot().minute().0,
                    };
                    let mut records = records_of(
                        family,
                        table,
                        &series,
                        (shard, epoch),
                        [(bucket, back.columns.as_slice())],
                        source,
                        RecordOutcome::Spilled,
                        error.as_ref(),
                    );
                    for r in &mut records {
                        r.row = u16::try_from(row_index).unwrap_or(u16::MAX);
                    }
                    batch.spill.push(Spilled {
                        // Unless every row of the request is refused (below), others are
                        // back in memory: dropped, this row must not mark the request
                        // dropped, or a kill before the flush's end would leave them to
                        // no one (recovery homes every row of a request not known
                        // settled, this one too: a drop counted once too often, never a
                        // row lost).
                        request: None,
                        table,
                        sum: back.columns.sum(),
                        records,
                    });
                }
                let refused = &mut batch.spill[first_refused..];
                if refused.len() == row_count {
                    // The whole request left memory: dropped, it is journaled so.
                    for item in refused {
                        item.request = Some(source.request);
                    }
                }
            }
            Action::Spill(error) => {
                let records = record_conversion::to_records(
                    &write,
                    family,
                    source,
                    RecordOutcome::Spilled,
                    error.as_ref(),
                );
                batch.spill.push(Spilled {
                    request: Some(source.request),
                    table: write.table,
                    sum,
                    records,
                });
            }
            Action::LogRejected(error) => {
                batch.rejected.extend(record_conversion::to_records(
                    &write,
                    family,
                    source,
                    RecordOutcome::Rejected,
                    Some(&error),
                ));
                self.ledger.update(write.table, |s| s.rejected += sum);
                tracing::warn!(table = %self.table_name(&write), kind = error.kind, error = %error.text, rows = write.rows.len(), "Write rejected; recorded in rejected.jsonl.");
            }
            Action::LogUnknown(error) => {
                batch.unknown.extend(record_conversion::to_records(
                    &write,
                    family,
                    source,
                    RecordOutcome::Unknown,
                    Some(&error),
                ));
                self.ledger.update(write.table, |s| s.unknown += sum);
                tracing::warn!(table = %self.table_name(&write), kind = error.kind, error = %error.text, rows = write.rows.len(), "Write outcome unknown; recorded in unknown.jsonl and not re-sent.");
            }
        }
    }
}

/// Now, in Unix seconds, as the decision table and re-queue times count it.
pub(super) fn now_unix_secs() -> u32 {
    u32::try_from(bucket::unix_secs(SystemTime::now())).unwrap_or(u32::MAX)
}
