//! `writer_totals` against counters, on an in-process cqlsim, in one run (`cargo bench
//! --bench totals`; not criterion: each measurement takes seconds, the figures are medians
//! of repeated runs).
//!
//! 1. Flush throughput: one flush of `ROWS` changed rows (each a minute row and its day
//!    row, 100 minutes per key), for a counter family and for a writer_totals family fed
//!    the same increments, alternating, `RUNS` times. The rows exist already (a first flush
//!    wrote them), so both measure the steady state: counters add a delta, writer totals
//!    overwrite a total.
//! 2. Store work per flushed row, from the same flushes: requests and row mutations the
//!    store received (cqlsim's statistics), and CPU time of the process (driver, flusher and
//!    store share it) per row. cqlsim keeps everything in memory: a real node's counter
//!    write also reads the local shard before it writes and takes a lock (regular writes do
//!    neither), which this store does not model; see docs/src/performance.md.
//! 3. Read cost of `get` (the library reader): a day total and a day's minutes of one key
//!    whose rows were written by 1, 10 and 100 writers, against the counter family's one
//!    row per bucket.
//! 4. With `TOTALS_BENCH_CASSANDRA=HOST:PORT` (a real node, e.g. from the `cassandra`
//!    branch's `tests/cassandra/cluster.sh up 1`) and `TOTALS_BENCH_CASSANDRA_PID` (its
//!    process id, on this machine): measurement 1 against that node, with the node's own
//!    CPU time per flushed row (a counter write reads before it writes; a regular write
//!    does not). Each run writes into a keyspace of its own, dropped afterwards.

use std::sync::Arc;
use std::time::{Duration, Instant};

use countersink::bucket::{Day, Minute};
use countersink::config::ConsistencyLevel;
use countersink::config::{Config, CountingMode, FamilyConfig};
use countersink::ddl;
use countersink::engine::Engine;
use countersink::family::Families;
use countersink::flush::Flusher;
use countersink::ops::read::{Reader, resolve};
use countersink::sink::cql::CqlSink;
use countersink::vocabulary::Granularity;

#[path = "common/mod.rs"]
mod common;

use self::common::{median, store};

const ROWS: usize = 50_000;
const RUNS: usize = 5;
const READS: usize = 200;

fn now() -> i64 {
    countersink::bucket::unix_secs(std::time::SystemTime::now())
}

/// CPU time of this process so far (user + system), from `/proc/self/stat`.
fn cpu_time() -> Duration {
    cpu_time_of("self")
}

/// CPU time of process `pid` (or `self`) so far, from `/proc/<pid>/stat`.
fn cpu_time_of(pid: &str) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/<pid>/stat");
    // Fields after the command name (which ends with ')'): utime and stime are 14 and 15.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    Duration::from_millis(ticks * 10)
}

fn config(dir: &std::path::Path, mode: CountingMode) -> Config {
    config_in(dir, mode, "metrics")
}

fn config_in(dir: &std::path::Path, mode: CountingMode, keyspace: &str) -> Config {
    let mut config = Config::default();
    config.state.dir = dir.to_owned();
    config.generic.enabled = false;
    config.families.push(FamilyConfig {
        name: "bench".into(),
        minute_table: format!("{keyspace}.bench_by_minute"),
        day_table: format!("{keyspace}.bench_by_day"),
        key: vec!["key".into()],
        columns: [("bench".to_string(), "n".to_string())].into(),
        mode,
        ..FamilyConfig::default()
    });
    config.limits.max_pending_rows = 4 * ROWS;
    config.limits.timestamp_max_past = Duration::from_secs(3 * 3600);
    config
}

