//! The flush loop: drain, plan, send with bounded concurrency, then execute what the
//! settle step decided for every write.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::Notify;

use crate::aggregate::{Credit, Row, RowKey};
use crate::bucket;
use crate::config::FlushConfig;
use crate::engine::Engine;
use crate::epoch::{self, EpochRegistry};
use crate::sink::{PartitionWrite, Sink};
use crate::stage::{self, Facts, StageCx, run_stage};
use crate::state::ingest_log::IngestLog;
use crate::state::{FamilyEntry, StateDir, WriteRecord, outcomes_mark};
use crate::test_hooks::crash_point;
use crate::totals::{Totals, TotalsReport};
use crate::vocabulary::Granularity;

use super::barrier::Barriers;
use super::ledger_gate::LedgerGate;
use super::observe::FlushObserver;
use super::plan::{self, PlanOptions};
use super::report::FlushReport;
use super::schedule::{Schedule, log_backoff};
use super::shutdown::{Deadline, ShutdownSignal, shutdown_channel};
use crate::telemetry::Ledger;

mod counters;
mod held;
mod ingest;
mod open;
mod replaying;
mod spill;

use self::counters::{CounterStage, Counters, Writes};

/// Drains the engine into a sink on a schedule, and once more at shutdown.
pub struct Flusher<S> {
    engine: Arc<Engine>,
    sink: Arc<S>,
    config: FlushConfig,
    state: StateDir,
    ledger: Arc<Ledger>,
    seq: u64,
    /// This writer's shard seed (see [`crate::family::shard_seed`]).
    shard_seed: u64,
    /// Whether the last flush that sent anything found the store answering (something
    /// applied, nothing re-queued): the moment to bring spilled rows back. True at start,
    /// so the first flush tries.
    store_healthy: bool,
    /// The families as the journal and the records describe them, by family id.
    families: Vec<FamilyEntry>,
    /// Rows and sums (minute, day) the last flush could neither send nor spill: what a
    /// final flush lost, for `status.json`.
    lost: (u64, [i128; Granularity::COUNT]),
    /// Told what each flush is about to send (see [`super::observe`]).
    observers: Vec<Arc<dyn FlushObserver>>,
    /// The epoch registry, when a family has an epoch column: which epoch each row goes
    /// to, or whether it must wait (see [`crate::epoch`]).
    epochs: Option<Arc<EpochRegistry>>,
    /// Rows the final flush held back, bound for its spill segment.
    held_spill: Vec<Spilled>,
    /// Writes (spilled, dropped) of the chunk's held segment, for its report.
    ledger_held: (usize, usize),
    /// The delta ledger's gate, when a family keeps exact totals (see
    /// [`super::ledger_gate`]).
    ledger_gate: Option<LedgerGate>,
    /// Whether stored ledger rows were loaded or `ledger_pending.jsonl` was written (at a
    /// shutdown deadline whose held rows no segment could take): the file is deleted once
    /// the gate confirmed every stored row.
    ledger_file: bool,
    /// The outcome logs' sizes last recorded in `outcomes.mark` (exact families only).
    outcomes_mark: Option<outcomes_mark::Mark>,
    /// The `writer_totals` families' path: their rows leave this one after the drain,
    /// and their writes are the flush's second stage.
    totals: Totals,
    /// Changes waiting for a flush round (see [`super::barrier`]).
    barriers: Option<Barriers>,
    /// The ingest log of durable requests, when there is one (see
    /// [`crate::state::ingest_log`]): each round moves it into the spill, offers a
    /// replay chunk whether or not the store looked healthy, and spills replayed rows
    /// that fail rather than keep them in memory, where a kill would lose them.
    ingest_log: Option<Arc<IngestLog>>,
    /// Sealed files of the ingest log whose segment is written but which could not be
    /// removed yet (their keys or their removal failed): no replay runs until they are
    /// gone (see `flusher/ingest.rs`).
    ingest_unremoved: std::collections::HashSet<std::path::PathBuf>,
}

