//! `reconcile` benchmark (`cargo bench --bench reconcile --features dev`; not criterion:
//! one run takes seconds, the figures are medians of runs interleaved in the same
//! process). `RECONCILE_BENCH_KEYS` sets the day's keys (default 100 000, a size a CI run
//! or a laptop populates in seconds; the size is 1 000 000);
//! `RECONCILE_BENCH_LEDGER_ROWS` the ledger rows per key (default 10);
//! `RECONCILE_BENCH_RUNS` the runs (default 3); `RECONCILE_BENCH_PARTS=0` skips the
//! two-parts comparison (step 4); `RECONCILE_BENCH_NODE=127.0.0.1:9042` reads from a
//! real node instead of cqlsim (start one with `tests/cassandra/cluster.sh up 1`): the
//! same rows, written through the driver a key's rows a batch, in a keyspace of the run
//! dropped after. cqlsim answers every request under one lock, so there reconcile's scans
//! and point reads add up and the ceiling ratio cannot pass about 0.5; a node serves them
//! side by side.
//!
//! The store: an in-process cqlsim (or the node) holding one family-day of the generic family with
//! `generic.exact = true` and the key index on, written as real minute traffic writes
//! it: each key is incremented in `RECONCILE_BENCH_LEDGER_ROWS` different minutes, each
//! minute flushed by its own flush, so per key that many ledger rows (one per flush and
//! minute) and minute counter rows, one day counter row holding their sum, and one
//! key-index row (same tables, buckets, key text as a flush). They are written through
//! cqlsim's in-process API in unlogged batches (a flush of a million keys would take
//! minutes and measures the flush, not reconcile); the run then checks every key comes
//! out `ok` with the exact total fed, so a row in the wrong place would fail the
//! benchmark.
//!
//! Per run (after one of each not counted, to warm the store and the driver), in the same
//! process and store:
//! 1. `reconcile` of the day: keys per second, partition reads per second (two per key:
//!    the minute partition and the day partition), and its memory: peak RSS during the
//!    run above the RSS before it (`/proc/self/clear_refs` resets the peak), with the
//!    store's rows already resident.
//! 2. The ceiling: the point reads reconcile needs, issued by a plain loop: the same two
//!    prepared SELECTs per key, the same texts, at the same concurrency, through the same
//!    driver session, rows deserialized, nothing else. Reconcile's partition reads per
//!    second over the ceiling's is the ratio the goal is about.
//! 3. The day's scans alone (ledger and key-index buckets, as reconcile reads them): with
//!    the ceiling, the time reconcile's parts take done one after the other, so that its
//!    own cost shows (ratio 1.0: none).
//! 4. The day in two parts read at once (`--slice 0/2` and `1/2`, a session each): their
//!    keys per second over the whole day's.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use countersink::bucket::{Day, format_date};
use countersink::config::Config;
use countersink::ddl;
use countersink::family::{Families, key_bucket};
use countersink::layout::TableLayout;
use countersink::ops::keyindex::index_table;
use countersink::ops::read::select_partition;
use countersink::ops::reconcile::{self, MAX_LISTED, Options, Progress, gather};
use countersink::sink::cql::session;
use countersink::vocabulary::Granularity;
use futures_util::StreamExt;
use scylla::client::session::Session;
use scylla::value::{Counter, CqlDate};

/// 2026-11-29: the benchmark's day (closed long before `NOW`).
const DAY: u32 = 20_421;
const NOW: i64 = (DAY as i64 + 30) * 86_400;
const CONCURRENCY: usize = 64;
/// Rows per in-process batch while populating.
const BATCH: usize = 500;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// `VmRSS` or `VmHWM` of this process, in MiB.
fn status_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// Resets the peak RSS (`VmHWM`) to the current RSS.
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn bench_config() -> Config {
    let mut config = Config::default();
    config.generic.exact = true;
    config.key_index.enabled = true;
    config
}

