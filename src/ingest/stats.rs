//! Per-transport receive counters: plain relaxed atomics, added once per system call (not
//! per datagram), each transport on its own cache line.
//!
//! Exported by `telemetry/ingest.rs` as (bounded labels):
//!
//! | field | metric |
//! | --- | --- |
//! | `packets` | `countersink_packets_received_total{transport}` |
//! | `bytes` | `countersink_received_bytes_total{transport}` |
//! | `receive_errors` | `countersink_receive_errors_total{transport}` |
//! | `truncated`, `oversized`, `partial`, `kernel_drops`, `malformed`, `unsupported`, `busy`, `timed_out` | `countersink_packets_dropped_total{transport,reason}` |
//! | `connections_accepted`, `connections_refused`, `idle_closed` | `countersink_stream_connections_total{transport,result}` |
//! | `connections_open` | `countersink_stream_connections_open{transport}` |
//! | `recv_buffer_bytes` | `countersink_socket_receive_buffer_bytes{transport}` |

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crossbeam_utils::CachePadded;

use crate::vocabulary::Transport;

/// Counters of all transports, indexed by [`Transport::index`]: a new transport gets its
/// counters by being in [`Transport::ALL`], with no field to add here. Shared (`Arc`)
/// between the receive threads and readers.
#[derive(Debug, Default)]
pub struct IngestStats {
    by_transport: [CachePadded<TransportStats>; Transport::ALL.len()],
    /// The OTLP receivers' point counters (both transports).
    pub(super) otlp: OtlpStats,
    /// What became of `Idempotency-Key`s at the HTTP increment API, by the index of
    /// [`IDEMPOTENCY_RESULTS`].
    pub(super) idempotency: [AtomicU64; IDEMPOTENCY_RESULTS.len()],
}

/// Labels of `countersink_idempotency_keys_total{result}`: a request applied under a new
/// key, an answer replayed, a key in flight (409), a key answered for another body (422),
/// an answer forgotten early to stay within `ingest.http.max_idempotency_keys`.
pub const IDEMPOTENCY_RESULTS: [&str; 5] =
    ["applied", "replayed", "in_flight", "other_body", "evicted"];

/// Points by what became of them, in the OTLP receivers (both transports share one
/// cumulative stream table).
#[derive(Debug, Default)]
pub(super) struct OtlpStats {
    /// Points refused before the engine, by the OTLP drop reason's index.
    pub(super) dropped: [AtomicU64; OTLP_DROP_REASONS.len()],
    /// Points of other metric kinds, by the kind's index.
    pub(super) ignored: [AtomicU64; OTLP_IGNORED_KINDS.len()],
    /// Cumulative streams held now.
    pub(super) streams: AtomicU64,
    /// Cumulative streams evicted from the table.
    pub(super) evicted: AtomicU64,
    /// Streams read from the state directory at start.
    pub(super) restored: AtomicU64,
    /// Whether the stream table's file was unreadable at start (0 or 1).
    pub(super) state_corrupt: AtomicU64,
    /// Saves of the stream table that failed.
    pub(super) state_save_errors: AtomicU64,
}

/// Labels of the OTLP point drop reasons, in index order (`PointDrop::ALL` of the OTLP
/// receiver; a test checks they agree).
pub const OTLP_DROP_REASONS: [&str; 9] = [
    "non_integer",
    "non_finite",
    "out_of_range",
    "negative_monotonic",
    "unknown_temporality",
    "cumulative_decrease",
    "out_of_order",
    "cumulative_baseline",
    "no_value",
];

/// Labels of the ignored OTLP metric kinds, in index order (`IgnoredKind::ALL`).
pub const OTLP_IGNORED_KINDS: [&str; 5] = [
    "gauge",
    "histogram",
    "exponential_histogram",
    "summary",
    "empty",
];

