use super::write::PREALLOCATED;
use super::*;
use crate::aggregate::Columns;
use crate::sink::{PartitionWrite, RowDelta};
use crate::state::ids::{Cursor, SegmentId};
use crate::vocabulary::FamilyId;

fn write(series: &str, deltas: &[i64]) -> PartitionWrite {
    PartitionWrite {
        epoch: None,
        family: FamilyId(1),
        table: Granularity::Day,
        series: crate::series::encode([series]).into_boxed_slice(),
        shard: Some(2),
        rows: deltas
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let mut columns = Columns::zeroed(2);
                columns.checked_add_at(0, *d);
                columns.checked_add_at(1, d.wrapping_neg());
                RowDelta {
                    bucket: 20_000 + i as u32,
                    columns,
                    requeued_since: 0,
                }
            })
            .collect(),
    }
}

fn family() -> FamilyEntry {
    FamilyEntry {
        id: 1,
        name: "views".into(),
        minute_table: "m.views_by_minute".into(),
        day_table: "m.views_by_day".into(),
        hour_table: String::new(),
        total_table: String::new(),
        key_columns: vec!["page_id".into()],
        columns: vec!["views".into(), "bytes".into()],
    }
}

/// A replay cursor of a recovered totals segment.
fn totals_cursor() -> Cursor {
    Cursor {
        segment: SegmentId::totals(2, 9, true),
        offset: 77,
    }
}

/// A replay cursor of a recovered segment.
fn cursor() -> Cursor {
    Cursor {
        segment: SegmentId {
            totals: false,
            incarnation: 2,
            flush_seq: 9,
            recovered: true,
            held: false,
        },
        offset: 77,
    }
}

fn flush(seq: u64) -> FlushId {
    FlushId {
        writer: "w".into(),
        incarnation: 3,
        flush_seq: seq,
        nonce: None,
    }
}

#[test]
fn a_group_reads_back_with_its_outcomes_and_a_torn_tail_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.wal");
    let (mut journal, groups, _) = Journal::open(path.clone()).unwrap();
    assert!(groups.is_empty());
    journal.set_keep(true);
    let cursor = cursor();
    let mut epoch_write = write("b", &[i64::MIN]);
    epoch_write.epoch = Some(29_934_000);
    let writes = [write("a", &[1, 2]), epoch_write];
    journal
        .begin(&flush(5), "t", Some(cursor), &[family()], &writes)
        .unwrap();
    journal.outcome(0, &Settled::Applied);
    journal.outcome(
        1,
        &Settled::Unknown {
            kind: "write_timeout".into(),
            text: "x".into(),
        },
    );
    journal.logs_at(10, 20).unwrap();
    journal.end(5).unwrap();
    // A cursor inside a held segment (rows a final flush held for the delta ledger).
    let held = Cursor {
        segment: SegmentId {
            recovered: false,
            held: true,
            ..cursor.segment
        },
        offset: 5,
    };
    journal
        .begin(&flush(6), "t", Some(held), &[family()], &writes[..1])
        .unwrap();
    journal.outcome(0, &Settled::NotStarted);
    journal.flush_pending().unwrap();
    // A crash in the middle of a record: the tail is unreadable.
    let whole = journal.offset as usize;
    drop(journal);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.truncate(whole);
    bytes.extend_from_slice(&[9, 0, 0, 0, 1, 2]);
    std::fs::write(&path, &bytes).unwrap();

    let (reopened, groups, torn) = Journal::open(path.clone()).unwrap();
    assert_eq!(torn, 6);
    assert_eq!(
        reopened.offset as usize, whole,
        "the next write starts there"
    );
    assert_eq!(groups.len(), 2);
    let first = &groups[0];
    assert!(first.committed && first.ended);
    assert_eq!(first.consumes, Some(cursor));
    assert_eq!(first.logs_at, Some((10, 20)));
    assert_eq!(first.family(1), Some(&family()));
    assert_eq!(first.intents.len(), 2);
    assert_eq!(first.intents[0].shard, Some(2));
    assert_eq!(
        (first.intents[0].epoch, first.intents[1].epoch),
        (None, Some(29_934_000)),
        "an epoch is kept, and an intent without one reads as before"
    );
    assert_eq!(
        first.intents[0].rows[1],
        IntentRow {
            bucket: 20_001,
            deltas: vec![2, -2]
        }
    );
    assert_eq!(
        first.intents[1].rows[0].deltas,
        [i64::MIN, i64::MIN.wrapping_neg()]
    );
    assert_eq!(first.outcomes[&0], Settled::Applied);
    assert!(
        matches!(&first.outcomes[&1], Settled::Unknown { kind, .. } if kind == "write_timeout")
    );
    let second = &groups[1];
    assert!(second.committed && !second.ended);
    assert_eq!(second.outcomes[&0], Settled::NotStarted);
    assert_eq!(
        second.consumes,
        Some(held),
        "a held segment's cursor reads back"
    );
    assert_eq!(flush(6).request_id(3), "w/3/6/3");
}

