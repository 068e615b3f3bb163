//! Flush-path benchmarks (run with `cargo bench --bench flush`; not criterion: each run
//! takes seconds, and the figures are medians of repeated runs).
//!
//! 1. Rows flushed per second into an in-process cqlsim through the real driver, at 10k
//!    and 100k distinct rows (each row is a minute row and its day row: two writes per
//!    row, batched per partition), with the intent journal (the product) and without it
//!    (the baseline of its cost), interleaved in the same run, beside the store's own
//!    ceiling: single prepared UPDATEs at the flusher's concurrency. The state directory
//!    is on the disk of `target/` (a tmpfs would make fdatasync free).
//! 2. The plan step alone (100k drained rows into writes), without epochs and with every
//!    row placed into an epoch by a registry view (`FLUSH_BENCH_ONLY_PLAN=1` runs only
//!    this part).
//! 3. Time from SIGTERM to exit of the `countersink serve` binary holding 100k pending
//!    rows (release build required: `cargo build --release` first; skipped with
//!    `FLUSH_BENCH_SKIP_SIGTERM=1`).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use countersink::config::Config;
use countersink::engine::Engine;
use countersink::flush::Flusher;
use countersink::ingest::client::{Client, Target};
use countersink::sink::cql::CqlSink;
use scylla::value::Counter;

#[path = "common/mod.rs"]
mod common;

use self::common::{median, store};

const NOW: i64 = 1_796_042_096;
const RUNS: usize = 5;
/// Flush-rate runs: more, because one flush of 10k rows takes tens of milliseconds and a
/// shared machine's noise is of that order.
const RATE_RUNS: usize = 11;

/// Rows per second for one flush of `rows` distinct rows (100 per partition, minutes),
/// with or without the intent journal.
async fn flush_rate(rows: usize, journal: bool) -> f64 {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let mut config = Config::default();
    config.state.dir = dir.path().to_owned();
    let server = store(&mut config).await;
    let engine = Arc::new(Engine::new(&config).expect("engine"));
    let sink = CqlSink::connect(&config.store, engine.families())
        .await
        .expect("sink");
    let mut flusher = Flusher::open(engine.clone(), Arc::new(sink), &config).expect("state");
    if !journal {
        flusher.disable_journal_for_benchmark();
    }
    for i in 0..rows {
        let key = format!("k{}", i / 100);
        let minute = (i % 100) as i64;
        engine
            .record(
                "bench",
                &[("key", key.as_str())][..],
                1,
                NOW - 6000 + minute * 60,
                None,
            )
            .expect("record");
    }
    let started = Instant::now();
    let report = flusher.flush_now().await;
    let elapsed = started.elapsed();
    assert_eq!(report.applied, report.writes, "{report:?}");
    server.shutdown().await.expect("shutdown");
    rows as f64 / elapsed.as_secs_f64()
}

