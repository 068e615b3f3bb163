//! Stream receivers (Unix stream, TCP): an accept thread and one thread per connection.
//!
//! A thread per connection keeps each connection's handler on its own thread (no locks) and
//! is cheap at the scale of a sidecar, where each application process holds one long-lived
//! connection; `max_connections` bounds it. A connection over the bound is accepted and
//! closed at once (the client sees the connection end), and counted as refused.
//!
//! Each connection cuts its bytes into messages by its framing ([`Framer`]): DogStatsD
//! length prefixes ([`FrameReader`]), newline-ended lines ([`LineReader`]), or either,
//! decided on the connection's first four bytes. Nothing read on one connection is ever
//! joined to another's bytes: a partial message or line at the end is counted and dropped.
//!
//! # Bounds
//!
//! Threads: `max_connections` plus the accept thread. Memory per connection: one buffer of
//! at most the framing's limit plus a few bytes. Time: a connection silent for
//! `idle_timeout` is closed; at shutdown each connection drains what the kernel holds for
//! at most [`MAX_DRAIN`](super::MAX_DRAIN), hands its complete messages on (into the final
//! flush) and counts what is left as partial.

use std::io::{self, Read};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use socket2::Socket;

use super::framing::{FrameReader, Oversized, PREFIX};
use super::lines::LineReader;
use super::stats::TransportStats;
use super::worker::{IdleClock, Phase, RateLimitedLog, StopFlag};
use super::{IDLE_INTERVAL, IngestStats, PacketHandler};
use crate::config::ingest::StreamFraming;
use crate::vocabulary::Transport;

/// Pause after a failed `accept` (e.g. out of file descriptors), so it cannot spin a core.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// What a stream listener's connections share.
#[derive(Debug, Clone, Copy)]
pub(super) struct StreamSettings {
    pub(super) transport: Transport,
    pub(super) framing: StreamFraming,
    /// Largest length-prefixed message, or longest line.
    pub(super) max_message_bytes: usize,
    pub(super) max_connections: usize,
    /// Zero: never.
    pub(super) idle_timeout: Duration,
}

/// The accept thread's state; [`Acceptor::run`] is the thread body.
pub(super) struct Acceptor<F> {
    pub(super) listener: Socket,
    pub(super) factory: Arc<F>,
    pub(super) stats: Arc<IngestStats>,
    pub(super) stop: StopFlag,
    pub(super) settings: StreamSettings,
}

