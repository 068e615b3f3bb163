//! The totals spill and its replay: the spill's bound under an outage, replays within
//! the memory budget and in stages, refused totals, and what a final flush reports.

use super::*;

/// Under a long outage of the totals table, closed rows failing past
/// `flush.requeue_max_age` are spilled only while `state.max_spill_bytes` has room: the
/// file stays within it, the rows beyond are dropped and counted (`spill_full`), and
/// once the store answers exactly the spilled totals reach it.
#[tokio::test]
async fn the_totals_spill_stays_within_max_spill_bytes_and_counts_what_it_drops() {
    const LIMIT: u64 = 10 << 10;
    const PAGES: i64 = 200;
    let (dir, mut config, sink) = views_alone();
    config.limits.timestamp_max_past = Duration::from_secs(1);
    config.flush.requeue_max_age = Duration::from_secs(1);
    config.state.max_spill_bytes = LIMIT;
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
    let closed_minute = now() - 600;
    let mut fed = 0_i128;
    for page in 0..PAGES {
        let page_id = format!("p{page:03}");
        w.engine
            .record(
                "page.views",
                &[("page_id", page_id.as_str())][..],
                page + 1,
                closed_minute,
                None,
            )
            .unwrap();
        fed += i128::from(page + 1);
    }
    w.flusher.flush_now().await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let report = w.flusher.flush_now().await;

    let (size, records) = totals_segments(dir.path());
    assert!(
        size <= LIMIT,
        "the totals segments hold {size} bytes, past state.max_spill_bytes = {LIMIT}"
    );
    let spilled_minute: i128 = records
        .iter()
        .filter(|r| r.granularity == "minute")
        .map(|r| i128::from(r.deltas.get("views").copied().unwrap_or(0)))
        .sum();
    assert!(spilled_minute > 0, "some rows fit: {report:?}");
    let to_spill = report.totals.rows_spilled;
    let spill_full = w
        .ledger
        .late_drops()
        .get("spill_full")
        .copied()
        .unwrap_or(0);
    assert_eq!(
        report.totals.rows_spilled,
        records.len(),
        "the report counts the rows written"
    );
    assert!(spill_full > 0, "the overflow is counted: {report:?}");
    let a = w.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        (a.minute.spilled, a.minute.dropped),
        (spilled_minute, fed - spilled_minute),
        "{a:?} (spilled {to_spill} rows, {spill_full} dropped)"
    );

    // The store answers again: the spilled totals, and nothing else, reach it.
    down.store(0, Ordering::Relaxed);
    for _ in 0..20 {
        w.flusher.flush_now().await;
    }
    let stored = sink.totals();
    for record in records.iter().filter(|r| r.granularity == "minute") {
        let page = &record.key["page_id"];
        let cell = stored
            .iter()
            .find(|(k, _)| {
                k.1 == Granularity::Minute && crate::series::fields(&k.2).any(|f| f == page)
            })
            .map(|(_, v)| v.clone());
        // The family's columns in their order: bytes, views.
        let totals = &record.total.as_ref().unwrap().totals;
        let fed = vec![totals["bytes"], totals["views"]];
        assert_eq!(cell, Some(fed), "{page}");
    }
    assert_eq!(sink.totals_sum(Granularity::Minute), spilled_minute);
    let a = w.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        (a.minute.applied, a.minute.dropped, a.minute.pending),
        (spilled_minute, fed - spilled_minute, 0)
    );
}

