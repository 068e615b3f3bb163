//! What the wrapper did: the figures of `CounterSession::stats`, the accounting identity
//! of its deltas, and the Prometheus collector of the same figures.
//!
//! The identity, exact whenever no flush is running:
//!
//! ```text
//! buffered = applied + pending + in_flight + unknown + rejected + unsent
//! ```
//!
//! `buffered` is the signed sum of every delta the wrapper accepted instead of sending;
//! each other term is where those deltas are now. Requests that passed through are not in
//! it: the store answered them to the application itself.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;

use crate::sink::OutcomeClass;
use crate::telemetry::catalogue;

use super::buffer::Buffer;
use super::recognize::PassthroughReason;

/// Where the buffered deltas went, per stage (signed sums).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WrapperAccounting {
    /// Every delta accepted into the buffer.
    pub buffered: i128,
    /// Acknowledged by the store.
    pub applied: i128,
    /// In the buffer (re-queued rows included).
    pub pending: i128,
    /// Drained by the flush running now, not settled yet.
    pub in_flight: i128,
    /// In `unknown.jsonl`: may or may not have applied.
    pub unknown: i128,
    /// In `rejected.jsonl`, refused by the store.
    pub rejected: i128,
    /// Definitely not applied and not to be sent by this process: spilled (replayed by
    /// the next start) or, past the spill's limit or no longer matching the table, in
    /// `rejected.jsonl` (`spill_full`, `not_replayable`).
    pub unsent: i128,
}

impl WrapperAccounting {
    /// Whether every buffered delta is in exactly one stage.
    pub fn is_balanced(&self) -> bool {
        self.buffered
            == self.applied
                + self.pending
                + self.in_flight
                + self.unknown
                + self.rejected
                + self.unsent
    }

    /// The stages as `countersink_wrapper_stage_delta{stage}` labels them.
    pub fn stages(&self) -> [(&'static str, i128); 7] {
        [
            ("buffered", self.buffered),
            ("applied", self.applied),
            ("pending", self.pending),
            ("in_flight", self.in_flight),
            ("unknown", self.unknown),
            ("rejected", self.rejected),
            ("unsent", self.unsent),
        ]
    }
}

/// A copy of every figure.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WrapperStats {
    /// Requests sent to the store unchanged, by reason label (every reason, 0 included).
    pub passthrough: BTreeMap<&'static str, u64>,
    /// Executions (and statements of application batches) buffered.
    pub buffered: u64,
    /// Flushed write requests, by outcome class label.
    pub writes: BTreeMap<&'static str, u64>,
    /// Rows held: pending in the buffer, or drained by the flush running now (each keeps
    /// its room in `limits.max_pending_rows` until its write settles).
    pub pending_rows: u64,
    /// Flushes run.
    pub flushes: u64,
    /// Records missing from their log or spill: not written (the error is logged),
    /// unreadable in the spill, or in a rotated log file that rotation deleted
    /// (`state.max_log_files`).
    pub records_lost: u64,
    /// The accounting identity.
    pub accounting: WrapperAccounting,
}

impl WrapperStats {
    /// Requests passed through for `reason`.
    pub fn passed_through(&self, reason: PassthroughReason) -> u64 {
        self.passthrough.get(reason.label()).copied().unwrap_or(0)
    }

    /// Every request passed through.
    pub fn passed_through_total(&self) -> u64 {
        self.passthrough.values().sum()
    }

    /// Flushed requests of `class`.
    pub fn writes_of(&self, class: OutcomeClass) -> u64 {
        self.writes.get(class.label()).copied().unwrap_or(0)
    }
}

/// The settled sums, by stage.
#[derive(Default)]
struct Settled {
    applied: i128,
    in_flight: i128,
    unknown: i128,
    rejected: i128,
    unsent: i128,
}

/// The counters the session and its flusher update.
#[derive(Default)]
pub struct Counters {
    passthrough: [AtomicU64; PassthroughReason::ALL.len()],
    writes: [AtomicU64; OutcomeClass::ALL.len()],
    flushes: AtomicU64,
    records_lost: AtomicU64,
    settled: Mutex<Settled>,
}

/// Where a settled row's deltas went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Acknowledged.
    Applied,
    /// Unknown outcome.
    Unknown,
    /// Refused.
    Rejected,
    /// Not applied and not to be sent again.
    Unsent,
    /// Back in the buffer.
    Requeued,
}

