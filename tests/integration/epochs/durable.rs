//! Durable rows the registry cannot place: acknowledged increments held on disk survive a
//! kill, a held run longer than a replay chunk stays on disk whole, and an unmappable row
//! beside a held run is refused once.

use super::*;

/// Writer `a` of the plays family with a durable HTTP listener (`tune` may change the
/// configuration first), on cqlsim, its epoch registry read an hour before [`T0`]: the
/// set-up of the held-row tests. Also returns the writer's registry and the minute of that read.
async fn durable_writer_read_at_hour_before(
    dir: &Path,
    tune: impl FnOnce(&mut Config),
) -> (Config, Store, Writer, Arc<EpochRegistry>, i64) {
    let mut config = config(dir);
    with_plays(&mut config);
    config.ingest.http.enabled = true;
    config.ingest.http.durable = true;
    tune(&mut config);
    let store = start_cqlsim(&mut config, "a writer killed and started again").await;
    let t0 = T0 - 3600;
    let (w, reg) = started_with_read_at(&config, t0).await;
    (config, store, w, reg, t0 / 60)
}

/// Writer `a` started (again) at `at`, its registry read then.
async fn started_with_read_at(config: &Config, at: i64) -> (Writer, Arc<EpochRegistry>) {
    let (w, reg) = writer(config, "a", at).await;
    reg.refresh_at(&w.session, w.engine.families(), at)
        .await
        .unwrap();
    (w, reg)
}

/// Appends durable increments of `track.plays` (track `x`), (minute, delta) each, to the
/// writer's ingest log, as an answered request leaves them.
fn log_plays(writer: &Writer, plays: &[(i64, i64)]) {
    let mut lines = Vec::new();
    for &(minute, delta) in plays {
        countersink::state::ingest_log::IngestEntry::write_line(
            &mut lines,
            "track.plays",
            &[("track", "x")],
            delta,
            u32::try_from(minute).unwrap(),
        );
    }
    let log = writer.flusher.ingest_log().expect("a durable listener");
    log.append(&lines).expect("logged");
}

/// Acknowledged increments whose epoch the registry's last read cannot place when the
/// ingest log replays them stay on disk: a kill (the writer dropped without its final
/// flush) before the registry covers them loses none of them, whether they waited at
/// the end of the spill or were carried past rows sent behind them; the next start
/// places each in the epoch of its minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_rows_the_registry_cannot_place_survive_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let (config, store, mut w, reg, first) =
        durable_writer_read_at_hour_before(dir.path(), |_| {}).await;
    // Minute `first` is covered by the read; `first + 10` is not.
    let ahead = first + 10;
    log_plays(&w, &[(first, 5), (ahead, 7)]);
    w.flusher.flush_now().await;
    assert_eq!(
        rows(&store, &config).await.0,
        BTreeMap::from([((0, first), 5)]),
        "the covered minute is written, the other waits"
    );
    // More acknowledged increments behind the held one: they are sent, the held one is
    // carried past them.
    log_plays(&w, &[(first - 1, 3)]);
    w.flusher.flush_now().await;
    w.flusher.flush_now().await;
    assert_eq!(
        rows(&store, &config).await.0,
        BTreeMap::from([((0, first - 1), 3), ((0, first), 5)]),
        "rows behind a held one are not stuck behind it"
    );
    assert!(reg.held() > 0, "the row was held");
    let spilled = crate::common::spilled_records(&config.state.dir.join("a"));
    assert!(
        spilled
            .iter()
            .any(|r| r["granularity"] == "minute" && r["deltas"]["plays"] == 7),
        "the held row is on disk: {spilled:?}"
    );
    let accounting = w.accounting();
    assert!(accounting.is_balanced(), "{accounting:?}");
    assert_eq!(
        (accounting.minute.pending, accounting.minute.spilled),
        (0, 7),
        "the held row is spilled, not pending in memory"
    );
    drop(w);

    // The next start's read covers the minute.
    let (mut again, _) = started_with_read_at(&config, ahead * 60 + 30).await;
    again.flusher.flush_now().await;
    again.flusher.flush_now().await;
    let (minutes, days) = rows(&store, &config).await;
    assert_eq!(
        minutes,
        BTreeMap::from([((0, first - 1), 3), ((0, first), 5), ((0, ahead), 7)]),
        "every acknowledged increment written once, in the epoch of its minute"
    );
    assert_eq!(days, BTreeMap::from([(0, 15)]));
    let accounting = again.accounting();
    assert!(accounting.is_balanced(), "{accounting:?}");
    store.shutdown().await;
}

