//! The totals path through the flusher, against the in-memory sink (which keeps the later
//! write time, as a regular table does): exact totals under every kind of failure, the
//! accounting identity, spill and replay across incarnations, the memory budget, and a
//! counter family beside it.

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

/// Under a long outage of the totals table, closed rows failing past
/// `flush.requeue_max_age` are spilled only while `state.max_spill_bytes` has room: the
/// file stays within it, the rows beyond are dropped and counted (`spill_full`), and
/// once the store answers exactly the spilled totals reach it.
#[tokio::test]
async fn the_totals_spill_stays_within_max_spill_bytes_and_counts_what_it_drops() {
    const LIMIT: u64 = 10 << 10;
    const PAGES: i64 = 200;
    let (dir, mut config, sink) = views_alone();
    config.limits.timestamp_max_past = Duration::from_secs(1);
    config.flush.requeue_max_age = Duration::from_secs(1);
    config.state.max_spill_bytes = LIMIT;
    let down = Arc::new(AtomicU64::new(1));
    let flag = down.clone();
    sink.set_totals_script(move |_, _| {
        (flag.load(Ordering::Relaxed) == 1).then(|| {
            (
                Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
                false,
            )
        })
    });
    let mut w = writer(&config, sink.clone());
    let closed_minute = now() - 600;
    let mut fed = 0_i128;
    for page in 0..PAGES {
        let page_id = format!("p{page:03}");
        w.engine
            .record(
                "page.views",
                &[("page_id", page_id.as_str())][..],
                page + 1,
                closed_minute,
                None,
            )
            .unwrap();
        fed += i128::from(page + 1);
    }
    w.flusher.flush_now().await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let report = w.flusher.flush_now().await;

    let (size, records) = totals_segments(dir.path());
    assert!(
        size <= LIMIT,
        "the totals segments hold {size} bytes, past state.max_spill_bytes = {LIMIT}"
    );
    let spilled_minute: i128 = records
        .iter()
        .filter(|r| r.granularity == "minute")
        .map(|r| i128::from(r.deltas.get("views").copied().unwrap_or(0)))
        .sum();
    assert!(spilled_minute > 0, "some rows fit: {report:?}");
    let to_spill = report.totals.rows_spilled;
    let spill_full = w
        .ledger
        .late_drops()
        .get("spill_full")
        .copied()
        .unwrap_or(0);
    assert_eq!(
        report.totals.rows_spilled,
        records.len(),
        "the report counts the rows written"
    );
    assert!(spill_full > 0, "the overflow is counted: {report:?}");
    let a = w.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        (a.minute.spilled, a.minute.dropped),
        (spilled_minute, fed - spilled_minute),
        "{a:?} (spilled {to_spill} rows, {spill_full} dropped)"
    );

    // The store answers again: the spilled totals, and nothing else, reach it.
    down.store(0, Ordering::Relaxed);
    for _ in 0..20 {
        w.flusher.flush_now().await;
    }
    let stored = sink.totals();
    for record in records.iter().filter(|r| r.granularity == "minute") {
        let page = &record.key["page_id"];
        let cell = stored
            .iter()
            .find(|(k, _)| {
                k.1 == Granularity::Minute && crate::series::fields(&k.2).any(|f| f == page)
            })
            .map(|(_, v)| v.clone());
        // The family's columns in their order: bytes, views.
        let totals = &record.total.as_ref().unwrap().totals;
        let fed = vec![totals["bytes"], totals["views"]];
        assert_eq!(cell, Some(fed), "{page}");
    }
    assert_eq!(sink.totals_sum(Granularity::Minute), spilled_minute);
    let a = w.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        (a.minute.applied, a.minute.dropped, a.minute.pending),
        (spilled_minute, fed - spilled_minute, 0)
    );
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

