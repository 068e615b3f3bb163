//! The flusher's side of the delta accounting, and its per-table write counts: what
//! left the buffer and how it settled. Read at scrape time and by [`super::Accounting`].

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use prometheus::Histogram;

use crate::sink::OutcomeClass;
use crate::state::ingest_log::IngestLog;
use crate::state::{Appended, LostRecords, OutcomeLog, RecoveryReport};
use crate::vocabulary::{DropReason, Granularity};

use super::catalogue;

/// Signed delta sums, for one table granularity, by what became of them after leaving
/// the buffer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settled {
    /// Acknowledged by the store.
    pub applied: i128,
    /// Outcome unknown (logged, never re-sent).
    pub unknown: i128,
    /// Permanently rejected (logged).
    pub rejected: i128,
    /// Written to the spill for the next start.
    pub spilled: i128,
    /// Drained and not settled yet (a flush in progress).
    pub in_flight: i128,
    /// Read back from the spill at start (counted as accepted).
    pub replayed: i128,
    /// Dropped after leaving the buffer (the spill could not be written, or a
    /// replayed row would overflow).
    pub dropped: i128,
    /// Fresh deltas of families that have no table of this granularity: nothing is
    /// owed, so they settle when a flush drains them.
    pub no_table: i128,
}

/// What the flusher has settled since start.
pub struct Ledger {
    sums: Mutex<[Settled; Granularity::COUNT]>,
    writes: Mutex<BTreeMap<(String, OutcomeClass), u64>>,
    late_drops: Mutex<BTreeMap<&'static str, u64>>,
    lost_records: Mutex<BTreeMap<(OutcomeLog, LostRecords), u64>>,
    flushes: Mutex<u64>,
    /// The longest wait before the next flush while backing off; zero otherwise.
    backoff: Mutex<std::time::Duration>,
    /// Rows the previous run in this state directory held when it last flushed, and
    /// their delta sums (minute, day), when it did not stop cleanly; unset after a clean
    /// stop. Known at start and set once.
    unclean_previous_stop: OnceLock<(u64, [i128; Granularity::COUNT])>,
    /// What crash recovery finished for the previous run. Set once, at start.
    recovery: OnceLock<RecoveryReport>,
    /// Torn or unreadable lines set aside: unknown.jsonl, rejected.jsonl, spill.
    corrupt_lines: Mutex<[u64; 3]>,
    /// Bytes of spill on disk (the segments, whichever kind of write spilled them), as of the last flush.
    spill_bytes: Mutex<u64>,
    /// Time per flush, from drain to the last outcome recorded.
    pub(crate) flush_duration: Histogram,
    /// Running totals of `writer_totals` families held in memory, and of those the ones
    /// the store may lack, after the last flush.
    totals_rows: Mutex<(u64, u64)>,
    /// The delta ledger (exact families): its write requests by outcome class, and what
    /// waits for it.
    exact: Mutex<ExactLedgerCounts>,
    /// The ingest log of durable requests, when there is one: its size and fsyncs are
    /// read at scrape time.
    ingest_log: OnceLock<Arc<IngestLog>>,
}

/// The delta ledger's side (exact families), read at scrape time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExactLedgerCounts {
    /// Ledger write requests by outcome class (every attempt counts).
    pub writes: BTreeMap<OutcomeClass, u64>,
    /// Drained rows held out of the counter writes until their ledger rows are confirmed.
    pub held_rows: u64,
    /// Ledger rows formed and not confirmed yet.
    pub backlog_rows: u64,
    /// Signed delta sums (minute, day) of the held rows: the identity's `ledgered` stage.
    pub held_sums: [i128; Granularity::COUNT],
    /// Family-days the state directory owes the counters (see `flush::owed`).
    pub owed_days: u64,
    /// Owed marks waiting for the outcomes table.
    pub owed_marks_queued: u64,
    /// Outcome rows waiting for the outcomes table.
    pub outcome_rows_queued: u64,
    /// Outcome rows dropped from a full queue (their records stay in the local logs).
    pub outcome_rows_dropped: u64,
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger {
            sums: Mutex::default(),
            writes: Mutex::default(),
            late_drops: Mutex::default(),
            lost_records: Mutex::default(),
            flushes: Mutex::default(),
            backoff: Mutex::default(),
            unclean_previous_stop: OnceLock::new(),
            recovery: OnceLock::new(),
            corrupt_lines: Mutex::default(),
            spill_bytes: Mutex::default(),
            flush_duration: catalogue::FLUSH_DURATION.histogram(&catalogue::FLUSH_DURATION_BUCKETS),
            exact: Mutex::default(),
            totals_rows: Mutex::default(),
            ingest_log: OnceLock::new(),
        }
    }
}

impl Ledger {
    /// The settled sums of one table granularity now.
    pub fn settled(&self, table: Granularity) -> Settled {
        self.sums.lock()[table.index()].clone()
    }

    /// Write requests per (table, outcome class).
    pub fn writes(&self) -> BTreeMap<(String, OutcomeClass), u64> {
        self.writes.lock().clone()
    }

    /// Flushes completed.
    pub fn flushes(&self) -> u64 {
        *self.flushes.lock()
    }

    pub(crate) fn update(&self, table: Granularity, f: impl FnOnce(&mut Settled)) {
        f(&mut self.sums.lock()[table.index()]);
    }

    pub(crate) fn count_write(&self, table: &str, outcome: OutcomeClass) {
        *self
            .writes
            .lock()
            .entry((table.to_owned(), outcome))
            .or_default() += 1;
    }