/// A copy of the OTLP receivers' point counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OtlpSnapshot {
    /// Points refused before the engine, in [`OTLP_DROP_REASONS`] order.
    pub dropped: [u64; OTLP_DROP_REASONS.len()],
    /// Points of other kinds, in [`OTLP_IGNORED_KINDS`] order.
    pub ignored: [u64; OTLP_IGNORED_KINDS.len()],
    /// Cumulative streams held now.
    pub streams: u64,
    /// Cumulative streams evicted.
    pub evicted: u64,
    /// Streams read from the state directory at start.
    pub restored: u64,
    /// Whether the stream table's file was unreadable at start (0 or 1).
    pub state_corrupt: u64,
    /// Saves of the stream table that failed.
    pub state_save_errors: u64,
}

impl IngestStats {
    /// The live counters of one transport.
    pub(super) fn get(&self, transport: Transport) -> &TransportStats {
        &self.by_transport[transport.index()]
    }

    /// A copy of one transport's counters.
    pub fn transport(&self, transport: Transport) -> TransportSnapshot {
        self.get(transport).snapshot()
    }

    /// A copy of the OTLP receivers' point counters.
    pub fn otlp(&self) -> OtlpSnapshot {
        let o = &self.otlp;
        OtlpSnapshot {
            dropped: o.dropped.each_ref().map(|c| c.load(Relaxed)),
            ignored: o.ignored.each_ref().map(|c| c.load(Relaxed)),
            streams: o.streams.load(Relaxed),
            evicted: o.evicted.load(Relaxed),
            restored: o.restored.load(Relaxed),
            state_corrupt: o.state_corrupt.load(Relaxed),
            state_save_errors: o.state_save_errors.load(Relaxed),
        }
    }

    /// A copy of the `Idempotency-Key` counters, in [`IDEMPOTENCY_RESULTS`] order.
    pub fn idempotency(&self) -> [u64; IDEMPOTENCY_RESULTS.len()] {
        self.idempotency.each_ref().map(|c| c.load(Relaxed))
    }

    /// Counts one `Idempotency-Key` result (an index of [`IDEMPOTENCY_RESULTS`]).
    pub(super) fn count_idempotency(&self, result: usize, n: u64) {
        self.idempotency[result].fetch_add(n, Relaxed);
    }

    /// A copy of every transport's counters.
    pub fn snapshot(&self) -> IngestSnapshot {
        IngestSnapshot {
            by_transport: Transport::ALL.map(|t| self.get(t).snapshot()),
        }
    }
}

/// A copy of every transport's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IngestSnapshot {
    by_transport: [TransportSnapshot; Transport::ALL.len()],
}

impl IngestSnapshot {
    /// One transport's counters.
    pub fn get(&self, transport: Transport) -> &TransportSnapshot {
        &self.by_transport[transport.index()]
    }
}