/// A spill file far larger than the memory budget, left by an earlier process, is
/// replayed in chunks the budget pays for: what a flush holds of it is charged and stays
/// within `limits.max_pending_bytes`, and every row reaches the store once, with the
/// total the file holds.
#[tokio::test]
async fn a_large_replay_streams_within_the_memory_budget_and_every_row_applies_once() {
    const ROWS: usize = 100_000;
    const MAX_PENDING_BYTES: usize = 4 << 20;
    let (dir, mut config, sink) = views_alone();
    config.limits.max_pending_bytes = MAX_PENDING_BYTES;
    let expected = write_spill_file(dir.path(), ROWS);

    let mut w = writer(&config, sink.clone());
    let watch = Arc::new(ReplayWatch {
        engine: w.engine.clone(),
        seen: Default::default(),
    });
    w.flusher.observe(watch.clone());
    let mut flushes = 0;
    while sink.totals_requests() < ROWS as u64 && flushes < 5_000 {
        w.flusher.flush_now().await;
        flushes += 1;
    }

    // A replayed row costs at least the write planned for it.
    let least_per_row = size_of::<crate::sink::TotalsWrite>() + size_of::<crate::sink::TotalRow>();
    for &(writes, in_use) in watch.seen.lock().iter() {
        assert!(
            writes * least_per_row <= MAX_PENDING_BYTES,
            "one flush planned {writes} replayed writes, at least {} bytes, past limits.max_pending_bytes = {MAX_PENDING_BYTES}",
            writes * least_per_row
        );
        assert!(
            in_use >= writes * least_per_row,
            "{writes} replayed rows held, but the budget is charged {in_use} bytes"
        );
        assert!(in_use <= MAX_PENDING_BYTES, "{in_use} bytes in use");
    }
    assert_eq!(
        sink.totals_requests(),
        ROWS as u64,
        "each row sent once ({flushes} flushes)"
    );
    assert!(
        stored(&sink) == expected,
        "the store holds what the file held"
    );
    let a = w.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(a.minute.pending, 0, "{a:?}");
    let left = totals_files(dir.path());
    assert!(left.is_empty(), "replayed files are gone: {left:?}");
    assert_eq!(
        w.engine.aggregator().pending_bytes(),
        0,
        "the replay's room is back"
    );
}

/// After an outage every row of the book comes due at once: a flush's totals stage takes
/// what fits the flush's share of the memory limit (the rest waits, still charged to the
/// budget, for the next round), every round or final flush writes each row once, and
/// the final flush goes on until the book has nothing left to write.
#[tokio::test]
async fn rows_due_after_an_outage_go_out_in_stages_the_flush_share_pays_for() {
    const MAX_PENDING_BYTES: usize = 1 << 20;
    const PAGES: i64 = 2_000;
    let flush_share = MAX_PENDING_BYTES / 4;
    let least_per_row = size_of::<crate::sink::TotalsWrite>() + size_of::<crate::sink::TotalRow>();
    for final_flush in [false, true] {
        let (_dir, mut config, sink) = views_alone();
        config.limits.max_pending_bytes = MAX_PENDING_BYTES;
        // The final flush's stages are under test, not its deadline: the tests' 300 ms
        // is too short for 4,000 rows in a debug build on a busy machine, and what the
        // deadline cuts off is spilled, not written.
        config.flush.shutdown_deadline = Duration::from_secs(120);
        let down = Arc::new(AtomicU64::new(1));
        let flag = down.clone();
        sink.set_totals_script(move |_, _| {
            (flag.load(Ordering::Relaxed) == 1).then(|| {
                (
                    Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
                    false,
                )
            })
        });
        let w = writer(&config, sink.clone());
        let t = now();
        for page in 0..PAGES {
            let page_id = format!("p{page:04}");
            w.engine
                .record(
                    "page.views",
                    &[("page_id", page_id.as_str())][..],
                    page + 1,
                    t,
                    None,
                )
                .unwrap();
        }
        let Writer {
            engine,
            ledger,
            mut flusher,
        } = w;
        flusher.flush_now().await;
        assert!(sink.totals().is_empty(), "the store is down");
        let watch = Arc::new(ReplayWatch {
            engine: engine.clone(),
            seen: Default::default(),
        });
        flusher.observe(watch.clone());
        down.store(0, Ordering::Relaxed);
        let sent_before = sink.totals_requests() as usize;
        let rows = 2 * PAGES as usize; // a minute and a day row each
        if final_flush {
            flusher.finish().await;
        } else {
            for _ in 0..200 {
                flusher.flush_now().await;
                if sink.totals().len() == rows {
                    break;
                }
            }
        }
        assert_eq!(sink.totals().len(), rows, "every row written");
        assert_eq!(
            sink.totals_requests() as usize - sent_before,
            rows,
            "each row written once (a write each: one page, one partition a table)"
        );
        let seen = watch.seen.lock();
        let stages = seen.iter().filter(|(writes, _)| *writes > 0).count();
        assert!(stages > 1, "more than one stage: {seen:?}");
        for &(writes, _) in seen.iter() {
            assert!(
                writes * least_per_row <= flush_share,
                "one stage planned {writes} writes, at least {} bytes, past the flush's share {flush_share}",
                writes * least_per_row
            );
        }
        let a = Accounting::read(&engine, &ledger);
        assert!(a.is_balanced(), "{a:?}");
        assert_eq!((a.minute.pending, a.minute.dropped), (0, 0), "{a:?}");
    }
}

