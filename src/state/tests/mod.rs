//! The state directory's tests: open, lock, journal, spill, recovery and replay. Here: the
//! shared helpers, the directory's identity, lock, status and modes, and records lost or
//! rotated out; beside it, `killed_flushes.rs` (recovery of a killed flush: each request's
//! one home, held segments, a killed replay through a full spill, start bounds),
//! `log_records.rs` (outcome log records torn, refused a size or left in the current file;
//! lines that are not UTF-8; no rotation while a group is open), `replay_cursor.rs` (the
//! replay cursor after a kill, rewinds, an earlier version's wrapper spill, an unreadable
//! cursor) and `open_groups.rs` (groups left open by an end that could not be written).

use super::*;
use crate::aggregate::Columns;
use crate::sink::RowDelta;
use crate::vocabulary::{FamilyId, Granularity};

mod killed_flushes;
mod log_records;
mod open_groups;
mod replay_cursor;

fn config(dir: &Path) -> StateConfig {
    StateConfig {
        dir: dir.to_owned(),
        ..StateConfig::default()
    }
}

#[test]
fn identity_persists_and_incarnation_grows() {
    let tmp = tempfile::tempdir().unwrap();
    let first = StateDir::open(&config(tmp.path())).unwrap();
    let (id, inc) = (first.writer_id().to_owned(), first.incarnation());
    drop(first);
    let second = StateDir::open(&config(tmp.path())).unwrap();
    assert_eq!(second.writer_id(), id);
    assert_eq!(second.incarnation(), inc + 1);
}

#[test]
fn one_process_per_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let _held = StateDir::open(&config(tmp.path())).unwrap();
    assert!(matches!(
        StateDir::open(&config(tmp.path())),
        Err(StateError::Locked { .. })
    ));
}

#[test]
fn unclean_stop_is_reported_with_its_last_pending_rows_and_sums() {
    let tmp = tempfile::tempdir().unwrap();
    let state = StateDir::open(&config(tmp.path())).unwrap();
    assert!(state.unclean_previous_run().is_none());
    state.write_status(false, 42, [-7, 9, 0, 0]).unwrap();
    drop(state);
    let state = StateDir::open(&config(tmp.path())).unwrap();
    let previous = state.unclean_previous_run().cloned().unwrap();
    assert_eq!(
        (previous.pending_rows, previous.pending_sums()),
        (42, [-7, 9, 0, 0])
    );
    state.write_status(true, 0, [0; 4]).unwrap();
    drop(state);
    let state = StateDir::open(&config(tmp.path())).unwrap();
    assert!(state.unclean_previous_run().is_none());
}

fn record() -> WriteRecord {
    serde_json::from_str(
        r#"{"time":"t","writer":"w","incarnation":1,"flush_seq":1,"outcome":"unknown","family":"generic",
            "table":"ks.t","granularity":"minute","key":{},"day":"2026-11-30","minute":1,"deltas":{"value":1}}"#,
    )
    .unwrap()
}

/// A full disk (`/dev/full` answers every write with ENOSPC) loses the records but
/// never silently: the append says how many.
#[test]
fn records_that_cannot_be_written_are_counted() {
    let tmp = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/dev/full", tmp.path().join("unknown.jsonl")).unwrap();
    let mut state = StateDir::open(&config(tmp.path())).unwrap();
    let [appended, _] = state.log_batch(&[record(), record(), record()], &[]);
    assert_eq!(
        appended.lost().collect::<Vec<_>>(),
        [(LostRecords::WriteError, 3)]
    );
}

