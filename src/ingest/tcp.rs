//! The TCP receiver: StatsD lines, newline-framed, served by `stream` like the Unix stream
//! socket's connections.
//!
//! The listener sets `SO_REUSEADDR` (a restart binds again at once while old connections
//! sit in `TIME_WAIT`), not `SO_REUSEPORT`: a second process on the same port fails with
//! "address in use" instead of silently taking a share of the connections.

use std::net::SocketAddr;
use std::sync::Arc;

use socket2::{Domain, Protocol, Socket, Type};

use super::receivers::{Address, Receivers};
use super::stream::{Acceptor, StreamSettings};
use super::{IDLE_INTERVAL, ListenError, PacketHandler, Step};
use crate::config::ingest::{IngestConfig, StreamFraming};
use crate::vocabulary::Transport;

const TRANSPORT: Transport = Transport::Tcp;

/// Connections the kernel may hold completed before the accept thread takes them.
const BACKLOG: i32 = 1024;

/// Starts the TCP receiver if `ingest.tcp.enabled`: the accept thread.
pub(super) fn start<F, H>(
    config: &IngestConfig,
    receivers: &mut Receivers,
    factory: &Arc<F>,
) -> Result<(), ListenError>
where
    F: Fn(Transport) -> H + Send + Sync + 'static,
    H: PacketHandler,
{
    let tcp = &config.tcp;
    if !tcp.enabled {
        return Ok(());
    }
    let (listener, local) = bind(tcp.listen)?;
    receivers.listen(TRANSPORT, Address::Inet(local));
    let acceptor = Acceptor {
        listener,
        factory: Arc::clone(factory),
        stats: receivers.shared_stats(),
        stop: receivers.stop_flag(),
        settings: StreamSettings {
            transport: TRANSPORT,
            framing: StreamFraming::Newline,
            max_message_bytes: tcp.max_line_bytes,
            max_connections: tcp.max_connections,
            idle_timeout: tcp.idle_timeout,
        },
    };
    receivers.spawn(
        TRANSPORT,
        &tcp.listen.to_string(),
        "cs-tcp-accept".into(),
        move || acceptor.run(),
    )?;
    tracing::info!(
        address = %local,
        max_connections = tcp.max_connections,
        "Listening for newline-framed StatsD lines over TCP."
    );
    Ok(())
}

/// Binds and listens at `addr`; returns the listener and its real address (port 0 picks
/// a free port).
fn bind(addr: SocketAddr) -> Result<(Socket, SocketAddr), ListenError> {
    let address = addr.to_string();
    let fail = |step: Step| {
        let address = address.clone();
        move |e| ListenError::io(TRANSPORT, address, step, e)
    };
    // socket2 sets close-on-exec on creation.
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .map_err(fail(Step::CreateSocket))?;
    socket
        .set_reuse_address(true)
        .map_err(fail(Step::SetOption("SO_REUSEADDR")))?;
    // On Linux the receive timeout also bounds a blocking accept(2).
    socket
        .set_read_timeout(Some(IDLE_INTERVAL))
        .map_err(fail(Step::SetOption("SO_RCVTIMEO")))?;
    socket.bind(&addr.into()).map_err(fail(Step::Bind))?;
    socket.listen(BACKLOG).map_err(fail(Step::Listen))?;
    let local = socket
        .local_addr()
        .map_err(fail(Step::Inspect))?
        .as_socket()
        .ok_or_else(|| fail(Step::Inspect)(std::io::ErrorKind::InvalidData.into()))?;
    Ok((socket, local))
}