/// Spilled totals a configuration change made unmappable (their family counts with
/// counters now) are refused a chunk at a time, within the chunk's room: each refused
/// record is held until its chunk's read ends.
#[tokio::test]
async fn refused_totals_are_read_a_chunk_at_a_time() {
    const ROWS: usize = 2_000;
    let (dir, mut config, sink) = views_alone();
    write_spill_file(dir.path(), ROWS);
    config.families[0].mode = CountingMode::Counter;
    config.limits.max_pending_rows = 200;
    let mut w = writer(&config, sink.clone());
    let rejected = || {
        std::fs::read_to_string(dir.path().join("rejected.jsonl"))
            .map(|log| log.lines().count())
            .unwrap_or(0)
    };
    w.flusher.flush_now().await;
    let first = rejected();
    assert!(
        first > 0 && first <= 100,
        "one chunk, at most half the row limit: {first} refused"
    );
    for _ in 0..100 {
        w.flusher.flush_now().await;
        if rejected() == ROWS {
            break;
        }
    }
    assert_eq!(rejected(), ROWS);
    assert!(sink.totals().is_empty(), "nothing written");
    let a = w.accounting();
    assert!(a.is_balanced(), "{a:?}");
}

/// A refused total is logged in `rejected.jsonl` as it is read, and only the durable
/// cursor passing it keeps the next start from logging it again: it never shares a chunk
/// with rows, whose cursor is durable only once their flush's group ends. A process
/// whose replay chunk read rows and never made its group commit (the journal fails
/// here: on disk, what a kill before the commit leaves) is dropped, and the next start
/// replays the spill: every refused total is logged once, whether it lies before,
/// between or after rows to write, and every other row reaches the store.
#[tokio::test]
async fn a_refused_total_beside_rows_is_logged_once_after_a_kill_before_the_group_commit() {
    // Per spilled row: whether its family is gone (refused at replay).
    for layout in [&[false, true, false][..], &[true, false], &[false, true]] {
        let (dir, config, sink) = views_alone();
        let mut expected = write_spill_file(dir.path(), layout.len());
        let file = dir.path().join(EARLIER_SPILL);
        let text = std::fs::read_to_string(&file).unwrap();
        let mut lines = String::new();
        for (line, gone) in text.lines().zip(layout) {
            let line = if *gone {
                let renamed = line.replace("\"family\":\"views\"", "\"family\":\"gone\"");
                assert_ne!(renamed, line, "the family is renamed");
                renamed
            } else {
                line.to_owned()
            };
            lines.push_str(&line);
            lines.push('\n');
        }
        std::fs::write(&file, lines).unwrap();
        for (i, _) in layout.iter().enumerate().filter(|(_, gone)| **gone) {
            let series = crate::series::encode([format!("p{i}").as_str()]);
            expected.retain(|(s, _), _| s.as_slice() != &*series);
        }
        {
            let mut w = writer(&config, MemorySink::new());
            w.flusher.fail_journal_writes();
            w.flusher.flush_now().await;
            // Killed: nothing more of this process reaches the disk.
        }
        let mut w = writer(&config, sink.clone());
        // A flush writes one chunk of rows, the refusals before it with it.
        for _ in 0..layout.len() + 1 {
            w.flusher.flush_now().await;
        }
        assert!(!w.flusher.state().has_unreplayed(), "{layout:?}: replayed");
        let log = std::fs::read_to_string(dir.path().join("rejected.jsonl")).unwrap();
        let refused = layout.iter().filter(|gone| **gone).count();
        assert_eq!(log.lines().count(), refused, "{layout:?}: once each: {log}");
        assert!(
            log.lines().all(|l| l.contains("replay_unmappable")),
            "{log}"
        );
        assert!(
            stored_earlier(&sink) == expected,
            "{layout:?}: every row that maps reached the store"
        );
        let a = w.accounting();
        assert!(a.is_balanced(), "{a:?}");
    }
}

