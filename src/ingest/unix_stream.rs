//! The Unix stream receiver: an accept thread and one thread per connection.
//!
//! A thread per connection keeps each connection's handler on its own thread (no locks) and
//! is cheap at the scale of a sidecar, where each application process holds one long-lived
//! connection; `max_connections` bounds it. A connection over the bound is accepted and
//! closed at once (the client sees the connection end), and counted as refused.

use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;
use socket2::{Socket, Type};

use super::framing::{FrameReader, Oversized};
use super::receivers::{Address, Receivers};
use super::stats::TransportStats;
use super::unix_path::{self, SocketFile};
use super::worker::{IdleClock, Phase, RateLimitedLog, StopFlag};
use super::{IDLE_INTERVAL, IngestStats, ListenError, PacketHandler, Step};
use crate::config::ingest::{IngestConfig, UnixStreamConfig};
use crate::vocabulary::Transport;

const TRANSPORT: Transport = Transport::UnixStream;

/// Pause after a failed `accept` (e.g. out of file descriptors), so it cannot spin a core.
const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);

/// Starts the Unix stream receiver if `ingest.uds_stream.path` is set: the accept thread.
pub(super) fn start<F, H>(
    config: &IngestConfig,
    receivers: &mut Receivers,
    factory: &Arc<F>,
) -> Result<(), ListenError>
where
    F: Fn(Transport) -> H + Send + Sync + 'static,
    H: PacketHandler,
{
    let Some(path) = &config.uds_stream.path else {
        return Ok(());
    };
    let (listener, file) = bind(&config.uds_stream, path)?;
    receivers.keep_file(file);
    receivers.listen(TRANSPORT, Address::Path(path.clone()));
    let acceptor = Acceptor {
        listener,
        factory: Arc::clone(factory),
        stats: receivers.shared_stats(),
        stop: receivers.stop_flag(),
        max_message_bytes: config.uds_stream.max_message_bytes,
        max_connections: config.uds_stream.max_connections,
    };
    let address = path.display().to_string();
    receivers.spawn(TRANSPORT, &address, "cs-uds-accept".into(), move || {
        acceptor.run()
    })?;
    tracing::info!(
        path = address,
        mode = %config.uds_stream.mode,
        max_connections = config.uds_stream.max_connections,
        "Listening for length-prefixed StatsD messages on a Unix stream socket."
    );
    Ok(())
}

/// Binds and listens at `path`.
fn bind(config: &UnixStreamConfig, path: &Path) -> Result<(Socket, SocketFile), ListenError> {
    let address = path.display().to_string();
    unix_path::bind(path, Type::STREAM, config.mode, TRANSPORT, |socket| {
        // On Linux the receive timeout also bounds a blocking accept(2).
        socket.set_read_timeout(Some(IDLE_INTERVAL)).map_err(|e| {
            ListenError::io(
                TRANSPORT,
                address.clone(),
                Step::SetOption("SO_RCVTIMEO"),
                e,
            )
        })
    })
}

/// The accept thread's state; [`Acceptor::run`] is the thread body.
struct Acceptor<F> {
    listener: Socket,
    factory: Arc<F>,
    stats: Arc<IngestStats>,
    stop: StopFlag,
    max_message_bytes: usize,
    max_connections: usize,
}

