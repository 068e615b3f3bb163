//! The flusher against a store that applies nothing: how often it tries, and what it
//! holds in memory meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use crate::config::Config;
use crate::engine::Engine;
use crate::flush::{Flusher, shutdown_channel};
use crate::sink::{Outcome, Sink, WriteError};
use crate::telemetry::{Accounting, Ledger};

/// 2026-11-30T12:00:00Z.
const T0: i64 = 1_796_040_000;

/// A store that answers every write "not applied" after a millisecond (a round trip),
/// until it is brought back.
#[derive(Clone, Default)]
struct Outage {
    requests: Arc<AtomicU64>,
    up: Arc<AtomicBool>,
}

impl Outage {
    async fn answer(&self) -> Outcome {
        self.requests.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(1)).await;
        if self.up.load(Ordering::Relaxed) {
            Outcome::Applied
        } else {
            Outcome::NotAppliedTransient(WriteError::new(
                "no_connection",
                "the store is down (test)",
            ))
        }
    }
}

impl Sink for Outage {
    async fn send(&self, request: crate::sink::Request<'_>) -> Outcome {
        match request {
            crate::sink::Request::Counter(_) | crate::sink::Request::Totals(_) => {
                self.answer().await
            }
            other => other.unsupported(),
        }
    }
}

struct Running {
    engine: Arc<Engine>,
    ledger: Arc<Ledger>,
    stop: crate::flush::ShutdownHandle,
    task: tokio::task::JoinHandle<crate::flush::FlushReport>,
    _dir: tempfile::TempDir,
}

/// A flusher running its own schedule, with the early-flush notification wired as the
/// pipeline wires it.
fn start(config: &mut Config, sink: Outage) -> Running {
    let dir = tempfile::tempdir().unwrap();
    config.state.dir = dir.path().to_owned();
    let engine = Arc::new(Engine::with_seed(config, Some(1)).unwrap());
    let flusher = Flusher::open(engine.clone(), Arc::new(sink), config).unwrap();
    let ledger = flusher.ledger().clone();
    let early = Arc::new(Notify::new());
    let notify = early.clone();
    engine.aggregator().on_pressure(move || notify.notify_one());
    let (stop, signal) = shutdown_channel();
    let task = tokio::spawn(flusher.run(signal, early));
    Running {
        engine,
        ledger,
        stop,
        task,
        _dir: dir,
    }
}

fn record_keys(engine: &Engine, keys: usize) {
    for k in 0..keys {
        let key = k.to_string();
        let _ = engine.record("outage", &[("k", key.as_str())][..], 1, T0, None);
    }
}

/// The case measured on the previous design: 170 distinct keys re-sent every 0.5 s with
/// `limits.max_pending_rows = 200` against a store that is down. Rows merged back after
/// each failed flush pushed the buffer past the early-flush mark again, and the stored
/// notification started the next flush at once: hundreds of flushes per second. Now the
/// flusher backs off, and merged-back rows never ask for an early flush.
#[tokio::test(start_paused = true)]
async fn a_store_that_applies_nothing_gets_at_most_one_flush_per_interval() {
    let mut config = Config::default();
    config.limits.max_pending_rows = 200;
    config.flush.interval = Duration::from_secs(5);
    config.flush.jitter = Duration::from_millis(500);
    config.flush.max_backoff = Duration::from_secs(60);
    let store = Outage::default();
    let run = start(&mut config, store.clone());

    let outage = Duration::from_secs(120);
    let started = tokio::time::Instant::now();
    let mut flushes_at = Vec::new();
    let mut last = 0;
    while started.elapsed() < outage {
        record_keys(&run.engine, 170);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let flushes = run.ledger.flushes();
        if flushes != last {
            flushes_at.push(started.elapsed());
            last = flushes;
        }
        assert!(flushes < 1000, "the flusher spins: {flushes} flushes");
    }
    let flushes = run.ledger.flushes();
    let per_interval = outage.as_secs_f64() / config.flush.interval.as_secs_f64();
    assert!(
        (flushes as f64) <= per_interval,
        "{flushes} flushes in {outage:?}: more than one per interval ({flushes_at:?})"
    );
    // Exponential: 5 s, then waits of 5-10, 10-20, 20-40, 30-60, 30-60 s.
    assert!(
        (3..=7).contains(&flushes),
        "{flushes} flushes at {flushes_at:?}"
    );
    assert!(
        run.ledger.backoff() >= Duration::from_secs(40),
        "{:?}",
        run.ledger.backoff()
    );

    // The store comes back: the next flush applies everything and the schedule resets.
    store.up.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(61)).await;
    assert_eq!(run.ledger.backoff(), Duration::ZERO);
    let before = run.ledger.flushes();
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(
        run.ledger.flushes() - before >= 5,
        "back to one flush per interval"
    );
    run.stop.request();
    run.task.await.unwrap();
    let a = Accounting::read(&run.engine, &run.ledger);
    assert!(a.is_balanced(), "{a:?}");
}

