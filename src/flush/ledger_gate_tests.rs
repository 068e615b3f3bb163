//! The ledger gate against the in-memory sink: the ledger records exactly what was fed,
//! whatever the counter writes and the ledger writes went through; counter writes wait
//! for the ledger.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::config::{Config, FamilyConfig};
use crate::engine::Engine;
use crate::flush::Flusher;
use crate::series;
use crate::sink::{LedgerRow, MemorySink, Outcome, WriteError};
use crate::telemetry::Accounting;
use crate::vocabulary::Granularity;

/// 2026-11-30T23:58:00Z.
const T0: i64 = 1_796_083_080;

fn config(dir: &std::path::Path) -> Config {
    let mut config = Config::default();
    config.state.dir = dir.to_owned();
    let mut views = FamilyConfig::seed_views();
    views.exact = true;
    config.families.push(views);
    config.exact.retry_backoff_min = Duration::from_millis(1);
    config.exact.retry_backoff_max = Duration::from_millis(2);
    config.flush.max_batch_rows = 7;
    config
}

/// Ledger sums per (key, minute) over every kept ledger row.
fn ledger_sums(rows: &[LedgerRow]) -> BTreeMap<(String, u32), i128> {
    let mut sums = BTreeMap::new();
    for row in rows {
        *sums.entry((row.key.to_string(), row.minute.0)).or_default() += row.sum();
    }
    sums
}

/// Counter sums of the views family per (key, minute) in one table.
fn counter_sums(sink: &MemorySink, table: Granularity) -> BTreeMap<(String, u32), i128> {
    let mut sums = BTreeMap::new();
    for (key, values) in sink.rows() {
        if key.0.0 == 1 && key.1 == table {
            *sums.entry((series::key_json(&key.2), key.4)).or_default() +=
                values.iter().sum::<i128>();
        }
    }
    sums
}

/// Records every ledger request's rows, so a test can check each primary key was only
/// ever sent with one content.
fn record_ledger_requests(
    sink: &MemorySink,
    fail: impl Fn(u64) -> Option<(Outcome, bool)> + Send + Sync + 'static,
) -> Arc<Mutex<Vec<LedgerRow>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    sink.set_ledger_script(move |n, rows| {
        log.lock().extend(rows.iter().cloned());
        fail(n)
    });
    seen
}

/// One view each of pages `p0`..: as many rows, each its own ledger row.
fn record_pages(engine: &Engine, pages: usize) {
    for i in 0..pages {
        let key = format!("p{i}");
        engine
            .record("page.views", &[("page_id", key.as_str())][..], 1, T0, None)
            .unwrap();
    }
}

fn assert_each_row_sent_with_one_content(sent: &[LedgerRow]) {
    let mut by_identity: BTreeMap<_, &LedgerRow> = BTreeMap::new();
    for row in sent {
        let identity = (row.partition(), row.identity());
        if let Some(first) = by_identity.insert(identity, row) {
            assert_eq!(first, row, "a ledger row was re-sent with other values");
        }
    }
}

