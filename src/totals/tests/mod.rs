//! The totals path through the flusher, against the in-memory sink (which keeps the later
//! write time, as a regular table does): exact totals under every kind of failure, the
//! accounting identity, spill and replay across incarnations, the memory budget, and a
//! counter family beside it. Here: the writer and its helpers, retries, refusals and the
//! memory limit; beside it, `replay.rs` (the spill's bound, replays within the budget,
//! refusals, final flushes), `replay_kills.rs` (replays killed mid-send, full spills at
//! restart, counter rows and totals through one cursor) and `upgrade.rs` (an earlier
//! version's totals files).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::config::{Config, CountingMode, FamilyConfig};
use crate::engine::Engine;
use crate::flush::Flusher;
use crate::sink::{MemorySink, Outcome, Sink, WriteError};
use crate::telemetry::{Accounting, Ledger};
use crate::vocabulary::Granularity;

use super::book;

mod replay;
mod replay_kills;
mod upgrade;

/// Now, so that rows stay open (they close an hour and two minutes after their minute).
fn now() -> i64 {
    crate::bucket::unix_secs(std::time::SystemTime::now())
}

fn config(dir: &std::path::Path) -> Config {
    let mut config = Config::default();
    config.state.dir = dir.to_owned();
    config.generic.mode = CountingMode::WriterTotals;
    config.families.push(FamilyConfig {
        mode: CountingMode::WriterTotals,
        ..FamilyConfig::seed_views()
    });
    config.families.push(FamilyConfig {
        name: "counted".into(),
        minute_table: "metrics.c_by_minute".into(),
        day_table: "metrics.c_by_day".into(),
        columns: [("c.views".to_string(), "views".to_string())].into(),
        ..FamilyConfig::seed_views()
    });
    config.flush.shutdown_deadline = Duration::from_millis(300);
    config
}

struct Writer<S: Sink> {
    engine: Arc<Engine>,
    ledger: Arc<Ledger>,
    flusher: Flusher<S>,
}

fn writer<S: Sink>(config: &Config, sink: S) -> Writer<S> {
    let engine = Arc::new(Engine::with_seed(config, Some(1)).unwrap());
    let flusher = Flusher::open(engine.clone(), Arc::new(sink), config).unwrap();
    let ledger = flusher.ledger().clone();
    Writer {
        engine,
        ledger,
        flusher,
    }
}

/// The set-up most tests below share: the views family alone, keeping running totals
/// (no generic family, no counter family beside it: every write the store sees is one of
/// its totals), its state directory in a fresh tempdir, and an empty in-memory store. A
/// test sets what is its own (limits, the store's answers, files left in the state
/// directory) before it opens a [`writer`] on them.
fn views_alone() -> (tempfile::TempDir, Config, MemorySink) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.families.truncate(1);
    config.generic.enabled = false;
    (dir, config, MemorySink::new())
}

impl<S: Sink> Writer<S> {
    fn accounting(&self) -> Accounting {
        Accounting::read(&self.engine, &self.ledger)
    }

    fn incr(&self, page: &str, delta: i64, at: i64) {
        let tags: &[(&str, &str)] = &[("page_id", page)];
        self.engine
            .record("page.views", tags, delta, at, None)
            .unwrap();
        self.engine
            .record("c.views", tags, delta, at, None)
            .unwrap();
        self.engine
            .record("req", &[("page", page)][..], delta, at, None)
            .unwrap();
    }
}

fn error() -> WriteError {
    WriteError::new("write_timeout", "injected")
}

