//! The state directory's tests: open, lock, journal, spill, recovery and replay.

use super::*;
use crate::aggregate::Columns;
use crate::sink::RowDelta;
use crate::vocabulary::{FamilyId, Granularity};

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

/// A flush killed after its group commit: each request gets one home, and running the
/// recovery again (as after a kill in the middle of it) adds nothing.
#[test]
fn recovery_gives_each_request_of_a_killed_flush_one_home_and_runs_again_safely() {
    let tmp = tempfile::tempdir().unwrap();
    let mut state = StateDir::open(&config(tmp.path())).unwrap();
    let flush = flush_of(&state, 1);
    let writes = [
        write("applied", 1),
        write("in_flight", 2),
        write("not_applied", 4),
        write("unknown", 8),
        write("rejected", 16),
        write("not_started", 32),
    ];
    state
        .journal_begin(&flush, "t", None, &families(), &writes)
        .unwrap();
    let error = |kind: &str| (kind.to_string(), "text".to_string());
    state.journal_outcome(0, &Settled::Applied);
    let (kind, text) = error("unavailable");
    state.journal_outcome(2, &Settled::NotApplied { kind, text });
    let (kind, text) = error("write_timeout");
    state.journal_outcome(3, &Settled::Unknown { kind, text });
    let (kind, text) = error("invalid");
    state.journal_outcome(4, &Settled::Rejected { kind, text });
    state.journal_outcome(5, &Settled::NotStarted);
    // Where the flush's records would have started (without it, recovery looks for them
    // in the whole current log).
    state.journal.logs_at(0, 0).unwrap();
    let journal = fs::read(state.journal_path()).unwrap();
    drop(state); // killed

    let state = StateDir::open(&config(tmp.path())).unwrap();
    let report = state.recovery().clone();
    assert_eq!(
        (
            report.flushes,
            report.unknown_rows,
            report.spilled_rows,
            report.rejected_rows
        ),
        (1, 2, 2, 1)
    );
    assert_eq!(report.unknown_sums, [2 + 8, 0, 0, 0]);
    let check = |dir: &Path| {
        let unknown = lines(dir, "unknown.jsonl");
        let kinds: Vec<(String, String)> = unknown
            .iter()
            .map(|r| {
                (
                    r.key["name"].clone(),
                    r.error.as_ref().unwrap().kind.clone(),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("in_flight".to_string(), "in_flight_at_crash".to_string()),
                ("unknown".to_string(), "write_timeout".to_string())
            ]
        );
        assert_eq!(unknown[0].request_id, flush.request_id(1));
        let rejected = lines(dir, "rejected.jsonl");
        assert_eq!(rejected.len(), 1);
        assert_eq!(rejected[0].key["name"], "rejected");
    };
    check(tmp.path());
    drop(state);
    // The same journal again (a kill before recovery's own end): nothing is added.
    fs::write(tmp.path().join("journal.wal"), &journal).unwrap();
    let mut state = StateDir::open(&config(tmp.path())).unwrap();
    check(tmp.path());
    let report = state.recovery().clone();
    assert_eq!((report.unknown_rows, report.spilled_rows), (0, 0));
    let chunk = state.load_spill(|_, _| true).unwrap();
    let spilled: Vec<(String, i64)> = chunk
        .records
        .iter()
        .map(|(_, r)| (r.key["name"].clone(), r.deltas["value"]))
        .collect();
    assert_eq!(
        spilled,
        [
            ("not_applied".to_string(), 4),
            ("not_started".to_string(), 32)
        ],
        "once, though recovery ran twice"
    );
}

/// A final flush wrote its held segment (rows held for the delta ledger, their ledger
/// rows in its header) and was killed after its group commit: recovery gives the flush's
/// requests their homes and leaves the held segment alone (it holds none of them), also
/// when it runs twice, so replay yields every row once and the next start finds the
/// ledger rows to confirm first.
#[test]
fn recovery_of_a_flush_leaves_its_held_segment_to_replay_once() {
    let tmp = tempfile::tempdir().unwrap();
    let mut state = StateDir::open(&config(tmp.path())).unwrap();
    let flush = flush_of(&state, 3);
    let held = |n: i64| {
        let mut r = record();
        r.outcome = RecordOutcome::Spilled;
        r.request_id = format!("{}/{}/3/ledger-held", flush.writer, flush.incarnation);
        r.row = n as u16;
        r.key.insert("name".into(), format!("held{n}"));
        r.deltas.insert("value".into(), 100 + n);
        r
    };
    let ledger_row = crate::sink::LedgerRow {
        family: "generic".into(),
        key: r#"["held"]"#.into(),
        bucket: 0,
        minute: crate::bucket::Minute(29_000_000),
        writer: flush.writer.as_str().into(),
        incarnation: flush.incarnation,
        flush_seq: 3,
        part: 0,
        columns: std::sync::Arc::from(vec!["value".to_owned()]),
        deltas: vec![201].into(),
    };
    let kept = state
        .spill_held(
            &flush,
            &[vec![held(0)], vec![held(1)]],
            std::slice::from_ref(&ledger_row),
        )
        .unwrap();
    assert_eq!(kept, [true, true]);
    let writes = [write("not_started", 1), write("not_applied", 2)];
    state
        .journal_begin(&flush, "t", None, &families(), &writes)
        .unwrap();
    state.journal_outcome(0, &Settled::NotStarted);
    let (kind, text) = ("unavailable".to_string(), "text".to_string());
    state.journal_outcome(1, &Settled::NotApplied { kind, text });
    state.journal_flush();
    let journal = fs::read(state.journal_path()).unwrap();
    drop(state); // killed

    let state = StateDir::open(&config(tmp.path())).unwrap();
    assert_eq!(state.recovery().spilled_rows, 2);
    drop(state);
    fs::write(tmp.path().join("journal.wal"), &journal).unwrap();
    assert_eq!(
        ledger_pending::load(tmp.path()).unwrap(),
        [ledger_row],
        "the held rows' ledger row, from the segment's header"
    );
    let mut state = StateDir::open(&config(tmp.path())).unwrap();
    assert_eq!(
        state.recovery().spilled_rows,
        0,
        "the recovered segment exists"
    );
    let chunk = state.load_spill(|_, _| true).unwrap();
    let mut replayed: Vec<(String, i64)> = chunk
        .records
        .iter()
        .map(|(_, r)| (r.key["name"].clone(), r.deltas["value"]))
        .collect();
    replayed.sort();
    assert_eq!(
        replayed,
        [
            ("held0".to_string(), 100),
            ("held1".to_string(), 101),
            ("not_applied".to_string(), 2),
            ("not_started".to_string(), 1)
        ],
        "each row once"
    );
}

/// Records a flush wrote before it was killed are not written again; a torn one is
/// set aside and written whole.
#[test]
fn recovery_completes_a_half_written_log_batch_without_duplicates() {
    let tmp = tempfile::tempdir().unwrap();
    let mut state = StateDir::open(&config(tmp.path())).unwrap();
    let flush = flush_of(&state, 7);
    let writes = [write("a", 1), write("b", 2), write("c", 3)];
    state
        .journal_begin(&flush, "t", None, &families(), &writes)
        .unwrap();
    for i in 0..3 {
        state.journal_outcome(
            i,
            &Settled::Unknown {
                kind: "overloaded".into(),
                text: "x".into(),
            },
        );
    }
    let records: Vec<WriteRecord> = writes
        .iter()
        .enumerate()
        .flat_map(|(i, w)| {
            crate::flush::record_conversion::to_records(
                w,
                &families()[0],
                RecordSource {
                    flush: &flush,
                    request: i as u32,
                    time: "t",
                },
                RecordOutcome::Unknown,
                None,
            )
        })
        .collect();
    // Only the first record made it, and half of the second.
    state.log_batch(&records[..1], &[]);
    drop(state);
    let second = serde_json::to_string(&records[1]).unwrap();
    let mut file = fs::OpenOptions::new()
        .append(true)
        .open(tmp.path().join("unknown.jsonl"))
        .unwrap();
    io::Write::write_all(&mut file, &second.as_bytes()[..10]).unwrap();
    drop(file);

    let state = StateDir::open(&config(tmp.path())).unwrap();
    assert_eq!(state.torn_lines(), [1, 0]);
    let unknown = lines(tmp.path(), "unknown.jsonl");
    let names: Vec<&str> = unknown.iter().map(|r| r.key["name"].as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(state.recovery().unknown_rows, 2);
}

/// A flush whose journal refused the record of the logs' sizes appended its records all
/// the same, then was killed: recovery finds them in the log (it has no size to look
/// from) and adds only what is missing, also when it runs again.
#[test]
fn recovery_finds_records_appended_after_the_journal_refused_their_start() {
    let tmp = tempfile::tempdir().unwrap();
    let mut state = StateDir::open(&config(tmp.path())).unwrap();
    let flush = flush_of(&state, 7);
    // Another flush's record of the same request number: not this flush's.
    let other = FlushId {
        flush_seq: 70,
        ..flush.clone()
    };
    let writes = [write("a", 1), write("b", 2), write("c", 3)];
    let record = |flush: &FlushId, i: usize| {
        crate::flush::record_conversion::to_records(
            &writes[i],
            &families()[0],
            RecordSource {
                flush,
                request: i as u32,
                time: "t",
            },
            RecordOutcome::Unknown,
            None,
        )
    };
    state.append(OutcomeLog::Unknown, &record(&other, 1));
    state
        .journal_begin(&flush, "t", None, &families(), &writes)
        .unwrap();
    for i in 0..3 {
        state.journal_outcome(
            i,
            &Settled::Unknown {
                kind: "overloaded".into(),
                text: "x".into(),
            },
        );
    }
    // The logs' sizes never reached the journal; the first record reached the log.
    state.append(OutcomeLog::Unknown, &record(&flush, 0));
    let journal = fs::read(state.journal_path()).unwrap();
    drop(state); // killed

    let check = |dir: &Path| {
        let unknown = lines(dir, "unknown.jsonl");
        let names: Vec<(&str, &str)> = unknown
            .iter()
            .map(|r| (r.request_id.as_str(), r.key["name"].as_str()))
            .collect();
        let (a, b, c) = (
            flush.request_id(0),
            flush.request_id(1),
            flush.request_id(2),
        );
        let b_of_other = other.request_id(1);
        assert_eq!(
            names,
            [
                (b_of_other.as_str(), "b"),
                (a.as_str(), "a"),
                (b.as_str(), "b"),
                (c.as_str(), "c")
            ]
        );
    };
    let state = StateDir::open(&config(tmp.path())).unwrap();
    check(tmp.path());
    assert_eq!(state.recovery().unknown_rows, 2);
    drop(state);
    // The same journal again (a kill before recovery's own end): nothing is added.
    fs::write(tmp.path().join("journal.wal"), &journal).unwrap();
    let state = StateDir::open(&config(tmp.path())).unwrap();
    check(tmp.path());
    assert_eq!(state.recovery().unknown_rows, 0);
}

/// A group whose journal refused the record of the logs' sizes appends twice (as a
/// totals group does, a row at a time): the second append neither rotates the logs nor
/// records sizes, so recovery, looking in the current file, finds both and logs
/// neither again.
#[test]
fn a_group_whose_journal_refused_its_log_sizes_keeps_its_records_in_the_current_file() {
    let tmp = tempfile::tempdir().unwrap();
    let small = StateConfig {
        max_log_bytes: 1,
        ..config(tmp.path())
    };
    let mut state = StateDir::open(&small).unwrap();
    // A full log before the group: its first append rotates it.
    state.append_now(OutcomeLog::Rejected, &[record()]);
    let flush = flush_of(&state, 4);
    let writes = [write("a", 1), write("b", 2)];
    state
        .journal_begin(&flush, "t", None, &families(), &writes)
        .unwrap();
    let rejected = |request: u32| Settled::Rejected {
        kind: "invalid".into(),
        text: format!("request {request}"),
    };
    state.journal_outcome(0, &rejected(0));
    state.journal_outcome(1, &rejected(1));
    state.journal_flush();
    state.journal.fail_writes();
    for (i, write) in writes.iter().enumerate() {
        let records = crate::flush::record_conversion::to_records(
            write,
            &families()[0],
            RecordSource {
                flush: &flush,
                request: i as u32,
                time: "t",
            },
            RecordOutcome::Rejected,
            None,
        );
        state.append_now(OutcomeLog::Rejected, &records);
    }
    drop(state); // killed

    let state = StateDir::open(&small).unwrap();
    assert_eq!(state.recovery().rejected_rows, 0, "both were found");
    let mut ids: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.starts_with("rejected"))
        .flat_map(|name| lines(tmp.path(), &name))
        .map(|r| r.request_id)
        .filter(|id| id.starts_with(&flush.named_request("")))
        .collect();
    ids.sort();
    assert_eq!(ids, [flush.request_id(0), flush.request_id(1)], "each once");
}

/// A line of an outcome log that is not UTF-8 (an append that failed part-way, glued to
/// the next) does not keep the directory from opening when recovery looks through the
/// whole log.
#[test]
fn a_log_line_that_is_not_utf8_does_not_keep_recovery_from_finishing() {
    let tmp = tempfile::tempdir().unwrap();
    let mut state = StateDir::open(&config(tmp.path())).unwrap();
    let mut file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(tmp.path().join("unknown.jsonl"))
        .unwrap();
    io::Write::write_all(&mut file, b"{\"key\":{\"page\":\"caf\xc3\n").unwrap();
    drop(file);
    let flush = flush_of(&state, 1);
    state
        .journal_begin(&flush, "t", None, &families(), &[write("a", 1)])
        .unwrap();
    drop(state); // killed with its request in flight
    let state = StateDir::open(&config(tmp.path())).unwrap();
    assert_eq!(state.recovery().unknown_rows, 1);
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

/// A replayed chunk that applied is never replayed again, even when the replay cursor
/// cannot be written when the flush ends (a full disk: the journal is preallocated and
/// keeps working, the cursor's temp file does not) and the process is killed later.
/// The journal's group is then the only durable record of how far the spill was
/// consumed, so the flush must not end it.
#[test]
fn a_replayed_chunk_whose_cursor_cannot_be_written_is_not_replayed_after_a_kill() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut state, flush, consumes) = replay_in_flight(tmp.path());
    std::os::unix::fs::symlink("/dev/full", tmp.path().join("spill.tmp")).unwrap();
    assert!(state.journal_end(&flush, consumes).is_err());
    drop(state); // killed before the next flush
    fs::remove_file(tmp.path().join("spill.tmp")).ok();

    let mut state = StateDir::open(&config(tmp.path())).unwrap();
    let again = state.load_spill(|_, _| true).unwrap();
    assert_eq!(
        again.records.len(),
        0,
        "rows the killed process replayed and applied come back"
    );
}

