//! Flusher tests against the in-memory sink: outcome classes, accounting, deadline,
//! spill and replay.

use std::sync::Arc;
use std::time::Duration;

use crate::config::{Config, FamilyConfig};
use crate::engine::Engine;
use crate::flush::Flusher;
use crate::sink::{MemorySink, Sink};
use crate::sink::{Outcome, WriteError};
use crate::state::StateDir;
use crate::telemetry::Accounting;
use crate::telemetry::Ledger;
use crate::vocabulary::Granularity;

/// 2026-11-30T23:58:00Z: two minutes before a day boundary.
const T0: i64 = 1_796_083_080;

fn config(dir: &std::path::Path) -> Config {
    let mut config = Config::default();
    config.state.dir = dir.to_owned();
    config.families.push(FamilyConfig::seed_views());
    config.flush.shutdown_deadline = Duration::from_millis(300);
    config
}

struct Harness<S: Sink> {
    engine: Arc<Engine>,
    ledger: Arc<Ledger>,
    flusher: Flusher<S>,
    _dir: Option<tempfile::TempDir>,
}

fn harness<S: Sink>(config: &Config, sink: S) -> Harness<S> {
    let engine = Arc::new(Engine::with_seed(config, Some(1)).unwrap());
    let flusher = Flusher::open(engine.clone(), Arc::new(sink), config).unwrap();
    let ledger = flusher.ledger().clone();
    Harness {
        engine,
        ledger,
        flusher,
        _dir: None,
    }
}

fn accounting<S: Sink>(h: &Harness<S>) -> Accounting {
    Accounting::read(&h.engine, &h.ledger)
}

/// Every record in the spill segments, in replay order.
fn spilled(dir: &std::path::Path) -> Vec<crate::state::WriteRecord> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("spill.") && n.ends_with(".jsonl") && n != "spill.corrupt.jsonl")
        .collect();
    names.sort();
    names.iter().flat_map(|n| read_log(dir, n)).collect()
}

fn read_log(dir: &std::path::Path, name: &str) -> Vec<crate::state::WriteRecord> {
    std::fs::read_to_string(dir.join(name))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.starts_with("{\"spill_segment\""))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn exact_totals_across_a_day_boundary_in_both_tables() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let sink = MemorySink::new();
    let mut h = harness(&config, sink.clone());
    let tags: &[(&str, &str)] = &[("page_id", "home")];
    // Minutes 23:58, 23:59 and 00:00 of the next day; generic and configured families.
    for (offset, n) in [(0, 3), (60, 4), (120, 5)] {
        for _ in 0..n {
            h.engine
                .record("page.views", tags, 1, T0 + offset, None)
                .unwrap();
            h.engine
                .record("page.bytes", tags, 100, T0 + offset, None)
                .unwrap();
            h.engine
                .record("req", &[("env", "prod")][..], 2, T0 + offset, None)
                .unwrap();
        }
        if offset == 60 {
            h.flusher.flush_now().await;
        }
    }
    h.flusher.flush_now().await;

    let rows = sink.rows();
    let views_minutes: Vec<_> = rows
        .iter()
        .filter(|(k, _)| k.0.0 == 1 && k.1 == Granularity::Minute)
        .map(|(k, v)| (k.4, v.clone()))
        .collect();
    let m0 = (T0 / 60) as u32;
    assert_eq!(
        views_minutes,
        [
            (m0, vec![300, 3]),
            (m0 + 1, vec![400, 4]),
            (m0 + 2, vec![500, 5])
        ]
    );
    let views_days: Vec<_> = rows
        .iter()
        .filter(|(k, _)| k.0.0 == 1 && k.1 == Granularity::Day)
        .map(|(k, v)| (k.4, v.clone()))
        .collect();
    let d0 = m0 / 1440;
    assert_eq!(views_days, [(d0, vec![700, 7]), (d0 + 1, vec![500, 5])]);
    assert_eq!(
        sink.total(Granularity::Minute),
        sink.total(Granularity::Day)
    );
    let a = accounting(&h);
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        (a.minute.applied, a.day.applied, a.minute.pending),
        (a.minute.accepted, a.day.accepted, 0)
    );
}

