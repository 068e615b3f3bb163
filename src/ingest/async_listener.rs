//! A request-based receiver's thread (the OTLP listeners, the HTTP increment API): an
//! async runtime of a given number of worker threads serving a TCP listener until the
//! receivers' stop flag is raised, then finishing the requests in flight for at most
//! [`SHUTDOWN_GRACE`], so that their increments reach the final flush and a stuck client
//! never holds the shutdown. Dropping the runtime at the end joins its workers.
//!
//! # Bounds
//!
//! Each listener holds at most its `max_connections` open ([`Gate`]; 128 by default): one over
//! it is accepted and closed at once, and counted as refused, as the stream listeners do
//! over their `max_connections`. The HTTP listeners ([`serve_http`]) close a connection
//! whose request headers take longer than [`READ_TIMEOUT`] (from the connection's start,
//! or from the end of its previous request: an idle keep-alive connection is closed after
//! it too), and answer 408 to a request whose body takes longer than that (the handlers,
//! through [`read_body`]); OTLP/gRPC bounds its streams per connection and their bodies
//! (`otlp/grpc.rs`). So a client that opens connections and stalls holds at most
//! `max_connections` file descriptors and their buffers, each for a bounded time. At
//! most [`MAX_RECEIVING`] requests are read and handled at once ([`Receiving`]), which
//! bounds the request bodies held in memory.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::IDLE_INTERVAL;
use super::stats::{IngestStats, TransportStats};
use super::worker::{RateLimitedLog, StopFlag};
use crate::vocabulary::Transport;

/// Longest a request's headers, or its body, may take to arrive (each on its own).
/// hyper's own header timeout, 30 s; a body of the largest size allowed crosses a slow
/// link in far less.
pub(super) const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Most requests one listener receives and handles at once. Each holds up to its
/// listener's `max_request_bytes` of body (and as much again decompressed), so this, not
/// the connection bound, caps those buffers: 32 × 2 × 4 MiB at the default size, where
/// 128 connections, or 32 OTLP/gRPC streams on each, could otherwise hold gigabytes. An
/// HTTP/1.1 request over it waits, unread (its connection carries nothing else); an
/// OTLP/gRPC call over it is refused as busy at once (`otlp/grpc.rs`): waiting unread,
/// its data would fill its connection's HTTP/2 window and stall the calls beside it that
/// have places. The handling is CPU bound on a couple of threads, so more at once would
/// not go faster.
pub(super) const MAX_RECEIVING: usize = 32;

/// Pause after a failed `accept` (e.g. out of file descriptors), so it cannot spin a core.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Longest wait, after the stop, for requests in flight to finish; what is still
/// unanswered then is cut off with its connection.
pub(super) const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Completes once the stop flag is raised: the server's graceful-shutdown signal.
pub(super) type Stopped = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Runs `server` on `listener` until the stop, as described above, on a runtime of
/// `workers` threads named `worker_name`.
pub(super) fn serve<F, Fut>(
    transport: Transport,
    listener: std::net::TcpListener,
    stop: StopFlag,
    (workers, worker_name): (usize, &str),
    server: F,
) where
    F: FnOnce(tokio::net::TcpListener, Stopped) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers.max(1))
        .thread_name(worker_name)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(%error, "The {} receiver could not start its runtime.", transport.title());
            return;
        }
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(listener) => listener,
            Err(error) => {
                tracing::error!(%error, "The {} receiver could not register its socket.", transport.title());
                return;
            }
        };
        let (raised_tx, raised) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            while !stop.is_raised() {
                tokio::time::sleep(IDLE_INTERVAL).await;
            }
            let _ = raised_tx.send(true);
        });
        let stopped: Stopped = {
            let mut raised = raised.clone();
            Box::pin(async move {
                let _ = raised.wait_for(|r| *r).await;
            })
        };
        let deadline = async move {
            let mut raised = raised;
            let _ = raised.wait_for(|r| *r).await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        };
        tokio::select! {
            result = server(listener, stopped) => {
                if let Err(error) = result {
                    tracing::error!(%error, "The {} receiver failed.", transport.title());
                }
            }
            () = deadline => {
                tracing::warn!(
                    "The {} receiver stopped with requests still in flight after {:?}; their clients see the connection close.",
                    transport.title(),
                    SHUTDOWN_GRACE
                );
            }
        }
    });
}