/// The same window without a full disk: a kill after the flush ends finds the cursor
/// durable, and a kill inside `journal_end` finds either the group (it names the
/// cursor) or the cursor.
#[test]
fn a_replayed_chunk_is_consumed_once_its_flush_ends() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut state, flush, consumes) = replay_in_flight(tmp.path());
    state.journal_end(&flush, consumes).unwrap();
    drop(state);
    let mut state = StateDir::open(&config(tmp.path())).unwrap();
    assert_eq!(state.load_spill(|_, _| true).unwrap().records.len(), 0);
    assert!(
        state.spill_bytes().0 == 0,
        "the consumed segment is deleted"
    );
}

/// A replay's flush killed after its store refused it, with the spill full: recovery
/// moves the chunk's rows into its recovered segment whatever room is left (they were
/// on disk already), rather than dropping them.
#[test]
fn recovery_moves_a_killed_replay_through_a_full_spill() {
    let tmp = tempfile::tempdir().unwrap();
    let mut state = StateDir::open(&config(tmp.path())).unwrap();
    let spilled_by = state.flush_id(1);
    state
        .spill(&spilled_by, &[vec![record(), record(), record()]])
        .unwrap();
    let segment = state.spill_bytes().0;
    // A chunk of two of its three rows: the segment stays until the third is read.
    state.load_spill(|n, _| n < 2).unwrap();
    let flush = state.flush_id(2);
    let consumes = state.replay_loaded();
    state
        .journal_begin(&flush, "t", consumes, &families(), &[write("replayed", 3)])
        .unwrap();
    state.journal_outcome(
        0,
        &Settled::NotApplied {
            kind: "unavailable".into(),
            text: "down".into(),
        },
    );
    state.journal_flush();
    drop(state); // killed before the flush's end
    let mut state = StateDir::open(&StateConfig {
        max_spill_bytes: segment,
        ..config(tmp.path())
    })
    .unwrap();
    let recovery = state.recovery().clone();
    assert_eq!(
        (recovery.dropped_rows, recovery.spilled_rows),
        (0, 1),
        "{recovery:?}"
    );
    let again = state.load_spill(|_, _| true).unwrap();
    let sums: Vec<i64> = again
        .records
        .iter()
        .map(|(_, r)| r.deltas.values().sum::<i64>())
        .collect();
    assert_eq!(
        sums.len(),
        2,
        "the third row, then the moved write: {sums:?}"
    );
    assert_eq!(sums[1], 3);
}