/// A final flush in several chunks (more rows than one stage takes) with the store down
/// and no spill room: every chunk's dropped totals are in `status.json`, not only the
/// last chunk's, and the stop is unclean.
#[tokio::test]
async fn every_chunk_of_a_final_flush_reports_the_totals_it_lost() {
    const PAGES: i64 = 2_000;
    let (dir, mut config, sink) = views_alone();
    config.limits.max_pending_bytes = 1 << 20;
    config.state.max_spill_bytes = 1;
    sink.set_totals_script(|_, _| {
        Some((
            Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
            false,
        ))
    });
    let w = writer(&config, sink.clone());
    let t = now();
    for page in 0..PAGES {
        let page_id = format!("p{page:04}");
        w.engine
            .record(
                "page.views",
                &[("page_id", page_id.as_str())][..],
                1,
                t,
                None,
            )
            .unwrap();
    }
    let Writer {
        engine,
        ledger,
        flusher,
    } = w;
    flusher.finish().await;
    let a = Accounting::read(&engine, &ledger);
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(a.minute.dropped, i128::from(PAGES), "{a:?}");
    let status: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("status.json")).unwrap())
            .unwrap();
    assert_eq!(status["clean"], false);
    assert_eq!(
        status["pending_rows"],
        2 * PAGES,
        "every minute and day row lost: {status}"
    );
    assert_eq!(status["pending_sum"], PAGES.to_string(), "{status}");
}

/// A shutdown in the middle of a replay keeps, in its file, the rows read and not applied
/// and those not read yet; the next start writes every one of them.
#[tokio::test]
async fn a_shutdown_mid_replay_keeps_every_row_not_applied_for_the_next_start() {
    const ROWS: usize = 5_000;
    let (dir, mut config, sink) = views_alone();
    config.limits.max_pending_bytes = 1 << 20;
    let expected = write_spill_file(dir.path(), ROWS);
    // The store applies the first 100 writes, then refuses everything.
    sink.set_totals_script(|n, _| {
        (n > 100).then(|| {
            (
                Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
                false,
            )
        })
    });
    let mut first = writer(&config, sink.clone());
    first.flusher.flush_now().await;
    let applied_first = stored(&sink).len();
    assert_eq!(applied_first, 100, "the first chunk went out, in part");
    first.flusher.finish().await;
    let a = Accounting::read(&first.engine, &first.ledger);
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(a.minute.pending, 0, "{a:?}");
    assert_eq!(
        first.engine.aggregator().pending_bytes(),
        0,
        "the replay's room is back"
    );
    assert!(
        !totals_files(dir.path()).is_empty(),
        "the rows not applied wait in the spill"
    );
    let sent_first = sink.totals_requests();

    sink.clear_totals_script();
    let mut second = writer(&config, sink.clone());
    for _ in 0..200 {
        if totals_files(dir.path()).is_empty() {
            break;
        }
        second.flusher.flush_now().await;
    }
    assert!(stored(&sink) == expected, "every row reached the store");
    assert_eq!(
        sink.totals_requests() - sent_first,
        ROWS as u64 - 100,
        "each row not applied is sent once; those applied in the first run not again"
    );
    let a = second.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(a.minute.pending, 0, "{a:?}");
}