#[test]
fn a_wrapper_group_reads_back_with_its_tables_rows_outcomes_and_log_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.wal");
    let (mut journal, _, _) = Journal::open(path.clone()).unwrap();
    journal.set_keep(true);
    let table = WrapperTable {
        id: 4,
        keyspace: "app".into(),
        name: "views".into(),
        key_columns: vec!["page".into(), "day".into()],
        counters: vec!["hits".into(), "bytes".into()],
    };
    let (k1, k2) = (b"key-one".as_slice(), b"key-two".as_slice());
    let intents = vec![
        (4, vec![(k1, [1_i64, -2].as_slice())]),
        (
            4,
            vec![(k2, [i64::MAX, 0].as_slice()), (k1, [3, 4].as_slice())],
        ),
    ];
    let cursor = Cursor {
        segment: crate::state::SegmentId::live(2, 9),
        offset: 123,
    };
    journal
        .begin_wrapper(
            &flush(7),
            "t",
            Some(cursor),
            std::slice::from_ref(&table),
            &intents,
        )
        .unwrap();
    journal.outcome(1, &Settled::Applied);
    journal.logs_at_wrapper([1, 2, 3]).unwrap();
    journal.end(7).unwrap();
    // A group an earlier version wrote: an offset of its own spill file.
    journal
        .begin_wrapper_of_an_earlier_version(
            &flush(8),
            Some(456),
            std::slice::from_ref(&table),
            &intents,
        )
        .unwrap();
    drop(journal);

    let (_, groups, torn) = Journal::open(path).unwrap();
    assert_eq!(torn, 0);
    assert_eq!(groups.len(), 2, "{groups:?}");
    let (group, earlier) = (&groups[0], &groups[1]);
    assert!(group.committed && group.ended);
    assert!(earlier.committed && !earlier.ended);
    assert_eq!(earlier.consumes, None);
    let legacy = earlier.wrapper.as_ref().expect("a wrapper group");
    assert_eq!(legacy.legacy_spill_offset, Some(456));
    assert_eq!(legacy.intents.len(), 2);
    assert!(group.intents.is_empty(), "not a sidecar flush");
    let wrapper = group.wrapper.as_ref().expect("a wrapper group");
    assert_eq!(group.consumes, Some(cursor));
    assert_eq!(wrapper.legacy_spill_offset, None);
    assert_eq!(wrapper.table(4), Some(&table));
    assert_eq!(wrapper.logs_at, Some([1, 2, 3]));
    assert_eq!(wrapper.intents.len(), 2);
    assert_eq!(wrapper.intents[1].request, 1);
    assert_eq!(
        wrapper.intents[1].rows[0],
        WrapperRow {
            key: k2.to_vec(),
            deltas: vec![i64::MAX, 0]
        }
    );
    assert_eq!(group.outcomes[&1], Settled::Applied);
    assert!(!group.outcomes.contains_key(&0));
}

