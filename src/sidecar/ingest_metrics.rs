//! The receivers' counters as Prometheus metrics, read at scrape time.

use std::sync::Arc;

use parking_lot::Mutex;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounterVec, IntGaugeVec, Opts};

use crate::ingest::IngestStats;
use crate::vocabulary::Transport;

/// Reads [`IngestStats`] when scraped.
pub struct IngestCollector {
    stats: Arc<IngestStats>,
    families: Mutex<Families>,
    descs: Vec<Desc>,
}

struct Families {
    packets: IntCounterVec,
    bytes: IntCounterVec,
    errors: IntCounterVec,
    dropped: IntCounterVec,
    buffer: IntGaugeVec,
    connections: IntCounterVec,
    open: IntGaugeVec,
}

fn counters(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric options")
}

fn gauges(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric options")
}

impl Families {
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
        let families = Families {
            packets: counters(
                "countersink_packets_received_total",
                "Datagrams (or stream messages) received, by transport.",
                &["transport"],
            ),
            bytes: counters(
                "countersink_received_bytes_total",
                "Bytes received, by transport.",
                &["transport"],
            ),
            errors: counters(
                "countersink_receive_errors_total",
                "Errors returned by the receive system calls, by transport.",
                &["transport"],
            ),
            dropped: counters(
                "countersink_packets_dropped_total",
                "Packets lost before parsing, by transport and reason: truncated (datagram over 64 KiB), oversized (stream message over the limit), kernel (the socket's receive queue overflowed).",
                &["transport", "reason"],
            ),
            buffer: gauges(
                "countersink_socket_receive_buffer_bytes",
                "Effective SO_RCVBUF of the socket, as the kernel reports it.",
                &["transport"],
            ),
            connections: counters(
                "countersink_stream_connections_total",
                "Unix stream connections, by result (accepted, refused over max_connections).",
                &["result"],
            ),
            open: gauges(
                "countersink_stream_connections_open",
                "Unix stream connections open now.",
                &["transport"],
            ),
        };
        let descs = families
            .all()
            .iter()
            .flat_map(|c| c.desc().into_iter().cloned())
            .collect();
        IngestCollector {
            stats,
            families: Mutex::new(families),
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
        let f = self.families.lock();
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
