//! The raw receive loop for the ingest benchmark against peers: the machine's limit for one
//! receive thread (`tests/bench/peers/run.sh` drives it; not part of `cargo test`).
//!
//! It only receives, parses and sums: one thread reads datagrams with `recvmmsg(2)`
//! (`MSG_WAITFORONE`, `--batch` per call), splits them into lines, takes a line's name,
//! value and tags with a minimal parse (`name:value|c[|...]`; anything else is counted as
//! skipped), and adds the value into a `HashMap` keyed by name and tags. No sample rates,
//! no timestamps, no time buckets, no validation beyond that, no flush.
//!
//! A second thread serves the counters: every TCP connection to `--control` gets one JSON
//! line and is closed:
//!
//! ```text
//! {"datagrams":..,"lines":..,"increments":..,"sum":..,"skipped":..,"keys":..,"rcvbuf":..}
//! ```
//!
//! The receive thread publishes its counts after every `recvmmsg` call (relaxed atomic
//! stores, one writer).
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use clap::Parser;
use socket2::SockRef;

/// Command line.
#[derive(Debug, Parser)]
#[command(about = "Raw StatsD receive loop: recvmmsg, minimal parse, HashMap sum")]
struct Args {
    /// UDP address to listen on.
    #[arg(long, conflicts_with = "uds", required_unless_present = "uds")]
    udp: Option<SocketAddr>,
    /// Unix datagram socket path to listen on (a stale file there is removed).
    #[arg(long)]
    uds: Option<PathBuf>,
    /// Requested SO_RCVBUF in bytes (SO_RCVBUFFORCE when rmem_max caps it); 0 keeps the
    /// system default.
    #[arg(long, default_value_t = 8 << 20)]
    rcvbuf: usize,
    /// Datagrams per `recvmmsg` call.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Bytes per datagram slot.
    #[arg(long, default_value_t = 64 * 1024)]
    slot: usize,
    /// TCP address serving the counters.
    #[arg(long, default_value = "127.0.0.1:9109")]
    control: SocketAddr,
}

/// Counters published by the receive thread.
#[derive(Default)]
struct Shared {
    datagrams: AtomicU64,
    lines: AtomicU64,
    increments: AtomicU64,
    sum: AtomicU64,
    skipped: AtomicU64,
    keys: AtomicU64,
}

/// `recvmmsg` buffers: `count` slots of `slot` bytes.
struct Batch {
    slot: usize,
    bufs: Vec<u8>,
    // Kept alive for the pointers in `hdrs`; never read from Rust.
    _iovecs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

impl Batch {
    fn new(count: usize, slot: usize) -> Batch {
        let count = count.max(1);
        let mut bufs = vec![0u8; count * slot];
        let base = bufs.as_mut_ptr();
        let mut iovecs: Vec<libc::iovec> = (0..count)
            .map(|i| libc::iovec {
                iov_base: base.wrapping_add(i * slot).cast(),
                iov_len: slot,
            })
            .collect();
        let iov = iovecs.as_mut_ptr();
        let hdrs = (0..count)
            .map(|i| {
                // SAFETY: `mmsghdr` is a plain C struct; all-zero bytes are a valid value
                // (null pointers, zero lengths). The iovec pointer is set right below.
                let mut hdr: libc::mmsghdr = unsafe { std::mem::zeroed() };
                hdr.msg_hdr.msg_iov = iov.wrapping_add(i);
                hdr.msg_hdr.msg_iovlen = 1;
                hdr
            })
            .collect();
        Batch {
            slot,
            bufs,
            _iovecs: iovecs,
            hdrs,
        }
    }