#[tokio::test]
async fn the_ledger_records_what_was_fed_through_counter_and_ledger_faults() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let engine = Arc::new(Engine::with_seed(&config, Some(1)).unwrap());
    let sink = MemorySink::new();
    // Every 2nd ledger request times out after the store kept its rows; every 3rd
    // counter write is re-queued, every 5th applies unknowingly, every 7th fails unknown
    // and is not applied.
    let sent = record_ledger_requests(&sink, |n| {
        (n % 2 == 0).then(|| {
            (
                Outcome::Unknown(WriteError::new("write_timeout", "t")),
                true,
            )
        })
    });
    sink.set_script(|n, _| match n % 7 {
        3 => Some((
            Outcome::NotAppliedTransient(WriteError::new("overloaded", "o")),
            false,
        )),
        5 => Some((
            Outcome::Unknown(WriteError::new("write_timeout", "t")),
            true,
        )),
        0 => Some((
            Outcome::Unknown(WriteError::new("write_timeout", "t")),
            false,
        )),
        _ => None,
    });
    let mut flusher = Flusher::open(engine.clone(), Arc::new(sink.clone()), &config).unwrap();
    let mut fed: BTreeMap<(String, u32), i128> = BTreeMap::new();
    for flush in 0..6_i64 {
        let now = T0 + flush * 40;
        for i in 0..300_i64 {
            let key = format!("p{}", i % 23);
            let delta = if i % 11 == 0 { -2 } else { i % 4 + 1 };
            engine
                .record(
                    "page.views",
                    &[("page_id", key.as_str())][..],
                    delta,
                    now,
                    None,
                )
                .unwrap();
            *fed.entry((format!("[\"{key}\"]"), (now / 60) as u32))
                .or_default() += i128::from(delta);
        }
        flusher.flush_now().await;
    }
    sink.clear_script();
    for _ in 0..5 {
        flusher.flush_now().await;
    }
    let ledger = sink.ledger_rows();
    assert_eq!(
        ledger_sums(&ledger),
        fed,
        "the ledger holds exactly what was fed"
    );
    assert_each_row_sent_with_one_content(&sent.lock());
    assert!(
        sink.ledger_requests() > sent.lock().len() as u64 / 8,
        "ledger requests batch rows"
    );
    let counts = flusher.ledger().exact_ledger();
    assert!(counts.writes[&crate::sink::OutcomeClass::Unknown] > 0);
    assert_eq!((counts.held_rows, counts.backlog_rows), (0, 0));
    // The counters drifted (unknown writes), the ledger did not; every unknown row of
    // the log is in the outcomes table.
    assert_ne!(counter_sums(&sink, Granularity::Minute), fed);
    let logged = std::fs::read_to_string(dir.path().join("unknown.jsonl")).unwrap();
    let outcomes = sink.outcome_rows();
    assert_eq!(outcomes.len(), logged.lines().count());
    assert!(
        outcomes
            .iter()
            .all(|o| o.outcome == "unknown" && o.key.starts_with("[\"p"))
    );
    let a = Accounting::read(&engine, flusher.ledger());
    assert!(a.is_balanced(), "{a:?}");
}

#[tokio::test]
async fn a_ledger_outage_holds_the_counter_writes_until_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let engine = Arc::new(Engine::with_seed(&config, Some(1)).unwrap());
    let sink = MemorySink::new();
    sink.set_ledger_script(|_, _| {
        Some((
            Outcome::NotAppliedTransient(WriteError::new("unavailable", "u")),
            false,
        ))
    });
    let mut flusher = Flusher::open(engine.clone(), Arc::new(sink.clone()), &config).unwrap();
    let mut fed: BTreeMap<(String, u32), i128> = BTreeMap::new();
    for flush in 0..4_i64 {
        let now = T0 + flush * 30;
        for i in 0..50_i64 {
            let key = format!("p{}", i % 9);
            engine
                .record("page.views", &[("page_id", key.as_str())][..], 1, now, None)
                .unwrap();
            // A generic counter: no ledger, so it is not held.
            engine
                .record("req", &[("env", "x")][..], 1, now, None)
                .unwrap();
            *fed.entry((format!("[\"{key}\"]"), (now / 60) as u32))
                .or_default() += 1;
        }
        flusher.flush_now().await;
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    assert!(
        counter_sums(&sink, Granularity::Minute).is_empty(),
        "no counter write of an exact family while the ledger fails"
    );
    assert!(counter_sums(&sink, Granularity::Day).is_empty());
    assert_eq!(
        sink.total(Granularity::Minute),
        200,
        "the generic family is not held"
    );
    let counts = flusher.ledger().exact_ledger();
    assert!(
        counts.held_rows > 0 && counts.backlog_rows > 0,
        "{counts:?}"
    );
    let a = Accounting::read(&engine, flusher.ledger());
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        (a.minute.ledgered, a.minute.pending),
        (200, 0),
        "held rows are their own stage: {a:?}"
    );

    sink.clear_ledger_script();
    tokio::time::sleep(Duration::from_millis(3)).await;
    flusher.flush_now().await;
    assert_eq!(ledger_sums(&sink.ledger_rows()), fed);
    assert_eq!(
        counter_sums(&sink, Granularity::Minute),
        fed,
        "everything lands once"
    );
    let day: i128 = counter_sums(&sink, Granularity::Day).values().sum();
    assert_eq!(day, 200);
    let a = Accounting::read(&engine, flusher.ledger());
    assert!(a.is_balanced() && a.minute.pending == 0, "{a:?}");
    assert_eq!(flusher.ledger().exact_ledger().held_rows, 0);
}

