//! The key index: fed by the flush hook, one row per key per day per writer, retried
//! through failures until applied, listed by day.

use std::sync::Arc;
use std::time::Duration;

use countersink::bucket::Day;
use countersink::config::ConsistencyLevel;
use countersink::engine::Engine;
use countersink::flush::Flusher;
use countersink::ops::keyindex::{self, KeyIndex};
use countersink::sink::cql::CqlSink;
use countersink::telemetry::OperationsMetrics;

use crate::common::{T0, config, start_cqlsim};

/// 50 keys on one day and 10 of them again the next day (T0 is two minutes before
/// midnight). Every third insert into the index times out without applying: the writer
/// retries (with a growing back-off) until each row is in, and the index lists exactly the keys of each day. A
/// second flush of the same keys writes nothing new to the index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_key_of_each_day_is_indexed_once_through_failures() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.key_index.enabled = true;
    let server = start_cqlsim(
        &mut config,
        "counts the store's requests per table and injects faults",
    )
    .await
    .into_sim();
    server.set_faults(vec![
        "write-timeout,applied=no,table=countersink.key_index,every=3"
            .parse()
            .unwrap(),
    ]);
    let engine = Arc::new(Engine::with_seed(&config, Some(1)).unwrap());
    let sink = CqlSink::connect(&config.store, engine.families())
        .await
        .unwrap();
    let session = sink.session().clone();
    let metrics = OperationsMetrics::default();
    let index = KeyIndex::new(&config, engine.families(), metrics.clone());
    index.set_session(session.clone());
    let mut flusher = Flusher::open(engine.clone(), Arc::new(sink), &config).unwrap();
    flusher.observe(Arc::new(index.clone()));
    let (stop, stopped) = tokio::sync::watch::channel(None);
    let task = tokio::spawn(index.clone().run(stopped));

    for round in 0..2 {
        for i in 0..50 {
            let page = format!("p{i:02}");
            engine
                .record("page.views", &[("page_id", page.as_str())][..], 1, T0, None)
                .unwrap();
        }
        for i in 0..10 {
            let page = format!("p{i:02}");
            engine
                .record(
                    "page.views",
                    &[("page_id", page.as_str())][..],
                    1,
                    T0 + 180,
                    None,
                )
                .unwrap();
        }
        engine
            .record("api.calls", &[("route", "/a")][..], 1, T0, None)
            .unwrap();
        flusher.flush_now().await;
        for _ in 0..200 {
            if index.pending() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            index.pending(),
            0,
            "round {round}: {:?} {:?}",
            server.stats().table("countersink", "key_index"),
            metrics
                .key_index_writes
                .with_label_values(&["retried"])
                .get()
        );
    }
    stop.send(Some(std::time::Instant::now() + Duration::from_secs(10)))
        .unwrap();
    task.await.unwrap();

    let day = Day((T0 / 86_400) as u32);
    let keys = keyindex::keys_of_day(&session, &config, "views", day, ConsistencyLevel::One)
        .await
        .unwrap();
    let expected: Vec<Vec<String>> = (0..50).map(|i| vec![format!("p{i:02}")]).collect();
    assert_eq!(keys, expected);
    let next = keyindex::keys_of_day(
        &session,
        &config,
        "views",
        Day(day.0 + 1),
        ConsistencyLevel::One,
    )
    .await
    .unwrap();
    assert_eq!(next, expected[..10]);
    let generic = keyindex::keys_of_day(&session, &config, "generic", day, ConsistencyLevel::One)
        .await
        .unwrap();
    assert_eq!(
        generic,
        [vec!["api.calls".to_string(), "route:/a".to_string()]]
    );

    let stats = server.stats().table("countersink", "key_index");
    assert_eq!(stats.writes_applied, 61, "each row applied once");
    assert_eq!(
        stats.write_requests, 91,
        "61 applied and 30 failed (every third) and sent again; the second flush sent nothing"
    );
    let retried = metrics
        .key_index_writes
        .with_label_values(&["retried"])
        .get();
    assert_eq!(retried, 30);
    assert_eq!(
        metrics
            .key_index_writes
            .with_label_values(&["applied"])
            .get(),
        61
    );
    server.shutdown().await.unwrap();
}

/// A store that takes the key index's PREPARE and holds the answer: the writer's drain
/// ends `drain_for` after the stop (not when the store answers, two minutes later), and
/// the rows it could not write are counted as dropped, none left pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_prepare_ends_the_drain_at_its_deadline_with_the_rows_counted() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.key_index.enabled = true;
    let server = start_cqlsim(&mut config, "holds PREPARE replies")
        .await
        .into_sim();
    let engine = Arc::new(Engine::with_seed(&config, Some(1)).unwrap());
    let sink = CqlSink::connect(&config.store, engine.families())
        .await
        .unwrap();
    let session = sink.session().clone();
    let metrics = OperationsMetrics::default();
    let index = KeyIndex::new(&config, engine.families(), metrics.clone());
    index.set_session(session.clone());
    let mut flusher = Flusher::open(engine.clone(), Arc::new(sink), &config).unwrap();
    flusher.observe(Arc::new(index.clone()));
    server.set_faults(vec![
        "delay,for=120s,op=prepare,table=countersink.key_index"
            .parse()
            .unwrap(),
    ]);
    for i in 0..5 {
        let page = format!("p{i}");
        engine
            .record("page.views", &[("page_id", page.as_str())][..], 1, T0, None)
            .unwrap();
    }
    flusher.flush_now().await;
    assert_eq!(index.pending(), 5);
    let (stop, stopped) = tokio::sync::watch::channel(None);
    let task = tokio::spawn(index.clone().run(stopped));
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.send(Some(std::time::Instant::now() + Duration::from_secs(1)))
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the drain ends at its deadline, not when PREPARE is answered")
        .unwrap();
    assert_eq!(index.pending(), 0);
    assert_eq!(
        metrics
            .key_index_writes
            .with_label_values(&["dropped"])
            .get(),
        5
    );
    server.clear_faults();
    server.shutdown().await.unwrap();
}
