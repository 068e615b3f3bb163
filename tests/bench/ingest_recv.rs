//! Receive-path benchmark: `recvmsg` against `recvmmsg` batches, and 1 against 2 UDP threads,
//! through the real receivers with a count-only handler. Not part of `cargo test`.
//!
//! ```text
//! cargo bench --bench ingest_recv                 # 7 rounds, 300k datagrams each
//! cargo bench --bench ingest_recv -- 5 200000     # rounds, datagrams
//! ```
//!
//! Needs `taskset` (util-linux). Each measurement runs a receiver process pinned to CPU 0
//! (CPUs 0-1 for two threads) and a sender process pinned to CPU 1, both this same binary.
//!
//! **Pre-filled drain** (the main figure): the handler holds its first datagram until the
//! sender has queued all the others (a 256 MiB `SO_RCVBUFFORCE` buffer keeps them; run as
//! root), then the receiver is released and timed until the last datagram. This measures
//! the receive path alone, whatever the sender's speed, and lets two receiver threads use
//! both cores. **Live**: sender and receiver run at once, the sender as fast as it can;
//! reported as datagrams absorbed per second of sending and the loss.
//!
//! Modes are interleaved within each round so that machine noise hits all of them alike;
//! the summary gives medians and ratios to `recvmsg` x1.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use countersink::config::ingest::IngestConfig;
use countersink::ingest::{PacketHandler, start};
use countersink::vocabulary::Transport;

/// (label, batch size, threads, pre-filled)
const MODES: &[(&str, usize, usize, bool)] = &[
    ("recvmsg    x1, 1 thread, prefilled", 1, 1, true),
    ("recvmmsg   x8, 1 thread, prefilled", 8, 1, true),
    ("recvmmsg  x32, 1 thread, prefilled", 32, 1, true),
    ("recvmmsg  x64, 1 thread, prefilled", 64, 1, true),
    ("recvmsg    x1, 2 threads, prefilled", 1, 2, true),
    ("recvmmsg  x32, 2 threads, prefilled", 32, 2, true),
    ("recvmsg    x1, 1 thread, live", 1, 1, false),
];

/// Sender sockets: several source ports so that `SO_REUSEPORT` spreads them over threads.
const SENDER_SOCKETS: usize = 64;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    match args.first().map(String::as_str) {
        Some("--receive") => receive(&args[1..]),
        Some("--send") => send(&args[1..]),
        _ => drive(&args),
    }
}

/// One receiver's published progress: datagrams handled and when the last counted one came.
#[derive(Clone, Copy, Default)]
struct Progress {
    count: u64,
    last: Option<Instant>,
}

struct Counter {
    released: Arc<AtomicBool>,
    slot: Arc<Mutex<Progress>>,
    count: u64,
    last: Option<Instant>,
    held: bool,
}

impl PacketHandler for Counter {
    fn handle(&mut self, _packet: &[u8]) {
        if !self.held {
            self.held = true;
            while !self.released.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
        }
        self.count += 1;
        // One clock read per 64 datagrams: the last < 64 are not timed (< 0.1 ms).
        if self.count & 63 == 0 {
            self.last = Some(Instant::now());
        }
    }

    fn idle(&mut self) {
        *self.slot.lock().unwrap() = Progress {
            count: self.count,
            last: self.last,
        };
    }
}

/// Child: `--receive BATCH THREADS EXPECTED PREFILL`. Prints `port N`, waits for a line on
/// stdin, releases the handlers, prints `result COUNT SECONDS KERNEL_DROPS RCVBUF`.
fn receive(args: &[String]) {
    let batch: usize = args[0].parse().unwrap();
    let threads: usize = args[1].parse().unwrap();
    let expected: u64 = args[2].parse().unwrap();
    let prefill: bool = args[3].parse().unwrap();
    let mut config = IngestConfig::default();
    config.udp.listen = Some("127.0.0.1:0".parse().unwrap());
    config.udp.threads = threads;
    config.udp.batch_size = batch;
    config.udp.recv_buffer_bytes = 256 << 20;
    let released = Arc::new(AtomicBool::new(!prefill));
    let slots: Arc<Mutex<Vec<Arc<Mutex<Progress>>>>> = Arc::default();
    let factory = {
        let released = Arc::clone(&released);
        let slots = Arc::clone(&slots);
        move |_: Transport| {
            let slot = Arc::new(Mutex::new(Progress::default()));
            slots.lock().unwrap().push(Arc::clone(&slot));
            Counter {
                released: Arc::clone(&released),
                slot,
                count: 0,
                last: None,
                held: !prefill,
            }
        }
    };
    let receivers = start(&config, factory).expect("start receivers");
    println!("port {}", receivers.inet(Transport::Udp).unwrap().port());
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let t0 = Instant::now();
    released.store(true, Ordering::Release);
    // Done when the count reaches what was sent, or stops moving.
    let total = || {
        slots
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.lock().unwrap().count)
            .sum::<u64>()
    };
    let (mut seen, mut since) = (0, Instant::now());
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let now = total();
        if now >= expected || (now == seen && since.elapsed() > Duration::from_millis(600)) {
            break;
        }
        if now != seen {
            (seen, since) = (now, Instant::now());
        }
    }
    let stats = receivers.stats();
    receivers.shutdown();
    let snapshot = stats.transport(Transport::Udp);
    let progress: Vec<Progress> = slots
        .lock()
        .unwrap()
        .iter()
        .map(|s| *s.lock().unwrap())
        .collect();
    let count: u64 = progress.iter().map(|p| p.count).sum();
    if progress.len() > 1 {
        let shares: Vec<u64> = progress.iter().map(|p| p.count).collect();
        eprintln!("  per-thread datagrams: {shares:?}");
    }
    let last = progress.iter().filter_map(|p| p.last).max().unwrap_or(t0);
    let seconds = last.duration_since(t0).as_secs_f64();
    println!(
        "result {count} {seconds} {} {}",
        snapshot.kernel_drops, snapshot.recv_buffer_bytes
    );
}