#[tokio::test]
async fn requeued_deltas_are_not_fresh_again() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let engine = Arc::new(Engine::with_seed(&config, Some(1)).unwrap());
    let sink = MemorySink::new();
    // Every counter write fails transiently for the first flushes: the rows are merged
    // back and meet new increments of the same rows.
    sink.set_script(|_, _| {
        Some((
            Outcome::NotAppliedTransient(WriteError::new("overloaded", "o")),
            false,
        ))
    });
    let mut flusher = Flusher::open(engine.clone(), Arc::new(sink.clone()), &config).unwrap();
    let mut fed: BTreeMap<(String, u32), i128> = BTreeMap::new();
    for flush in 0..5 {
        if flush == 3 {
            sink.clear_script();
        }
        for i in 0..40_i64 {
            let key = format!("p{}", i % 5);
            engine
                .record("page.views", &[("page_id", key.as_str())][..], 3, T0, None)
                .unwrap();
            *fed.entry((format!("[\"{key}\"]"), (T0 / 60) as u32))
                .or_default() += 3;
        }
        flusher.flush_now().await;
    }
    flusher.flush_now().await;
    assert_eq!(ledger_sums(&sink.ledger_rows()), fed);
    assert_eq!(counter_sums(&sink, Granularity::Minute), fed);
    // One ledger row per key and flush: 5 keys, 5 flushes.
    assert_eq!(sink.ledger_rows().len(), 25);
}

#[tokio::test]
async fn the_final_flush_spills_held_rows_and_the_next_start_sends_their_ledger_rows_verbatim() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.flush.shutdown_deadline = Duration::from_millis(50);
    let engine = Arc::new(Engine::with_seed(&config, Some(1)).unwrap());
    let sink = MemorySink::new();
    let formed = Arc::new(Mutex::new(Vec::new()));
    let seen = formed.clone();
    sink.set_ledger_script(move |_, rows| {
        seen.lock().extend(rows.iter().cloned());
        Some((
            Outcome::NotAppliedTransient(WriteError::new("unavailable", "u")),
            false,
        ))
    });
    let flusher = Flusher::open(engine.clone(), Arc::new(sink.clone()), &config).unwrap();
    engine
        .record("page.views", &[("page_id", "a")][..], 5, T0, None)
        .unwrap();
    flusher.finish().await;
    assert_eq!(sink.requests(), 0, "no counter write went out unrecorded");
    let status: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("status.json")).unwrap())
            .unwrap();
    assert_eq!(status["clean"], true, "spilled, not lost: {status}");
    assert!(
        !dir.path()
            .join(crate::state::ledger_pending::FILE_NAME)
            .exists(),
        "the ledger row is in the held segment's header, written with the row"
    );
    let stored = crate::state::ledger_pending::load(dir.path()).unwrap();
    assert_eq!(stored.len(), 1);
    assert!(formed.lock().iter().all(|row| *row == stored[0]));

    // The next start, the ledger answering: the very same ledger row, then the counters.
    sink.clear_ledger_script();
    let engine = Arc::new(Engine::with_seed(&config, Some(1)).unwrap());
    let mut flusher = Flusher::open(engine.clone(), Arc::new(sink.clone()), &config).unwrap();
    for _ in 0..3 {
        flusher.flush_now().await;
    }
    assert_eq!(
        sink.ledger_rows(),
        stored,
        "sent again as formed, not formed anew"
    );
    assert_eq!(sink.total(Granularity::Minute), 5);
    assert_eq!(sink.total(Granularity::Day), 5);
    assert!(
        crate::state::ledger_pending::load(dir.path())
            .unwrap()
            .is_empty()
    );
}

