//! Outage benchmark: the release binary of `countersink serve` through a store outage,
//! beside an in-process cqlsim whose node goes down and comes back. Run by hand (not
//! criterion, not a test; each run takes minutes):
//!
//! ```sh
//! cargo build --release --bin countersink
//! cargo bench --bench outage                  # short: 60 s outage, 20k lines/s, 20k keys
//! OUTAGE_FULL=1 cargo bench --bench outage    # full: 10 min outage, 50k lines/s, 100k keys
//! ```
//!
//! Two scenarios, one after the other:
//!
//! 1. **back-off**: the case measured on the earlier design. `max_pending_rows = 200`,
//!    170 distinct keys re-sent every 0.5 s, and the fault rule
//!    `down,for=12s,on=writes,after=2,max=1`: flush attempts per second while the node is
//!    down (`countersink_flushes_total`).
//! 2. **outage**: UDP lines (`outage.bench:1|c|#k:K`, 8 per datagram, K cycling over the
//!    keys) at a steady rate with `limits.max_pending_bytes = 64 MiB`; after a warm-up the
//!    node goes down for the outage, then comes back while the load goes on. Reported:
//!    peak RSS (sampled every second, and `VmHWM`) against the idle RSS and the limit,
//!    flushes during the outage, the largest spill on disk, the time from the node's return
//!    until nothing is spilled any more, and the final totals: the store's own sums
//!    (cqlsim statistics) against what countersink accepted, dropped (counted, by reason)
//!    and logged as unknown.
//!
//! Settings (environment): `OUTAGE_FULL=1`, or each of `OUTAGE_SECS`, `OUTAGE_RATE`
//! (lines/s), `OUTAGE_KEYS`, `OUTAGE_WARMUP_SECS`, `OUTAGE_MAX_PENDING_BYTES`,
//! `OUTAGE_DRAIN_LIMIT_SECS`, `OUTAGE_REPORT_SECS` (progress lines), `OUTAGE_SCENARIOS` (`backoff,outage`), `COUNTERSINK_BIN`.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use countersink::config::Config;
use countersink::ddl;

struct Settings {
    outage: Duration,
    warmup: Duration,
    rate: u64,
    keys: u64,
    max_pending_bytes: u64,
    drain_limit: Duration,
    report: Duration,
    scenarios: Vec<String>,
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

impl Settings {
    fn from_env() -> Settings {
        let full = std::env::var("OUTAGE_FULL").is_ok_and(|v| v == "1");
        let (outage, rate, keys, warmup) = if full {
            (600, 50_000, 100_000, 60)
        } else {
            (60, 20_000, 20_000, 20)
        };
        Settings {
            outage: Duration::from_secs(env_u64("OUTAGE_SECS", outage)),
            warmup: Duration::from_secs(env_u64("OUTAGE_WARMUP_SECS", warmup)),
            rate: env_u64("OUTAGE_RATE", rate),
            keys: env_u64("OUTAGE_KEYS", keys),
            max_pending_bytes: env_u64("OUTAGE_MAX_PENDING_BYTES", 64 << 20),
            drain_limit: Duration::from_secs(env_u64("OUTAGE_DRAIN_LIMIT_SECS", 900)),
            report: Duration::from_secs(env_u64("OUTAGE_REPORT_SECS", 60)),
            scenarios: std::env::var("OUTAGE_SCENARIOS")
                .unwrap_or_else(|_| "backoff,outage".into())
                .split(',')
                .map(str::to_owned)
                .collect(),
        }
    }
}

fn binary() -> PathBuf {
    let path = std::env::var("COUNTERSINK_BIN").map_or_else(
        |_| {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/target/release/countersink"
            ))
        },
        PathBuf::from,
    );
    assert!(
        path.exists(),
        "{} is missing: cargo build --release --bin countersink first",
        path.display()
    );
    path
}

fn free_port() -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("port");
    let addr = socket.local_addr().expect("addr");
    // A TCP port with the same number is very likely free too (metrics use their own).
    addr
}

fn free_tcp_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    listener.local_addr().expect("addr")
}

/// The sidecar under test, as a child process.
struct Sidecar {
    child: Child,
    udp: SocketAddr,
    metrics: SocketAddr,
    state: PathBuf,
}