/// The store's ceiling: prepared single-row counter UPDATEs at concurrency 64.
async fn store_ceiling(requests: usize) -> f64 {
    let mut config = Config::default();
    let server = store(&mut config).await;
    let session = Arc::new(
        scylla::client::session_builder::SessionBuilder::new()
            .known_node(server.local_addr().to_string())
            .build()
            .await
            .expect("session"),
    );
    let update = session
        .prepare("UPDATE countersink.counts_by_minute SET value = value + ? WHERE name = ? AND tags = ? AND day = ? AND minute = ?")
        .await
        .expect("prepare");
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..64 {
        let (session, update) = (session.clone(), update.clone());
        tasks.spawn(async move {
            for i in (worker..requests).step_by(64) {
                let values = (
                    Counter(1),
                    "ceiling",
                    format!("k{}", i % 1000),
                    scylla::value::CqlDate((1 << 31) + 20_000),
                    (i % 1440) as i16,
                );
                session
                    .execute_unpaged(&update, values)
                    .await
                    .expect("update");
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let rate = requests as f64 / started.elapsed().as_secs_f64();
    server.shutdown().await.expect("shutdown");
    rate
}

/// Seconds from SIGTERM to exit of `countersink serve` holding `rows` pending rows.
async fn sigterm_to_exit(rows: usize) -> (f64, u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    let server = store(&mut config).await;
    let bin = concat!(env!("CARGO_MANIFEST_DIR"), "/target/release/countersink");
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("port");
    let port = udp.local_addr().expect("addr");
    drop(udp);
    let metrics = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    let metrics_addr = metrics.local_addr().expect("addr");
    drop(metrics);
    let mut child = Command::new(bin)
        .args([
            "serve",
            "--udp",
            &port.to_string(),
            "--metrics",
            &metrics_addr.to_string(),
            "--flush-interval",
            "1h",
        ])
        .args(["--contact-point", &config.store.contact_points[0]])
        .arg("--state-dir")
        .arg(dir.path())
        .stderr(Stdio::piped())
        .spawn()
        .expect("release binary built (cargo build --release)");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    for line in lines.by_ref() {
        if line.expect("log").contains("Connected to the store") {
            break;
        }
    }
    let mut client = Client::connect(Target::Udp(port)).expect("client");
    let batch: Vec<String> = (0..rows).map(|i| format!("term.k{i}:1|c")).collect();
    for chunk in batch.chunks(1000) {
        client
            .send_lines(chunk.iter().map(String::as_str))
            .expect("send");
        std::thread::sleep(Duration::from_millis(2));
    }
    // Wait until every datagram is read: the pending count stops moving.
    let mut previous = u64::MAX;
    let pending = loop {
        std::thread::sleep(Duration::from_millis(300));
        let pending: u64 = http_get(metrics_addr)
            .lines()
            .find_map(|l| l.strip_prefix("countersink_pending_rows "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if pending == previous && pending > 0 {
            break pending;
        }
        previous = pending;
    };
    std::thread::spawn(move || for _ in lines {});
    let started = Instant::now();
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().expect("wait");
    let elapsed = started.elapsed().as_secs_f64();
    assert!(status.success(), "{status}");
    server.shutdown().await.expect("shutdown");
    (elapsed, pending)
}

fn http_get(addr: std::net::SocketAddr) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    let _ = write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    text
}

/// 100k drained rows of one family: 1,000 keys × 100 minutes.
fn drained_rows() -> Vec<(countersink::aggregate::RowKey, countersink::aggregate::Row)> {
    use countersink::aggregate::{Columns, Row, RowKey, Slot};
    let first = (NOW / 60) as u32;
    (0..100_000_u32)
        .map(|i| {
            let series = countersink::series::encode([format!("k{}", i % 1000).as_str()]);
            (
                RowKey::new(
                    countersink::vocabulary::FamilyId(1),
                    Slot::Both(countersink::bucket::Minute(first - 100 + i / 1000)),
                    series.into_boxed_slice(),
                ),
                Row {
                    columns: Columns::One(1),
                    requeued_since: 0,
                },
            )
        })
        .collect()
}

/// Seconds to plan 100k rows: without epochs, and with each row placed by a view (a
/// family-wide reset in the middle of the rows' minutes, and a per-key one).
fn plan_cost() -> [f64; 2] {
    use countersink::epoch::{EpochView, Horizon, choose};
    use countersink::flush::plan::{plan, plan_placed};
    let options = countersink::flush::PlanOptions { max_batch_rows: 16 };
    let mut view = EpochView::new(NOW);
    view.add(
        countersink::vocabulary::FamilyId(1),
        None,
        (NOW / 60 - 50) as i32,
    );
    view.add(
        countersink::vocabulary::FamilyId(1),
        Some(&countersink::series::encode(["k7"])),
        (NOW / 60 - 20) as i32,
    );
    let horizon = Horizon {
        lead_secs: 60,
        clock_margin_secs: 5,
    };
    let rows = drained_rows();
    let started = Instant::now();
    let plain = plan(rows, options, |_| None);
    let without = started.elapsed().as_secs_f64();
    let rows = drained_rows();
    let started = Instant::now();
    let placed = plan_placed(
        rows,
        options,
        |_| None,
        |family, series, minute| choose(Some(&view), &horizon, family, series, minute),
        |_, g| {
            matches!(
                g,
                countersink::vocabulary::Granularity::Minute
                    | countersink::vocabulary::Granularity::Day
            )
        },
    );
    let with = started.elapsed().as_secs_f64();
    assert!(placed.held.is_empty() && placed.writes.len() > plain.len());
    [without, with]
}

#[tokio::main]
async fn main() {
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for _ in 0..RATE_RUNS {
        let [a, b] = plan_cost();
        without.push(a * 1000.0);
        with.push(b * 1000.0);
    }
    let (a, b) = (median(without), median(with));
    println!(
        "plan of 100k rows: {a:.1} ms without epochs, {b:.1} ms placed into epochs (medians of {RATE_RUNS}): {:.2}x",
        b / a
    );
    if std::env::var_os("FLUSH_BENCH_ONLY_PLAN").is_some() {
        return;
    }
    let mut ceiling = Vec::new();
    // [rows][journal]: rows/s per run.
    let mut rates: [[Vec<f64>; 2]; 2] = Default::default();
    for _ in 0..RATE_RUNS {
        ceiling.push(store_ceiling(50_000).await);
        for (i, rows) in [10_000, 100_000].into_iter().enumerate() {
            for journal in [true, false] {
                rates[i][usize::from(journal)].push(flush_rate(rows, journal).await);
            }
        }
    }
    let ceiling = median(ceiling);
    println!("store ceiling (single-row UPDATEs, concurrency 64): {ceiling:.0} requests/s");
    for (i, rows) in [10_000, 100_000].into_iter().enumerate() {
        let with = median(rates[i][1].clone());
        let without = median(rates[i][0].clone());
        println!(
            "flush of {rows} rows: {with:.0} rows/s with the journal, {without:.0} without (medians of {RATE_RUNS}): {:.2}x; {:.2}x the store's request ceiling",
            with / without,
            with / ceiling
        );
        println!(
            "  with: {:?}",
            rates[i][1].iter().map(|r| r.round()).collect::<Vec<_>>()
        );
        println!(
            "  without: {:?}",
            rates[i][0].iter().map(|r| r.round()).collect::<Vec<_>>()
        );
    }
    if std::env::var_os("FLUSH_BENCH_SKIP_SIGTERM").is_some() {
        return;
    }
    let mut times = Vec::new();
    for _ in 0..RUNS {
        let (seconds, pending) = sigterm_to_exit(100_000).await;
        println!("  SIGTERM to exit with {pending} pending rows: {seconds:.2} s");
        times.push(seconds);
    }
    println!(
        "SIGTERM to exit, 100k pending rows: {:.2} s (median of {RUNS})",
        median(times)
    );
}
