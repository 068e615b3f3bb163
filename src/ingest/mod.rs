//! Socket receivers: UDP, Unix datagram, Unix stream and TCP, plus the matching client.
//!
//! The receivers read bytes and hand them, untouched, to a [`PacketHandler`]; they never
//! parse. One handler is created per receive thread (and per stream connection) by the
//! factory given to [`start`], so the engine can keep per-thread state without locks.
//!
//! # Layout
//!
//! | module | job |
//! | --- | --- |
//! | `error` | [`ListenError`]: which transport, which address or path, which step failed |
//! | `stats` | [`IngestStats`]: per-transport atomics and [`TransportSnapshot`] |
//! | `start` | [`start`]: one registration line per transport |
//! | `receivers` | [`Receivers`]: where each receiver listens, its threads and socket files, the shutdown order |
//! | `worker` | what every receive thread shares: stop flag, idle clock, rate-limited logs |
//! | `datagram` | the receive loop for UDP and Unix datagram sockets, `SO_RCVBUF` set-up |
//! | `udp` | binding one or several (`SO_REUSEPORT`) UDP sockets |
//! | `unix_path` | the socket-file rules: stale check, bind without a loose-permission window, cleanup |
//! | `unix_datagram` | the Unix datagram socket |
//! | `unix_stream` | binding the Unix stream socket |
//! | `tcp` | binding the TCP listener |
//! | `async_listener` | a request-based receiver's thread (OTLP, HTTP API): its runtime, graceful stop |
//! | `handler_pool` | that receiver's handlers, one per runtime worker; how many workers |
//! | `stream` | what both stream transports share: accept loop, one thread per connection, framing choice (`auto` detection), idle timeout |
//! | `framing` | DogStatsD stream framing (4-byte little-endian length prefix), bounded buffer |
//! | `lines` | newline stream framing, bounded buffer, resync after an overlong line |
//! | `sys` | the only `unsafe` code: `recvmsg`, `recvmmsg`, `SO_RCVBUFFORCE`, `SO_MEMINFO` |
//! | [`client`] | sending lines over the transports (`countersink send`, tests, load tools) |
//!
//! # Threading model
//!
//! Plain blocking OS threads, not async tasks: a receive loop is a hot loop of system calls
//! whose only job is to empty the kernel queue quickly, and a dedicated thread never waits
//! behind a flush or another task (bioyino and brubeck do the same).
//!
//! - UDP: `threads` sockets bound to the same address with `SO_REUSEPORT` (only when
//!   `threads > 1`), one thread each; the kernel spreads senders over them by 4-tuple hash.
//! - Unix datagram: one socket, one thread.
//! - Unix stream and TCP: one accept thread each, plus one thread per connection, at most
//!   `max_connections`; further connections are accepted and closed at once, and counted.
//!
//! Every thread uses a read timeout of [`IDLE_INTERVAL`], which is how it notices shutdown
//! without burning CPU, and calls [`PacketHandler::idle`] at least that often.
//!
//! # Shutdown
//!
//! [`Receivers::shutdown`]: remove our socket files (so no new sender can reach us), raise the
//! stop flag, then each thread reads what the kernel already holds without blocking until the
//! queue is empty (bounded by [`MAX_DRAIN`]), calls `idle()` one last time and exits; the
//! threads are joined. Stream connections waiting in the listen backlog are accepted and
//! drained too, for at most [`MAX_DRAIN`]: clients that keep reconnecting cannot hold the
//! shutdown (those still arriving are reset when the listener closes).

mod async_listener;
pub mod client;
mod datagram;
mod error;
mod framing;
pub mod handler_pool;
pub mod http_api;
mod lines;
#[cfg(feature = "otlp")]
pub mod otlp;
mod receivers;
mod start;
mod stats;
mod stream;
mod sys;
mod tcp;
mod udp;
mod unix_datagram;
mod unix_path;
mod unix_stream;
mod worker;

#[cfg(test)]
mod tests;

use std::time::Duration;

pub use error::{ListenError, Step};

pub use receivers::{Address, Listening, Receivers};
pub use start::{Kept, start, start_keeping};
pub use stats::{
    IDEMPOTENCY_RESULTS, IngestSnapshot, IngestStats, OTLP_DROP_REASONS, OTLP_IGNORED_KINDS,
    OtlpSnapshot, TransportSnapshot,
};
pub use unix_datagram::{ADVISED_QLEN, RAISE_QLEN, max_dgram_qlen};

/// Read timeout of every receive thread, and the longest time between two calls of
/// [`PacketHandler::idle`] while a receiver runs.
pub const IDLE_INTERVAL: Duration = Duration::from_millis(100);

/// Longest time one receive thread keeps draining at shutdown when senders keep the queue
/// non-empty; what is still queued after that is dropped with the socket.
pub const MAX_DRAIN: Duration = Duration::from_secs(1);

