//! The spill's tests: segments, the cursor, reading back, the size limit, earlier
//! versions' files, the read-only view.

use super::*;
use crate::state::record::{RecordOutcome, WriteRecord};

fn record(n: i64) -> WriteRecord {
    WriteRecord {
        total: None,
        key_hex: None,
        time: "2026-11-30T00:00:00Z".into(),
        writer: "w".into(),
        incarnation: 1,
        flush_seq: 1,
        request_id: format!("w/1/1/{n}"),
        row: 0,
        outcome: RecordOutcome::Spilled,
        family: "generic".into(),
        table: "ks.counts_by_minute".into(),
        granularity: "minute".into(),
        key: [("name".to_string(), "x".to_string())].into(),
        shard: None,
        epoch: None,
        day: "2026-11-30".into(),
        minute: Some(1),
        month: None,
        hour: None,
        deltas: [("value".to_string(), n)].into(),
        error: None,
    }
}

fn segment(seq: u64) -> SegmentId {
    SegmentId::live(1, seq)
}

fn all(spill: &mut Spill) -> Vec<i64> {
    spill
        .load(|_, _| true)
        .unwrap()
        .records
        .into_iter()
        .map(|(_, r)| r.deltas["value"])
        .collect()
}

/// Appends an unreadable line to segment `id` (written whole, a segment is damaged only
/// by the disk), as the spill then lists it.
fn damage(spill: &mut Spill, id: SegmentId) {
    let path = spill.dir.join(id.file_name());
    let mut file = fs::OpenOptions::new().append(true).open(&path).unwrap();
    std::io::Write::write_all(&mut file, b"{not a record\n").unwrap();
    drop(file);
    spill
        .segments
        .insert(id, fs::metadata(&path).unwrap().len());
}

/// A read that an error ends (a listed segment that cannot be opened) still returns
/// the unreadable lines it passed before: they are marked reported, and no later
/// read would report them.
#[test]
fn a_read_ended_by_an_error_returns_what_it_passed_before() {
    let dir = tempfile::tempdir().unwrap();
    let mut spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
    spill
        .write_segment(segment(1), None, &[vec![record(1)]], &[])
        .unwrap();
    damage(&mut spill, segment(1));
    // Listed, gone from the disk.
    spill.segments.insert(segment(2), 100);
    let passed = spill.read(|_, _| Took::Taken);
    assert_eq!(passed.corrupt, ["{not a record"]);
    assert!(passed.error.is_some());
}

/// A chunk read again after a rewind (its group commit failed) finds what the first
/// read reported: a refused record is passed over, never handed to the reader again
/// (it is in `rejected.jsonl` once), an unreadable line is not returned again (set
/// aside once). A scan reports nothing, so the read after it still does.
#[test]
fn a_rewound_read_reports_refused_records_and_unreadable_lines_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
    spill
        .write_segment(segment(1), None, &[vec![record(1), record(2)]], &[])
        .unwrap();
    // Damage after the two records.
    damage(&mut spill, segment(1));
    spill
        .write_segment(segment(2), None, &[vec![record(3)]], &[])
        .unwrap();

    let mut scanned = 0;
    spill.scan(|_| scanned += 1).unwrap();
    assert_eq!(scanned, 3);

    let read = |spill: &mut Spill| {
        let mut handed = Vec::new();
        let passed = spill.read(|_, record| {
            let value = record.deltas["value"];
            handed.push(value);
            if value == 2 {
                Took::Refused
            } else {
                Took::Taken
            }
        });
        assert!(passed.error.is_none(), "{:?}", passed.error);
        (handed, passed)
    };
    let (handed, passed) = read(&mut spill);
    assert_eq!(handed, [1, 2, 3]);
    assert_eq!(passed.corrupt, ["{not a record"], "reported after the scan");
    assert_eq!(passed.refused_again, 0);

    spill.rewind(None);
    let (handed, passed) = read(&mut spill);
    assert_eq!(
        handed,
        [1, 3],
        "the refused record is not handed over again"
    );
    assert!(passed.corrupt.is_empty(), "{:?}", passed.corrupt);
    assert_eq!(passed.refused_again, 1, "passed over, and counted as such");
    assert!(!spill.has_unloaded());

    // Once the durable cursor passes them, nothing is remembered.
    spill.commit(spill.loaded()).unwrap();
    assert!(spill.reported.is_empty(), "{:?}", spill.reported);
}

