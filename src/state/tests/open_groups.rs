//! Journal groups left open by an end that could not be written: a later end keeps them,
//! a kind group the finisher refuses keeps every open group, a finished shutdown only ends
//! them, and a segment a later replay passed still tells recovery what they spilled.

use super::*;

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
