//! [`Receivers`]: the running receivers, what each transport's `start` records in them
//! (threads, socket files, where it listens), and the shutdown order. Bringing them up is
//! `start.rs`, which imports the transports; they import this file.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::thread::JoinHandle;

use socket2::SockRef;

use super::unix_path::SocketFile;
use super::worker::StopFlag;
use super::{IngestStats, ListenError, Step};
use crate::vocabulary::Transport;

/// Where one receiver listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listening {
    /// Its transport.
    pub transport: Transport,
    /// The bound address (with the real port when port 0 was configured) or the socket path.
    pub address: Address,
}

/// A bound network address or a Unix socket path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    /// An IP address and port.
    Inet(SocketAddr),
    /// A Unix socket file.
    Path(PathBuf),
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Inet(addr) => write!(f, "{addr}"),
            Address::Path(path) => write!(f, "{}", path.display()),
        }
    }
}

/// The running receivers. [`Receivers::shutdown`] (or drop) stops them after draining.
#[derive(Debug)]
pub struct Receivers {
    stop: StopFlag,
    threads: Vec<(String, JoinHandle<()>)>,
    files: Vec<SocketFile>,
    stats: Arc<IngestStats>,
    listening: Vec<Listening>,
    uds_max_dgram_qlen: Option<u64>,
}

impl Receivers {
    /// Nothing started yet; [`start`](super::start) fills it in.
    pub(super) fn empty() -> Receivers {
        Receivers {
            stop: StopFlag::default(),
            threads: Vec::new(),
            files: Vec::new(),
            stats: Arc::new(IngestStats::default()),
            listening: Vec::new(),
            uds_max_dgram_qlen: None,
        }
    }

    /// Where every receiver listens, in start order.
    pub fn listening(&self) -> &[Listening] {
        &self.listening
    }

    /// The bound address of `transport` (with the real port when port 0 was configured),
    /// if it listens on one.
    pub fn inet(&self, transport: Transport) -> Option<SocketAddr> {
        self.listening.iter().find_map(|l| match &l.address {
            Address::Inet(addr) if l.transport == transport => Some(*addr),
            _ => None,
        })
    }

    /// The socket path of `transport`, if it listens on one.
    pub fn path(&self, transport: Transport) -> Option<&Path> {
        self.listening.iter().find_map(|l| match &l.address {
            Address::Path(path) if l.transport == transport => Some(path.as_path()),
            _ => None,
        })
    }

    /// `net.unix.max_dgram_qlen` of the Unix datagram socket (read when it was made), if
    /// that receiver is on and the value could be read.
    pub fn uds_max_dgram_qlen(&self) -> Option<u64> {
        self.uds_max_dgram_qlen
    }

    /// The live counters; the handle stays valid after shutdown.
    pub fn stats(&self) -> Arc<IngestStats> {
        Arc::clone(&self.stats)
    }

    /// Stops every receiver and waits for it:
    ///
    /// 1. removes our socket files, so no new sender can reach us;
    /// 2. raises the stop flag: within one [`IDLE_INTERVAL`](super::IDLE_INTERVAL) each
    ///    thread switches to non-blocking reads and drains what the kernel already holds
    ///    (datagram queues, stream connections' buffers, connections waiting in the backlog),
    ///    for at most [`MAX_DRAIN`](super::MAX_DRAIN);
    /// 3. each handler gets a last `idle()`; threads are joined and sockets closed.
    ///
    /// It blocks for up to about `IDLE_INTERVAL + MAX_DRAIN`; from async code use
    /// [`Receivers::shutdown_async`] or `spawn_blocking`.
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    /// [`Receivers::shutdown`] on tokio's blocking pool.
    pub async fn shutdown_async(self) {
        if let Err(error) = tokio::task::spawn_blocking(move || self.shutdown()).await {
            tracing::error!(%error, "Receiver shutdown task failed.");
        }
    }

    fn stop_and_join(&mut self) {
        if self.threads.is_empty() && self.files.is_empty() {
            return;
        }
        for file in &mut self.files {
            file.remove();
        }
        self.stop.raise();
        for (name, handle) in self.threads.drain(..) {
            if handle.join().is_err() {
                tracing::error!(thread = name, "A receive thread panicked.");
            }
        }
        self.files.clear();
    }

    /// Records where `transport` listens.
    pub(super) fn listen(&mut self, transport: Transport, address: Address) {
        self.listening.push(Listening { transport, address });
    }

    /// Records that `transport` listens where `socket` is bound (asked for `asked`; the
    /// real port when that was 0), and returns that address.
    pub(super) fn listen_inet(
        &mut self,
        transport: Transport,
        asked: SocketAddr,
        socket: &impl AsFd,
    ) -> Result<SocketAddr, ListenError> {
        let local = bound_inet(transport, asked, socket)?;
        self.listen(transport, Address::Inet(local));
        Ok(local)
    }

    /// Records that `transport` listens at `path` (as configured) and keeps its socket
    /// file, removed at shutdown (or on a failed start).
    pub(super) fn listen_unix(&mut self, transport: Transport, path: &Path, file: SocketFile) {
        self.files.push(file);
        self.listen(transport, Address::Path(path.to_owned()));
    }

    /// Records the Unix datagram queue length the socket got.
    pub(super) fn set_uds_max_dgram_qlen(&mut self, qlen: Option<u64>) {
        self.uds_max_dgram_qlen = qlen;
        if let Some(qlen) = qlen {
            self.stats
                .get(Transport::UnixDatagram)
                .queue_limit
                .store(qlen, Relaxed);
        }
    }

    /// The flag every thread polls.
    pub(super) fn stop_flag(&self) -> StopFlag {
        self.stop.clone()
    }

    /// The counters, for a thread to keep.
    pub(super) fn shared_stats(&self) -> Arc<IngestStats> {
        Arc::clone(&self.stats)
    }

    pub(super) fn set_recv_buffer(&self, transport: Transport, bytes: usize) {
        self.stats
            .get(transport)
            .recv_buffer_bytes
            .store(bytes as u64, Relaxed);
    }

    /// Starts a named receive thread; it is joined at shutdown.
    pub(super) fn spawn(
        &mut self,
        transport: Transport,
        address: &str,
        name: String,
        body: impl FnOnce() + Send + 'static,
    ) -> Result<(), ListenError> {
        let handle = std::thread::Builder::new()
            .name(name.clone())
            .spawn(body)
            .map_err(|e| ListenError::io(transport, address, Step::SpawnThread, e))?;
        self.threads.push((name, handle));
        Ok(())
    }
}

/// The address `socket` is bound to, asked for `asked` (the real port when that was 0).
pub(super) fn bound_inet(
    transport: Transport,
    asked: SocketAddr,
    socket: &impl AsFd,
) -> Result<SocketAddr, ListenError> {
    let fail = |e| ListenError::io(transport, asked.to_string(), Step::Inspect, e);
    SockRef::from(socket)
        .local_addr()
        .map_err(fail)?
        .as_socket()
        .ok_or_else(|| fail(std::io::ErrorKind::InvalidData.into()))
}

impl Drop for Receivers {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}
