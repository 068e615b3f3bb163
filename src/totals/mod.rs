//! Counting without counters (seed 002): the `writer_totals` counting mode.
//!
//! In a `writer_totals` family each writer keeps, for every row it counts (key x minute,
//! key x day), its running absolute total since its incarnation started, and writes that
//! total into a row of its own: the tables are regular tables with `bigint` columns and a
//! `writer` clustering column. A read sums the writers. Every write is idempotent and
//! carries its write time from the writer's monotonic clock (`USING TIMESTAMP`), so a
//! write may be retried after any error, timeouts included, and an older total arriving
//! late never replaces a newer one: there are no unknown outcomes to log, and a new
//! incarnation starts a new writer column at zero without reading anything back.
//!
//! The flusher drains the buffer as for counters and hands this path the rows of
//! `writer_totals` families ([`Totals::take`]); the rest of a flush is [`Totals::flush`]:
//!
//! - `book`: the running totals per open row, the rows the store may lack, back-off,
//!   and the release of closed rows (memory is charged to the buffer's budget);
//! - `clock`: the writer's monotonic write times;
//! - what becomes of each write is decided by the one decision table
//!   ([`crate::stage::decide()`]), in its `writer_totals` column;
//! - sending: the shared bounded loop ([`crate::sink::bounded`]), up to the shutdown
//!   deadline;
//! - [`records`]: a spilled total is a [`crate::state::WriteRecord`] with its
//!   [`crate::state::TotalOf`], in a totals segment of the state directory's one spill;
//! - `replay`: spilled totals written again through the spill's one replay cursor, a
//!   chunk per flush, idempotent by construction;
//! - `recovery`: the intents of a killed flush's totals stage, written again.
//!
//! The intent journal: a flush's totals writes are a journal group of their own, after
//! its counter writes' group (numbered after them, so request ids stay unique per
//! flush), made durable before the first is sent, naming the replay cursor past the
//! chunk of spilled totals it carries. Recovery spills every intent not known applied,
//! to be written again, instead of logging it as unknown: idempotent by its write time.
//!
//! Accounting: a drained delta of such a family stays in the flusher's `in_flight` stage
//! (pending) until a write that covers it applies; the newly applied part of a confirmed
//! total moves to `applied`. A crash loses what was not applied yet and not in the
//! journal's last group (bounded by what `status.json` reports after each flush); the rows
//! the crashed incarnation did write stay in its writer column and keep counting.

mod book;
mod clock;
pub mod intent;
pub mod records;
pub(crate) mod recovery;
mod replay;
mod stage;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::SystemTime;

use crate::aggregate::{Columns, Credit, Row, RowKey, Slot};
use crate::bucket;
use crate::config::{CountingMode, FlushConfig};
use crate::engine::Engine;
use crate::family::FamilyDef;
use crate::sink::bounded::Cutoff;
use crate::sink::{Sink, TotalRow, TotalsWrite};
use crate::state::{Cursor, FamilyEntry, FlushId, KindIntent, StateDir, WriteRecord};
use crate::telemetry::Ledger;
use crate::vocabulary::{DropReason, Granularity};

use self::book::{Book, Closing, RowId, RowRef};
use self::clock::WriterClock;
pub use self::intent::{TotalsIntent, TotalsIntentRow};
use self::records::Recorder;
pub use self::recovery::Recovery;
use self::replay::{Reading, Replays};
use self::stage::TotalsStage;

/// What the totals part of one flush did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TotalsReport {
    /// Write requests sent (or due and cut off by the deadline).
    pub writes: usize,
    /// Requests applied.
    pub applied: usize,
    /// Requests that did not apply, or may not have (retried later).
    pub failed: usize,
    /// Requests refused permanently.
    pub rejected: usize,
    /// Rows whose newest total went to the spill (with replayed rows carried again).
    pub rows_spilled: usize,
    /// Closed rows released from memory.
    pub rows_released: usize,
    /// Rows replayed from the spill that applied.
    pub rows_replayed: usize,
}