#[test]
fn segments_replay_in_order_in_chunks_and_a_committed_cursor_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
    spill
        .write_segment(segment(2), None, &[vec![record(3)], vec![record(4)]], &[])
        .unwrap();
    spill
        .write_segment(segment(1), None, &[vec![record(1), record(2)]], &[])
        .unwrap();
    assert!(spill.has_unloaded());
    let first = spill.load(|n, _| n < 3).unwrap();
    let values: Vec<i64> = first
        .records
        .iter()
        .map(|(_, r)| r.deltas["value"])
        .collect();
    assert_eq!(values, [1, 2, 3], "segment order, three at a time");
    let cursor = spill.loaded();
    // Not committed: a restart loads the same rows again.
    drop(spill);
    let mut spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
    assert_eq!(all(&mut spill), [1, 2, 3, 4]);
    // Committed (as after the flush that carried them settled): they are gone, and
    // the segment they emptied is deleted once no journal group is open (a start opens
    // the spill before recovery reads it); it counts against the limit until then.
    let mut spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
    spill.load(|n, _| n < 3).unwrap();
    let before = spill.bytes();
    spill.commit(cursor).unwrap();
    assert!(dir.path().join(segment(1).file_name()).exists());
    assert_eq!(spill.bytes(), before, "still on disk, still counted");
    drop(spill);
    let spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
    assert!(
        dir.path().join(segment(1).file_name()).exists(),
        "not at open"
    );
    let mut spill = spill;
    spill.delete_passed().unwrap();
    assert!(!dir.path().join(segment(1).file_name()).exists());
    drop(spill);
    let mut spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
    assert_eq!(all(&mut spill), [4]);
    // A cursor named by the journal (a committed group) wins over an older file.
    let end = spill.loaded();
    drop(spill);
    let mut spill = Spill::open(dir.path(), u64::MAX, end).unwrap();
    assert!(!spill.has_unloaded());
    assert!(all(&mut spill).is_empty());
    spill.delete_passed().unwrap();
    assert_eq!(spill.bytes(), 0, "consumed segments are deleted");
}

#[test]
fn a_segment_names_the_cursor_its_flush_consumed() {
    let dir = tempfile::tempdir().unwrap();
    let mut spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
    spill
        .write_segment(segment(1), None, &[vec![record(1)], vec![record(2)]], &[])
        .unwrap();
    spill.load(|n, _| n < 1).unwrap();
    let consumed = spill.loaded();
    // The flush that carried record 1 could not send it and spilled it again.
    spill
        .write_segment(segment(2), consumed, &[vec![record(1)]], &[])
        .unwrap();
    drop(spill);
    let mut spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
    assert_eq!(
        all(&mut spill),
        [2, 1],
        "record 1 once, from its new segment"
    );
}

/// Rows a replay read and its flush could not settle move to the flush's segment
/// even when the spill is full (they are on disk already: refusing them would drop
/// them), under a header naming the cursor they were read to; the flush's own rows
/// get only the room left, and a restart reads every moved row once.
#[test]
fn carried_rows_are_kept_past_a_full_spill_and_their_cursor_named() {
    let dir = tempfile::tempdir().unwrap();
    let lines = |records: &[WriteRecord]| -> Vec<u8> {
        records
            .iter()
            .flat_map(|r| {
                let mut line = serde_json::to_vec(r).unwrap();
                line.push(b'\n');
                line
            })
            .collect()
    };
    // A spill that two rows fill.
    let first = {
        let mut s = Spill::open(dir.path(), u64::MAX, None).unwrap();
        s.write_segment(segment(1), None, &[vec![record(1), record(2)]], &[])
            .unwrap();
        s.bytes()
    };
    let mut spill = Spill::open(dir.path(), first, None).unwrap();
    assert_eq!(spill.bytes(), spill.max_bytes(), "full");
    spill.load(|_, _| true).unwrap();
    let read_to = spill.loaded();
    assert!(read_to.is_some());
    // Both read rows are carried, the full spill notwithstanding; the flush's own
    // row finds no room and is refused.
    let kept = spill
        .write_segment_carrying(
            segment(2),
            read_to,
            &lines(&[record(1), record(2)]),
            &[vec![record(3)]],
        )
        .unwrap();
    assert_eq!(kept, vec![false]);
    let named = read_header(&dir.path().join(segment(2).file_name())).unwrap();
    assert_eq!(named, read_to);
    // The flush's end: the cursor passes segment 1, which no longer counts; the spill
    // is back within its limit.
    spill.commit(read_to).unwrap();
    spill.delete_passed().unwrap();
    assert!(!dir.path().join(segment(1).file_name()).exists());
    assert!(
        spill.bytes() <= spill.max_bytes() + 200,
        "one header more than before"
    );
    drop(spill);
    let mut spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
    assert_eq!(all(&mut spill), [1, 2], "each moved row once");
}

