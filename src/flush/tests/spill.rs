//! The flusher's spill and its replay: transient failures past the maximum age spilled,
//! a spill that cannot be written, an unreadable spill line, a replay in chunks that fit
//! the budget and that goes on after an unanswered chunk.

use super::*;

#[tokio::test]
async fn transient_failures_past_the_maximum_age_are_spilled() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.flush.requeue_max_age = Duration::from_secs(1);
    let sink = MemorySink::new();
    sink.set_script(|_, _| {
        Some((
            Outcome::NotAppliedTransient(WriteError::new("unavailable", "down")),
            false,
        ))
    });
    let mut h = harness(&config, sink.clone());
    h.engine.record("hits", &[][..], 7, T0, None).unwrap();
    h.flusher.flush_now().await;
    let a = accounting(&h);
    assert_eq!(
        (a.minute.pending, a.day.pending),
        (7, 7),
        "minute and day rows re-queued"
    );
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let report = h.flusher.flush_now().await;
    assert_eq!(report.spilled, 2);
    let a = accounting(&h);
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        (a.minute.spilled, a.day.spilled, a.minute.pending),
        (7, 7, 0)
    );
    assert_eq!(spilled(dir.path()).len(), 2);

    // The store answers again: after one healthy flush, the spilled rows come back and
    // are applied once, without a restart.
    sink.clear_script();
    h.engine.record("hits", &[][..], 1, T0, None).unwrap();
    h.flusher.flush_now().await;
    assert_eq!(sink.total(Granularity::Minute), 1);
    h.flusher.flush_now().await;
    assert_eq!(
        (
            sink.total(Granularity::Minute),
            sink.total(Granularity::Day)
        ),
        (8, 8)
    );
    let a = accounting(&h);
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        (a.minute.spilled, a.minute.applied, a.day.applied),
        (0, 8, 8)
    );
    assert!(
        spilled(dir.path()).is_empty(),
        "the replayed segment is deleted"
    );
    drop(h);
    let mut h = harness(&config, MemorySink::new());
    h.flusher.flush_now().await;
    assert_eq!(
        h.ledger.settled(Granularity::Minute).replayed,
        0,
        "nothing left for the next start"
    );
}

/// A spill that cannot be written (a full disk) loses its rows, counted once in rows;
/// nothing of it is reloaded later (a half-written segment never becomes visible), and
/// a final flush that lost rows is an unclean stop.
#[tokio::test]
async fn a_failed_spill_is_counted_once_and_never_reloaded() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    {
        let down = down_sink();
        let h = harness(&config, down);
        h.engine.record("hits", &[][..], 5, T0, None).unwrap();
        // The final flush is flush 1 of incarnation 1: its segment's temporary file.
        std::os::unix::fs::symlink(
            "/dev/full",
            dir.path().join("spill.0000000001.000000000001.tmp"),
        )
        .unwrap();
        let (engine, ledger) = (h.engine.clone(), h.ledger.clone());
        let report = h.flusher.finish().await;
        assert_eq!((report.spilled, report.dropped), (0, 2));
        let a = Accounting::read(&engine, &ledger);
        assert!(a.is_balanced(), "{a:?}");
        assert_eq!(
            (a.minute.dropped, a.day.dropped, a.minute.spilled),
            (5, 5, 0)
        );
        assert_eq!(ledger.late_drops().get("spill_failed"), Some(&2));
        let text = crate::telemetry::Metrics::new(engine, ledger)
            .unwrap()
            .render();
        assert!(
            text.contains("countersink_rows_dropped_total{reason=\"spill_failed\"} 2"),
            "{text}"
        );
        assert!(
            !text.contains("countersink_dropped_total{reason=\"spill_failed\"}"),
            "rows are not counted as increments"
        );
    }
    std::fs::remove_file(dir.path().join("spill.0000000001.000000000001.tmp")).ok();
    let mut h = harness(&config, MemorySink::new());
    assert_eq!(
        h.ledger.unclean_previous_stop(),
        Some(2),
        "the lost rows are reported"
    );
    assert_eq!(h.ledger.unclean_previous_stop_sums(), [5, 5, 0, 0]);
    h.flusher.flush_now().await;
    let a = accounting(&h);
    assert_eq!(
        (a.minute.accepted, a.minute.spilled),
        (0, 0),
        "nothing reloaded"
    );
}

