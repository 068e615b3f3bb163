//! Stops and starts: the shutdown deadline (one for the running and the final flush), the
//! recorder's shutdown and drop, unclean stops exported and recorded, and a directory
//! holding the wrapper's unfinished flush.

use super::*;

/// A sink that never answers: every request stays in flight.
struct Hang;

impl Sink for Hang {
    async fn send(&self, _: crate::sink::Request<'_>) -> Outcome {
        std::future::pending().await
    }
}

#[tokio::test]
async fn shutdown_deadline_logs_in_flight_as_unknown_and_spills_the_rest_then_replays() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.flush.max_in_flight = 2;
    {
        let h = harness(&config, Hang);
        for i in 0..10 {
            let i = i.to_string();
            h.engine
                .record("hits", &[("i", i.as_str())][..], 1, T0, None)
                .unwrap();
        }
        let engine = h.engine.clone();
        let ledger = h.ledger.clone();
        let report = h.flusher.finish().await;
        assert_eq!((report.writes, report.unknown, report.spilled), (20, 2, 18));
        let a = Accounting::read(&engine, &ledger);
        assert!(a.is_balanced(), "{a:?}");
        assert_eq!(a.minute.unknown + a.day.unknown, 2);
        assert_eq!(a.minute.spilled + a.day.spilled, 18);
        assert_eq!(a.minute.pending + a.day.pending, 0);
        assert_eq!(
            engine.record("hits", &[][..], 1, T0, None),
            Err(crate::engine::RecordError::Dropped(
                crate::vocabulary::DropReason::AfterShutdown
            ))
        );
        let unknown = read_log(dir.path(), "unknown.jsonl");
        assert!(
            unknown
                .iter()
                .all(|r| r.error.as_ref().unwrap().kind == "cancelled_at_deadline")
        );
    }
    // The next start replays the 18 spilled rows and applies them; nothing else.
    let sink = MemorySink::new();
    let mut h = harness(&config, sink.clone());
    h.flusher.flush_now().await;
    assert_eq!(
        h.ledger.settled(Granularity::Minute).replayed
            + h.ledger.settled(Granularity::Day).replayed,
        18
    );
    assert_eq!(
        sink.total(Granularity::Minute) + sink.total(Granularity::Day),
        18
    );
    let a = accounting(&h);
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(a.minute.applied + a.day.applied, 18);
    drop(h);
    let mut h = harness(&config, MemorySink::new());
    h.flusher.flush_now().await;
    assert_eq!(
        h.ledger.settled(Granularity::Minute).replayed,
        0,
        "a sent replay is not loaded again"
    );
}

#[tokio::test]
async fn recorder_shutdown_flushes_everything_and_drop_without_shutdown_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let sink = MemorySink::new();
    let recorder = crate::Recorder::start(&config, sink.clone()).await.unwrap();
    let views = recorder.column("views", "views").unwrap();
    for _ in 0..100 {
        recorder.incr("page.views", &[("page_id", "a")], 1).unwrap();
        views.incr(&["a"], 2).unwrap();
    }
    assert!(recorder.column("views", "nope").is_none());
    assert_eq!(
        views.incr(&[], 1),
        Err(crate::engine::RecordError::Invalid(
            crate::line::InvalidReason::MissingKeyTag
        ))
    );
    let clone = recorder.clone();
    let report = recorder.shutdown().await.unwrap();
    assert!(report.applied >= 2);
    assert!(
        clone.shutdown().await.is_none(),
        "the second shutdown has nothing left to do"
    );
    assert_eq!(sink.total(Granularity::Minute), 300);
    assert_eq!(sink.total(Granularity::Day), 300);
    let a = clone.accounting().await;
    assert!(
        a.is_balanced() && a.minute.applied == 300 && a.day.applied == 300,
        "{a:?}"
    );
    drop(clone);

    let before = crate::recorder::dropped_without_shutdown();
    let dir2 = tempfile::tempdir().unwrap();
    let sink2 = MemorySink::new();
    let dropped = crate::Recorder::start(&config_in(dir2.path()), sink2.clone())
        .await
        .unwrap();
    dropped.incr("late", &[], 9).unwrap();
    drop(dropped);
    assert_eq!(crate::recorder::dropped_without_shutdown(), before + 1);
    // The background final flush still delivers.
    for _ in 0..100 {
        if sink2.total(Granularity::Minute) == 9 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(sink2.total(Granularity::Minute), 9);
}

fn config_in(dir: &std::path::Path) -> Config {
    config(dir)
}

#[tokio::test]
async fn an_unclean_previous_stop_is_exported_until_a_clean_one() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    // What a run killed after a flush that left 42 rows pending leaves behind.
    let state = StateDir::open(&config.state).unwrap();
    state.write_status(false, 42, [1234, 1234, 0, 0]).unwrap();
    drop(state);

    let scrape = |pipeline: &crate::pipeline::Pipeline| {
        crate::telemetry::Metrics::new(pipeline.engine().clone(), pipeline.ledger().clone())
            .unwrap()
            .render()
    };
    let mut pipeline = crate::pipeline::Pipeline::start(&config, MemorySink::new())
        .await
        .unwrap();
    assert_eq!(pipeline.ledger().unclean_previous_stop(), Some(42));
    let text = scrape(&pipeline);
    assert!(
        text.contains("countersink_previous_stop_unclean 1"),
        "{text}"
    );
    assert!(
        text.contains("countersink_previous_stop_pending_rows 42"),
        "{text}"
    );
    pipeline.shutdown().await;
    drop(pipeline);

    let pipeline = crate::pipeline::Pipeline::start(&config, MemorySink::new())
        .await
        .unwrap();
    assert_eq!(pipeline.ledger().unclean_previous_stop(), None);
    let text = scrape(&pipeline);
    assert!(
        text.contains("countersink_previous_stop_unclean 0"),
        "{text}"
    );
    assert!(
        text.contains("countersink_previous_stop_pending_rows 0"),
        "{text}"
    );
}