/// At the memory limit a delta takes both of its rows (its minute and its day) or
/// neither: the store's minute and day totals of every key agree, and what did not fit
/// is dropped in both, counted.
#[tokio::test]
async fn at_the_memory_limit_a_delta_takes_its_minute_and_its_day_or_neither() {
    const PAGES: usize = 8;
    let (_dir, mut config, sink) = views_alone();
    config.limits.max_pending_rows = 10;
    let mut w = writer(&config, sink.clone());
    let t = now();
    for page in 0..PAGES {
        let page_id = format!("p{page}");
        w.engine
            .record(
                "page.views",
                &[("page_id", page_id.as_str())][..],
                1,
                t,
                None,
            )
            .unwrap();
    }
    w.flusher.flush_now().await;
    let cells = sink.totals();
    let cell = |table: Granularity, page: &str| -> Option<Vec<i64>> {
        cells
            .iter()
            .find(|(k, _)| k.1 == table && crate::series::fields(&k.2).any(|f| f == page))
            .map(|(_, v)| v.clone())
    };
    let mut taken = 0;
    for page in 0..PAGES {
        let page_id = format!("p{page}");
        let (minute, day) = (
            cell(Granularity::Minute, &page_id),
            cell(Granularity::Day, &page_id),
        );
        assert_eq!(minute, day, "{page_id}: its minute and its day disagree");
        taken += usize::from(minute == Some(vec![0, 1]));
    }
    assert_eq!(taken, 5, "ten rows of room: five keys' minute and day");
    let a = w.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        (a.minute.dropped, a.day.dropped),
        (3, 3),
        "the same deltas dropped in both: {a:?}"
    );
    assert_eq!(w.ledger.totals_rows().0, 10);
    assert_eq!(
        w.engine.aggregator().pending_rows_estimate(),
        10,
        "the budget charges the book's ten rows: the refused keys' room went back"
    );
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

/// A start killed after it moved an earlier version's totals files into a segment and
/// before it removed them: the next start only removes them, and every row is written
/// once, not twice.
#[tokio::test]
async fn an_upgrade_cut_short_writes_each_moved_total_once() {
    const ROWS: usize = 500;
    let (dir, config, sink) = views_alone();
    let expected = write_spill_file(dir.path(), ROWS);
    let old = dir.path().join(EARLIER_SPILL);
    let kept = std::fs::read(&old).unwrap();
    migrate(&config);
    // As if the removal had not happened.
    std::fs::write(&old, kept).unwrap();

    let mut w = writer(&config, sink.clone());
    assert!(!old.exists(), "the old file is removed, not moved again");
    for _ in 0..50 {
        if totals_files(dir.path()).is_empty() {
            break;
        }
        w.flusher.flush_now().await;
    }
    assert!(
        stored(&sink) == expected,
        "every moved row reached the store"
    );
    assert_eq!(sink.totals_requests(), ROWS as u64, "each row sent once");
    let a = w.accounting();
    assert!(a.is_balanced(), "{a:?}");
    let fed: i128 = expected.values().map(|v| i128::from(v[1])).sum();
    assert_eq!((a.minute.accepted, a.minute.applied), (fed, fed), "{a:?}");
}

/// An upgrade of a directory an earlier version replayed spill from: its replay cursor
/// is past every segment of its runs. The moved segment sorts after that cursor (else it
/// would count as consumed and be deleted unread), and every total reaches the store.
#[tokio::test]
async fn an_upgrade_after_a_replay_writes_every_moved_total() {
    const ROWS: usize = 50;
    let (dir, config, sink) = views_alone();
    let expected = write_spill_file(dir.path(), ROWS);
    // The earlier runs: three starts, the last of which replayed up to its flush 7.
    std::fs::write(dir.path().join("incarnation"), "3").unwrap();
    let cursor = crate::state::Cursor {
        segment: crate::state::SegmentId::live(3, 7),
        offset: 0,
    };
    std::fs::write(
        dir.path().join("spill.cursor"),
        serde_json::to_vec(&Some(cursor)).unwrap(),
    )
    .unwrap();
    let mut w = writer(&config, sink.clone());
    for _ in 0..50 {
        if stored(&sink) == expected {
            break;
        }
        w.flusher.flush_now().await;
    }
    assert!(
        stored(&sink) == expected,
        "every moved row reached the store"
    );
    assert_eq!(sink.totals_requests(), ROWS as u64, "each row sent once");
}