/// When the held segment cannot be written (the spill is full), the final flush drops
/// the held rows (counted) and keeps their ledger rows in `ledger_pending.jsonl` (they
/// may be applied already): the next start confirms them, the counters never get the
/// rows, and the outcomes table says they were dropped (reconcile's known missing).
#[tokio::test]
async fn held_rows_the_spill_cannot_take_are_dropped_and_their_ledger_rows_kept_in_ledger_pending()
{
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.flush.shutdown_deadline = Duration::from_millis(50);
    config.state.max_spill_bytes = 1;
    let engine = Arc::new(Engine::with_seed(&config, Some(1)).unwrap());
    let sink = MemorySink::new();
    sink.set_ledger_script(|_, _| {
        Some((
            Outcome::NotAppliedTransient(WriteError::new("unavailable", "u")),
            false,
        ))
    });
    let flusher = Flusher::open(engine.clone(), Arc::new(sink.clone()), &config).unwrap();
    engine
        .record("page.views", &[("page_id", "a")][..], 5, T0, None)
        .unwrap();
    let report = flusher.finish().await;
    assert_eq!(report.dropped, 2, "the minute and day writes: {report:?}");
    assert_eq!(sink.requests(), 0, "no counter write went out unrecorded");
    let segments = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with("spill.0")
        })
        .count();
    assert_eq!(segments, 0, "nothing fit the spill");
    let stored = crate::state::ledger_pending::load_file(dir.path()).unwrap();
    assert_eq!(
        stored.len(),
        1,
        "the ledger row waits in ledger_pending.jsonl"
    );

    sink.clear_ledger_script();
    let engine = Arc::new(Engine::with_seed(&config, Some(1)).unwrap());
    let mut flusher = Flusher::open(engine.clone(), Arc::new(sink.clone()), &config).unwrap();
    for _ in 0..3 {
        flusher.flush_now().await;
    }
    assert_eq!(sink.ledger_rows(), stored, "sent again as formed");
    assert_eq!(sink.total(Granularity::Minute), 0, "the rows were dropped");
    let dropped: Vec<_> = sink
        .outcome_rows()
        .into_iter()
        .filter(|row| row.outcome == "dropped")
        .map(|row| (row.granularity, row.deltas["views"]))
        .collect();
    assert_eq!(
        dropped.len(),
        2,
        "both tables' rows are known missing: {dropped:?}"
    );
    assert!(dropped.iter().all(|(_, delta)| *delta == 5), "{dropped:?}");
    assert!(
        !dir.path()
            .join(crate::state::ledger_pending::FILE_NAME)
            .exists()
    );
}

/// The final flush drains in chunks; the first chunk can write neither its held segment
/// nor `ledger_pending.jsonl` (their temporary files are blocked by directories, cleared
/// while the second chunk sends), so that chunk's held rows are lost, not spilled. No
/// later chunk sends their ledger rows again nor writes them to disk: the next start
/// confirms only ledger rows whose rows it replays, and the ledger ends equal to the
/// counters.
#[tokio::test]
async fn ledger_rows_of_held_rows_lost_to_an_unwritable_state_dir_are_never_confirmed() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.flush.shutdown_deadline = Duration::from_secs(60);
    config.limits.max_pending_bytes = 4 * 40_000;
    let engine = Arc::new(Engine::with_seed(&config, Some(1)).unwrap());
    let sink = MemorySink::new();
    let obstacle = dir.path().join("ledger_pending.tmp");
    std::fs::create_dir(&obstacle).unwrap();
    let first_flush = Arc::new(Mutex::new(None));
    let cleared = obstacle.clone();
    let state_dir = dir.path().to_owned();
    sink.set_ledger_script(move |_, rows| {
        let (incarnation, flush) = rows
            .iter()
            .map(|r| (r.incarnation, r.flush_seq))
            .max()
            .unwrap_or_default();
        let held_segment = state_dir.join(format!("spill.{incarnation:010}.{flush:012}.held.tmp"));
        let first = *first_flush.lock().get_or_insert(flush);
        if flush == first {
            let _ = std::fs::create_dir(&held_segment);
        } else {
            // A later chunk sends: its writes will find the way free.
            let _ = std::fs::remove_dir(&cleared);
            let _ = std::fs::remove_dir(
                state_dir.join(format!("spill.{incarnation:010}.{first:012}.held.tmp")),
            );
        }
        Some((
            Outcome::NotAppliedTransient(WriteError::new("unavailable", "u")),
            false,
        ))
    });
    let flusher = Flusher::open(engine.clone(), Arc::new(sink.clone()), &config).unwrap();
    record_pages(&engine, 400);
    let ledger = flusher.ledger().clone();
    flusher.finish().await;
    assert!(!obstacle.exists(), "the final flush had several chunks");
    let a = Accounting::read(&engine, &ledger);
    assert!(a.is_balanced(), "the lost rows are counted dropped: {a:?}");
    assert!(a.minute.dropped > 0, "{a:?}");
    assert!(
        ledger
            .late_drops()
            .get("spill_failed")
            .copied()
            .unwrap_or(0)
            > 0,
        "{:?}",
        ledger.late_drops()
    );
    assert_eq!(sink.requests(), 0, "no counter write went out unrecorded");
    let status: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("status.json")).unwrap())
            .unwrap();
    assert_eq!(status["clean"], false, "the first chunk's rows were lost");
    let stored = crate::state::ledger_pending::load(dir.path()).unwrap();
    assert!(!stored.is_empty(), "later chunks' ledger rows are kept");
    assert!(stored.iter().map(|r| r.sum()).sum::<i128>() < 400);

    // The next start, the ledger answering: the stored ledger rows, then their rows.
    sink.clear_ledger_script();
    let engine = Arc::new(Engine::with_seed(&config, Some(1)).unwrap());
    let mut flusher = Flusher::open(engine.clone(), Arc::new(sink.clone()), &config).unwrap();
    for _ in 0..20 {
        flusher.flush_now().await;
    }
    let minute = counter_sums(&sink, Granularity::Minute);
    let replayed: i128 = minute.values().sum();
    assert!(replayed > 0 && replayed < 400, "{replayed}");
    assert_eq!(
        ledger_sums(&sink.ledger_rows()),
        minute,
        "the ledger records exactly the rows that reached the counters"
    );
    assert_eq!(sink.total(Granularity::Day), replayed);
}