/// Child: `--send PORT COUNT`. Sends COUNT single-line datagrams round-robin over several
/// sockets, prints `sent SECONDS`.
fn send(args: &[String]) {
    let port: u16 = args[0].parse().unwrap();
    let count: usize = args[1].parse().unwrap();
    let to = SocketAddr::from(([127, 0, 0, 1], port));
    let sockets: Vec<UdpSocket> = (0..SENDER_SOCKETS)
        .map(|_| {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            s.connect(to).unwrap();
            s
        })
        .collect();
    let lines: Vec<Vec<u8>> = (0..100)
        .map(|i| format!("pv{i}:1|c|#page:p{i}").into_bytes())
        .collect();
    let t0 = Instant::now();
    for i in 0..count {
        // A full queue never blocks UDP; errors (ENOBUFS) would count as loss.
        let _ = sockets[i % SENDER_SOCKETS].send(&lines[i % lines.len()]);
    }
    println!("sent {}", t0.elapsed().as_secs_f64());
}

/// One measurement: returns datagrams per second and the loss fraction.
fn measure(batch: usize, threads: usize, prefill: bool, count: usize) -> (f64, f64) {
    let exe = std::env::current_exe().unwrap();
    let cpus = if threads > 1 { "0,1" } else { "0" };
    let mut receiver = Command::new("taskset")
        .args(["-c", cpus])
        .arg(&exe)
        .args([
            "--receive",
            &batch.to_string(),
            &threads.to_string(),
            &count.to_string(),
            &prefill.to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("taskset (util-linux) is needed");
    let mut out = BufReader::new(receiver.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let port = line
        .trim()
        .strip_prefix("port ")
        .expect("port line")
        .to_owned();
    let mut stdin = receiver.stdin.take().unwrap();
    if !prefill {
        writeln!(stdin, "go").unwrap();
    }
    let sender = Command::new("taskset")
        .args(["-c", "1"])
        .arg(&exe)
        .args(["--send", &port, &count.to_string()])
        .output()
        .unwrap();
    let sent_line = String::from_utf8(sender.stdout).unwrap();
    let send_seconds: f64 = sent_line
        .trim()
        .strip_prefix("sent ")
        .unwrap()
        .parse()
        .unwrap();
    if prefill {
        std::thread::sleep(Duration::from_millis(50));
        writeln!(stdin, "go").unwrap();
    }
    line.clear();
    out.read_line(&mut line).unwrap();
    receiver.wait().unwrap();
    let fields: Vec<f64> = line
        .trim()
        .strip_prefix("result ")
        .expect("result line")
        .split(' ')
        .map(|f| f.parse().unwrap())
        .collect();
    let (received, seconds, drops) = (fields[0], fields[1], fields[2]);
    let loss = 1.0 - received / count as f64;
    let rate = if prefill {
        if drops > 0.0 {
            eprintln!(
                "  warning: {drops} kernel drops while pre-filling (receive buffer too small?)"
            );
        }
        received / seconds
    } else {
        received / send_seconds
    };
    (rate, loss)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn drive(args: &[String]) {
    let rounds: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(7);
    let count: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(300_000);
    println!(
        "ingest_recv: {rounds} rounds x {count} single-line datagrams per mode; receiver on CPU 0, sender on CPU 1"
    );
    let mut rates = vec![Vec::new(); MODES.len()];
    let mut losses = vec![Vec::new(); MODES.len()];
    for round in 0..rounds {
        // Rotate the order every round so no mode always runs first or last.
        for k in 0..MODES.len() {
            let i = (k + round) % MODES.len();
            let (label, batch, threads, prefill) = MODES[i];
            let (rate, loss) = measure(batch, threads, prefill, count);
            eprintln!(
                "round {round} {label}: {:.0} dgram/s, loss {:.2} %",
                rate,
                loss * 100.0
            );
            rates[i].push(rate);
            losses[i].push(loss);
        }
    }
    // Ratios to `recvmsg x1, 1 thread, prefilled`: of the medians, and the median of the
    // ratios within each round (modes of one round run seconds apart, so they share noise).
    let base = median(&mut rates[0].clone());
    println!(
        "{:<40} {:>14} {:>12} {:>16} {:>12}",
        "mode", "median dgram/s", "ratio (med)", "ratio (in-round)", "median loss"
    );
    for (i, (label, _, _, prefill)) in MODES.iter().enumerate() {
        let mut paired: Vec<f64> = rates[i].iter().zip(&rates[0]).map(|(r, b)| r / b).collect();
        let paired = median(&mut paired);
        let rate = median(&mut rates[i].clone());
        let loss = median(&mut losses[i]);
        if *prefill {
            println!(
                "{label:<40} {rate:>14.0} {:>12.2} {paired:>16.2} {:>11.2}%",
                rate / base,
                loss * 100.0
            );
        } else {
            println!(
                "{label:<40} {rate:>14.0} {:>12} {:>16} {:>11.2}%",
                "-",
                "-",
                loss * 100.0
            );
        }
    }
    for (i, (label, ..)) in MODES.iter().enumerate() {
        let all: Vec<String> = rates[i]
            .iter()
            .map(|r| format!("{:.0}k", r / 1000.0))
            .collect();
        println!("  runs {label}: {}", all.join(" "));
    }
    println!(
        "live: sender and receiver at once; bound by the sender (one plain send per datagram)"
    );
}
