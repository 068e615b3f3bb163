//! An earlier version's totals spill files moved into segments: each total written once,
//! whether the move was cut short or came after a replay.

use super::*;

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