/// A large flush killed early: the requests past the last start bound the journal
/// recorded were never started, so recovery spills them; only those that may have
/// started are logged as unknown.
#[test]
fn recovery_spills_the_requests_past_the_last_start_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let mut state = StateDir::open(&config(tmp.path())).unwrap();
    state.set_start_window(64);
    let flush = flush_of(&state, 1);
    let writes: Vec<PartitionWrite> = (0..300).map(|i| write(&format!("k{i}"), 1)).collect();
    state
        .journal_begin(&flush, "t", None, &families(), &writes)
        .unwrap();
    // Requests 0..=70 start (the second window's bound, 64 + 64, is recorded before
    // request 64 starts); the first ten answer.
    for index in 0..=70 {
        state.journal_may_start(index).unwrap();
    }
    for index in 0..10 {
        state.journal_outcome(index, &Settled::Applied);
    }
    state.journal_flush();
    let groups = journal::read(state.journal_path()).unwrap();
    assert_eq!(groups[0].starts_below, Some(64 + 64));
    drop(state); // killed

    let state = StateDir::open(&config(tmp.path())).unwrap();
    let report = state.recovery().clone();
    assert_eq!(
        (report.unknown_rows, report.spilled_rows),
        (128 - 10, 300 - 128),
        "{report:?}"
    );
    let unknown = lines(tmp.path(), "unknown.jsonl");
    let request = |id: &str| -> u32 { id.rsplit('/').next().unwrap().parse().unwrap() };
    assert!(
        unknown
            .iter()
            .all(|r| (10..128).contains(&request(&r.request_id))),
        "only the requests that may have started are logged unknown"
    );
}

