//! [`start`] and [`Receivers`]: bringing the receivers up and down.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::thread::JoinHandle;

use super::datagram::DatagramReceiver;
use super::unix_path::SocketFile;
use super::unix_stream::Acceptor;
use super::worker::StopFlag;
use super::{IngestStats, ListenError, PacketHandler, Step};
use super::{udp, unix_datagram, unix_stream};
use crate::config::ingest::IngestConfig;
use crate::vocabulary::Transport;

/// Binds every configured receiver and starts its threads.
///
/// `factory` is called once per receive thread (and once per accepted stream connection,
/// from the accept thread) to create that thread's handler.
///
/// On error nothing is left behind: threads already started are stopped and joined, socket
/// files already created are removed.
pub fn start<F, H>(config: &IngestConfig, factory: F) -> Result<Receivers, ListenError>
where
    F: Fn(Transport) -> H + Send + Sync + 'static,
    H: PacketHandler,
{
    config.validate()?;
    let factory = Arc::new(factory);
    // Dropped on any early return below, which stops what was started.
    let mut receivers = Receivers {
        stop: StopFlag::default(),
        threads: Vec::new(),
        files: Vec::new(),
        stats: Arc::new(IngestStats::default()),
        udp_local_addr: None,
        uds_path: None,
        uds_stream_path: None,
        uds_max_dgram_qlen: None,
    };

    if let Some(addr) = config.udp.listen {
        let bound = udp::bind(&config.udp, addr)?;
        receivers.set_recv_buffer(Transport::Udp, bound.recv_buffer_bytes);
        receivers.udp_local_addr = Some(bound.local_addr);
        let batch_size = config.udp.batch_size;
        for (i, socket) in bound.sockets.into_iter().enumerate() {
            let worker = DatagramReceiver {
                socket,
                handler: factory(Transport::Udp),
                stats: Arc::clone(&receivers.stats),
                transport: Transport::Udp,
                stop: receivers.stop.clone(),
                batch_size,
                queue_limit: None,
            };
            receivers.spawn(
                Transport::Udp,
                &addr.to_string(),
                format!("cs-udp-{i}"),
                move || worker.run(),
            )?;
        }
        tracing::info!(
            address = %bound.local_addr,
            threads = config.udp.threads,
            recv_buffer_bytes = bound.recv_buffer_bytes,
            "Listening for StatsD lines over UDP."
        );
    }

    if let Some(path) = &config.uds.path {
        let unix_datagram::Bound {
            socket,
            file,
            recv_buffer_bytes,
            max_dgram_qlen,
        } = unix_datagram::bind(&config.uds, path)?;
        receivers.set_recv_buffer(Transport::UnixDatagram, recv_buffer_bytes);
        receivers.uds_max_dgram_qlen = max_dgram_qlen;
        if let Some(qlen) = max_dgram_qlen {
            receivers
                .stats
                .get(Transport::UnixDatagram)
                .queue_limit
                .store(qlen, std::sync::atomic::Ordering::Relaxed);
        }
        let address = path.display().to_string();
        receivers.files.push(file);
        receivers.uds_path = Some(path.clone());
        let worker = DatagramReceiver {
            socket,
            handler: factory(Transport::UnixDatagram),
            stats: Arc::clone(&receivers.stats),
            transport: Transport::UnixDatagram,
            stop: receivers.stop.clone(),
            batch_size: config.uds.batch_size,
            queue_limit: max_dgram_qlen,
        };
        receivers.spawn(
            Transport::UnixDatagram,
            &address,
            "cs-uds".into(),
            move || worker.run(),
        )?;
        tracing::info!(
            path = address,
            mode = %config.uds.mode,
            recv_buffer_bytes,
            "Listening for StatsD lines on a Unix datagram socket."
        );
    }

    if let Some(path) = &config.uds_stream.path {
        let (listener, file) = unix_stream::bind(&config.uds_stream, path)?;
        let address = path.display().to_string();
        receivers.files.push(file);
        receivers.uds_stream_path = Some(path.clone());
        let acceptor = Acceptor {
            listener,
            factory: Arc::clone(&factory),
            stats: Arc::clone(&receivers.stats),
            stop: receivers.stop.clone(),
            max_message_bytes: config.uds_stream.max_message_bytes,
            max_connections: config.uds_stream.max_connections,
        };
        receivers.spawn(
            Transport::UnixStream,
            &address,
            "cs-uds-accept".into(),
            move || acceptor.run(),
        )?;
        tracing::info!(
            path = address,
            mode = %config.uds_stream.mode,
            max_connections = config.uds_stream.max_connections,
            "Listening for length-prefixed StatsD messages on a Unix stream socket."
        );
    }

    Ok(receivers)
}

/// The running receivers. [`Receivers::shutdown`] (or drop) stops them after draining.
#[derive(Debug)]
pub struct Receivers {
    stop: StopFlag,
    threads: Vec<(String, JoinHandle<()>)>,
    files: Vec<SocketFile>,
    stats: Arc<IngestStats>,
    udp_local_addr: Option<SocketAddr>,
    uds_path: Option<PathBuf>,
    uds_stream_path: Option<PathBuf>,
    uds_max_dgram_qlen: Option<u64>,
}

impl Receivers {
    /// The bound UDP address (with the real port when port 0 was configured), if UDP is on.
    pub fn udp_local_addr(&self) -> Option<SocketAddr> {
        self.udp_local_addr
    }

    /// The Unix datagram socket path, if that receiver is on.
    pub fn uds_path(&self) -> Option<&Path> {
        self.uds_path.as_deref()
    }

    /// `net.unix.max_dgram_qlen` of the Unix datagram socket (read when it was made), if
    /// that receiver is on and the value could be read.
    pub fn uds_max_dgram_qlen(&self) -> Option<u64> {
        self.uds_max_dgram_qlen
    }

    /// The Unix stream socket path, if that receiver is on.
    pub fn uds_stream_path(&self) -> Option<&Path> {
        self.uds_stream_path.as_deref()
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

    fn set_recv_buffer(&self, transport: Transport, bytes: usize) {
        self.stats
            .get(transport)
            .recv_buffer_bytes
            .store(bytes as u64, Relaxed);
    }

    fn spawn(
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

impl Drop for Receivers {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}
