//! Rows whose family a configuration change removed or moved: replayed rows of a removed
//! family refused (a chunk at a time, logged once across a kill), and a row re-queued
//! before its family moved written to the old tables.

use super::*;

#[tokio::test]
async fn replayed_rows_of_a_removed_family_are_rejected_not_lost() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    {
        let down = down_sink();
        let h = harness(&config, down);
        h.engine
            .record("page.views", &[("page_id", "p")][..], 5, T0, None)
            .unwrap();
        let report = h.flusher.finish().await;
        assert_eq!(
            report.spilled, 2,
            "transient failures in the final flush are spilled"
        );
    }
    let mut without = config.clone();
    without.families.clear();
    let mut h = harness(&without, MemorySink::new());
    h.flusher.flush_now().await;
    let a = accounting(&h);
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!((a.minute.rejected, a.day.rejected), (5, 5));
    let rejected = read_log(dir.path(), "rejected.jsonl");
    assert!(
        rejected
            .iter()
            .all(|r| r.error.as_ref().unwrap().kind == "replay_unmappable")
    );
}

/// A spill a configuration change made unmappable (its family removed) is refused a
/// chunk at a time, within the memory budget like rows to send: each refused record is
/// held until its chunk's read ends, so a large spill read whole would hold every one.
#[tokio::test]
async fn refused_replay_records_are_read_a_chunk_at_a_time() {
    const PAGES: usize = 1_000;
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.limits.max_pending_rows = 200;
    // Ten runs against a store that is down, each spilling what it took at its final
    // flush (within the row limit).
    for run in 0..10 {
        let down = down_sink();
        let h = harness(&config, down);
        for page in run * PAGES / 10..(run + 1) * PAGES / 10 {
            h.engine
                .record(
                    "page.views",
                    &[("page_id", format!("p{page}").as_str())][..],
                    1,
                    T0,
                    None,
                )
                .unwrap();
        }
        h.flusher.finish().await;
    }
    let mut without = config.clone();
    without.families.clear();
    let mut h = harness(&without, MemorySink::new());
    h.flusher.flush_now().await;
    let first = read_log(dir.path(), "rejected.jsonl").len();
    assert!(
        first > 0 && first <= 100,
        "one chunk, at most half the row limit: {first} refused"
    );
    for _ in 0..100 {
        h.flusher.flush_now().await;
        if read_log(dir.path(), "rejected.jsonl").len() == 2 * PAGES {
            break;
        }
    }
    assert_eq!(read_log(dir.path(), "rejected.jsonl").len(), 2 * PAGES);
    let a = accounting(&h);
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        (a.minute.rejected, a.day.rejected),
        (PAGES as i128, PAGES as i128)
    );
}

/// A refused record is logged in `rejected.jsonl` as it is read, and only the durable
/// cursor passing it keeps the next start from logging it again: it never shares a chunk
/// with rows to send, whose cursor is durable only at their group commit. A process
/// whose replay chunk read rows and never made its group commit (the journal fails
/// here: on disk, what a kill before the commit leaves) is dropped, and the next start
/// replays the spill: every refused record is logged once, whether it lies before,
/// between or after rows to send.
#[tokio::test]
async fn a_refusal_beside_rows_is_logged_once_after_a_kill_before_the_group_commit() {
    // Each run spills one segment: `req` (the generic family) still maps after the
    // change, `page.views` (a configured family, removed) no longer does.
    for layout in [
        &["req", "page.views", "req"][..],
        &["page.views", "req"],
        &["req", "page.views"],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let config = config(dir.path());
        for (run, name) in layout.iter().enumerate() {
            let down = down_sink();
            let h = harness(&config, down);
            let tag = if *name == "req" { "env" } else { "page_id" };
            h.engine
                .record(name, &[(tag, format!("r{run}").as_str())][..], 5, T0, None)
                .unwrap();
            h.flusher.finish().await;
        }
        let views = FamilyConfig::seed_views().name;
        let refused = spilled(dir.path())
            .iter()
            .filter(|r| r.family == views)
            .count();
        assert_eq!(
            refused, 2,
            "{layout:?}: the page.views rows, minute and day"
        );
        let mut without = config.clone();
        without.families.clear();
        {
            let mut h = harness(&without, MemorySink::new());
            h.flusher.fail_journal_writes();
            h.flusher.flush_now().await;
            // Killed: nothing more of this process reaches the disk.
        }
        let sink = MemorySink::new();
        let mut h = harness(&without, sink.clone());
        // A round replays one chunk of rows, the refusals before it with it.
        for _ in 0..layout.len() + 1 {
            h.flusher.flush_now().await;
        }
        assert!(!h.flusher.state().has_unreplayed(), "{layout:?}: replayed");
        let rejected = read_log(dir.path(), "rejected.jsonl");
        assert_eq!(
            rejected.len(),
            refused,
            "{layout:?}: once each: {rejected:?}"
        );
        let sent = layout.iter().filter(|name| **name == "req").count() as i128;
        assert_eq!(
            sink.total(Granularity::Minute) + sink.total(Granularity::Day),
            2 * 5 * sent,
            "{layout:?}: every row that maps sent once"
        );
    }
}