impl<S: Sink> Flusher<S> {
    /// Places the rows of epoch families by `registry`'s view. Without a registry, every
    /// row of such a family is written to epoch 0.
    pub fn place_epochs(&mut self, registry: Arc<EpochRegistry>) {
        self.epochs = Some(registry);
    }

    /// The flush benchmark's baseline: flushes without the intent journal (feature `dev`;
    /// see [`StateDir::disable_journal_for_benchmark`]).
    #[cfg(feature = "dev")]
    pub fn disable_journal_for_benchmark(&mut self) {
        self.state.disable_journal_for_benchmark();
    }

    /// The journal's file.
    pub fn journal_path(&self) -> &std::path::Path {
        self.state.journal_path()
    }

    /// Takes barriers from `barriers` while running (see [`super::barrier`]).
    pub fn accept_barriers(&mut self, barriers: Barriers) {
        self.barriers = Some(barriers);
    }

    /// Adds an observer of every flush's planned writes.
    pub fn observe(&mut self, observer: Arc<dyn FlushObserver>) {
        self.observers.push(observer);
    }

    /// The ingest log durable requests go to, when there is one.
    pub fn ingest_log(&self) -> Option<&Arc<IngestLog>> {
        self.ingest_log.as_ref()
    }

    /// The accounting ledger.
    pub fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    /// The delta ledger's gate (exact families), for tests that shape it.
    #[cfg(test)]
    pub(crate) fn ledger_gate_mut(&mut self) -> Option<&mut LedgerGate> {
        self.ledger_gate.as_mut()
    }

    /// Makes every later write of the state directory's journal fail: no group commit
    /// is made from now on (tests of what a kill before one leaves on disk).
    #[cfg(test)]
    pub(crate) fn fail_journal_writes(&mut self) {
        self.state.fail_journal_writes();
    }

    /// The state directory (tests).
    #[cfg(test)]
    pub(crate) fn state(&self) -> &StateDir {
        &self.state
    }

    /// This incarnation's writer column in `writer_totals` tables.
    pub fn totals_writer(&self) -> &str {
        self.totals.writer()
    }

    /// Runs until shutdown is requested: flushes on the [`Schedule`] (every interval ±
    /// jitter, backing off while the store applies nothing) and early when `early` is
    /// notified and the buffer is still under pressure (never while backing off), then
    /// closes the buffer and does the final flush. The flush running at the request and
    /// the final flush share one deadline, fixed at the request (see [`super::shutdown`]).
    pub async fn run(mut self, mut shutdown: ShutdownSignal, early: Arc<Notify>) -> FlushReport {
        let mut deadline = Deadline::new(shutdown.clone(), self.config.shutdown_deadline);
        let mut schedule = Schedule::new(&self.config);
        let mut barriers = self.barriers.take();
        loop {
            let wait = schedule.next_wait(fastrand::f64());
            let next = tokio::time::sleep(wait);
            tokio::pin!(next);
            loop {
                tokio::select! {
                    _ = &mut next => break,
                    barrier = Barriers::next(&mut barriers) => {
                        // Between two scheduled flushes: one round of what is pending,
                        // then the change, before the next drain.
                        let report = self.flush(&mut deadline, false).await;
                        barrier.pass(report);
                        if shutdown.requested_at().is_some() {
                            return self.final_flush(deadline).await;
                        }
                    }
                    _ = early.notified(), if !schedule.backing_off() => {
                        // A notification stored while backing off (or made stale by a
                        // flush since) is not a reason to flush now.
                        if self.engine.aggregator().under_pressure() {
                            break;
                        }
                    }
                    _ = shutdown.requested() => return self.final_flush(deadline).await,
                }
            }
            let report = self.flush(&mut deadline, false).await;
            let was_backing_off = schedule.backing_off();
            schedule.record(&report);
            self.ledger.set_backoff(if schedule.backing_off() {
                schedule.backoff_ceiling()
            } else {
                Duration::ZERO
            });
            log_backoff(&schedule, was_backing_off, &report);
            if shutdown.requested_at().is_some() {
                break;
            }
        }
        self.final_flush(deadline).await
    }

