//! The receive loop shared by UDP and Unix datagram sockets, and `SO_RCVBUF` set-up.
//!
//! # `recvmmsg` or `recv`
//!
//! `batch_size > 1` (the default, 32) reads with `recvmmsg(2)` and `MSG_WAITFORONE`: one
//! system call returns every datagram already queued, up to the batch size, and blocks only
//! for the first. `batch_size = 1` reads one datagram per `recvmsg(2)`.
//!
//! Measured with `tests/bench/ingest_recv.rs` on the 2-core build VM (receiver pinned to CPU
//! 0, sender to CPU 1, count-only handler, a pre-filled queue of 300k single-line datagrams,
//! modes interleaved in each round, 9 rounds, medians; ratios to `recvmsg`):
//!
//! | mode | load ~1 (one other busy process) | load 4-7 (parallel builds) |
//! | --- | --- | --- |
//! | `recvmsg` | 1.00 (897k datagrams/s) | 1.00 (581k/s) |
//! | `recvmmsg` x8 | 1.39 | 1.01 (in-round 1.27) |
//! | `recvmmsg` x32 | 1.44 | 1.19 (in-round 1.21) |
//! | `recvmmsg` x64 | 1.49 | 1.15 (in-round 1.25) |
//!
//! x64 is within noise of x32 and takes twice the buffers, hence the default of 32. Two
//! `SO_REUSEPORT` threads did not drain faster than one (1.01x with `recvmsg`, 0.97x with
//! x32 at load ~1, worse at load 4-7): on this VM the second core was taken by
//! other work, so the default is 1 thread; the published anchor for more cores is +30 %
//! (brubeck) and ~3x with 4 sockets (Cloudflare).

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;

use socket2::Socket;

use super::stats::TransportStats;
use super::sys;
use super::worker::{ERROR_BACKOFF, IdleClock, Phase, RateLimitedLog, StopFlag};
use super::{IngestStats, ListenError, MAX_DATAGRAM_BYTES, PacketHandler, Step};
use crate::vocabulary::Transport;

/// Applies the requested receive buffer to `socket` and returns the effective size as the
/// kernel reports it.
///
/// When `net.core.rmem_max` caps the request, `SO_RCVBUFFORCE` is tried (it needs
/// `CAP_NET_ADMIN`); if the buffer is still short, one warning is logged per `warned` flag.
pub(super) fn set_recv_buffer(
    socket: &Socket,
    requested: usize,
    transport: Transport,
    address: &str,
    warned: &mut bool,
) -> Result<usize, ListenError> {
    let read_back = |socket: &Socket| {
        socket
            .recv_buffer_size()
            .map_err(|e| ListenError::io(transport, address, Step::Inspect, e))
    };
    if requested == 0 {
        return read_back(socket);
    }
    socket
        .set_recv_buffer_size(requested)
        .map_err(|e| ListenError::io(transport, address, Step::SetOption("SO_RCVBUF"), e))?;
    let mut effective = read_back(socket)?;
    if is_capped(effective, requested) {
        match sys::set_recv_buffer_force(socket.as_fd(), requested) {
            Ok(()) => effective = read_back(socket)?,
            Err(error) => {
                tracing::debug!(%transport, address, %error, "SO_RCVBUFFORCE not permitted")
            }
        }
    }
    if is_capped(effective, requested) && !*warned {
        *warned = true;
        let rmem_max = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| "?".to_owned());
        tracing::warn!(
            %transport,
            address,
            requested,
            effective,
            rmem_max,
            "Receive buffer smaller than requested: net.core.rmem_max caps it and SO_RCVBUFFORCE \
             needs CAP_NET_ADMIN. Datagrams may be dropped in bursts; raise it with \
             `sysctl -w net.core.rmem_max={requested}`."
        );
    }
    Ok(effective)
}

/// Linux reports twice the size it granted (bookkeeping allowance); other systems report it as is.
fn is_capped(effective: usize, requested: usize) -> bool {
    let factor = if cfg!(target_os = "linux") { 2 } else { 1 };
    effective < requested.saturating_mul(factor)
}

/// One datagram receive thread's state; [`DatagramReceiver::run`] is the thread body.
pub(super) struct DatagramReceiver<H> {
    pub(super) socket: Socket,
    pub(super) handler: H,
    pub(super) stats: Arc<IngestStats>,
    pub(super) transport: Transport,
    pub(super) stop: StopFlag,
    pub(super) batch_size: usize,
    /// Unix datagram sockets: `net.unix.max_dgram_qlen` at bind, against which each read's
    /// count of datagrams is held (see [`QueueWatch`]).
    pub(super) queue_limit: Option<u64>,
}

impl<H: PacketHandler> DatagramReceiver<H> {
    /// Receives until shutdown, drains, calls `idle()` a last time.
    pub(super) fn run(self) {
        #[cfg(target_os = "linux")]
        if self.batch_size > 1 {
            let reader = sys::MmsgBatch::new(self.batch_size, MAX_DATAGRAM_BYTES);
            return self.receive_loop(reader);
        }
        let reader = Single {
            buf: vec![0; MAX_DATAGRAM_BYTES],
            len: 0,
            truncated: false,
        };
        self.receive_loop(reader)
    }

