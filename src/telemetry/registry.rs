//! Prometheus metrics on a registry of our own (never the global one, so several
//! pipelines can live in one process, and an embedding service can register ours into
//! its own registry). [`EngineCollector`] reads the engine's counters and the flusher's
//! ledger when a scrape happens.

use std::sync::Arc;

use parking_lot::Mutex;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{
    Encoder, GaugeVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry, TextEncoder,
};

use crate::engine::Engine;
use crate::line::{IgnoredKind, InvalidReason};
use crate::sink::OutcomeClass;
use crate::state::{LostRecords, OutcomeLog};
use crate::vocabulary::{DropReason, Granularity, Transport};

use super::accounting::Accounting;
use super::catalogue;
use super::ledger::Ledger;

/// Reads the engine's and the flusher's counts at scrape time.
pub struct EngineCollector {
    engine: Arc<Engine>,
    ledger: Arc<Ledger>,
    series: Mutex<EngineSeries>,
    descs: Vec<Desc>,
}

/// The exported series, refilled on every scrape (under the mutex, so concurrent scrapes
/// do not interleave).
struct EngineSeries {
    lines_received: IntCounterVec,
    lines_invalid: IntCounterVec,
    lines_ignored: IntCounterVec,
    accepted: IntCounter,
    dropped: IntCounterVec,
    pending_rows: IntGauge,
    pending_bytes: IntGauge,
    cql_writes: IntCounterVec,
    flushes: IntCounter,
    backoff: prometheus::Gauge,
    delta_sum: GaugeVec,
    lost_records: IntCounterVec,
    previous_stop_unclean: IntGauge,
    previous_stop_pending_rows: IntGauge,
    writer_totals_rows: IntGaugeVec,
    rows_dropped: IntCounterVec,
    delta_sum_high: GaugeVec,
    delta_sum_low: GaugeVec,
    spill_bytes: IntGauge,
    ingest_log_bytes: IntGauge,
    ingest_log_syncs: IntCounter,
    corrupt_lines: IntCounterVec,
    previous_stop_pending_sum: GaugeVec,
    previous_stop_unknown_rows: IntGauge,
}

impl EngineCollector {
    /// A collector for `engine` and its flusher's `ledger`.
    pub fn new(engine: Arc<Engine>, ledger: Arc<Ledger>) -> EngineCollector {
        let families = EngineSeries {
            lines_received: catalogue::LINES_RECEIVED.int_counter_vec(),
            lines_invalid: catalogue::LINES_INVALID.int_counter_vec(),
            lines_ignored: catalogue::LINES_IGNORED.int_counter_vec(),
            accepted: catalogue::INCREMENTS_ACCEPTED.int_counter(),
            dropped: catalogue::DROPPED.int_counter_vec(),
            pending_rows: catalogue::PENDING_ROWS.int_gauge(),
            pending_bytes: catalogue::PENDING_BYTES.int_gauge(),
            cql_writes: catalogue::CQL_WRITES.int_counter_vec(),
            flushes: catalogue::FLUSHES.int_counter(),
            backoff: catalogue::FLUSH_BACKOFF.gauge(),
            lost_records: catalogue::OUTCOME_RECORDS_LOST.int_counter_vec(),
            previous_stop_unclean: catalogue::PREVIOUS_STOP_UNCLEAN.int_gauge(),
            previous_stop_pending_rows: catalogue::PREVIOUS_STOP_PENDING_ROWS.int_gauge(),
            delta_sum: catalogue::DELTA_SUM.gauge_vec(),
            writer_totals_rows: catalogue::WRITER_TOTALS_ROWS.int_gauge_vec(),
            rows_dropped: catalogue::ROWS_DROPPED.int_counter_vec(),
            delta_sum_high: catalogue::DELTA_SUM_HIGH.gauge_vec(),
            delta_sum_low: catalogue::DELTA_SUM_LOW.gauge_vec(),
            spill_bytes: catalogue::SPILL_BYTES.int_gauge(),
            ingest_log_bytes: catalogue::INGEST_LOG_BYTES.int_gauge(),
            ingest_log_syncs: catalogue::INGEST_LOG_SYNCS.int_counter(),
            corrupt_lines: catalogue::STATE_LINES_CORRUPT.int_counter_vec(),
            previous_stop_pending_sum: catalogue::PREVIOUS_STOP_PENDING_DELTA_SUM.gauge_vec(),
            previous_stop_unknown_rows: catalogue::PREVIOUS_STOP_UNKNOWN_ROWS.int_gauge(),
        };
        let mut descs = Vec::new();
        for collector in families.collectors() {
            descs.extend(collector.desc().into_iter().cloned());
        }
        descs.extend(ledger.flush_duration.desc().into_iter().cloned());
        EngineCollector {
            engine,
            ledger,
            series: Mutex::new(families),
            descs,
        }
    }
}