fn key_text(i: usize) -> (String, String) {
    let tags = format!("key:k{i}");
    let json = serde_json::to_string(&["bench", tags.as_str()]).expect("json");
    (tags, json)
}

/// The minute of the day of `key`'s `n`th increment: spread over the day, a different
/// minute for each of its increments.
fn minute_of(key: usize, n: usize, per_key: usize) -> i16 {
    ((key % 1440 + n * (1440 / per_key.max(1))) % 1440) as i16
}

/// The day's statements of one key, as a flush of each of its `per_key` minutes and the
/// key index write them: the ledger and key-index rows, the counter updates, and the
/// key's exact total.
struct KeyStatements {
    regular: String,
    counters: String,
    total: i64,
}

/// Writes [`KeyStatements`] of the day for each key, in the generic family's tables of
/// `config`.
struct DayWriter {
    ks: String,
    index: String,
    minute_table: String,
    day_table: String,
    date: String,
    ledger_buckets: u16,
    index_buckets: u16,
}

impl DayWriter {
    fn new(config: &Config) -> DayWriter {
        let families = Families::from_config(config).expect("families");
        let generic = families.by_name("generic").expect("generic");
        DayWriter {
            ks: config.exact_keyspace().to_owned(),
            index: index_table(config).to_string(),
            minute_table: generic
                .minute_table
                .as_ref()
                .expect("minute table")
                .to_string(),
            day_table: generic.day_table.as_ref().expect("day table").to_string(),
            date: format_date(Day(DAY).date()),
            ledger_buckets: config.exact.buckets,
            index_buckets: config.key_index.buckets,
        }
    }

    fn key(&self, i: usize, per_key: usize) -> KeyStatements {
        let (ks, date) = (&self.ks, &self.date);
        let month = &date[..7];
        let (tags, json) = key_text(i);
        let bucket = key_bucket(&json, self.ledger_buckets);
        let (mut regular, mut counters) = (String::new(), String::new());
        let mut total = 0_i64;
        for n in 0..per_key {
            let value = 1 + ((i + n) % 7) as i64;
            let minute = minute_of(i, n, per_key);
            total += value;
            // The flush of that minute: its own flush sequence number.
            regular.push_str(&format!(
                "INSERT INTO {ks}.delta_ledger (family, day, bucket, key, minute, writer, incarnation, flush_seq, part, deltas) VALUES ('generic', '{date}', {bucket}, '{json}', {minute}, 'bench', 1, {}, 0, {{'value': {value}}});\n",
                n + 1
            ));
            counters.push_str(&format!(
                "UPDATE {} SET value = value + {value} WHERE name = 'bench' AND tags = '{tags}' AND day = '{date}' AND minute = {minute};\n",
                self.minute_table
            ));
        }
        regular.push_str(&format!(
            "INSERT INTO {} (family, day, bucket, key) VALUES ('generic', '{date}', {}, '{json}');\n",
            self.index,
            key_bucket(&json, self.index_buckets)
        ));
        counters.push_str(&format!(
            "UPDATE {} SET value = value + {total} WHERE name = 'bench' AND tags = '{tags}' AND month = '{month}' AND day = '{date}';\n",
            self.day_table
        ));
        KeyStatements {
            regular,
            counters,
            total,
        }
    }
}

fn unlogged(statements: &str) -> String {
    format!("BEGIN UNLOGGED BATCH\n{statements}APPLY BATCH")
}

fn counter_batch(statements: &str) -> String {
    format!("BEGIN COUNTER BATCH\n{statements}APPLY BATCH")
}