/// A flusher on `config` whose store already holds `rows` rows (100 minutes per key,
/// written by one flush), every one of them changed since: the next flush writes each
/// row again, the steady state.
async fn changed_rows(config: &Config, rows: usize) -> Flusher<CqlSink> {
    let engine = Arc::new(Engine::new(config).expect("engine"));
    let sink = CqlSink::connect(&config.store, engine.families())
        .await
        .expect("sink");
    let mut flusher = Flusher::open(engine.clone(), Arc::new(sink), config).expect("state");
    let base = now() - 6000;
    let record = |delta: i64| {
        for i in 0..rows {
            let key = format!("k{}", i / 100);
            let minute = (i % 100) as i64;
            engine
                .record(
                    "bench",
                    &[("key", key.as_str())][..],
                    delta,
                    base + minute * 60,
                    None,
                )
                .expect("record");
        }
    };
    record(1);
    flusher.flush_now().await;
    record(2);
    flusher
}

/// One flush, every write of which must apply: its wall time, and the CPU time `cpu`
/// (a process's clock) advanced meanwhile.
async fn timed_flush(
    flusher: &mut Flusher<CqlSink>,
    cpu: impl Fn() -> Duration,
) -> (Duration, Duration) {
    let cpu_before = cpu();
    let started = Instant::now();
    let report = flusher.flush_now().await;
    let elapsed = started.elapsed();
    let cpu = cpu() - cpu_before;
    let failed = report.totals.failed + report.requeued + report.unknown + report.rejected;
    assert_eq!(failed, 0, "{report:?}");
    (elapsed, cpu)
}

/// Drops `keyspace` on the node `session` is connected to and creates `config`'s schema
/// in it afresh.
async fn fresh_keyspace(
    session: &scylla::client::session::Session,
    config: &Config,
    keyspace: &str,
) {
    session
        .query_unpaged(format!("DROP KEYSPACE IF EXISTS {keyspace}"), ())
        .await
        .expect("drop");
    for statement in ddl::statements(config, ddl::DEV_REPLICATION).expect("schema") {
        session
            .query_unpaged(statement.as_str(), ())
            .await
            .expect("ddl");
    }
    session.await_schema_agreement().await.expect("agreement");
}

/// One measured flush.
struct Measured {
    rows_per_sec: f64,
    requests_per_row: f64,
    mutations_per_row: f64,
    cpu_us_per_row: f64,
}

/// Flushes `ROWS` rows once (creating them), changes every one, and measures the second
/// flush.
async fn flush_once(mode: CountingMode) -> Measured {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = config(dir.path(), mode);
    let server = store(&mut config).await;
    let mut flusher = changed_rows(&config, ROWS).await;
    server.reset_stats();
    let (elapsed, cpu) = timed_flush(&mut flusher, cpu_time).await;
    let stats = server.stats();
    let (requests, mutations): (u64, u64) = ["bench_by_minute", "bench_by_day"]
        .iter()
        .map(|t| {
            let s = stats.table("metrics", t);
            (s.write_requests, s.rows_mutated)
        })
        .fold((0, 0), |(a, b), (c, d)| (a + c, b + d));
    server.shutdown().await.expect("shutdown");
    Measured {
        rows_per_sec: ROWS as f64 / elapsed.as_secs_f64(),
        requests_per_row: requests as f64 / ROWS as f64,
        mutations_per_row: mutations as f64 / ROWS as f64,
        cpu_us_per_row: cpu.as_secs_f64() * 1e6 / ROWS as f64,
    }
}