impl EngineSeries {
    fn collectors(&self) -> [&dyn Collector; 24] {
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
            &self.backoff,
            &self.delta_sum,
            &self.lost_records,
            &self.previous_stop_unclean,
            &self.previous_stop_pending_rows,
            &self.rows_dropped,
            &self.delta_sum_high,
            &self.delta_sum_low,
            &self.spill_bytes,
            &self.ingest_log_bytes,
            &self.ingest_log_syncs,
            &self.corrupt_lines,
            &self.previous_stop_pending_sum,
            &self.previous_stop_unknown_rows,
            &self.writer_totals_rows,
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
        let f = self.series.lock();

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
        for r in DropReason::INCREMENTS {
            f.dropped
                .with_label_values(&[r.as_str()])
                .inc_by(counters.dropped_for(r));
        }
        f.rows_dropped.reset();
        let late = self.ledger.late_drops();
        for r in DropReason::ROWS {
            let rows = late.get(r.as_str()).copied().unwrap_or(0);
            f.rows_dropped.with_label_values(&[r.as_str()]).inc_by(rows);
        }
        f.spill_bytes
            .set(i64::try_from(self.ledger.spill_bytes()).unwrap_or(i64::MAX));
        let (ingest_bytes, ingest_syncs) = self.ledger.ingest_log().unwrap_or((0, 0));
        f.ingest_log_bytes
            .set(i64::try_from(ingest_bytes).unwrap_or(i64::MAX));
        f.ingest_log_syncs.reset();
        f.ingest_log_syncs.inc_by(ingest_syncs);
        f.corrupt_lines.reset();
        let corrupt = self.ledger.corrupt_lines();
        for (file, lines) in ["unknown.jsonl", "rejected.jsonl", "spill"]
            .into_iter()
            .zip(corrupt)
        {
            f.corrupt_lines.with_label_values(&[file]).inc_by(lines);
        }
        f.pending_rows
            .set(i64::try_from(self.engine.aggregator().pending_rows()).unwrap_or(i64::MAX));
        f.pending_bytes
            .set(i64::try_from(self.engine.aggregator().pending_bytes()).unwrap_or(i64::MAX));
        f.cql_writes.reset();
        let writes = self.ledger.writes();
        // Every table and outcome is shown from the start (at 0), so dashboards and
        // alerts see the series before the first failure. Each table once: after a live
        // reload, two definitions of a family may name the same table.
        let mut tables: Vec<String> = self
            .engine
            .families()
            .iter()
            .flat_map(|f| f.granularities().map(|g| f.table_text(g)))
            .collect();
        tables.sort_unstable();
        tables.dedup();
        for table in tables {
            for class in OutcomeClass::ALL {
                let n = writes.get(&(table.clone(), class)).copied().unwrap_or(0);
                f.cql_writes
                    .with_label_values(&[table.as_str(), class.label()])
                    .inc_by(n);
            }
        }
        f.flushes.reset();
        f.flushes.inc_by(self.ledger.flushes());
        f.backoff.set(self.ledger.backoff().as_secs_f64());
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
        let (held, unwritten) = self.ledger.totals_rows();
        for (state, rows) in [("held", held), ("unwritten", unwritten)] {
            f.writer_totals_rows
                .with_label_values(&[state])
                .set(i64::try_from(rows).unwrap_or(i64::MAX));
        }
        f.delta_sum.reset();
        f.delta_sum_high.reset();
        f.delta_sum_low.reset();
        for table in Granularity::ALL {
            for (stage, sum) in accounting.of(table).labelled() {
                let labels = [stage, table.as_str()];
                f.delta_sum.with_label_values(&labels).set(sum as f64);
                let (high, low) = split_exact(sum);
                f.delta_sum_high.with_label_values(&labels).set(high as f64);
                f.delta_sum_low.with_label_values(&labels).set(low as f64);
            }
        }
        let lost = self.ledger.unclean_previous_stop_sums();
        f.previous_stop_pending_sum.reset();
        for table in Granularity::ALL {
            f.previous_stop_pending_sum
                .with_label_values(&[table.as_str()])
                .set(lost[table.index()] as f64);
        }
        f.previous_stop_unknown_rows
            .set(i64::try_from(self.ledger.recovery().unknown_rows).unwrap_or(i64::MAX));

        let mut out = Vec::new();
        for collector in f.collectors() {
            out.extend(collector.collect());
        }
        out.extend(self.ledger.flush_duration.collect());
        out
    }
}

