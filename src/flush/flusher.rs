//! The flush loop: drain, plan, send with bounded concurrency, then execute what the
//! settle step decided for every write.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::Notify;

use crate::aggregate::{Credit, Refused};
use crate::bucket;
use crate::config::{Config, FlushConfig};
use crate::engine::Engine;
use crate::family::shard_seed;
use crate::sink::{OutcomeClass, PartitionWrite, Sink, WriteError};
use crate::state::{OutcomeLog, RecordOutcome, Recovered, StateDir, StateError, WriteRecord};
use crate::vocabulary::{DropReason, Granularity};

use super::plan::{self, PlanOptions};
use super::record_conversion::{self, FlushIdentity};
use super::replay::{Origin, replay};
use super::schedule::Schedule;
use super::send::send_all;
use super::settle::{self, Action, Circumstances, Sent};
use super::shutdown::{Deadline, ShutdownSignal, shutdown_channel};
use crate::telemetry::Ledger;

/// What one flush did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlushReport {
    /// Flush sequence number.
    pub seq: u64,
    /// Rows drained from the buffer.
    pub rows: usize,
    /// Write requests planned.
    pub writes: usize,
    /// Requests applied.
    pub applied: usize,
    /// Requests re-queued in memory.
    pub requeued: usize,
    /// Requests rejected permanently.
    pub rejected: usize,
    /// Requests with an unknown outcome (including those cancelled at the deadline).
    pub unknown: usize,
    /// Requests spilled to disk (not attempted, or re-queued too long).
    pub spilled: usize,
}

impl FlushReport {
    fn count(&mut self, class: OutcomeClass) {
        match class {
            OutcomeClass::Applied => self.applied += 1,
            OutcomeClass::Requeued => self.requeued += 1,
            OutcomeClass::Rejected => self.rejected += 1,
            OutcomeClass::Unknown => self.unknown += 1,
        }
    }
}

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
    /// Whether the last flush found the store answering (something applied, nothing
    /// re-queued): the moment to bring rows spilled during an outage back.
    store_healthy: bool,
}

impl<S: Sink> Flusher<S> {
    /// Opens the state directory of `config`, reports an unclean previous stop (in the
    /// log and in the ledger), and replays what the previous run spilled.
    pub fn open(
        engine: Arc<Engine>,
        sink: Arc<S>,
        config: &Config,
    ) -> Result<Flusher<S>, StateError> {
        let (state, recovered) = StateDir::open(&config.state)?;
        let ledger = Arc::new(Ledger::default());
        if let Some(previous) = state.unclean_previous_run() {
            tracing::warn!(
                pending_rows = previous.pending_rows,
                pending_delta_sum = %previous.pending_sum,
                last_status = %previous.time,
                "The previous run did not shut down cleanly: the rows it held in memory (at least these, as of its last flush) were lost."
            );
            ledger.set_unclean_previous_stop(previous.pending_rows);
        }
        Ok(Flusher::new(
            engine,
            sink,
            config.flush.clone(),
            state,
            recovered,
            ledger,
        ))
    }

    /// A flusher on an open state directory; replays what the previous run spilled into
    /// the engine's buffer.
    pub fn new(
        engine: Arc<Engine>,
        sink: Arc<S>,
        config: FlushConfig,
        mut state: StateDir,
        recovered: Recovered,
        ledger: Arc<Ledger>,
    ) -> Flusher<S> {
        let shard_seed = shard_seed(state.writer_id());
        replay(&engine, &mut state, &ledger, recovered, Origin::PreviousRun);
        Flusher {
            engine,
            sink,
            config,
            state,
            ledger,
            seq: 0,
            shard_seed,
            store_healthy: false,
        }
    }