    /// One flush without a deadline (tests and benchmarks drive flushes with this).
    pub async fn flush_now(&mut self) -> FlushReport {
        let (_handle, never) = shutdown_channel();
        let mut deadline = Deadline::new(never, self.config.shutdown_deadline);
        self.flush(&mut deadline, false).await
    }

    /// The final flush of shutdown, as `run` ends: closes the buffer, sends with the
    /// shutdown deadline (from now), spills the rest, records a clean stop.
    pub async fn finish(self) -> FlushReport {
        let grace = self.config.shutdown_deadline;
        self.final_flush(Deadline::new(ShutdownSignal::requested_now(), grace))
            .await
    }

    async fn final_flush(mut self, mut deadline: Deadline) -> FlushReport {
        self.engine.aggregator().close();
        // Everything in memory now is what a kill during the final flush can lose (sent
        // requests are journaled): the next start reports it, not the figure of the last
        // periodic flush, which misses what arrived since.
        self.write_pending_status();
        deadline.fix();
        let report = self.flush(&mut deadline, true).await;
        if let Some(gate) = &self.ledger_gate
            && gate.outcomes_queued() > 0
        {
            tracing::warn!(
                rows = gate.outcomes_queued(),
                "Outcome rows not written to the outcomes table before the deadline (they are in the local logs)."
            );
        }
        if let Some((held, _)) = self.ledger_gate.as_ref().map(LedgerGate::held)
            && held > 0
        {
            tracing::error!(
                rows = held,
                "The delta ledger did not confirm these rows' ledger rows before the shutdown deadline: they were not written to the counter tables and are lost (reported as pending at this stop)."
            );
        }
        let (rows, sums) = self.pending();
        let (totals_lost_rows, totals_lost_sums) = self.totals.lost();
        let lost_rows = self.lost.0 + totals_lost_rows;
        let lost_sums =
            Granularity::ALL.map(|g| self.lost.1[g.index()] + totals_lost_sums[g.index()]);
        // A stop is clean only when nothing was lost: a final flush that could not spill
        // what it could not send reports those rows as lost at the next start.
        let clean = rows == 0 && lost_rows == 0;
        let sums = Granularity::ALL.map(|g| sums[g.index()] + lost_sums[g.index()]);
        if let Err(error) = self
            .state
            .write_stopped_status(clean, rows as u64 + lost_rows, sums)
        {
            tracing::error!(%error, "Could not record the shutdown in status.json.");
        }
        report
    }