#[tokio::test]
async fn each_outcome_class_is_settled_and_only_transient_ones_are_resent() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let sink = MemorySink::new();
    let mut h = harness(&config, sink.clone());
    for key in ["a", "b", "c", "d"] {
        h.engine
            .record("hits", &[("k", key)][..], 10, T0, None)
            .unwrap();
    }
    // Minute writes of a, b, c fail three ways; d and every day write succeed.
    sink.set_script(|_, w| {
        let key = crate::series::fields(&w.series)
            .nth(1)
            .unwrap_or("")
            .to_owned();
        if w.table != Granularity::Minute {
            return None;
        }
        match key.as_str() {
            "k:a" => Some((
                Outcome::NotAppliedTransient(WriteError::new("unavailable", "2 replicas down")),
                false,
            )),
            "k:b" => Some((
                Outcome::NotAppliedPermanent(WriteError::new("invalid", "no such table")),
                false,
            )),
            "k:c" => Some((
                Outcome::Unknown(WriteError::new("write_timeout", "timed out")),
                true,
            )),
            _ => None,
        }
    });
    let first = h.flusher.flush_now().await;
    assert_eq!(
        (first.applied, first.requeued, first.rejected, first.unknown),
        (5, 1, 1, 1)
    );
    let a = accounting(&h);
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        (a.minute.unknown, a.minute.rejected, a.minute.pending),
        (10, 10, 10)
    );
    assert_eq!((a.day.applied, a.day.pending), (40, 0));
    assert_eq!(
        h.engine.aggregator().snapshot().len(),
        1,
        "only the transient one is back"
    );

    sink.clear_script();
    let before = sink.requests();
    let second = h.flusher.flush_now().await;
    assert_eq!(
        (second.writes, second.applied),
        (1, 1),
        "the unknown write is never re-sent"
    );
    assert_eq!(sink.requests(), before + 1);
    assert_eq!(
        sink.total(Granularity::Minute),
        30,
        "a (re-sent) and c (applied before timing out) and d"
    );
    assert_eq!(
        sink.total(Granularity::Day),
        40,
        "day rows of a and b were not re-sent"
    );
    let a = accounting(&h);
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        (a.minute.applied, a.minute.pending),
        (20, 0),
        "a re-sent, d; c is unknown even though the store applied it"
    );

    let unknown = read_log(dir.path(), "unknown.jsonl");
    assert_eq!(unknown.len(), 1);
    let record = &unknown[0];
    assert_eq!(
        (
            record.family.as_str(),
            record.granularity.as_str(),
            record.outcome
        ),
        ("generic", "minute", crate::state::RecordOutcome::Unknown)
    );
    assert_eq!(record.key["tags"], "k:c");
    assert_eq!(record.deltas["value"], 10);
    assert_eq!(record.error.as_ref().unwrap().kind, "write_timeout");
    assert_eq!(
        (record.day.as_str(), record.minute),
        ("2026-11-30", Some(1438))
    );
    assert_eq!(record.flush_seq, 1);
    let rejected = read_log(dir.path(), "rejected.jsonl");
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].key["tags"], "k:b");
}