/// Median latency and rows read of a day total and of a day's minutes of one key, whose
/// rows `writers` writers wrote (60 minutes each): on an in-process cqlsim, or on the real
/// node at `node` (in a keyspace of its own, dropped afterwards).
async fn read_cost(mode: CountingMode, writers: usize, node: Option<&str>) -> [(f64, usize); 2] {
    let dir = tempfile::tempdir().expect("tempdir");
    let keyspace = format!("bench_read_{}_{writers}", mode.as_str());
    let mut config = config_in(dir.path(), mode, &keyspace);
    let server = match node {
        Some(address) => {
            config.store.contact_points = vec![address.to_owned()];
            None
        }
        None => Some(store(&mut config).await),
    };
    let session = scylla::client::session_builder::SessionBuilder::new()
        .known_node(&config.store.contact_points[0])
        .build()
        .await
        .expect("session");
    if server.is_none() {
        fresh_keyspace(&session, &config, &keyspace).await;
    }
    let day = Minute::from_unix_secs(now()).expect("now").day();
    let date = countersink::bucket::format_date(day.date());
    let month = day.month();
    for w in 0..writers {
        let writer = format!("bench-{w}/1/0000abcd");
        let mut statements: Vec<String> = (0..60)
            .map(|minute| match mode {
                CountingMode::Counter => format!(
                    "UPDATE {keyspace}.bench_by_minute SET n = n + 1 WHERE key = 'hot' AND day = '{date}' AND minute = {minute}"
                ),
                CountingMode::WriterTotals => format!(
                    "INSERT INTO {keyspace}.bench_by_minute (key, day, minute, writer, n) VALUES ('hot', '{date}', {minute}, '{writer}', 1)"
                ),
            })
            .collect();
        statements.push(match mode {
            CountingMode::Counter => format!(
                "UPDATE {keyspace}.bench_by_day SET n = n + 60 WHERE key = 'hot' AND month = '{month}' AND day = '{date}'"
            ),
            CountingMode::WriterTotals => format!(
                "INSERT INTO {keyspace}.bench_by_day (key, month, day, writer, n) VALUES ('hot', '{month}', '{date}', '{writer}', 60)"
            ),
        });
        for statement in statements {
            session
                .query_unpaged(statement.as_str(), ())
                .await
                .expect("row");
        }
    }
    let families = Families::from_config(&config).expect("families");
    let session = Arc::new(session);
    let reader = Reader::new(session.clone());
    let counter = resolve(&families, "bench", &[("key", "hot")]).expect("counter");
    let mut out = [(0.0, 0), (0.0, 0)];
    for (slot, minutes) in [(0, false), (1, true)] {
        let mut times = Vec::with_capacity(READS);
        let mut rows = 0;
        for _ in 0..READS {
            let started = Instant::now();
            let kind = if minutes {
                Granularity::Minute
            } else {
                Granularity::Day
            };
            let reading = reader
                .counter_partition(&families, &counter, kind, Day(day.0), ConsistencyLevel::One)
                .await
                .expect("read");
            let sum: i128 = reading.sums.values().map(|v| i128::from(v[0])).sum();
            times.push(started.elapsed().as_secs_f64() * 1e6);
            assert_eq!(sum, 60 * writers as i128, "{mode:?} {writers} writers");
            rows = reading.rows_read;
        }
        out[slot] = (median(times), rows);
    }
    match server {
        Some(server) => server.shutdown().await.expect("shutdown"),
        None => {
            let _ = session
                .query_unpaged(format!("DROP KEYSPACE IF EXISTS {keyspace}"), ())
                .await;
        }
    }
    out
}

/// Measurement 1 against a real node: rows per second and the node's CPU time per row.
async fn flush_on_node(
    address: &str,
    pid: &str,
    mode: CountingMode,
    run: usize,
    rows: usize,
) -> (f64, f64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let keyspace = format!("bench_{}_{run}", mode.as_str());
    let mut config = config_in(dir.path(), mode, &keyspace);
    config.store.contact_points = vec![address.to_owned()];
    config.store.consistency = countersink::config::ConsistencyLevel::One;
    let session = scylla::client::session_builder::SessionBuilder::new()
        .known_node(address)
        .build()
        .await
        .expect("session to the node");
    fresh_keyspace(&session, &config, &keyspace).await;
    let mut flusher = changed_rows(&config, rows).await;
    let (elapsed, cpu) = timed_flush(&mut flusher, || cpu_time_of(pid)).await;
    let _ = session
        .query_unpaged(format!("DROP KEYSPACE IF EXISTS {keyspace}"), ())
        .await;
    (
        rows as f64 / elapsed.as_secs_f64(),
        cpu.as_secs_f64() * 1e6 / rows as f64,
    )
}

