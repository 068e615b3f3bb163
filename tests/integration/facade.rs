//! The `metrics` facade recorder (feature `metrics-facade`) end to end: `counter!` calls
//! from several threads through a running `Recorder` into the test store, read back through the
//! `scylla` driver; what is counted instead of written; the global installation.

use std::collections::BTreeMap;
use std::sync::Arc;

use countersink::Recorder;
use countersink::facade::{self, Builder, InstallError};
use countersink::line::{IgnoredKind, InvalidReason};
use countersink::vocabulary::DropReason;
use metrics::{counter, gauge, histogram};

use crate::common::{Store, config, start_store};

/// Every `key` of a table (as configured) with its `value`s summed (a key may have several
/// minutes), read back through the driver.
async fn sums(store: &Store, table: &str, key: &str, value: &str) -> BTreeMap<String, i64> {
    let rows = store
        .select(&format!(
            "SELECT {key}, {value} FROM {}",
            store.table(table)
        ))
        .await;
    let mut sums = BTreeMap::new();
    for i in 0..rows.len() {
        let key = rows.text(i, key).expect("a text key").to_owned();
        *sums.entry(key).or_insert(0) += rows.get_i64(i, value).unwrap_or(0);
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
    for table in ["countersink.counts_by_minute", "countersink.counts_by_day"] {
        let written = sums(&store, table, "tags", "value").await;
        assert_eq!(written, expected, "{table}");
        let names = sums(&store, table, "name", "value").await;
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
    store.shutdown().await;
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

    for table in ["metrics.views_by_minute", "metrics.views_by_day"] {
        let views = sums(&store, table, "page_id", "views").await;
        assert_eq!(
            views,
            BTreeMap::from([("about".to_string(), 2), ("home".to_string(), 4)]),
            "{table}"
        );
        let bytes = sums(&store, table, "page_id", "bytes").await;
        assert_eq!(bytes.values().sum::<i64>(), 3000, "{table}");
    }
    let generic = sums(&store, "countersink.counts_by_day", "name", "value").await;
    assert!(generic.is_empty(), "{generic:?}");
    let counters = recorder.engine().aggregator().counters();
    assert_eq!(counters.invalid_for(InvalidReason::MissingKeyTag), 1);
    assert_eq!(counters.accepted, 6);
    store.shutdown().await;
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
    let written = sums(&store, "countersink.counts_by_day", "tags", "value").await;
    assert_eq!(written, BTreeMap::from([("via:global".to_string(), 30)]));
    let counters = handle.recorder().engine().aggregator().counters();
    assert_eq!(counters.dropped_for(DropReason::AfterShutdown), 1);
    store.shutdown().await;
}