    /// One flush round: sends what is pending in chunks, each a flush of its own (its
    /// group commit, sends, settle step and journal end) whose writes fit the flush's
    /// share of the memory limit, so the round never holds a second copy of every
    /// pending row. The round ends once it drained as many rows as were pending when it
    /// began (rows arriving or re-queued meanwhile wait for the next round), when a chunk
    /// applied nothing (the schedule backs off), or when shutdown is requested (the final
    /// flush takes the rest). The final flush drains until nothing is left. Returns the
    /// chunks' reports summed, with the last chunk's sequence number.
    async fn flush(&mut self, deadline: &mut Deadline, last: bool) -> FlushReport {
        self.sync_families();
        self.lost = (0, [0; Granularity::COUNT]);
        self.totals.reset_lost();
        let mut round = FlushReport::default();
        if !last {
            // Not at the final flush, which replays nothing: the next start moves what the
            // log holds, before its listeners open, at no cost to the shutdown deadline.
            self.take_ingest_log();
        }
        // After the ingest log's move: its segments' ledger rows come first too, sent
        // now, so that steady durable traffic (a new segment every round) does not keep
        // the replay waiting round after round.
        self.confirm_stored_ledger(deadline).await;
        let ledger_first = self
            .ledger_gate
            .as_ref()
            .is_some_and(LedgerGate::has_stored);
        // With a durable listener every round offers a chunk: the log's rows reach the
        // store only through the replay, and nothing else may show the store healthy.
        let replay =
            (self.store_healthy || self.ingest_log.is_some()) && self.ingest_unremoved.is_empty();
        if !last && replay && !ledger_first {
            // The store answers: a chunk of spilled rows goes out with this round, as a
            // group of its own (once the ledger rows stored at a shutdown deadline are
            // confirmed: the spill may carry their deltas).
            let replayed = self.flush_replay(deadline).await;
            round.add(&replayed);
        }
        let mut owed = self.engine.aggregator().pending_rows();
        let gate_held = |f: &Self| f.ledger_gate.as_ref().map_or(0, |g| g.held().0);
        loop {
            let before = self.engine.aggregator().pending_rows();
            let totals_before = self.totals.unwritten_rows();
            let gate_before = gate_held(self);
            let chunk = self.flush_chunk(deadline, last).await;
            round.add(&chunk);
            owed = owed.saturating_sub(chunk.rows);
            let progressed = self.engine.aggregator().pending_rows() < before
                || self.totals.unwritten_rows() < totals_before
                || gate_held(self) < gate_before;
            // A chunk's totals stage, and the rows the ledger gate releases, take what
            // fits its share of the memory limit: the final flush goes on while the book
            // has rows left or confirmed rows wait. (A round leaves them to the next.)
            let left = last
                && (self.totals.has_due(self.seq + 1, true)
                    || self
                        .ledger_gate
                        .as_ref()
                        .is_some_and(LedgerGate::has_confirmed));
            let done = chunk.rows == 0 && !left
                || !progressed && last
                || !last
                    && (owed == 0
                        || chunk.writes > 0 && chunk.applied == 0
                        || deadline.at().is_some());
            if done {
                break;
            }
        }
        if last
            && self
                .ledger_gate
                .as_ref()
                .is_some_and(LedgerGate::has_confirmed)
        {
            // Ended with confirmed rows still waiting (no chunk made progress): spilled
            // with the rest rather than left in memory, under a sequence number of their
            // own (the last chunk's held segment, if it wrote one, has its own).
            self.seq += 1;
            let flush = self.state.flush_id(self.seq);
            let (spilled, dropped) = self.spill_ledger_held(&flush, true);
            round.spilled += spilled;
            round.dropped += dropped;
        }
        if last {
            self.send_outcomes(deadline, true).await;
        }
        if round.writes == 0 {
            // A round that sent nothing says nothing of the store: the next may try a
            // chunk of the spill. Otherwise an unanswered replay chunk, with no traffic
            // to show the store answering again, would keep the rest of the spill
            // waiting for a restart. While the store fails, that is one chunk tried every
            // other round (its rows re-queued in between).
            self.store_healthy = true;
        }
        round
    }

    /// Sends the stored ledger rows (an ingest log segment's, a held segment's) that wait
    /// to be confirmed before the replay, when the gate holds no drained rows (those go
    /// with the drain's own pass through the gate, which releases them to the plan).
    async fn confirm_stored_ledger(&mut self, deadline: &mut Deadline) {
        let Some(gate) = &mut self.ledger_gate else {
            return;
        };
        if !gate.has_stored() || gate.held().0 > 0 {
            return;
        }
        let flush = self.state.flush_id(self.seq);
        let mut credit = self.engine.aggregator().no_credit();
        let released = gate
            .admit(
                &*self.sink,
                &flush,
                Vec::new(),
                &mut credit,
                &super::ledger_gate::Costs {
                    charge: &|_, _| 0,
                    flush: &|_, _| 0,
                    share: usize::MAX,
                },
                self.config.max_in_flight,
                deadline,
                false,
            )
            .await;
        // No drained row was held, so none is released (and none is formed).
        debug_assert!(released.is_empty());
    }

    /// One chunk of a flush round (see [`Flusher::flush`]), in two stages: the counter
    /// families' writes, then the `writer_totals` families' (see [`Flusher::flush_totals`]);
    /// each stage a group of the intent journal. Then, but at the final flush (which
    /// sends them once, after its last chunk), the exact families' unknown and rejected
    /// rows go to the outcomes table.
    async fn flush_chunk(&mut self, deadline: &mut Deadline, last: bool) -> FlushReport {
        let report = self.drain_and_send(deadline, last).await;
        if !last {
            self.send_outcomes(deadline, false).await;
        }
        report
    }