/// The final flush sends each ledger request at most one flush's attempts: once a chunk's
/// unconfirmed requests are given up (stored in its held segment's header), later chunks
/// leave them for the next start, which confirms them before any replay. They re-sent
/// them in every later chunk (idempotent, but their attempts and back-off took the
/// deadline's time from the fresh chunks). The next start then lands every row once.
#[tokio::test]
async fn the_final_flush_does_not_send_again_what_an_earlier_chunk_gave_up() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.flush.shutdown_deadline = Duration::from_secs(60);
    config.limits.max_pending_bytes = 4 * 40_000;
    let engine = Arc::new(Engine::with_seed(&config, Some(1)).unwrap());
    let sink = MemorySink::new();
    let sent = record_ledger_requests(&sink, |_| {
        Some((
            Outcome::NotAppliedTransient(WriteError::new("unavailable", "u")),
            false,
        ))
    });
    let flusher = Flusher::open(engine.clone(), Arc::new(sink.clone()), &config).unwrap();
    record_pages(&engine, 400);
    flusher.finish().await;
    let sent = std::mem::take(&mut *sent.lock());
    let mut attempts: BTreeMap<_, u32> = BTreeMap::new();
    for row in &sent {
        *attempts
            .entry((row.partition(), row.identity()))
            .or_default() += 1;
    }
    let flushes: std::collections::BTreeSet<u64> = sent.iter().map(|r| r.flush_seq).collect();
    assert!(
        flushes.len() > 1,
        "the final flush had several chunks: {flushes:?}"
    );
    let most = attempts.values().copied().max().unwrap_or(0);
    assert!(
        most <= super::ATTEMPTS_PER_FLUSH,
        "a ledger row was sent {most} times in one final flush"
    );
    assert_eq!(sink.requests(), 0, "no counter write went out unrecorded");

    // The next start, the ledger answering: every row once, recorded by the ledger.
    sink.clear_ledger_script();
    let engine = Arc::new(Engine::with_seed(&config, Some(1)).unwrap());
    let mut flusher = Flusher::open(engine.clone(), Arc::new(sink.clone()), &config).unwrap();
    for _ in 0..20 {
        flusher.flush_now().await;
    }
    let minute = counter_sums(&sink, Granularity::Minute);
    assert_eq!(minute.values().sum::<i128>(), 400);
    assert_eq!(ledger_sums(&sink.ledger_rows()), minute);
    assert_eq!(sink.total(Granularity::Day), 400);
}

#[tokio::test]
async fn held_rows_keep_their_room_in_the_memory_budget() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.limits.max_pending_rows = 100;
    let engine = Arc::new(Engine::with_seed(&config, Some(1)).unwrap());
    let sink = MemorySink::new();
    sink.set_ledger_script(|_, _| {
        Some((
            Outcome::NotAppliedTransient(WriteError::new("unavailable", "u")),
            false,
        ))
    });
    let mut flusher = Flusher::open(engine.clone(), Arc::new(sink.clone()), &config).unwrap();
    let record = |first: i64| {
        for i in first..first + 60 {
            let key = format!("p{i}");
            // Refused rows are counted drops, not errors.
            let _ = engine.record("page.views", &[("page_id", key.as_str())][..], 1, T0, None);
        }
    };
    record(0);
    flusher.flush_now().await;
    assert_eq!(flusher.ledger().exact_ledger().held_rows, 60);
    record(60);
    let a = Accounting::read(&engine, flusher.ledger());
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        (a.minute.ledgered, a.minute.pending, a.minute.dropped),
        (60, 40, 20),
        "60 held rows and 40 new ones fill the 100-row budget: {a:?}"
    );
}