/// Writes the day's rows for `keys` keys, `per_key` minutes of traffic each, through
/// cqlsim's in-process API, many keys a batch; returns the exact total.
fn populate(sim: &cqlsim::Handle, config: &Config, keys: usize, per_key: usize) -> i128 {
    let writer = DayWriter::new(config);
    let mut total = 0_i128;
    // Keys per batch, so that a batch holds about `BATCH` rows.
    let step = (BATCH / per_key.max(1)).max(1);
    for start in (0..keys).step_by(step) {
        let (mut regular, mut counters) = (String::new(), String::new());
        for i in start..(start + step).min(keys) {
            let key = writer.key(i, per_key);
            regular.push_str(&key.regular);
            counters.push_str(&key.counters);
            total += i128::from(key.total);
        }
        sim.execute(None, &unlogged(&regular))
            .expect("ledger and index rows");
        sim.execute(None, &counter_batch(&counters))
            .expect("counter rows");
    }
    total
}

/// The same rows written to a node through the driver: a key's rows a batch each (its
/// ledger rows share a partition, its minute rows too; the node refuses batches over
/// 50 KiB), `CONCURRENCY` keys at a time.
async fn populate_node(session: &Session, config: &Config, keys: usize, per_key: usize) -> i128 {
    let writer = DayWriter::new(config);
    let mut writes = futures_util::stream::iter(0..keys)
        .map(|i| {
            let key = writer.key(i, per_key);
            async move {
                let regular = unlogged(&key.regular);
                let counters = counter_batch(&key.counters);
                let (r, c) = futures_util::future::join(
                    session.query_unpaged(regular, ()),
                    session.query_unpaged(counters, ()),
                )
                .await;
                r.expect("ledger and index rows");
                c.expect("counter rows");
                i128::from(key.total)
            }
        })
        .buffer_unordered(CONCURRENCY);
    let mut total = 0_i128;
    while let Some(key_total) = writes.next().await {
        total += key_total;
    }
    total
}

struct Run {
    keys_per_sec: f64,
    peak_growth_mib: f64,
    first_estimate: u64,
    progress_calls: u64,
    progress_lines: Vec<String>,
}