#[tokio::test]
async fn transient_failures_past_the_maximum_age_are_spilled() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.flush.requeue_max_age = Duration::from_secs(1);
    let sink = MemorySink::new();
    sink.set_script(|_, _| {
        Some((
            Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
            false,
        ))
    });
    let mut h = harness(&config, sink.clone());
    h.engine.record("hits", &[][..], 7, T0, None).unwrap();
    h.flusher.flush_now().await;
    let a = accounting(&h);
    assert_eq!(
        (a.minute.pending, a.day.pending),
        (7, 7),
        "minute and day rows re-queued"
    );
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let report = h.flusher.flush_now().await;
    assert_eq!(report.spilled, 2);
    let a = accounting(&h);
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        (a.minute.spilled, a.day.spilled, a.minute.pending),
        (7, 7, 0)
    );
    assert_eq!(spilled(dir.path()).len(), 2);

    // The store answers again: after one healthy flush, the spilled rows come back and
    // are applied once, without a restart.
    sink.clear_script();
    h.engine.record("hits", &[][..], 1, T0, None).unwrap();
    h.flusher.flush_now().await;
    assert_eq!(sink.total(Granularity::Minute), 1);
    h.flusher.flush_now().await;
    assert_eq!(
        (
            sink.total(Granularity::Minute),
            sink.total(Granularity::Day)
        ),
        (8, 8)
    );
    let a = accounting(&h);
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        (a.minute.spilled, a.minute.applied, a.day.applied),
        (0, 8, 8)
    );
    assert!(
        spilled(dir.path()).is_empty(),
        "the replayed segment is deleted"
    );
    drop(h);
    let mut h = harness(&config, MemorySink::new());
    h.flusher.flush_now().await;
    assert_eq!(
        h.ledger.settled(Granularity::Minute).replayed,
        0,
        "nothing left for the next start"
    );
}

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
async fn replayed_rows_of_a_removed_family_are_rejected_not_lost() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    {
        let down = MemorySink::new();
        down.set_script(|_, _| {
            Some((
                Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
                false,
            ))
        });
        let h = harness(&config, down);
        h.engine
            .record("page.views", &[("page_id", "p")][..], 5, T0, None)
            .unwrap();
        let report = h.flusher.finish().await;
        assert_eq!(
            report.spilled, 2,
            "transient failures in the final flush are spilled"
        );
    }
    let mut without = config.clone();
    without.families.clear();
    let mut h = harness(&without, MemorySink::new());
    h.flusher.flush_now().await;
    let a = accounting(&h);
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!((a.minute.rejected, a.day.rejected), (5, 5));
    let rejected = read_log(dir.path(), "rejected.jsonl");
    assert!(
        rejected
            .iter()
            .all(|r| r.error.as_ref().unwrap().kind == "replay_unmappable")
    );
}

/// A spill a configuration change made unmappable (its family removed) is refused a
/// chunk at a time, within the memory budget like rows to send: each refused record is
/// held until its chunk's read ends, so a large spill read whole would hold every one.
#[tokio::test]
async fn refused_replay_records_are_read_a_chunk_at_a_time() {
    const PAGES: usize = 1_000;
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.limits.max_pending_rows = 200;
    // Ten runs against a store that is down, each spilling what it took at its final
    // flush (within the row limit).
    for run in 0..10 {
        let down = MemorySink::new();
        down.set_script(|_, _| {
            Some((
                Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
                false,
            ))
        });
        let h = harness(&config, down);
        for page in run * PAGES / 10..(run + 1) * PAGES / 10 {
            h.engine
                .record(
                    "page.views",
                    &[("page_id", format!("p{page}").as_str())][..],
                    1,
                    T0,
                    None,
                )
                .unwrap();
        }
        h.flusher.finish().await;
    }
    let mut without = config.clone();
    without.families.clear();
    let mut h = harness(&without, MemorySink::new());
    h.flusher.flush_now().await;
    let first = read_log(dir.path(), "rejected.jsonl").len();
    assert!(
        first > 0 && first <= 100,
        "one chunk, at most half the row limit: {first} refused"
    );
    for _ in 0..100 {
        h.flusher.flush_now().await;
        if read_log(dir.path(), "rejected.jsonl").len() == 2 * PAGES {
            break;
        }
    }
    assert_eq!(read_log(dir.path(), "rejected.jsonl").len(), 2 * PAGES);
    let a = accounting(&h);
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        (a.minute.rejected, a.day.rejected),
        (PAGES as i128, PAGES as i128)
    );
}

