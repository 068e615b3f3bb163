//! The driver wrapper through a store outage (`cargo bench --bench wrapper_outage`; a
//! bench binary, not criterion and not a test: a run takes a minute or two).
//!
//! The application is a child process (this binary again): a `CounterSession` wrapping a
//! session to a cqlsim in the parent, and one task calling `execute_unpaged` on a
//! prepared counter UPDATE of an application table at a steady rate, cycling over the
//! keys (one increment of 1 per call). The parent samples the child's RSS every 100 ms,
//! so the store's memory is not counted. Two runs of the same load for the same time,
//! one after the other:
//!
//! - **baseline**: the node stays up;
//! - **outage**: after a warm-up the node goes down for the outage, then comes back while
//!   the load goes on.
//!
//! Reported for each: the child's RSS before the load, its peak (and `VmHWM`), the
//! wrapper's memory limit (`limits.max_pending_bytes`); for the outage, the peak above
//! the baseline's, flushes during the outage, how long the backlog took once the node
//! was back; and the final sums: the store's (cqlsim's statistics) against what the
//! wrapper applied and what calls were passed through and applied.
//!
//! Settings (environment): `WRAPPER_OUTAGE_SECS` (20), `WRAPPER_OUTAGE_WARMUP_SECS` (5),
//! `WRAPPER_OUTAGE_RATE` (calls/s, 20000), `WRAPPER_OUTAGE_KEYS` (100000),
//! `WRAPPER_OUTAGE_MAX_PENDING_BYTES` (16 MiB).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use scylla::client::session_builder::SessionBuilder;
use scylla::value::Counter;

use countersink::CounterSession;
use countersink::config::Config;

/// Set in the child's environment: `contact|state dir`.
const CHILD_ENV: &str = "WRAPPER_OUTAGE_CHILD";

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A field of `/proc/<pid>/status` in bytes (`VmRSS`, `VmHWM`).
fn status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

struct Settings {
    outage: Duration,
    warmup: Duration,
    rate: u64,
    keys: u64,
    limit: u64,
}