/// Fails every third totals write in turn as a timeout that applied, a timeout that did
/// not, and a transient refusal; the totals end exact and nothing is logged as unknown.
#[tokio::test]
async fn every_failure_is_retried_until_the_totals_are_exact() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let sink = MemorySink::new();
    sink.set_totals_script(|n, _| match n % 9 {
        1 => Some((Outcome::Unknown(error()), true)),
        4 => Some((Outcome::Unknown(error()), false)),
        7 => Some((Outcome::NotAppliedTransient(error()), false)),
        _ => None,
    });
    let mut w = writer(&config, sink.clone());
    let t = now();
    let mut fed = 0_i128;
    for round in 0..20 {
        for page in 0..10 {
            let delta = (round % 3) + page - 2;
            w.incr(&format!("p{page}"), delta, t - 60 * (page % 3));
            fed += i128::from(delta);
        }
        w.flusher.flush_now().await;
    }
    sink.clear_totals_script();
    for _ in 0..40 {
        w.flusher.flush_now().await;
    }
    let a = w.accounting();
    assert!(a.is_balanced(), "{a:?}");
    for table in [Granularity::Hour, Granularity::Total] {
        // No family here has such a table: every delta settles as owing it nothing.
        assert_eq!(a.of(table).no_table, a.of(table).accepted, "{a:?}");
    }
    for table in [Granularity::Minute, Granularity::Day] {
        let stages = a.of(table);
        assert_eq!(
            (stages.unknown, stages.pending),
            (0, 0),
            "{table:?}: {stages:?}"
        );
        assert_eq!(stages.applied, 3 * fed, "{table:?}: three families");
        assert_eq!(
            sink.totals_sum(table),
            2 * fed,
            "{table:?}: the two totals families"
        );
        assert_eq!(
            sink.total(table),
            fed,
            "{table:?}: the counter family, no faults"
        );
    }
    assert!(sink.totals_requests() > 40, "failures were retried");
    assert!(
        !dir.path().join("unknown.jsonl").exists()
            || std::fs::read_to_string(dir.path().join("unknown.jsonl"))
                .unwrap()
                .is_empty()
    );
}

/// A clean restart spills nothing; SIGTERM with the store down spills the newest totals,
/// which the next incarnation writes into the first one's column, with the first one's
/// write time, while it counts into a column of its own.
#[tokio::test]
async fn spilled_totals_are_written_again_by_the_next_incarnation() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let sink = MemorySink::new();
    let t = now();
    let mut first = writer(&config, sink.clone());
    first.incr("a", 5, t);
    first.flusher.flush_now().await;
    first.incr("a", 2, t);
    let down = Arc::new(AtomicU64::new(1));
    let flag = down.clone();
    sink.set_totals_script(move |_, _| {
        (flag.load(Ordering::Relaxed) == 1).then(|| {
            (
                Outcome::NotAppliedTransient(WriteError::new("no_connection", "down")),
                false,
            )
        })
    });
    let first_writer = first.flusher_writer();
    let report = first.flusher.finish().await;
    assert!(report.totals.rows_spilled > 0, "{report:?}");
    let a = Accounting::read(&first.engine, &first.ledger);
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        a.minute.spilled,
        2 * 2,
        "the unapplied part: 2 in each totals family"
    );

    down.store(0, Ordering::Relaxed);
    let mut second = writer(&config, sink.clone());
    assert_ne!(second.flusher_writer(), first_writer);
    second.incr("a", 1, t);
    second.flusher.flush_now().await;
    let a = second.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(a.minute.pending, 0, "{a:?}");
    assert_eq!(
        sink.totals_sum(Granularity::Minute),
        2 * (5 + 2 + 1),
        "first column 7, second column 1, in both totals families"
    );
    let writers: std::collections::BTreeSet<String> =
        sink.totals().keys().map(|k| k.3.clone()).collect();
    assert_eq!(writers.len(), 2, "{writers:?}");
    let files: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| is_totals_file(n))
        .collect();
    assert!(files.is_empty(), "replayed segments are gone: {files:?}");
}

