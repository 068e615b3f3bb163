//! Prometheus metrics on a registry of our own (never the global one, so several
//! pipelines can live in one process, and an embedding service can register ours into
//! its own registry).
//!
//! The hot path never touches a Prometheus object: stripes count in plain integers under
//! their own lock and the flusher keeps a ledger. [`EngineCollector`] reads both when a
//! scrape happens.

use std::sync::Arc;

use parking_lot::Mutex;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{
    Encoder, GaugeVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry, TextEncoder,
};

use crate::accounting::Accounting;
use crate::engine::Engine;
use crate::flush::Ledger;
use crate::line::{IgnoredKind, InvalidReason};
use crate::sink::OutcomeClass;
use crate::state::{LostRecords, OutcomeLog};
use crate::vocabulary::{DropReason, Granularity, Transport};

/// Reads the engine's and the flusher's counts at scrape time.
pub struct EngineCollector {
    engine: Arc<Engine>,
    ledger: Arc<Ledger>,
    families: Mutex<Families>,
    descs: Vec<Desc>,
}

/// The metric families, refilled on every scrape (under the mutex, so concurrent scrapes
/// do not interleave).
struct Families {
    lines_received: IntCounterVec,
    lines_invalid: IntCounterVec,
    lines_ignored: IntCounterVec,
    accepted: IntCounter,
    dropped: IntCounterVec,
    pending_rows: IntGauge,
    pending_bytes: IntGauge,
    cql_writes: IntCounterVec,
    flushes: IntCounter,
    delta_sum: GaugeVec,
    lost_records: IntCounterVec,
    previous_stop_unclean: IntGauge,
    previous_stop_pending_rows: IntGauge,
}

fn counter_vec(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    // Names and labels are constants of this file; they are valid.
    IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric options")
}

impl EngineCollector {
    /// A collector for `engine` and its flusher's `ledger`.
    pub fn new(engine: Arc<Engine>, ledger: Arc<Ledger>) -> EngineCollector {
        let families = Families {
            lines_received: counter_vec(
                "countersink_lines_received_total",
                "Lines received (valid or not), by transport.",
                &["transport"],
            ),
            lines_invalid: counter_vec(
                "countersink_lines_invalid_total",
                "Lines (and in-process calls) refused as invalid, by reason.",
                &["reason"],
            ),
            lines_ignored: counter_vec(
                "countersink_lines_ignored_total",
                "Well-formed lines of metric types countersink does not aggregate, by type.",
                &["type"],
            ),
            accepted: IntCounter::new(
                "countersink_increments_accepted_total",
                "Counter increments accepted (each value of a multi-value line counts).",
            )
            .expect("valid metric options"),
            dropped: counter_vec(
                "countersink_dropped_total",
                "Accepted increments (or settled rows) dropped on purpose by a limit, by reason.",
                &["reason"],
            ),
            pending_rows: IntGauge::new("countersink_pending_rows", "Rows buffered for the next flush.")
                .expect("valid metric options"),
            pending_bytes: IntGauge::new(
                "countersink_pending_bytes",
                "Estimated bytes of the rows buffered for the next flush.",
            )
            .expect("valid metric options"),
            cql_writes: counter_vec(
                "countersink_cql_writes_total",
                "Write requests (one UPDATE or one COUNTER BATCH), by table and outcome (applied, requeued, rejected, unknown).",
                &["table", "outcome"],
            ),
            flushes: IntCounter::new("countersink_flushes_total", "Flushes completed.").expect("valid metric options"),
            lost_records: counter_vec(
                "countersink_outcome_records_lost_total",
                "Records of unknown or rejected writes that are not in their log file: deleted by rotation (rotated_out) or not written (write_error). Their deltas are still counted in their stage.",
                &["log", "reason"],
            ),
            previous_stop_unclean: IntGauge::new(
                "countersink_previous_stop_unclean",
                "1 when the previous run in this state directory stopped without a clean shutdown (killed, crashed), losing what it held in memory; 0 otherwise.",
            )
            .expect("valid metric options"),
            previous_stop_pending_rows: IntGauge::new(
                "countersink_previous_stop_pending_rows",
                "Rows the previous run held in memory at its last flush when it stopped without a clean shutdown: a lower bound of the rows it lost. 0 after a clean stop.",
            )
            .expect("valid metric options"),
            delta_sum: GaugeVec::new(
                Opts::new(
                    "countersink_delta_sum",
                    "Signed sum of deltas per stage and table granularity; accepted equals the sum of the other stages when idle.",
                ),
                &["stage", "granularity"],
            )
            .expect("valid metric options"),
        };
        let mut descs = Vec::new();
        for collector in families.collectors() {
            descs.extend(collector.desc().into_iter().cloned());
        }
        descs.extend(ledger.flush_duration.desc().into_iter().cloned());
        EngineCollector {
            engine,
            ledger,
            families: Mutex::new(families),
            descs,
        }
    }
}

impl Families {
    fn collectors(&self) -> [&dyn Collector; 13] {
        [
            &self.lines_received,
            &self.lines_invalid,
            &self.lines_ignored,
            &self.accepted,
            &self.dropped,
            &self.pending_rows,
            &self.pending_bytes,
            &self.cql_writes,
            &self.flushes,
            &self.delta_sum,
            &self.lost_records,
            &self.previous_stop_unclean,
            &self.previous_stop_pending_rows,
        ]
    }
}