/// Without a start window (the wrapper's flushes, older versions), every request of a
/// killed flush may have started: all unknown.
#[test]
fn without_start_bounds_every_unanswered_request_is_unknown() {
    let tmp = tempfile::tempdir().unwrap();
    let mut state = StateDir::open(&config(tmp.path())).unwrap();
    let flush = flush_of(&state, 1);
    let writes: Vec<PartitionWrite> = (0..100).map(|i| write(&format!("k{i}"), 1)).collect();
    state
        .journal_begin(&flush, "t", None, &families(), &writes)
        .unwrap();
    state.journal_may_start(0).unwrap();
    drop(state);
    let state = StateDir::open(&config(tmp.path())).unwrap();
    assert_eq!(
        (state.recovery().unknown_rows, state.recovery().spilled_rows),
        (100, 0)
    );
}

/// A replayed chunk whose cursor could not be written leaves its group open; the flush's
/// `writer_totals` stage then ends a group of its own (consuming no cursor). That end
/// must not discard the open group: a kill after it must still find the cursor.
#[test]
fn a_later_end_does_not_discard_the_group_that_owes_a_replay_cursor() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut state, flush, consumes) = replay_in_flight(tmp.path());
    std::os::unix::fs::symlink("/dev/full", tmp.path().join("spill.tmp")).unwrap();
    assert!(state.journal_end(&flush, consumes).is_err());
    // The totals stage of the same flush: its own group, ended with no cursor.
    state
        .journal_begin_kind(&flush, "t", None, &families(), &[])
        .unwrap();
    assert!(
        state.journal_end(&flush, None).is_err(),
        "the cursor is still owed"
    );
    drop(state); // killed
    fs::remove_file(tmp.path().join("spill.tmp")).ok();
    let mut state = StateDir::open(&config(tmp.path())).unwrap();
    assert_eq!(
        state.load_spill(|_, _| true).unwrap().records.len(),
        0,
        "rows the killed process replayed and applied come back"
    );
}