/// A kill before the flush's end: the carrying segment's header names the cursor,
/// so the next start reads the moved rows from there, not again from segment 1.
#[test]
fn a_kill_after_carrying_reads_the_moved_rows_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut spill = Spill::open(dir.path(), 1, None).unwrap();
    spill.max_bytes = u64::MAX;
    spill
        .write_segment(segment(1), None, &[vec![record(1)]], &[])
        .unwrap();
    spill.max_bytes = 1;
    spill.load(|_, _| true).unwrap();
    let read_to = spill.loaded();
    let line = {
        let mut l = serde_json::to_vec(&record(1)).unwrap();
        l.push(b'\n');
        l
    };
    spill
        .write_segment_carrying(segment(2), read_to, &line, &[])
        .unwrap();
    drop(spill);
    let mut spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
    assert_eq!(all(&mut spill), [1]);
}

#[test]
fn the_size_limit_keeps_whole_writes_and_unfinished_segments_vanish() {
    let dir = tempfile::tempdir().unwrap();
    let one = serde_json::to_vec(&record(1)).unwrap().len() as u64 + 1;
    let mut spill = Spill::open(dir.path(), 80 + one * 3, None).unwrap();
    let kept = spill
        .write_segment(
            segment(1),
            None,
            &[
                vec![record(1), record(2)],
                vec![record(3), record(4)],
                vec![record(5)],
            ],
            &[],
        )
        .unwrap();
    assert_eq!(kept, [true, false, true]);
    assert!(spill.bytes() <= spill.max_bytes());
    let kept = spill
        .write_segment(segment(2), None, &[vec![record(6)]], &[])
        .unwrap();
    assert_eq!(kept, [false], "full");
    assert!(!dir.path().join(segment(2).file_name()).exists());
    fs::write(
        dir.path().join("spill.0000000001.000000000003.tmp"),
        "{\"torn",
    )
    .unwrap();
    drop(spill);
    let mut spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
    assert_eq!(all(&mut spill), [1, 2, 5]);
    assert!(
        !dir.path()
            .join("spill.0000000001.000000000003.tmp")
            .exists()
    );
    let keys = spill.segment_keys(segment(1)).unwrap().unwrap();
    assert!(keys.contains(&("w/1/1/5".to_string(), 0)));
    assert_eq!(spill.segment_keys(segment(9)).unwrap(), None);
}