    /// The exact families' unknown and rejected rows to the outcomes table, after the
    /// counter writes: they never wait for it (at the final flush, after all of them: a
    /// slow table would otherwise take the deadline's time chunk after chunk, and the
    /// later chunks would be spilled unsent).
    async fn send_outcomes(&mut self, deadline: &mut Deadline, last: bool) {
        if let Some(gate) = &mut self.ledger_gate {
            gate.send_outcomes(&*self.sink, deadline, last).await;
            // An empty queue that dropped rows has not written everything logged: the
            // mark stays, and the next start offers those rows again.
            if gate.outcomes_queued() == 0 && gate.outcomes_dropped() == 0 {
                self.advance_outcomes_mark();
            }
        }
    }

    async fn drain_and_send(&mut self, deadline: &mut Deadline, last: bool) -> FlushReport {
        let started = Instant::now();
        let mut report = self.flush_counters(deadline, last).await;
        report.totals = self.flush_totals(deadline, last, report.writes).await;
        self.ledger.count_flush(started.elapsed().as_secs_f64());
        report
    }

    /// The `writer_totals` stage of a flush, when there is anything to write: its
    /// requests are numbered after the `counter_writes` of the counter stage.
    async fn flush_totals(
        &mut self,
        deadline: &mut Deadline,
        last: bool,
        counter_writes: usize,
    ) -> TotalsReport {
        if !self.totals.is_active(&self.state) {
            return TotalsReport::default();
        }
        let observers = &self.observers;
        // As for the counter replay: not while a sealed ingest file's removal is pending
        // (see `flusher/ingest.rs`).
        let may_replay = self.ingest_unremoved.is_empty();
        let report = self
            .totals
            .flush(
                &*self.sink,
                deadline,
                &self.ledger,
                &mut self.state,
                self.seq,
                u32::try_from(counter_writes).unwrap_or(u32::MAX),
                (last, may_replay),
                &|writes| super::observe::tell(observers, writes),
            )
            .await;
        if !last {
            // The totals not yet applied after this stage: what a kill now loses.
            self.write_pending_status();
        }
        report
    }

