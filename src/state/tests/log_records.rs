//! The outcome logs' records across a kill: a half-written batch completed without
//! duplicates, records appended after the journal refused their logs' sizes, a line that
//! is not UTF-8, and no rotation while a group is left open.

use super::*;

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
