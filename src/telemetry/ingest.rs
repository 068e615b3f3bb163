//! The receivers' counters as Prometheus metrics, read at scrape time.

use std::sync::Arc;

use parking_lot::Mutex;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec};

use crate::ingest::{IDEMPOTENCY_RESULTS, IngestStats, OTLP_DROP_REASONS, OTLP_IGNORED_KINDS};

use super::catalogue;
use crate::vocabulary::Transport;

/// Reads [`IngestStats`] when scraped.
pub struct IngestCollector {
    stats: Arc<IngestStats>,
    series: Mutex<IngestSeries>,
    descs: Vec<Desc>,
}

struct IngestSeries {
    packets: IntCounterVec,
    bytes: IntCounterVec,
    errors: IntCounterVec,
    dropped: IntCounterVec,
    buffer: IntGaugeVec,
    connections: IntCounterVec,
    open: IntGaugeVec,
    queue_full: IntCounter,
    queue_high_water: IntGauge,
    queue_limit: IntGauge,
    otlp_dropped: IntCounterVec,
    otlp_ignored: IntCounterVec,
    otlp_streams: IntGauge,
    otlp_evicted: IntCounter,
    otlp_restored: IntGauge,
    otlp_state_errors: IntCounterVec,
    idempotency: IntCounterVec,
}

impl IngestSeries {
    fn all(&self) -> [&dyn Collector; 17] {
        [
            &self.packets,
            &self.bytes,
            &self.errors,
            &self.dropped,
            &self.buffer,
            &self.connections,
            &self.open,
            &self.queue_full,
            &self.queue_high_water,
            &self.queue_limit,
            &self.otlp_dropped,
            &self.otlp_ignored,
            &self.otlp_streams,
            &self.otlp_evicted,
            &self.otlp_restored,
            &self.otlp_state_errors,
            &self.idempotency,
        ]
    }
}

impl IngestCollector {
    /// A collector over the receivers' stats.
    pub fn new(stats: Arc<IngestStats>) -> IngestCollector {
        let families = IngestSeries {
            packets: catalogue::PACKETS_RECEIVED.int_counter_vec(),
            bytes: catalogue::RECEIVED_BYTES.int_counter_vec(),
            errors: catalogue::RECEIVE_ERRORS.int_counter_vec(),
            dropped: catalogue::PACKETS_DROPPED.int_counter_vec(),
            buffer: catalogue::SOCKET_RECEIVE_BUFFER.int_gauge_vec(),
            connections: catalogue::STREAM_CONNECTIONS.int_counter_vec(),
            open: catalogue::STREAM_CONNECTIONS_OPEN.int_gauge_vec(),
            queue_full: catalogue::UDS_QUEUE_FULL.int_counter(),
            queue_high_water: catalogue::UDS_QUEUE_HIGH_WATER.int_gauge(),
            queue_limit: catalogue::UDS_MAX_DGRAM_QLEN.int_gauge(),
            otlp_dropped: catalogue::OTLP_POINTS_DROPPED.int_counter_vec(),
            otlp_ignored: catalogue::OTLP_POINTS_IGNORED.int_counter_vec(),
            otlp_streams: catalogue::OTLP_STREAMS.int_gauge(),
            otlp_evicted: catalogue::OTLP_STREAM_EVICTIONS.int_counter(),
            otlp_restored: catalogue::OTLP_STREAMS_RESTORED.int_gauge(),
            otlp_state_errors: catalogue::OTLP_STREAM_STATE_ERRORS.int_counter_vec(),
            idempotency: catalogue::IDEMPOTENCY_KEYS.int_counter_vec(),
        };
        let descs = families
            .all()
            .iter()
            .flat_map(|c| c.desc().into_iter().cloned())
            .collect();
        IngestCollector {
            stats,
            series: Mutex::new(families),
            descs,
        }
    }
}

impl Collector for IngestCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let snapshot = self.stats.snapshot();
        let f = self.series.lock();
        for c in [
            &f.packets,
            &f.bytes,
            &f.errors,
            &f.dropped,
            &f.connections,
            &f.otlp_dropped,
            &f.otlp_ignored,
            &f.otlp_state_errors,
            &f.idempotency,
        ] {
            c.reset();
        }
        for (result, n) in IDEMPOTENCY_RESULTS.iter().zip(self.stats.idempotency()) {
            f.idempotency.with_label_values(&[*result]).inc_by(n);
        }
        let otlp = self.stats.otlp();
        for (reason, n) in OTLP_DROP_REASONS.iter().zip(otlp.dropped) {
            f.otlp_dropped.with_label_values(&[*reason]).inc_by(n);
        }
        for (kind, n) in OTLP_IGNORED_KINDS.iter().zip(otlp.ignored) {
            f.otlp_ignored.with_label_values(&[*kind]).inc_by(n);
        }
        f.otlp_streams
            .set(i64::try_from(otlp.streams).unwrap_or(i64::MAX));
        f.otlp_evicted.reset();
        f.otlp_evicted.inc_by(otlp.evicted);
        f.otlp_restored
            .set(i64::try_from(otlp.restored).unwrap_or(i64::MAX));
        for (kind, n) in [
            ("corrupt", otlp.state_corrupt),
            ("save", otlp.state_save_errors),
        ] {
            f.otlp_state_errors.with_label_values(&[kind]).inc_by(n);
        }
        let uds = snapshot.get(Transport::UnixDatagram);
        f.queue_full.reset();
        f.queue_full.inc_by(uds.queue_full);
        let gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        f.queue_high_water.set(gauge(uds.queue_high_water));
        f.queue_limit.set(gauge(uds.queue_limit));
        for transport in Transport::ALL {
            let s = snapshot.get(transport);
            let t = transport.as_str();
            f.packets.with_label_values(&[t]).inc_by(s.packets);
            f.bytes.with_label_values(&[t]).inc_by(s.bytes);
            f.errors.with_label_values(&[t]).inc_by(s.receive_errors);
            for (reason, n) in [
                ("truncated", s.truncated),
                ("oversized", s.oversized),
                ("partial", s.partial),
                ("kernel", s.kernel_drops),
                ("malformed", s.malformed),
                ("unsupported", s.unsupported),
                ("busy", s.busy),
                ("timeout", s.timed_out),
            ] {
                f.dropped.with_label_values(&[t, reason]).inc_by(n);
            }
            f.buffer
                .with_label_values(&[t])
                .set(gauge(s.recv_buffer_bytes));
            // The stream listeners and the request listeners (OTLP, HTTP increments)
            // count their connections; the datagram ones have none.
            if !matches!(transport, Transport::Udp | Transport::UnixDatagram) {
                for (result, n) in [
                    ("accepted", s.connections_accepted),
                    ("refused", s.connections_refused),
                    ("idle_timeout", s.idle_closed),
                ] {
                    f.connections.with_label_values(&[t, result]).inc_by(n);
                }
                f.open
                    .with_label_values(&[t])
                    .set(gauge(s.connections_open));
            }
        }
        f.all().iter().flat_map(|c| c.collect()).collect()
    }
}