/// A spill file far larger than the memory budget, left by an earlier process, is
/// replayed in chunks the budget pays for: what a flush holds of it is charged and stays
/// within `limits.max_pending_bytes`, and every row reaches the store once, with the
/// total the file holds.
#[tokio::test]
async fn a_large_replay_streams_within_the_memory_budget_and_every_row_applies_once() {
    const ROWS: usize = 100_000;
    const MAX_PENDING_BYTES: usize = 4 << 20;
    let (dir, mut config, sink) = views_alone();
    config.limits.max_pending_bytes = MAX_PENDING_BYTES;
    let expected = write_spill_file(dir.path(), ROWS);

    let mut w = writer(&config, sink.clone());
    let watch = Arc::new(ReplayWatch {
        engine: w.engine.clone(),
        seen: Default::default(),
    });
    w.flusher.observe(watch.clone());
    let mut flushes = 0;
    while sink.totals_requests() < ROWS as u64 && flushes < 5_000 {
        w.flusher.flush_now().await;
        flushes += 1;
    }

    // A replayed row costs at least the write planned for it.
    let least_per_row = size_of::<crate::sink::TotalsWrite>() + size_of::<crate::sink::TotalRow>();
    for &(writes, in_use) in watch.seen.lock().iter() {
        assert!(
            writes * least_per_row <= MAX_PENDING_BYTES,
            "one flush planned {writes} replayed writes, at least {} bytes, past limits.max_pending_bytes = {MAX_PENDING_BYTES}",
            writes * least_per_row
        );
        assert!(
            in_use >= writes * least_per_row,
            "{writes} replayed rows held, but the budget is charged {in_use} bytes"
        );
        assert!(in_use <= MAX_PENDING_BYTES, "{in_use} bytes in use");
    }
    assert_eq!(
        sink.totals_requests(),
        ROWS as u64,
        "each row sent once ({flushes} flushes)"
    );
    assert!(
        stored(&sink) == expected,
        "the store holds what the file held"
    );
    let a = w.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(a.minute.pending, 0, "{a:?}");
    let left = totals_files(dir.path());
    assert!(left.is_empty(), "replayed files are gone: {left:?}");
    assert_eq!(
        w.engine.aggregator().pending_bytes(),
        0,
        "the replay's room is back"
    );
}

/// After an outage every row of the book comes due at once: a flush's totals stage takes
/// what fits the flush's share of the memory limit (the rest waits, still charged to the
/// budget, for the next round), every round or final flush writes each row once, and
/// the final flush goes on until the book has nothing left to write.
#[tokio::test]
async fn rows_due_after_an_outage_go_out_in_stages_the_flush_share_pays_for() {
    const MAX_PENDING_BYTES: usize = 1 << 20;
    const PAGES: i64 = 2_000;
    let flush_share = MAX_PENDING_BYTES / 4;
    let least_per_row = size_of::<crate::sink::TotalsWrite>() + size_of::<crate::sink::TotalRow>();
    for final_flush in [false, true] {
        let (_dir, mut config, sink) = views_alone();
        config.limits.max_pending_bytes = MAX_PENDING_BYTES;
        // The final flush's stages are under test, not its deadline: the tests' 300 ms
        // is too short for 4,000 rows in a debug build on a busy machine, and what the
        // deadline cuts off is spilled, not written.
        config.flush.shutdown_deadline = Duration::from_secs(120);
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
        let w = writer(&config, sink.clone());
        let t = now();
        for page in 0..PAGES {
            let page_id = format!("p{page:04}");
            w.engine
                .record(
                    "page.views",
                    &[("page_id", page_id.as_str())][..],
                    page + 1,
                    t,
                    None,
                )
                .unwrap();
        }
        let Writer {
            engine,
            ledger,
            mut flusher,
        } = w;
        flusher.flush_now().await;
        assert!(sink.totals().is_empty(), "the store is down");
        let watch = Arc::new(ReplayWatch {
            engine: engine.clone(),
            seen: Default::default(),
        });
        flusher.observe(watch.clone());
        down.store(0, Ordering::Relaxed);
        let sent_before = sink.totals_requests() as usize;
        let rows = 2 * PAGES as usize; // a minute and a day row each
        if final_flush {
            flusher.finish().await;
        } else {
            for _ in 0..200 {
                flusher.flush_now().await;
                if sink.totals().len() == rows {
                    break;
                }
            }
        }
        assert_eq!(sink.totals().len(), rows, "every row written");
        assert_eq!(
            sink.totals_requests() as usize - sent_before,
            rows,
            "each row written once (a write each: one page, one partition a table)"
        );
        let seen = watch.seen.lock();
        let stages = seen.iter().filter(|(writes, _)| *writes > 0).count();
        assert!(stages > 1, "more than one stage: {seen:?}");
        for &(writes, _) in seen.iter() {
            assert!(
                writes * least_per_row <= flush_share,
                "one stage planned {writes} writes, at least {} bytes, past the flush's share {flush_share}",
                writes * least_per_row
            );
        }
        let a = Accounting::read(&engine, &ledger);
        assert!(a.is_balanced(), "{a:?}");
        assert_eq!((a.minute.pending, a.minute.dropped), (0, 0), "{a:?}");
    }
}