impl TotalsReport {
    /// Adds the figures of a later chunk of the same flush round.
    pub(crate) fn add(&mut self, chunk: &TotalsReport) {
        // Destructured, so that a field added later cannot be left out of the sum.
        let TotalsReport {
            writes,
            applied,
            failed,
            rejected,
            rows_spilled,
            rows_released,
            rows_replayed,
        } = chunk;
        self.writes += writes;
        self.applied += applied;
        self.failed += failed;
        self.rejected += rejected;
        self.rows_spilled += rows_spilled;
        self.rows_released += rows_released;
        self.rows_replayed += rows_replayed;
    }
}

/// What each planned write stands for.
enum Planned {
    /// Rows of the book, with the part of each row's total not known applied.
    Book(Vec<Columns>),
    /// One replayed row (its index among the replays).
    Replay(usize),
}

/// The `writer_totals` path of one writer: its running totals, its clock, its spill.
pub struct Totals {
    engine: Arc<Engine>,
    book: Book,
    clock: WriterClock,
    /// This incarnation's writer column: writer id, incarnation, start nonce.
    writer: Arc<str>,
    writer_id: String,
    incarnation: u64,
    replays: Replays,
    max_batch_rows: usize,
    max_in_flight: usize,
    requeue_max_age_secs: u32,
    /// Whether some family counts with writer totals.
    enabled: bool,
    /// Whether the last flush that wrote anything saw the store apply and nothing fail:
    /// the moment to bring rows spilled during an outage back. True at start, so the
    /// first flush tries.
    store_answered: bool,
    /// Rows and sums (minute, day) the last flush could neither write nor spill.
    lost: (u64, [i128; Granularity::COUNT]),
    /// The families as the journal describes them.
    families: Vec<FamilyEntry>,
}

impl Totals {
    /// The totals path of the writer owning `state` (what earlier runs spilled is
    /// replayed by the flushes, through the spill's cursor).
    pub fn open(engine: Arc<Engine>, state: &StateDir, flush: &FlushConfig) -> Totals {
        // The start nonce of the state directory: the one its requests and ledger rows
        // carry too.
        let writer: Arc<str> = format!(
            "{}/{}/{:08x}",
            state.writer_id(),
            state.incarnation(),
            state.nonce()
        )
        .into();
        let enabled = engine.families().any_in(CountingMode::WriterTotals);
        let max_past = engine.aggregator().limits().timestamp_max_past;
        let max_past_secs = i64::try_from(max_past.as_secs()).unwrap_or(i64::MAX);
        Totals {
            book: Book::new(Closing { max_past_secs }),
            clock: WriterClock::default(),
            writer,
            writer_id: state.writer_id().to_owned(),
            incarnation: state.incarnation(),
            replays: Replays::default(),
            max_batch_rows: flush.max_batch_rows.max(1),
            max_in_flight: flush.max_in_flight.max(1),
            requeue_max_age_secs: u32::try_from(flush.requeue_max_age.as_secs())
                .unwrap_or(u32::MAX),
            enabled,
            store_answered: true,
            lost: (0, [0; Granularity::COUNT]),
            families: engine
                .families()
                .iter()
                .map(crate::state::FamilyEntry::of)
                .collect(),
            engine,
        }
    }

    /// Reads the next chunk of spilled totals, within the memory budget.
    fn load_replay_chunk(&mut self, ledger: &Ledger, state: &mut StateDir, seq: u64) {
        let time = bucket::rfc3339(SystemTime::now());
        let by = Recorder {
            writer: &self.writer_id,
            incarnation: self.incarnation,
            flush_seq: seq,
            request_id: String::new(),
            row: 0,
            time: &time,
        };
        let reading = Reading {
            aggregator: self.engine.aggregator(),
            families: self.engine.families(),
            ledger,
            by: &by,
        };
        self.replays.load_chunk(&reading, state);
    }

    /// This incarnation's writer column value.
    pub fn writer(&self) -> &str {
        &self.writer
    }

