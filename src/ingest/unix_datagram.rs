//! The Unix datagram socket. Its receive loop is the UDP one (`datagram`).

use std::path::Path;

use socket2::{Socket, Type};

use super::datagram::set_recv_buffer;
use super::unix_path::{self, SocketFile};
use super::{IDLE_INTERVAL, ListenError, Step};
use crate::config::ingest::UnixDatagramConfig;
use crate::vocabulary::Transport;

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
pub(super) struct Bound {
    pub(super) socket: Socket,
    pub(super) file: SocketFile,
    pub(super) recv_buffer_bytes: usize,
    /// `net.unix.max_dgram_qlen` when the socket was made (it keeps that value).
    pub(super) max_dgram_qlen: Option<u64>,
}

/// Binds the Unix datagram socket at `path`.
pub(super) fn bind(config: &UnixDatagramConfig, path: &Path) -> Result<Bound, ListenError> {
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