/// Key values and deltas are for the owner only: the directory 0700, every file
/// 0600, whatever the umask, and files left by an earlier version are tightened.
#[test]
fn the_directory_and_its_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("state");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(dir.join("unknown.jsonl"), "").unwrap();
    fs::set_permissions(dir.join("unknown.jsonl"), fs::Permissions::from_mode(0o644)).unwrap();
    let mut state = StateDir::open(&config(&dir)).unwrap();
    state.log_batch(&[], &[record()]);
    for flush_seq in [1, 2] {
        let flush = flush_of(&state, flush_seq);
        state.spill(&flush, &[vec![record()]]).unwrap();
    }
    // Replay the first segment and commit the cursor: `spill.cursor` is written.
    state.load_spill(|rows, _| rows < 1).unwrap();
    state.commit_replay(state.replay_loaded()).unwrap();
    state.write_status(false, 1, [1, 0, 0, 0]).unwrap();
    // A flush's running totals (`writer_totals`), spilled to a segment of their own.
    let mut total = record();
    total.total = Some(crate::state::TotalOf {
        column: "w/1/00".into(),
        totals: [("value".to_string(), 2)].into(),
        timestamp: 1,
    });
    let flush = state.flush_id(2);
    state
        .spill_totals(&flush, None, &[], &[vec![total]])
        .unwrap();
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    let files: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(files.len() >= 10, "{files:?}");
    let totals_segments = files
        .iter()
        .filter(|f| f.to_string_lossy().ends_with(".totals.jsonl"))
        .count();
    assert_eq!(totals_segments, 1, "{files:?}");
    for file in files {
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }
}

#[test]
fn records_deleted_by_rotation_are_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let mut state = StateDir::open(&StateConfig {
        max_log_bytes: 10,
        max_log_files: 1,
        ..config(tmp.path())
    })
    .unwrap();
    let rotated: u64 = (0..4)
        .map(|_| state.log_batch(&[], &[record()])[1].rotated_out)
        .sum();
    assert_eq!(rotated, 2);
}

fn families() -> Vec<FamilyEntry> {
    vec![FamilyEntry {
        id: 0,
        name: "generic".into(),
        minute_table: "ks.counts_by_minute".into(),
        day_table: "ks.counts_by_day".into(),
        hour_table: String::new(),
        total_table: String::new(),
        key_columns: vec!["name".into(), "tags".into()],
        columns: vec!["value".into()],
    }]
}

fn write(name: &str, delta: i64) -> PartitionWrite {
    PartitionWrite {
        epoch: None,
        family: FamilyId(0),
        table: Granularity::Minute,
        series: crate::series::encode([name, ""]).into_boxed_slice(),
        shard: None,
        rows: vec![RowDelta {
            bucket: 20_000 * 1440 + 5,
            columns: Columns::One(delta),
            requeued_since: 0,
        }],
    }
}

/// Flush `flush_seq` of `state`'s incarnation, as an earlier version named it (no nonce).
fn flush_of(state: &StateDir, flush_seq: u64) -> FlushId {
    FlushId {
        writer: state.writer_id().to_owned(),
        incarnation: state.incarnation(),
        flush_seq,
        nonce: None,
    }
}

fn lines(dir: &Path, name: &str) -> Vec<WriteRecord> {
    fs::read_to_string(dir.join(name))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Spills one segment of three rows, then loads them as a replay and opens the flush
/// that carries them (its group commit names the cursor it consumes).
fn replay_in_flight(dir: &Path) -> (StateDir, FlushId, Option<Cursor>) {
    replay_part_in_flight(dir, 3)
}

/// [`replay_in_flight`], loading only the first `rows` of the three spilled rows.
fn replay_part_in_flight(dir: &Path, rows: usize) -> (StateDir, FlushId, Option<Cursor>) {
    let mut state = StateDir::open(&config(dir)).unwrap();
    let spilled_by = FlushId {
        writer: state.writer_id().to_owned(),
        incarnation: state.incarnation(),
        flush_seq: 1,
        nonce: None,
    };
    state
        .spill(&spilled_by, &[vec![record(), record(), record()]])
        .unwrap();
    let loaded = state.load_spill(|n, _| n < rows).unwrap();
    assert_eq!(loaded.records.len(), rows);
    let flush = FlushId {
        flush_seq: 2,
        ..spilled_by
    };
    let consumes = state.replay_loaded();
    assert!(consumes.is_some());
    state
        .journal_begin(&flush, "t", consumes, &families(), &[write("replayed", 3)])
        .unwrap();
    state.journal_outcome(0, &Settled::Applied);
    state.journal_flush();
    (state, flush, consumes)
}