/// Outcome rows dropped from a full queue are still in the outcome logs, and
/// `outcomes.mark` never moves past them (not even once the queue has drained): the next
/// start offers them again, and the outcomes table ends up with every logged row.
#[tokio::test]
async fn outcome_rows_dropped_from_a_full_queue_reach_the_table_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let engine = Arc::new(Engine::with_seed(&config, Some(1)).unwrap());
    let sink = MemorySink::new();
    sink.set_outcomes_available(false);
    sink.set_script(|_, _| {
        Some((
            Outcome::Unknown(WriteError::new("write_timeout", "t")),
            false,
        ))
    });
    let mut flusher = Flusher::open(engine.clone(), Arc::new(sink.clone()), &config).unwrap();
    flusher.ledger_gate_mut().unwrap().limit_outcome_queue(5);
    for i in 0..40 {
        let key = format!("p{i}");
        engine
            .record("page.views", &[("page_id", key.as_str())][..], 1, T0, None)
            .unwrap();
    }
    flusher.flush_now().await;
    let logged = std::fs::read_to_string(dir.path().join("unknown.jsonl"))
        .unwrap()
        .lines()
        .count();
    assert!(logged > 5, "{logged} unknown rows logged");
    let gate = flusher.ledger_gate_mut().unwrap();
    assert_eq!(gate.outcomes_dropped(), logged as u64 - 5);
    let counts = flusher.ledger().exact_ledger();
    assert_eq!(
        (counts.outcome_rows_queued, counts.outcome_rows_dropped),
        (5, logged as u64 - 5),
        "the metrics say what the queue holds and dropped"
    );

    sink.clear_script();
    sink.set_outcomes_available(true);
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        flusher.flush_now().await;
        if flusher.ledger_gate_mut().unwrap().outcomes_queued() == 0 {
            break;
        }
    }
    assert_eq!(flusher.ledger_gate_mut().unwrap().outcomes_queued(), 0);
    assert_eq!(
        sink.outcome_rows().len(),
        5,
        "only the queued rows were sent"
    );
    drop(flusher);

    let engine = Arc::new(Engine::with_seed(&config, Some(1)).unwrap());
    let mut flusher = Flusher::open(engine, Arc::new(sink.clone()), &config).unwrap();
    flusher.flush_now().await;
    assert_eq!(
        sink.outcome_rows().len(),
        logged,
        "every logged unknown row is in the outcomes table after the restart"
    );
}

/// The in-memory sink, but every outcome-table write takes ten seconds.
struct SlowOutcomes(MemorySink);

impl crate::sink::Sink for SlowOutcomes {
    async fn send(&self, request: crate::sink::Request<'_>) -> Outcome {
        if let crate::sink::Request::Outcomes(_) = request {
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
        self.0.send(request).await
    }
}

/// An exact family's final flush whose write goes unknown, with an outcomes table that
/// answers after ten seconds: the outcome-row write is cut off at the shutdown
/// deadline like every other write (the rows stay in `unknown.jsonl` and are offered to
/// the table again at the next start), so shutdown takes the deadline, not ten seconds
/// more.
#[tokio::test(start_paused = true)]
async fn a_slow_outcomes_table_does_not_hold_the_final_flush_past_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.flush.shutdown_deadline = Duration::from_secs(3);
    let engine = Arc::new(Engine::with_seed(&config, Some(1)).unwrap());
    let sink = MemorySink::new();
    sink.set_script(|_, _| {
        Some((
            Outcome::Unknown(WriteError::new("write_timeout", "t")),
            false,
        ))
    });
    let flusher = Flusher::open(
        engine.clone(),
        Arc::new(SlowOutcomes(sink.clone())),
        &config,
    )
    .unwrap();
    engine
        .record("page.views", &[("page_id", "p1")][..], 1, T0, None)
        .unwrap();
    let started = tokio::time::Instant::now();
    flusher.finish().await;
    let took = tokio::time::Instant::now() - started;
    assert!(
        took <= config.flush.shutdown_deadline,
        "the final flush took {took:?}, its deadline is 3 s"
    );
    assert!(
        std::fs::read_to_string(dir.path().join("unknown.jsonl"))
            .unwrap()
            .lines()
            .count()
            > 0,
        "the unknown rows are in the local log"
    );
}