/// Shutdown requested while a regular flush hangs, with rows pending behind it: the
/// running flush and the final flush share one deadline, fixed when shutdown was
/// requested, so the whole shutdown takes `flush.shutdown_deadline`, not twice that.
#[tokio::test(start_paused = true)]
async fn one_shutdown_deadline_covers_the_running_flush_and_the_final_flush() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.flush.interval = Duration::from_secs(5);
    config.flush.jitter = Duration::ZERO;
    config.flush.shutdown_deadline = Duration::from_secs(3);
    let h = harness(&config, Hang);
    h.engine
        .record("hits", &[("i", "1")][..], 1, T0, None)
        .unwrap();
    let (request, signal) = crate::flush::shutdown_channel();
    let task = tokio::spawn(h.flusher.run(signal, Arc::new(tokio::sync::Notify::new())));
    // The first flush starts at 5 s and hangs; a row arrives behind it.
    tokio::time::sleep(Duration::from_secs(6)).await;
    h.engine
        .record("hits", &[("i", "2")][..], 1, T0, None)
        .unwrap();
    let requested = tokio::time::Instant::now();
    request.request();
    let last = task.await.unwrap();
    assert_eq!(
        tokio::time::Instant::now() - requested,
        config.flush.shutdown_deadline,
        "shutdown took the deadline, once"
    );
    assert_eq!(
        (last.writes, last.unknown, last.spilled),
        (2, 0, 2),
        "the final flush found the deadline passed: nothing started, everything spilled"
    );
    let a = Accounting::read(&h.engine, &h.ledger);
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        (a.minute.unknown, a.minute.spilled, a.minute.pending),
        (1, 1, 0),
        "the hanging write is unknown, the row behind it spilled"
    );
}

/// A state directory holding an unfinished flush of the driver wrapper is refused by the
/// sidecar's flusher, with the reason: opening it would overwrite the journal the wrapper's
/// recovery needs. Once the wrapper ended its flush, the directory opens.
#[tokio::test]
async fn an_unfinished_wrapper_flush_keeps_the_sidecar_out_of_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let flush = crate::state::FlushId {
        writer: "w".into(),
        incarnation: 1,
        flush_seq: 1,
        nonce: None,
    };
    {
        let mut state = StateDir::open(&config.state).unwrap();
        let table = crate::state::WrapperTable {
            id: 0,
            keyspace: "app".into(),
            name: "views".into(),
            key_columns: vec!["page".into()],
            counters: vec!["hits".into()],
        };
        let intents = vec![(0, vec![(b"home".as_slice(), [1_i64].as_slice())])];
        state
            .wrapper_journal_begin(&flush, "t", None, std::slice::from_ref(&table), &intents)
            .unwrap();
    }
    let engine = Arc::new(Engine::with_seed(&config, Some(1)).unwrap());
    let refused = Flusher::open(engine.clone(), Arc::new(MemorySink::new()), &config)
        .err()
        .expect("refused");
    assert!(
        matches!(
            refused,
            crate::state::StateError::UnfinishedWrapperFlush { flushes: 1, .. }
        ),
        "{refused}"
    );
    assert!(refused.to_string().contains("CounterSession"), "{refused}");
    {
        let mut state = StateDir::open(&config.state).unwrap();
        assert_eq!(state.unfinished_wrapper_flushes(), 1);
        let (groups, _) = state.take_wrapper_groups();
        state.journal_end(&groups[0].flush, None).unwrap();
    }
    Flusher::open(engine, Arc::new(MemorySink::new()), &config).expect("opens once ended");
}

/// A kill during the final flush loses at most what was in memory when it began (sent
/// requests are journaled): `status.json` says so while it runs, so the next start reports
/// it, not the figure of the last periodic flush, which misses what arrived since.
#[tokio::test]
async fn the_final_flush_records_what_a_kill_during_it_could_lose() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let sink = MemorySink::new();
    let mut h = harness(&config, sink.clone());
    h.engine
        .record("hits", &[("i", "first")][..], 1, T0, None)
        .unwrap();
    h.flusher.flush_now().await;
    for i in 0..10 {
        let i = i.to_string();
        h.engine
            .record("hits", &[("i", i.as_str())][..], 2, T0, None)
            .unwrap();
    }
    let seen = Arc::new(parking_lot::Mutex::new(None));
    let (state, first) = (dir.path().to_owned(), seen.clone());
    sink.set_script(move |_, _| {
        first
            .lock()
            .get_or_insert_with(|| std::fs::read(state.join("status.json")).unwrap_or_default());
        None
    });
    let report = h.flusher.finish().await;
    assert_eq!(report.applied, report.writes);
    let during: serde_json::Value =
        serde_json::from_slice(seen.lock().as_deref().expect("the final flush wrote"))
            .expect("status.json during the final flush");
    assert_eq!(during["clean"], false);
    assert_eq!(
        (&during["pending_sum"], &during["pending_day_sum"]),
        (&serde_json::json!("20"), &serde_json::json!("20")),
        "what the final flush began with: {during}"
    );
    let after: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("status.json")).unwrap()).unwrap();
    assert_eq!(after["clean"], true, "{after}");
}
