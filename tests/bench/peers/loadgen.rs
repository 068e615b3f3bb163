//! Load generator for the ingest benchmark against peer StatsD servers
//! (`tests/bench/peers/run.sh` drives it; not part of `cargo test`).
//!
//! Sends StatsD counter lines (value 1 each, so lines = increments) to one UDP address or
//! one Unix datagram socket with `sendmmsg(2)`, `--lines-per-packet` lines per datagram,
//! either paced at `--rate` lines/s or as fast as one core allows (`--rate 0`), for
//! `--seconds` or until `--datagrams` were sent. Prints one JSON object on stdout:
//!
//! ```text
//! {"datagrams":..,"lines":..,"seconds":..,"refused_datagrams":..,"refused_lines":..,
//!  "errors":..,"max_lag_ms":..,"target_rate":..}
//! ```
//!
//! - `datagrams`/`lines`: handed to the kernel successfully (the "offered" load).
//! - `refused_*`: Unix datagram sends that failed with `EAGAIN` in `--nonblocking` mode
//!   (the receiver's queue was full; a DogStatsD-style client drops them). They count as
//!   loss, on the client side.
//! - `max_lag_ms`: how far behind its schedule the paced sender fell at worst; a large value
//!   means the generator, not the receiver, limited the rate.
//!
//! Line shapes (`--dialect`): `tags` sends `NAME:1|c|#page:pJ`, `plain` sends
//! `NAME.pJ:1|c` (for servers that reject DogStatsD tags), with J cycling over `--keys`.
#![allow(unsafe_code)]

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};

/// Command line.
#[derive(Debug, Parser)]
#[command(about = "StatsD counter load generator (sendmmsg)")]
struct Args {
    /// UDP destination, e.g. 127.0.0.1:8125.
    #[arg(long, conflicts_with = "uds", required_unless_present = "uds")]
    udp: Option<SocketAddr>,
    /// Unix datagram socket path.
    #[arg(long)]
    uds: Option<PathBuf>,
    /// Lines per datagram.
    #[arg(long, default_value_t = 1)]
    lines_per_packet: usize,
    /// Offered lines per second; 0 sends as fast as possible.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// How long to send.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Stop after this many datagrams (0: no limit).
    #[arg(long, default_value_t = 0)]
    datagrams: u64,
    /// Metric name (each benchmark step uses its own, so late packets never mix).
    #[arg(long, default_value = "bench")]
    name: String,
    /// Distinct keys (tag values) cycled through.
    #[arg(long, default_value_t = 100)]
    keys: usize,
    /// Line shape.
    #[arg(long, value_enum, default_value_t = Dialect::Tags)]
    dialect: Dialect,
    /// Datagrams per `sendmmsg` call.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Unix datagram only: do not wait when the receiver's queue is full; count the
    /// datagram as refused and go on (what non-blocking DogStatsD clients do).
    #[arg(long)]
    nonblocking: bool,
}

/// Line shapes.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Dialect {
    /// `NAME:1|c|#page:pJ`
    Tags,
    /// `NAME.pJ:1|c`
    Plain,
}

/// Pre-built datagrams and their `sendmmsg` headers. Packet `i` holds the lines for keys
/// `(i * K + l) % keys`, `l < K`, so over all packets every key appears equally often.
struct Packets {
    // Kept alive for the pointers in `iovecs` and `hdrs`; never resized after `new`.
    _payloads: Vec<Vec<u8>>,
    _iovecs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

impl Packets {
    fn new(args: &Args) -> Packets {
        let k = args.lines_per_packet.max(1);
        let keys = args.keys.max(1);
        let mut payloads: Vec<Vec<u8>> = (0..keys)
            .map(|i| {
                let lines: Vec<String> = (0..k)
                    .map(|l| {
                        let j = (i * k + l) % keys;
                        match args.dialect {
                            Dialect::Tags => format!("{}:1|c|#page:p{j}", args.name),
                            Dialect::Plain => format!("{}.p{j}:1|c", args.name),
                        }
                    })
                    .collect();
                lines.join("\n").into_bytes()
            })
            .collect();
        let mut iovecs: Vec<libc::iovec> = payloads
            .iter_mut()
            .map(|p| libc::iovec {
                iov_base: p.as_mut_ptr().cast(),
                iov_len: p.len(),
            })
            .collect();
        let base = iovecs.as_mut_ptr();
        let hdrs = (0..keys)
            .map(|i| {
                // SAFETY: `mmsghdr` is a plain C struct; all-zero bytes are a valid value
                // (null pointers, zero lengths). The iovec pointer is set right below.
                let mut hdr: libc::mmsghdr = unsafe { std::mem::zeroed() };
                hdr.msg_hdr.msg_iov = base.wrapping_add(i);
                hdr.msg_hdr.msg_iovlen = 1;
                hdr
            })
            .collect();
        Packets {
            _payloads: payloads,
            _iovecs: iovecs,
            hdrs,
        }
    }

    fn len(&self) -> usize {
        self.hdrs.len()
    }