/// While a group is open because its end could not be written, the outcome logs do not
/// rotate: its recovery looks for its records in the current files from the sizes it
/// recorded, and a rotation would move them out of sight (they would be logged twice).
/// Once an end succeeds, a full log rotates again.
#[test]
fn the_outcome_logs_do_not_rotate_while_a_group_is_left_open() {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = config(tmp.path());
    config.max_log_bytes = 1;
    let mut state = StateDir::open(&config).unwrap();
    let flush = state.flush_id(1);
    state
        .journal_begin(&flush, "t", None, &families(), &[write("a", 1)])
        .unwrap();
    assert!(
        state
            .append_recorded(OutcomeLog::Unknown, &[record()])
            .failed
            .is_none()
    );
    let rotated = crate::state::jsonl::rotated_name(&tmp.path().join("unknown.jsonl"), 1);
    // The group's end cannot make its cursor durable: it stays open.
    state.owed_cursor = state.replay_loaded().or(Some(Cursor {
        segment: SegmentId::live(1, 1),
        offset: 1,
    }));
    std::os::unix::fs::symlink("/dev/full", tmp.path().join("spill.tmp")).unwrap();
    assert!(state.journal_end(&flush, None).is_err());
    state.wrapper_journal_logs_at().unwrap();
    assert!(!rotated.exists(), "not rotated while the group is open");
    fs::remove_file(tmp.path().join("spill.tmp")).unwrap();
    state.journal_end(&flush, None).unwrap();
    state.wrapper_journal_logs_at().unwrap();
    assert!(rotated.exists(), "rotated once the group ended");
}

/// A kind's finisher for the tests: refuses every group, or finds nothing owed.
struct Finisher {
    refuses: bool,
}

impl recovery::FinishKinds for Finisher {
    fn finish(&self, _: &Path, group: &FlushGroup, _: &str) -> io::Result<recovery::KindFinished> {
        if self.refuses {
            return Err(io::Error::other(format!("cannot read {:?}", group.flush)));
        }
        Ok(recovery::KindFinished::default())
    }

    fn rows(&self, _: &KindIntent) -> u64 {
        1
    }
}