    /// Whether the totals path has anything to do: a `writer_totals` family, rows held,
    /// or spill to replay (which may hold totals a configuration of before wrote).
    pub fn is_active(&self, state: &StateDir) -> bool {
        self.enabled || self.book.held() > 0 || state.has_unreplayed()
    }

    /// Rows of the book the store may lack, written or not: what a final flush must see
    /// fall between its chunks to go on.
    pub fn unwritten_rows(&self) -> usize {
        self.book.unwritten()
    }

    /// Whether rows of the book are due at flush `seq` (every unwritten row when `all`)
    /// beyond what a flush's stage took for want of room.
    pub fn has_due(&self, seq: u64, all: bool) -> bool {
        self.book.has_due(seq, all)
    }

    /// Rows whose newest total the store may lack, and the signed sums (minute, day) of
    /// what of them is not known applied: what a crash now would lose. Replayed rows are
    /// not in it: the spill holds them until their flush settles them.
    pub fn pending(&self) -> (usize, [i128; Granularity::COUNT]) {
        (
            self.book.unwritten(),
            Granularity::ALL.map(|g| self.book.unconfirmed_sum(g)),
        )
    }

    /// Rows held in memory, and of those the ones the store may lack.
    pub fn rows(&self) -> (usize, usize) {
        (self.book.held(), self.book.unwritten())
    }

    /// The one point where the flush path splits by counting mode: the drained rows of
    /// `writer_totals` families are added to their running totals; the others are
    /// returned for the counter path. A delta that cannot be added (the budget is full,
    /// its row was released, a total would overflow) is dropped and counted.
    pub fn take(
        &mut self,
        rows: impl Iterator<Item = (RowKey, Row)>,
        credit: &mut Credit,
        ledger: &Ledger,
    ) -> Vec<(RowKey, Row)> {
        let families = self.engine.families();
        if !self.enabled {
            return rows.collect();
        }
        let mut counters = Vec::new();
        let mut absorbed = [0_i128; Granularity::COUNT];
        for (key, row) in rows {
            if families.mode(key.family()) != CountingMode::WriterTotals {
                counters.push((key, row));
                continue;
            }
            // The running totals take over the drained row's room, still charged (no
            // intake thread can take it in between), and claim what more they need.
            let given = credit.hand_over_row(self.engine.aggregator().charge_of(&key, &row));
            let family = key.family();
            let key_was_fresh = key.slot().owed_to().is_none();
            let targets = targets_of(key.slot());
            let series = key.into_series();
            let row_refs: Vec<RowRef<'_>> = targets
                .iter()
                .flatten()
                .map(|&(table, bucket)| RowRef {
                    family,
                    table,
                    series: &series,
                    bucket,
                })
                .collect();
            let sum = row.columns.sum();
            // A delta goes to its minute and its day, or to neither (they never disagree).
            let absorbed_now =
                self.book
                    .absorb_all(&row_refs, &row.columns, given, self.engine.aggregator());
            for row_ref in &row_refs {
                match absorbed_now {
                    Ok(()) => absorbed[row_ref.table.index()] += sum,
                    Err(reason) => {
                        ledger.update(row_ref.table, |s| s.dropped += sum);
                        ledger.count_late_drop(reason, 1);
                    }
                }
            }
            // A fresh delta owes nothing to the granularities the family has no table
            // of (hour, total): settled here. The flush's in-flight sum still carries it
            // and is taken down when the flush settles.
            if key_was_fresh {
                for g in Granularity::ALL {
                    if !row_refs.iter().any(|r| r.table == g) {
                        ledger.update(g, |s| s.no_table += sum);
                    }
                }
            }
        }
        for table in Granularity::ALL {
            ledger.update(table, |s| s.in_flight += absorbed[table.index()]);
        }
        counters
    }

