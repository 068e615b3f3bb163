//! The spill's replay cursor: a replayed chunk consumed once (also when its cursor cannot
//! be written), a cursor found only in the journal, rewinds that never go back before the
//! consumed cursor, an earlier version's wrapper spill, and a cursor that does not read.

use super::*;

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
