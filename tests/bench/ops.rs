//! Operator-feature benchmarks (run with `cargo bench --bench ops`; not criterion: each
//! run takes seconds, figures are medians of repeated runs, given beside a baseline
//! measured in the same run).
//!
//! 1. The key index on the flush path: one flush of 20k distinct rows (2,000 keys x 10
//!    minutes) into an in-process cqlsim, with and without the key index installed (its
//!    inserts run beside the flush, against the same store). Ratio with / without.
//! 2. A leaderboard run over 5,000 keys (keys read per second, each key one partition
//!    read), beside the store's ceiling for single-partition SELECTs at the same
//!    concurrency.
//! 3. A migration of 2,000 keys, one minute and one day partition each (chunks per
//!    second: each chunk is a read of the source, a read of the target, two job-table
//!    upserts and one counter write, in sequence), at `--concurrency` 16 (the default)
//!    and 64, beside the store's ceiling for single-row counter UPDATEs at concurrency 16.

use std::sync::Arc;
use std::time::{Duration, Instant};

use countersink::bucket::Day;
use countersink::config::{Config, ConsistencyLevel, FamilyConfig, LeaderboardConfig};
use countersink::engine::Engine;
use countersink::flush::Flusher;
use countersink::ops::keyindex::KeyIndex;
use countersink::ops::leaderboard::Leaderboards;
use countersink::ops::migrate::{Migration, Options};
use countersink::sink::cql::{CqlSink, session};
use countersink::telemetry::OperationsMetrics;
use futures_util::StreamExt;
use scylla::value::Counter;

#[path = "common/mod.rs"]
mod common;

use self::common::{median, store};

/// 2026-11-20T12:00Z.
const NOW: i64 = 1_795_132_800 + 12 * 3600;
const RUNS: usize = 5;

fn config(dir: &std::path::Path) -> Config {
    let mut config = Config::default();
    config.state.dir = dir.to_owned();
    config.generic.enabled = false;
    config.families.push(FamilyConfig {
        name: "views".into(),
        minute_table: "metrics.views_by_minute".into(),
        day_table: "metrics.views_by_day".into(),
        key: vec!["page_id".into()],
        columns: [("page.views".to_string(), "views".to_string())].into(),
        ..FamilyConfig::default()
    });
    config.key_index.enabled = true;
    config
}

/// Seconds for one flush of `keys` x 10 rows, with the key index installed or not: the
/// flush itself, and until the index has written every key.
async fn flush_seconds(keys: usize, with_index: bool) -> (f64, f64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = config(dir.path());
    let server = store(&mut config).await;
    let engine = Arc::new(Engine::new(&config).expect("engine"));
    let sink = CqlSink::connect(&config.store, engine.families())
        .await
        .expect("sink");
    let session = sink.session().clone();
    let mut flusher = Flusher::open(engine.clone(), Arc::new(sink), &config).expect("state");
    let index = KeyIndex::new(&config, engine.families(), OperationsMetrics::default());
    let (_stop, stopped) = tokio::sync::watch::channel(None);
    if with_index {
        index.set_session(session);
        flusher.observe(Arc::new(index.clone()));
        tokio::spawn(index.clone().run(stopped));
    }
    for k in 0..keys {
        let page = format!("p{k}");
        for minute in 0..10 {
            engine
                .record(
                    "page.views",
                    &[("page_id", page.as_str())][..],
                    1,
                    NOW + minute * 60,
                    None,
                )
                .expect("record");
        }
    }
    let started = Instant::now();
    let report = flusher.flush_now().await;
    let flushed = started.elapsed().as_secs_f64();
    assert_eq!(report.applied, report.writes);
    while index.pending() > 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let indexed = started.elapsed().as_secs_f64();
    server.shutdown().await.expect("shutdown");
    (flushed, indexed)
}

