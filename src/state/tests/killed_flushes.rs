//! Recovery of a flush killed after its group commit: each request gets one home, a held
//! segment is left to replay once, a killed replay moves through a full spill, and only
//! the requests that may have started (before the last start bound) are unknown.

use super::*;

/// A flush killed after its group commit: each request gets one home, and running the
/// recovery again (as after a kill in the middle of it) adds nothing.
#[test]
fn recovery_gives_each_request_of_a_killed_flush_one_home_and_runs_again_safely() {
    let tmp = tempfile::tempdir().unwrap();
    let mut state = StateDir::open(&config(tmp.path())).unwrap();
    let flush = flush_of(&state, 1);
    let writes = [
        write("applied", 1),
        write("in_flight", 2),
        write("not_applied", 4),
        write("unknown", 8),
        write("rejected", 16),
        write("not_started", 32),
    ];
    state
        .journal_begin(&flush, "t", None, &families(), &writes)
        .unwrap();
    let error = |kind: &str| (kind.to_string(), "text".to_string());
    state.journal_outcome(0, &Settled::Applied);
    let (kind, text) = error("unavailable");
    state.journal_outcome(2, &Settled::NotApplied { kind, text });
    let (kind, text) = error("write_timeout");
    state.journal_outcome(3, &Settled::Unknown { kind, text });
    let (kind, text) = error("invalid");
    state.journal_outcome(4, &Settled::Rejected { kind, text });
    state.journal_outcome(5, &Settled::NotStarted);
    // Where the flush's records would have started (without it, recovery looks for them
    // in the whole current log).
    state.journal.logs_at(0, 0).unwrap();
    let journal = fs::read(state.journal_path()).unwrap();
    drop(state); // killed

    let state = StateDir::open(&config(tmp.path())).unwrap();
    let report = state.recovery().clone();
    assert_eq!(
        (
            report.flushes,
            report.unknown_rows,
            report.spilled_rows,
            report.rejected_rows
        ),
        (1, 2, 2, 1)
    );
    assert_eq!(report.unknown_sums, [2 + 8, 0, 0, 0]);
    let check = |dir: &Path| {
        let unknown = lines(dir, "unknown.jsonl");
        let kinds: Vec<(String, String)> = unknown
            .iter()
            .map(|r| {
                (
                    r.key["name"].clone(),
                    r.error.as_ref().unwrap().kind.clone(),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("in_flight".to_string(), "in_flight_at_crash".to_string()),
                ("unknown".to_string(), "write_timeout".to_string())
            ]
        );
        assert_eq!(unknown[0].request_id, flush.request_id(1));
        let rejected = lines(dir, "rejected.jsonl");
        assert_eq!(rejected.len(), 1);
        assert_eq!(rejected[0].key["name"], "rejected");
    };
    check(tmp.path());
    drop(state);
    // The same journal again (a kill before recovery's own end): nothing is added.
    fs::write(tmp.path().join("journal.wal"), &journal).unwrap();
    let mut state = StateDir::open(&config(tmp.path())).unwrap();
    check(tmp.path());
    let report = state.recovery().clone();
    assert_eq!((report.unknown_rows, report.spilled_rows), (0, 0));
    let chunk = state.load_spill(|_, _| true).unwrap();
    let spilled: Vec<(String, i64)> = chunk
        .records
        .iter()
        .map(|(_, r)| (r.key["name"].clone(), r.deltas["value"]))
        .collect();
    assert_eq!(
        spilled,
        [
            ("not_applied".to_string(), 4),
            ("not_started".to_string(), 32)
        ],
        "once, though recovery ran twice"
    );
}

/// A final flush wrote its held segment (rows held for the delta ledger, their ledger
/// rows in its header) and was killed after its group commit: recovery gives the flush's
/// requests their homes and leaves the held segment alone (it holds none of them), also
/// when it runs twice, so replay yields every row once and the next start finds the
/// ledger rows to confirm first.
#[test]
fn recovery_of_a_flush_leaves_its_held_segment_to_replay_once() {
    let tmp = tempfile::tempdir().unwrap();
    let mut state = StateDir::open(&config(tmp.path())).unwrap();
    let flush = flush_of(&state, 3);
    let held = |n: i64| {
        let mut r = record();
        r.outcome = RecordOutcome::Spilled;
        r.request_id = format!("{}/{}/3/ledger-held", flush.writer, flush.incarnation);
        r.row = n as u16;
        r.key.insert("name".into(), format!("held{n}"));
        r.deltas.insert("value".into(), 100 + n);
        r
    };
    let ledger_row = crate::sink::LedgerRow {
        family: "generic".into(),
        key: r#"["held"]"#.into(),
        bucket: 0,
        minute: crate::bucket::Minute(29_000_000),
        writer: flush.writer.as_str().into(),
        incarnation: flush.incarnation,
        flush_seq: 3,
        part: 0,
        columns: std::sync::Arc::from(vec!["value".to_owned()]),
        deltas: vec![201].into(),
    };
    let kept = state
        .spill_held(
            &flush,
            &[vec![held(0)], vec![held(1)]],
            std::slice::from_ref(&ledger_row),
        )
        .unwrap();
    assert_eq!(kept, [true, true]);
    let writes = [write("not_started", 1), write("not_applied", 2)];
    state
        .journal_begin(&flush, "t", None, &families(), &writes)
        .unwrap();
    state.journal_outcome(0, &Settled::NotStarted);
    let (kind, text) = ("unavailable".to_string(), "text".to_string());
    state.journal_outcome(1, &Settled::NotApplied { kind, text });
    state.journal_flush();
    let journal = fs::read(state.journal_path()).unwrap();
    drop(state); // killed

    let state = StateDir::open(&config(tmp.path())).unwrap();
    assert_eq!(state.recovery().spilled_rows, 2);
    drop(state);
    fs::write(tmp.path().join("journal.wal"), &journal).unwrap();
    assert_eq!(
        ledger_pending::load(tmp.path()).unwrap(),
        [ledger_row],
        "the held rows' ledger row, from the segment's header"
    );
    let mut state = StateDir::open(&config(tmp.path())).unwrap();
    assert_eq!(
        state.recovery().spilled_rows,
        0,
        "the recovered segment exists"
    );
    let chunk = state.load_spill(|_, _| true).unwrap();
    let mut replayed: Vec<(String, i64)> = chunk
        .records
        .iter()
        .map(|(_, r)| (r.key["name"].clone(), r.deltas["value"]))
        .collect();
    replayed.sort();
    assert_eq!(
        replayed,
        [
            ("held0".to_string(), 100),
            ("held1".to_string(), 101),
            ("not_applied".to_string(), 2),
            ("not_started".to_string(), 1)
        ],
        "each row once"
    );
}

/// A replay's flush killed after its store refused it, with the spill full: recovery
/// moves the chunk's rows into its recovered segment whatever room is left (they were
/// on disk already), rather than dropping them.
#[test]
fn recovery_moves_a_killed_replay_through_a_full_spill() {
    let tmp = tempfile::tempdir().unwrap();
    let mut state = StateDir::open(&config(tmp.path())).unwrap();
    let spilled_by = state.flush_id(1);
    state
        .spill(&spilled_by, &[vec![record(), record(), record()]])
        .unwrap();
    let segment = state.spill_bytes().0;
    // A chunk of two of its three rows: the segment stays until the third is read.
    state.load_spill(|n, _| n < 2).unwrap();
    let flush = state.flush_id(2);
    let consumes = state.replay_loaded();
    state
        .journal_begin(&flush, "t", consumes, &families(), &[write("replayed", 3)])
        .unwrap();
    state.journal_outcome(
        0,
        &Settled::NotApplied {
            kind: "unavailable".into(),
            text: "down".into(),
        },
    );
    state.journal_flush();
    drop(state); // killed before the flush's end
    let mut state = StateDir::open(&StateConfig {
        max_spill_bytes: segment,
        ..config(tmp.path())
    })
    .unwrap();
    let recovery = state.recovery().clone();
    assert_eq!(
        (recovery.dropped_rows, recovery.spilled_rows),
        (0, 1),
        "{recovery:?}"
    );
    let again = state.load_spill(|_, _| true).unwrap();
    let sums: Vec<i64> = again
        .records
        .iter()
        .map(|(_, r)| r.deltas.values().sum::<i64>())
        .collect();
    assert_eq!(
        sums.len(),
        2,
        "the third row, then the moved write: {sums:?}"
    );
    assert_eq!(sums[1], 3);
}

/// A large flush killed early: the requests past the last start bound the journal
/// recorded were never started, so recovery spills them; only those that may have
/// started are logged as unknown.
#[test]
fn recovery_spills_the_requests_past_the_last_start_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let mut state = StateDir::open(&config(tmp.path())).unwrap();
    state.set_start_window(64);
    let flush = flush_of(&state, 1);
    let writes: Vec<PartitionWrite> = (0..300).map(|i| write(&format!("k{i}"), 1)).collect();
    state
        .journal_begin(&flush, "t", None, &families(), &writes)
        .unwrap();
    // Requests 0..=70 start (the second window's bound, 64 + 64, is recorded before
    // request 64 starts); the first ten answer.
    for index in 0..=70 {
        state.journal_may_start(index).unwrap();
    }
    for index in 0..10 {
        state.journal_outcome(index, &Settled::Applied);
    }
    state.journal_flush();
    let groups = journal::read(state.journal_path()).unwrap();
    assert_eq!(groups[0].starts_below, Some(64 + 64));
    drop(state); // killed

    let state = StateDir::open(&config(tmp.path())).unwrap();
    let report = state.recovery().clone();
    assert_eq!(
        (report.unknown_rows, report.spilled_rows),
        (128 - 10, 300 - 128),
        "{report:?}"
    );
    let unknown = lines(tmp.path(), "unknown.jsonl");
    let request = |id: &str| -> u32 { id.rsplit('/').next().unwrap().parse().unwrap() };
    assert!(
        unknown
            .iter()
            .all(|r| (10..128).contains(&request(&r.request_id))),
        "only the requests that may have started are logged unknown"
    );
}

/// Without a start window (the wrapper's flushes, older versions), every request of a
/// killed flush may have started: all unknown.
#[test]
fn without_start_bounds_every_unanswered_request_is_unknown() {
    let tmp = tempfile::tempdir().unwrap();
    let mut state = StateDir::open(&config(tmp.path())).unwrap();
    let flush = flush_of(&state, 1);
    let writes: Vec<PartitionWrite> = (0..100).map(|i| write(&format!("k{i}"), 1)).collect();
    state
        .journal_begin(&flush, "t", None, &families(), &writes)
        .unwrap();
    state.journal_may_start(0).unwrap();
    drop(state);
    let state = StateDir::open(&config(tmp.path())).unwrap();
    assert_eq!(
        (state.recovery().unknown_rows, state.recovery().spilled_rows),
        (100, 0)
    );
}
