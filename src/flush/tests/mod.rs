//! Flusher tests against the in-memory sink: outcome classes, accounting, deadline,
//! spill and replay. Here: the harness and its helpers, exact totals across a day, the
//! outcome classes, rounds in chunks within the limit, and what `Recorder::incr` refuses;
//! beside it, `spill.rs` (spilling past the maximum age, a failed spill, damaged lines,
//! replays in chunks), `family_changes.rs` (replayed rows of a removed family refused,
//! rows re-queued across a family's move) and `stops.rs` (shutdown deadlines, the final
//! flush, unclean stops, a directory the wrapper left unfinished).

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

mod family_changes;
mod spill;
mod stops;

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

/// A store that is down: every write "not applied" (transient), so a final flush spills.
fn down_sink() -> MemorySink {
    let down = MemorySink::new();
    down.set_script(|_, _| {
        Some((
            Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
            false,
        ))
    });
    down
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