/// Keys per second of one leaderboard run over `keys` keys, and the store's ceiling of
/// single-partition SELECTs at concurrency 32 (the job's read concurrency), same store.
async fn leaderboard_rates(keys: usize) -> (f64, f64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = config(dir.path());
    config.leaderboards.push(LeaderboardConfig {
        name: "top".into(),
        family: "views".into(),
        column: "views".into(),
        ..LeaderboardConfig::default()
    });
    let server = store(&mut config).await;
    let day = Day((NOW / 86_400) as u32);
    for k in 0..keys {
        server
            .execute(None, &format!("UPDATE metrics.views_by_day SET views = views + {} WHERE page_id = 'p{k}' AND month = '2026-11' AND day = '2026-11-20'", k % 777 + 1))
            .expect("update");
        let key = format!("[\"p{k}\"]");
        let bucket = countersink::ops::keyindex::bucket_of(&key, 16);
        server
            .execute(None, &format!("INSERT INTO countersink.key_index (family, day, bucket, key) VALUES ('views', '2026-11-20', {bucket}, '{key}')"))
            .expect("insert");
    }
    let session = Arc::new(session::connect(&config.store).await.expect("session"));
    let jobs =
        Leaderboards::new(&config, session.clone(), OperationsMetrics::default()).expect("jobs");
    let started = Instant::now();
    let report = jobs.run(&config.leaderboards[0], day).await.expect("run");
    let run_rate = report.keys as f64 / started.elapsed().as_secs_f64();
    let mut select = session
        .prepare("SELECT day, views FROM metrics.views_by_day WHERE page_id = ? AND month = ?")
        .await
        .expect("prepare");
    select.set_consistency(session::consistency(ConsistencyLevel::LocalQuorum));
    let started = Instant::now();
    let select = &select;
    let session = &session;
    futures_util::stream::iter(0..keys)
        .map(|k| async move {
            session
                .execute_unpaged(select, (format!("p{k}"), "2026-11"))
                .await
                .expect("select");
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    let ceiling = keys as f64 / started.elapsed().as_secs_f64();
    server.shutdown().await.expect("shutdown");
    (run_rate, ceiling)
}

/// Chunks per second of a migration of `keys` minute partitions (and as many day
/// partitions), and the target's ceiling of single-row counter UPDATEs at concurrency 16.
async fn migrate_rates(keys: usize, concurrency: usize) -> (f64, f64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut source = config(&dir.path().join("a"));
    source.key_index.enabled = false;
    let source_server = store(&mut source).await;
    let mut target = source.clone();
    target.families[0].minute_table = "metrics.v2_by_minute".into();
    target.families[0].day_table = "metrics.v2_by_day".into();
    let target_server = store(&mut target).await;
    for k in 0..keys {
        source_server
            .execute(None, &format!("UPDATE metrics.views_by_minute SET views = views + 3 WHERE page_id = 'p{k}' AND day = '2025-11-20' AND minute = 7"))
            .expect("update");
        source_server
            .execute(None, &format!("UPDATE metrics.views_by_day SET views = views + 3 WHERE page_id = 'p{k}' AND month = '2025-11' AND day = '2025-11-20'"))
            .expect("update");
    }
    let options = Options {
        family: "views".into(),
        day_from: None,
        day_to: None,
        job: Some("bench".into()),
        allow_live: true,
        quiet_period: Duration::ZERO,
        settle: Duration::ZERO,
        concurrency,
        consistency: ConsistencyLevel::LocalQuorum,
    };
    let migration = Migration::open(source.clone(), target.clone(), options)
        .await
        .expect("open");
    let started = Instant::now();
    let report = migration.run(&|_| {}).await.expect("run");
    let rate = report.counts.applied as f64 / started.elapsed().as_secs_f64();
    assert_eq!(report.counts.applied as usize, 2 * keys);
    let session = session::connect(&target.store).await.expect("session");
    let mut update = session
        .prepare("UPDATE metrics.v2_by_minute SET views = views + ? WHERE page_id = ? AND day = '2025-11-21' AND minute = 1")
        .await
        .expect("prepare");
    update.set_is_idempotent(false);
    let started = Instant::now();
    let (update, session) = (&update, &session);
    futures_util::stream::iter(0..keys)
        .map(|k| async move {
            session
                .execute_unpaged(update, (Counter(1), format!("p{k}")))
                .await
                .expect("update");
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    let ceiling = keys as f64 / started.elapsed().as_secs_f64();
    source_server.shutdown().await.expect("shutdown");
    target_server.shutdown().await.expect("shutdown");
    (rate, ceiling)
}

#[tokio::main]
async fn main() {
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for run in 0..RUNS {
        // Alternate which goes first, so a warming machine favours neither.
        if run % 2 == 0 {
            without.push(flush_seconds(2_000, false).await);
            with.push(flush_seconds(2_000, true).await);
        } else {
            with.push(flush_seconds(2_000, true).await);
            without.push(flush_seconds(2_000, false).await);
        }
    }
    let flush = |runs: &[(f64, f64)]| median(runs.iter().map(|r| r.0).collect());
    let indexed = |runs: &[(f64, f64)]| median(runs.iter().map(|r| r.1).collect());
    println!(
        "flush of 20k rows (2,000 keys): {:.3} s without the key index; with it {:.3} s ({:.2}x), {:.3} s until every key is indexed ({:.2}x) (medians of {RUNS})",
        flush(&without),
        flush(&with),
        flush(&with) / flush(&without),
        indexed(&with),
        indexed(&with) / flush(&without)
    );
    let (mut runs, mut ceilings) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let (run, ceiling) = leaderboard_rates(5_000).await;
        runs.push(run);
        ceilings.push(ceiling);
    }
    let (run, ceiling) = (median(runs), median(ceilings));
    println!(
        "leaderboard run over 5,000 keys: {run:.0} keys/s; the store's SELECT ceiling at concurrency 32: {ceiling:.0}/s: {:.2}x (median of {RUNS})",
        run / ceiling
    );
    for concurrency in [16, 64] {
        let (mut runs, mut ceilings) = (Vec::new(), Vec::new());
        for _ in 0..RUNS {
            let (run, ceiling) = migrate_rates(2_000, concurrency).await;
            runs.push(run);
            ceilings.push(ceiling);
        }
        let (run, ceiling) = (median(runs), median(ceilings));
        println!(
            "migration of 4,000 chunks, --concurrency {concurrency}: {run:.0} chunks/s; the store's counter UPDATE ceiling at concurrency 16: {ceiling:.0}/s: {:.2}x (median of {RUNS})",
            run / ceiling
        );
    }
}