/// A sealed ingest-log file's segment, streamed into its file: the same bytes as the
/// batch writer's, whole or not at all under the limit, whatever the room into an empty
/// spill (see `StateDir::spill_ingest`), its size counted as on disk.
#[test]
fn an_ingest_segment_is_streamed_whole_or_not_at_all() {
    let records: Vec<WriteRecord> = (1..=5).map(record).collect();
    let same = tempfile::tempdir().unwrap();
    let mut batch = Spill::open(same.path(), u64::MAX, None).unwrap();
    batch
        .write_segment(segment(1), None, std::slice::from_ref(&records), &[])
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let one = serde_json::to_vec(&record(1)).unwrap().len() as u64 + 1;
    let mut spill = Spill::open(dir.path(), one * 2, None).unwrap();
    assert!(
        spill
            .write_segment_ingest(segment(1), &records, &[], true)
            .unwrap(),
        "into an empty spill whatever its size"
    );
    let path = dir.path().join(segment(1).file_name());
    assert_eq!(
        fs::read(&path).unwrap(),
        fs::read(same.path().join(segment(1).file_name())).unwrap()
    );
    assert_eq!(spill.bytes(), fs::metadata(&path).unwrap().len());
    assert!(
        !spill
            .write_segment_ingest(segment(2), &[record(6)], &[], false)
            .unwrap(),
        "no room: nothing written"
    );
    assert!(!dir.path().join(segment(2).file_name()).exists());
    spill.max_bytes = spill.bytes() + 80 + one;
    assert!(
        spill
            .write_segment_ingest(segment(2), &[record(6)], &[], false)
            .unwrap()
    );
    assert_eq!(all(&mut spill), [1, 2, 3, 4, 5, 6]);
    assert!(spill.bytes() <= spill.max_bytes());
}

/// The single spill file of earlier versions: unsent rows are replayed, rows of an
/// interrupted replay become unknown records.
#[test]
fn files_of_the_earlier_spill_are_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    let line = |n| format!("{}\n", serde_json::to_string(&record(n)).unwrap());
    fs::write(dir.path().join("spill.jsonl"), line(1)).unwrap();
    fs::write(dir.path().join("spill.loaded.3.jsonl"), line(2)).unwrap();
    fs::write(dir.path().join("spill.inflight.2.jsonl"), line(7)).unwrap();
    let mut spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
    let mut replayed = all(&mut spill);
    replayed.sort();
    assert_eq!(replayed, [1, 2]);
    let unknown =
        fs::read_to_string(dir.path().join("unknown.replay-interrupted.2.jsonl")).unwrap();
    let record: WriteRecord = serde_json::from_str(unknown.trim()).unwrap();
    assert_eq!(
        (record.outcome, record.deltas["value"]),
        (RecordOutcome::Unknown, 7)
    );
    assert!(!dir.path().join("spill.inflight.2.jsonl").exists());
}

#[test]
fn the_read_only_view_finds_the_cursor_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
    spill
        .write_segment(segment(1), None, &[vec![record(1)], vec![record(2)]], &[])
        .unwrap();
    spill
        .write_segment(segment(2), None, &[vec![record(3)]], &[])
        .unwrap();
    spill.load(|n, _| n < 1).unwrap();
    let cursor = spill.loaded().unwrap();
    drop(spill);
    fs::write(dir.path().join("spill.0000000001.000000000009.tmp"), "x").unwrap();
    let listing = || {
        let mut names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let before = listing();
    let view = SpillView::read(dir.path(), None).unwrap();
    assert_eq!(view.consumed, None, "loaded, not committed");
    let ids: Vec<SegmentId> = view.segments.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, [segment(1), segment(2)]);
    // A cursor the journal names (a committed flush carries those rows).
    let view = SpillView::read(dir.path(), Some(cursor)).unwrap();
    assert_eq!(view.unconsumed_from(segment(1)), Some(cursor.offset));
    assert_eq!(view.unconsumed_from(segment(2)), Some(0));
    let past = Cursor {
        segment: segment(2),
        offset: 0,
    };
    let view = SpillView::read(dir.path(), Some(past)).unwrap();
    assert_eq!(view.unconsumed_from(segment(1)), None);
    assert_eq!(listing(), before, "nothing created, moved or deleted");
}

#[test]
fn segment_names_round_trip_and_sort_by_flush() {
    let live = segment(7);
    let recovered = SegmentId {
        recovered: true,
        ..live
    };
    let held = SegmentId { held: true, ..live };
    assert_eq!(SegmentId::parse(&live.file_name()), Some(live));
    assert_eq!(SegmentId::parse(&recovered.file_name()), Some(recovered));
    assert_eq!(SegmentId::parse(&held.file_name()), Some(held));
    assert_eq!(held.file_name(), "spill.0000000001.000000000007.held.jsonl");
    assert!(live < held && held < recovered && recovered < segment(8));
    assert_eq!(SegmentId::parse("spill.cursor"), None);
}