/// A rejected write logs its unapplied part; the rest of the row keeps counting.
#[tokio::test]
async fn a_permanent_refusal_is_logged_and_counted_as_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let sink = MemorySink::new();
    sink.set_totals_script(|n, _| {
        (n <= 4).then(|| {
            (
                Outcome::NotAppliedPermanent(WriteError::new("invalid", "no")),
                false,
            )
        })
    });
    let mut w = writer(&config, sink.clone());
    let t = now();
    w.incr("a", 3, t);
    w.flusher.flush_now().await;
    w.incr("a", 1, t);
    w.flusher.flush_now().await;
    let a = w.accounting();
    assert!(a.is_balanced(), "{a:?}");
    // Rejected: 3 in each totals family; applied: 1 in each, and 4 in the counter family.
    assert_eq!((a.minute.rejected, a.minute.applied), (6, 2 + 4));
    let log = std::fs::read_to_string(dir.path().join("rejected.jsonl")).unwrap();
    assert_eq!(log.lines().count(), 4, "{log}");
    assert_eq!(sink.totals_sum(Granularity::Minute), 2);
}

/// A write whose outcome is unknown (it did apply: the store holds 10), then a refusal
/// of the next total (12): the record logs the 12 not known applied, so the store must
/// not keep the 10 too. One more write of the confirmed total (0, a later write time)
/// brings the cell back, and the store plus the rejected log hold what was fed, once.
#[tokio::test]
async fn a_refusal_after_an_unknown_write_leaves_nothing_counted_twice() {
    let (dir, config, sink) = views_alone();
    sink.set_totals_script(|n, _| match n {
        1 | 2 => Some((
            Outcome::Unknown(WriteError::new("write_timeout", "x")),
            true,
        )),
        3 | 4 => Some((
            Outcome::NotAppliedPermanent(WriteError::new("invalid", "no")),
            false,
        )),
        _ => None,
    });
    let mut w = writer(&config, sink.clone());
    let t = now();
    let record = |delta: i64| {
        w.engine
            .record("page.views", &[("page_id", "a")][..], delta, t, None)
            .unwrap();
    };
    record(10);
    w.flusher.flush_now().await;
    assert_eq!(
        sink.totals_sum(Granularity::Minute),
        10,
        "the unknown write applied"
    );
    record(2);
    for _ in 0..10 {
        w.flusher.flush_now().await;
    }
    let log = std::fs::read_to_string(dir.path().join("rejected.jsonl")).unwrap();
    let rejected: Vec<crate::state::WriteRecord> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rejected.len(), 2, "a minute and a day record: {log}");
    let rejected_minute: i64 = rejected
        .iter()
        .filter(|r| r.granularity == "minute")
        .map(|r| r.deltas["views"])
        .sum();
    assert_eq!(rejected_minute, 12);
    assert_eq!(
        i128::from(rejected_minute) + sink.totals_sum(Granularity::Minute),
        12,
        "the store and the rejected log hold the 12 fed, once"
    );
    assert_eq!(
        sink.totals_requests(),
        6,
        "the confirmed total written once more"
    );
    let a = w.accounting();
    assert!(a.is_balanced(), "{a:?}");
}

/// Held totals take room in the buffer's budget: new rows beyond it are dropped and
/// counted, never silently lost.
#[tokio::test]
async fn held_totals_count_against_the_memory_limit() {
    let (_dir, mut config, sink) = views_alone();
    config.limits.max_pending_rows = 10;
    config.generic.mode = CountingMode::Counter;
    let mut w = writer(&config, sink.clone());
    let t = now();
    for page in 0..8 {
        w.engine
            .record(
                "page.views",
                &[("page_id", format!("p{page}").as_str())][..],
                1,
                t,
                None,
            )
            .unwrap();
    }
    w.flusher.flush_now().await;
    let a = w.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        w.engine.aggregator().pending_rows_estimate(),
        10,
        "held rows are charged"
    );
    assert!(a.minute.dropped + a.day.dropped > 0, "{a:?}");
    assert_eq!(w.ledger.totals_rows().0, 10);
}

