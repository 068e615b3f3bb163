//! The flush loop: drain, plan, send with bounded concurrency, settle every outcome.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::Notify;

use crate::bucket;
use crate::config::FlushConfig;
use crate::engine::Engine;
use crate::sink::Sink;
use crate::state::{Recovered, StateDir, WriteRecord};
use crate::vocabulary::{DropReason, FamilyId, Granularity};

use super::ledger::Ledger;
use super::plan::{self, PlanOptions};
use super::records::{self, FlushIdentity};
use super::replay::{Origin, replay};
use super::send::{Sent, send_all};
use super::shutdown::{Deadline, ShutdownSignal, shutdown_channel};
use crate::sink::Outcome;
use crate::sink::PartitionWrite;
use crate::sink::WriteError;

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

/// Drains the engine into a sink on a schedule, and once more at shutdown.
pub struct Flusher<S> {
    engine: Arc<Engine>,
    sink: Arc<S>,
    config: FlushConfig,
    state: StateDir,
    ledger: Arc<Ledger>,
    seq: u64,
    shard_seed: u64,
    /// Whether the last flush found the store answering (something applied, nothing
    /// re-queued): the moment to bring rows spilled during an outage back.
    store_healthy: bool,
}

impl<S: Sink> Flusher<S> {
    /// A flusher; replays what the previous run spilled into the engine's buffer.
    pub fn new(
        engine: Arc<Engine>,
        sink: Arc<S>,
        config: FlushConfig,
        mut state: StateDir,
        recovered: Recovered,
        ledger: Arc<Ledger>,
    ) -> Flusher<S> {
        let shard_seed = state
            .writer_id
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            });
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

    /// Runs until shutdown is requested: flushes every interval (± jitter) and early when
    /// `early` is notified, then closes the buffer and does the final flush. The flush
    /// running at the request and the final flush share one deadline, fixed at the
    /// request (see [`super::shutdown`]).
    pub async fn run(mut self, mut shutdown: ShutdownSignal, early: Arc<Notify>) -> FlushReport {
        let mut deadline = Deadline::new(shutdown.clone(), self.config.shutdown_deadline);
        loop {
            let wait = self.next_interval();
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = early.notified() => {}
                _ = shutdown.requested() => break,
            }
            self.flush(&mut deadline, false).await;
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

    fn next_interval(&self) -> Duration {
        let jitter = self.config.jitter.as_nanos() as i128;
        let offset = if jitter > 0 {
            fastrand::i128(-jitter..=jitter)
        } else {
            0
        };
        let nanos = (self.config.interval.as_nanos() as i128 + offset).max(1_000_000);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    fn identity(&self) -> FlushIdentity {
        FlushIdentity {
            writer: self.state.writer_id.clone(),
            incarnation: self.state.incarnation,
            flush_seq: self.seq,
        }
    }

    async fn flush(&mut self, deadline: &mut Deadline, last: bool) -> FlushReport {
        let started = Instant::now();
        self.seq += 1;
        if self.store_healthy && !last && self.state.spill.has_pending() {
            // The store answers again: rows spilled during the outage go out with this
            // flush, through the same loaded/inflight steps as a replay at start.
            let tag = format!("{}-{}", self.state.incarnation, self.seq);
            match self.state.spill.reload(&tag) {
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
        let drained_sums = Granularity::ALL.map(|t| drained.sum(t));
        for table in Granularity::ALL {
            self.ledger
                .update(table, |s| s.in_flight += drained_sums[table.index()]);
        }

        let families = self.engine.families();
        let (seed, seq) = (self.shard_seed, self.seq);
        let shard_of = |family: FamilyId| {
            families
                .get(family)
                .sharding
                .as_ref()
                .map(|s| (seed.wrapping_add(seq) % u64::from(s.shards)) as u8)
        };
        let writes = plan::plan(
            drained.into_rows(),
            PlanOptions {
                max_batch_rows: self.config.max_batch_rows,
            },
            shard_of,
        );

        // Replayed rows are in this drain: from here on they may reach the store.
        let mut replay_begun = false;
        if self.state.spill.has_loaded() {
            match self.state.spill.begin_send() {
                Ok(()) => replay_begun = true,
                Err(error) => {
                    // Sending now could apply a replayed row that the next start would
                    // load again. Hold everything back instead.
                    tracing::error!(%error, "Could not mark the spill replay as started; holding this flush back.");
                    let results = writes.into_iter().map(|w| (w, Sent::NotStarted)).collect();
                    return self.settle(results, rows, drained_sums, started, last, false);
                }
            }
        }

        let results = send_all(&*self.sink, writes, self.config.max_in_flight, deadline).await;
        self.settle(results, rows, drained_sums, started, last, replay_begun)
    }

    fn settle(
        &mut self,
        results: Vec<(PartitionWrite, Sent)>,
        rows: usize,
        drained_sums: [i128; 2],
        started: Instant,
        last: bool,
        replay_begun: bool,
    ) -> FlushReport {
        let now = SystemTime::now();
        let now_secs = u32::try_from(bucket::unix_secs(now)).unwrap_or(u32::MAX);
        let time = bucket::rfc3339(now);
        let identity = self.identity();
        let max_age = u32::try_from(self.config.requeue_max_age.as_secs()).unwrap_or(u32::MAX);
        let mut report = FlushReport {
            seq: self.seq,
            rows,
            writes: results.len(),
            ..FlushReport::default()
        };
        let mut to_spill: Vec<(PartitionWrite, Option<WriteError>)> = Vec::new();

        for (write, sent) in results {
            let family = self.engine.families().get(write.family);
            let table = match write.table {
                Granularity::Minute => family.minute_table.to_string(),
                Granularity::Day => family.day_table.to_string(),
            };
            let sum = write.sum();
            match sent {
                Sent::Done(Outcome::Applied) => {
                    report.applied += 1;
                    self.ledger.count_write(&table, "applied");
                    self.ledger.update(write.table, |s| s.applied += sum);
                }
                Sent::Done(Outcome::NotAppliedTransient(failure)) => {
                    report.requeued += 1;
                    self.ledger.count_write(&table, "requeued");
                    let too_old = write.rows.iter().any(|r| {
                        r.requeued_since != 0
                            && now_secs.saturating_sub(r.requeued_since) >= max_age
                    });
                    if last || too_old {
                        to_spill.push((write, Some(failure)));
                    } else {
                        let refused = self
                            .engine
                            .aggregator()
                            .merge_back(plan::requeued_rows(write, now_secs));
                        for (key, row) in refused {
                            // Summing into the buffer would overflow: keep it on disk.
                            let family = key.family();
                            let single = plan::plan(
                                [(key, row)],
                                PlanOptions {
                                    max_batch_rows: usize::MAX,
                                },
                                |_| None,
                            );
                            for w in single {
                                debug_assert_eq!(w.family, family);
                                to_spill.push((w, Some(failure.clone())));
                            }
                        }
                    }
                }
                Sent::Done(Outcome::NotAppliedPermanent(failure)) => {
                    report.rejected += 1;
                    self.ledger.count_write(&table, "rejected");
                    let records = records::to_records(
                        &write,
                        family,
                        &identity,
                        "rejected",
                        Some(&failure),
                        &time,
                    );
                    append_all(
                        &mut self.state.rejected,
                        &records,
                        "rejected.jsonl",
                        &self.ledger,
                    );
                    self.ledger.update(write.table, |s| s.rejected += sum);
                    tracing::warn!(table, kind = failure.kind, error = %failure.text, rows = write.rows.len(), "Write rejected; recorded in rejected.jsonl.");
                }
                Sent::Done(Outcome::Unknown(failure)) => {
                    report.unknown += 1;
                    self.record_unknown(&write, &table, &identity, &failure, &time);
                }
                Sent::Cancelled => {
                    report.unknown += 1;
                    let failure = WriteError::new(
                        "cancelled_at_deadline",
                        "the shutdown deadline passed while the request was in flight",
                    );
                    self.record_unknown(&write, &table, &identity, &failure, &time);
                }
                Sent::NotStarted => to_spill.push((write, None)),
            }
        }

        report.spilled = to_spill.len();
        self.spill(to_spill, &identity, &time);
        for (log, name) in [
            (&mut self.state.unknown, "unknown.jsonl"),
            (&mut self.state.rejected, "rejected.jsonl"),
        ] {
            if let Err(error) = log.sync() {
                tracing::error!(%error, file = name, "Could not sync an outcome log.");
            }
        }
        if replay_begun && let Err(error) = self.state.spill.finish_send() {
            tracing::error!(%error, "Could not remove the replayed spill file; the next start will log its rows as unknown.");
        }
        for table in Granularity::ALL {
            self.ledger
                .update(table, |s| s.in_flight -= drained_sums[table.index()]);
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
        self.store_healthy = report.applied > 0 && report.requeued == 0;
        report
    }

    fn record_unknown(
        &mut self,
        write: &PartitionWrite,
        table: &str,
        identity: &FlushIdentity,
        failure: &WriteError,
        time: &str,
    ) {
        self.ledger.count_write(table, "unknown");
        let family = self.engine.families().get(write.family);
        let records = records::to_records(write, family, identity, "unknown", Some(failure), time);
        append_all(
            &mut self.state.unknown,
            &records,
            "unknown.jsonl",
            &self.ledger,
        );
        self.ledger
            .update(write.table, |s| s.unknown += write.sum());
        tracing::warn!(table, kind = failure.kind, error = %failure.text, rows = write.rows.len(), "Write outcome unknown; recorded in unknown.jsonl and not re-sent.");
    }

    fn spill(
        &mut self,
        writes: Vec<(PartitionWrite, Option<WriteError>)>,
        identity: &FlushIdentity,
        time: &str,
    ) {
        if writes.is_empty() {
            return;
        }
        let mut records: Vec<WriteRecord> = Vec::new();
        let mut sums = [0_i128; 2];
        for (write, failure) in &writes {
            let family = self.engine.families().get(write.family);
            records.extend(records::to_records(
                write,
                family,
                identity,
                "spilled",
                failure.as_ref(),
                time,
            ));
            sums[write.table.index()] += write.sum();
        }
        let written = records
            .iter()
            .try_for_each(|r| self.state.spill.append(r))
            .and_then(|()| self.state.spill.sync());
        match written {
            Ok(()) => {
                for table in Granularity::ALL {
                    self.ledger
                        .update(table, |s| s.spilled += sums[table.index()]);
                }
                tracing::warn!(
                    rows = records.len(),
                    "Rows spilled to disk; the next start replays them."
                );
            }
            Err(error) => {
                // Part of the batch may be on disk; it is replayed next time, so counting
                // the whole batch as dropped overstates the loss rather than hiding any.
                for table in Granularity::ALL {
                    self.ledger
                        .update(table, |s| s.dropped += sums[table.index()]);
                }
                self.ledger
                    .count_late_drop(DropReason::SpillFailed, records.len() as u64);
                tracing::error!(%error, rows = records.len(), "Could not write the spill file; these rows are lost.");
            }
        }
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

/// Appends records to an outcome log. A record that cannot be written is counted
/// (`countersink_outcome_records_lost_total{reason="write_error"}`) and logged: its delta
/// is still counted in its stage, but the line to reconcile it by hand is missing.
pub(super) fn append_all(
    log: &mut crate::state::JsonlLog,
    records: &[WriteRecord],
    name: &'static str,
    ledger: &Ledger,
) {
    for (i, record) in records.iter().enumerate() {
        if let Err(error) = log.append(record) {
            let lost = (records.len() - i) as u64;
            ledger.count_lost_records(name, "write_error", lost);
            tracing::error!(%error, file = name, records = lost, "Could not append outcome records.");
            return;
        }
    }
    ledger.count_lost_records(name, "rotated_out", log.take_deleted_records());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> WriteRecord {
        serde_json::from_str(
            r#"{"time":"t","writer":"w","incarnation":1,"flush_seq":1,"outcome":"unknown","family":"generic",
                "table":"ks.t","granularity":"minute","key":{},"day":"2026-11-30","minute":1,"deltas":{"value":1}}"#,
        )
        .unwrap()
    }

    /// A full disk (`/dev/full` answers every write with ENOSPC) loses the records but
    /// never silently: they are counted.
    #[test]
    fn records_that_cannot_be_written_are_counted() {
        let ledger = Ledger::default();
        let mut log = crate::state::JsonlLog::open("/dev/full".into(), u64::MAX, 1).unwrap();
        append_all(
            &mut log,
            &[record(), record(), record()],
            "unknown.jsonl",
            &ledger,
        );
        assert_eq!(ledger.lost_records()[&("unknown.jsonl", "write_error")], 3);
    }

    #[test]
    fn records_deleted_by_rotation_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::default();
        let mut log =
            crate::state::JsonlLog::open(dir.path().join("rejected.jsonl"), 10, 1).unwrap();
        for _ in 0..4 {
            append_all(&mut log, &[record()], "rejected.jsonl", &ledger);
        }
        assert_eq!(ledger.lost_records()[&("rejected.jsonl", "rotated_out")], 2);
    }
}