/// Binds `addr` for an async listener (`SO_REUSEADDR`, as the standard library sets
/// it; non-blocking).
pub(super) fn bind(
    transport: Transport,
    addr: std::net::SocketAddr,
) -> Result<std::net::TcpListener, super::ListenError> {
    use super::Step;
    let fail = |step| move |e| super::ListenError::io(transport, addr.to_string(), step, e);
    let listener = std::net::TcpListener::bind(addr).map_err(fail(Step::Bind))?;
    listener
        .set_nonblocking(true)
        .map_err(fail(Step::SetOption("O_NONBLOCK")))?;
    Ok(listener)
}

/// Admits a listener's accepted connections up to its bound: one over it is closed at
/// once and counted (`connections_refused`), the others counted (`connections_accepted`,
/// `connections_open` while open).
pub(super) struct Gate {
    transport: Transport,
    stats: Arc<IngestStats>,
    permits: Arc<Semaphore>,
    max: usize,
    refusals: Mutex<RateLimitedLog>,
    errors: Mutex<RateLimitedLog>,
}

impl Gate {
    /// A gate of `max` connections.
    pub(super) fn new(transport: Transport, stats: Arc<IngestStats>, max: usize) -> Gate {
        Gate {
            transport,
            stats,
            permits: Arc::new(Semaphore::new(max)),
            max,
            refusals: Mutex::new(RateLimitedLog::default()),
            errors: Mutex::new(RateLimitedLog::default()),
        }
    }

    /// `io`, holding a place until it is dropped; `None` (and `io` closed) when the
    /// listener holds its most connections already.
    pub(super) fn admit<IO>(&self, io: IO) -> Option<Admitted<IO>> {
        let stats = self.stats.get(self.transport);
        let Ok(permit) = Arc::clone(&self.permits).try_acquire_owned() else {
            drop(io);
            TransportStats::add(&stats.connections_refused, 1);
            self.refusals.lock().log(|suppressed| {
                tracing::warn!(
                    transport = %self.transport,
                    max_connections = self.max,
                    suppressed,
                    "Connection refused: too many open connections."
                );
            });
            return None;
        };
        TransportStats::add(&stats.connections_accepted, 1);
        TransportStats::add(&stats.connections_open, 1);
        Some(Admitted {
            io,
            _permit: permit,
            stats: Arc::clone(&self.stats),
            transport: self.transport,
        })
    }

    /// Counts a request whose headers did not arrive in time (its connection closed), as
    /// a body that did not is counted: `timed_out`.
    fn count_timeout(stats: &IngestStats, transport: Transport) {
        TransportStats::add(&stats.get(transport).packets, 1);
        TransportStats::add(&stats.get(transport).timed_out, 1);
    }

    /// Counts a failed `accept` (one the client ended before it was taken is not a
    /// failure) and waits a little, so that a persistent failure (out of file
    /// descriptors) cannot spin a core.
    pub(super) async fn accept_failed(&self, error: &std::io::Error) {
        if matches!(
            error.kind(),
            std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::Interrupted
        ) {
            return;
        }
        TransportStats::add(&self.stats.get(self.transport).receive_errors, 1);
        self.errors.lock().log(|suppressed| {
            tracing::warn!(%error, transport = %self.transport, suppressed, "Accept failed.");
        });
        tokio::time::sleep(ACCEPT_BACKOFF).await;
    }
}

/// The places of the requests a listener receives and handles at once (at most
/// [`MAX_RECEIVING`]): a handler takes one before it reads its body and keeps it until it
/// answers.
#[derive(Clone)]
pub(super) struct Receiving(Arc<Semaphore>);

impl Receiving {
    /// Room for `max` requests at once.
    pub(super) fn new(max: usize) -> Receiving {
        Receiving(Arc::new(Semaphore::new(max.max(1))))
    }

    /// A place, once one is free; `None` only if the places were closed, which nothing
    /// does (the request then goes on without one rather than fail).
    pub(super) async fn enter(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.0).acquire_owned().await.ok()
    }

    /// A place if one is free now.
    #[cfg(feature = "otlp")]
    pub(super) fn try_enter(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.0).try_acquire_owned().ok()
    }

    /// Places free now (tests wait on it).
    #[cfg(test)]
    pub(super) fn free(&self) -> usize {
        self.0.available_permits()
    }
}

/// An admitted connection: its place in the [`Gate`] is given back when it is dropped.
pub(super) struct Admitted<IO> {
    io: IO,
    _permit: OwnedSemaphorePermit,
    stats: Arc<IngestStats>,
    transport: Transport,
}

impl<IO> Admitted<IO> {
    /// The connection itself.
    pub(super) fn get_ref(&self) -> &IO {
        &self.io
    }
}