    /// The accounting ledger.
    pub fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    /// Runs until shutdown is requested: flushes on the [`Schedule`] (every interval ±
    /// jitter, backing off while the store applies nothing) and early when `early` is
    /// notified and the buffer is still under pressure (never while backing off), then
    /// closes the buffer and does the final flush. The flush running at the request and
    /// the final flush share one deadline, fixed at the request (see [`super::shutdown`]).
    pub async fn run(mut self, mut shutdown: ShutdownSignal, early: Arc<Notify>) -> FlushReport {
        let mut deadline = Deadline::new(shutdown.clone(), self.config.shutdown_deadline);
        let mut schedule = Schedule::new(&self.config);
        loop {
            let wait = schedule.next_wait(fastrand::f64());
            let next = tokio::time::sleep(wait);
            tokio::pin!(next);
            loop {
                tokio::select! {
                    _ = &mut next => break,
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
        deadline.fix();
        let report = self.flush(&mut deadline, true).await;
        let (rows, sum) = pending(&self.engine);
        if let Err(error) = self.state.write_status(rows == 0, rows as u64, sum) {
            tracing::error!(%error, "Could not record the clean shutdown in status.json.");
        }
        report
    }

    async fn flush(&mut self, deadline: &mut Deadline, last: bool) -> FlushReport {
        let started = Instant::now();
        self.seq += 1;
        if self.store_healthy && !last && self.state.has_spilled() {
            // The store answers again: rows spilled during the outage go out with this
            // flush, through the same loaded/inflight steps as a replay at start.
            let tag = format!("{}-{}", self.state.incarnation(), self.seq);
            match self.state.reload_spill(&tag) {
                Ok(recovered) => replay(
                    &self.engine,
                    &mut self.state,
                    &self.ledger,
                    recovered,
                    Origin::ThisRun,
                ),
                Err(error) => {
                    tracing::error!(%error, "Could not reload the spill file; it waits for the next start.")
                }
            }
        }
        let drained = self.engine.aggregator().take_all();
        let rows = drained.len();
        let drained_sums = Granularity::ALL.map(|g| drained.sum(g));
        // The drained rows keep their room in the memory budget until their writes
        // settle; rows merged back take theirs from it first.
        let (drained, mut credit) = drained.into_parts();
        for g in Granularity::ALL {
            self.ledger
                .update(g, |s| s.in_flight += drained_sums[g.index()]);
        }

        let families = self.engine.families();
        let (seed, seq) = (self.shard_seed, self.seq);
        let writes = plan::plan(
            drained,
            PlanOptions {
                max_batch_rows: self.config.max_batch_rows,
            },
            |family| families.shard_of(family, seed, seq),
        );

        // Replayed rows are in this drain: from here on they may reach the store.
        let mut replay_begun = false;
        if self.state.has_replay_loaded() {
            match self.state.begin_replay_send() {
                Ok(()) => replay_begun = true,
                Err(error) => {
                    // Sending now could apply a replayed row that the next start would
                    // load again. Hold everything back instead.
                    tracing::error!(%error, "Could not mark the spill replay as started; holding this flush back.");
                    let results = writes.into_iter().map(|w| (w, Sent::NotStarted)).collect();
                    return self.settle(
                        results,
                        &mut credit,
                        rows,
                        drained_sums,
                        started,
                        last,
                        false,
                    );
                }
            }
        }

        let results = send_all(&*self.sink, writes, self.config.max_in_flight, deadline).await;
        self.settle(
            results,
            &mut credit,
            rows,
            drained_sums,
            started,
            last,
            replay_begun,
        )
    }

    /// Decides (with [`settle::settle`]) and executes what becomes of every write, then
    /// closes the flush: outcome logs synced, replay finished, status recorded.
    /// `credit` is the drained rows' room in the memory budget; re-queued rows take
    /// theirs from it, the caller returns the rest once the flush is over.
    #[allow(clippy::too_many_arguments)]
    fn settle(
        &mut self,
        results: Vec<(PartitionWrite, Sent)>,
        credit: &mut Credit,
        rows: usize,
        drained_sums: [i128; 2],
        started: Instant,
        last: bool,
        replay_begun: bool,
    ) -> FlushReport {
        let now = SystemTime::now();
        let circumstances = Circumstances {
            now_unix_secs: u32::try_from(bucket::unix_secs(now)).unwrap_or(u32::MAX),
            requeue_max_age_secs: u32::try_from(self.config.requeue_max_age.as_secs())
                .unwrap_or(u32::MAX),
            final_flush: last,
        };
        let context = Context {
            identity: FlushIdentity {
                writer: self.state.writer_id().to_owned(),
                incarnation: self.state.incarnation(),
                flush_seq: self.seq,
            },
            time: bucket::rfc3339(now),
            now_unix_secs: circumstances.now_unix_secs,
        };
        let mut report = FlushReport {
            seq: self.seq,
            rows,
            writes: results.len(),
            ..FlushReport::default()
        };
        let mut to_spill: Vec<(PartitionWrite, Option<WriteError>)> = Vec::new();

        for (write, sent) in results {
            let decision = settle::settle(&write, sent, &circumstances);
            if let Some(class) = decision.counted {
                let table = self.table_name(&write);
                self.ledger.count_write(&table, class);
                report.count(class);
            }
            self.execute(write, decision.action, &context, credit, &mut to_spill);
        }

        report.spilled = to_spill.len();
        self.spill(to_spill, &context);
        for (log, error) in self.state.sync_logs() {
            tracing::error!(%error, file = log.file_name(), "Could not sync an outcome log.");
        }
        if replay_begun && let Err(error) = self.state.finish_replay_send() {
            tracing::error!(%error, "Could not remove the replayed spill file; the next start will log its rows as unknown.");
        }
        for g in Granularity::ALL {
            self.ledger
                .update(g, |s| s.in_flight -= drained_sums[g.index()]);
        }
        if !last {
            let (pending_rows, pending_sum) = pending(&self.engine);
            if let Err(error) = self
                .state
                .write_status(false, pending_rows as u64, pending_sum)
            {
                tracing::warn!(%error, "Could not write status.json.");
            }
        }
        self.ledger.count_flush(started.elapsed().as_secs_f64());
        self.store_healthy = settle::store_answers(report.applied, report.requeued);
        report
    }

    /// Carries out one action. Spills are collected in `to_spill` and written together.
    fn execute(
        &mut self,
        write: PartitionWrite,
        action: Action,
        context: &Context,
        credit: &mut Credit,
        to_spill: &mut Vec<(PartitionWrite, Option<WriteError>)>,
    ) {
        let sum = write.sum();
        match action {
            Action::Applied => self.ledger.update(write.table, |s| s.applied += sum),
            Action::Requeue(error) => {
                let refused = self
                    .engine
                    .aggregator()
                    .merge_back(plan::requeued_rows(write, context.now_unix_secs), credit);
                for Refused { key, row, .. } in refused {
                    // Summing into the buffer would overflow, or the memory budget has
                    // no room for it: keep it on disk.
                    let single = plan::plan(
                        [(key, row)],
                        PlanOptions {
                            max_batch_rows: usize::MAX,
                        },
                        |_| None,
                    );
                    to_spill.extend(single.into_iter().map(|w| (w, Some(error.clone()))));
                }
            }
            Action::Spill(error) => to_spill.push((write, error)),
            Action::LogRejected(error) => {
                self.log(OutcomeLog::Rejected, &write, &error, context);
                self.ledger.update(write.table, |s| s.rejected += sum);
                tracing::warn!(table = %self.table_name(&write), kind = error.kind, error = %error.text, rows = write.rows.len(), "Write rejected; recorded in rejected.jsonl.");
            }
            Action::LogUnknown(error) => {
                self.log(OutcomeLog::Unknown, &write, &error, context);
                self.ledger.update(write.table, |s| s.unknown += sum);
                tracing::warn!(table = %self.table_name(&write), kind = error.kind, error = %error.text, rows = write.rows.len(), "Write outcome unknown; recorded in unknown.jsonl and not re-sent.");
            }
        }
    }

    /// Appends the records of `write` to an outcome log. A record that cannot be written
    /// is counted (`countersink_outcome_records_lost_total`) and logged: its delta is
    /// still counted in its stage, but the line to reconcile it by hand is missing.
    fn log(
        &mut self,
        log: OutcomeLog,
        write: &PartitionWrite,
        error: &WriteError,
        context: &Context,
    ) {
        let outcome = match log {
            OutcomeLog::Unknown => RecordOutcome::Unknown,
            OutcomeLog::Rejected => RecordOutcome::Rejected,
        };
        let records = record_conversion::to_records(
            write,
            self.engine.families().get(write.family),
            &context.identity,
            outcome,
            Some(error),
            &context.time,
        );
        let appended = self.state.append(log, &records);
        self.ledger.count_appended(log, &appended);
    }

    fn spill(&mut self, writes: Vec<(PartitionWrite, Option<WriteError>)>, context: &Context) {
        if writes.is_empty() {
            return;
        }
        let mut records: Vec<WriteRecord> = Vec::new();
        let mut sums = [0_i128; 2];
        for (write, error) in &writes {
            records.extend(record_conversion::to_records(
                write,
                self.engine.families().get(write.family),
                &context.identity,
                RecordOutcome::Spilled,
                error.as_ref(),
                &context.time,
            ));
            sums[write.table.index()] += write.sum();
        }
        match self.state.spill(&records) {
            Ok(()) => {
                for g in Granularity::ALL {
                    self.ledger.update(g, |s| s.spilled += sums[g.index()]);
                }
                tracing::warn!(
                    rows = records.len(),
                    "Rows spilled to disk; the next start replays them."
                );
            }
            Err(error) => {
                // Part of the batch may be on disk; it is replayed next time, so counting
                // the whole batch as dropped overstates the loss rather than hiding any.
                for g in Granularity::ALL {
                    self.ledger.update(g, |s| s.dropped += sums[g.index()]);
                }
                self.ledger
                    .count_late_drop(DropReason::SpillFailed, records.len() as u64);
                tracing::error!(%error, rows = records.len(), "Could not write the spill file; these rows are lost.");
            }
        }
    }

    /// `keyspace.table` of the table `write` goes to.
    fn table_name(&self, write: &PartitionWrite) -> String {
        let family = self.engine.families().get(write.family);
        match write.table {
            Granularity::Minute => family.minute_table.to_string(),
            Granularity::Day => family.day_table.to_string(),
        }
    }
}

/// What every record of one flush's settle step carries.
struct Context {
    identity: FlushIdentity,
    /// RFC 3339, for the records.
    time: String,
    now_unix_secs: u32,
}

/// Says when the store stopped applying writes (once per doubling of the back-off, so a
/// long outage logs a handful of lines) and when it applies them again.
fn log_backoff(schedule: &Schedule, was_backing_off: bool, report: &FlushReport) {
    let failures = schedule.failures();
    if failures > 0 && failures.is_power_of_two() {
        tracing::warn!(
            consecutive_failed_flushes = failures,
            requests = report.writes,
            requeued = report.requeued,
            unknown = report.unknown,
            next_flush_within = ?schedule.backoff_ceiling(),
            "The store applied none of this flush's writes; backing off."
        );
    } else if was_backing_off && failures == 0 {
        tracing::info!(
            applied = report.applied,
            "The store applies writes again; flushing every interval."
        );
    }
}

/// Pending rows and the delta sum they owe the minute tables, for `status.json`.
fn pending(engine: &Engine) -> (usize, i128) {
    let aggregator = engine.aggregator();
    (
        aggregator.pending_rows(),
        aggregator.pending_sum(Granularity::Minute),
    )
}