async fn reconcile_run(
    session: &Arc<Session>,
    config: &Config,
    keys: usize,
    per_key: usize,
    exact_total: i128,
) -> Run {
    let families = Families::from_config(config).expect("families");
    let options = Options {
        day: Day(DAY),
        tags: Vec::new(),
        threshold: 0.0,
        now_unix_secs: NOW,
        concurrency: CONCURRENCY,
        max_listed: MAX_LISTED,
        slice: None,
    };
    let first_estimate = AtomicU64::new(0);
    let calls = AtomicU64::new(0);
    let lines = std::sync::Mutex::new(Vec::new());
    let started = Instant::now();
    let progress = |p: Progress| {
        let n = calls.fetch_add(1, Ordering::Relaxed);
        if p.slices_scanned > 0 {
            let _ = first_estimate.compare_exchange(
                0,
                p.keys_estimated(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        // The line the command shows on a terminal, at about a quarter, half, three
        // quarters of the run, and at its end.
        let quarter = (keys as u64 / 4_000).max(1);
        if (n + 1).is_multiple_of(quarter) || p.keys_done == keys as u64 {
            lines.lock().expect("lines").push(p.line(started.elapsed()));
        }
    };
    reset_peak();
    let before = status_mib("VmRSS:");
    let report = reconcile::reconcile(
        session,
        config,
        families.by_name("generic").expect("generic"),
        &options,
        &progress,
    )
    .await
    .expect("reconcile");
    let elapsed = started.elapsed();
    let peak = status_mib("VmHWM:");
    let s = &report.summary;
    assert_eq!(s.keys, keys, "{s:?}");
    assert_eq!(s.ledger_rows, (keys * per_key) as u64, "{s:?}");
    assert_eq!(s.statuses.get("ok"), Some(&(2 * keys)), "{s:?}");
    assert_eq!(s.exact_total, exact_total, "{s:?}");
    assert_eq!(s.counter_total.get("day"), Some(&exact_total), "{s:?}");
    assert!(report.closed && report.keys.is_empty(), "{s:?}");
    Run {
        keys_per_sec: keys as f64 / elapsed.as_secs_f64(),
        peak_growth_mib: peak - before,
        first_estimate: first_estimate.load(Ordering::Relaxed),
        progress_calls: calls.load(Ordering::Relaxed),
        progress_lines: lines.into_inner().expect("lines"),
    }
}

/// The day in two parts read at once (`--slice 0/2` and `1/2`, each with its own driver
/// session, as two processes would be), keys per second over both: what splitting a day
/// gains on this machine. Checks the parts add up to every key, `ok`.
async fn two_parts_run(config: &Config, keys: usize, exact_total: i128) -> f64 {
    let started = Instant::now();
    let (a, b) = tokio::join!(
        tokio::spawn(one_part(config.clone(), 0)),
        tokio::spawn(one_part(config.clone(), 1))
    );
    let elapsed = started.elapsed();
    let (a, b) = (a.expect("part 0"), b.expect("part 1"));
    assert_eq!(a.summary.keys + b.summary.keys, keys);
    assert_eq!(a.summary.exact_total + b.summary.exact_total, exact_total);
    assert!(a.passes() && b.passes() && a.keys.is_empty() && b.keys.is_empty());
    keys as f64 / elapsed.as_secs_f64()
}

/// One part of [`two_parts_run`], owning what it needs so that it runs as its own task.
async fn one_part(config: Config, index: u16) -> reconcile::Report {
    let families = Families::from_config(&config).expect("families");
    let generic = families.by_name("generic").expect("generic");
    let options = Options {
        day: Day(DAY),
        tags: Vec::new(),
        threshold: 0.0,
        now_unix_secs: NOW,
        concurrency: CONCURRENCY,
        max_listed: MAX_LISTED,
        slice: Some((index, 2)),
    };
    let session = Arc::new(session::connect(&config.store).await.expect("session"));
    reconcile::reconcile(&session, &config, generic, &options, &|_| {})
        .await
        .expect("reconcile")
}

/// Partition reads per second: reconcile's two SELECTs per key (same texts, prepared,
/// idempotent, same consistency), `CONCURRENCY` keys at a time, rows deserialized.
async fn ceiling(session: &Arc<Session>, config: &Config, keys: usize, per_key: usize) -> f64 {
    let families = Families::from_config(config).expect("families");
    let generic = families.by_name("generic").expect("generic");
    let consistency = session::consistency(config.exact.consistency);
    let mut prepared = Vec::new();
    for kind in [Granularity::Minute, Granularity::Day] {
        let text = select_partition(&TableLayout::of(generic, kind).unwrap(), &["value"]);
        let mut statement = session.prepare(text).await.expect("prepare");
        statement.set_is_idempotent(true);
        statement.set_consistency(consistency);
        prepared.push(statement);
    }
    let (minute, day) = (&prepared[0], &prepared[1]);
    let date = CqlDate(Day(DAY).cql_date());
    let month = format_date(Day(DAY).date())[..7].to_owned();
    let started = Instant::now();
    let mut reads = futures_util::stream::iter(0..keys)
        .map(|i| {
            let month = month.as_str();
            async move {
                let tags = format!("key:k{i}");
                let (m, d) = futures_util::future::join(
                    session.execute_unpaged(minute, ("bench", tags.as_str(), date)),
                    session.execute_unpaged(day, ("bench", tags.as_str(), month)),
                )
                .await;
                let m = m.expect("minute").into_rows_result().expect("rows");
                let d = d.expect("day").into_rows_result().expect("rows");
                let rows = m.rows::<(i16, Option<Counter>)>().expect("typed").count()
                    + d.rows::<(CqlDate, Option<Counter>)>()
                        .expect("typed")
                        .count();
                assert_eq!(rows, per_key + 1);
            }
        })
        .buffer_unordered(CONCURRENCY);
    while reads.next().await.is_some() {}
    (2 * keys) as f64 / started.elapsed().as_secs_f64()
}

/// Seconds to scan the day's ledger and key-index buckets as reconcile does (a slice's
/// buckets together, slice after slice), without reading a counter.
async fn scan_secs(session: &Arc<Session>, config: &Config) -> f64 {
    let families = Families::from_config(config).expect("families");
    let generic = families.by_name("generic").expect("generic");
    let buckets = gather::BucketReader::new(session, config, generic, Day(DAY))
        .await
        .expect("prepare");
    let slices = reconcile::slices(config);
    let rows = AtomicU64::new(0);
    let started = Instant::now();
    for slice in 0..slices {
        let ledger = (0..config.exact.buckets)
            .filter(|b| b % slices == slice)
            .map(|b| buckets.ledger_bucket(b as i16, &rows));
        let index = (0..config.key_index.buckets)
            .filter(|b| b % slices == slice)
            .map(|b| buckets.index_bucket(b as i16));
        let (ledger, index) = futures_util::future::join(
            futures_util::future::try_join_all(ledger),
            futures_util::future::try_join_all(index),
        )
        .await;
        ledger.expect("ledger");
        index.expect("index");
    }
    started.elapsed().as_secs_f64()
}

/// The store the day is read from: an in-process cqlsim, or a node (its keyspace of
/// the run, dropped after).
enum Store {
    Sim(cqlsim::Server),
    Node(String),
}

async fn measure(keys: usize, per_key: usize, runs: usize, parts: bool, node: Option<String>) {
    let mut config = bench_config();
    let started = Instant::now();
    let (store, session, exact_total) = match node {
        None => {
            let server = cqlsim::Server::start(cqlsim::Config {
                listen: "127.0.0.1:0".parse().expect("address"),
                ..Default::default()
            })
            .await
            .expect("cqlsim");
            for statement in ddl::statements(&config, ddl::DEV_REPLICATION).expect("schema") {
                server.execute(None, &statement).expect("ddl");
            }
            config.store.contact_points = vec![server.local_addr().to_string()];
            let total = populate(server.handle(), &config, keys, per_key);
            let session = Arc::new(session::connect(&config.store).await.expect("session"));
            (Store::Sim(server), session, total)
        }
        Some(node) => {
            let keyspace = format!("bench_reconcile_{:08x}", fastrand::u32(..));
            config.store.keyspace = keyspace.clone();
            config.store.contact_points = vec![node];
            let session = Arc::new(session::connect(&config.store).await.expect("session"));
            for statement in ddl::statements(&config, ddl::DEV_REPLICATION).expect("schema") {
                session
                    .query_unpaged(statement.as_str(), ())
                    .await
                    .unwrap_or_else(|e| panic!("{statement}: {e}"));
            }
            let total = populate_node(&session, &config, keys, per_key).await;
            (Store::Node(keyspace), session, total)
        }
    };
    let populated = started.elapsed();
    let (mut rates, mut ceilings, mut growth) = (Vec::new(), Vec::new(), Vec::new());
    let mut scans = Vec::new();
    let mut parts_ratios = Vec::new();
    let mut estimate = (0, 0);
    let mut lines = Vec::new();
    // A run of each, not counted: a node's JIT and caches, the driver's prepared
    // statements (a node's first run reads at a third of its later speed).
    reconcile_run(&session, &config, keys, per_key, exact_total).await;
    ceiling(&session, &config, keys, per_key).await;
    for _ in 0..runs {
        let run = reconcile_run(&session, &config, keys, per_key, exact_total).await;
        rates.push(run.keys_per_sec);
        growth.push(run.peak_growth_mib);
        estimate = (run.first_estimate, run.progress_calls);
        lines = run.progress_lines;
        ceilings.push(ceiling(&session, &config, keys, per_key).await);
        scans.push(scan_secs(&session, &config).await);
        if parts {
            let two = two_parts_run(&config, keys, exact_total).await;
            parts_ratios.push(two / run.keys_per_sec);
        }
    }
    // Each run's ratio against the ceiling measured right after it, in the same store.
    let ratios: Vec<f64> = rates
        .iter()
        .zip(&ceilings)
        .map(|(rate, ceiling)| rate * 2.0 / ceiling)
        .collect();
    let listed = |values: &[f64], digits: usize| {
        values
            .iter()
            .map(|v| format!("{v:.digits$}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "reconcile {keys} key-days x {per_key} ledger rows, runs: keys/s [{}], ceiling SELECTs/s [{}], ratios [{}]",
        listed(&rates, 0),
        listed(&ceilings, 0),
        listed(&ratios, 2),
    );
    let ratio = median(ratios);
    let (rate, ceiling, scan) = (median(rates), median(ceilings), median(scans));
    // Reconcile's time against its parts done alone: the day's scans, then the SELECTs
    // at the ceiling's rate (1.0: no cost of its own; below: the parts overlap).
    let parts = scan + (2 * keys) as f64 / ceiling;
    // When the store is what limits both (the store and the bench share 2 cores), the
    // scans cannot overlap the SELECTs for free: the ratio a reconcile with no cost of
    // its own would reach is the SELECTs' share of its parts.
    println!(
        "reconcile {keys} key-days: ratio against the ceiling if the scans and the SELECTs cost only their time alone, one after the other: {:.2}",
        ((2 * keys) as f64 / ceiling) / parts
    );
    // Rows read: per key its ledger rows, a key-index row, its minute rows and a day row.
    println!(
        "reconcile {keys} key-days: {:.1}s; alone: scans {scan:.1}s + SELECTs at the ceiling {:.1}s = {parts:.1}s, ratio {:.2}; rows read {:.0}/s",
        keys as f64 / rate,
        (2 * keys) as f64 / ceiling,
        parts / (keys as f64 / rate),
        (2 * per_key + 2) as f64 * rate,
    );
    println!(
        "reconcile {keys} key-days (populated in {:.1}s): {rate:.0} keys/s = {:.0} partition reads/s; \
         ceiling {ceiling:.0} SELECTs/s at concurrency {CONCURRENCY}; ratio {ratio:.2} (median of the runs' ratios); \
         peak RSS growth {:.1} MiB (median of {runs}; RSS with the store {:.0} MiB); \
         progress: {} calls, first estimate {} keys",
        populated.as_secs_f64(),
        rate * 2.0,
        median(growth),
        status_mib("VmRSS:"),
        estimate.1,
        estimate.0,
    );
    if !parts_ratios.is_empty() {
        println!(
            "reconcile {keys} key-days in two parts at once (--slice 0/2 and 1/2, a session each) vs the whole day: {:.2}x (median of {runs}; the store shares the same 2 cores)",
            median(parts_ratios)
        );
    }
    for line in lines {
        println!("  progress (last run): {line}");
    }
    match store {
        Store::Sim(server) => {
            drop(session);
            server.shutdown().await.expect("shutdown");
        }
        Store::Node(keyspace) => {
            session
                .query_unpaged(format!("DROP KEYSPACE {keyspace}"), ())
                .await
                .expect("drop keyspace");
        }
    }
}

fn main() {
    let env = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
    };
    let runs = env("RECONCILE_BENCH_RUNS").unwrap_or(3);
    let keys = env("RECONCILE_BENCH_KEYS").unwrap_or(100_000);
    let per_key = env("RECONCILE_BENCH_LEDGER_ROWS")
        .unwrap_or(10)
        .clamp(1, 1440);
    let parts = env("RECONCILE_BENCH_PARTS") != Some(0);
    let node = std::env::var("RECONCILE_BENCH_NODE")
        .ok()
        .filter(|n| !n.is_empty());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        measure(keys, per_key, runs, parts, node).await;
    });
}