/// A replay the store refuses: its rows are carried into a segment of their own even
/// when `state.max_spill_bytes` has no room for a second copy of them beside the segment
/// they were read from (they are on disk already: they move, they are not admitted), and
/// that segment is consumed; nothing is dropped, and once the store answers every total
/// reaches it.
#[tokio::test]
async fn a_refused_replay_is_carried_through_a_full_spill_and_drops_nothing() {
    const ROWS: usize = 200;
    for half_again in [false, true] {
        let (dir, mut config, sink) = views_alone();
        let expected = write_spill_file(dir.path(), ROWS);
        let migrated = migrate(&config);
        let size = std::fs::metadata(&migrated).unwrap().len();
        // A carried row is larger than a moved one (a request id, an error): half the
        // segment again is not room for them beside it; the segment's own size is none.
        let limit = if half_again { size + size / 2 } else { size };
        config.state.max_spill_bytes = limit;
        let down = Arc::new(AtomicU64::new(1));
        let flag = down.clone();
        sink.set_totals_script(move |_, _| {
            (flag.load(Ordering::Relaxed) == 1).then(|| {
                (
                    Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
                    false,
                )
            })
        });
        let mut w = writer(&config, sink.clone());
        let report = w.flusher.flush_now().await;
        assert_eq!(report.totals.writes, ROWS, "one chunk, every row written");
        let (bytes, records) = totals_segments(dir.path());
        assert_eq!(records.len(), ROWS, "every row still spilled, once");
        assert!(!migrated.exists(), "carried: the segment read is consumed");
        assert!(
            bytes <= 2 * size,
            "the carried chunk alone is left: {bytes} bytes, the segment read {size}"
        );
        let a = w.accounting();
        assert!(a.is_balanced(), "{a:?}");
        assert_eq!((a.minute.dropped, a.minute.pending), (0, 0), "{a:?}");
        assert!(w.ledger.late_drops().is_empty());

        // The store answers: a fresh row shows it, and the spill goes out.
        down.store(0, Ordering::Relaxed);
        w.engine
            .record("page.views", &[("page_id", "fresh")][..], 1, now(), None)
            .unwrap();
        for _ in 0..20 {
            w.flusher.flush_now().await;
            if totals_files(dir.path()).is_empty() {
                break;
            }
        }
        assert!(
            stored_earlier(&sink) == expected,
            "every spilled total reached the store"
        );
        let a = w.accounting();
        assert!(a.is_balanced(), "{a:?}");
        assert_eq!((a.minute.dropped, a.minute.pending), (0, 0), "{a:?}");
    }
}

/// A process killed while its flush sends a chunk of spilled totals (the files as they
/// are at that moment, copied aside, stand for the killed process's): the next start
/// finds the chunk in the journal's totals group, and writes again exactly the totals not
/// known applied, each once; the store then holds every spilled total, once per cell.
#[tokio::test]
async fn a_replay_killed_mid_send_lands_each_total_once_after_a_restart() {
    const ROWS: usize = 300;
    const SNAPSHOT_AT: u64 = 100;
    let (dir, config, sink) = views_alone();
    let killed = tempfile::tempdir().unwrap();
    let expected = write_spill_file(dir.path(), ROWS);
    let (from, to) = (dir.path().to_owned(), killed.path().to_owned());
    sink.set_totals_script(move |n, _| {
        if n == SNAPSHOT_AT {
            // The kill: the state directory as it is on disk now.
            for entry in std::fs::read_dir(&from).unwrap() {
                let entry = entry.unwrap();
                if entry.file_name() != "lock" {
                    std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
                }
            }
        }
        // The store fails from the kill on: what the killed run sent after it is lost
        // with it.
        (n >= SNAPSHOT_AT).then(|| {
            (
                Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
                false,
            )
        })
    });
    let mut first = writer(&config, sink.clone());
    first.flusher.flush_now().await;
    drop(first);
    let before = stored_earlier(&sink).len();
    assert!(before > 0 && before < ROWS, "part of the chunk applied");
    let journal = crate::state::journal::read(&killed.path().join("journal.wal")).unwrap();
    let group = journal
        .iter()
        .find(|g| g.committed && !g.ended && !g.kind_intents.is_empty())
        .expect("the killed flush's totals group");
    assert!(
        group.consumes.is_some(),
        "it names the cursor past its chunk"
    );
    let known_applied = group
        .outcomes
        .values()
        .filter(|o| matches!(o, crate::state::Settled::Applied))
        .count();

    sink.clear_totals_script();
    let sent_before = sink.totals_requests();
    let mut config = config.clone();
    config.state.dir = killed.path().to_owned();
    let mut second = writer(&config, sink.clone());
    for _ in 0..20 {
        second.flusher.flush_now().await;
        if totals_files(killed.path()).is_empty() {
            break;
        }
    }
    assert!(stored(&sink) == expected, "every total in the store, once");
    assert_eq!(
        sink.totals_requests() - sent_before,
        (ROWS - known_applied) as u64,
        "each total not known applied written once; the chunk is not read again"
    );
    let a = second.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(a.minute.pending, 0, "{a:?}");
}