    /// Writes the rows the store may lack (their newest totals) and a chunk of spilled
    /// totals (when `may_replay`: the spill may be read now), then settles every write:
    /// confirmed, retried later, spilled (at shutdown, with `last`), or rejected.
    /// `observe` is shown the planned writes before any is sent (the key index learns
    /// the keys from it).
    #[allow(clippy::too_many_arguments)]
    pub async fn flush<S: Sink>(
        &mut self,
        sink: &S,
        cutoff: &mut impl Cutoff,
        ledger: &Ledger,
        state: &mut StateDir,
        seq: u64,
        first_request: u32,
        (last, may_replay): (bool, bool),
        observe: &(dyn Fn(&[TotalsWrite]) + Sync),
    ) -> TotalsReport {
        let now = SystemTime::now();
        let now_secs = bucket::unix_secs(now);
        let mut report = TotalsReport::default();
        if !last {
            report.rows_released = self.book.release_closed(now_secs, self.engine.aggregator());
            // Not at the final flush, nor past the deadline, nor while the store fails:
            // the rows stay on disk.
            if may_replay && self.store_answered && !cutoff.passed() {
                self.load_replay_chunk(ledger, state, seq);
            }
        }
        let (writes, planned) = self.plan(seq, last);
        let flush = state.flush_id(seq);
        let max_in_flight = self.max_in_flight;
        let mut stage = TotalsStage {
            totals: self,
            state,
            ledger,
            observe,
            flush,
            planned: planned.into_iter().map(Some).collect(),
            first_request,
            last,
            now_unix_secs: now_secs,
            time: bucket::rfc3339(SystemTime::now()),
            to_spill: Vec::new(),
            kept_in_memory: Default::default(),
            rejected: Vec::new(),
            report,
            committed: false,
            consumed: None,
        };
        let done = stage::run(&mut stage, sink, writes, cutoff, max_in_flight).await;
        let mut report = stage.report;
        report.writes = done.requests;
        report.applied = done.applied;
        report.rejected = done.rejected;
        report.failed = done.requeued + done.unknown + done.not_sent;
        // A round that sent nothing says nothing of the store: the next may try a chunk
        // of the spill. Otherwise a refused replay round, with no traffic of this mode to
        // show the store answering again, would keep the spill (and every segment behind
        // its rows) waiting for a restart. While the store fails, that is one chunk tried
        // every other round.
        self.store_answered = if report.writes > 0 {
            report.applied > 0 && report.failed == 0
        } else {
            true
        };
        ledger.set_totals_rows(self.book.held() as u64, self.book.unwritten() as u64);
        report
    }

    /// The writes of flush `seq`: the book's due rows grouped by partition (at most
    /// `max_batch_rows` a write, each with the next write time), and one write per
    /// replayed row of the chunk in hand, with its own writer and write time.
    fn plan(&mut self, seq: u64, last: bool) -> (Vec<TotalsWrite>, Vec<Planned>) {
        let mut writes: Vec<TotalsWrite> = Vec::new();
        let mut planned = Vec::new();
        // Sorted by row id: rows of one partition are adjacent.
        let due = self.book.take_due(
            seq,
            last,
            self.engine.aggregator().limits().flush_chunk_bytes(),
        );
        type Group = (RowId, Vec<TotalRow>, Vec<Columns>);
        let mut current: Option<Group> = None;
        let mut close = |group: Option<Group>, clock: &mut WriterClock, writer: &Arc<str>| {
            if let Some((first, rows, unconfirmed)) = group {
                writes.push(TotalsWrite {
                    family: first.family,
                    table: first.table,
                    series: first.series,
                    writer: writer.clone(),
                    timestamp: clock.tick(clock::now_micros()),
                    rows,
                });
                planned.push(Planned::Book(unconfirmed));
            }
        };
        for due in due {
            let same = current.as_ref().is_some_and(|(first, rows, _)| {
                first.family == due.id.family
                    && first.table == due.id.table
                    && first.series == due.id.series
                    && first.partition_bucket() == due.id.partition_bucket()
                    && rows.len() < self.max_batch_rows
            });
            if !same {
                close(current.take(), &mut self.clock, &self.writer);
                current = Some((due.id.clone(), Vec::new(), Vec::new()));
            }
            if let Some((_, rows, unconfirmed)) = current.as_mut() {
                rows.push(TotalRow {
                    bucket: due.id.bucket,
                    totals: due.total,
                });
                unconfirmed.push(due.unconfirmed);
            }
        }
        close(current.take(), &mut self.clock, &self.writer);
        for (index, write) in self.replays.writes() {
            writes.push(write);
            planned.push(Planned::Replay(index));
        }
        (writes, planned)
    }