/// Spilled totals a configuration change made unmappable (their family counts with
/// counters now) are refused a chunk at a time, within the chunk's room: each refused
/// record is held until its chunk's read ends.
#[tokio::test]
async fn refused_totals_are_read_a_chunk_at_a_time() {
    const ROWS: usize = 2_000;
    let (dir, mut config, sink) = views_alone();
    write_spill_file(dir.path(), ROWS);
    config.families[0].mode = CountingMode::Counter;
    config.limits.max_pending_rows = 200;
    let mut w = writer(&config, sink.clone());
    let rejected = || {
        std::fs::read_to_string(dir.path().join("rejected.jsonl"))
            .map(|log| log.lines().count())
            .unwrap_or(0)
    };
    w.flusher.flush_now().await;
    let first = rejected();
    assert!(
        first > 0 && first <= 100,
        "one chunk, at most half the row limit: {first} refused"
    );
    for _ in 0..100 {
        w.flusher.flush_now().await;
        if rejected() == ROWS {
            break;
        }
    }
    assert_eq!(rejected(), ROWS);
    assert!(sink.totals().is_empty(), "nothing written");
    let a = w.accounting();
    assert!(a.is_balanced(), "{a:?}");
}

/// A refused total is logged in `rejected.jsonl` as it is read, and only the durable
/// cursor passing it keeps the next start from logging it again: it never shares a chunk
/// with rows, whose cursor is durable only once their flush's group ends. A process
/// whose replay chunk read rows and never made its group commit (the journal fails
/// here: on disk, what a kill before the commit leaves) is dropped, and the next start
/// replays the spill: every refused total is logged once, whether it lies before,
/// between or after rows to write, and every other row reaches the store.
#[tokio::test]
async fn a_refused_total_beside_rows_is_logged_once_after_a_kill_before_the_group_commit() {
    // Per spilled row: whether its family is gone (refused at replay).
    for layout in [&[false, true, false][..], &[true, false], &[false, true]] {
        let (dir, config, sink) = views_alone();
        let mut expected = write_spill_file(dir.path(), layout.len());
        let file = dir.path().join(EARLIER_SPILL);
        let text = std::fs::read_to_string(&file).unwrap();
        let mut lines = String::new();
        for (line, gone) in text.lines().zip(layout) {
            let line = if *gone {
                let renamed = line.replace("\"family\":\"views\"", "\"family\":\"gone\"");
                assert_ne!(renamed, line, "the family is renamed");
                renamed
            } else {
                line.to_owned()
            };
            lines.push_str(&line);
            lines.push('\n');
        }
        std::fs::write(&file, lines).unwrap();
        for (i, _) in layout.iter().enumerate().filter(|(_, gone)| **gone) {
            let series = crate::series::encode([format!("p{i}").as_str()]);
            expected.retain(|(s, _), _| s.as_slice() != &*series);
        }
        {
            let mut w = writer(&config, MemorySink::new());
            w.flusher.fail_journal_writes();
            w.flusher.flush_now().await;
            // Killed: nothing more of this process reaches the disk.
        }
        let mut w = writer(&config, sink.clone());
        // A flush writes one chunk of rows, the refusals before it with it.
        for _ in 0..layout.len() + 1 {
            w.flusher.flush_now().await;
        }
        assert!(!w.flusher.state().has_unreplayed(), "{layout:?}: replayed");
        let log = std::fs::read_to_string(dir.path().join("rejected.jsonl")).unwrap();
        let refused = layout.iter().filter(|gone| **gone).count();
        assert_eq!(log.lines().count(), refused, "{layout:?}: once each: {log}");
        assert!(
            log.lines().all(|l| l.contains("replay_unmappable")),
            "{log}"
        );
        assert!(
            stored_earlier(&sink) == expected,
            "{layout:?}: every row that maps reached the store"
        );
        let a = w.accounting();
        assert!(a.is_balanced(), "{a:?}");
    }
}