/// A flush observer hears of an exact family's drain before anything of it is written
/// (the OTLP stream table is saved there: a ledger row written before the save, then a
/// kill, and the next point's difference would be in the ledger twice).
#[tokio::test]
async fn observers_hear_of_the_drain_before_the_first_ledger_write() {
    /// The ledger requests made when each drain was told.
    struct Drains(MemorySink, Mutex<Vec<u64>>);
    impl crate::flush::FlushObserver for Drains {
        fn planned(&self, _: &[&dyn crate::sink::PlannedWrite]) {}
        fn drained(&self) {
            self.1.lock().push(self.0.ledger_requests());
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let engine = Arc::new(Engine::with_seed(&config, Some(1)).unwrap());
    let sink = MemorySink::new();
    let mut flusher = Flusher::open(engine.clone(), Arc::new(sink.clone()), &config).unwrap();
    let drains = Arc::new(Drains(sink.clone(), Mutex::new(Vec::new())));
    flusher.observe(drains.clone());
    engine
        .record("page.views", &[("page_id", "a")][..], 3, T0, None)
        .unwrap();
    flusher.flush_now().await;
    assert!(sink.ledger_requests() > 0, "the family keeps a ledger");
    let told = drains.1.lock().clone();
    assert_eq!(
        told.first(),
        Some(&0),
        "told before any ledger write: {told:?}"
    );
}

/// The final flush of an exact family in several chunks, each with an unknown write,
/// with an outcomes table that answers after ten seconds: the counter writes of every
/// chunk go out first, the outcome rows after them; sent after each chunk, the outcome
/// rows took the deadline's time and the later chunks were spilled unsent.
#[tokio::test(start_paused = true)]
async fn outcome_rows_do_not_hold_the_final_flushs_counter_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.flush.shutdown_deadline = Duration::from_secs(15);
    config.limits.max_pending_bytes = 4 * 40_000;
    let engine = Arc::new(Engine::with_seed(&config, Some(1)).unwrap());
    let sink = MemorySink::new();
    sink.set_script(|n, _| {
        (n % 50 == 0).then(|| {
            (
                Outcome::Unknown(WriteError::new("write_timeout", "t")),
                false,
            )
        })
    });
    let flusher = Flusher::open(
        engine.clone(),
        Arc::new(SlowOutcomes(sink.clone())),
        &config,
    )
    .unwrap();
    record_pages(&engine, 400);
    let report = flusher.finish().await;
    assert!(report.writes >= 400, "{report:?}");
    assert_eq!(report.spilled, 0, "every chunk sent: {report:?}");
    assert_eq!(report.applied + report.unknown, report.writes, "{report:?}");
}

/// After a ledger outage every held request comes due at once. Released together, the
/// rows they gate would be planned in one chunk, their writes far past the flush's share
/// of the memory limit; they are released a share at a time instead (the writes any one
/// chunk plans fit it), and every delta fed reaches the counter tables, once.
#[tokio::test]
async fn rows_released_after_a_ledger_outage_go_out_a_flush_share_at_a_time() {
    /// Row writes planned per chunk, with the estimated bytes of each.
    struct Planned(Mutex<Vec<usize>>);
    impl crate::flush::FlushObserver for Planned {
        fn planned(&self, writes: &[&dyn crate::sink::PlannedWrite]) {
            let mut bytes = 0;
            for write in writes {
                let mut rows = 0;
                write.for_each_bucket(&mut |_| rows += 1);
                bytes += rows * (crate::aggregate::FLUSH_BYTES_PER_WRITE + write.series().len());
            }
            self.0.lock().push(bytes);
        }
    }
    const MAX_PENDING_BYTES: usize = 512 << 10;
    let share = MAX_PENDING_BYTES / 4;
    for final_flush in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let mut config = config(dir.path());
        config.limits.max_pending_bytes = MAX_PENDING_BYTES;
        let engine = Arc::new(Engine::with_seed(&config, Some(1)).unwrap());
        let sink = MemorySink::new();
        let down = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let ledger_down = down.clone();
        sink.set_ledger_script(move |_, _| {
            ledger_down
                .load(std::sync::atomic::Ordering::Relaxed)
                .then(|| {
                    (
                        Outcome::NotAppliedTransient(WriteError::new("unavailable", "u")),
                        false,
                    )
                })
        });
        let mut flusher = Flusher::open(engine.clone(), Arc::new(sink.clone()), &config).unwrap();
        let mut fed: BTreeMap<(String, u32), i128> = BTreeMap::new();
        for round in 0..5_i64 {
            for i in 0..300_i64 {
                let key = format!("p{round}-{i}");
                engine
                    .record("page.views", &[("page_id", key.as_str())][..], 1, T0, None)
                    .unwrap();
                *fed.entry((format!("[\"{key}\"]"), (T0 / 60) as u32))
                    .or_default() += 1;
            }
            flusher.flush_now().await;
        }
        assert_eq!(flusher.ledger().exact_ledger().held_rows, 1_500);
        assert!(counter_sums(&sink, Granularity::Minute).is_empty());
        let planned = Arc::new(Planned(Mutex::new(Vec::new())));
        flusher.observe(planned.clone());
        down.store(false, std::sync::atomic::Ordering::Relaxed);
        let ledger = flusher.ledger().clone();
        if final_flush {
            flusher.finish().await;
        } else {
            for _ in 0..100 {
                flusher.flush_now().await;
                if counter_sums(&sink, Granularity::Minute) == fed {
                    break;
                }
            }
        }
        assert_eq!(counter_sums(&sink, Granularity::Minute), fed);
        assert_eq!(
            counter_sums(&sink, Granularity::Day).values().sum::<i128>(),
            1_500
        );
        let chunks = planned.0.lock().clone();
        assert!(chunks.len() > 1, "released in several chunks: {chunks:?}");
        // One held request (a ledger batch) is released whatever its size: a little slack.
        let slack = crate::flush::ledger_gate::ROWS_PER_REQUEST
            * 2
            * (crate::aggregate::FLUSH_BYTES_PER_WRITE + 16);
        for bytes in chunks {
            assert!(
                bytes <= share + slack,
                "a chunk planned {bytes} bytes of writes, past the flush's share {share}"
            );
        }
        let a = Accounting::read(&engine, &ledger);
        assert!(a.is_balanced(), "{a:?}");
    }
}