    /// Rows dropped after leaving the buffer, per reason label
    /// (`countersink_rows_dropped_total`).
    pub fn late_drops(&self) -> BTreeMap<&'static str, u64> {
        self.late_drops.lock().clone()
    }

    pub(crate) fn count_late_drop(&self, reason: DropReason, rows: u64) {
        *self.late_drops.lock().entry(reason.as_str()).or_default() += rows;
    }

    /// Outcome records lost, per (log, reason).
    pub fn lost_records(&self) -> BTreeMap<(OutcomeLog, LostRecords), u64> {
        self.lost_records.lock().clone()
    }

    /// Counts the records an append to `log` lost (to rotation, or to a failed write).
    pub(crate) fn count_appended(&self, log: OutcomeLog, appended: &Appended) {
        let mut lost = self.lost_records.lock();
        for (reason, records) in appended.lost() {
            *lost.entry((log, reason)).or_default() += records;
        }
    }

    /// When the previous run in this state directory did not stop cleanly: the rows it
    /// held in memory as of its last flush (lost, with whatever arrived after it), and
    /// their delta sums (minute, day).
    pub fn unclean_previous_stop(&self) -> Option<u64> {
        self.unclean_previous_stop.get().map(|(rows, _)| *rows)
    }

    /// The delta sums (minute, day) of the rows an unclean previous stop lost.
    pub fn unclean_previous_stop_sums(&self) -> [i128; Granularity::COUNT] {
        self.unclean_previous_stop
            .get()
            .map_or([0; Granularity::COUNT], |(_, sums)| *sums)
    }

    pub(crate) fn set_unclean_previous_stop(
        &self,
        pending_rows: u64,
        sums: [i128; Granularity::COUNT],
    ) {
        // Called once, at start; a second call would change nothing.
        let _ = self.unclean_previous_stop.set((pending_rows, sums));
    }

    /// What crash recovery finished for the previous run.
    pub fn recovery(&self) -> RecoveryReport {
        self.recovery.get().cloned().unwrap_or_default()
    }

    /// Torn or unreadable lines set aside: unknown.jsonl, rejected.jsonl, spill.
    pub fn corrupt_lines(&self) -> [u64; 3] {
        *self.corrupt_lines.lock()
    }

    pub(crate) fn count_recovery(&self, report: &RecoveryReport, torn: [u64; 2]) {
        let _ = self.recovery.set(report.clone());
        let mut lines = self.corrupt_lines.lock();
        lines[0] += torn[0];
        lines[1] += torn[1];
        drop(lines);
        if report.dropped_rows > 0 {
            self.count_late_drop(DropReason::SpillFull, report.dropped_rows);
        }
    }

    pub(crate) fn count_corrupt_spill_lines(&self, lines: u64) {
        self.corrupt_lines.lock()[2] += lines;
    }

    /// Bytes of spill on disk (the segments, whichever kind of write spilled them), as of the last flush.
    pub fn spill_bytes(&self) -> u64 {
        *self.spill_bytes.lock()
    }

    pub(crate) fn set_spill_bytes(&self, bytes: u64) {
        *self.spill_bytes.lock() = bytes;
    }

    /// Bytes of the ingest log (active and sealed files) and its fsyncs so far; `None`
    /// without one.
    pub fn ingest_log(&self) -> Option<(u64, u64)> {
        self.ingest_log.get().map(|log| (log.bytes(), log.syncs()))
    }

    pub(crate) fn set_ingest_log(&self, log: Arc<IngestLog>) {
        let _ = self.ingest_log.set(log);
    }

    /// Running totals held in memory, and those the store may lack (`writer_totals`).
    pub fn totals_rows(&self) -> (u64, u64) {
        *self.totals_rows.lock()
    }

    pub(crate) fn set_totals_rows(&self, held: u64, unwritten: u64) {
        *self.totals_rows.lock() = (held, unwritten);
    }

    /// The longest wait before the next flush while the flusher backs off (the store
    /// applied nothing of the last flushes); zero while it flushes every interval.
    pub fn backoff(&self) -> std::time::Duration {
        *self.backoff.lock()
    }

    pub(crate) fn set_backoff(&self, ceiling: std::time::Duration) {
        *self.backoff.lock() = ceiling;
    }

    /// The delta ledger's counts now.
    pub fn exact_ledger(&self) -> ExactLedgerCounts {
        self.exact.lock().clone()
    }

    pub(crate) fn count_exact_ledger_write(&self, outcome: OutcomeClass) {
        *self.exact.lock().writes.entry(outcome).or_default() += 1;
    }

    pub(crate) fn set_exact_ledger_backlog(
        &self,
        held_rows: u64,
        backlog_rows: u64,
        held_sums: [i128; Granularity::COUNT],
    ) {
        let mut exact = self.exact.lock();
        exact.held_rows = held_rows;
        exact.backlog_rows = backlog_rows;
        exact.held_sums = held_sums;
    }

    pub(crate) fn set_exact_owed(&self, days: u64, marks_queued: u64) {
        let mut exact = self.exact.lock();
        exact.owed_days = days;
        exact.owed_marks_queued = marks_queued;
    }

    pub(crate) fn set_exact_outcome_rows(&self, queued: u64, dropped: u64) {
        let mut exact = self.exact.lock();
        exact.outcome_rows_queued = queued;
        exact.outcome_rows_dropped = dropped;
    }

    pub(crate) fn count_flush(&self, seconds: f64) {
        *self.flushes.lock() += 1;
        self.flush_duration.observe(seconds);
    }
}