    /// The journal's intents of a flush's totals writes, numbered from `first_request`.
    fn intents(
        &self,
        writes: &[TotalsWrite],
        planned: &[&Planned],
        first_request: u32,
    ) -> Vec<KindIntent> {
        writes
            .iter()
            .zip(planned)
            .enumerate()
            .map(|(index, (write, planned))| {
                let unconfirmed: Vec<&Columns> = match planned {
                    Planned::Book(unconfirmed) => unconfirmed.iter().collect(),
                    Planned::Replay(row) => vec![self.replays.unconfirmed(*row)],
                };
                TotalsIntent {
                    request: first_request.saturating_add(index as u32),
                    family: write.family.0,
                    table: write.table,
                    writer: write.writer.to_string(),
                    timestamp: write.timestamp,
                    series: write.series.to_vec(),
                    rows: write
                        .rows
                        .iter()
                        .zip(unconfirmed)
                        .map(|(row, unconfirmed)| TotalsIntentRow {
                            bucket: row.bucket,
                            totals: row.totals.as_slice().to_vec(),
                            unconfirmed: unconfirmed.as_slice().to_vec(),
                        })
                        .collect(),
                    // Recovery keeps a replay's rows whatever room the spill has left.
                    replay: matches!(planned, Planned::Replay(_)),
                }
                .encode()
            })
            .collect()
    }

    /// Writes the flush's totals segment: `carried`, the record lines of the replayed
    /// rows it read up to `consumes` and could not settle, and how many (whole, whatever
    /// room is left: they are on disk already; `None`: they could not be serialized),
    /// then `spilled`, its own rows, while `state.max_spill_bytes` has room. Its own rows
    /// beyond it, or all of them when the segment cannot be written, are dropped and
    /// counted (`spill_full`, `spill_failed`), never lost silently; carried rows that
    /// are not written (the segment write failed) stay where they were read. Returns
    /// whether `carried` was kept, and the rows spilled.
    fn write_spill(
        &mut self,
        flush: &FlushId,
        consumes: Option<Cursor>,
        carried: Option<(Vec<u8>, usize)>,
        spilled: Vec<stage::SpilledTotal>,
        ledger: &Ledger,
        state: &mut StateDir,
    ) -> (bool, usize) {
        let serialized = carried.is_some();
        let (carried, carried_rows) = carried.unwrap_or_default();
        // A segment names the cursor only with every carried row in it.
        let consumes = consumes.filter(|_| serialized);
        if serialized && carried_rows == 0 && spilled.is_empty() {
            return (true, 0);
        }
        let batches: Vec<Vec<WriteRecord>> =
            spilled.iter().map(|row| vec![row.record.clone()]).collect();
        let (carried_kept, kept, failure) =
            match state.spill_totals(flush, consumes, &carried, &batches) {
                // Carried rows are kept whenever the segment is written.
                Ok(kept) => (serialized, kept, None),
                Err(error) => (false, vec![false; spilled.len()], Some(error)),
            };
        ledger.set_spill_bytes(state.spill_bytes().0);
        let mut dropped = Vec::new();
        let mut written = 0;
        for (row, kept) in spilled.into_iter().zip(kept) {
            if kept {
                ledger.update(row.table, |s| {
                    s.spilled += row.sum;
                    s.in_flight -= row.sum;
                });
                written += 1;
            } else {
                dropped.push(row);
            }
        }
        if written > 0 {
            tracing::warn!(
                rows = written,
                "Writer totals spilled to disk; they are written again once the store answers, or at the next start."
            );
        }
        if carried_rows > 0 && serialized && !carried_kept {
            tracing::warn!(
                rows = carried_rows,
                "Replayed writer totals that did not apply could not be written again; they stay where they were read, and are read again later (those that applied are written again, harmlessly)."
            );
        }
        if !dropped.is_empty() {
            self.drop_unspilled(&dropped, failure, ledger, state);
        }
        let carried = if carried_kept { carried_rows } else { 0 };
        (carried_kept, written + carried)
    }