impl Sidecar {
    fn start(dir: &Path, store: SocketAddr, extra_config: &str) -> Sidecar {
        let udp = free_port();
        let metrics = free_tcp_port();
        let state = dir.join("state");
        let config = format!(
            "[store]\ncontact_points = [\"{store}\"]\n\n[state]\ndir = \"{}\"\n\n\
             [ingest.udp]\nlisten = \"{udp}\"\n\n[metrics]\nlisten = \"{metrics}\"\n\n{extra_config}",
            state.display()
        );
        let path = dir.join("countersink.toml");
        std::fs::write(&path, config).expect("config");
        let log = std::fs::File::create(dir.join("countersink.log")).expect("log");
        let child = Command::new(binary())
            .args(["serve", "--config"])
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn countersink");
        let sidecar = Sidecar {
            child,
            udp,
            metrics,
            state,
        };
        let started = Instant::now();
        while http_get(sidecar.metrics, "/readyz").0 != 200 {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "not ready; see {}",
                dir.join("countersink.log").display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        sidecar
    }

    fn metrics(&self) -> Metrics {
        Metrics::parse(&http_get(self.metrics, "/metrics").1)
    }

    fn status(&self, field: &str) -> u64 {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    }

    fn rss(&self) -> u64 {
        self.status("VmRSS:")
    }

    fn spill_bytes(&self) -> u64 {
        std::fs::read_dir(&self.state)
            .map(|entries| {
                entries
                    .flatten()
                    // Segments only: not `spill.cursor` (the replay position, which stays)
                    // nor `spill.corrupt.jsonl`.
                    .filter(|e| {
                        let name = e.file_name().to_string_lossy().into_owned();
                        name.starts_with("spill.")
                            && name.ends_with(".jsonl")
                            && name != "spill.corrupt.jsonl"
                    })
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0)
    }

    fn stop(mut self) -> bool {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.child.wait().is_ok_and(|s| s.success())
    }
}

fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return (0, String::new());
    };
    let _ = write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// One scrape: series text (name and labels) to value.
#[derive(Default)]
struct Metrics(HashMap<String, f64>);

impl Metrics {
    fn parse(text: &str) -> Metrics {
        Metrics(
            text.lines()
                .filter(|l| l.starts_with("countersink_"))
                .filter_map(|l| {
                    let (series, value) = l.rsplit_once(' ')?;
                    Some((series.to_owned(), value.parse().ok()?))
                })
                .collect(),
        )
    }

    fn get(&self, series: &str) -> f64 {
        self.0.get(series).copied().unwrap_or(0.0)
    }

    fn stage(&self, stage: &str, granularity: &str) -> f64 {
        self.get(&format!(
            "countersink_stage_delta{{granularity=\"{granularity}\",stage=\"{stage}\"}}"
        ))
    }

    fn dropped(&self) -> Vec<(String, f64)> {
        self.0
            .iter()
            .filter(|(k, v)| k.starts_with("countersink_dropped_total{") && **v > 0.0)
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }
}

/// Sends `outage.bench:1|c|#k:K` lines at `rate` per second, 8 per datagram, K cycling
/// over `keys`, until `stop`; counts the lines sent.
fn load(target: SocketAddr, rate: u64, keys: u64, stop: Arc<AtomicBool>, sent: Arc<AtomicU64>) {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    const PER_DATAGRAM: u64 = 8;
    const TICK: Duration = Duration::from_millis(10);
    let started = Instant::now();
    let mut key = 0_u64;
    let mut buf = String::new();
    while !stop.load(Ordering::Relaxed) {
        let due = (started.elapsed().as_secs_f64() * rate as f64) as u64;
        while sent.load(Ordering::Relaxed) + PER_DATAGRAM <= due {
            buf.clear();
            for _ in 0..PER_DATAGRAM {
                buf.push_str(&format!("outage.bench:1|c|#k:{key}\n"));
                key = (key + 1) % keys;
            }
            if socket.send_to(buf.as_bytes(), target).is_ok() {
                sent.fetch_add(PER_DATAGRAM, Ordering::Relaxed);
            }
        }
        std::thread::sleep(TICK);
    }
}

fn mib(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / f64::from(1 << 20))
}