/// A refused record is logged in `rejected.jsonl` as it is read, and only the durable
/// cursor passing it keeps the next start from logging it again: it never shares a chunk
/// with rows to send, whose cursor is durable only at their group commit. A process
/// whose replay chunk read rows and never made its group commit (the journal fails
/// here: on disk, what a kill before the commit leaves) is dropped, and the next start
/// replays the spill: every refused record is logged once, whether it lies before,
/// between or after rows to send.
#[tokio::test]
async fn a_refusal_beside_rows_is_logged_once_after_a_kill_before_the_group_commit() {
    // Each run spills one segment: `req` (the generic family) still maps after the
    // change, `page.views` (a configured family, removed) no longer does.
    for layout in [
        &["req", "page.views", "req"][..],
        &["page.views", "req"],
        &["req", "page.views"],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let config = config(dir.path());
        for (run, name) in layout.iter().enumerate() {
            let down = MemorySink::new();
            down.set_script(|_, _| {
                Some((
                    Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
                    false,
                ))
            });
            let h = harness(&config, down);
            let tag = if *name == "req" { "env" } else { "page_id" };
            h.engine
                .record(name, &[(tag, format!("r{run}").as_str())][..], 5, T0, None)
                .unwrap();
            h.flusher.finish().await;
        }
        let views = FamilyConfig::seed_views().name;
        let refused = spilled(dir.path())
            .iter()
            .filter(|r| r.family == views)
            .count();
        assert_eq!(
            refused, 2,
            "{layout:?}: the page.views rows, minute and day"
        );
        let mut without = config.clone();
        without.families.clear();
        {
            let mut h = harness(&without, MemorySink::new());
            h.flusher.fail_journal_writes();
            h.flusher.flush_now().await;
            // Killed: nothing more of this process reaches the disk.
        }
        let sink = MemorySink::new();
        let mut h = harness(&without, sink.clone());
        // A round replays one chunk of rows, the refusals before it with it.
        for _ in 0..layout.len() + 1 {
            h.flusher.flush_now().await;
        }
        assert!(!h.flusher.state().has_unreplayed(), "{layout:?}: replayed");
        let rejected = read_log(dir.path(), "rejected.jsonl");
        assert_eq!(
            rejected.len(),
            refused,
            "{layout:?}: once each: {rejected:?}"
        );
        let sent = layout.iter().filter(|name| **name == "req").count() as i128;
        assert_eq!(
            sink.total(Granularity::Minute) + sink.total(Granularity::Day),
            2 * 5 * sent,
            "{layout:?}: every row that maps sent once"
        );
    }
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

/// A spill that cannot be written (a full disk) loses its rows, counted once in rows;
/// nothing of it is reloaded later (a half-written segment never becomes visible), and
/// a final flush that lost rows is an unclean stop.
#[tokio::test]
async fn a_failed_spill_is_counted_once_and_never_reloaded() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    {
        let down = MemorySink::new();
        down.set_script(|_, _| {
            Some((
                Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
                false,
            ))
        });
        let h = harness(&config, down);
        h.engine.record("hits", &[][..], 5, T0, None).unwrap();
        // The final flush is flush 1 of incarnation 1: its segment's temporary file.
        std::os::unix::fs::symlink(
            "/dev/full",
            dir.path().join("spill.0000000001.000000000001.tmp"),
        )
        .unwrap();
        let (engine, ledger) = (h.engine.clone(), h.ledger.clone());
        let report = h.flusher.finish().await;
        assert_eq!((report.spilled, report.dropped), (0, 2));
        let a = Accounting::read(&engine, &ledger);
        assert!(a.is_balanced(), "{a:?}");
        assert_eq!(
            (a.minute.dropped, a.day.dropped, a.minute.spilled),
            (5, 5, 0)
        );
        assert_eq!(ledger.late_drops().get("spill_failed"), Some(&2));
        let text = crate::telemetry::Metrics::new(engine, ledger)
            .unwrap()
            .render();
        assert!(
            text.contains("countersink_rows_dropped_total{reason=\"spill_failed\"} 2"),
            "{text}"
        );
        assert!(
            !text.contains("countersink_dropped_total{reason=\"spill_failed\"}"),
            "rows are not counted as increments"
        );
    }
    std::fs::remove_file(dir.path().join("spill.0000000001.000000000001.tmp")).ok();
    let mut h = harness(&config, MemorySink::new());
    assert_eq!(
        h.ledger.unclean_previous_stop(),
        Some(2),
        "the lost rows are reported"
    );
    assert_eq!(h.ledger.unclean_previous_stop_sums(), [5, 5, 0, 0]);
    h.flusher.flush_now().await;
    let a = accounting(&h);
    assert_eq!(
        (a.minute.accepted, a.minute.spilled),
        (0, 0),
        "nothing reloaded"
    );
}