    /// Counts spilled rows that could not be written: dropped, for `reason` the full
    /// budget or the write's `failure`.
    ///
    /// Each row's request is journaled `Dropped`, as the counter path does, unless a row
    /// of it went back to the book: recovery after a kill now must not spill (and so
    /// write) again what this process counted dropped, nor leave a row in memory to no
    /// one.
    fn drop_unspilled(
        &mut self,
        dropped: &[stage::SpilledTotal],
        failure: Option<std::io::Error>,
        ledger: &Ledger,
        state: &mut StateDir,
    ) {
        let mut sums = [0_i128; Granularity::COUNT];
        for row in dropped {
            ledger.update(row.table, |s| {
                s.dropped += row.sum;
                s.in_flight -= row.sum;
            });
            sums[row.table.index()] += row.sum;
            if let Some(request) = row.request {
                state.journal_outcome(request, &crate::state::Settled::Dropped);
            }
        }
        // On disk before anything else of the flush: a kill right after must find them.
        state.journal_flush();
        self.lost.0 += dropped.len() as u64;
        for (lost, sum) in self.lost.1.iter_mut().zip(sums) {
            *lost += sum;
        }
        let rows = dropped.len();
        match failure {
            Some(error) => {
                ledger.count_late_drop(DropReason::SpillFailed, rows as u64);
                tracing::error!(%error, rows, minute_sum = %sums[0], day_sum = %sums[1], "Could not write the totals spill segment; these totals are lost (counted in countersink_rows_dropped_total{{reason=\"spill_failed\"}}).");
            }
            None => {
                ledger.count_late_drop(DropReason::SpillFull, rows as u64);
                let (spill_bytes, max_spill_bytes) = state.spill_bytes();
                tracing::error!(rows, minute_sum = %sums[0], day_sum = %sums[1], spill_bytes, max_spill_bytes, "The spill is full (state.max_spill_bytes); these totals are lost (counted in countersink_rows_dropped_total{{reason=\"spill_full\"}}).");
            }
        }
    }

    /// Rows and sums (minute, day) the flush round could neither write nor spill, over
    /// all its chunks: what a final flush lost, for `status.json` (an unclean stop).
    pub fn lost(&self) -> (u64, [i128; Granularity::COUNT]) {
        self.lost
    }

    /// Starts counting a flush round's losses ([`Totals::lost`]) from nothing.
    pub fn reset_lost(&mut self) {
        self.lost = (0, [0; Granularity::COUNT]);
    }

    fn family(&self, id: &RowId) -> &FamilyDef {
        self.engine.families().get(id.family)
    }

    /// `keyspace.table` of a write.
    fn table_name(&self, write: &TotalsWrite) -> String {
        self.engine
            .families()
            .get(write.family)
            .table_text(write.table)
    }
}

impl Drop for Totals {
    fn drop(&mut self) {
        self.book.release_all(self.engine.aggregator());
        self.replays.release_all(self.engine.aggregator());
    }
}

/// The book rows a drained row of `slot` counts in: (table, bucket) of its minute and of
/// its day, as far as it has them.
///
/// Writer totals families have a minute and a day table only (the configuration refuses
/// others), and epoch families count with counters (their config refuses this mode).
fn targets_of(slot: Slot) -> [Option<(Granularity, u32)>; 2] {
    match slot.owed_to() {
        None => {
            let m = slot.minute();
            [
                Some((Granularity::Minute, m.0)),
                Some((Granularity::Day, m.day().0)),
            ]
        }
        Some(only) => [Some(only), None],
    }
}