    fn receive_loop<R: Reader>(self, mut reader: R) {
        let DatagramReceiver {
            socket,
            mut handler,
            stats,
            transport,
            stop,
            queue_limit,
            ..
        } = self;
        let mut queue = queue_limit.map(QueueWatch::new);
        let stats = stats.get(transport);
        let fd = socket.as_fd();
        let mut phase = Phase::Running;
        let mut clock = IdleClock::new();
        let mut errors = RateLimitedLog::default();
        let mut drops = KernelDrops::default();
        loop {
            phase.update(&stop);
            let flags = if phase.is_draining() {
                sys::DONT_WAIT
            } else {
                0
            };
            match reader.recv(fd, flags) {
                Ok(n) => {
                    let (mut packets, mut bytes, mut truncated) = (0u64, 0u64, 0u64);
                    for i in 0..n {
                        let (packet, was_truncated) = reader.packet(i);
                        if was_truncated {
                            truncated += 1;
                            continue;
                        }
                        packets += 1;
                        bytes += packet.len() as u64;
                        if !packet.is_empty() {
                            handler.handle(packet);
                        }
                    }
                    TransportStats::add(&stats.packets, packets);
                    TransportStats::add(&stats.bytes, bytes);
                    TransportStats::add(&stats.truncated, truncated);
                    if let Some(queue) = &mut queue {
                        queue.seen(n as u64, stats);
                    }
                    if phase.drain_expired() {
                        tracing::warn!(%transport, "Shutdown drain stopped after its time limit; senders are still sending.");
                        break;
                    }
                    if clock.due() {
                        drops.sample(fd, stats);
                        handler.idle();
                    }
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    if phase.is_draining() {
                        break;
                    }
                    drops.sample(fd, stats);
                    handler.idle();
                    clock.reset();
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => {
                    TransportStats::add(&stats.receive_errors, 1);
                    errors.log(|suppressed| {
                        tracing::warn!(%transport, %error, suppressed, "Receive failed.");
                    });
                    if phase.is_draining() {
                        break;
                    }
                    std::thread::sleep(ERROR_BACKOFF);
                }
            }
        }
        drops.sample(fd, stats);
        handler.idle();
    }
}

/// A way of reading datagrams: one per call, or a batch.
trait Reader {
    /// Receives one or more datagrams; returns how many.
    fn recv(&mut self, fd: BorrowedFd<'_>, flags: i32) -> io::Result<usize>;
    /// Datagram `i` of the last call and whether it was truncated.
    fn packet(&self, i: usize) -> (&[u8], bool);
}

/// One `recvmsg` per datagram.
struct Single {
    buf: Vec<u8>,
    len: usize,
    truncated: bool,
}

impl Reader for Single {
    fn recv(&mut self, fd: BorrowedFd<'_>, flags: i32) -> io::Result<usize> {
        let (len, truncated) = sys::recv_one(fd, &mut self.buf, flags)?;
        self.len = len;
        self.truncated = truncated;
        Ok(1)
    }

    fn packet(&self, _i: usize) -> (&[u8], bool) {
        (&self.buf[..self.len], self.truncated)
    }
}

#[cfg(target_os = "linux")]
impl Reader for sys::MmsgBatch {
    fn recv(&mut self, fd: BorrowedFd<'_>, flags: i32) -> io::Result<usize> {
        sys::MmsgBatch::recv(self, fd, flags)
    }

    fn packet(&self, i: usize) -> (&[u8], bool) {
        sys::MmsgBatch::packet(self, i)
    }
}

/// What each read says of a Unix datagram socket's queue. Linux lets
/// `net.unix.max_dgram_qlen` + 1 datagrams wait (a sender is held back or refused when
/// more than `max_dgram_qlen` are queued), and the receiver cannot ask how many are
/// queued: `SIOCINQ` gives the size of the next one only. But one `recvmmsg` takes every
/// datagram already waiting, up to the batch size, so a read that returns more than
/// `max_dgram_qlen` found the queue at its limit (or kept finding it refilled there while
/// it read): blocking senders were waiting and non-blocking ones losing datagrams.
struct QueueWatch {
    limit: u64,
    high_water: u64,
}

impl QueueWatch {
    fn new(limit: u64) -> QueueWatch {
        QueueWatch {
            limit,
            high_water: 0,
        }
    }

    fn seen(&mut self, datagrams: u64, stats: &TransportStats) {
        if datagrams > self.high_water {
            self.high_water = datagrams;
            stats
                .queue_high_water
                .fetch_max(datagrams, std::sync::atomic::Ordering::Relaxed);
        }
        if datagrams > self.limit {
            TransportStats::add(&stats.queue_full, 1);
        }
    }
}

/// Turns the kernel's wrapping per-socket drop counter into increments of `kernel_drops`.
#[derive(Debug, Default)]
struct KernelDrops {
    last: u32,
    unsupported: bool,
}

impl KernelDrops {
    fn sample(&mut self, fd: BorrowedFd<'_>, stats: &TransportStats) {
        if self.unsupported {
            return;
        }
        match sys::kernel_drops(fd) {
            Ok(now) => {
                TransportStats::add(&stats.kernel_drops, u64::from(now.wrapping_sub(self.last)));
                self.last = now;
            }
            Err(_) => self.unsupported = true,
        }
    }
}
