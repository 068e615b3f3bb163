//! Exact-totals benchmarks (`cargo bench --bench exact`; not criterion: each run takes
//! seconds, the figures are medians of repeated runs, interleaved in the same run).
//!
//! 1. Flush throughput with the delta ledger on vs off: rows flushed per second into an
//!    in-process cqlsim through the real driver, the generic family with
//!    `generic.exact = true` and `false`, at 10k and 100k distinct rows (100 minutes per
//!    key; the ledger adds one regular row per minute row, batched per ledger partition).
//! 2. `reconcile` of one family-day: keys reconciled per second, beside cqlsim's ceiling
//!    for the single-partition SELECTs reconcile issues (two per key: the minute
//!    partition and the day partition), at the same concurrency.

use std::sync::Arc;
use std::time::Instant;

use countersink::bucket::Day;
use countersink::config::Config;
use countersink::engine::Engine;
use countersink::flush::Flusher;
use countersink::ops::reconcile::{self, Options};
use countersink::sink::cql::CqlSink;

#[path = "common/mod.rs"]
mod common;

use self::common::{median, store};

const NOW: i64 = 1_796_042_096;
const RATE_RUNS: usize = 7;
const CONCURRENCY: usize = 64;

fn exact_config(dir: &std::path::Path, exact: bool) -> Config {
    let mut config = Config::default();
    config.state.dir = dir.to_owned();
    config.generic.exact = exact;
    config
}

/// Feeds `rows` distinct rows: `rows / 100` keys, 100 minutes each.
fn feed(engine: &Engine, rows: usize, minutes: usize) {
    for i in 0..rows {
        let key = format!("k{}", i / minutes);
        let minute = (i % minutes) as i64;
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
}

/// Rows per second for one flush of `rows` distinct rows, ledger on or off.
async fn flush_rate(rows: usize, exact: bool) -> f64 {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let mut config = exact_config(dir.path(), exact);
    let server = store(&mut config).await;
    let engine = Arc::new(Engine::new(&config).expect("engine"));
    let sink = CqlSink::connect(&config.store, engine.families())
        .await
        .expect("sink");
    let mut flusher = Flusher::open(engine.clone(), Arc::new(sink), &config).expect("state");
    feed(&engine, rows, 100);
    let started = Instant::now();
    let report = flusher.flush_now().await;
    let elapsed = started.elapsed();
    assert_eq!(report.applied, report.writes, "{report:?}");
    assert_eq!(flusher.ledger().exact_ledger().held_rows, 0);
    server.shutdown().await.expect("shutdown");
    rows as f64 / elapsed.as_secs_f64()
}

/// Keys reconciled per second for a day of `keys` keys (one minute each), and cqlsim's
/// single-partition SELECTs per second at the same concurrency.
async fn reconcile_rate(keys: usize) -> (f64, f64, u64) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let mut config = exact_config(dir.path(), true);
    let server = store(&mut config).await;
    let engine = Arc::new(Engine::new(&config).expect("engine"));
    let sink = CqlSink::connect(&config.store, engine.families())
        .await
        .expect("sink");
    let session = sink.session().clone();
    let mut flusher = Flusher::open(engine.clone(), Arc::new(sink), &config).expect("state");
    feed(&engine, keys, 1);
    flusher.flush_now().await;
    let families = countersink::family::Families::from_config(&config).expect("families");
    let options = Options {
        day: Day(((NOW - 6000) / 86_400) as u32),
        tags: Vec::new(),
        threshold: 0.0,
        now_unix_secs: NOW + 10 * 86_400,
        concurrency: CONCURRENCY,
    };
    let started = Instant::now();
    let report = reconcile::reconcile(
        &session,
        &config,
        families.by_name("generic").expect("generic"),
        &options,
        &|_, _| {},
    )
    .await
    .expect("reconcile");
    let rate = keys as f64 / started.elapsed().as_secs_f64();
    assert_eq!(report.summary.keys, keys);
    assert!(report.passes(), "{:?}", report.summary);
    let ledger_rows = report.summary.ledger_rows;

    // The ceiling: the same partition SELECTs, prepared, at the same concurrency.
    let select = session
        .prepare("SELECT minute, value FROM countersink.counts_by_minute WHERE name = ? AND tags = ? AND day = ?")
        .await
        .expect("prepare");
    let requests = keys * 2;
    let day = scylla::value::CqlDate(((1_i64 << 31) + (NOW - 6000) / 86_400) as u32);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..CONCURRENCY {
        let (session, select) = (session.clone(), select.clone());
        tasks.spawn(async move {
            for i in (worker..requests).step_by(CONCURRENCY) {
                session
                    .execute_unpaged(&select, ("bench", format!("key:k{}", i % keys), day))
                    .await
                    .expect("select");
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let ceiling = requests as f64 / started.elapsed().as_secs_f64();
    server.shutdown().await.expect("shutdown");
    (rate, ceiling, ledger_rows)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        for rows in [10_000, 100_000] {
            let runs = if rows > 10_000 { 3 } else { RATE_RUNS };
            let (mut on, mut off) = (Vec::new(), Vec::new());
            for _ in 0..runs {
                off.push(flush_rate(rows, false).await);
                on.push(flush_rate(rows, true).await);
            }
            let (on, off) = (median(on), median(off));
            println!(
                "flush {rows} rows: ledger off {off:.0} rows/s, ledger on {on:.0} rows/s, ratio {:.2} (median of {runs})",
                on / off
            );
        }
        let keys = 20_000;
        let mut rates = Vec::new();
        let mut ceilings = Vec::new();
        let mut ledger_rows = 0;
        for _ in 0..3 {
            let (rate, ceiling, rows) = reconcile_rate(keys).await;
            rates.push(rate);
            ceilings.push(ceiling);
            ledger_rows = rows;
        }
        let (rate, ceiling) = (median(rates), median(ceilings));
        println!(
            "reconcile {keys} keys ({ledger_rows} ledger rows): {rate:.0} keys/s = {:.0} partition reads/s; cqlsim SELECT ceiling {ceiling:.0}/s at concurrency {CONCURRENCY}; ratio {:.2} (median of 3)",
            rate * 2.0,
            rate * 2.0 / ceiling
        );
    });
}