/// Two open groups, the first a counter group whose end failed, the second its flush's
/// kind group, which the finisher cannot read: the directory stays closed however often
/// it is opened, with both groups in the journal (ending the first before reading the
/// second started the journal over, and the second start then opened with the second
/// group gone). A finisher that reads it then finishes both.
#[test]
fn a_kind_group_the_finisher_refuses_keeps_every_open_group_of_the_journal() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut state, flush, consumes) = replay_in_flight(tmp.path());
    std::os::unix::fs::symlink("/dev/full", tmp.path().join("spill.tmp")).unwrap();
    assert!(state.journal_end(&flush, consumes).is_err());
    let intent = KindIntent {
        kind: KindId::new(64).unwrap(),
        request: 1,
        body: vec![1, 2, 3],
    };
    state
        .journal_begin_kind(&flush, "t", None, &families(), &[intent])
        .unwrap();
    drop(state); // killed
    fs::remove_file(tmp.path().join("spill.tmp")).ok();
    let journal = || journal::read(&tmp.path().join("journal.wal")).unwrap();
    for attempt in 0..3 {
        assert!(
            StateDir::open_with(&config(tmp.path()), &Finisher { refuses: true }).is_err(),
            "attempt {attempt}"
        );
        let groups = journal();
        assert_eq!(groups.len(), 2, "attempt {attempt}");
        assert!(groups.iter().all(|g| g.committed && !g.ended));
    }
    let mut state = StateDir::open_with(&config(tmp.path()), &Finisher { refuses: false }).unwrap();
    assert_eq!(state.recovery().flushes, 2);
    assert_eq!(
        state.load_spill(|_, _| true).unwrap().records.len(),
        0,
        "rows the killed process replayed and applied come back"
    );
    drop(state);
    let state = StateDir::open(&config(tmp.path())).unwrap();
    assert_eq!(state.recovery().flushes, 0, "nothing is left to finish");
}

/// A kill before a replaying flush ended: the next start takes the cursor from the
/// journal and ends the group, which starts the journal over; the cursor must be in
/// `spill.cursor` by then, or a second start replays the chunk again.
#[test]
fn a_cursor_found_only_in_the_journal_survives_a_second_start() {
    let tmp = tempfile::tempdir().unwrap();
    // Two of the segment's three rows: the cursor stops inside the segment.
    let (state, _, _) = replay_part_in_flight(tmp.path(), 2);
    drop(state); // killed before the flush ended
    let state = StateDir::open(&config(tmp.path())).unwrap();
    drop(state); // stopped again before any later replay
    let mut state = StateDir::open(&config(tmp.path())).unwrap();
    assert_eq!(
        state.load_spill(|_, _| true).unwrap().records.len(),
        1,
        "the second start replays rows the first start's journal had consumed"
    );
}

/// Spills four records (rows 0 to 3) in one write of flush 1.
fn spill_four_rows(state: &mut StateDir) {
    let spilled_by = state.flush_id(1);
    let mut records: Vec<WriteRecord> = (0..4).map(|_| record()).collect();
    for (i, r) in records.iter_mut().enumerate() {
        r.row = i as u16;
    }
    state.spill(&spilled_by, &[records]).unwrap();
}

/// Rows read for replay whose group could not be committed are read again from where the
/// consumed cursor is, and a rewind never goes back before it (nor before a cursor an
/// open group still owes).
#[test]
fn a_rewound_replay_reads_the_same_rows_again_and_never_before_the_consumed_cursor() {
    let tmp = tempfile::tempdir().unwrap();
    let mut state = StateDir::open(&config(tmp.path())).unwrap();
    spill_four_rows(&mut state);
    let first = state.load_spill(|n, _| n < 2).unwrap();
    assert_eq!(first.records.len(), 2);
    let after_two = state.replay_loaded();
    state.commit_replay(after_two).unwrap();
    let second = state.load_spill(|n, _| n < 1).unwrap();
    assert_eq!(second.records[0].1.row, 2);
    state.rewind_replay();
    assert_eq!(
        state.replay_loaded(),
        after_two,
        "back to the consumed cursor, not before"
    );
    let again = state.load_spill(|_, _| true).unwrap();
    let rows: Vec<u16> = again.records.iter().map(|(_, r)| r.row).collect();
    assert_eq!(rows, [2, 3], "the rewound row once more, then the rest");
}

/// A chunk that produced no write (its rows held in memory) whose cursor cannot be made
/// durable (a full disk): a later rewind must not read it again, or its held rows would
/// be in memory twice.
#[test]
fn a_cursor_that_could_not_be_committed_still_bounds_a_rewind() {
    let tmp = tempfile::tempdir().unwrap();
    let mut state = StateDir::open(&config(tmp.path())).unwrap();
    spill_four_rows(&mut state);
    state.load_spill(|n, _| n < 2).unwrap();
    let after_two = state.replay_loaded();
    // The cursor's temporary file is a full disk.
    std::os::unix::fs::symlink("/dev/full", tmp.path().join("spill.tmp")).unwrap();
    assert!(state.commit_replay(after_two).is_err());
    state.load_spill(|n, _| n < 1).unwrap();
    state.rewind_replay();
    assert_eq!(state.replay_loaded(), after_two, "owed: not read again");
}