impl<F, H> Acceptor<F>
where
    F: Fn(Transport) -> H + Send + Sync + 'static,
    H: PacketHandler,
{
    /// Accepts until shutdown, then accepts what waits in the backlog (each is drained like
    /// the others), and joins every connection thread.
    fn run(self) {
        let stats = self.stats.get(TRANSPORT);
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
            match self.listener.accept() {
                Ok((socket, _)) => {
                    reap(&mut connections);
                    if connections.len() >= self.max_connections {
                        TransportStats::add(&stats.connections_refused, 1);
                        refusals.log(|suppressed| {
                            tracing::warn!(
                                max_connections = self.max_connections,
                                suppressed,
                                "Unix stream connection refused: too many open connections."
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
                tracing::error!("A Unix stream connection thread panicked.");
            }
        }
    }

    fn spawn_connection(
        &self,
        socket: Socket,
        oversize_log: &Arc<Mutex<RateLimitedLog>>,
    ) -> io::Result<JoinHandle<()>> {
        let stream = UnixStream::from(OwnedFd::from(socket));
        // Accepted sockets do not inherit the listener's timeout; blocking mode they do.
        stream.set_nonblocking(false)?;
        stream.set_read_timeout(Some(IDLE_INTERVAL))?;
        let connection = Connection {
            stream,
            handler: (self.factory)(TRANSPORT),
            stats: Arc::clone(&self.stats),
            stop: self.stop.clone(),
            frames: FrameReader::new(self.max_message_bytes),
            oversize_log: Arc::clone(oversize_log),
        };
        let stats = Arc::clone(&self.stats);
        TransportStats::add(&stats.get(TRANSPORT).connections_open, 1);
        let spawned = std::thread::Builder::new()
            .name("cs-uds-conn".into())
            .spawn(move || {
                connection.run();
                stats
                    .get(TRANSPORT)
                    .connections_open
                    .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            });
        if spawned.is_err() {
            self.stats
                .get(TRANSPORT)
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
                tracing::error!("A Unix stream connection thread panicked.");
            }
        } else {
            i += 1;
        }
    }
}

/// One connection's state; [`Connection::run`] is the thread body.
struct Connection<H> {
    stream: UnixStream,
    handler: H,
    stats: Arc<IngestStats>,
    stop: StopFlag,
    frames: FrameReader,
    oversize_log: Arc<Mutex<RateLimitedLog>>,
}

impl<H: PacketHandler> Connection<H> {
    /// Reads messages until the peer closes, a message is oversized, or shutdown has drained
    /// what the connection holds; then calls `idle()` one last time.
    fn run(mut self) {
        let all_stats = Arc::clone(&self.stats);
        let stats = all_stats.get(TRANSPORT);
        let mut phase = Phase::Running;
        let mut clock = IdleClock::new();
        loop {
            if !phase.is_draining() {
                phase.update(&self.stop);
                if phase.is_draining() && self.stream.set_nonblocking(true).is_err() {
                    break;
                }
            }
            match (&self.stream).read(self.frames.spare()) {
                Ok(0) => {
                    if self.frames.has_partial() {
                        TransportStats::add(&stats.partial, 1);
                    }
                    break;
                }
                Ok(n) => {
                    self.frames.filled(n);
                    TransportStats::add(&stats.bytes, n as u64);
                    if let Err(Oversized(len)) = self.deliver(stats) {
                        TransportStats::add(&stats.oversized, 1);
                        self.oversize_log.lock().log(|suppressed| {
                            tracing::warn!(
                                announced_bytes = len,
                                suppressed,
                                "Unix stream message over max_message_bytes; connection closed."
                            );
                        });
                        break;
                    }
                    if phase.drain_expired() {
                        break;
                    }
                    if clock.due() {
                        self.handler.idle();
                    }
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    if phase.is_draining() {
                        if self.frames.has_partial() {
                            TransportStats::add(&stats.partial, 1);
                        }
                        break;
                    }
                    self.handler.idle();
                    clock.reset();
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => {
                    // Typically ECONNRESET: the peer went away; nothing to retry.
                    TransportStats::add(&stats.receive_errors, 1);
                    tracing::debug!(%error, "Unix stream read failed; connection closed.");
                    break;
                }
            }
        }
        self.handler.idle();
    }

    /// Hands every complete buffered message to the handler.
    fn deliver(&mut self, stats: &TransportStats) -> Result<(), Oversized> {
        let mut messages = 0;
        let result = loop {
            match self.frames.next_frame() {
                Ok(Some(message)) => {
                    messages += 1;
                    if !message.is_empty() {
                        self.handler.handle(message);
                    }
                }
                Ok(None) => break Ok(()),
                Err(oversized) => break Err(oversized),
            }
        };
        TransportStats::add(&stats.packets, messages);
        result
    }
}