    /// The counter families' stage: drain (handing `writer_totals` rows to the totals
    /// path), plan, group commit, send, settle.
    async fn flush_counters(&mut self, deadline: &mut Deadline, last: bool) -> FlushReport {
        self.seq += 1;
        let flush = self.state.flush_id(self.seq);
        if !last {
            // What is about to leave memory: a kill before this flush's group commit
            // loses these rows, and the next start reports them from this figure.
            self.write_pending_status();
        }
        // Rows the delta ledger's gate holds past their confirmation for want of room
        // go first: the chunk leaves their writes room in the flush's share.
        let aggregator = self.engine.aggregator();
        let share = aggregator.limits().flush_chunk_bytes();
        let waiting = self.ledger_gate.as_ref().map_or(0, |gate| {
            gate.confirmed_cost(&|key, row| aggregator.flush_charge_of(key, row))
        });
        let drained = aggregator.take_chunk_within(share - waiting.min(share));
        super::observe::drained(&self.observers);
        let rows = drained.len();
        let drained_sums = Granularity::ALL.map(|g| drained.sum(g));
        for g in Granularity::ALL {
            self.ledger
                .update(g, |s| s.in_flight += drained_sums[g.index()]);
        }
        // The drained rows keep their room in the memory budget until their writes
        // settle; rows merged back take theirs from it first (see [`Credit`]).
        let (drained, mut credit) = drained.into_parts();
        // The one point where the flush splits by counting mode.
        let rows_for_counters = self.totals.take(drained, &mut credit, &self.ledger);
        // The exact families' fresh rows wait here until their ledger rows are confirmed;
        // what the plan gets may include rows held by earlier flushes.
        let (admitted, planned_sums) = match &mut self.ledger_gate {
            None => (rows_for_counters, drained_sums),
            Some(gate) => {
                let before = gate.held().1;
                let aggregator = self.engine.aggregator();
                let rows = gate
                    .admit(
                        &*self.sink,
                        &flush,
                        rows_for_counters,
                        &mut credit,
                        &super::ledger_gate::Costs {
                            charge: &|key, row| aggregator.charge_of(key, row),
                            flush: &|key, row| aggregator.flush_charge_of(key, row),
                            share,
                        },
                        self.config.max_in_flight,
                        deadline,
                        last,
                    )
                    .await;
                let after = gate.held().1;
                let sums = Granularity::ALL
                    .map(|g| drained_sums[g.index()] + before[g.index()] - after[g.index()]);
                (rows, sums)
            }
        };
        if last {
            self.ledger_held = self.spill_ledger_held(&flush, false);
        }
        self.forget_confirmed_ledger_file();
        let mut drained_sums = planned_sums;
        let planned = self.plan(admitted);
        // Fresh deltas of families without a table of some granularity owe it nothing:
        // they leave that granularity's in-flight sum here.
        for g in Granularity::ALL {
            let none = planned.no_table[g.index()];
            drained_sums[g.index()] -= none;
            self.ledger.update(g, |s| {
                s.in_flight -= none;
                s.no_table += none;
            });
        }
        let held_sums = if last {
            self.spill_held(&flush, planned.held)
        } else {
            self.hold(planned.held, &mut credit)
        };
        // Held rows are pending again, not in flight.
        for g in Granularity::ALL {
            drained_sums[g.index()] -= held_sums[g.index()];
            self.ledger
                .update(g, |s| s.in_flight -= held_sums[g.index()]);
        }
        let writes = planned.writes;
        super::observe::tell(&self.observers, &writes);
        if !writes.is_empty() {
            crash_point("drained");
        }
        let sent = Counters {
            flush,
            writes,
            in_flight: drained_sums,
            consumes: None,
            last,
        };
        let (mut report, _) = self.send_counters(sent, &mut credit, deadline).await;
        report.rows = rows;
        report
    }

    /// The writes of rows: one per partition and table, each row placed in its epoch
    /// (or held, when the epoch registry cannot place it yet).
    fn plan(&self, rows: impl IntoIterator<Item = (RowKey, Row)>) -> plan::Planned {
        self.plan_in(rows, &self.epoch_view())
    }

    /// [`Flusher::plan`] under `view`.
    fn plan_in(
        &self,
        rows: impl IntoIterator<Item = (RowKey, Row)>,
        view: &EpochSnapshot,
    ) -> plan::Planned {
        let families = self.engine.families();
        let (seed, seq) = (self.shard_seed, self.seq);
        plan::plan_placed(
            rows,
            PlanOptions {
                max_batch_rows: self.config.max_batch_rows,
            },
            |family| families.shard_of(family, seed, seq),
            |family, series, minute| place(families, view, family, series, minute),
            |family, table| families.get(family).has(table),
        )
    }

    /// The epoch registry's view now, and its horizon (`None`: no registry).
    fn epoch_view(&self) -> EpochSnapshot {
        self.epochs.as_ref().map(|e| (e.view(), *e.horizon()))
    }