#[test]
fn a_group_commit_cut_short_is_not_committed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.wal");
    let (mut journal, _, _) = Journal::open(path.clone()).unwrap();
    journal
        .begin(&flush(1), "t", None, &[family()], &[write("a", &[1])])
        .unwrap();
    let end = journal.offset as usize;
    drop(journal);
    let bytes = std::fs::read(&path).unwrap();
    // Cut inside the Committed frame (the last 9 bytes).
    std::fs::write(&path, &bytes[..end - 3]).unwrap();
    let (_, groups, _) = Journal::open(path).unwrap();
    assert_eq!(groups.len(), 1);
    assert!(!groups[0].committed);
    assert_eq!(groups[0].intents.len(), 1);
}

#[test]
fn end_starts_the_journal_over_and_a_shorter_group_hides_the_longer_one_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.wal");
    let (mut journal, _, _) = Journal::open(path.clone()).unwrap();
    let many: Vec<PartitionWrite> = (0..50).map(|i| write(&format!("k{i}"), &[i])).collect();
    journal
        .begin(&flush(1), "t", None, &[family()], &many)
        .unwrap();
    journal.end(1).unwrap();
    assert!(read(&path).unwrap().is_empty(), "empty once a flush ended");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), PREALLOCATED);
    // A shorter group overwrites the start; the rest of the longer one stays on
    // disk behind the end mark and is never read.
    journal
        .begin(&flush(2), "t", None, &[family()], &[write("a", &[1])])
        .unwrap();
    let (_, groups, torn) = Journal::open(path).unwrap();
    assert_eq!(torn, 0);
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].flush.flush_seq, 2);
    assert_eq!(groups[0].intents.len(), 1);
}

/// A kind's body as running totals wrote it before kinds were numbered (family 1,
/// minute table, writer `w/3/a`, write time -1, series `ab`, one row: bucket 6, total
/// 8, unconfirmed -8): the journal keeps it as bytes, whatever it holds.
fn first_kind_body() -> Vec<u8> {
    [
        &1u16.to_le_bytes()[..],
        &[0],
        &5u32.to_le_bytes(),
        b"w/3/a",
        &(-1i64).to_le_bytes(),
        &1u32.to_le_bytes(),
        &[0xab],
        &1u32.to_le_bytes(),
        &6u32.to_le_bytes(),
        &1u16.to_le_bytes(),
        &8i64.to_le_bytes(),
        &(-8i64).to_le_bytes(),
    ]
    .concat()
}

#[test]
fn a_group_of_kind_intents_reads_back_with_each_kind_body_and_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.wal");
    let (mut journal, _, _) = Journal::open(path.clone()).unwrap();
    journal.set_keep(true);
    journal
        .begin(&flush(4), "t", None, &[family()], &[write("a", &[1])])
        .unwrap();
    journal.end(4).unwrap();
    let intents = [
        KindIntent {
            kind: KindId::FIRST,
            request: 1,
            body: first_kind_body(),
        },
        KindIntent {
            kind: KindId::new(64).unwrap(),
            request: 2,
            body: Vec::new(),
        },
        KindIntent {
            kind: KindId::new(127).unwrap(),
            request: 3,
            body: vec![0; 3],
        },
    ];
    journal
        .begin_kind(&flush(4), "t", Some(totals_cursor()), &[family()], &intents)
        .unwrap();
    journal.outcome(1, &Settled::Applied);
    journal.flush_pending().unwrap();
    drop(journal);
    let (_, groups, torn) = Journal::open(path).unwrap();
    assert_eq!(torn, 0);
    assert_eq!(groups.len(), 2, "the counter group, then the kinds' group");
    assert!(groups[0].kind_intents.is_empty());
    let kinds = &groups[1];
    assert!(kinds.committed && !kinds.ended);
    assert!(kinds.intents.is_empty());
    assert_eq!(
        kinds.consumes,
        Some(totals_cursor()),
        "the group names the cursor its replayed rows were read to"
    );
    assert_eq!(kinds.kind_intents, intents);
    assert_eq!(kinds.outcomes[&1], Settled::Applied);
}