impl<F, H> Acceptor<F>
where
    F: Fn(Transport) -> H + Send + Sync + 'static,
    H: PacketHandler,
{
    /// Accepts until shutdown, then accepts what waits in the backlog (each is drained like
    /// the others) for at most [`MAX_DRAIN`](super::MAX_DRAIN): connections still arriving
    /// then are reset when the listener closes. Joins every connection thread.
    pub(super) fn run(self) {
        let transport = self.settings.transport;
        let max_connections = self.settings.max_connections;
        let stats = self.stats.get(transport);
        let mut connections: Vec<JoinHandle<()>> = Vec::new();
        let mut phase = Phase::Running;
        let mut errors = RateLimitedLog::default();
        let mut refusals = RateLimitedLog::default();
        let oversize_log = Arc::new(Mutex::new(RateLimitedLog::default()));
        loop {
            if !phase.is_draining() {
                phase.update(&self.stop);
                if phase.is_draining() && self.listener.set_nonblocking(true).is_err() {
                    break;
                }
            }
            if phase.drain_expired() {
                // Clients that reconnect at once keep the backlog from ever emptying:
                // the shutdown must not wait for them (a TCP listener stays bound until
                // it is dropped below; a Unix socket's file is gone already).
                tracing::warn!(
                    %transport,
                    "Stream connections kept arriving during shutdown; the listener closes with some still waiting."
                );
                break;
            }
            match self.listener.accept() {
                Ok((socket, _)) => {
                    reap(&mut connections);
                    if connections.len() >= max_connections {
                        TransportStats::add(&stats.connections_refused, 1);
                        refusals.log(|suppressed| {
                            tracing::warn!(
                                %transport,
                                max_connections,
                                suppressed,
                                "Stream connection refused: too many open connections."
                            );
                        });
                        continue;
                    }
                    match self.spawn_connection(socket, &oversize_log) {
                        Ok(handle) => {
                            TransportStats::add(&stats.connections_accepted, 1);
                            connections.push(handle);
                        }
                        Err(error) => {
                            TransportStats::add(&stats.receive_errors, 1);
                            errors.log(|suppressed| {
                                tracing::warn!(%error, suppressed, "Cannot start a connection thread.");
                            });
                        }
                    }
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    if phase.is_draining() {
                        break;
                    }
                    reap(&mut connections);
                }
                Err(error)
                    if matches!(
                        error.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                    ) => {}
                Err(error) => {
                    TransportStats::add(&stats.receive_errors, 1);
                    errors.log(|suppressed| tracing::warn!(%error, suppressed, "Accept failed."));
                    if phase.is_draining() {
                        break;
                    }
                    std::thread::sleep(ACCEPT_BACKOFF);
                }
            }
        }
        drop(self.listener);
        for handle in connections {
            if handle.join().is_err() {
                tracing::error!("A stream connection thread panicked.");
            }
        }
    }

    fn spawn_connection(
        &self,
        socket: Socket,
        oversize_log: &Arc<Mutex<RateLimitedLog>>,
    ) -> io::Result<JoinHandle<()>> {
        let transport = self.settings.transport;
        // Accepted sockets do not inherit the listener's timeout; make sure of blocking mode.
        socket.set_nonblocking(false)?;
        socket.set_read_timeout(Some(IDLE_INTERVAL))?;
        let connection = Connection {
            stream: socket,
            handler: (self.factory)(transport),
            stats: Arc::clone(&self.stats),
            stop: self.stop.clone(),
            framer: Framer::new(self.settings.framing, self.settings.max_message_bytes),
            idle_timeout: self.settings.idle_timeout,
            transport,
            oversize_log: Arc::clone(oversize_log),
        };
        let stats = Arc::clone(&self.stats);
        TransportStats::add(&stats.get(transport).connections_open, 1);
        let spawned = std::thread::Builder::new()
            .name(format!("cs-{transport}-conn"))
            .spawn(move || {
                connection.run();
                stats
                    .get(transport)
                    .connections_open
                    .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            });
        if spawned.is_err() {
            self.stats
                .get(transport)
                .connections_open
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
        spawned
    }
}

/// Joins the connection threads that have ended.
fn reap(connections: &mut Vec<JoinHandle<()>>) {
    let mut i = 0;
    while i < connections.len() {
        if connections[i].is_finished() {
            if connections.swap_remove(i).join().is_err() {
                tracing::error!("A stream connection thread panicked.");
            }
        } else {
            i += 1;
        }
    }
}

/// One connection's state; [`Connection::run`] is the thread body.
struct Connection<H> {
    stream: Socket,
    handler: H,
    stats: Arc<IngestStats>,
    stop: StopFlag,
    framer: Framer,
    idle_timeout: Duration,
    transport: Transport,
    oversize_log: Arc<Mutex<RateLimitedLog>>,
}

impl<H: PacketHandler> Connection<H> {
    /// Reads messages until the peer closes, a length-prefixed message is oversized, the
    /// connection stays silent for `idle_timeout`, or shutdown has drained what the
    /// connection holds; then calls `idle()` one last time.
    fn run(mut self) {
        let all_stats = Arc::clone(&self.stats);
        let stats = all_stats.get(self.transport);
        let mut phase = Phase::Running;
        let mut clock = IdleClock::new();
        let mut last_read = Instant::now();
        loop {
            if !phase.is_draining() {
                phase.update(&self.stop);
                if phase.is_draining() && self.stream.set_nonblocking(true).is_err() {
                    break;
                }
            }
            match (&self.stream).read(self.framer.spare()) {
                Ok(0) => {
                    self.count_partial(stats);
                    break;
                }
                Ok(n) => {
                    last_read = Instant::now();
                    self.framer.filled(n);
                    TransportStats::add(&stats.bytes, n as u64);
                    if let Err(Oversized(len)) = self.deliver(stats) {
                        let transport = self.transport;
                        self.oversize_log.lock().log(|suppressed| {
                            tracing::warn!(
                                %transport,
                                announced_bytes = len,
                                suppressed,
                                "Stream message over max_message_bytes; connection closed."
                            );
                        });
                        break;
                    }
                    if phase.drain_expired() {
                        self.count_partial(stats);
                        break;
                    }
                    if clock.due() {
                        self.handler.idle();
                    }
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    if phase.is_draining() {
                        self.count_partial(stats);
                        break;
                    }
                    if !self.idle_timeout.is_zero() && last_read.elapsed() >= self.idle_timeout {
                        TransportStats::add(&stats.idle_closed, 1);
                        self.count_partial(stats);
                        break;
                    }
                    self.handler.idle();
                    clock.reset();
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => {
                    // Typically ECONNRESET: the peer went away; nothing to retry.
                    TransportStats::add(&stats.receive_errors, 1);
                    self.count_partial(stats);
                    tracing::debug!(%error, "Stream read failed; connection closed.");
                    break;
                }
            }
        }
        self.handler.idle();
    }

    /// At the end of the connection: bytes of an incomplete message or line are dropped
    /// and counted as one partial message.
    fn count_partial(&self, stats: &TransportStats) {
        if self.framer.has_partial() {
            TransportStats::add(&stats.partial, 1);
        }
    }

    /// Hands every complete buffered message (or run of lines) to the handler. An
    /// oversized length-prefixed message is counted and returned: the connection must
    /// close. Oversized lines are counted and skipped.
    fn deliver(&mut self, stats: &TransportStats) -> Result<(), Oversized> {
        let handler = &mut self.handler;
        match &mut self.framer {
            Framer::Detect(_) => Ok(()),
            Framer::Lines(lines) => {
                let drained = lines.drain(|run| handler.handle(run));
                TransportStats::add(&stats.packets, drained.lines);
                TransportStats::add(&stats.oversized, drained.oversized);
                Ok(())
            }
            Framer::Length(frames) => {
                let mut messages = 0;
                let result = loop {
                    match frames.next_frame() {
                        Ok(Some(message)) => {
                            messages += 1;
                            if !message.is_empty() {
                                handler.handle(message);
                            }
                        }
                        Ok(None) => break Ok(()),
                        Err(oversized) => {
                            TransportStats::add(&stats.oversized, 1);
                            break Err(oversized);
                        }
                    }
                };
                TransportStats::add(&stats.packets, messages);
                result
            }
        }
    }
}

/// A connection's framing; with `auto`, undecided until its first four bytes.
#[derive(Debug)]
enum Framer {
    /// The bytes read so far (fewer than [`PREFIX`]) and the limit.
    Detect(Detect),
    Length(FrameReader),
    Lines(LineReader),
}

/// The first bytes of an `auto` connection.
#[derive(Debug)]
struct Detect {
    head: [u8; PREFIX],
    len: usize,
    max_message: usize,
}

impl Framer {
    fn new(framing: StreamFraming, max_message: usize) -> Framer {
        match framing {
            StreamFraming::Auto => Framer::Detect(Detect {
                head: [0; PREFIX],
                len: 0,
                max_message,
            }),
            StreamFraming::Length => Framer::Length(FrameReader::new(max_message)),
            StreamFraming::Newline => Framer::Lines(LineReader::new(max_message)),
        }
    }

    fn spare(&mut self) -> &mut [u8] {
        match self {
            Framer::Detect(d) => &mut d.head[d.len..],
            Framer::Length(frames) => frames.spare(),
            Framer::Lines(lines) => lines.spare(),
        }
    }

    fn filled(&mut self, n: usize) {
        match self {
            Framer::Detect(d) => {
                d.len += n;
                if d.len == PREFIX {
                    let (head, max_message) = (d.head, d.max_message);
                    *self = Framer::decide(&head, max_message);
                    let spare = self.spare();
                    spare[..PREFIX].copy_from_slice(&head);
                    self.filled(PREFIX);
                }
            }
            Framer::Length(frames) => frames.filled(n),
            Framer::Lines(lines) => lines.filled(n),
        }
    }

    /// The framing of a connection that began with `head`: a length prefix of a message
    /// within the limit (at most 16 MiB, validated) has a last byte of 0 or 1; a line
    /// never has one there.
    fn decide(head: &[u8; PREFIX], max_message: usize) -> Framer {
        if head[PREFIX - 1] <= 1 {
            Framer::Length(FrameReader::new(max_message))
        } else {
            Framer::Lines(LineReader::new(max_message))
        }
    }

    fn has_partial(&self) -> bool {
        match self {
            Framer::Detect(d) => d.len > 0,
            Framer::Length(frames) => frames.has_partial(),
            Framer::Lines(lines) => lines.has_partial(),
        }
    }
}