/// An i128 as `(high, low)` with `sum = high * 10^15 + low` and `0 <= low < 10^15`:
/// both parts print exactly as float64 while `|sum| < 9 * 10^30`.
pub fn split_exact(sum: i128) -> (i128, i128) {
    (
        sum.div_euclid(catalogue::DELTA_SUM_SPLIT),
        sum.rem_euclid(catalogue::DELTA_SUM_SPLIT),
    )
}

/// A registry holding the engine's metrics, and the text rendering of `/metrics`.
pub struct Metrics {
    registry: Registry,
}

impl Metrics {
    /// A fresh registry with the engine collector registered.
    pub fn new(engine: Arc<Engine>, ledger: Arc<Ledger>) -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        registry.register(Box::new(EngineCollector::new(
            engine.clone(),
            ledger.clone(),
        )))?;
        registry.register(Box::new(super::exact::ExactLedgerCollector::new(ledger)))?;
        registry.register(Box::new(super::cardinality::CardinalityCollector::new(
            engine,
        )))?;
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
            "countersink_stage_delta{granularity=\"minute\",stage=\"accepted\"} 2",
            "countersink_stage_delta{granularity=\"day\",stage=\"pending\"} 2",
            "countersink_flush_duration_seconds_count 0",
            "countersink_flushes_total 0",
            "countersink_cql_writes_total{outcome=\"unknown\",table=\"countersink.counts_by_day\"} 0",
        ] {
            assert!(text.contains(needle), "missing `{needle}` in:\n{text}");
        }
        // A second scrape gives the same numbers, not doubled ones.
        assert_eq!(metrics.render(), text);
    }

    /// Sums beyond 2^53 (where float64 loses integers) come out exact in two parts.
    #[test]
    fn the_identity_is_exported_exactly_beyond_float_precision() {
        let engine = Arc::new(Engine::with_seed(&Config::default(), Some(1)).unwrap());
        let ledger = Arc::new(Ledger::default());
        let big = (1_i128 << 53) + 1;
        ledger.update(Granularity::Minute, |s| s.replayed += big);
        ledger.update(Granularity::Minute, |s| s.applied += big);
        ledger.update(Granularity::Day, |s| s.unknown -= 3);
        let text = Metrics::new(engine, ledger).unwrap().render();
        let part = |name: &str, stage: &str, granularity: &str| -> i128 {
            let prefix = format!("{name}{{granularity=\"{granularity}\",stage=\"{stage}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
                .parse()
                .unwrap()
        };
        let exact = |stage, granularity| {
            part("countersink_stage_delta_high", stage, granularity) * catalogue::DELTA_SUM_SPLIT
                + part("countersink_stage_delta_low", stage, granularity)
        };
        assert_eq!(exact("applied", "minute"), big);
        assert_eq!(exact("accepted", "minute"), big);
        assert_eq!(exact("unknown", "day"), -3);
        assert_eq!(split_exact(-3), (-1, catalogue::DELTA_SUM_SPLIT - 3));
    }
}