#[test]
fn only_tags_left_to_kinds_name_a_kind() {
    assert_eq!(KindId::FIRST.tag(), 7);
    for tag in 0..=u8::MAX {
        assert_eq!(
            KindId::new(tag).is_some(),
            (64..=127).contains(&tag),
            "tag {tag}"
        );
    }
    for own in [
        BEGIN,
        INTENT,
        COMMITTED,
        OUTCOME,
        LOGS_AT,
        END,
        WRAPPER_BEGIN,
        WRAPPER_INTENT,
        WRAPPER_LOGS_AT,
        STARTS_BELOW,
        WRAPPER_BEGIN_CURSOR,
        BEGIN_TABLES,
    ] {
        assert!(
            KindId::new(own).is_none() && own != KindId::FIRST.tag(),
            "the journal's own tag {own} is not a kind's"
        );
    }
}

/// Every record kind, written once: the bytes on disk as this format defines them. A
/// journal written by an earlier build must read the same, so any change here is a
/// format change (and needs a version of its own), not a refactoring.
#[test]
fn the_format_of_every_record_is_fixed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.wal");
    let (mut journal, _, _) = Journal::open(path.clone()).unwrap();
    journal.set_keep(true);
    let cursor = cursor();
    let mut epoch_write = write("b", &[-3]);
    epoch_write.epoch = Some(7);
    journal
        .begin(
            &flush(5),
            "t",
            Some(cursor),
            &[family()],
            &[write("a", &[1]), epoch_write],
        )
        .unwrap();
    journal.outcome(0, &Settled::Applied);
    for (request, settled) in [
        (
            1,
            Settled::NotApplied {
                kind: "k".into(),
                text: "x".into(),
            },
        ),
        (
            2,
            Settled::Rejected {
                kind: "k".into(),
                text: "y".into(),
            },
        ),
        (
            3,
            Settled::Unknown {
                kind: "k".into(),
                text: "z".into(),
            },
        ),
        (4, Settled::NotStarted),
        (5, Settled::Dropped),
    ] {
        journal.outcome(request, &settled);
    }
    journal.logs_at(10, 20).unwrap();
    journal.end(5).unwrap();
    let first_kind = KindIntent {
        kind: KindId::FIRST,
        request: 2,
        body: first_kind_body(),
    };
    journal
        .begin_kind(&flush(5), "t", None, &[family()], &[first_kind])
        .unwrap();
    journal.end(5).unwrap();
    let table = WrapperTable {
        id: 4,
        keyspace: "a".into(),
        name: "v".into(),
        key_columns: vec!["p".into()],
        counters: vec!["h".into()],
    };
    let intents = vec![(4, vec![(b"kk".as_slice(), [1_i64, -1].as_slice())])];
    journal
        .begin_wrapper_of_an_earlier_version(
            &flush(6),
            Some(123),
            std::slice::from_ref(&table),
            &intents,
        )
        .unwrap();
    journal.logs_at_wrapper([1, 2, 3]).unwrap();
    journal
        .begin_wrapper(&flush(7), "t", None, &[table], &[])
        .unwrap();
    let written = std::fs::read(&path).unwrap()[..journal.offset as usize].to_vec();
    let hex: String = written.iter().map(|b| format!("{b:02x}")).collect();
    let expected = concat!(
        "9000000011c641340101000000770300000000000000050000000000000001000000740102000000",
        "000000000900000000000000014d0000000000000001000000010005000000766965777311000000",
        "6d2e76696577735f62795f6d696e7574650e0000006d2e76696577735f62795f6461790100000007",
        "000000706167655f6964020000000500000076696577730500000062797465732b0000005fa6d546",
        "020000000001000102000300000001006101000000204e000002000100000000000000ffffffffff",
        "ffffff330000002e6618cf020100000001000102000300000001006201000000204e00000200fdff",
        "ffffffffffff0300000000000000070000000000000001000000a5a02d41030e00000018149a2304",
        "0000000000000000000000000010000000a9bac7a3040100000001010000006b0100000078100000",
        "001b504145040200000002010000006b0100000079100000002fa9eea6040300000003010000006b",
        "010000007a0e000000bf371d3e04040000000400000000000000000e00000092d9f1fa0405000000",
        "05000000000000000011000000c8b10c32050a00000000000000140000000000000009000000bb8f",
        "9ae0060500000000000000770000002d60cbc1010100000077030000000000000005000000000000",
        "00010000007400010000000100050000007669657773110000006d2e76696577735f62795f6d696e",
        "7574650e0000006d2e76696577735f62795f6461790100000007000000706167655f696402000000",
        "05000000766965777305000000627974657338000000658cdc41070200000001000005000000772f",
        "332f61ffffffffffffffff01000000ab010000000600000001000800000000000000f8ffffffffff",
        "ffff01000000a5a02d410309000000bb8f9ae006050000000000000048000000e7d640d808010000",
        "0077030000000000000006000000000000000100000074017b000000000000000100000004000000",
        "010000006101000000760100000001000000700100000001000000682500000047c8713a09000000",
        "000400000001000000020000006b6b02000100000000000000ffffffffffffffff01000000a5a02d",
        "410319000000492a6db50a010000000000000002000000000000000300000000000000400000006a",
        "68be210c010000007703000000000000000700000000000000010000007400010000000400000001",
        "00000061010000007601000000010000007001000000010000006801000000a5a02d4103",
    );
    assert_eq!(hex, expected);
}

