//! The `metrics` facade recorder (feature `metrics-facade`) end to end: `counter!` calls
//! from several threads through a running `Recorder` into cqlsim, read back through the
//! `scylla` driver; what is counted instead of written; the global installation.

use std::collections::BTreeMap;
use std::sync::Arc;

use countersink::Recorder;
use countersink::facade::{self, Builder, InstallError};
use countersink::line::{IgnoredKind, InvalidReason};
use countersink::vocabulary::DropReason;
use metrics::{counter, gauge, histogram};
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::value::Counter;

use crate::common::{config, start_store};

/// A plain driver session on the store, for reading back.
async fn session(store: &cqlsim::Server) -> Session {
    SessionBuilder::new()
        .known_node_addr(store.local_addr())
        .build()
        .await
        .expect("session")
}

/// Every `(key, value)` of a table, summed per key (a key may have several minutes).
async fn sums(session: &Session, select: &str) -> BTreeMap<String, i64> {
    let rows = session
        .query_unpaged(select, ())
        .await
        .expect("select")
        .into_rows_result()
        .expect("rows");
    let mut sums = BTreeMap::new();
    for row in rows
        .rows::<(String, Option<Counter>)>()
        .expect("typed rows")
    {
        let (key, value) = row.expect("row");
        *sums.entry(key).or_insert(0) += value.map_or(0, |c| c.0);
    }
    sums
}

/// 100k increments from 4 threads over 1k label sets, each with a delta of its own, with
/// gauges and histograms between them: every sum lands exactly in the minute table and
/// in the day table, and nothing else is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_increments_from_four_threads_land_exactly_in_both_tables() {
    const THREADS: usize = 4;
    const PER_THREAD: usize = 25_000;
    const SETS: usize = 1_000;
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    let store = start_store(&mut config).await;
    let recorder = Recorder::connect(&config).await.expect("recorder");
    let facade = Arc::new(Builder::new().build(recorder.engine()));

    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let facade = facade.clone();
            std::thread::spawn(move || {
                metrics::with_local_recorder(&*facade, || {
                    for i in 0..PER_THREAD {
                        let set = (i * 7 + t) % SETS;
                        counter!(
                            "api.requests",
                            "route" => format!("/r{}", set % 100),
                            "shard" => (set / 100).to_string()
                        )
                        .increment((set % 5 + 1) as u64);
                        if i % 10 == 0 {
                            gauge!("api.in_flight").set(i as f64);
                            histogram!("api.latency", "route" => "/r0").record(0.5);
                        }
                    }
                })
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("thread");
    }
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    for t in 0..THREADS {
        for i in 0..PER_THREAD {
            let set = (i * 7 + t) % SETS;
            let tags = format!("route:/r{},shard:{}", set % 100, set / 100);
            *expected.entry(tags).or_insert(0) += (set % 5 + 1) as i64;
        }
    }
    assert_eq!(expected.len(), SETS);
    assert_eq!(facade.registered_keys(), SETS);

    recorder.shutdown().await.expect("final flush");
    let session = session(&store).await;
    for table in ["counts_by_minute", "counts_by_day"] {
        let written = sums(
            &session,
            &format!("SELECT tags, value FROM countersink.{table}"),
        )
        .await;
        assert_eq!(written, expected, "{table}");
        let names = sums(
            &session,
            &format!("SELECT name, value FROM countersink.{table}"),
        )
        .await;
        assert_eq!(
            names.keys().collect::<Vec<_>>(),
            ["api.requests"],
            "{table}"
        );
    }
    let counters = recorder.engine().aggregator().counters();
    let updates = (THREADS * PER_THREAD / 10) as u64;
    assert_eq!(counters.ignored_for(IgnoredKind::Gauge), updates);
    assert_eq!(counters.ignored_for(IgnoredKind::Histogram), updates);
    assert_eq!(counters.accepted, (THREADS * PER_THREAD) as u64);
    let accounting = recorder.accounting().await;
    assert!(accounting.is_balanced(), "{accounting:?}");
    store.shutdown().await.unwrap();
}

/// A configured family keyed by a label takes the counter by that label's value; the
/// same counter without the label is counted invalid (`missing_key_tag`) and written
/// nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_family_takes_the_counter_by_its_label_value() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    let store = start_store(&mut config).await;
    let recorder = Recorder::connect(&config).await.expect("recorder");
    let facade = Builder::new().build(recorder.engine());
    metrics::with_local_recorder(&facade, || {
        for page in ["home", "about", "home"] {
            counter!("page.views", "page_id" => page, "env" => "prod").increment(2);
            counter!("page.bytes", "page_id" => page).increment(1000);
        }
        counter!("page.views", "env" => "prod").increment(5);
    });
    recorder.shutdown().await.expect("final flush");

    let session = session(&store).await;
    for table in ["views_by_minute", "views_by_day"] {
        let views = sums(
            &session,
            &format!("SELECT page_id, views FROM metrics.{table}"),
        )
        .await;
        assert_eq!(
            views,
            BTreeMap::from([("about".to_string(), 2), ("home".to_string(), 4)]),
            "{table}"
        );
        let bytes = sums(
            &session,
            &format!("SELECT page_id, bytes FROM metrics.{table}"),
        )
        .await;
        assert_eq!(bytes.values().sum::<i64>(), 3000, "{table}");
    }
    let generic = sums(
        &session,
        "SELECT name, value FROM countersink.counts_by_day",
    )
    .await;
    assert!(generic.is_empty(), "{generic:?}");
    let counters = recorder.engine().aggregator().counters();
    assert_eq!(counters.invalid_for(InvalidReason::MissingKeyTag), 1);
    assert_eq!(counters.accepted, 6);
    store.shutdown().await.unwrap();
}

/// `install` sets the process's recorder once: `counter!` without a local recorder lands,
/// a second installation is refused, `shutdown()` runs the final flush, and later
/// increments are counted as dropped after shutdown. (The only test in this binary that
/// installs a global recorder.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_once_then_shutdown_flushes() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    let store = start_store(&mut config).await;
    let handle = facade::install(&config).await.expect("installed");
    for _ in 0..10 {
        counter!("installed.total", "via" => "global").increment(3);
    }
    let second_dir = tempfile::tempdir().unwrap();
    let mut second = config.clone();
    second.state.dir = second_dir.path().to_owned();
    assert!(matches!(
        facade::install(&second).await,
        Err(InstallError::AlreadyInstalled)
    ));

    let report = handle.shutdown().await.expect("final flush");
    assert!(report.applied > 0, "{report:?}");
    counter!("installed.total", "via" => "global").increment(1);
    let session = session(&store).await;
    let written = sums(
        &session,
        "SELECT tags, value FROM countersink.counts_by_day",
    )
    .await;
    assert_eq!(written, BTreeMap::from([("via:global".to_string(), 30)]));
    let counters = handle.recorder().engine().aggregator().counters();
    assert_eq!(counters.dropped_for(DropReason::AfterShutdown), 1);
    store.shutdown().await.unwrap();
}