impl<S: Sink> Writer<S> {
    fn flusher_writer(&self) -> String {
        self.flusher.totals_writer().to_owned()
    }
}

/// A closed row that keeps failing for `flush.requeue_max_age` is spilled and leaves
/// memory; once the store answers again this process writes it back from the spill file
/// (with its own writer and write time) and the totals end exact.
#[tokio::test]
async fn a_closed_row_failing_too_long_is_spilled_and_written_back_once_the_store_answers() {
    let (dir, mut config, sink) = views_alone();
    config.limits.timestamp_max_past = Duration::from_secs(1);
    config.flush.requeue_max_age = Duration::from_secs(1);
    let down = Arc::new(AtomicU64::new(1));
    let flag = down.clone();
    sink.set_totals_script(move |_, _| {
        (flag.load(Ordering::Relaxed) == 1).then(|| (Outcome::Unknown(error()), false))
    });
    let mut w = writer(&config, sink.clone());
    let closed_minute = now() - 600;
    let tags: &[(&str, &str)] = &[("page_id", "old")];
    w.engine
        .record("page.views", tags, 4, closed_minute, None)
        .unwrap();
    w.flusher.flush_now().await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // The minute is closed; its day too only when it ended over 2 minutes ago (this test
    // running just after midnight).
    let day_end = (closed_minute.div_euclid(86_400) + 1) * 86_400;
    let day_closed = day_end + 1 + book::CLOSE_MARGIN_SECS <= now();
    let report = w.flusher.flush_now().await;
    assert_eq!(
        report.totals.rows_spilled,
        1 + usize::from(day_closed),
        "the minute row, and the day row if its day is closed: {report:?}"
    );
    let held = u64::from(!day_closed);
    assert_eq!(w.ledger.totals_rows(), (held, held), "closed rows released");
    let a = w.accounting();
    assert!(a.is_balanced(), "{a:?}");
    let day_held = if day_closed { 0 } else { 4 };
    assert_eq!(
        (
            a.minute.spilled,
            a.minute.pending,
            a.day.pending,
            a.day.spilled
        ),
        (4, 0, day_held, 4 - day_held)
    );
    assert_eq!(
        w.engine.record("page.views", tags, 1, closed_minute, None),
        Ok(()),
        "accepted by the engine"
    );
    w.flusher.flush_now().await;
    let a = w.accounting();
    assert_eq!(
        (a.minute.dropped, a.day.dropped),
        (1, 1),
        "a released row cannot restart from zero, and its day does not take the delta \
         alone (a minute and its day never disagree): {a:?}"
    );

    down.store(0, Ordering::Relaxed);
    w.engine
        .record("page.views", &[("page_id", "new")][..], 1, now(), None)
        .unwrap();
    for _ in 0..20 {
        w.flusher.flush_now().await;
    }
    let a = w.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        (a.minute.spilled, a.minute.pending, a.minute.applied),
        (0, 0, 5)
    );
    assert_eq!((a.day.pending, a.day.applied), (0, 5));
    assert_eq!(sink.totals_sum(Granularity::Minute), 5);
    assert_eq!(sink.totals_sum(Granularity::Day), 5);
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| is_totals_file(n))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Whether a file of the state directory holds spilled running totals: a totals spill
/// segment, or a spill file of an earlier version.
fn is_totals_file(name: &str) -> bool {
    name.starts_with("totals.") || name.ends_with(".totals.jsonl")
}

/// The totals spill segments of a state directory, and the records they hold.
fn totals_segments(dir: &std::path::Path) -> (u64, Vec<crate::state::WriteRecord>) {
    let mut bytes = 0;
    let mut records = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        if !entry
            .file_name()
            .to_string_lossy()
            .ends_with(".totals.jsonl")
        {
            continue;
        }
        bytes += entry.metadata().unwrap().len();
        let text = std::fs::read_to_string(entry.path()).unwrap();
        records.extend(text.lines().filter_map(|l| serde_json::from_str(l).ok()));
    }
    (bytes, records)
}