/// While backing off, an early flush is not taken even when fresh rows fill the buffer:
/// against a failing store it would free nothing.
#[tokio::test(start_paused = true)]
async fn memory_pressure_does_not_shorten_the_back_off() {
    let mut config = Config::default();
    config.limits.max_pending_rows = 100;
    config.flush.interval = Duration::from_secs(5);
    config.flush.jitter = Duration::ZERO;
    config.flush.max_backoff = Duration::from_secs(40);
    let store = Outage::default();
    let run = start(&mut config, store.clone());
    record_keys(&run.engine, 10);
    tokio::time::sleep(Duration::from_millis(5100)).await;
    assert_eq!(run.ledger.flushes(), 1, "the first flush, on schedule");
    // Fresh keys cross the early-flush mark (75 rows) during the back-off.
    for round in 0..20 {
        let keys: Vec<String> = (0..10).map(|k| format!("fresh-{round}-{k}")).collect();
        for key in &keys {
            let _ = run
                .engine
                .record("outage", &[("k", key.as_str())][..], 1, T0, None);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        run.ledger.flushes(),
        1,
        "no early flush while backing off (4 s into a wait of at least 5 s)"
    );
    run.stop.request();
    run.task.await.unwrap();
}

/// The memory limit holds through an outage: rows in flight keep their room, rows that
/// come back after a failed write take it, and what does not fit goes to the spill file
/// instead of past the limit. New rows are dropped and counted once the budget is full;
/// when the store returns, everything not dropped reaches it, exactly.
#[tokio::test(start_paused = true)]
async fn the_memory_limit_holds_through_an_outage_and_nothing_is_lost() {
    let mut config = Config::default();
    config.limits.max_pending_rows = 1000;
    config.flush.interval = Duration::from_secs(5);
    config.flush.jitter = Duration::ZERO;
    config.flush.max_backoff = Duration::from_secs(10);
    let store = Outage::default();
    let run = start(&mut config, store.clone());
    let limit = config.limits.max_pending_rows;

    let mut most_held = 0;
    for step in 0..120_usize {
        // 100 new keys every half second (new rows), and the first keys again (existing
        // rows, which still take increments when the budget is full).
        for k in 0..100 {
            let key = format!("{step}-{k}");
            let _ = run
                .engine
                .record("outage", &[("k", key.as_str())][..], 1, T0, None);
        }
        let _ = run
            .engine
            .record("outage", &[("k", "0-0")][..], 1, T0, None);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let held = run.engine.aggregator().pending_rows_estimate();
        most_held = most_held.max(held);
        assert!(
            held <= limit,
            "step {step}: {held} rows held, limit {limit}"
        );
        assert!(run.engine.aggregator().pending_rows() <= limit);
    }
    assert!(
        most_held >= limit * 9 / 10,
        "the budget filled: {most_held}"
    );
    let a = Accounting::read(&run.engine, &run.ledger);
    assert!(a.is_balanced(), "{a:?}");
    assert!(a.minute.dropped > 0, "new rows dropped once full: {a:?}");
    assert!(
        a.minute.spilled + a.day.spilled > 0,
        "re-queued rows that did not fit were spilled: {a:?}"
    );
    assert_eq!(a.minute.applied + a.day.applied, 0);

    // The store comes back: pending rows flush, then the spill is replayed.
    store.up.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(60)).await;
    run.stop.request();
    run.task.await.unwrap();
    let a = Accounting::read(&run.engine, &run.ledger);
    assert!(a.is_balanced(), "{a:?}");
    for s in [&a.minute, &a.day] {
        assert_eq!(
            (s.applied, s.spilled, s.pending, s.unknown),
            (s.accepted - s.dropped, 0, 0, 0),
            "everything not dropped reached the store: {a:?}"
        );
    }
}