    /// Blocks for the first datagram, then takes what is queued, up to the batch size.
    fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        // SAFETY: `fd` is an open socket owned by the caller for the whole call. Every
        // header points to its own iovec in `_iovecs`, every iovec to its own disjoint
        // `slot` bytes of `bufs`; the three allocations live as long as `self`, are never
        // resized, and are not accessed from Rust during the call (`&mut self`). No name,
        // control buffer or timeout is passed.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                self.hdrs.len() as libc::c_uint,
                libc::MSG_WAITFORONE as _,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    fn packet(&self, i: usize) -> &[u8] {
        let len = (self.hdrs[i].msg_len as usize).min(self.slot);
        &self.bufs[i * self.slot..i * self.slot + len]
    }
}

/// Sets SO_RCVBUF, then SO_RCVBUFFORCE if `net.core.rmem_max` capped it; returns the size
/// the kernel reports.
fn set_rcvbuf(sock: SockRef<'_>, bytes: usize) -> usize {
    if bytes > 0 {
        let _ = sock.set_recv_buffer_size(bytes);
        if sock.recv_buffer_size().unwrap_or(0) < 2 * bytes {
            let value = bytes.min(i32::MAX as usize) as libc::c_int;
            // SAFETY: the socket is open for the call; the option value is a live `c_int`
            // whose size is passed alongside; the kernel only reads it.
            let rc = unsafe {
                libc::setsockopt(
                    sock.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUFFORCE,
                    (&raw const value).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if rc != 0 {
                eprintln!(
                    "rawrecv: SO_RCVBUFFORCE failed ({}); buffer capped by rmem_max",
                    io::Error::last_os_error()
                );
            }
        }
    }
    sock.recv_buffer_size().unwrap_or(0)
}

/// `name:value|c[|rest]` -> (name, value, rest). `None` for anything else.
fn parse(line: &[u8]) -> Option<(&[u8], i64, &[u8])> {
    let colon = memchr::memchr(b':', line)?;
    let (name, after) = (&line[..colon], &line[colon + 1..]);
    let bar = memchr::memchr(b'|', after)?;
    let (value, after) = (&after[..bar], &after[bar + 1..]);
    let rest = after.strip_prefix(b"c")?;
    if !(rest.is_empty() || rest[0] == b'|') || name.is_empty() || value.is_empty() {
        return None;
    }
    let mut v: i64 = 0;
    for &d in value {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(i64::from(d - b'0'))?;
    }
    Some((name, v, rest))
}

fn main() {
    let args = Args::parse();
    let shared = Arc::new(Shared::default());
    enum Sock {
        Udp(UdpSocket),
        Unix(UnixDatagram),
    }
    let sock = match (&args.udp, &args.uds) {
        (Some(addr), _) => Sock::Udp(UdpSocket::bind(addr).expect("bind UDP")),
        (None, Some(path)) => {
            let _ = std::fs::remove_file(path);
            Sock::Unix(UnixDatagram::bind(path).expect("bind Unix datagram socket"))
        }
        (None, None) => unreachable!("clap requires one address"),
    };
    let (fd, rcvbuf) = match &sock {
        Sock::Udp(s) => (s.as_raw_fd(), set_rcvbuf(SockRef::from(s), args.rcvbuf)),
        Sock::Unix(s) => (
            s.as_raw_fd(),
            set_rcvbuf(SockRef::from(&s.as_fd()), args.rcvbuf),
        ),
    };
    let control = TcpListener::bind(args.control).expect("bind control port");
    {
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || {
            for conn in control.incoming() {
                let Ok(mut conn) = conn else { continue };
                let line = format!(
                    "{{\"datagrams\":{},\"lines\":{},\"increments\":{},\"sum\":{},\"skipped\":{},\"keys\":{},\"rcvbuf\":{rcvbuf}}}\n",
                    shared.datagrams.load(Relaxed),
                    shared.lines.load(Relaxed),
                    shared.increments.load(Relaxed),
                    shared.sum.load(Relaxed),
                    shared.skipped.load(Relaxed),
                    shared.keys.load(Relaxed),
                );
                let _ = conn.write_all(line.as_bytes());
            }
        });
    }
    eprintln!("rawrecv: ready, rcvbuf {rcvbuf}");

    let mut batch = Batch::new(args.batch, args.slot);
    let mut sums: HashMap<Vec<u8>, i64, foldhash::fast::RandomState> = HashMap::default();
    let mut key = Vec::with_capacity(256);
    let (mut datagrams, mut lines, mut increments, mut sum, mut skipped) = (0u64, 0u64, 0, 0, 0);
    loop {
        let n = match batch.recv(fd) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => panic!("recvmmsg: {e}"),
        };
        for i in 0..n {
            datagrams += 1;
            for line in batch.packet(i).split(|&b| b == b'\n') {
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                if line.is_empty() {
                    continue;
                }
                lines += 1;
                let Some((name, value, rest)) = parse(line) else {
                    skipped += 1;
                    continue;
                };
                key.clear();
                key.extend_from_slice(name);
                key.extend_from_slice(rest);
                match sums.get_mut(key.as_slice()) {
                    Some(total) => *total += value,
                    None => {
                        sums.insert(key.clone(), value);
                    }
                }
                increments += 1;
                sum += value as u64;
            }
        }
        shared.datagrams.store(datagrams, Relaxed);
        shared.lines.store(lines, Relaxed);
        shared.increments.store(increments, Relaxed);
        shared.sum.store(sum, Relaxed);
        shared.skipped.store(skipped, Relaxed);
        shared.keys.store(sums.len() as u64, Relaxed);
    }
}
