//! The Unix datagram socket. Its receive loop is the UDP one (`datagram`).

use std::path::Path;
use std::sync::Arc;

use socket2::{Socket, Type};

use super::datagram::{DatagramReceiver, set_recv_buffer};
use super::receivers::Receivers;
use super::unix_path::{self, SocketFile};
use super::{IDLE_INTERVAL, ListenError, PacketHandler, Step};
use crate::config::ingest::{IngestConfig, UnixDatagramConfig};
use crate::vocabulary::Transport;

/// Starts the Unix datagram receiver if `ingest.uds.path` is set: one socket, one thread.
pub(super) fn start<F, H>(
    config: &IngestConfig,
    receivers: &mut Receivers,
    factory: &Arc<F>,
) -> Result<(), ListenError>
where
    F: Fn(Transport) -> H + Send + Sync + 'static,
    H: PacketHandler,
{
    let Some(path) = &config.uds.path else {
        return Ok(());
    };
    let Bound {
        socket,
        file,
        recv_buffer_bytes,
        max_dgram_qlen,
    } = bind(&config.uds, path)?;
    receivers.set_recv_buffer(Transport::UnixDatagram, recv_buffer_bytes);
    receivers.set_uds_max_dgram_qlen(max_dgram_qlen);
    receivers.listen_unix(Transport::UnixDatagram, path, file);
    let worker = DatagramReceiver {
        socket,
        handler: factory(Transport::UnixDatagram),
        stats: receivers.shared_stats(),
        transport: Transport::UnixDatagram,
        stop: receivers.stop_flag(),
        batch_size: config.uds.batch_size,
        queue_limit: max_dgram_qlen,
    };
    let address = path.display().to_string();
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
    Ok(())
}

/// `net.unix.max_dgram_qlen` below which a warning is logged (and shown by `dev`).
pub const ADVISED_QLEN: u64 = 512;

/// The sysctl that raises the queue, as an operator types it.
pub const RAISE_QLEN: &str = "sysctl -w net.unix.max_dgram_qlen=512";

/// `net.unix.max_dgram_qlen` of this network namespace now, if it can be read.
pub fn max_dgram_qlen() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/net/unix/max_dgram_qlen")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// A bound Unix datagram socket.
struct Bound {
    socket: Socket,
    file: SocketFile,
    recv_buffer_bytes: usize,
    /// `net.unix.max_dgram_qlen` when the socket was made (it keeps that value).
    max_dgram_qlen: Option<u64>,
}

/// Binds the Unix datagram socket at `path`.
fn bind(config: &UnixDatagramConfig, path: &Path) -> Result<Bound, ListenError> {
    let transport = Transport::UnixDatagram;
    let address = path.display().to_string();
    let mut recv_buffer_bytes = 0;
    let (socket, file) = unix_path::bind(path, Type::DGRAM, config.mode, transport, |socket| {
        let mut warned = false;
        recv_buffer_bytes = set_recv_buffer(
            socket,
            config.recv_buffer_bytes,
            transport,
            &address,
            &mut warned,
        )?;
        socket.set_read_timeout(Some(IDLE_INTERVAL)).map_err(|e| {
            ListenError::io(
                transport,
                address.clone(),
                Step::SetOption("SO_RCVTIMEO"),
                e,
            )
        })
    })?;
    // The socket took the value in force now; read it right after.
    let max_dgram_qlen = max_dgram_qlen();
    warn_if_short(&address, max_dgram_qlen);
    Ok(Bound {
        socket,
        file,
        recv_buffer_bytes,
        max_dgram_qlen,
    })
}

/// How many datagrams may wait in a Unix datagram socket is `net.unix.max_dgram_qlen` (per
/// network namespace, read when the socket is created), not `SO_RCVBUF`. With the default
/// of 10, a burst fills it at once: blocking senders wait, and non-blocking ones (several
/// StatsD clients' default) lose datagrams, which nothing on this side can count.
fn warn_if_short(address: &str, qlen: Option<u64>) {
    if let Some(qlen) = qlen
        && qlen < ADVISED_QLEN
    {
        tracing::warn!(
            path = address,
            max_dgram_qlen = qlen,
            "The Unix datagram queue holds {qlen} datagrams: non-blocking senders lose datagrams \
             whenever it is full (countersink_uds_queue_full_total shows when), blocking ones wait. \
             Raise it with `{RAISE_QLEN}` (or more), then restart countersink; or use the Unix \
             stream socket."
        );
    }
}
