//! The receivers' counters as Prometheus metrics, read at scrape time.

use std::sync::Arc;

use parking_lot::Mutex;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounterVec, IntGaugeVec};

use crate::ingest::IngestStats;

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
}

impl IngestSeries {
    fn all(&self) -> [&dyn Collector; 7] {
        [
            &self.packets,
            &self.bytes,
            &self.errors,
            &self.dropped,
            &self.buffer,
            &self.connections,
            &self.open,
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
        for c in [&f.packets, &f.bytes, &f.errors, &f.dropped, &f.connections] {
            c.reset();
        }
        for transport in Transport::ALL {
            let s = snapshot.get(transport);
            let t = transport.as_str();
            f.packets.with_label_values(&[t]).inc_by(s.packets);
            f.bytes.with_label_values(&[t]).inc_by(s.bytes);
            f.errors.with_label_values(&[t]).inc_by(s.receive_errors);
            f.dropped
                .with_label_values(&[t, "truncated"])
                .inc_by(s.truncated);
            f.dropped
                .with_label_values(&[t, "oversized"])
                .inc_by(s.oversized);
            f.dropped
                .with_label_values(&[t, "kernel"])
                .inc_by(s.kernel_drops);
            f.buffer
                .with_label_values(&[t])
                .set(i64::try_from(s.recv_buffer_bytes).unwrap_or(i64::MAX));
        }
        let stream = snapshot.get(Transport::UnixStream);
        f.connections
            .with_label_values(&["accepted"])
            .inc_by(stream.connections_accepted);
        f.connections
            .with_label_values(&["refused"])
            .inc_by(stream.connections_refused);
        f.open
            .with_label_values(&[Transport::UnixStream.as_str()])
            .set(i64::try_from(stream.connections_open).unwrap_or(i64::MAX));
        f.all().iter().flat_map(|c| c.collect()).collect()
    }
}
