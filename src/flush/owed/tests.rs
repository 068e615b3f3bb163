//! The owed book: which family-days a state directory owes, the marks it queues, and
//! what a start makes of the file a killed process left.

use std::collections::BTreeMap;

use super::*;
use crate::aggregate::Columns;
use crate::bucket::MINUTES_PER_DAY;
use crate::config::{Config, FamilyConfig};
use crate::series;
use crate::sink::RowDelta;
use crate::vocabulary::FamilyId;

/// 2026-11-30: day 20 787 since the epoch.
const DAY: u32 = 20_787;

fn families() -> Families {
    let mut config = Config::default();
    let mut views = FamilyConfig::seed_views();
    views.exact = true;
    config.families.push(views);
    Families::from_config(&config).expect("families")
}

fn views(families: &Families) -> FamilyId {
    families.by_name("views").expect("views").id
}

fn record(family: &str, day: &str) -> WriteRecord {
    serde_json::from_value(serde_json::json!({
        "time": "2026-11-30T23:59:00Z",
        "writer": "w",
        "incarnation": 1,
        "flush_seq": 1,
        "outcome": "spilled",
        "family": family,
        "table": "metrics.views_by_minute",
        "granularity": "minute",
        "key": {"page_id": "p1"},
        "day": day,
        "minute": 3,
        "deltas": {"views": 1}
    }))
    .expect("record")
}

fn write(family: FamilyId, table: Granularity, page: &str, bucket: u32) -> PartitionWrite {
    PartitionWrite {
        family,
        table,
        series: series::encode([page]).into_boxed_slice(),
        shard: None,
        epoch: None,
        rows: vec![RowDelta {
            bucket,
            columns: Columns::zeroed(1),
            requeued_since: 0,
        }],
    }
}

fn outcomes(marks: &[OutcomeRow]) -> Vec<(&str, String)> {
    marks
        .iter()
        .map(|m| (m.outcome.as_str(), crate::bucket::format_date(m.day.date())))
        .collect()
}

#[test]
fn a_day_is_marked_owed_once_and_replayed_when_the_spill_no_longer_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let families = families();
    let mut book = OwedBook::open(dir.path(), "w~d".into()).unwrap();
    let (a, b) = (record("views", "2026-11-30"), record("views", "2026-11-30"));
    let other = record("generic", "2026-11-30");
    let marks = book.spilled(&families, [&a, &b, &other]).unwrap();
    assert_eq!(outcomes(&marks), [("owed", "2026-11-30".to_owned())]);
    assert_eq!(
        marks[0].request_id, "owed/w~d",
        "one row per day and directory"
    );
    assert!(
        dir.path().join(FILE_NAME).exists(),
        "listed before the mark is sent"
    );
    assert!(
        book.spilled(&families, [&a]).unwrap().is_empty(),
        "owed already"
    );
    let day = OwedDay::of(&families, &a).unwrap();
    book.replayed(BTreeMap::from([(day.clone(), 2)]));
    assert!(book.sweep().is_empty(), "one record is still spilled");
    book.replayed(BTreeMap::from([(day, 1)]));
    assert_eq!(
        outcomes(&book.sweep()),
        [("replayed", "2026-11-30".to_owned())]
    );
    assert!(book.sweep().is_empty(), "cleared once");
    book.marks_applied().unwrap();
    assert!(
        !dir.path().join(FILE_NAME).exists(),
        "nothing may be marked owed any more"
    );
}

#[test]
fn replayed_rows_back_in_the_buffer_stay_owed_until_a_write_carries_them() {
    let dir = tempfile::tempdir().unwrap();
    let families = families();
    let id = views(&families);
    let mut book = OwedBook::open(dir.path(), "w~d".into()).unwrap();
    let spilled = record("views", "2026-11-30");
    book.spilled(&families, [&spilled]).unwrap();
    let day = OwedDay::of(&families, &spilled).unwrap();
    // The replay's write failed and went back into the buffer.
    let minute = DAY * MINUTES_PER_DAY + 3;
    book.buffered_write(&families, &write(id, Granularity::Minute, "p1", minute));
    book.replayed(BTreeMap::from([(day, 1)]));
    assert!(book.sweep().is_empty(), "in the buffer, still owed");
    assert_eq!(book.owed_days(), 1);
    // Writes of other rows carry nothing of it.
    book.settled(&families, &write(id, Granularity::Minute, "p2", minute));
    book.settled(&families, &write(id, Granularity::Day, "p1", DAY));
    book.settled(&families, &write(id, Granularity::Minute, "p1", minute + 1));
    assert!(book.sweep().is_empty());
    book.settled(&families, &write(id, Granularity::Minute, "p1", minute));
    assert_eq!(
        outcomes(&book.sweep()),
        [("replayed", "2026-11-30".to_owned())]
    );
    assert_eq!(book.owed_days(), 0);
}

#[test]
fn a_day_spilled_again_while_its_clearing_is_queued_is_owed_again() {
    let dir = tempfile::tempdir().unwrap();
    let families = families();
    let mut book = OwedBook::open(dir.path(), "w~d".into()).unwrap();
    let spilled = record("views", "2026-11-30");
    book.spilled(&families, [&spilled]).unwrap();
    let day = OwedDay::of(&families, &spilled).unwrap();
    book.replayed(BTreeMap::from([(day, 1)]));
    assert_eq!(book.sweep().len(), 1);
    let marks = book.spilled(&families, [&spilled]).unwrap();
    assert_eq!(
        outcomes(&marks),
        [("owed", "2026-11-30".to_owned())],
        "queued after the replayed mark: the table ends owed"
    );
    book.marks_applied().unwrap();
    let text = std::fs::read_to_string(dir.path().join(FILE_NAME)).unwrap();
    assert!(text.contains("2026-11-30"), "still listed: {text}");
}

#[test]
fn a_start_asserts_what_the_spill_holds_and_clears_what_a_kill_left_listed() {
    let dir = tempfile::tempdir().unwrap();
    let families = families();
    let mut before = OwedBook::open(dir.path(), "w~d".into()).unwrap();
    let (kept, gone) = (record("views", "2026-11-30"), record("views", "2026-11-29"));
    before.spilled(&families, [&kept, &gone]).unwrap();
    drop(before); // killed: the 29th was replayed, its clearing never sent.
    let mut start = OwedBook::open(dir.path(), "w~d".into()).unwrap();
    start.count_spilled(&families, &kept);
    let marks = start.start_marks().unwrap();
    assert_eq!(
        outcomes(&marks),
        [
            ("owed", "2026-11-30".to_owned()),
            ("replayed", "2026-11-29".to_owned())
        ]
    );
    start.marks_applied().unwrap();
    let text = std::fs::read_to_string(dir.path().join(FILE_NAME)).unwrap();
    assert!(
        text.contains("2026-11-30") && !text.contains("2026-11-29"),
        "{text}"
    );
}