/// A final flush in several chunks (more rows than one stage takes) with the store down
/// and no spill room: every chunk's dropped totals are in `status.json`, not only the
/// last chunk's, and the stop is unclean.
#[tokio::test]
async fn every_chunk_of_a_final_flush_reports_the_totals_it_lost() {
    const PAGES: i64 = 2_000;
    let (dir, mut config, sink) = views_alone();
    config.limits.max_pending_bytes = 1 << 20;
    config.state.max_spill_bytes = 1;
    sink.set_totals_script(|_, _| {
        Some((
            Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
            false,
        ))
    });
    let w = writer(&config, sink.clone());
    let t = now();
    for page in 0..PAGES {
        let page_id = format!("p{page:04}");
        w.engine
            .record(
                "page.views",
                &[("page_id", page_id.as_str())][..],
                1,
                t,
                None,
            )
            .unwrap();
    }
    let Writer {
        engine,
        ledger,
        flusher,
    } = w;
    flusher.finish().await;
    let a = Accounting::read(&engine, &ledger);
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(a.minute.dropped, i128::from(PAGES), "{a:?}");
    let status: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("status.json")).unwrap())
            .unwrap();
    assert_eq!(status["clean"], false);
    assert_eq!(
        status["pending_rows"],
        2 * PAGES,
        "every minute and day row lost: {status}"
    );
    assert_eq!(status["pending_sum"], PAGES.to_string(), "{status}");
}

/// A shutdown in the middle of a replay keeps, in its file, the rows read and not applied
/// and those not read yet; the next start writes every one of them.
#[tokio::test]
async fn a_shutdown_mid_replay_keeps_every_row_not_applied_for_the_next_start() {
    const ROWS: usize = 5_000;
    let (dir, mut config, sink) = views_alone();
    config.limits.max_pending_bytes = 1 << 20;
    let expected = write_spill_file(dir.path(), ROWS);
    // The store applies the first 100 writes, then refuses everything.
    sink.set_totals_script(|n, _| {
        (n > 100).then(|| {
            (
                Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
                false,
            )
        })
    });
    let mut first = writer(&config, sink.clone());
    first.flusher.flush_now().await;
    let applied_first = stored(&sink).len();
    assert_eq!(applied_first, 100, "the first chunk went out, in part");
    first.flusher.finish().await;
    let a = Accounting::read(&first.engine, &first.ledger);
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(a.minute.pending, 0, "{a:?}");
    assert_eq!(
        first.engine.aggregator().pending_bytes(),
        0,
        "the replay's room is back"
    );
    assert!(
        !totals_files(dir.path()).is_empty(),
        "the rows not applied wait in the spill"
    );
    let sent_first = sink.totals_requests();

    sink.clear_totals_script();
    let mut second = writer(&config, sink.clone());
    for _ in 0..200 {
        if totals_files(dir.path()).is_empty() {
            break;
        }
        second.flusher.flush_now().await;
    }
    assert!(stored(&sink) == expected, "every row reached the store");
    assert_eq!(
        sink.totals_requests() - sent_first,
        ROWS as u64 - 100,
        "each row not applied is sent once; those applied in the first run not again"
    );
    let a = second.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(a.minute.pending, 0, "{a:?}");
}

/// At the memory limit a delta takes both of its rows (its minute and its day) or
/// neither: the store's minute and day totals of every key agree, and what did not fit
/// is dropped in both, counted.
#[tokio::test]
async fn at_the_memory_limit_a_delta_takes_its_minute_and_its_day_or_neither() {
    const PAGES: usize = 8;
    let (_dir, mut config, sink) = views_alone();
    config.limits.max_pending_rows = 10;
    let mut w = writer(&config, sink.clone());
    let t = now();
    for page in 0..PAGES {
        let page_id = format!("p{page}");
        w.engine
            .record(
                "page.views",
                &[("page_id", page_id.as_str())][..],
                1,
                t,
                None,
            )
            .unwrap();
    }
    w.flusher.flush_now().await;
    let cells = sink.totals();
    let cell = |table: Granularity, page: &str| -> Option<Vec<i64>> {
        cells
            .iter()
            .find(|(k, _)| k.1 == table && crate::series::fields(&k.2).any(|f| f == page))
            .map(|(_, v)| v.clone())
    };
    let mut taken = 0;
    for page in 0..PAGES {
        let page_id = format!("p{page}");
        let (minute, day) = (
            cell(Granularity::Minute, &page_id),
            cell(Granularity::Day, &page_id),
        );
        assert_eq!(minute, day, "{page_id}: its minute and its day disagree");
        taken += usize::from(minute == Some(vec![0, 1]));
    }
    assert_eq!(taken, 5, "ten rows of room: five keys' minute and day");
    let a = w.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        (a.minute.dropped, a.day.dropped),
        (3, 3),
        "the same deltas dropped in both: {a:?}"
    );
    assert_eq!(w.ledger.totals_rows().0, 10);
    assert_eq!(
        w.engine.aggregator().pending_rows_estimate(),
        10,
        "the budget charges the book's ten rows: the refused keys' room went back"
    );
}