/// An unreadable line in a spill segment is set aside and counted, the rest replayed.
#[tokio::test]
async fn an_unreadable_spill_line_is_counted_and_the_rest_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let good = r#"{"time":"t","writer":"w","incarnation":0,"flush_seq":1,"outcome":"spilled","family":"generic","table":"countersink.counts_by_minute","granularity":"minute","key":{"name":"hits","tags":""},"day":"2026-11-30","minute":5,"deltas":{"value":3}}"#;
    // A line that is not UTF-8 too (a flipped byte), with a row after it: read as text it
    // stopped every later read at it.
    let mut segment =
        format!("{{\"spill_segment\":{{\"consumes\":null}}}}\n{good}\nnot json\n").into_bytes();
    segment.extend(b"{\"time\":\"\xff\"}\n");
    segment.extend(good.replace("\"value\":3", "\"value\":4").as_bytes());
    segment.push(b'\n');
    std::fs::write(
        dir.path().join("spill.0000000000.000000000001.jsonl"),
        segment,
    )
    .unwrap();
    let sink = MemorySink::new();
    let mut h = harness(&config, sink.clone());
    h.flusher.flush_now().await;
    assert_eq!(h.ledger.corrupt_lines(), [0, 0, 2]);
    assert_eq!(sink.total(Granularity::Minute), 7);
    assert!(
        std::fs::read_to_string(dir.path().join("spill.corrupt.jsonl"))
            .unwrap()
            .contains("not json")
    );
}

/// Spills 40 keys' rows (40 minute rows and 40 day rows) into `config`'s state
/// directory: their store is down, and the flusher finishes.
async fn spill_forty_keys(config: &Config) {
    let down = MemorySink::new();
    down.set_script(|_, _| {
        Some((
            Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
            false,
        ))
    });
    let h = harness(config, down);
    for i in 0..40 {
        let i = i.to_string();
        h.engine
            .record("hits", &[("i", i.as_str())][..], 1, T0, None)
            .unwrap();
    }
    let report = h.flusher.finish().await;
    assert_eq!(report.spilled, 80, "40 minute rows and 40 day rows");
}

/// A spill larger than the memory budget comes back in chunks that fit it, one per
/// flush, and every row arrives once.
#[tokio::test]
async fn replay_streams_the_spill_in_chunks_that_fit_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    spill_forty_keys(&config).await;
    let mut small = config.clone();
    small.limits.max_pending_rows = 16;
    let sink = MemorySink::new();
    let mut h = harness(&small, sink.clone());
    let mut flushes = 0;
    while sink.total(Granularity::Minute) + sink.total(Granularity::Day) < 80 {
        let report = h.flusher.flush_now().await;
        flushes += 1;
        assert!(
            report.rows <= 8,
            "a chunk takes at most half the room of a 16-row budget: {report:?}"
        );
        assert!(flushes < 30, "the replay makes progress");
    }
    assert!(flushes >= 10, "80 rows in chunks of at most 8: {flushes}");
    assert_eq!(
        (
            sink.total(Granularity::Minute),
            sink.total(Granularity::Day)
        ),
        (40, 40),
        "each row once"
    );
    let a = accounting(&h);
    assert!(a.is_balanced(), "{a:?}");
}