/// The store's totals rows by (series, writer column), values in column order.
type StoredTotals = std::collections::BTreeMap<(Vec<u8>, String), Vec<i64>>;

/// The file an earlier version spilled its running totals to, in its state directory.
const EARLIER_SPILL: &str = "totals.spill.jsonl";

/// Writes into the state directory `dir` an earlier process's totals spill file
/// ([`EARLIER_SPILL`]) of `rows` minute rows of the views family (three writer columns);
/// returns what it holds.
fn write_spill_file(dir: &std::path::Path, rows: usize) -> StoredTotals {
    let mut lines = String::with_capacity(rows * 300);
    let mut expected = StoredTotals::new();
    for i in 0..rows {
        let views = 1 + (i % 997) as i64;
        let record = crate::state::totals_files::LegacyTotalRecord {
            time: "2026-11-30T00:00:00Z".into(),
            writer: format!("earlier/{}/0000abcd", 1 + i % 3),
            family: "views".into(),
            table: "metrics.views_by_minute".into(),
            granularity: "minute".into(),
            key: [("page_id".to_string(), format!("p{i}"))].into(),
            day: "2026-11-30".into(),
            minute: Some((i % 1440) as i16),
            month: None,
            totals: [("bytes".to_string(), 0), ("views".to_string(), views)].into(),
            unconfirmed: [("bytes".to_string(), 0), ("views".to_string(), views)].into(),
            timestamp: 1_000 + i as i64,
            error: None,
        };
        lines.push_str(&serde_json::to_string(&record).unwrap());
        lines.push('\n');
        let series = crate::series::encode([record.key["page_id"].as_str()]);
        expected.insert((series.to_vec(), record.writer), vec![0, views]);
    }
    assert_eq!(expected.len(), rows, "one row each");
    std::fs::write(dir.join(EARLIER_SPILL), lines).unwrap();
    expected
}

/// The store's totals rows, as [`write_spill_file`] describes them.
fn stored(sink: &MemorySink) -> StoredTotals {
    sink.totals()
        .into_iter()
        .map(|(k, v)| ((k.2, k.3), v))
        .collect()
}

/// The files of spilled running totals left in the state directory (see
/// [`is_totals_file`]).
fn totals_files(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| is_totals_file(n))
        .collect()
}

/// What a replay holds in memory while its writes are planned, as the flusher shows them.
struct ReplayWatch {
    engine: Arc<Engine>,
    /// Per planned totals flush: its writes, and the budget's bytes in use then.
    seen: parking_lot::Mutex<Vec<(usize, usize)>>,
}

/// Its family keeps running totals only: every planned write is one (the counter stage
/// plans none).
impl crate::flush::FlushObserver for ReplayWatch {
    fn planned(&self, writes: &[&dyn crate::sink::PlannedWrite]) {
        let in_use = self.engine.aggregator().pending_bytes();
        self.seen.lock().push((writes.len(), in_use));
    }
}

/// The migrated segment of an earlier version's totals files (see
/// [`crate::state::totals_files`]): its path, made by opening the state directory once.
fn migrate(config: &Config) -> std::path::PathBuf {
    drop(crate::state::StateDir::open_with(&config.state, &super::Recovery).unwrap());
    let dir = &config.state.dir;
    let moved = crate::state::totals_files::migrated(dir).unwrap();
    let segment = dir.join(moved.expect("the old files were moved").file_name());
    assert!(segment.exists(), "the old files were moved");
    segment
}

/// The store's totals rows of the earlier writers' columns (what a spill file of
/// [`write_spill_file`] holds).
fn stored_earlier(sink: &MemorySink) -> StoredTotals {
    stored(sink)
        .into_iter()
        .filter(|((_, writer), _)| writer.starts_with("earlier/"))
        .collect()
}