/// With the outcomes table failing for good while the counter store flaps, a day is
/// spilled and replayed over and over: each cycle makes an `owed` mark, then a
/// `replayed` one, of the same family-day. Each overwrites the one before in the table
/// (one row per family-day and state directory), so the queue keeps the latest only: at
/// most one mark of the day waits, however many cycles ran, and it is the latest.
#[tokio::test]
async fn a_day_spilled_and_replayed_again_and_again_queues_one_mark() {
    const CYCLES: usize = 3;
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.flush.requeue_max_age = Duration::from_secs(1);
    let engine = Arc::new(Engine::with_seed(&config, Some(1)).unwrap());
    let sink = MemorySink::new();
    sink.set_outcomes_available(false);
    let mut flusher = Flusher::open(engine.clone(), Arc::new(sink.clone()), &config).unwrap();
    let down = || {
        Some((
            Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
            false,
        ))
    };
    let mut last = None;
    for cycle in 0..CYCLES {
        // The counter store fails past the maximum age: the rows are spilled (the day is
        // owed).
        sink.set_script(move |_, _| down());
        engine
            .record("page.views", &[("page_id", "p1")][..], 1, T0, None)
            .unwrap();
        flusher.flush_now().await;
        tokio::time::sleep(Duration::from_millis(2100)).await;
        let report = flusher.flush_now().await;
        assert_eq!(
            report.spilled, 2,
            "cycle {cycle}: minute and day rows spilled"
        );
        // It answers again: the spill is replayed (the day owes nothing any more).
        sink.clear_script();
        for _ in 0..4 {
            flusher.flush_now().await;
        }
        assert_eq!(
            flusher.ledger().exact_ledger().owed_days,
            0,
            "cycle {cycle}: replayed"
        );
        let gate = flusher.ledger_gate_mut().unwrap();
        assert_eq!(gate.marks_queued(), 1, "cycle {cycle}: one mark of the day");
        last = gate.queued_marks().first().map(|m| m.outcome.clone());
    }
    assert_eq!(last.as_deref(), Some(crate::flush::owed::REPLAYED));
    let a = Accounting::read(&engine, flusher.ledger());
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(sink.total(Granularity::Minute), CYCLES as i128);

    // The table answers: the one mark is written, and the queue is empty.
    sink.set_outcomes_available(true);
    tokio::time::sleep(Duration::from_millis(5)).await;
    flusher.flush_now().await;
    assert_eq!(flusher.ledger_gate_mut().unwrap().marks_queued(), 0);
    let marks: Vec<_> = sink
        .outcome_rows()
        .into_iter()
        .filter(|r| r.request_id.starts_with(crate::flush::owed::REQUEST_PREFIX))
        .map(|r| r.outcome)
        .collect();
    assert_eq!(marks, [crate::flush::owed::REPLAYED]);
}