/// A replay chunk the store did not answer (every write timed out: logged unknown, not
/// sent again) leaves the flusher believing the store down. With no traffic, nothing
/// else would show it answering, and the rest of the spill waited for a restart. A
/// round that sends nothing now lets the next try a chunk.
#[tokio::test]
async fn the_replay_goes_on_after_an_unanswered_chunk_without_traffic() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    spill_forty_keys(&config).await;
    let mut small = config.clone();
    small.limits.max_pending_rows = 16;
    let sink = MemorySink::new();
    sink.set_script(|_, _| {
        Some((
            Outcome::Unknown(WriteError::new("write_timeout", "timed out")),
            false,
        ))
    });
    let mut h = harness(&small, sink.clone());
    let first = h.flusher.flush_now().await;
    assert!(
        first.unknown > 0,
        "the first chunk went unanswered: {first:?}"
    );
    sink.clear_script();
    for _ in 0..60 {
        h.flusher.flush_now().await;
    }
    let a = accounting(&h);
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        sink.total(Granularity::Minute) + sink.total(Granularity::Day) + first.unknown as i128,
        80,
        "every spilled row but the unanswered chunk's reached the store"
    );
}

/// Counts the writes each chunk of a flush planned.
#[derive(Default)]
struct ChunkSizes(parking_lot::Mutex<Vec<usize>>);

impl crate::flush::FlushObserver for ChunkSizes {
    /// The counter writes' chunks: this test's families keep counters only.
    fn planned(&self, writes: &[&dyn crate::sink::PlannedWrite]) {
        self.0.lock().push(writes.len());
    }
}

/// A flush round drains the buffer in chunks whose writes fit the flush's quarter of
/// `limits.max_pending_bytes`, never all pending rows at once: with a share of 40,000
/// estimated bytes (at least 208 per write, so at most 192 writes per chunk), 400 rows
/// (800 writes) go out in several chunks within one round, and every row arrives once.
#[tokio::test]
async fn a_flush_sends_the_buffer_in_chunks_that_fit_its_share_of_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.limits.max_pending_bytes = 4 * 40_000;
    let sink = MemorySink::new();
    let mut h = harness(&config, sink.clone());
    let chunks = Arc::new(ChunkSizes::default());
    h.flusher.observe(chunks.clone());
    for i in 0..400 {
        let i = i.to_string();
        h.engine
            .record("hits", &[("i", i.as_str())][..], 1, T0, None)
            .unwrap();
    }
    assert_eq!(h.engine.aggregator().pending_rows(), 400);
    let report = h.flusher.flush_now().await;
    assert_eq!(
        (report.rows, report.writes, report.applied),
        (400, 800, 800)
    );
    let sizes = chunks.0.lock().clone();
    assert!(sizes.len() >= 5, "{} chunks: {sizes:?}", sizes.len());
    assert!(sizes.iter().all(|&n| n <= 192), "{sizes:?}");
    assert_eq!(sizes.iter().sum::<usize>(), 800);
    assert_eq!(h.engine.aggregator().pending_rows(), 0);
    assert_eq!(
        (
            sink.total(Granularity::Minute),
            sink.total(Granularity::Day)
        ),
        (400, 400)
    );
    assert!(accounting(&h).is_balanced());
}

/// While the store applies nothing, a round stops after its first chunk: the re-queued
/// rows wait for the back-off instead of going round again, and the rest of the buffer
/// is not drained into a store that is down.
#[tokio::test]
async fn a_round_stops_at_a_chunk_that_applied_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.limits.max_pending_bytes = 4 * 40_000;
    let sink = MemorySink::new();
    sink.set_script(|_, _| {
        Some((
            Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
            false,
        ))
    });
    let mut h = harness(&config, sink.clone());
    for i in 0..400 {
        let i = i.to_string();
        h.engine
            .record("hits", &[("i", i.as_str())][..], 1, T0, None)
            .unwrap();
    }
    let report = h.flusher.flush_now().await;
    assert!(report.rows > 0 && report.rows <= 96, "{report:?}");
    assert_eq!(report.applied, 0);
    assert_eq!(h.engine.aggregator().pending_rows(), 400 + report.rows);
    assert!(accounting(&h).is_balanced());
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

