//! `reconcile` benchmark (`cargo bench --bench reconcile --features dev`; not criterion:
//! one run takes seconds, the figures are medians of runs interleaved in the same
//! process). `RECONCILE_BENCH_KEYS` sets the day's keys (default 1 000 000, after a
//! 250 000 one for the memory comparison); `RECONCILE_BENCH_RUNS` the runs (default 3).
//!
//! The store: an in-process cqlsim holding one family-day of the generic family with
//! `generic.exact = true` and the key index on: per key one ledger row, one key-index
//! row, one minute counter row and one day counter row, exactly the rows a flush writes
//! (same tables, buckets, key text). They are written through cqlsim's in-process API in
//! unlogged batches (a flush of a million keys would take minutes and measures the
//! flush, not reconcile); the run then checks every key comes out `ok` with the exact
//! total fed, so a row in the wrong place would fail the benchmark.
//!
//! Per run, in the same process and store:
//! 1. `reconcile` of the day: keys per second, partition reads per second (two per key:
//!    the minute partition and the day partition), and its memory: peak RSS during the
//!    run above the RSS before it (`/proc/self/clear_refs` resets the peak), with the
//!    store's rows already resident.
//! 2. The ceiling: the same two prepared SELECTs per key, the same texts, at the same
//!    concurrency, through the same driver session, rows deserialized, nothing else.
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

/// Writes the day's rows for `keys` keys; returns the exact total.
fn populate(sim: &cqlsim::Handle, config: &Config, keys: usize) -> i128 {
    let families = Families::from_config(config).expect("families");
    let generic = families.by_name("generic").expect("generic");
    let day = Day(DAY);
    let date = format_date(day.date());
    let month = &date[..7];
    let ks = config.exact_keyspace();
    let index = index_table(config);
    let (ledger_buckets, index_buckets) = (config.exact.buckets, config.key_index.buckets);
    let mut total = 0_i128;
    for start in (0..keys).step_by(BATCH) {
        let (mut regular, mut counters) = (
            String::from("BEGIN UNLOGGED BATCH\n"),
            String::from("BEGIN COUNTER BATCH\n"),
        );
        for i in start..(start + BATCH).min(keys) {
            let (tags, json) = key_text(i);
            let value = 1 + (i % 7) as i64;
            let minute = (i % 1440) as i16;
            total += i128::from(value);
            regular.push_str(&format!(
                "INSERT INTO {ks}.delta_ledger (family, day, bucket, key, minute, writer, incarnation, flush_seq, part, deltas) VALUES ('generic', '{date}', {}, '{json}', {minute}, 'bench', 1, 1, 0, {{'value': {value}}});\n",
                key_bucket(&json, ledger_buckets)
            ));
            regular.push_str(&format!(
                "INSERT INTO {index} (family, day, bucket, key) VALUES ('generic', '{date}', {}, '{json}');\n",
                key_bucket(&json, index_buckets)
            ));
            counters.push_str(&format!(
                "UPDATE {} SET value = value + {value} WHERE name = 'bench' AND tags = '{tags}' AND day = '{date}' AND minute = {minute};\n",
                generic.minute_table
            ));
            counters.push_str(&format!(
                "UPDATE {} SET value = value + {value} WHERE name = 'bench' AND tags = '{tags}' AND month = '{month}' AND day = '{date}';\n",
                generic.day_table
            ));
        }
        regular.push_str("APPLY BATCH");
        counters.push_str("APPLY BATCH");
        sim.execute(None, &regular).expect("ledger and index rows");
        sim.execute(None, &counters).expect("counter rows");
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
async fn ceiling(session: &Arc<Session>, config: &Config, keys: usize) -> f64 {
    let families = Families::from_config(config).expect("families");
    let generic = families.by_name("generic").expect("generic");
    let consistency = session::consistency(config.exact.consistency);
    let mut prepared = Vec::new();
    for kind in Granularity::ALL {
        let text = select_partition(&TableLayout::of(generic, kind), &["value"]);
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
                assert_eq!(rows, 2);
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

async fn measure(keys: usize, runs: usize) {
    let mut config = bench_config();
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
    let started = Instant::now();
    let exact_total = populate(server.handle(), &config, keys);
    let populated = started.elapsed();
    let session = Arc::new(session::connect(&config.store).await.expect("session"));
    let (mut rates, mut ceilings, mut growth) = (Vec::new(), Vec::new(), Vec::new());
    let mut scans = Vec::new();
    let mut parts_ratios = Vec::new();
    let mut estimate = (0, 0);
    let mut lines = Vec::new();
    for _ in 0..runs {
        let run = reconcile_run(&session, &config, keys, exact_total).await;
        rates.push(run.keys_per_sec);
        growth.push(run.peak_growth_mib);
        estimate = (run.first_estimate, run.progress_calls);
        lines = run.progress_lines;
        ceilings.push(ceiling(&session, &config, keys).await);
        scans.push(scan_secs(&session, &config).await);
        let two = two_parts_run(&config, keys, exact_total).await;
        parts_ratios.push(two / run.keys_per_sec);
    }
    let (rate, ceiling, scan) = (median(rates), median(ceilings), median(scans));
    // Reconcile's time against its parts done alone: the day's scans, then the SELECTs
    // at the ceiling's rate (1.0: no cost of its own; below: the parts overlap).
    let parts = scan + (2 * keys) as f64 / ceiling;
    // Rows read: per key a ledger row, a key-index row, a minute row and a day row.
    println!(
        "reconcile {keys} key-days: {:.1}s; alone: scans {scan:.1}s + SELECTs at the ceiling {:.1}s = {parts:.1}s, ratio {:.2}; rows read {:.0}/s",
        keys as f64 / rate,
        (2 * keys) as f64 / ceiling,
        parts / (keys as f64 / rate),
        4.0 * rate,
    );
    println!(
        "reconcile {keys} key-days (populated in {:.1}s): {rate:.0} keys/s = {:.0} partition reads/s; \
         ceiling {ceiling:.0} SELECTs/s at concurrency {CONCURRENCY}; ratio {:.2}; \
         peak RSS growth {:.1} MiB (median of {runs}; RSS with the store {:.0} MiB); \
         progress: {} calls, first estimate {} keys",
        populated.as_secs_f64(),
        rate * 2.0,
        rate * 2.0 / ceiling,
        median(growth),
        status_mib("VmRSS:"),
        estimate.1,
        estimate.0,
    );
    println!(
        "reconcile {keys} key-days in two parts at once (--slice 0/2 and 1/2, a session each) vs the whole day: {:.2}x (median of {runs}; the store shares the same 2 cores)",
        median(parts_ratios)
    );
    for line in lines {
        println!("  progress (last run): {line}");
    }
    drop(session);
    server.shutdown().await.expect("shutdown");
}

fn main() {
    let env = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
    };
    let runs = env("RECONCILE_BENCH_RUNS").unwrap_or(3);
    let sizes = match env("RECONCILE_BENCH_KEYS") {
        Some(keys) => vec![keys],
        None => vec![250_000, 1_000_000],
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        for keys in sizes {
            measure(keys, runs).await;
        }
    });
}