/// A header carries the start nonce at its end; a header without one (written before
/// nonces existed, or by the driver wrapper) reads as `None`, and request ids follow.
#[test]
fn a_start_nonce_rides_at_the_end_of_the_header() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.wal");
    let (mut journal, _, _) = Journal::open(path.clone()).unwrap();
    journal.set_keep(true);
    let with = FlushId {
        nonce: Some(0x00c0_ffee),
        ..flush(7)
    };
    journal
        .begin(&with, "t", None, &[family()], &[write("a", &[1])])
        .unwrap();
    journal.end(7).unwrap();
    journal
        .begin(&flush(8), "t", None, &[family()], &[write("a", &[1])])
        .unwrap();
    journal.flush_pending().unwrap();
    drop(journal);
    let (_, groups, torn) = Journal::open(path).unwrap();
    assert_eq!(torn, 0);
    assert_eq!(groups[0].flush, with);
    assert_eq!(
        groups[0].families,
        [family()],
        "the dictionary reads whole before it"
    );
    assert_eq!(groups[1].flush.nonce, None);
    assert_eq!(with.request_id(3), "w/3.00c0ffee/7/3");
    assert_eq!(flush(8).request_id(3), "w/3/8/3");
    assert_eq!(with.named_request("held"), "w/3.00c0ffee/7/held");
    assert_eq!(with.ledger_writer(), "w/00c0ffee");
    assert_eq!(flush(8).ledger_writer(), "w");
}

/// A record about a request when no group is open (the last group ended, or the group
/// commit of the next failed: nothing of it was sent) is not written: it would attach to
/// no group, and the reader, which stops at it, would lose every group written after it.
#[test]
fn records_without_an_open_group_are_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.wal");
    let (mut journal, _, _) = Journal::open(path.clone()).unwrap();
    journal
        .begin(&flush(1), "t", None, &[family()], &[write("a", &[1])])
        .unwrap();
    journal.end(1).unwrap();
    // As a flush whose group commit failed would: a spill it could not write, dropped.
    journal.outcome(0, &Settled::Dropped);
    journal.logs_at(1, 2).unwrap();
    journal.flush_pending().unwrap();
    journal
        .begin(&flush(2), "t", None, &[family()], &[write("b", &[2])])
        .unwrap();
    journal.outcome(0, &Settled::NotStarted);
    journal.flush_pending().unwrap();
    drop(journal);

    let (_, groups, torn) = Journal::open(path).unwrap();
    assert_eq!(torn, 0);
    assert_eq!(groups.len(), 1, "the group after the stray records is read");
    assert_eq!(groups[0].flush.flush_seq, 2);
    assert_eq!(groups[0].outcomes.get(&0), Some(&Settled::NotStarted));
    assert_eq!(groups[0].logs_at, None);
}