/// A replayed chunk whose rows are refused in part (A, for good) and fail in part (B,
/// transiently) is not consumed when the segment that would carry B cannot be written
/// (a full disk): it is read again whole later. A is logged in `rejected.jsonl` and
/// counted rejected once, by the read that consumes the chunk, not once per read; B
/// reaches the store once; the accounting balances throughout.
#[tokio::test]
async fn a_refused_row_of_a_chunk_read_again_after_its_segment_failed_is_logged_once() {
    let (dir, config, sink) = views_alone();
    // p0 (A: views 1) and p1 (B: views 2), an earlier process's.
    write_spill_file(dir.path(), 2);
    let is = |write: &crate::sink::TotalsWrite, page: &str| {
        crate::series::fields(&write.series).any(|f| f == page)
    };
    let b_fails = Arc::new(AtomicU64::new(1));
    let b_applied = Arc::new(AtomicU64::new(0));
    let (fails, applied) = (b_fails.clone(), b_applied.clone());
    sink.set_totals_script(move |_, write| {
        if is(write, "p0") {
            return Some((
                Outcome::NotAppliedPermanent(WriteError::new("invalid", "no")),
                false,
            ));
        }
        if fails.load(Ordering::Relaxed) == 1 {
            return Some((
                Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
                false,
            ));
        }
        applied.fetch_add(1, Ordering::Relaxed);
        None
    });
    let mut w = writer(&config, sink.clone());
    // The totals segments of the first flushes of incarnation 1 cannot be written (after
    // the start, which clears temporary files).
    let full: Vec<_> = (1..=4)
        .map(|seq| {
            dir.path()
                .join(format!("spill.0000000001.{seq:012}.totals.tmp"))
        })
        .collect();
    for path in &full {
        std::os::unix::fs::symlink("/dev/full", path).unwrap();
    }
    let rejected_lines = || {
        std::fs::read_to_string(dir.path().join("rejected.jsonl"))
            .map(|log| log.lines().filter(|l| l.contains("\"p0\"")).count())
            .unwrap_or(0)
    };
    w.flusher.flush_now().await;
    let a = w.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert!(
        w.flusher.state().has_unreplayed(),
        "B could not be carried: the chunk waits behind the cursor"
    );
    assert_eq!(b_applied.load(Ordering::Relaxed), 0);

    // The disk has room again and the store takes B: the chunk is read again and consumed.
    for path in &full {
        std::fs::remove_file(path).unwrap();
    }
    b_fails.store(0, Ordering::Relaxed);
    for _ in 0..5 {
        w.flusher.flush_now().await;
        if !w.flusher.state().has_unreplayed() {
            break;
        }
    }
    assert!(
        !w.flusher.state().has_unreplayed(),
        "the chunk was consumed"
    );
    let log = std::fs::read_to_string(dir.path().join("rejected.jsonl")).unwrap();
    assert_eq!(rejected_lines(), 1, "A is logged once: {log}");
    let a = w.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(a.minute.rejected, 1, "A's sum, counted once: {a:?}");
    assert_eq!((a.minute.applied, a.minute.pending), (2, 0), "{a:?}");
    assert_eq!(
        b_applied.load(Ordering::Relaxed),
        1,
        "B reaches the store once"
    );
    let b = stored_earlier(&sink)
        .into_iter()
        .filter(|((series, _), _)| crate::series::fields(series).any(|f| f == "p1"))
        .map(|(_, v)| v)
        .collect::<Vec<_>>();
    assert_eq!(b, vec![vec![0, 2]], "B's total is in the store");
}