impl Counters {
    /// One request passed through.
    pub fn passthrough(&self, reason: PassthroughReason) {
        self.passthrough[reason.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// One flushed request ended in `class`.
    pub fn write(&self, class: OutcomeClass) {
        let at = OutcomeClass::ALL
            .iter()
            .position(|c| *c == class)
            .unwrap_or(0);
        self.writes[at].fetch_add(1, Ordering::Relaxed);
    }

    /// A flush ran.
    pub fn flushed(&self) {
        self.flushes.fetch_add(1, Ordering::Relaxed);
    }

    /// Records that could not be written.
    pub fn records_lost(&self, records: u64) {
        self.records_lost.fetch_add(records, Ordering::Relaxed);
    }

    /// A flush drained rows summing to `sum`.
    pub fn drained(&self, sum: i128) {
        self.settled.lock().in_flight += sum;
    }

    /// Drained rows summing to `sum` settled in `stage`.
    pub fn settled(&self, sum: i128, stage: Stage) {
        let mut settled = self.settled.lock();
        settled.in_flight -= sum;
        match stage {
            Stage::Applied => settled.applied += sum,
            Stage::Unknown => settled.unknown += sum,
            Stage::Rejected => settled.rejected += sum,
            Stage::Unsent => settled.unsent += sum,
            Stage::Requeued => {}
        }
    }

    /// Every figure, with the buffer's.
    pub fn snapshot(&self, buffer: &Buffer) -> WrapperStats {
        let (buffered_adds, buffered_sum) = buffer.accepted();
        let pending = buffer.pending_sum();
        let settled = self.settled.lock();
        WrapperStats {
            passthrough: PassthroughReason::ALL
                .iter()
                .map(|r| {
                    (
                        r.label(),
                        self.passthrough[r.index()].load(Ordering::Relaxed),
                    )
                })
                .collect(),
            buffered: buffered_adds,
            writes: OutcomeClass::ALL
                .iter()
                .zip(&self.writes)
                .map(|(c, n)| (c.label(), n.load(Ordering::Relaxed)))
                .collect(),
            pending_rows: buffer.pending_rows() as u64,
            flushes: self.flushes.load(Ordering::Relaxed),
            records_lost: self.records_lost.load(Ordering::Relaxed),
            accounting: WrapperAccounting {
                buffered: buffered_sum,
                applied: settled.applied,
                pending,
                in_flight: settled.in_flight,
                unknown: settled.unknown,
                rejected: settled.rejected,
                unsent: settled.unsent,
            },
        }
    }
}

/// The wrapper's figures as Prometheus metrics, read at scrape time: register it in the
/// service's own registry.
pub struct WrapperCollector {
    counters: Arc<Counters>,
    buffer: Arc<Buffer>,
    descs: Vec<Desc>,
}

impl WrapperCollector {
    pub(super) fn new(counters: Arc<Counters>, buffer: Arc<Buffer>) -> WrapperCollector {
        let descs = families(&WrapperStats::default())
            .iter()
            .flat_map(|c| c.desc().into_iter().cloned().collect::<Vec<_>>())
            .collect();
        WrapperCollector {
            counters,
            buffer,
            descs,
        }
    }
}

/// The metric families of `stats`, one collector each.
fn families(stats: &WrapperStats) -> Vec<Box<dyn Collector>> {
    let passthrough = catalogue::WRAPPER_PASSTHROUGH.int_counter_vec();
    for (reason, n) in &stats.passthrough {
        passthrough.with_label_values(&[*reason]).inc_by(*n);
    }
    for reason in PassthroughReason::ALL {
        passthrough.with_label_values(&[reason.label()]);
    }
    let buffered = catalogue::WRAPPER_BUFFERED.int_counter();
    buffered.inc_by(stats.buffered);
    let writes = catalogue::WRAPPER_WRITES.int_counter_vec();
    for class in OutcomeClass::ALL {
        writes
            .with_label_values(&[class.label()])
            .inc_by(stats.writes_of(class));
    }
    let pending = catalogue::WRAPPER_PENDING_ROWS.int_gauge();
    pending.set(i64::try_from(stats.pending_rows).unwrap_or(i64::MAX));
    let delta_sum = catalogue::WRAPPER_DELTA_SUM.gauge_vec();
    for (stage, sum) in stats.accounting.stages() {
        delta_sum.with_label_values(&[stage]).set(sum as f64);
    }
    vec![
        Box::new(passthrough),
        Box::new(buffered),
        Box::new(writes),
        Box::new(pending),
        Box::new(delta_sum),
    ]
}

impl Collector for WrapperCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let stats = self.counters.snapshot(&self.buffer);
        families(&stats).iter().flat_map(|c| c.collect()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_collector_exports_exactly_the_catalogues_wrapper_metrics() {
        let counters = Arc::new(Counters::default());
        counters.passthrough(PassthroughReason::BufferFull);
        let buffer = Arc::new(Buffer::new(1, 10, 1 << 20));
        let collector = WrapperCollector::new(counters, buffer);
        let families = collector.collect();
        let mut exported: Vec<&str> = families.iter().map(|f| f.name()).collect();
        exported.sort();
        let mut expected: Vec<&str> = catalogue::WRAPPER_METRICS.iter().map(|m| m.name).collect();
        expected.sort();
        assert_eq!(exported, expected);
        assert_eq!(collector.desc().len(), expected.len());
        let passthrough = families
            .iter()
            .find(|f| f.name() == catalogue::WRAPPER_PASSTHROUGH.name)
            .unwrap();
        // Every reason is present from the start, at zero but the one counted.
        assert_eq!(passthrough.get_metric().len(), PassthroughReason::ALL.len());
        let total: f64 = passthrough
            .get_metric()
            .iter()
            .map(|m| m.get_counter().get_value())
            .sum();
        assert_eq!(total, 1.0);
    }

    #[test]
    fn the_identity_balances_only_when_every_stage_is_counted() {
        let mut a = WrapperAccounting {
            buffered: 10,
            applied: 4,
            pending: 3,
            in_flight: 0,
            unknown: 1,
            rejected: 1,
            unsent: 1,
        };
        assert!(a.is_balanced());
        a.unsent = 0;
        assert!(!a.is_balanced());
    }
}