    /// Sends up to `n` packets starting at packet `start` (not wrapping) on the connected
    /// socket `fd`; returns how many the kernel took.
    fn send(&mut self, fd: RawFd, start: usize, n: usize, flags: i32) -> io::Result<usize> {
        let n = n.min(self.hdrs.len() - start);
        // SAFETY: `fd` is an open, connected datagram socket owned by the caller for the
        // whole call. `hdrs[start..start + n]` is in bounds (n clamped above); every header
        // points to its own iovec in `_iovecs`, and every iovec to its own payload in
        // `_payloads`; all live as long as `self`, are never resized after `new`, and are
        // not touched from Rust during the call (`&mut self`). No address or control data
        // is passed (the socket is connected). The kernel writes only `msg_len` fields.
        let rc = unsafe {
            libc::sendmmsg(
                fd,
                self.hdrs.as_mut_ptr().add(start),
                n as libc::c_uint,
                flags as _,
            )
        };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(rc as usize)
        }
    }
}

enum Socket {
    Udp(UdpSocket),
    Unix(UnixDatagram),
}

impl Socket {
    fn fd(&self) -> RawFd {
        match self {
            Socket::Udp(s) => s.as_raw_fd(),
            Socket::Unix(s) => s.as_raw_fd(),
        }
    }
}

/// What was sent.
#[derive(Default)]
struct Report {
    datagrams: u64,
    refused: u64,
    errors: u64,
    max_lag: Duration,
}

fn main() {
    let args = Args::parse();
    let socket = match (&args.udp, &args.uds) {
        (Some(addr), _) => {
            let local: SocketAddr = if addr.is_ipv4() {
                "0.0.0.0:0".parse().unwrap()
            } else {
                "[::]:0".parse().unwrap()
            };
            let s = UdpSocket::bind(local).expect("bind UDP sender");
            s.connect(addr).expect("connect UDP sender");
            Socket::Udp(s)
        }
        (None, Some(path)) => {
            let s = UnixDatagram::unbound().expect("Unix datagram socket");
            s.connect(path)
                .unwrap_or_else(|e| panic!("connect {}: {e}", path.display()));
            Socket::Unix(s)
        }
        (None, None) => unreachable!("clap requires one target"),
    };
    let flags = if args.nonblocking {
        libc::MSG_DONTWAIT
    } else {
        0
    };
    let k = args.lines_per_packet.max(1) as u64;
    let mut packets = Packets::new(&args);
    let batch = args.batch.max(1);
    let limit = if args.datagrams > 0 {
        args.datagrams
    } else {
        u64::MAX
    };
    let duration = Duration::from_secs_f64(args.seconds);
    // Datagrams per second for pacing; 0 means no pacing.
    let dgram_rate = args.rate / k as f64;

    let mut report = Report::default();
    let mut next = 0usize;
    let t0 = Instant::now();
    let mut last = t0;
    // Counted in datagrams attempted (sent or refused), which is what the schedule paces.
    let mut attempted = 0u64;
    loop {
        let now = Instant::now();
        if now.duration_since(t0) >= duration || attempted >= limit {
            break;
        }
        let mut want = batch.min((limit - attempted).min(usize::MAX as u64) as usize);
        if dgram_rate > 0.0 {
            let due = t0 + Duration::from_secs_f64(attempted as f64 / dgram_rate);
            if due > now {
                let ahead = due - now;
                if ahead > Duration::from_micros(200) {
                    std::thread::sleep(ahead - Duration::from_micros(100));
                }
                continue;
            }
            report.max_lag = report.max_lag.max(now - due);
            // Never burst more than one batch beyond the schedule.
            let owed = ((now.duration_since(t0).as_secs_f64() * dgram_rate) as u64)
                .saturating_sub(attempted)
                .max(1);
            want = want.min(owed.min(batch as u64) as usize);
        }
        match packets.send(socket.fd(), next, want, flags) {
            Ok(n) => {
                report.datagrams += n as u64;
                attempted += n as u64;
                next = (next + n) % packets.len();
                last = Instant::now();
                if n == 0 {
                    report.errors += 1;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // The first datagram of the batch was refused: drop it, as a client would.
                report.refused += 1;
                attempted += 1;
                next = (next + 1) % packets.len();
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                // ECONNREFUSED (nobody listening yet), ENOBUFS: counted, the datagram lost.
                report.errors += 1;
                attempted += 1;
                next = (next + 1) % packets.len();
            }
        }
    }
    let seconds = last.duration_since(t0).as_secs_f64().max(1e-9);
    println!(
        "{{\"datagrams\":{},\"lines\":{},\"seconds\":{seconds:.6},\"refused_datagrams\":{},\"refused_lines\":{},\"errors\":{},\"max_lag_ms\":{:.3},\"target_rate\":{}}}",
        report.datagrams,
        report.datagrams * k,
        report.refused,
        report.refused * k,
        report.errors,
        report.max_lag.as_secs_f64() * 1e3,
        args.rate,
    );
}