impl Collector for EngineCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let counters = self.engine.aggregator().counters();
        let accounting = Accounting::read(&self.engine, &self.ledger);
        let f = self.families.lock();

        f.lines_received.reset();
        for t in Transport::ALL {
            f.lines_received
                .with_label_values(&[t.as_str()])
                .inc_by(counters.received_for(t));
        }
        f.lines_invalid.reset();
        for r in InvalidReason::ALL {
            f.lines_invalid
                .with_label_values(&[r.as_str()])
                .inc_by(counters.invalid_for(r));
        }
        f.lines_ignored.reset();
        for k in IgnoredKind::ALL {
            f.lines_ignored
                .with_label_values(&[k.as_str()])
                .inc_by(counters.ignored_for(k));
        }
        f.accepted.reset();
        f.accepted.inc_by(counters.accepted);
        f.dropped.reset();
        let late = self.ledger.late_drops();
        for r in DropReason::ALL {
            let total = counters.dropped_for(r) + late.get(r.as_str()).copied().unwrap_or(0);
            f.dropped.with_label_values(&[r.as_str()]).inc_by(total);
        }
        f.pending_rows
            .set(i64::try_from(self.engine.aggregator().pending_rows()).unwrap_or(i64::MAX));
        f.pending_bytes
            .set(i64::try_from(self.engine.aggregator().pending_bytes()).unwrap_or(i64::MAX));
        f.cql_writes.reset();
        let writes = self.ledger.writes();
        // Every table and outcome is shown from the start (at 0), so dashboards and
        // alerts see the series before the first failure.
        for family in self.engine.families().iter() {
            for table in [&family.minute_table, &family.day_table] {
                let table = table.to_string();
                for class in OutcomeClass::ALL {
                    let n = writes.get(&(table.clone(), class)).copied().unwrap_or(0);
                    f.cql_writes
                        .with_label_values(&[table.as_str(), class.label()])
                        .inc_by(n);
                }
            }
        }
        f.flushes.reset();
        f.flushes.inc_by(self.ledger.flushes());
        f.lost_records.reset();
        let lost = self.ledger.lost_records();
        for log in OutcomeLog::ALL {
            for reason in LostRecords::ALL {
                let n = lost.get(&(log, reason)).copied().unwrap_or(0);
                f.lost_records
                    .with_label_values(&[log.file_name(), reason.as_str()])
                    .inc_by(n);
            }
        }
        let previous = self.ledger.unclean_previous_stop();
        f.previous_stop_unclean.set(i64::from(previous.is_some()));
        f.previous_stop_pending_rows
            .set(previous.map_or(0, |rows| i64::try_from(rows).unwrap_or(i64::MAX)));
        f.delta_sum.reset();
        for table in Granularity::ALL {
            for (stage, sum) in accounting.of(table).labelled() {
                f.delta_sum
                    .with_label_values(&[stage, table.as_str()])
                    .set(sum as f64);
            }
        }

        let mut out = Vec::new();
        for collector in f.collectors() {
            out.extend(collector.collect());
        }
        out.extend(self.ledger.flush_duration.collect());
        out
    }
}

/// A registry holding the engine's metrics, and the text rendering of `/metrics`.
pub struct Metrics {
    registry: Registry,
}

impl Metrics {
    /// A fresh registry with the engine collector registered.
    pub fn new(engine: Arc<Engine>, ledger: Arc<Ledger>) -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        registry.register(Box::new(EngineCollector::new(engine, ledger)))?;
        Ok(Metrics { registry })
    }

    /// The registry, to add more collectors (the sidecar's receivers) to it.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Everything in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut buffer = Vec::new();
        if let Err(error) = TextEncoder::new().encode(&self.registry.gather(), &mut buffer) {
            tracing::error!(%error, "Could not encode metrics.");
        }
        String::from_utf8(buffer).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn renders_the_minimum_set_with_bounded_labels() {
        let engine = Arc::new(Engine::with_seed(&Config::default(), Some(1)).unwrap());
        let ledger = Arc::new(Ledger::default());
        engine.ingest_packet(b"a:2|c\nbad\nb:1|g\n", Transport::Udp, 1_796_042_096);
        let metrics = Metrics::new(engine.clone(), ledger).unwrap();
        let text = metrics.render();
        for needle in [
            "countersink_lines_received_total{transport=\"udp\"} 3",
            "countersink_lines_received_total{transport=\"uds_stream\"} 0",
            "countersink_lines_invalid_total{reason=\"no_value\"} 1",
            "countersink_lines_ignored_total{type=\"gauge\"} 1",
            "countersink_increments_accepted_total 1",
            "countersink_dropped_total{reason=\"max_rows\"} 0",
            "countersink_pending_rows 1",
            "countersink_delta_sum{granularity=\"minute\",stage=\"accepted\"} 2",
            "countersink_delta_sum{granularity=\"day\",stage=\"pending\"} 2",
            "countersink_flush_duration_seconds_count 0",
            "countersink_flushes_total 0",
            "countersink_cql_writes_total{outcome=\"unknown\",table=\"countersink.counts_by_day\"} 0",
        ] {
            assert!(text.contains(needle), "missing `{needle}` in:\n{text}");
        }
        // A second scrape gives the same numbers, not doubled ones.
        assert_eq!(metrics.render(), text);
    }
}
