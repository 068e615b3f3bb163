//! Replays through full spills and kills: carried rows, a replay killed mid-send (each
//! total lands once, its chunk moves through a full spill, its book rows keep to the
//! limit), counter rows and totals through one cursor, and a refused round tried again.

use super::*;

/// A replay the store refuses: its rows are carried into a segment of their own even
/// when `state.max_spill_bytes` has no room for a second copy of them beside the segment
/// they were read from (they are on disk already: they move, they are not admitted), and
/// that segment is consumed; nothing is dropped, and once the store answers every total
/// reaches it.
#[tokio::test]
async fn a_refused_replay_is_carried_through_a_full_spill_and_drops_nothing() {
    const ROWS: usize = 200;
    for half_again in [false, true] {
        let (dir, mut config, sink) = views_alone();
        let expected = write_spill_file(dir.path(), ROWS);
        let migrated = migrate(&config);
        let size = std::fs::metadata(&migrated).unwrap().len();
        // A carried row is larger than a moved one (a request id, an error): half the
        // segment again is not room for them beside it; the segment's own size is none.
        let limit = if half_again { size + size / 2 } else { size };
        config.state.max_spill_bytes = limit;
        let down = Arc::new(AtomicU64::new(1));
        let flag = down.clone();
        sink.set_totals_script(move |_, _| {
            (flag.load(Ordering::Relaxed) == 1).then(|| {
                (
                    Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
                    false,
                )
            })
        });
        let mut w = writer(&config, sink.clone());
        let report = w.flusher.flush_now().await;
        assert_eq!(report.totals.writes, ROWS, "one chunk, every row written");
        let (bytes, records) = totals_segments(dir.path());
        assert_eq!(records.len(), ROWS, "every row still spilled, once");
        assert!(!migrated.exists(), "carried: the segment read is consumed");
        assert!(
            bytes <= 2 * size,
            "the carried chunk alone is left: {bytes} bytes, the segment read {size}"
        );
        let a = w.accounting();
        assert!(a.is_balanced(), "{a:?}");
        assert_eq!((a.minute.dropped, a.minute.pending), (0, 0), "{a:?}");
        assert!(w.ledger.late_drops().is_empty());

        // The store answers: a fresh row shows it, and the spill goes out.
        down.store(0, Ordering::Relaxed);
        w.engine
            .record("page.views", &[("page_id", "fresh")][..], 1, now(), None)
            .unwrap();
        for _ in 0..20 {
            w.flusher.flush_now().await;
            if totals_files(dir.path()).is_empty() {
                break;
            }
        }
        assert!(
            stored_earlier(&sink) == expected,
            "every spilled total reached the store"
        );
        let a = w.accounting();
        assert!(a.is_balanced(), "{a:?}");
        assert_eq!((a.minute.dropped, a.minute.pending), (0, 0), "{a:?}");
    }
}

/// A process killed while its flush sends a chunk of spilled totals (the files as they
/// are at that moment, copied aside, stand for the killed process's): the next start
/// finds the chunk in the journal's totals group, and writes again exactly the totals not
/// known applied, each once; the store then holds every spilled total, once per cell.
#[tokio::test]
async fn a_replay_killed_mid_send_lands_each_total_once_after_a_restart() {
    const ROWS: usize = 300;
    const SNAPSHOT_AT: u64 = 100;
    let (dir, config, sink) = views_alone();
    let killed = tempfile::tempdir().unwrap();
    let expected = write_spill_file(dir.path(), ROWS);
    let (from, to) = (dir.path().to_owned(), killed.path().to_owned());
    sink.set_totals_script(move |n, _| {
        if n == SNAPSHOT_AT {
            // The kill: the state directory as it is on disk now.
            for entry in std::fs::read_dir(&from).unwrap() {
                let entry = entry.unwrap();
                if entry.file_name() != "lock" {
                    std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
                }
            }
        }
        // The store fails from the kill on: what the killed run sent after it is lost
        // with it.
        (n >= SNAPSHOT_AT).then(|| {
            (
                Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
                false,
            )
        })
    });
    let mut first = writer(&config, sink.clone());
    first.flusher.flush_now().await;
    drop(first);
    let before = stored_earlier(&sink).len();
    assert!(before > 0 && before < ROWS, "part of the chunk applied");
    let journal = crate::state::journal::read(&killed.path().join("journal.wal")).unwrap();
    let group = journal
        .iter()
        .find(|g| g.committed && !g.ended && !g.kind_intents.is_empty())
        .expect("the killed flush's totals group");
    assert!(
        group.consumes.is_some(),
        "it names the cursor past its chunk"
    );
    let known_applied = group
        .outcomes
        .values()
        .filter(|o| matches!(o, crate::state::Settled::Applied))
        .count();

    sink.clear_totals_script();
    let sent_before = sink.totals_requests();
    let mut config = config.clone();
    config.state.dir = killed.path().to_owned();
    let mut second = writer(&config, sink.clone());
    for _ in 0..20 {
        second.flusher.flush_now().await;
        if totals_files(killed.path()).is_empty() {
            break;
        }
    }
    assert!(stored(&sink) == expected, "every total in the store, once");
    assert_eq!(
        sink.totals_requests() - sent_before,
        (ROWS - known_applied) as u64,
        "each total not known applied written once; the chunk is not read again"
    );
    let a = second.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(a.minute.pending, 0, "{a:?}");
}