impl<IO> Drop for Admitted<IO> {
    fn drop(&mut self) {
        self.stats
            .get(self.transport)
            .connections_open
            .fetch_sub(1, Relaxed);
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Admitted<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Admitted<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Reads a request body of at most `limit` bytes within `timeout`: `None` when it did
/// not arrive in time (the caller answers 408); else what [`axum::body::to_bytes`] gives.
pub(super) async fn read_body(
    body: axum::body::Body,
    limit: usize,
    timeout: Duration,
) -> Option<Result<axum::body::Bytes, axum::Error>> {
    tokio::time::timeout(timeout, axum::body::to_bytes(body, limit))
        .await
        .ok()
}

/// Serves `app` over HTTP/1.1 on `listener` until `stopped` completes, then finishes
/// the requests in flight: at most [`Gate`]'s connections, each closed when a request's
/// headers take longer than `read_timeout` (hyper's header timeout, which needs the
/// timer `axum::serve` does not give it). Replies go out at once (`TCP_NODELAY`) rather
/// than waiting on the client's delayed ACK.
pub(super) async fn serve_http(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    stopped: impl Future<Output = ()> + Send + 'static,
    gate: Gate,
    read_timeout: Duration,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;

    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(read_timeout);
    // Each connection task holds a receiver: the sender's `closed` is every connection
    // ended. The stop reaches the tasks through `stop_rx`.
    let (closed_tx, closed_rx) = tokio::sync::watch::channel(());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut stopped = std::pin::pin!(stopped);
    loop {
        let accepted = tokio::select! {
            () = &mut stopped => break,
            accepted = listener.accept() => accepted,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(error) => {
                gate.accept_failed(&error).await;
                continue;
            }
        };
        let Some(io) = gate.admit(tcp) else {
            continue;
        };
        if let Err(error) = io.get_ref().set_nodelay(true) {
            tracing::debug!(%error, "Could not set TCP_NODELAY on an HTTP connection.");
        }
        let service = TowerToHyperService::new(app.clone());
        let connection = builder.serve_connection(TokioIo::new(io), service);
        let (closed_rx, mut stop_rx) = (closed_rx.clone(), stop_rx.clone());
        let (stats, transport) = (Arc::clone(&gate.stats), gate.transport);
        tokio::spawn(async move {
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                result = connection.as_mut() => {
                    match result {
                        // Part of a request's headers, then nothing for the timeout (an
                        // idle keep-alive connection closed by it ends without error).
                        Err(error) if error.is_timeout() => Gate::count_timeout(&stats, transport),
                        Err(error) => {
                            tracing::trace!(%error, "An HTTP connection ended with an error.");
                        }
                        Ok(()) => {}
                    }
                }
                () = async { let _ = stop_rx.wait_for(|s| *s).await; } => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
            drop(closed_rx);
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    drop((closed_rx, stop_rx));
    closed_tx.closed().await;
    Ok(())
}

/// Serving a request listener in a test: on a loopback port, on a runtime of its own,
/// with blocking clients that fail rather than hang.
#[cfg(test)]
pub(super) mod testing {
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpStream};
    use std::time::{Duration, Instant};

    use super::Stopped;

    /// How long a client waits for an answer before the test fails as hung: far more
    /// than any timeout under test (not a measure of it).
    pub(crate) const HANG: Duration = Duration::from_secs(30);

    /// A listener served until dropped.
    pub(crate) struct Running {
        pub(crate) addr: SocketAddr,
        stop: Option<tokio::sync::watch::Sender<bool>>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl Running {
        /// Serves `serve` on a new loopback listener.
        pub(crate) fn start<F, Fut, E>(serve: F) -> Running
        where
            F: FnOnce(tokio::net::TcpListener, Stopped) -> Fut + Send + 'static,
            Fut: std::future::Future<Output = Result<(), E>>,
            E: std::fmt::Debug,
        {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.set_nonblocking(true).unwrap();
            let addr = listener.local_addr().unwrap();
            let (stop, stop_rx) = tokio::sync::watch::channel(false);
            let thread = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .unwrap();
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                    let mut raised = stop_rx.clone();
                    let stopped: Stopped = Box::pin(async move {
                        let _ = raised.wait_for(|s| *s).await;
                    });
                    let mut raised = stop_rx;
                    // Requests still in flight a moment after the stop are cut off with
                    // the runtime.
                    let deadline = async move {
                        let _ = raised.wait_for(|s| *s).await;
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    };
                    tokio::select! {
                        _ = serve(listener, stopped) => {}
                        () = deadline => {}
                    }
                });
                runtime.shutdown_background();
            });
            Running {
                addr,
                stop: Some(stop),
                thread: Some(thread),
            }
        }

        /// A connection to it.
        pub(crate) fn connect(&self) -> TcpStream {
            let stream = TcpStream::connect(self.addr).unwrap();
            stream.set_read_timeout(Some(HANG)).unwrap();
            stream
        }
    }

    impl Drop for Running {
        fn drop(&mut self) {
            if let Some(stop) = self.stop.take() {
                let _ = stop.send(true);
            }
            if let Some(thread) = self.thread.take() {
                let _ = thread.join();
            }
        }
    }

    /// Everything `stream` receives until the server closes it (a reset counts as a
    /// close); fails if nothing ends it within [`HANG`].
    pub(crate) fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
        let mut received = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf) {
                Ok(0) => return received,
                Ok(n) => received.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    panic!("the server neither answered nor closed the connection within {HANG:?}")
                }
                Err(_) => return received,
            }
        }
    }

    /// Sends a POST of `body` (`content_type`) on `stream` and reads the answer's head
    /// and its body (by its `content-length`), leaving the connection open.
    pub(crate) fn post(
        stream: &mut TcpStream,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> String {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        // One write: a body sent apart may reach the server after it answered, and hyper
        // closes a connection whose request body is still unread then.
        stream.write_all(&[head.as_bytes(), body].concat()).unwrap();
        let mut received = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = stream.read(&mut buf).expect("an answer");
            assert!(
                n > 0,
                "closed before answering: {:?}",
                String::from_utf8_lossy(&received)
            );
            received.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&received).into_owned();
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text[..end]
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap())
                    })
                    .unwrap_or(0);
                if received.len() >= end + 4 + length {
                    return text;
                }
            }
        }
    }

    /// Waits until `done` holds; fails if it does not within [`HANG`].
    pub(crate) fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(start.elapsed() < HANG, "{what}: not within {HANG:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::testing::{Running, post, read_to_close, wait_until};
    use super::*;

    fn serving(max: usize, read_timeout: Duration) -> (Running, Arc<IngestStats>) {
        let stats = Arc::new(IngestStats::default());
        let gate = Gate::new(Transport::Http, Arc::clone(&stats), max);
        // The handler reads its body, as every real one does: hyper closes a connection
        // whose request body is left unread when the answer goes out.
        let app = axum::Router::new().route(
            "/",
            axum::routing::post(|_: axum::body::Bytes| async { "ok" }),
        );
        let running = Running::start(move |listener, stopped| {
            serve_http(listener, app, stopped, gate, read_timeout)
        });
        (running, stats)
    }

    /// With two connections open, a third is closed at once and counted as refused; once
    /// one of the two closes, a new one is served.
    #[test]
    fn the_connection_over_the_bound_is_closed_and_counted() {
        let (running, stats) = serving(2, READ_TIMEOUT);
        let mut open: Vec<_> = (0..2).map(|_| running.connect()).collect();
        for stream in &mut open {
            assert!(post(stream, "/", "text/plain", b"x").starts_with("HTTP/1.1 200"));
        }
        let counters = || stats.transport(Transport::Http);
        assert_eq!(counters().connections_open, 2, "both kept alive");
        let mut over = running.connect();
        assert_eq!(read_to_close(&mut over), b"", "closed without an answer");
        wait_until("the refusal counted", || {
            counters().connections_refused == 1
        });
        assert_eq!(counters().connections_accepted, 2);
        assert_eq!(counters().connections_open, 2);

        drop(open.pop());
        wait_until("the closed connection's place given back", || {
            counters().connections_open == 1
        });
        let mut again = running.connect();
        assert!(post(&mut again, "/", "text/plain", b"x").starts_with("HTTP/1.1 200"));
        assert_eq!(counters().connections_accepted, 3);
        assert_eq!(counters().connections_refused, 1);
    }

    /// A client that sends part of a request's headers and stalls is closed once the
    /// read timeout has passed (hyper's header timeout, which needs the timer
    /// `axum::serve` does not set), counted as timed out, and its place given back.
    #[test]
    fn stalled_headers_are_closed_after_the_read_timeout() {
        let (running, stats) = serving(1, Duration::from_millis(200));
        let mut stalled = running.connect();
        stalled
            .write_all(b"POST / HTTP/1.1\r\nHost: test\r\nContent-")
            .unwrap();
        assert_eq!(read_to_close(&mut stalled), b"", "closed without an answer");
        wait_until("the place given back", || {
            stats.transport(Transport::Http).connections_open == 0
        });
        assert_eq!(stats.transport(Transport::Http).timed_out, 1);
        let mut next = running.connect();
        assert!(post(&mut next, "/", "text/plain", b"x").starts_with("HTTP/1.1 200"));
    }
}
