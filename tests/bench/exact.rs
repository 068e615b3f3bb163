//! Exact-totals benchmarks (`cargo bench --bench exact`; not criterion: each run takes
//! seconds, the figures are medians of repeated runs, interleaved in the same run).
//!
//! 1. Flush throughput with the delta ledger on vs off: rows flushed per second into an
//!    in-process cqlsim through the real driver, the generic family with
//!    `generic.exact = true` and `false`, at 10k and 100k distinct rows, in two shapes
//!    (the ledger adds one regular row per minute row, batched per ledger partition):
//!    - 100 minutes per key, a backlog (after an outage, or a replayed spill): the
//!      counter writes batch best here (16 minute rows of one key per request, one day
//!      row per key), so the ledger's share of the work is the largest;
//!    - one minute per key, the steady state of a flush every few seconds: each row is
//!      a minute write and a day write of its own, and the ledger's rows still go 128
//!      to a request.
//!
//! `reconcile`'s benchmark is `cargo bench --bench reconcile`.
//!
//! For a profile of one side alone, `COUNTERSINK_BENCH_SIDE=on` (or `off`) runs only the
//! flushes with the ledger on (or off) and prints their rates, no ratio.

use std::sync::Arc;
use std::time::Instant;

use countersink::config::Config;
use countersink::engine::Engine;
use countersink::flush::Flusher;
use countersink::sink::cql::CqlSink;

#[path = "common/mod.rs"]
mod common;

use self::common::{median, store};

const NOW: i64 = 1_796_042_096;
const RATE_RUNS: usize = 7;

fn exact_config(dir: &std::path::Path, exact: bool) -> Config {
    let mut config = Config::default();
    config.state.dir = dir.to_owned();
    config.generic.exact = exact;
    config
}

/// "1 minute per key", "100 minutes per key".
fn per_key(minutes: usize) -> String {
    match minutes {
        1 => "1 minute per key".into(),
        n => format!("{n} minutes per key"),
    }
}

/// Feeds `rows` distinct rows: `rows / minutes` keys, `minutes` minutes each.
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

/// The flushes measured: (distinct rows, minutes per key).
const SHAPES: [(usize, usize); 4] = [(10_000, 100), (100_000, 100), (10_000, 1), (100_000, 1)];

/// Rows per second for one flush of `rows` distinct rows (`minutes` per key), ledger on
/// or off.
async fn flush_rate(rows: usize, minutes: usize, exact: bool) -> f64 {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let mut config = exact_config(dir.path(), exact);
    let server = store(&mut config).await;
    let engine = Arc::new(Engine::new(&config).expect("engine"));
    let sink = CqlSink::connect(&config.store, engine.families())
        .await
        .expect("sink");
    let mut flusher = Flusher::open(engine.clone(), Arc::new(sink), &config).expect("state");
    feed(&engine, rows, minutes);
    let started = Instant::now();
    let report = flusher.flush_now().await;
    let elapsed = started.elapsed();
    assert_eq!(report.applied, report.writes, "{report:?}");
    assert_eq!(flusher.ledger().exact_ledger().held_rows, 0);
    server.shutdown().await.expect("shutdown");
    rows as f64 / elapsed.as_secs_f64()
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let side = std::env::var("COUNTERSINK_BENCH_SIDE").ok();
        if let Some(side) = side.as_deref() {
            let exact = side == "on";
            for (rows, minutes) in SHAPES {
                let mut rates = Vec::new();
                for _ in 0..RATE_RUNS {
                    rates.push(flush_rate(rows, minutes, exact).await);
                }
                println!(
                    "flush {rows} rows ({}), ledger {side}: {:.0} rows/s (median of {RATE_RUNS})",
                    per_key(minutes),
                    median(rates)
                );
            }
            return;
        }
        for (rows, minutes) in SHAPES {
            let runs = if rows > 10_000 { 3 } else { RATE_RUNS };
            let (mut on, mut off) = (Vec::new(), Vec::new());
            for _ in 0..runs {
                off.push(flush_rate(rows, minutes, false).await);
                on.push(flush_rate(rows, minutes, true).await);
            }
            let (on, off) = (median(on), median(off));
            println!(
                "flush {rows} rows ({}): ledger off {off:.0} rows/s, ledger on {on:.0} rows/s, ratio {:.2} (median of {runs})",
                per_key(minutes),
                on / off
            );
        }
    });
}