/// A process killed while its flush sends a chunk of spilled totals that is only part of
/// the segment it was read from, with `state.max_spill_bytes` no larger than that
/// segment: the next start finds the segment still there (the cursor is inside it) and
/// no room beside it, yet the chunk's totals not known applied move into the recovered
/// segment (they are on disk already, and the cursor has passed them); none is
/// dropped, and the store then holds every spilled total.
#[tokio::test]
async fn a_replay_killed_mid_send_moves_its_chunk_through_a_full_spill_at_the_restart() {
    const ROWS: usize = 300;
    const SNAPSHOT_AT: u64 = 20;
    let (dir, mut config, sink) = views_alone();
    let killed = tempfile::tempdir().unwrap();
    let expected = write_spill_file(dir.path(), ROWS);
    let size = std::fs::metadata(migrate(&config)).unwrap().len();
    // A chunk holds part of the segment.
    config.limits.max_pending_bytes = 200_000;
    let (from, to) = (dir.path().to_owned(), killed.path().to_owned());
    sink.set_totals_script(move |n, _| {
        if n == SNAPSHOT_AT {
            for entry in std::fs::read_dir(&from).unwrap() {
                let entry = entry.unwrap();
                if entry.file_name() != "lock" {
                    std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
                }
            }
        }
        (n >= SNAPSHOT_AT).then(|| {
            (
                Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
                false,
            )
        })
    });
    let mut first = writer(&config, sink.clone());
    first.flusher.flush_now().await;
    drop(first);
    let journal = crate::state::journal::read(&killed.path().join("journal.wal")).unwrap();
    let group = journal
        .iter()
        .find(|g| g.committed && !g.ended && !g.kind_intents.is_empty())
        .expect("the killed flush's totals group");
    assert!(
        group.kind_intents.len() < ROWS,
        "the chunk is part of the segment: {} intents",
        group.kind_intents.len()
    );

    sink.clear_totals_script();
    let mut config = config.clone();
    config.state.dir = killed.path().to_owned();
    config.state.max_spill_bytes = size;
    let state = crate::state::StateDir::open_with(&config.state, &super::Recovery).unwrap();
    let recovery = state.recovery().clone();
    drop(state);
    assert_eq!(recovery.dropped_rows, 0, "{recovery:?}");
    assert!(recovery.totals_rows > 0, "{recovery:?}");
    let mut second = writer(&config, sink.clone());
    for _ in 0..50 {
        second.flusher.flush_now().await;
        if totals_files(killed.path()).is_empty() {
            break;
        }
    }
    assert!(
        stored_earlier(&sink) == expected,
        "every spilled total in the store"
    );
    let a = second.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!((a.minute.dropped, a.minute.pending), (0, 0), "{a:?}");
}

/// A process killed while its flush sends spilled totals it read back beside its book's
/// rows: the journal tells the two apart, and the next start, with no room in the
/// spill, moves the replayed totals into the recovered segment (the cursor has passed
/// them) but drops and counts the book's, as the killed process would have, rather
/// than spilling them past `state.max_spill_bytes`.
#[tokio::test]
async fn a_replay_killed_mid_send_keeps_its_replayed_totals_but_not_book_rows_past_the_limit() {
    const ROWS: usize = 3;
    let (dir, config, sink) = views_alone();
    let killed = tempfile::tempdir().unwrap();
    write_spill_file(dir.path(), ROWS);
    let (from, to) = (dir.path().to_owned(), killed.path().to_owned());
    sink.set_totals_script(move |n, _| {
        if n == 1 {
            for entry in std::fs::read_dir(&from).unwrap() {
                let entry = entry.unwrap();
                if entry.file_name() != "lock" {
                    std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
                }
            }
        }
        Some((
            Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
            false,
        ))
    });
    let mut first = writer(&config, sink.clone());
    first
        .engine
        .record("page.views", &[("page_id", "fresh")][..], 4, now(), None)
        .unwrap();
    first.flusher.flush_now().await;
    drop(first);
    let journal = crate::state::journal::read(&killed.path().join("journal.wal")).unwrap();
    let group = journal
        .iter()
        .find(|g| g.committed && !g.ended && !g.kind_intents.is_empty())
        .expect("the killed flush's totals group");
    assert!(
        group.consumes.is_some(),
        "it names the cursor past its chunk"
    );
    let intents = super::TotalsIntent::of_group(group).unwrap();
    let replays = intents.iter().filter(|i| i.replay).count();
    let book: usize = intents
        .iter()
        .filter(|i| !i.replay)
        .map(|i| i.rows.len())
        .sum();
    assert_eq!(replays, ROWS, "{intents:?}");
    assert_eq!(book, 2, "the fresh row's minute and day: {intents:?}");

    let mut config = config.clone();
    config.state.dir = killed.path().to_owned();
    config.state.max_spill_bytes = 1;
    let state = crate::state::StateDir::open_with(&config.state, &super::Recovery).unwrap();
    let recovery = state.recovery().clone();
    assert_eq!(
        (recovery.totals_rows, recovery.dropped_rows),
        (ROWS as u64, 2),
        "{recovery:?}"
    );
    assert_eq!(recovery.dropped_sums, [4, 4, 0, 0], "{recovery:?}");
}