/// An upgrade finds a wrapper flush of an earlier version unended in the journal (it
/// consumed its spill file up to an offset) and that version's spill file: the start
/// moves the rows past that offset into a segment, replayed first, and leaves the group
/// to the wrapper's recovery; rows before the offset are the group's, never replayed.
#[test]
fn an_earlier_versions_wrapper_spill_moves_past_what_its_unended_flush_consumed() {
    let dir = tempfile::tempdir().unwrap();
    let line = |row: u16| {
        format!(
            r#"{{"time":"t","request_id":"app/1/w1/0","row":{row},"outcome":"unsent","table":"ks.t","key":{{"k":"'a'"}},"key_hex":["61"],"deltas":{{"c":{row}}}}}"#
        ) + "\n"
    };
    let file: String = (0..4).map(line).collect();
    let consumed = (line(0) + &line(1)).len() as u64;
    std::fs::write(dir.path().join(wrapper_files::SPILL_FILE), &file).unwrap();
    {
        let (mut journal, _, _) = Journal::open(dir.path().join("journal.wal")).unwrap();
        let flush = FlushId {
            writer: "app".into(),
            incarnation: 1,
            flush_seq: 1,
            nonce: None,
        };
        journal
            .begin_wrapper_of_an_earlier_version(&flush, Some(consumed), &[], &[])
            .unwrap();
    }
    let mut state = StateDir::open(&config(dir.path())).unwrap();
    assert!(!dir.path().join(wrapper_files::SPILL_FILE).exists());
    assert_eq!(
        state.unfinished_wrapper_flushes(),
        1,
        "the wrapper's to finish"
    );
    let chunk = state.load_spill(|_, _| true).unwrap();
    let rows: Vec<u16> = chunk.records.iter().map(|(_, r)| r.row).collect();
    assert_eq!(rows, [2, 3], "past the offset the unended flush consumed");
    assert_eq!(
        chunk.records[0].0,
        SegmentId::migration(state.incarnation(), false),
        "numbered after the runs before this one"
    );
    drop(state);
    // Not consumed yet: a second start finds the same rows, moved once.
    let mut state = StateDir::open(&config(dir.path())).unwrap();
    let again = state.load_spill(|_, _| true).unwrap();
    assert_eq!(again.records.len(), 2);
}

/// An earlier version's wrapper spill found in a directory a later run already replayed
/// from (its cursor past that run's segments): the moved segment is numbered after that
/// run, so its rows are replayed, not counted as consumed and deleted unread.
#[test]
fn an_earlier_versions_wrapper_spill_is_replayed_after_a_cursor_a_later_run_left() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut state = StateDir::open(&config(dir.path())).unwrap();
        let spilled_by = state.flush_id(1);
        state.spill(&spilled_by, &[vec![record()]]).unwrap();
        assert_eq!(state.load_spill(|_, _| true).unwrap().records.len(), 1);
        let consumed = state.replay_loaded();
        state.commit_replay(consumed).unwrap();
    }
    let line = r#"{"time":"t","request_id":"app/1/w1/0","row":0,"outcome":"unsent","table":"ks.t","key":{"k":"'a'"},"key_hex":["61"],"deltas":{"c":5}}"#;
    std::fs::write(
        dir.path().join(wrapper_files::SPILL_FILE),
        format!("{line}\n"),
    )
    .unwrap();
    let mut state = StateDir::open(&config(dir.path())).unwrap();
    let chunk = state.load_spill(|_, _| true).unwrap();
    let deltas: Vec<i64> = chunk
        .records
        .iter()
        .map(|(_, r)| r.deltas.values().sum())
        .collect();
    assert_eq!(deltas, [5], "the moved row, once");
}

/// A `spill.cursor` that does not read is an error, not "no cursor": taken for none, the
/// journal's or a header's older cursor would replay rows the file said were sent.
#[test]
fn an_unreadable_replay_cursor_keeps_the_directory_closed() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut state, flush, consumes) = replay_in_flight(tmp.path());
    state.journal_end(&flush, consumes).unwrap();
    drop(state);
    assert!(
        StateDir::open(&config(tmp.path())).is_ok(),
        "a cursor that reads"
    );
    fs::write(tmp.path().join("spill.cursor"), b"{\"segment\":").unwrap();
    let error = StateDir::open(&config(tmp.path())).err().expect("refused");
    assert!(error.to_string().contains("spill"), "{error}");
}