/// Scenario 1: flush attempts per second while the node is down, the case of the issue.
fn backoff(rt: &tokio::runtime::Runtime) {
    println!(
        "== back-off: 170 keys every 0.5 s, max_pending_rows = 200, down,for=12s,on=writes,after=2,max=1"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start_store(rt);
    let store = server.local_addr();
    let sidecar = Sidecar::start(dir.path(), store, "[limits]\nmax_pending_rows = 200\n");
    let rule = "down,for=12s,on=writes,after=2,max=1"
        .parse()
        .expect("rule");
    server.handle().set_faults(vec![rule]);
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let started = Instant::now();
    let mut down_since: Option<(Instant, f64)> = None;
    let mut down_flushes = None;
    while started.elapsed() < Duration::from_secs(40) {
        for k in 0..170 {
            let _ = socket.send_to(format!("backoff.bench:1|c|#k:{k}").as_bytes(), sidecar.udp);
        }
        std::thread::sleep(Duration::from_millis(500));
        let flushes = sidecar.metrics().get("countersink_flushes_total");
        match (server.handle().is_down(), down_since) {
            (true, None) => down_since = Some((Instant::now(), flushes)),
            (false, Some((at, before))) if down_flushes.is_none() => {
                down_flushes = Some((flushes - before, at.elapsed()));
            }
            _ => {}
        }
    }
    let m = sidecar.metrics();
    match down_flushes {
        Some((flushes, time)) => println!(
            "flushes while the node was down: {flushes} in {:.1} s = {:.2}/s (interval 5 s: at most 0.2/s)",
            time.as_secs_f64(),
            flushes / time.as_secs_f64()
        ),
        None => println!("the node never went down (no write reached it?)"),
    }
    println!(
        "total flushes {}, write requests requeued {}",
        m.get("countersink_flushes_total"),
        m.0.iter()
            .filter(|(k, _)| k.starts_with("countersink_cql_writes_total")
                && k.contains("outcome=\"requeued\""))
            .map(|(_, v)| v)
            .sum::<f64>()
    );
    assert!(sidecar.stop(), "clean exit");
    rt.block_on(server.shutdown()).expect("shutdown");
}

fn start_store(rt: &tokio::runtime::Runtime) -> cqlsim::Server {
    rt.block_on(async {
        let server = cqlsim::Server::start(cqlsim::Config {
            listen: "127.0.0.1:0".parse().expect("address"),
            ..Default::default()
        })
        .await
        .expect("cqlsim");
        for statement in ddl::statements(&Config::default(), ddl::DEV_REPLICATION).expect("schema")
        {
            server.execute(None, &statement).expect("ddl");
        }
        server
    })
}

/// Scenario 2: the long outage under load.
fn outage(rt: &tokio::runtime::Runtime, s: &Settings) {
    println!(
        "== outage: {} s down, {} lines/s over {} keys, max_pending_bytes = {}",
        s.outage.as_secs(),
        s.rate,
        s.keys,
        mib(s.max_pending_bytes as f64)
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start_store(rt);
    let sidecar = Sidecar::start(
        dir.path(),
        server.local_addr(),
        &format!("[limits]\nmax_pending_bytes = {}\n", s.max_pending_bytes),
    );
    std::thread::sleep(Duration::from_secs(2));
    let idle_rss = sidecar.rss();
    println!("idle RSS: {}", mib(idle_rss as f64));

    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let loader = {
        let (stop, sent, target, rate, keys) =
            (stop.clone(), sent.clone(), sidecar.udp, s.rate, s.keys);
        std::thread::spawn(move || load(target, rate, keys, stop, sent))
    };

    // Peaks per phase: 0 warm-up, 1 outage, 2 drain.
    let phase = std::cell::Cell::new(0_usize);
    let peak_rss = std::cell::Cell::new([0_u64; 3]);
    let peak_pending_bytes = std::cell::Cell::new([0_f64; 3]);
    let mut peak_spill = 0_u64;
    let mut sample = |sidecar: &Sidecar| {
        let p = phase.get();
        let mut rss = peak_rss.get();
        rss[p] = rss[p].max(sidecar.rss());
        peak_rss.set(rss);
        let mut held = peak_pending_bytes.get();
        held[p] = held[p].max(sidecar.metrics().get("countersink_pending_bytes"));
        peak_pending_bytes.set(held);
        peak_spill = peak_spill.max(sidecar.spill_bytes());
    };
    let wait = |sidecar: &Sidecar, time: Duration, sample: &mut dyn FnMut(&Sidecar)| {
        let until = Instant::now() + time;
        while Instant::now() < until {
            std::thread::sleep(Duration::from_secs(1));
            sample(sidecar);
        }
    };

    let report = |sidecar: &Sidecar, label: &str, since: &Metrics| {
        let m = sidecar.metrics();
        println!(
            "  {label}: RSS {}, held {}, spill {}, flushes {}",
            mib(sidecar.rss() as f64),
            mib(m.get("countersink_pending_bytes")),
            mib(sidecar.spill_bytes() as f64),
            m.get("countersink_flushes_total") - since.get("countersink_flushes_total")
        );
    };
    let start = sidecar.metrics();
    let warm_at = Instant::now();
    while warm_at.elapsed() < s.warmup {
        wait(&sidecar, s.report.min(s.warmup), &mut sample);
        report(
            &sidecar,
            &format!("warm-up +{:>4} s", warm_at.elapsed().as_secs()),
            &start,
        );
    }
    let before = sidecar.metrics();
    phase.set(1);
    server.handle().node_down();
    let down_at = Instant::now();
    println!("node down after {} s of load", s.warmup.as_secs());
    let mut last_report = Instant::now();
    while down_at.elapsed() < s.outage {
        wait(&sidecar, Duration::from_secs(1), &mut sample);
        if last_report.elapsed() >= s.report {
            last_report = Instant::now();
            report(
                &sidecar,
                &format!("down +{:>4} s", down_at.elapsed().as_secs()),
                &before,
            );
        }
    }
    let during = sidecar.metrics();
    phase.set(2);
    server.handle().node_up();
    let up_at = Instant::now();
    let outage_flushes =
        during.get("countersink_flushes_total") - before.get("countersink_flushes_total");

    // Drained: a flush applied writes again (the back-off is over, and that flush took
    // every re-queued row), and nothing is spilled (counted or on disk) any more.
    let drained_after = loop {
        wait(&sidecar, Duration::from_secs(1), &mut sample);
        let m = sidecar.metrics();
        let spilled = m.stage("spilled", "minute") + m.stage("spilled", "day");
        if m.get("countersink_flush_backoff_seconds") == 0.0
            && spilled == 0.0
            && sidecar.spill_bytes() == 0
        {
            break Some(up_at.elapsed());
        }
        if up_at.elapsed() > s.drain_limit {
            break None;
        }
    };
    stop.store(true, Ordering::Relaxed);
    loader.join().expect("load");
    // Let the last lines flush: nothing pending, nothing in flight.
    let settled = loop {
        std::thread::sleep(Duration::from_secs(1));
        let m = sidecar.metrics();
        if m.get("countersink_pending_rows") == 0.0
            && m.stage("pending", "minute") == 0.0
            && m.stage("pending", "day") == 0.0
            && m.stage("spilled", "minute") == 0.0
        {
            break m;
        }
        if up_at.elapsed() > s.drain_limit + Duration::from_secs(60) {
            break m;
        }
    };
    let hwm = sidecar.status("VmHWM:");
    let sent = sent.load(Ordering::Relaxed);
    assert!(sidecar.stop(), "clean exit");
    let stats = server.handle().stats();
    let store_minute = stats
        .table("countersink", "counts_by_minute")
        .counter_delta_sum;
    let store_day = stats
        .table("countersink", "counts_by_day")
        .counter_delta_sum;
    rt.block_on(server.shutdown()).expect("shutdown");

    let m = &settled;
    let (rss, held) = (peak_rss.get(), peak_pending_bytes.get());
    for (i, name) in ["warm-up", "outage", "drain"].iter().enumerate() {
        println!(
            "peak RSS {name}: {} (held {}; RSS - limit = {})",
            mib(rss[i] as f64),
            mib(held[i]),
            mib(rss[i] as f64 - s.max_pending_bytes as f64)
        );
    }
    println!(
        "VmHWM {}; idle RSS {}; limit {}",
        mib(hwm as f64),
        mib(idle_rss as f64),
        mib(s.max_pending_bytes as f64)
    );
    println!(
        "flushes during the outage: {outage_flushes} in {} s",
        s.outage.as_secs()
    );
    println!("largest spill on disk: {}", mib(peak_spill as f64));
    match drained_after {
        Some(t) => println!(
            "drained (nothing spilled) {:.1} s after the node came back",
            t.as_secs_f64()
        ),
        None => println!(
            "NOT drained {} s after the node came back",
            s.drain_limit.as_secs()
        ),
    }
    let accepted = m.get("countersink_increments_accepted_total");
    println!(
        "lines sent {sent}, accepted {accepted}, kernel drops {}",
        m.get("countersink_packets_dropped_total{reason=\"kernel\",transport=\"udp\"}")
    );
    for (series, value) in m.dropped() {
        println!("  {series} {value}");
    }
    for g in ["minute", "day"] {
        let stage = |name| m.stage(name, g);
        let store = if g == "minute" {
            store_minute
        } else {
            store_day
        };
        let exact = stage("accepted") - stage("dropped") - stage("unknown") - stage("rejected");
        println!(
            "{g}: store {store}, accepted {} - dropped {} - unknown {} - rejected {} = {exact}; \
             applied {}, spilled {}, pending {}: {}",
            stage("accepted"),
            stage("dropped"),
            stage("unknown"),
            stage("rejected"),
            stage("applied"),
            stage("spilled"),
            stage("pending"),
            if store as f64 == exact {
                "exact"
            } else if (store as f64) >= exact && (store as f64) <= exact + stage("unknown") {
                "exact up to the unknown writes"
            } else {
                "MISMATCH"
            }
        );
    }
}

fn main() {
    let settings = Settings::from_env();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    if settings.scenarios.iter().any(|s| s == "backoff") {
        backoff(&rt);
    }
    if settings.scenarios.iter().any(|s| s == "outage") {
        outage(&rt, &settings);
    }
}