/// One transport's counters at one instant. All are totals since start except
/// `connections_open` and `recv_buffer_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TransportSnapshot {
    /// Datagrams, length-prefixed stream messages or newline-framed lines handed to a
    /// handler.
    pub packets: u64,
    /// Bytes received: datagram payloads, or stream bytes including length prefixes.
    pub bytes: u64,
    /// Failed receive or accept calls (other than timeouts and interruptions).
    pub receive_errors: u64,
    /// Datagrams longer than 64 KiB, dropped whole (datagram transports).
    pub truncated: u64,
    /// Stream messages or lines over the listener's limit (a length-prefixed one also
    /// closed its connection; a line was skipped up to its newline).
    pub oversized: u64,
    /// Stream connections that ended in the middle of a message or line (the partial one
    /// is dropped, never joined to another connection's bytes).
    pub partial: u64,
    /// Requests refused whole as unreadable: a body that is not valid protobuf or OTLP
    /// JSON, or a gzip body that does not decompress (request transports).
    pub malformed: u64,
    /// Requests refused whole for their content type or encoding (request transports).
    pub unsupported: u64,
    /// Requests refused whole because the buffer was near its limits: the client is told
    /// to retry (HTTP 429, gRPC `RESOURCE_EXHAUSTED`).
    pub busy: u64,
    /// Requests refused whole because their body did not arrive within the listener's
    /// read timeout (HTTP 408; OTLP/gRPC `DEADLINE_EXCEEDED`), or, on the HTTP
    /// listeners, their headers (the connection closed without an answer).
    pub timed_out: u64,
    /// Datagrams the kernel dropped because the socket's receive queue was full
    /// (`SO_MEMINFO` drops, sampled every idle interval; Linux only, 0 elsewhere).
    pub kernel_drops: u64,
    /// Connections accepted and served (stream and request transports).
    pub connections_accepted: u64,
    /// Connections closed at once because the listener's most connections were open
    /// (`max_connections` of a stream listener; 128 for a request listener).
    pub connections_refused: u64,
    /// Stream connections closed because they sent nothing for `idle_timeout`.
    pub idle_closed: u64,
    /// Connections open now (stream and request transports).
    pub connections_open: u64,
    /// Effective `SO_RCVBUF` of the socket as the kernel reports it (Linux reports twice the
    /// requested size, the extra half being its bookkeeping allowance). 0 if not listening.
    pub recv_buffer_bytes: u64,
    /// Unix datagram: `net.unix.max_dgram_qlen` when the socket was made, the most
    /// datagrams that can wait in it beyond the one being added. 0 if unknown.
    pub queue_limit: u64,
    /// Unix datagram: reads that returned more datagrams than `queue_limit`, so the queue
    /// was at its limit (or kept refilling to it while being read): blocking senders
    /// waited, non-blocking ones lost datagrams. Seen only with `batch_size` above the
    /// limit.
    pub queue_full: u64,
    /// Unix datagram: the most datagrams one read returned (at most `batch_size`).
    pub queue_high_water: u64,
}

/// Live counters of one transport.
#[derive(Debug, Default)]
pub(super) struct TransportStats {
    pub(super) packets: AtomicU64,
    pub(super) bytes: AtomicU64,
    pub(super) receive_errors: AtomicU64,
    pub(super) truncated: AtomicU64,
    pub(super) oversized: AtomicU64,
    pub(super) partial: AtomicU64,
    pub(super) malformed: AtomicU64,
    pub(super) unsupported: AtomicU64,
    pub(super) busy: AtomicU64,
    pub(super) timed_out: AtomicU64,
    pub(super) kernel_drops: AtomicU64,
    pub(super) connections_accepted: AtomicU64,
    pub(super) connections_refused: AtomicU64,
    pub(super) idle_closed: AtomicU64,
    pub(super) connections_open: AtomicU64,
    pub(super) recv_buffer_bytes: AtomicU64,
    pub(super) queue_limit: AtomicU64,
    pub(super) queue_full: AtomicU64,
    pub(super) queue_high_water: AtomicU64,
}

impl TransportStats {
    /// Adds `n` to a counter; a no-op for 0 so idle paths do not touch the cache line.
    #[inline]
    pub(super) fn add(counter: &AtomicU64, n: u64) {
        if n != 0 {
            counter.fetch_add(n, Relaxed);
        }
    }

    fn snapshot(&self) -> TransportSnapshot {
        TransportSnapshot {
            packets: self.packets.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            receive_errors: self.receive_errors.load(Relaxed),
            truncated: self.truncated.load(Relaxed),
            oversized: self.oversized.load(Relaxed),
            partial: self.partial.load(Relaxed),
            malformed: self.malformed.load(Relaxed),
            unsupported: self.unsupported.load(Relaxed),
            busy: self.busy.load(Relaxed),
            timed_out: self.timed_out.load(Relaxed),
            kernel_drops: self.kernel_drops.load(Relaxed),
            connections_accepted: self.connections_accepted.load(Relaxed),
            connections_refused: self.connections_refused.load(Relaxed),
            idle_closed: self.idle_closed.load(Relaxed),
            connections_open: self.connections_open.load(Relaxed),
            recv_buffer_bytes: self.recv_buffer_bytes.load(Relaxed),
            queue_limit: self.queue_limit.load(Relaxed),
            queue_full: self.queue_full.load(Relaxed),
            queue_high_water: self.queue_high_water.load(Relaxed),
        }
    }
}