/// A flush whose end could not be written stays open in the journal while its process
/// goes on: the rows it did not apply are re-queued, and the shutdown spills them in a
/// segment of its own (under a later flush's request ids). A start after that finished
/// shutdown must not spill them a second time; after a kill (no finished shutdown), the
/// open flush is finished as before.
#[test]
fn a_flush_left_open_by_a_finished_shutdown_is_only_ended() {
    for finished in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let mut state = StateDir::open(&config(tmp.path())).unwrap();
        let flush = state.flush_id(5);
        state
            .journal_begin(&flush, "t", None, &families(), &[write("not_applied", 4)])
            .unwrap();
        let (kind, text) = ("unavailable".to_string(), "text".to_string());
        state.journal_outcome(0, &Settled::NotApplied { kind, text });
        state.journal_flush();
        // No end: its write failed. The shutdown's flush spills the re-queued row.
        let mut row = record();
        row.deltas = [("value".to_string(), 4)].into();
        state.spill(&state.flush_id(6), &[vec![row]]).unwrap();
        if finished {
            state.write_stopped_status(true, 0, [0; 4]).unwrap();
        }
        drop(state);

        let mut state = StateDir::open(&config(tmp.path())).unwrap();
        let spilled: i64 = state
            .load_spill(|_, _| true)
            .unwrap()
            .records
            .iter()
            .map(|(_, r)| r.deltas["value"])
            .sum();
        if finished {
            assert_eq!(state.recovery().flushes, 0);
            assert_eq!(spilled, 4, "the row once, from the shutdown's segment");
        } else {
            // A kill: the open flush is finished as before. (Its re-queued row, spilled
            // under a later flush's request id, is not told apart from the flush's own:
            // a kill after such a spill and before the shutdown finished writes it twice.)
            assert_eq!(state.recovery().flushes, 1);
            assert!(spilled >= 4, "{spilled}");
        }
        drop(state);
        let state = StateDir::open(&config(tmp.path())).unwrap();
        assert_eq!(state.recovery().flushes, 0, "ended by the start before");
    }
}

/// A flush left open (its replay cursor could not be written) whose not-applied row it
/// spilled into its own segment; a later replay takes that row and is killed before its
/// end. The later group owns the row now: recovery must still see it in the left-open
/// flush's segment (which the later cursor passed, so it is kept until no group is
/// open), rather than log it unknown for the left-open flush as well.
///
/// Killed either before the later flush ends, or inside its end once its cursor is
/// durable (which deleted the passed segment before).
#[test]
fn a_segment_a_later_replay_passed_still_tells_recovery_what_a_left_open_flush_spilled() {
    for cursor_committed in [false, true] {
        later_replay_killed(cursor_committed);
    }
}

fn later_replay_killed(cursor_committed: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let mut state = StateDir::open(&config(tmp.path())).unwrap();
    state
        .spill(&flush_of(&state, 1), &[vec![record(), record()]])
        .unwrap();
    assert_eq!(state.load_spill(|_, _| true).unwrap().records.len(), 2);
    let replayed = state.replay_loaded();
    let open = flush_of(&state, 2);
    state
        .journal_begin(&open, "t", replayed, &families(), &[write("a", 4)])
        .unwrap();
    let (kind, text) = ("unavailable".to_string(), "text".to_string());
    state.journal_outcome(0, &Settled::NotApplied { kind, text });
    state.journal_flush();
    let not_applied = WriteRecord {
        request_id: open.request_id(0),
        row: 0,
        ..record()
    };
    state.spill(&open, &[vec![not_applied]]).unwrap();
    std::os::unix::fs::symlink("/dev/full", tmp.path().join("spill.tmp")).unwrap();
    assert!(state.journal_end(&open, replayed).is_err(), "left open");
    fs::remove_file(tmp.path().join("spill.tmp")).unwrap();
    // The next flush replays the row the open flush spilled, and is killed.
    assert_eq!(state.load_spill(|_, _| true).unwrap().records.len(), 1);
    let later = flush_of(&state, 3);
    let consumes = state.replay_loaded();
    state
        .journal_begin(&later, "t", consumes, &families(), &[write("a", 4)])
        .unwrap();
    state.journal_flush();
    if cursor_committed {
        state.spill.commit(consumes).unwrap();
    }
    drop(state);

    let state = StateDir::open(&config(tmp.path())).unwrap();
    let unknown: Vec<String> = lines(tmp.path(), "unknown.jsonl")
        .into_iter()
        .map(|r| r.request_id)
        .collect();
    assert_eq!(
        unknown,
        [later.request_id(0)],
        "only the killed replay's request is unknown (cursor committed: {cursor_committed})"
    );
    assert_eq!(state.recovery().spilled_rows, 0);
    assert!(
        !tmp.path()
            .join(SegmentId::live(state.incarnation() - 1, 2).file_name())
            .exists(),
        "deleted once recovery ended the journal"
    );
}