/// `Recorder::incr` refuses what a counter line could not carry, as the facade does: with
/// a `,` in a tag value, `[("a", "1,b:2")]` and `[("a", "1"), ("b", "2")]` would have the
/// same canonical tag string and sum into one generic row.
#[tokio::test]
async fn recorder_refuses_names_and_tags_a_line_could_not_carry() {
    use crate::engine::RecordError::Invalid;
    use crate::line::InvalidReason::{BadName, BadTag, NoName};
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let sink = MemorySink::new();
    let recorder = crate::Recorder::start(&config, sink.clone()).await.unwrap();
    assert_eq!(
        recorder.incr("evt", &[("a", "1,b:2")], 5),
        Err(Invalid(BadTag))
    );
    assert_eq!(
        recorder.incr("evt", &[("a:b", "1")], 5),
        Err(Invalid(BadTag))
    );
    assert_eq!(
        recorder.incr("evt", &[("a", "x|y")], 5),
        Err(Invalid(BadTag))
    );
    assert_eq!(recorder.incr("evt", &[("", "1")], 5), Err(Invalid(BadTag)));
    assert_eq!(
        recorder.incr("evt", &[("a", "\n")], 5),
        Err(Invalid(BadTag))
    );
    assert_eq!(recorder.incr("e:vt", &[], 5), Err(Invalid(BadName)));
    assert_eq!(recorder.incr("", &[], 5), Err(Invalid(NoName)));
    assert_eq!(
        recorder.incr_at("evt", &[("a", "1,b:2")], 5, 1_700_000_000),
        Err(Invalid(BadTag))
    );
    recorder
        .incr("evt", &[("a", "1"), ("b", "2"), ("canary", "")], 1)
        .unwrap();
    let counters = recorder.engine().aggregator().counters();
    assert_eq!(counters.invalid_for(BadTag), 6);
    assert_eq!(counters.invalid_for(BadName), 1);
    assert_eq!(counters.invalid_for(NoName), 1);
    recorder.shutdown().await.unwrap();
    assert_eq!(
        sink.total(Granularity::Minute),
        1,
        "only the valid increment"
    );
}

#[tokio::test]
async fn a_row_requeued_before_its_family_moved_goes_to_the_old_tables() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let sink = MemorySink::new();
    let mut h = harness(&config, sink.clone());
    let views = crate::vocabulary::FamilyId(1);
    h.engine
        .record("page.views", &[("page_id", "p")][..], 5, T0, None)
        .unwrap();
    // The store is away: the row is re-queued under the family as it was.
    sink.set_script(|_, _| {
        Some((
            Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
            false,
        ))
    });
    let first = h.flusher.flush_now().await;
    assert_eq!(first.requeued, 2);
    // The family moves to other tables (a live reload's swap), and takes a new row.
    let mut moved = config.clone();
    moved.families[0].minute_table = "metrics.views_by_minute_v2".into();
    let families = crate::family::Families::from_config(&moved).unwrap();
    let reshape = h.engine.families().reshape(families).unwrap();
    assert_eq!(reshape.retired(), [views]);
    h.engine.reshape_families(reshape).unwrap();
    let moved_id = h.engine.families().by_name("views").unwrap().id;
    assert_ne!(moved_id, views);
    h.engine
        .record("page.views", &[("page_id", "p")][..], 7, T0, None)
        .unwrap();

    sink.clear_script();
    let second = h.flusher.flush_now().await;
    assert_eq!((second.applied, second.requeued), (4, 0));
    let per_family = |family| -> i128 {
        sink.rows()
            .iter()
            .filter(|(key, _)| key.0 == family && key.1 == Granularity::Minute)
            .map(|(_, deltas)| deltas.iter().sum::<i128>())
            .sum()
    };
    assert_eq!(per_family(views), 5, "the old definition keeps its row");
    assert_eq!(per_family(moved_id), 7);
    let a = accounting(&h);
    assert!(a.is_balanced(), "{a:?}");
    // The journal and the records know the new definition.
    assert!(read_log(dir.path(), "rejected.jsonl").is_empty());
}
