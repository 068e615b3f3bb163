//! Binding the UDP socket(s).

use std::net::SocketAddr;
use std::sync::Arc;

use socket2::{Domain, Protocol, Socket, Type};

use super::datagram::{DatagramReceiver, set_recv_buffer};
use super::receivers::{Address, Receivers, bound_inet};
use super::{IDLE_INTERVAL, ListenError, PacketHandler, Step};
use crate::config::ingest::{IngestConfig, UdpConfig};
use crate::vocabulary::Transport;

/// Starts the UDP receiver if `ingest.udp.listen` is set: one thread per socket.
pub(super) fn start<F, H>(
    config: &IngestConfig,
    receivers: &mut Receivers,
    factory: &Arc<F>,
) -> Result<(), ListenError>
where
    F: Fn(Transport) -> H + Send + Sync + 'static,
    H: PacketHandler,
{
    let Some(addr) = config.udp.listen else {
        return Ok(());
    };
    let bound = bind(&config.udp, addr)?;
    receivers.set_recv_buffer(Transport::Udp, bound.recv_buffer_bytes);
    receivers.listen(Transport::Udp, Address::Inet(bound.local_addr));
    for (i, socket) in bound.sockets.into_iter().enumerate() {
        let worker = DatagramReceiver {
            socket,
            handler: factory(Transport::Udp),
            stats: receivers.shared_stats(),
            transport: Transport::Udp,
            stop: receivers.stop_flag(),
            batch_size: config.udp.batch_size,
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
    Ok(())
}

/// The bound UDP sockets, one per receive thread.
struct UdpSockets {
    sockets: Vec<Socket>,
    local_addr: SocketAddr,
    recv_buffer_bytes: usize,
}

/// Binds `config.threads` sockets to `addr`. With more than one, every socket sets
/// `SO_REUSEPORT` and the kernel spreads senders over them; with one it does not, so a second
/// instance on the same port fails with "address in use" instead of silently sharing traffic.
/// Port 0 binds the first socket to a free port and the others to the same one.
fn bind(config: &UdpConfig, addr: SocketAddr) -> Result<UdpSockets, ListenError> {
    let address = addr.to_string();
    let fail = |step: Step| {
        let address = address.clone();
        move |e| ListenError::io(Transport::Udp, address, step, e)
    };
    let threads = config.threads.max(1);
    let mut sockets = Vec::with_capacity(threads);
    let mut bind_addr = addr;
    let mut warned = false;
    let mut recv_buffer_bytes = 0;
    for i in 0..threads {
        // socket2 sets close-on-exec on creation.
        let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
            .map_err(fail(Step::CreateSocket))?;
        if threads > 1 {
            socket
                .set_reuse_port(true)
                .map_err(fail(Step::SetOption("SO_REUSEPORT")))?;
        }
        recv_buffer_bytes = set_recv_buffer(
            &socket,
            config.recv_buffer_bytes,
            Transport::Udp,
            &address,
            &mut warned,
        )?;
        socket
            .set_read_timeout(Some(IDLE_INTERVAL))
            .map_err(fail(Step::SetOption("SO_RCVTIMEO")))?;
        socket.bind(&bind_addr.into()).map_err(fail(Step::Bind))?;
        if i == 0 {
            bind_addr = bound_inet(Transport::Udp, addr, &socket)?;
        }
        sockets.push(socket);
    }
    Ok(UdpSockets {
        sockets,
        local_addr: bind_addr,
        recv_buffer_bytes,
    })
}