/// The child: the application with its wrapper. Prints `ready`, then `pending <rows>`
/// every half second while its stdin is open; once it is closed, stops the load, writes
/// everything left and prints `final <calls> <failed> <buffered> <applied> <unknown>
/// <rejected> <unsent> <flushes>`.
async fn child(spec: &str, s: &Settings) {
    let (contact, dir) = spec.split_once('|').expect("contact|dir");
    let mut config = Config::default();
    config.state.dir = dir.into();
    config.store.contact_points = vec![contact.to_owned()];
    config.store.request_timeout = Duration::from_secs(1);
    config.flush.interval = Duration::from_secs(1);
    config.limits.max_pending_bytes = usize::try_from(s.limit).expect("limit");
    let session = SessionBuilder::new()
        .known_node(contact)
        .build()
        .await
        .expect("session");
    let session = Arc::new(
        CounterSession::new(session, &config)
            .await
            .expect("wrapper"),
    );
    let update = session
        .prepare("UPDATE app.c SET views = views + ? WHERE k = ?")
        .await
        .expect("prepare");
    let names: Vec<String> = (0..s.keys).map(|k| format!("key-{k:08}")).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let (calls, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    println!("ready");
    let load = {
        let (session, stop, calls, failed) = (
            Arc::clone(&session),
            Arc::clone(&stop),
            Arc::clone(&calls),
            Arc::clone(&failed),
        );
        let (rate, keys) = (s.rate, s.keys);
        tokio::spawn(async move {
            let started = Instant::now();
            let mut sent = 0_u64;
            while !stop.load(Ordering::Relaxed) {
                let due = (started.elapsed().as_secs_f64() * rate as f64) as u64;
                while sent < due {
                    let key = &names[(sent % keys) as usize];
                    if session
                        .execute_unpaged(&update, (Counter(1), key.as_str()))
                        .await
                        .is_err()
                    {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                    sent += 1;
                    calls.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let closed = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
            line.clear();
        }
    });
    tokio::pin!(closed);
    loop {
        tokio::select! {
            _ = &mut closed => break,
            () = tokio::time::sleep(Duration::from_millis(500)) => {
                println!("pending {}", session.stats().accounting.pending);
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    load.await.expect("load");
    for _ in 0..100 {
        session.flush_now().await;
        let a = session.stats().accounting;
        if a.pending == 0 && a.in_flight == 0 {
            break;
        }
    }
    let stats = session.stats();
    let a = stats.accounting;
    println!(
        "final {} {} {} {} {} {} {} {}",
        calls.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
        stats.buffered,
        a.applied,
        a.unknown,
        a.rejected,
        a.unsent,
        stats.flushes
    );
    std::io::stdout().flush().expect("stdout");
    Arc::into_inner(session)
        .expect("the only holder")
        .shutdown()
        .await;
}

/// One run: the child under load for warm-up + outage (+ the backlog), the node down
/// in between when `outage`.
async fn run(s: &Settings, outage: bool) {
    let server = cqlsim::Server::start(cqlsim::Config {
        listen: "127.0.0.1:0".parse().expect("address"),
        ..Default::default()
    })
    .await
    .expect("cqlsim");
    server
        .execute_script(
            None,
            "CREATE KEYSPACE app WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1};
             CREATE TABLE app.c (k text PRIMARY KEY, views counter);",
        )
        .expect("schema");
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("state dir");
    let mut child = Command::new(std::env::current_exe().expect("bench binary"))
        .env(
            CHILD_ENV,
            format!("{}|{}", server.local_addr(), dir.path().display()),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("child");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stdout = child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let next = |prefix: &str| loop {
        let line = rx
            .recv_timeout(Duration::from_secs(300))
            .expect("the child answers");
        if let Some(rest) = line.strip_prefix(prefix) {
            return rest.trim().to_owned();
        }
    };
    next("ready");
    let idle = status_bytes(pid, "VmRSS:");
    let peak = Arc::new(AtomicU64::new(idle));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (Arc::clone(&peak), Arc::clone(&sampling));
        std::thread::spawn(move || {
            while sampling.load(Ordering::Relaxed) {
                peak.fetch_max(status_bytes(pid, "VmRSS:"), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    tokio::time::sleep(s.warmup).await;
    if outage {
        server.node_down();
    }
    tokio::time::sleep(s.outage).await;
    if outage {
        server.node_up();
    }
    // The load goes on until the backlog is written (pending at most a second of load),
    // read from lines written after the node came back.
    while rx.try_recv().is_ok() {}
    let back = Instant::now();
    loop {
        let pending: u64 = next("pending ").parse().unwrap_or(0);
        if pending <= s.rate || back.elapsed() > Duration::from_secs(180) {
            break;
        }
    }
    let backlog = back.elapsed();
    drop(child.stdin.take());
    let fin: Vec<i128> = next("final ")
        .split(' ')
        .map(|v| v.parse().expect("figure"))
        .collect();
    let hwm = status_bytes(pid, "VmHWM:");
    sampling.store(false, Ordering::Relaxed);
    sampler.join().expect("sampler");
    child.wait().expect("child");
    let peak = peak.load(Ordering::Relaxed).max(hwm);
    let [
        calls,
        failed,
        buffered,
        applied,
        unknown,
        rejected,
        unsent,
        flushes,
    ] = fin[..]
    else {
        panic!("final line: {fin:?}")
    };
    let store = server.stats().table("app", "c").counter_delta_sum;
    let passed = calls - failed - buffered;
    println!(
        "{}: RSS idle {}, peak {} (VmHWM {}), limit {}; peak - idle {}; {flushes} flushes; backlog written {:.1} s after the node came back",
        if outage { "outage" } else { "baseline" },
        mib(idle),
        mib(peak),
        mib(hwm),
        mib(s.limit),
        mib(peak.saturating_sub(idle)),
        backlog.as_secs_f64()
    );
    println!(
        "  calls {calls}: buffered {buffered}, passed through and applied {passed}, failed {failed}; wrapper deltas applied {applied}, unknown {unknown}, rejected {rejected}, unsent {unsent}; store sum {store}: {} beyond the applied and passed-through (at most the unknown)",
        store - applied - passed
    );
    PEAKS.lock().expect("peaks").push(peak.saturating_sub(idle));
}

static PEAKS: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let settings = Settings {
        outage: Duration::from_secs(env_u64("WRAPPER_OUTAGE_SECS", 20)),
        warmup: Duration::from_secs(env_u64("WRAPPER_OUTAGE_WARMUP_SECS", 5)),
        rate: env_u64("WRAPPER_OUTAGE_RATE", 20_000),
        keys: env_u64("WRAPPER_OUTAGE_KEYS", 100_000),
        limit: env_u64("WRAPPER_OUTAGE_MAX_PENDING_BYTES", 16 << 20),
    };
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        child(&spec, &settings).await;
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    run(&settings, false).await;
    run(&settings, true).await;
    let peaks = PEAKS.lock().expect("peaks").clone();
    if let [baseline, outage] = peaks[..] {
        println!(
            "the outage's peak above the baseline's: {} ({:.2}x the limit of {})",
            mib(outage.saturating_sub(baseline)),
            outage.saturating_sub(baseline) as f64 / settings.limit as f64,
            mib(settings.limit)
        );
    }
}
