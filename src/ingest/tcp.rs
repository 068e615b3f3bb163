//! The TCP receiver: StatsD lines, newline-framed, served by `stream` like the Unix stream
//! socket's connections.
//!
//! The listener sets `SO_REUSEADDR` (a restart binds again at once while old connections
//! sit in `TIME_WAIT`), not `SO_REUSEPORT`: a second process on the same port fails with
//! "address in use" instead of silently taking a share of the connections.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, TcpKeepalive, Type};

use super::receivers::Receivers;
use super::stream::{Acceptor, StreamSettings};
use super::{IDLE_INTERVAL, ListenError, PacketHandler, Step};
use crate::config::ingest::{IngestConfig, StreamFraming};
use crate::vocabulary::Transport;

const TRANSPORT: Transport = Transport::Tcp;

/// Connections the kernel may hold completed before the accept thread takes them.
const BACKLOG: i32 = 1024;

/// Keepalive probes of accepted connections (inherited from the listener on Linux): after
/// 60 s of silence, every 10 s; the kernel's default count (9 on Linux) of unanswered
/// probes closes a connection whose peer vanished without a FIN (a host or network gone),
/// so it gives back its slot of `max_connections` without an idle timeout.
const KEEPALIVE: (Duration, Duration) = (Duration::from_secs(60), Duration::from_secs(10));

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
    let listener = bind(tcp.listen)?;
    let local = receivers.listen_inet(TRANSPORT, tcp.listen, &listener)?;
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

/// Binds and listens at `addr` (port 0 picks a free port).
fn bind(addr: SocketAddr) -> Result<Socket, ListenError> {
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
    let keepalive = TcpKeepalive::new()
        .with_time(KEEPALIVE.0)
        .with_interval(KEEPALIVE.1);
    socket
        .set_tcp_keepalive(&keepalive)
        .map_err(fail(Step::SetOption("SO_KEEPALIVE")))?;
    // On Linux the receive timeout also bounds a blocking accept(2).
    socket
        .set_read_timeout(Some(IDLE_INTERVAL))
        .map_err(fail(Step::SetOption("SO_RCVTIMEO")))?;
    socket.bind(&addr.into()).map_err(fail(Step::Bind))?;
    socket.listen(BACKLOG).map_err(fail(Step::Listen))?;
    Ok(socket)
}

#[cfg(test)]
mod tests {
    use super::super::receivers::bound_inet;
    use super::*;

    /// Accepted connections carry the listener's keepalive probes (Linux copies them on
    /// accept), which is what frees the slot of a peer that vanished.
    #[test]
    fn accepted_connections_inherit_keepalive() {
        let asked = "127.0.0.1:0".parse().unwrap();
        let listener = bind(asked).unwrap();
        let local = bound_inet(TRANSPORT, asked, &listener).unwrap();
        let _client = std::net::TcpStream::connect(local).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        assert!(accepted.keepalive().unwrap());
        #[cfg(target_os = "linux")]
        {
            assert_eq!(accepted.tcp_keepalive_time().unwrap(), KEEPALIVE.0);
            assert_eq!(accepted.tcp_keepalive_interval().unwrap(), KEEPALIVE.1);
        }
    }
}