/// A shutdown with the store down spills counter rows and running totals alike, each to
/// its flush's segment; the next start replays both kinds through the one cursor (each
/// replay stops at the other's records and takes its own), and every count lands once.
#[tokio::test]
async fn counter_rows_and_totals_spilled_together_replay_through_one_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let sink = MemorySink::new();
    let down = || {
        Some((
            Outcome::NotAppliedTransient(WriteError::new("no_connection", "down")),
            false,
        ))
    };
    sink.set_script(move |_, _| down());
    sink.set_totals_script(move |_, _| down());
    let t = now();
    let mut fed = 0_i128;
    for round in 0..3 {
        let first = writer(&config, sink.clone());
        for page in 0..5 {
            first.incr(&format!("p{page}"), round + 1, t);
            fed += i128::from(round + 1);
        }
        let report = first.flusher.finish().await;
        assert!(
            report.spilled > 0 && report.totals.rows_spilled > 0,
            "{report:?}"
        );
    }
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("spill.") && n.ends_with(".jsonl"))
        .collect();
    assert!(
        names.iter().any(|n| n.ends_with(".totals.jsonl")),
        "{names:?}"
    );
    assert!(
        names.iter().any(|n| !n.ends_with(".totals.jsonl")),
        "{names:?}"
    );

    sink.clear_script();
    sink.clear_totals_script();
    let mut last = writer(&config, sink.clone());
    for _ in 0..20 {
        last.flusher.flush_now().await;
    }
    let a = last.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!((a.minute.pending, a.minute.spilled), (0, 0), "{a:?}");
    for table in [Granularity::Minute, Granularity::Day] {
        assert_eq!(sink.total(table), fed, "{table:?}: the counter family");
        assert_eq!(
            sink.totals_sum(table),
            2 * fed,
            "{table:?}: the two totals families, each writer column once"
        );
    }
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("spill.") && n.ends_with(".jsonl") && n != "spill.corrupt.jsonl")
        .collect();
    assert!(left.is_empty(), "every segment consumed: {left:?}");
}

/// A replay round the store refused (every write timed out) leaves the totals path
/// believing the store down; with no traffic of its own nothing else would show it
/// answering again, and the spill (every segment behind its rows) waited for a restart.
/// A round that sends nothing now lets the next try a chunk.
#[tokio::test]
async fn a_refused_replay_round_is_tried_again_without_traffic() {
    const ROWS: usize = 50;
    let (dir, config, sink) = views_alone();
    let expected = write_spill_file(dir.path(), ROWS);
    sink.set_totals_script(|_, _| {
        Some((
            crate::sink::Outcome::Unknown(crate::sink::WriteError::new("write_timeout", "t")),
            false,
        ))
    });
    let mut w = writer(&config, sink.clone());
    w.flusher.flush_now().await;
    assert!(sink.totals_requests() > 0, "the first chunk was tried");
    sink.clear_totals_script();
    for _ in 0..200 {
        w.flusher.flush_now().await;
        if stored(&sink) == expected {
            break;
        }
    }
    assert!(
        stored(&sink) == expected,
        "the spill reached the store without new traffic"
    );
}