/// A process killed while its flush sends a chunk of spilled totals that is only part of
/// the segment it was read from, with `state.max_spill_bytes` no larger than that
/// segment: the next start finds the segment still there (the cursor is inside it) and
/// no room beside it, yet the chunk's totals not known applied move into the recovered
/// segment (they are on disk already, and the cursor has passed them); none is
/// dropped, and the store then holds every spilled total.
#[tokio::test]
async fn a_replay_killed_mid_send_moves_its_chunk_through_a_full_spill_at_the_restart() {
    const ROWS: usize = 300;
    const SNAPSHOT_AT: u64 = 20;
    let (dir, mut config, sink) = views_alone();
    let killed = tempfile::tempdir().unwrap();
    let expected = write_spill_file(dir.path(), ROWS);
    let size = std::fs::metadata(migrate(&config)).unwrap().len();
    // A chunk holds part of the segment.
    config.limits.max_pending_bytes = 200_000;
    let (from, to) = (dir.path().to_owned(), killed.path().to_owned());
    sink.set_totals_script(move |n, _| {
        if n == SNAPSHOT_AT {
            for entry in std::fs::read_dir(&from).unwrap() {
                let entry = entry.unwrap();
                if entry.file_name() != "lock" {
                    std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
                }
            }
        }
        (n >= SNAPSHOT_AT).then(|| {
            (
                Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
                false,
            )
        })
    });
    let mut first = writer(&config, sink.clone());
    first.flusher.flush_now().await;
    drop(first);
    let journal = crate::state::journal::read(&killed.path().join("journal.wal")).unwrap();
    let group = journal
        .iter()
        .find(|g| g.committed && !g.ended && !g.kind_intents.is_empty())
        .expect("the killed flush's totals group");
    assert!(
        group.kind_intents.len() < ROWS,
        "the chunk is part of the segment: {} intents",
        group.kind_intents.len()
    );

    sink.clear_totals_script();
    let mut config = config.clone();
    config.state.dir = killed.path().to_owned();
    config.state.max_spill_bytes = size;
    let state = crate::state::StateDir::open_with(&config.state, &super::super::Recovery).unwrap();
    let recovery = state.recovery().clone();
    drop(state);
    assert_eq!(recovery.dropped_rows, 0, "{recovery:?}");
    assert!(recovery.totals_rows > 0, "{recovery:?}");
    let mut second = writer(&config, sink.clone());
    for _ in 0..50 {
        second.flusher.flush_now().await;
        if totals_files(killed.path()).is_empty() {
            break;
        }
    }
    assert!(
        stored_earlier(&sink) == expected,
        "every spilled total in the store"
    );
    let a = second.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!((a.minute.dropped, a.minute.pending), (0, 0), "{a:?}");
}