/// Refused records are a chunk of their own, whose cursor is written right after their
/// lines are synced to `rejected.jsonl`. A process that logged them and never wrote that
/// cursor (here it cannot: `spill.tmp` is a directory; a kill between the two leaves the
/// same on disk) is dropped, and the next start reads them again first, here in shorter
/// chunks (less memory: one refusal a chunk): it finds each in the log and logs none
/// of them a second time. With an exact family too, whose start scans the spill for the
/// days it owes (a scan takes no row).
#[tokio::test]
async fn refusals_logged_before_their_cursor_was_written_are_not_logged_again() {
    for exact in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let config = config(dir.path());
        let h = harness(&config, down_sink());
        for page in ["p1", "p2"] {
            h.engine
                .record("page.views", &[("page_id", page)][..], 5, T0, None)
                .unwrap();
        }
        h.flusher.finish().await;
        assert_eq!(spilled(dir.path()).len(), 4, "minute and day of each");
        let mut without = config.clone();
        without.families.clear();
        without.generic.exact = exact;
        let obstacle = dir.path().join("spill.tmp");
        {
            let mut h = harness(&without, MemorySink::new());
            std::fs::create_dir(&obstacle).unwrap();
            h.flusher.flush_now().await;
            assert_eq!(read_log(dir.path(), "rejected.jsonl").len(), 4, "logged");
            // Killed: its cursor was never written.
        }
        std::fs::remove_dir(&obstacle).unwrap();
        let mut smaller = without.clone();
        smaller.limits.max_pending_bytes = 1500;
        let mut h = harness(&smaller, MemorySink::new());
        h.flusher.flush_now().await;
        assert!(h.flusher.state().has_unreplayed(), "one refusal a chunk");
        for _ in 0..4 {
            h.flusher.flush_now().await;
        }
        assert!(!h.flusher.state().has_unreplayed(), "replayed");
        let rejected = read_log(dir.path(), "rejected.jsonl");
        assert_eq!(rejected.len(), 4, "exact {exact}: once each: {rejected:?}");
    }
}

#[tokio::test]
async fn a_row_requeued_before_its_family_moved_goes_to_the_old_tables() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let sink = MemorySink::new();
    let mut h = harness(&config, sink.clone());
    let views = crate::vocabulary::FamilyId(1);
    h.engine
        .record("page.views", &[("page_id", "p")][..], 5, T0, None)
        .unwrap();
    // The store is away: the row is re-queued under the family as it was.
    sink.set_script(|_, _| {
        Some((
            Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
            false,
        ))
    });
    let first = h.flusher.flush_now().await;
    assert_eq!(first.requeued, 2);
    // The family moves to other tables (a live reload's swap), and takes a new row.
    let mut moved = config.clone();
    moved.families[0].minute_table = "metrics.views_by_minute_v2".into();
    let families = crate::family::Families::from_config(&moved).unwrap();
    let reshape = h.engine.families().reshape(families).unwrap();
    assert_eq!(reshape.retired(), [views]);
    h.engine.reshape_families(reshape).unwrap();
    let moved_id = h.engine.families().by_name("views").unwrap().id;
    assert_ne!(moved_id, views);
    h.engine
        .record("page.views", &[("page_id", "p")][..], 7, T0, None)
        .unwrap();

    sink.clear_script();
    let second = h.flusher.flush_now().await;
    assert_eq!((second.applied, second.requeued), (4, 0));
    let per_family = |family| -> i128 {
        sink.rows()
            .iter()
            .filter(|(key, _)| key.0 == family && key.1 == Granularity::Minute)
            .map(|(_, deltas)| deltas.iter().sum::<i128>())
            .sum()
    };
    assert_eq!(per_family(views), 5, "the old definition keeps its row");
    assert_eq!(per_family(moved_id), 7);
    let a = accounting(&h);
    assert!(a.is_balanced(), "{a:?}");
    // The journal and the records know the new definition.
    assert!(read_log(dir.path(), "rejected.jsonl").is_empty());
}
