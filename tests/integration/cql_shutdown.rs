//! Shutdown through the driver: the final flush with its deadline, the spill file, and
//! the replay on the next start.

use std::time::{Duration, Instant};

use countersink::ingest::client::{Client, Target};
use cqlsim::{FaultKind, FaultRule};

use crate::common::{Serve, T0, Writer, config, start_cqlsim, start_store};

/// 100k pending rows (1,000 pages x 100 minutes, as after a long outage) and a deadline
/// too short to send them all: what is sent is applied (or, if cut off in flight, logged
/// as unknown), the rest is spilled; the next start replays the spill and applies it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_100k_pending_rows_applies_or_spills_and_a_restart_replays() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.flush.shutdown_deadline = Duration::from_millis(700);
    let store = start_store(&mut config).await;
    let writer = Writer::start(&config).await;
    let start = T0 - 200 * 60;
    let mut accepted = 0_i128;
    for minute in 0..100 {
        for page in 0..1000 {
            writer.incr(
                "page.views",
                &[("page_id", &format!("p{page}"))],
                1,
                start + minute * 60,
            );
            accepted += 1;
        }
    }
    assert_eq!(writer.engine.aggregator().pending_rows(), 100_000);
    let engine = writer.engine.clone();
    let ledger = writer.ledger.clone();
    let began = Instant::now();
    let report = writer.flusher.finish().await;
    let took = began.elapsed();
    assert!(
        report.spilled > 0,
        "the deadline cut the flush short: {report:?}"
    );
    // How long it took is a measurement (the shutdown figure in docs/src/performance.md comes from a
    // bench), not an assertion: a loaded machine stretches it. The deadline's effect is
    // asserted above: the flush was cut short and the rest spilled.
    eprintln!("shutdown with 100k rows and a 700 ms deadline took {took:?}");
    let a = countersink::telemetry::Accounting::read(&engine, &ledger);
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(a.minute.pending, 0);
    assert_eq!(
        a.minute.applied + a.minute.unknown + a.minute.spilled,
        accepted
    );
    let stored = store.table_sum("metrics.views_by_minute", "views").await;
    assert!(a.minute.applied <= stored && stored <= a.minute.applied + a.minute.unknown);
    drop(engine);

    // The next start: the spilled rows come back and are applied, once.
    config.flush.shutdown_deadline = Duration::from_secs(30);
    let mut writer = Writer::start(&config).await;
    // The spill comes back in chunks (at most 100k rows each, and what the budget has
    // room for), one per flush.
    let replayed = |writer: &Writer| {
        use countersink::vocabulary::Granularity;
        [Granularity::Minute, Granularity::Day].map(|g| writer.ledger.settled(g).replayed)
    };
    for _ in 0..10 {
        writer.flusher.flush_now().await;
        if replayed(&writer) == [a.minute.spilled, a.day.spilled] {
            break;
        }
    }
    assert_eq!(replayed(&writer), [a.minute.spilled, a.day.spilled]);
    let b = writer.accounting();
    assert!(b.is_balanced(), "{b:?}");
    assert_eq!((b.minute.applied, b.minute.pending), (a.minute.spilled, 0));
    let stored_after = store.table_sum("metrics.views_by_minute", "views").await;
    assert_eq!(stored_after, stored + a.minute.spilled);
    let day = store.table_sum("metrics.views_by_day", "views").await;
    let day_sent = a.day.applied + a.day.spilled;
    assert!(
        day_sent <= day && day <= day_sent + a.day.unknown,
        "day table: {day} vs {a:?}"
    );
    store.shutdown().await;
}

/// SIGTERM while a regular flush hangs (the store never answers writes; the client
/// timeout is far away) and rows wait behind it: `serve` exits at its
/// `flush.shutdown_deadline`, without waiting for the store. The hanging writes are logged as
/// unknown, the rows behind them are spilled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_hanging_flush_exits_within_one_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    let store = start_cqlsim(&mut config, "injects a store that never answers").await;
    let server = store.sim();
    server.add_fault(FaultRule::new(FaultKind::NoReply).applied(true));
    let deadline = Duration::from_secs(3);
    let file = dir.path().join("serve.toml");
    std::fs::write(
        &file,
        format!(
            "[store]\nrequest_timeout = \"60s\"\n[flush]\ninterval = \"300ms\"\njitter = \"0s\"\nshutdown_deadline = \"{}s\"\n",
            deadline.as_secs()
        ),
    )
    .unwrap();
    let state = dir.path().join("state");
    let serve = Serve::start([
        "--config",
        &file.display().to_string(),
        "--udp",
        "off",
        "--uds",
        &dir.path().join("dgram.sock").display().to_string(),
        "--metrics",
        "off",
        "--contact-point",
        &config.store.contact_points[0],
        "--state-dir",
        &state.display().to_string(),
    ]);
    let mut client = Client::connect(Target::UnixDatagram(dir.path().join("dgram.sock"))).unwrap();
    client.send_lines(["hang:1|c"]).unwrap();
    // A flush took the row and its two writes hang in the store.
    wait_until(|| {
        server
            .stats()
            .table("countersink", "counts_by_day")
            .write_requests
            == 1
    })
    .await;
    client.send_lines(["behind:1|c"]).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await; // let the receiver read it
    let (status, took) = serve.terminate();
    assert_eq!(status.code(), Some(0));
    // Not a speed check (a loaded machine stretches any time): the exit came before the
    // 60 s client timeout, so it did not wait for the hanging writes. That the wait is one
    // deadline and not two is proven on a paused clock in `flush::shutdown`'s unit tests.
    assert!(
        took < Duration::from_secs(60),
        "exit {took:?} after SIGTERM, with a {deadline:?} deadline: it waited for the store"
    );
    eprintln!("exit {took:?} after SIGTERM, with a {deadline:?} deadline");
    let records = |name: &str| -> Vec<serde_json::Value> {
        std::fs::read_to_string(state.join(name))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let unknown = records("unknown.jsonl");
    assert_eq!(unknown.len(), 2, "{unknown:?}");
    assert!(
        unknown
            .iter()
            .all(|r| r["key"]["name"] == "hang" && r["error"]["kind"] == "cancelled_at_deadline")
    );
    let spilled = crate::common::spilled_records(&state);
    assert_eq!(spilled.len(), 2, "{spilled:?}");
    assert!(spilled.iter().all(|r| r["key"]["name"] == "behind"));
    store.shutdown().await;
}

/// Polls `done` every 20 ms for up to 10 s.
async fn wait_until(done: impl Fn() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the awaited state never came");
}