/// A process killed while its flush sends spilled totals it read back beside its book's
/// rows: the journal tells the two apart, and the next start, with no room in the
/// spill, moves the replayed totals into the recovered segment (the cursor has passed
/// them) but drops and counts the book's, as the killed process would have, rather
/// than spilling them past `state.max_spill_bytes`.
#[tokio::test]
async fn a_replay_killed_mid_send_keeps_its_replayed_totals_but_not_book_rows_past_the_limit() {
    const ROWS: usize = 3;
    let (dir, config, sink) = views_alone();
    let killed = tempfile::tempdir().unwrap();
    write_spill_file(dir.path(), ROWS);
    let (from, to) = (dir.path().to_owned(), killed.path().to_owned());
    sink.set_totals_script(move |n, _| {
        if n == 1 {
            for entry in std::fs::read_dir(&from).unwrap() {
                let entry = entry.unwrap();
                if entry.file_name() != "lock" {
                    std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
                }
            }
        }
        Some((
            Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
            false,
        ))
    });
    let mut first = writer(&config, sink.clone());
    first
        .engine
        .record("page.views", &[("page_id", "fresh")][..], 4, now(), None)
        .unwrap();
    first.flusher.flush_now().await;
    drop(first);
    let journal = crate::state::journal::read(&killed.path().join("journal.wal")).unwrap();
    let group = journal
        .iter()
        .find(|g| g.committed && !g.ended && !g.kind_intents.is_empty())
        .expect("the killed flush's totals group");
    assert!(
        group.consumes.is_some(),
        "it names the cursor past its chunk"
    );
    let intents = super::super::TotalsIntent::of_group(group).unwrap();
    let replays = intents.iter().filter(|i| i.replay).count();
    let book: usize = intents
        .iter()
        .filter(|i| !i.replay)
        .map(|i| i.rows.len())
        .sum();
    assert_eq!(replays, ROWS, "{intents:?}");
    assert_eq!(book, 2, "the fresh row's minute and day: {intents:?}");

    let mut config = config.clone();
    config.state.dir = killed.path().to_owned();
    config.state.max_spill_bytes = 1;
    let state = crate::state::StateDir::open_with(&config.state, &super::super::Recovery).unwrap();
    let recovery = state.recovery().clone();
    assert_eq!(
        (recovery.totals_rows, recovery.dropped_rows),
        (ROWS as u64, 2),
        "{recovery:?}"
    );
    assert_eq!(recovery.dropped_sums, [4, 4, 0, 0], "{recovery:?}");
}

/// A shutdown with the store down spills counter rows and running totals alike, each to
/// its flush's segment; the next start replays both kinds through the one cursor (each
/// replay stops at the other's records and takes its own), and every count lands once.
#[tokio::test]
async fn counter_rows_and_totals_spilled_together_replay_through_one_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let sink = MemorySink::new();
    let down = || {
        Some((
            Outcome::NotAppliedTransient(WriteError::new("no_connection", "down")),
            false,
        ))
    };
    sink.set_script(move |_, _| down());
    sink.set_totals_script(move |_, _| down());
    let t = now();
    let mut fed = 0_i128;
    for round in 0..3 {
        let first = writer(&config, sink.clone());
        for page in 0..5 {
            first.incr(&format!("p{page}"), round + 1, t);
            fed += i128::from(round + 1);
        }
        let report = first.flusher.finish().await;
        assert!(
            report.spilled > 0 && report.totals.rows_spilled > 0,
            "{report:?}"
        );
    }
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("spill.") && n.ends_with(".jsonl"))
        .collect();
    assert!(
        names.iter().any(|n| n.ends_with(".totals.jsonl")),
        "{names:?}"
    );
    assert!(
        names.iter().any(|n| !n.ends_with(".totals.jsonl")),
        "{names:?}"
    );

    sink.clear_script();
    sink.clear_totals_script();
    let mut last = writer(&config, sink.clone());
    for _ in 0..20 {
        last.flusher.flush_now().await;
    }
    let a = last.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!((a.minute.pending, a.minute.spilled), (0, 0), "{a:?}");
    for table in [Granularity::Minute, Granularity::Day] {
        assert_eq!(sink.total(table), fed, "{table:?}: the counter family");
        assert_eq!(
            sink.totals_sum(table),
            2 * fed,
            "{table:?}: the two totals families, each writer column once"
        );
    }
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("spill.") && n.ends_with(".jsonl") && n != "spill.corrupt.jsonl")
        .collect();
    assert!(left.is_empty(), "every segment consumed: {left:?}");
}

/// A replay round the store refused (every write timed out) leaves the totals path
/// believing the store down; with no traffic of its own nothing else would show it
/// answering again, and the spill (every segment behind its rows) waited for a restart.
/// A round that sends nothing now lets the next try a chunk.
#[tokio::test]
async fn a_refused_replay_round_is_tried_again_without_traffic() {
    const ROWS: usize = 50;
    let (dir, config, sink) = views_alone();
    let expected = write_spill_file(dir.path(), ROWS);
    sink.set_totals_script(|_, _| {
        Some((
            crate::sink::Outcome::Unknown(crate::sink::WriteError::new("write_timeout", "t")),
            false,
        ))
    });
    let mut w = writer(&config, sink.clone());
    w.flusher.flush_now().await;
    assert!(sink.totals_requests() > 0, "the first chunk was tried");
    sink.clear_totals_script();
    for _ in 0..200 {
        w.flusher.flush_now().await;
        if stored(&sink) == expected {
            break;
        }
    }
    assert!(
        stored(&sink) == expected,
        "the spill reached the store without new traffic"
    );
}