/// Largest datagram accepted whole: 64 KiB. Longer Unix datagrams are counted as truncated
/// and dropped (a UDP payload is at most 65,507 bytes, so UDP never reaches it).
pub const MAX_DATAGRAM_BYTES: usize = 64 * 1024;

/// Receives every datagram (or stream message) a receiver reads.
///
/// One handler lives on one receive thread (or one stream connection) for its whole life, so
/// it can keep state without locks and publish it from [`idle`](PacketHandler::idle).
pub trait PacketHandler: Send + 'static {
    /// One datagram, one length-framed stream message, or a run of complete newline-ended
    /// lines, as received (never a truncated one).
    fn handle(&mut self, packet: &[u8]);

    /// Called at least every [`IDLE_INTERVAL`] while the receiver runs: when the read times
    /// out on a quiet socket, and between reads on a busy one. Called once more just before
    /// the receiver exits (after the shutdown drain, or when a stream connection closes),
    /// so per-thread state can be published.
    fn idle(&mut self) {}

    /// One increment decoded from a source that is not StatsD lines (an OTLP point): `name`
    /// with `tags`, `delta`, at the client time `at` (Unix seconds) or now. The default
    /// refuses it (a handler for lines only).
    fn record(
        &mut self,
        _name: &str,
        _tags: &[(&str, &str)],
        _delta: i64,
        _at: Option<i64>,
    ) -> Recorded {
        Recorded::Refused
    }

    /// Checks one increment of a durable request without keeping it or counting it (its
    /// request goes to the ingest log, see [`crate::state::ingest_log`]): the minute it
    /// counts in, or why it is refused. The default refuses it (unconfigured).
    fn check(
        &mut self,
        _name: &str,
        _tags: &[(&str, &str)],
        delta: i64,
        _at: Option<i64>,
    ) -> Result<crate::bucket::Minute, crate::engine::Refusal> {
        Err(crate::engine::Refusal {
            error: crate::engine::RecordError::Dropped(crate::vocabulary::DropReason::Unconfigured),
            delta,
        })
    }

    /// Counts the items of a durable request once it is answered (on disk, or nothing to
    /// write): `accepted` received, and each of `refused` received and refused as
    /// [`PacketHandler::record`] counts a refusal. A request refused whole (429, 503)
    /// counts nothing, so a client's retries are counted once. The default counts nothing.
    fn count_checked(&mut self, _accepted: u64, _refused: &[crate::engine::Refusal]) {}

    /// The ingest log durable requests go to, when the handler's pipeline keeps one.
    fn ingest_log(&self) -> Option<std::sync::Arc<crate::state::ingest_log::IngestLog>> {
        None
    }

    /// The increments of one request (an OTLP request's points): calls `increments` once,
    /// with a function that records one increment as [`record`](PacketHandler::record)
    /// does and says what became of it. The default is `record` itself; a handler may do
    /// what all the increments share once (the engine's handler takes its stripe and
    /// routing once per request).
    fn record_each(&mut self, increments: &mut dyn FnMut(&mut RecordOne<'_>)) {
        increments(&mut |name, tags, delta, at| self.record(name, tags, delta, at));
    }

    /// Whether the buffer behind the handler is near its limits, so a request-based
    /// receiver should refuse new requests (back-pressure the client retries on) rather
    /// than accept them partly. Defaults to `false`.
    fn busy(&self) -> bool {
        false
    }
}

/// Records one increment (name, tags, delta, client time) for
/// [`PacketHandler::record_each`].
pub type RecordOne<'a> = dyn FnMut(&str, &[(&str, &str)], i64, Option<i64>) -> Recorded + 'a;

/// What became of one increment handed to [`PacketHandler::record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// In the buffer.
    Accepted,
    /// Not kept: invalid, outside the time window, or dropped by a limit (counted by the
    /// engine with its reason).
    Refused,
}

impl<H: PacketHandler + ?Sized> PacketHandler for Box<H> {
    fn handle(&mut self, packet: &[u8]) {
        (**self).handle(packet);
    }

    fn idle(&mut self) {
        (**self).idle();
    }

    fn record(
        &mut self,
        name: &str,
        tags: &[(&str, &str)],
        delta: i64,
        at: Option<i64>,
    ) -> Recorded {
        (**self).record(name, tags, delta, at)
    }

    fn record_each(&mut self, increments: &mut dyn FnMut(&mut RecordOne<'_>)) {
        (**self).record_each(increments);
    }

    fn check(
        &mut self,
        name: &str,
        tags: &[(&str, &str)],
        delta: i64,
        at: Option<i64>,
    ) -> Result<crate::bucket::Minute, crate::engine::Refusal> {
        (**self).check(name, tags, delta, at)
    }

    fn count_checked(&mut self, accepted: u64, refused: &[crate::engine::Refusal]) {
        (**self).count_checked(accepted, refused);
    }

    fn ingest_log(&self) -> Option<std::sync::Arc<crate::state::ingest_log::IngestLog>> {
        (**self).ingest_log()
    }

    fn busy(&self) -> bool {
        (**self).busy()
    }
}