/// A run of rows the registry cannot place that is longer than one replay chunk (a
/// budget of a few rows): the first chunk of it is carried, the rest is read again by
/// later rounds, never passed by the cursor while neither sent nor on disk; a kill
/// then loses none of it, and the accounting balances all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_run_longer_than_a_chunk_stays_on_disk_whole() {
    let dir = tempfile::tempdir().unwrap();
    // Room for 8 rows: a replay chunk takes at most 4.
    let (config, store, mut w, _, first) =
        durable_writer_read_at_hour_before(dir.path(), |c| c.limits.max_pending_rows = 8).await;
    // Ten minutes the read does not cover: twenty held rows (minute and day each).
    let ahead: Vec<(i64, i64)> = (0..10).map(|i| (first + 10 + i, 1 + i)).collect();
    let held_sum: i64 = ahead.iter().map(|(_, d)| d).sum();
    let mut plays = vec![(first, 5)];
    plays.extend(&ahead);
    log_plays(&w, &plays);
    w.flusher.flush_now().await;
    // Rows behind the held run: sent once the rounds carried the run past them.
    log_plays(&w, &[(first - 1, 3)]);
    for _ in 0..12 {
        w.flusher.flush_now().await;
        let accounting = w.accounting();
        assert!(accounting.is_balanced(), "{accounting:?}");
    }
    assert_eq!(
        rows(&store, &config).await.0,
        BTreeMap::from([((0, first - 1), 3), ((0, first), 5)]),
        "the placeable rows are written, the held ones wait"
    );
    let accounting = w.accounting();
    assert_eq!(
        (accounting.minute.pending, accounting.minute.spilled),
        (0, i128::from(held_sum)),
        "every held row is spilled, none in memory or lost: {accounting:?}"
    );
    let spilled = crate::common::spilled_records(&config.state.dir.join("a"));
    let on_disk: i64 = spilled
        .iter()
        .filter(|r| r["granularity"] == "minute")
        .filter_map(|r| r["deltas"]["plays"].as_i64())
        .sum();
    assert_eq!(
        on_disk, held_sum,
        "the held minute rows on disk: {spilled:?}"
    );
    drop(w);

    // The next start's read covers them all.
    let (mut again, _) = started_with_read_at(&config, (first + 20) * 60 + 30).await;
    for _ in 0..12 {
        again.flusher.flush_now().await;
    }
    let (minutes, days) = rows(&store, &config).await;
    let mut expected = BTreeMap::from([((0, first - 1), 3), ((0, first), 5)]);
    expected.extend(ahead.iter().map(|&(m, d)| ((0, m), d)));
    assert_eq!(
        minutes, expected,
        "every acknowledged increment written once"
    );
    assert_eq!(days, BTreeMap::from([(0, 8 + held_sum)]));
    let accounting = again.accounting();
    assert!(accounting.is_balanced(), "{accounting:?}");
    store.shutdown().await;
}

/// A spilled row of a family no longer configured, in front of a run of rows the
/// registry cannot place or inside it, and a damaged line inside the run: refused once
/// (one line in `rejected.jsonl`, counted once, also after a restart), the damage set
/// aside and counted once, though the run is left where it is round after round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmappable_row_beside_a_held_run_is_refused_once() {
    for (place, at_line) in [("in front", 1), ("inside", 2)] {
        let dir = tempfile::tempdir().unwrap();
        let (config, store, mut w, _, first) =
            durable_writer_read_at_hour_before(dir.path(), |_| {}).await;
        // Held: the read does not cover them. The writer is then killed.
        log_plays(&w, &[(first + 10, 7), (first + 11, 1)]);
        w.flusher.flush_now().await;
        drop(w);
        // The held rows' segment gets a row of a family no longer configured.
        let state = config.state.dir.join("a");
        let segment = std::fs::read_dir(&state)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                name.starts_with("spill.0") && name.ends_with(".jsonl")
            })
            .expect("the held rows' segment");
        let text = std::fs::read_to_string(&segment).unwrap();
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        assert!(lines.len() >= 4, "{lines:?}");
        let mut gone: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
        gone["family"] = "gone".into();
        gone["row"] = 9.into();
        lines.insert(at_line, gone.to_string());
        // Inside the run (before its last row), read again with it every round.
        lines.insert(lines.len() - 1, "{damaged".into());
        std::fs::write(&segment, lines.join("\n") + "\n").unwrap();

        // Started again, the registry's read still short of the held minutes.
        let (mut again, _) = started_with_read_at(&config, first * 60).await;
        for _ in 0..4 {
            again.flusher.flush_now().await;
        }
        let rejected = std::fs::read_to_string(state.join("rejected.jsonl")).unwrap_or_default();
        let refused: Vec<&str> = rejected
            .lines()
            .filter(|l| l.contains("\"gone\""))
            .collect();
        assert_eq!(refused.len(), 1, "{place}: refused once: {rejected}");
        let aside = std::fs::read_to_string(state.join("spill.corrupt.jsonl")).unwrap();
        assert_eq!(aside.lines().count(), 1, "{place}: set aside once: {aside}");
        assert_eq!(
            again.flusher.ledger().corrupt_lines()[2],
            1,
            "{place}: counted once"
        );
        let accounting = again.accounting();
        assert!(accounting.is_balanced(), "{place}: {accounting:?}");
        let gone_sum = i128::from(gone["deltas"]["plays"].as_i64().unwrap());
        assert_eq!(
            accounting.minute.rejected + accounting.day.rejected,
            gone_sum,
            "{place}: {accounting:?}"
        );
        drop(again);
        // A restart with the run still held does not refuse the row again: the durable
        // cursor had passed it.
        let (mut third, _) = started_with_read_at(&config, first * 60).await;
        for _ in 0..2 {
            third.flusher.flush_now().await;
        }
        let rejected = std::fs::read_to_string(state.join("rejected.jsonl")).unwrap_or_default();
        let refused = rejected.lines().filter(|l| l.contains("\"gone\"")).count();
        assert_eq!(refused, 1, "{place}: after a restart: {rejected}");
        store.shutdown().await;
    }
}