/// An unreadable line in a spill segment is set aside and counted, the rest replayed.
#[tokio::test]
async fn an_unreadable_spill_line_is_counted_and_the_rest_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let good = r#"{"time":"t","writer":"w","incarnation":0,"flush_seq":1,"outcome":"spilled","family":"generic","table":"countersink.counts_by_minute","granularity":"minute","key":{"name":"hits","tags":""},"day":"2026-11-30","minute":5,"deltas":{"value":3}}"#;
    // A line that is not UTF-8 too (a flipped byte), with a row after it: read as text it
    // stopped every later read at it.
    let mut segment =
        format!("{{\"spill_segment\":{{\"consumes\":null}}}}\n{good}\nnot json\n").into_bytes();
    segment.extend(b"{\"time\":\"\xff\"}\n");
    segment.extend(good.replace("\"value\":3", "\"value\":4").as_bytes());
    segment.push(b'\n');
    std::fs::write(
        dir.path().join("spill.0000000000.000000000001.jsonl"),
        segment,
    )
    .unwrap();
    let sink = MemorySink::new();
    let mut h = harness(&config, sink.clone());
    h.flusher.flush_now().await;
    assert_eq!(h.ledger.corrupt_lines(), [0, 0, 2]);
    assert_eq!(sink.total(Granularity::Minute), 7);
    assert!(
        std::fs::read_to_string(dir.path().join("spill.corrupt.jsonl"))
            .unwrap()
            .contains("not json")
    );
}

/// Spills 40 keys' rows (40 minute rows and 40 day rows) into `config`'s state
/// directory: their store is down, and the flusher finishes.
async fn spill_forty_keys(config: &Config) {
    let down = down_sink();
    let h = harness(config, down);
    for i in 0..40 {
        let i = i.to_string();
        h.engine
            .record("hits", &[("i", i.as_str())][..], 1, T0, None)
            .unwrap();
    }
    let report = h.flusher.finish().await;
    assert_eq!(report.spilled, 80, "40 minute rows and 40 day rows");
}

/// A spill larger than the memory budget comes back in chunks that fit it, one per
/// flush, and every row arrives once.
#[tokio::test]
async fn replay_streams_the_spill_in_chunks_that_fit_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    spill_forty_keys(&config).await;
    let mut small = config.clone();
    small.limits.max_pending_rows = 16;
    let sink = MemorySink::new();
    let mut h = harness(&small, sink.clone());
    let mut flushes = 0;
    while sink.total(Granularity::Minute) + sink.total(Granularity::Day) < 80 {
        let report = h.flusher.flush_now().await;
        flushes += 1;
        assert!(
            report.rows <= 8,
            "a chunk takes at most half the room of a 16-row budget: {report:?}"
        );
        assert!(flushes < 30, "the replay makes progress");
    }
    assert!(flushes >= 10, "80 rows in chunks of at most 8: {flushes}");
    assert_eq!(
        (
            sink.total(Granularity::Minute),
            sink.total(Granularity::Day)
        ),
        (40, 40),
        "each row once"
    );
    let a = accounting(&h);
    assert!(a.is_balanced(), "{a:?}");
}

/// A replay chunk the store did not answer (every write timed out: logged unknown, not
/// sent again) leaves the flusher believing the store down. With no traffic, nothing
/// else would show it answering, and the rest of the spill waited for a restart. A
/// round that sends nothing now lets the next try a chunk.
#[tokio::test]
async fn the_replay_goes_on_after_an_unanswered_chunk_without_traffic() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    spill_forty_keys(&config).await;
    let mut small = config.clone();
    small.limits.max_pending_rows = 16;
    let sink = MemorySink::new();
    sink.set_script(|_, _| {
        Some((
            Outcome::Unknown(WriteError::new("write_timeout", "timed out")),
            false,
        ))
    });
    let mut h = harness(&small, sink.clone());
    let first = h.flusher.flush_now().await;
    assert!(
        first.unknown > 0,
        "the first chunk went unanswered: {first:?}"
    );
    sink.clear_script();
    for _ in 0..60 {
        h.flusher.flush_now().await;
    }
    let a = accounting(&h);
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        sink.total(Granularity::Minute) + sink.total(Granularity::Day) + first.unknown as i128,
        80,
        "every spilled row but the unanswered chunk's reached the store"
    );
}