#[tokio::main]
async fn main() {
    if let (Ok(address), Ok(pid)) = (
        std::env::var("TOTALS_BENCH_CASSANDRA"),
        std::env::var("TOTALS_BENCH_CASSANDRA_PID"),
    ) {
        let rows = 20_000;
        let mut results: [Vec<(f64, f64)>; 2] = [Vec::new(), Vec::new()];
        for run in 0..RUNS {
            for (i, mode) in [CountingMode::Counter, CountingMode::WriterTotals]
                .into_iter()
                .enumerate()
            {
                results[i].push(flush_on_node(&address, &pid, mode, run, rows).await);
            }
        }
        let rate = |i: usize| median(results[i].iter().map(|r| r.0).collect());
        let cpu = |i: usize| median(results[i].iter().map(|r| r.1).collect());
        println!("real node {address}: flush of {rows} changed rows, medians of {RUNS}:");
        println!("| | counter | writer_totals | writer_totals / counter |");
        println!("|---|---|---|---|");
        println!(
            "| rows flushed per second | {:.0} | {:.0} | {:.2}x |",
            rate(0),
            rate(1),
            rate(1) / rate(0)
        );
        println!(
            "| node CPU µs per row | {:.1} | {:.1} | {:.2}x |",
            cpu(0),
            cpu(1),
            cpu(1) / cpu(0)
        );
        println!();
    } else {
        println!("real node: not run (set TOTALS_BENCH_CASSANDRA and TOTALS_BENCH_CASSANDRA_PID)");
        println!();
    }
    let mut counter = Vec::new();
    let mut totals = Vec::new();
    for _ in 0..RUNS {
        counter.push(flush_once(CountingMode::Counter).await);
        totals.push(flush_once(CountingMode::WriterTotals).await);
    }
    let summary = |runs: &[Measured], f: fn(&Measured) -> f64| median(runs.iter().map(f).collect());
    println!(
        "flush of {ROWS} changed rows (minute row + day row each, 100 rows per partition), medians of {RUNS}:"
    );
    println!("| | counter | writer_totals | writer_totals / counter |");
    println!("|---|---|---|---|");
    for (what, f) in [
        (
            "rows flushed per second",
            (|m: &Measured| m.rows_per_sec) as fn(&Measured) -> f64,
        ),
        ("write requests per row", |m: &Measured| m.requests_per_row),
        ("row mutations per row", |m: &Measured| m.mutations_per_row),
        (
            "CPU µs per row (driver + flusher + store)",
            |m: &Measured| m.cpu_us_per_row,
        ),
    ] {
        let (c, t) = (summary(&counter, f), summary(&totals, f));
        println!("| {what} | {c:.2} | {t:.2} | {:.2}x |", t / c);
    }
    println!();
    let node = std::env::var("TOTALS_BENCH_CASSANDRA").ok();
    for node in std::iter::once(None).chain(node.as_deref().map(Some)) {
        println!(
            "read of one key's day total and of its day's minutes (60), on {}, medians of {READS} reads:",
            node.unwrap_or("cqlsim")
        );
        println!("| mode, writers | day total: rows, µs | minutes: rows, µs |");
        println!("|---|---|---|");
        let [(day_us, day_rows), (min_us, min_rows)] =
            read_cost(CountingMode::Counter, 1, node).await;
        println!("| counter | {day_rows}, {day_us:.0} | {min_rows}, {min_us:.0} |");
        for writers in [1, 10, 100] {
            let [(day_us, day_rows), (min_us, min_rows)] =
                read_cost(CountingMode::WriterTotals, writers, node).await;
            println!(
                "| writer_totals, {writers} | {day_rows}, {day_us:.0} | {min_rows}, {min_us:.0} |"
            );
        }
        println!();
    }
}