    /// Sends a group of counter writes through the stage runner and settles them;
    /// returns what it did, and whether its group commit was made.
    async fn send_counters(
        &mut self,
        sent: Counters,
        credit: &mut Credit,
        deadline: &mut Deadline,
    ) -> (FlushReport, bool) {
        let Counters {
            flush,
            writes,
            in_flight,
            consumes,
            last,
        } = sent;
        let facts = Facts::fresh(
            last,
            counters::now_unix_secs(),
            u32::try_from(self.config.requeue_max_age.as_secs()).unwrap_or(u32::MAX),
        );
        let max_in_flight = self.config.max_in_flight;
        let sink = Arc::clone(&self.sink);
        let seq = self.seq;
        let mut stage = CounterStage {
            flusher: self,
            flush,
            time: bucket::rfc3339(SystemTime::now()),
            credit,
            consumes,
            batch: Batch::default(),
            now_unix_secs: facts.now_unix_secs,
            last,
            in_flight,
            spilled: (0, 0),
            committed: false,
        };
        let done = run_stage(
            &mut stage,
            &Writes(&*sink),
            writes,
            StageCx {
                cutoff: deadline,
                max_in_flight,
                facts,
                first_request: 0,
            },
        )
        .await;
        let (spilled, dropped) = stage.spilled;
        let report = FlushReport {
            seq,
            writes: done.requests,
            applied: done.applied,
            requeued: done.requeued,
            rejected: done.rejected,
            unknown: done.unknown,
            spilled,
            dropped,
            ..FlushReport::default()
        };
        self.ledger.set_spill_bytes(self.state.spill_bytes().0);
        if report.writes > 0 {
            self.store_healthy = stage::store_answers(report.applied, report.requeued);
        }
        (report, done.committed)
    }

    /// Records what is pending in memory now in `status.json` (the lost-at-crash figure).
    fn write_pending_status(&self) {
        let (pending_rows, pending_sums) = self.pending();
        if let Err(error) = self
            .state
            .write_status(false, pending_rows as u64, pending_sums)
        {
            tracing::warn!(%error, "Could not write status.json.");
        }
    }

    /// Pending rows and the delta sums they owe the minute and day tables: what the
    /// buffer holds, the running totals not known applied (`writer_totals`), and the
    /// rows the ledger gate holds (exact families).
    fn pending(&self) -> (usize, [i128; Granularity::COUNT]) {
        let (rows, sums) = pending(&self.engine);
        let (totals_rows, totals_sums) = self.totals.pending();
        let (held, held_sums) = self
            .ledger_gate
            .as_ref()
            .map_or((0, [0; Granularity::COUNT]), LedgerGate::held);
        (
            rows + totals_rows + held,
            Granularity::ALL
                .map(|g| sums[g.index()] + totals_sums[g.index()] + held_sums[g.index()]),
        )
    }

    /// `keyspace.table` of the table `write` goes to.
    fn table_name(&self, write: &PartitionWrite) -> String {
        self.engine
            .families()
            .get(write.family)
            .table_text(write.table)
    }
}

/// One read of the epoch registry's view, and its horizon (`None`: no registry).
type EpochSnapshot = Option<(Option<Arc<epoch::EpochView>>, epoch::Horizon)>;

/// Where a row of (`family`, `series`, `minute`) goes under `view`.
fn place(
    families: &crate::family::Families,
    view: &EpochSnapshot,
    family: crate::vocabulary::FamilyId,
    series: &[u8],
    minute: crate::bucket::Minute,
) -> epoch::Placement {
    match (&families.get(family).epoch_column, view) {
        (None, _) => epoch::Placement::NoEpoch,
        (Some(_), None) => epoch::Placement::Epoch(0),
        (Some(_), Some((view, horizon))) => {
            epoch::choose(view.as_deref(), horizon, family, series, minute)
        }
    }
}

/// What a flush's settle step must write to files, collected while deciding.
#[derive(Default)]
struct Batch {
    spill: Vec<Spilled>,
    unknown: Vec<WriteRecord>,
    rejected: Vec<WriteRecord>,
}

/// Records of one write (or one row of it) bound for the spill.
struct Spilled {
    /// The request, when the item holds every row of it that left memory (then journaled
    /// `Dropped` if it cannot be spilled); `None` for a row held back (never planned into
    /// one) or refused by a re-queue (the request's other rows went back to memory).
    request: Option<u32>,
    table: Granularity,
    sum: i128,
    records: Vec<WriteRecord>,
}

/// Pending rows and the delta sums they owe the minute and day tables, for `status.json`.
fn pending(engine: &Engine) -> (usize, [i128; Granularity::COUNT]) {
    let aggregator = engine.aggregator();
    (
        aggregator.pending_rows(),
        Granularity::ALL.map(|g| aggregator.pending_sum(g)),
    )
}
