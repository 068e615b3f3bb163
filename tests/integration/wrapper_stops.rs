//! The driver wrapper (`CounterSession`) when it stops or cannot write: the final
//! flush's deadline, a shutdown during a running flush, a store down at the final flush
//! and the replay at the next start, recovery of unended flushes, a spill cursor that
//! cannot be written, and the memory limit through an outage.

use std::collections::BTreeMap;
use std::time::Duration;

use countersink::config::Config;
use countersink::state::{OutcomeLog, WriteRecord};
use scylla::value::Counter;

use crate::common::{StoreOptions, cell, config, launch};
use crate::wrapper::{SCHEMA, records, spilled, wrap};

/// The final flush's deadline stops the sending: with every reply held past it and two
/// requests in flight at most, the two running at the deadline are given up as unknown
/// (`cancelled_at_deadline`; they did apply, and nothing sends them again), the other
/// eight never start and go to the spill, and every delta is in exactly one record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_final_deadline_requests_in_flight_are_unknown_and_the_rest_spilled() {
    let store = launch(StoreOptions::cqlsim_only(
        "holds every reply past the deadline",
    ))
    .await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let dir = tempfile::tempdir().unwrap();
    let session = wrap(&store.contact_point(), dir.path(), |c| {
        c.store.request_timeout = Duration::from_secs(30);
        c.flush.shutdown_deadline = Duration::from_secs(1);
        c.flush.max_in_flight = 2;
    })
    .await;
    let update = session
        .prepare("UPDATE w.c1 SET c = c + ? WHERE k = ?")
        .await
        .unwrap();
    // A first flush prepares the wrapper's own UPDATE while the store answers.
    session
        .execute_unpaged(&update, (Counter(1), "warm"))
        .await
        .unwrap();
    assert_eq!(session.flush_now().await.applied, 1);
    let mut fed = 0_i128;
    for i in 1..=10_i64 {
        session
            .execute_unpaged(&update, (Counter(i), format!("k{i}")))
            .await
            .unwrap();
        fed += i128::from(i);
    }
    let unknown_path = session.log_path(OutcomeLog::Unknown).await;
    server.set_faults(vec!["delay,for=5s,table=w.c1".parse().unwrap()]);
    let report = session.shutdown().await;
    assert_eq!(report.writes, 10, "one request per key: {report:?}");
    assert_eq!(
        (report.applied, report.unknown, report.unsent),
        (0, 2, 8),
        "{report:?}"
    );
    let unknown = records(&unknown_path);
    assert_eq!(unknown.len(), 2, "{unknown:?}");
    assert!(
        unknown
            .iter()
            .all(|r| r.error.as_ref().map(|e| e.kind.as_str()) == Some("cancelled_at_deadline")),
        "{unknown:?}"
    );
    let spilled = spilled(dir.path());
    assert_eq!(spilled.len(), 8, "{spilled:?}");
    let sum = |records: &[WriteRecord]| -> i128 {
        records
            .iter()
            .flat_map(|r| r.deltas.values())
            .map(|d| i128::from(*d))
            .sum()
    };
    assert_eq!(
        sum(&unknown) + sum(&spilled),
        fed,
        "every delta in one record"
    );
    server.clear_faults();
    assert_eq!(
        server.stats().table("w", "c1").counter_delta_sum,
        1 + sum(&unknown),
        "the store holds the first flush and the two cut off in flight, nothing more"
    );
    store.shutdown().await;
}

/// A store that takes the wrapper's PREPARE and holds the answer: the final flush
/// prepares within its deadline, so the shutdown ends soon after it (not when the store
/// answers, two minutes later), and every row is spilled (never sent: not applied,
/// nothing unknown) with every delta in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepare_unanswered_at_shutdown_ends_at_the_deadline_with_every_row_spilled() {
    let store = launch(StoreOptions::cqlsim_only("holds PREPARE replies")).await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let dir = tempfile::tempdir().unwrap();
    let session = wrap(&store.contact_point(), dir.path(), |c| {
        c.store.request_timeout = Duration::from_secs(120);
        c.flush.shutdown_deadline = Duration::from_secs(1);
    })
    .await;
    let update = session
        .prepare("UPDATE w.c1 SET c = c + ? WHERE k = ?")
        .await
        .unwrap();
    let mut fed = 0_i128;
    for i in 1..=10_i64 {
        session
            .execute_unpaged(&update, (Counter(i), format!("k{i}")))
            .await
            .unwrap();
        fed += i128::from(i);
    }
    server.set_faults(vec![
        "delay,for=120s,op=prepare,table=w.c1".parse().unwrap(),
    ]);
    let report = tokio::time::timeout(Duration::from_secs(30), session.shutdown())
        .await
        .expect("the shutdown ends at its deadline, not when PREPARE is answered");
    assert_eq!(report.writes, 10, "{report:?}");
    assert_eq!(
        (report.applied, report.unknown, report.unsent),
        (0, 0, 10),
        "{report:?}"
    );
    let spilled: i128 = spilled(dir.path())
        .iter()
        .flat_map(|r| r.deltas.values())
        .map(|d| i128::from(*d))
        .sum();
    assert_eq!(spilled, fed, "every delta in the spill");
    server.clear_faults();
    assert_eq!(server.stats().table("w", "c1").counter_delta_sum, 0);
    store.shutdown().await;
}

/// The final flush with the store down: nothing is lost silently. Every buffered delta is
/// in the spill (definitely not applied) or `wrapper_unknown.jsonl`, the identity holds in
/// the collector's last figures, and the store holds nothing. The next start on the same
/// state directory replays the spilled rows once: the store then holds exactly them, per
/// row and column, and a third start sends nothing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_flush_with_the_store_down_spills_every_row_and_the_next_start_replays_them_once() {
    let store = launch(StoreOptions::cqlsim_only("takes the node down")).await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let dir = tempfile::tempdir().unwrap();
    let session = wrap(&store.contact_point(), dir.path(), |c| {
        c.store.request_timeout = Duration::from_millis(300);
        c.flush.shutdown_deadline = Duration::from_secs(3);
    })
    .await;
    let update = session
        .prepare("UPDATE w.c1 SET c = c + ?, d = d - ? WHERE k = ?")
        .await
        .unwrap();
    let mut fed = 0_i128;
    for i in 0..500_i64 {
        let key = format!("k{}", i % 50);
        session
            .execute_unpaged(&update, (Counter(i + 1), Counter(1), &key))
            .await
            .unwrap();
        fed += i128::from(i + 1) - 1;
    }
    let rejected_path = session.log_path(OutcomeLog::Rejected).await;
    let unknown_path = session.log_path(OutcomeLog::Unknown).await;
    let collector = session.collector();
    server.node_down();
    let report = session.shutdown().await;
    assert_eq!(report.rows, 50);
    assert_eq!(report.applied, 0, "{report:?}");
    // Each request ended unsent (refused, or never started before the deadline) or
    // unknown (no answer in time): nothing re-queued after the final flush.
    assert_eq!(report.unsent + report.unknown, report.writes, "{report:?}");
    assert!(report.unsent > 0, "{report:?}");
    let spilled = spilled(dir.path());
    assert!(records(&rejected_path).is_empty(), "all fit in the spill");
    // The operator's view: the wrapper's rows in the shared segments, as its own.
    let sum = |records: &[WriteRecord]| -> i128 {
        records
            .iter()
            .flat_map(|r| r.deltas.values())
            .map(|d| i128::from(*d))
            .sum()
    };
    let mut shown = 0_i128;
    countersink::ops::outcomes::scan(dir.path(), |source, record| {
        if source.as_str() == "spill" {
            assert_eq!(record.family, "wrapper", "{record:?}");
            shown += record.deltas.values().map(|d| i128::from(*d)).sum::<i128>();
        }
    })
    .expect("scan");
    assert_eq!(
        shown,
        sum(&spilled),
        "countersink outcomes shows every spilled row"
    );
    let recorded: i128 = spilled
        .iter()
        .chain(&records(&unknown_path))
        .flat_map(|r| r.deltas.values())
        .map(|d| i128::from(*d))
        .sum();
    assert_eq!(recorded, fed, "every delta is in a record");
    let registry = prometheus::Registry::new();
    registry.register(Box::new(collector)).expect("register");
    let text = prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .expect("encode");
    for stage in ["pending", "in_flight", "applied"] {
        assert!(
            text.contains(&format!(
                "countersink_wrapper_stage_delta{{stage=\"{stage}\"}} 0"
            )),
            "{stage} in\n{text}"
        );
    }
    assert!(
        text.contains(&format!(
            "countersink_wrapper_stage_delta{{stage=\"buffered\"}} {fed}"
        )),
        "{text}"
    );
    server.node_up();
    assert_eq!(server.stats().table("w", "c1").counter_delta_sum, 0);

    // The next start replays the spilled rows, once.
    let mut expected: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for record in &spilled {
        let key = record.key["k"].trim_matches('\'').to_owned();
        let row = expected.entry(key).or_default();
        row.0 += record.deltas.get("c").copied().unwrap_or(0);
        row.1 += record.deltas.get("d").copied().unwrap_or(0);
    }
    let tweak = |c: &mut Config| c.store.request_timeout = Duration::from_secs(5);
    let session = wrap(&store.contact_point(), dir.path(), tweak).await;
    let report = session.flush_now().await;
    assert_eq!(report.replayed_rows, spilled.len() as u64, "{report:?}");
    assert_eq!(report.applied, report.writes, "{report:?}");
    session.shutdown().await;
    let check = |what: &str| {
        for (key, (c, d)) in &expected {
            let condition = format!("k = '{key}'");
            assert_eq!(
                cell(server, "w.c1", "c", &condition),
                Some(*c),
                "{what}: c of {key}"
            );
            assert_eq!(
                cell(server, "w.c1", "d", &condition),
                Some(*d),
                "{what}: d of {key}"
            );
        }
        let total: i128 = expected.values().map(|(c, d)| i128::from(*c + *d)).sum();
        assert_eq!(
            server.stats().table("w", "c1").counter_delta_sum,
            total,
            "{what}: nothing but the spilled rows"
        );
    };
    check("after the replay");
    // A third start: nothing left to replay.
    let session = wrap(&store.contact_point(), dir.path(), tweak).await;
    let report = session.flush_now().await;
    assert_eq!(report.replayed_rows, 0, "{report:?}");
    session.shutdown().await;
    check("after a third start");
    store.shutdown().await;
}

/// The final flush with the store down and a spill too small for its rows: what does not
/// fit is in `rejected.jsonl` (`spill_full`, with the error its write had), so every
/// buffered delta is still in exactly one record, and the next start replays only what
/// the spill holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_past_a_full_wrapper_spill_are_recorded_rejected_with_their_deltas() {
    let store = launch(StoreOptions::cqlsim_only("takes the node down")).await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let dir = tempfile::tempdir().unwrap();
    let session = wrap(&store.contact_point(), dir.path(), |c| {
        c.store.request_timeout = Duration::from_millis(300);
        c.flush.shutdown_deadline = Duration::from_secs(3);
        c.state.max_spill_bytes = 2048;
    })
    .await;
    let update = session
        .prepare("UPDATE w.c1 SET c = c + ? WHERE k = ?")
        .await
        .unwrap();
    let mut fed = 0_i128;
    for i in 0..200_i64 {
        session
            .execute_unpaged(&update, (Counter(i + 1), format!("k{}", i % 40)))
            .await
            .unwrap();
        fed += i128::from(i + 1);
    }
    let rejected_path = session.log_path(OutcomeLog::Rejected).await;
    let unknown_path = session.log_path(OutcomeLog::Unknown).await;
    server.node_down();
    let report = session.shutdown().await;
    assert_eq!(report.applied, 0, "{report:?}");
    let spilled = spilled(dir.path());
    let rejected = records(&rejected_path);
    assert!(!spilled.is_empty(), "some rows fit in the spill");
    assert!(!rejected.is_empty(), "2 KiB cannot hold 40 rows");
    for record in &rejected {
        let error = record.error.as_ref().expect("an error");
        assert_eq!(error.kind, "spill_full", "{record:?}");
        assert_eq!(record.outcome, countersink::state::RecordOutcome::Rejected);
    }
    let mut keys = std::collections::BTreeSet::new();
    let mut recorded = 0_i128;
    for record in spilled
        .iter()
        .chain(&rejected)
        .chain(&records(&unknown_path))
    {
        assert!(
            keys.insert(record.key["k"].clone()),
            "one record per row: {record:?}"
        );
        recorded += i128::from(record.deltas["c"]);
    }
    assert_eq!(recorded, fed, "every delta is in exactly one record");
    server.node_up();

    let session = wrap(&store.contact_point(), dir.path(), |_| {}).await;
    let report = session.flush_now().await;
    assert_eq!(report.replayed_rows, spilled.len() as u64, "{report:?}");
    session.shutdown().await;
    let stored: i128 = server.stats().table("w", "c1").counter_delta_sum;
    let in_spill: i128 = spilled.iter().map(|r| i128::from(r.deltas["c"])).sum();
    assert_eq!(
        stored, in_spill,
        "the store holds the spilled rows only, once"
    );
    store.shutdown().await;
}

/// A replayed row that did not apply and cannot go back to the buffer (its sum with
/// what arrived since would leave the i64 range) is spilled again whatever room the
/// spill has left: it was on disk already, and the segment it came from counts against
/// `state.max_spill_bytes` until the cursor passes it. A full spill must not turn it
/// into a rejected record (`spill_full`) while the cursor passes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_row_that_cannot_go_back_is_spilled_again_past_a_full_spill() {
    let store = launch(StoreOptions::cqlsim_only("takes the node down")).await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let dir = tempfile::tempdir().unwrap();
    let big = i64::MAX - 1;
    let earlier: BTreeMap<String, i64> = [("k".to_string(), big)].into();
    std::fs::write(
        dir.path()
            .join(countersink::state::wrapper_files::SPILL_FILE),
        spill_lines(&earlier),
    )
    .unwrap();
    let session = wrap(&store.contact_point(), dir.path(), |c| {
        c.store.request_timeout = Duration::from_millis(300);
        // Less than the segment the earlier spill moved into: no room left.
        c.state.max_spill_bytes = 64;
    })
    .await;
    let update = session
        .prepare("UPDATE w.c1 SET c = c + ? WHERE k = ?")
        .await
        .unwrap();
    session
        .execute_unpaged(&update, (Counter(5), "k"))
        .await
        .unwrap();
    server.node_down();
    // The replay first: k's replayed delta does not apply, and cannot join the +5.
    let report = session.flush_now().await;
    assert_eq!(report.replayed_rows, 1, "{report:?}");
    assert_eq!(report.applied, 0, "{report:?}");
    eprintln!("DEBUG report {report:?} stats {:?}", session.stats());
    let rejected = records(&session.log_path(OutcomeLog::Rejected).await);
    assert!(rejected.is_empty(), "{rejected:?}");
    let on_disk: Vec<i64> = spilled(dir.path()).iter().map(|r| r.deltas["c"]).collect();
    assert_eq!(on_disk, [big], "the replayed row, spilled once again");
    server.node_up();
    drop(session);
    store.shutdown().await;
}

/// The per-key sum of column `c` over `records` (a key literal's quotes removed).
fn sums_by_key(records: &[WriteRecord]) -> BTreeMap<String, i64> {
    let mut sums = BTreeMap::new();
    for record in records {
        let key = record.key["k"].trim_matches('\'').to_owned();
        *sums.entry(key).or_default() += record.deltas.get("c").copied().unwrap_or(0);
    }
    sums
}

/// Spill records of `w.c1`, one per key, delta `c` each, as an earlier process leaves them.
fn spill_lines(rows: &BTreeMap<String, i64>) -> String {
    rows.iter()
        .enumerate()
        .map(|(i, (key, delta))| {
            let record = serde_json::json!({
                "time": "2026-01-01T00:00:00Z", "writer": "earlier", "incarnation": 1,
                "flush_seq": 9, "request_id": format!("earlier/1/w9/{i}"), "row": 0,
                "outcome": "spilled", "table": "w.c1", "key": {"k": format!("'{key}'")},
                "key_hex": [countersink::wrapper::records::hex(key.as_bytes())],
                "deltas": {"c": delta},
            });
            format!("{record}\n")
        })
        .collect()
}

/// A replay whose spill cursor cannot be written (the disk is full: the cursor's
/// temporary file is `/dev/full`), then the process ends without a shutdown (a kill
/// between flushes): the next start must not replay the rows the first one applied.
/// Each row is in the store once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_spill_whose_cursor_could_not_be_written_is_not_replayed_again() {
    let store = launch(StoreOptions::cqlsim_only("counts what a replay applies")).await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let dir = tempfile::tempdir().unwrap();
    let spilled: BTreeMap<String, i64> = (0..5).map(|i| (format!("s{i}"), 10 + i)).collect();
    std::fs::write(
        dir.path()
            .join(countersink::state::wrapper_files::SPILL_FILE),
        spill_lines(&spilled),
    )
    .unwrap();
    // Room for three rows: the replay consumes part of the spill, so the cursor is
    // written (a spill consumed whole is removed instead).
    let small = |c: &mut Config| c.limits.max_pending_rows = 3;
    let session = wrap(&store.contact_point(), dir.path(), small).await;
    // After the open, which removes unfinished temporary files: `spill.cursor`'s.
    let cursor_tmp = dir.path().join("spill.tmp");
    std::os::unix::fs::symlink("/dev/full", &cursor_tmp).unwrap();
    let report = session.flush_now().await;
    assert_eq!(report.replayed_rows, 3, "{report:?}");
    assert_eq!(report.applied, report.writes, "{report:?}");
    // Ended without a shutdown, as a kill between flushes would; the disk heals.
    drop(session);
    tokio::time::sleep(Duration::from_millis(200)).await;
    std::fs::remove_file(&cursor_tmp).unwrap();

    let session = wrap(&store.contact_point(), dir.path(), small).await;
    let mut replayed = 0;
    for _ in 0..3 {
        replayed += session.flush_now().await.replayed_rows;
    }
    session.shutdown().await;
    for (key, delta) in &spilled {
        assert_eq!(
            cell(server, "w.c1", "c", &format!("k = '{key}'")),
            Some(*delta),
            "row {key}: spilled once, applied once"
        );
    }
    assert_eq!(
        replayed, 2,
        "only the two rows the first start did not load"
    );
    store.shutdown().await;
}

/// Two committed wrapper flushes the journal holds unended (the first one's end could not
/// be written): the first re-queued k's +5 (not applied), the second sent the re-queued
/// +5 and it applied. Recovery must not spill the first one's +5: the later flush re-sent
/// it, and a replay would apply it a second time. As the sidecar's recovery does, a
/// not-applied request of a flush that is not the last is logged unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_spills_nothing_a_later_unended_flush_already_sent() {
    use countersink::state::{FlushId, Settled, StateDir, WrapperTable};
    let store = launch(StoreOptions::cqlsim_only("reads the wrapper's recovery")).await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let dir = tempfile::tempdir().unwrap();
    {
        let mut state = StateDir::open(&config(dir.path()).state).expect("state");
        let table = WrapperTable {
            id: 1,
            keyspace: "w".into(),
            name: "c1".into(),
            key_columns: vec!["k".into()],
            counters: vec!["c".into(), "d".into()],
        };
        let mut key = 1_u32.to_le_bytes().to_vec();
        countersink::wrapper::statement::push_key_value(&mut key, b"k");
        let deltas = [5_i64, 0];
        let outcomes = [
            Settled::NotApplied {
                kind: "unavailable".into(),
                text: "not enough replicas".into(),
            },
            Settled::Applied,
        ];
        for (seq, outcome) in (1..).zip(outcomes) {
            let flush = FlushId {
                writer: state.writer_id().to_owned(),
                incarnation: state.incarnation(),
                flush_seq: seq,
                nonce: None,
            };
            let intents = [(1, vec![(&key[..], &deltas[..])])];
            state
                .wrapper_journal_begin(
                    &flush,
                    "2026-01-01T00:00:00Z",
                    None,
                    std::slice::from_ref(&table),
                    &intents,
                )
                .expect("group commit");
            state.journal_outcome(0, &outcome);
            state.journal_flush();
        }
    }
    let session = wrap(&store.contact_point(), dir.path(), |_| {}).await;
    let recovery = session.recovery().clone();
    assert_eq!(
        sums_by_key(&spilled(dir.path())),
        BTreeMap::new(),
        "nothing spilled: {recovery:?}"
    );
    let unknown_path = session.log_path(OutcomeLog::Unknown).await;
    let report = session.flush_now().await;
    session.shutdown().await;
    assert_eq!(report.replayed_rows, 0, "{report:?}");
    assert_eq!(
        sums_by_key(&records(&unknown_path)),
        BTreeMap::from([("k".to_owned(), 5)]),
        "the first flush's +5 is unknown: {recovery:?}"
    );
    assert_eq!(cell(server, "w.c1", "c", "k = 'k'"), None, "nothing sent");
    store.shutdown().await;
}

/// `shutdown()` while a periodic flush hangs (the store takes every write and never
/// answers, the request timeout is a minute): one `flush.shutdown_deadline` covers the
/// running flush and the final flush. The two requests in flight at the deadline are
/// logged unknown, the rest never started and are spilled, and every delta fed is in one
/// of the two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_during_a_hanging_periodic_flush_ends_within_one_deadline() {
    let store = launch(StoreOptions::cqlsim_only("never answers writes")).await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let dir = tempfile::tempdir().unwrap();
    let deadline = Duration::from_secs(2);
    let session = wrap(&store.contact_point(), dir.path(), |c| {
        c.store.request_timeout = Duration::from_secs(60);
        c.flush.interval = Duration::from_millis(300);
        c.flush.jitter = Duration::ZERO;
        c.flush.shutdown_deadline = deadline;
        c.flush.max_in_flight = 2;
    })
    .await;
    let update = session
        .prepare("UPDATE w.c1 SET c = c + ? WHERE k = ?")
        .await
        .unwrap();
    // A first flush prepares the wrapper's own UPDATE while the store answers.
    session
        .execute_unpaged(&update, (Counter(1), "warm"))
        .await
        .unwrap();
    session.flush_now().await;
    server.set_faults(vec!["no-reply,table=w.c1".parse().unwrap()]);
    let mut fed = BTreeMap::new();
    for i in 1..=10_i64 {
        let key = format!("k{i}");
        session
            .execute_unpaged(&update, (Counter(i), &key))
            .await
            .unwrap();
        fed.insert(key, i);
    }
    for _ in 0..100 {
        if session.stats().accounting.in_flight != 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_ne!(
        session.stats().accounting.in_flight,
        0,
        "a periodic flush is sending"
    );
    // Not `session.log_path`: it waits for the flusher, which the hanging flush holds.
    let unknown_path = dir.path().join(OutcomeLog::Unknown.file_name());
    let started = std::time::Instant::now();
    tokio::time::timeout(deadline + Duration::from_secs(3), session.shutdown())
        .await
        .expect("shutdown ends within one deadline (and a margin)");
    let took = started.elapsed();
    let unknown = records(&unknown_path);
    let spilled = spilled(dir.path());
    assert_eq!(
        unknown.len(),
        2,
        "the two in flight: {unknown:?} ({took:?})"
    );
    assert!(
        unknown
            .iter()
            .all(|r| r.error.as_ref().map(|e| e.kind.as_str()) == Some("cancelled_at_deadline")),
        "{unknown:?}"
    );
    assert_eq!(spilled.len(), 8, "never started: {spilled:?}");
    let mut recorded = sums_by_key(&unknown);
    for (key, sum) in sums_by_key(&spilled) {
        assert!(recorded.insert(key, sum).is_none(), "a row in two records");
    }
    assert_eq!(recorded, fed, "every delta fed is in exactly one record");
    server.clear_faults();
    assert_eq!(
        server.stats().table("w", "c1").counter_delta_sum,
        1,
        "the store holds the first flush only (no reply means not applied here)"
    );
    store.shutdown().await;
}

/// `flush_now()` dropped while its requests are in flight (the caller's timeout, a
/// `select!`): the flush goes on without its caller, so every row it drained is settled.
/// The store applies the held requests once; the wrapper counts them applied, logs
/// nothing unknown, and its accounting balances with the store's sum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_flush_now_still_settles_every_row_it_drained() {
    let store = launch(StoreOptions::cqlsim_only("holds every reply for a second")).await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let dir = tempfile::tempdir().unwrap();
    let session = wrap(&store.contact_point(), dir.path(), |c| {
        c.store.request_timeout = Duration::from_secs(30);
        c.flush.interval = Duration::from_secs(3600);
    })
    .await;
    let update = session
        .prepare("UPDATE w.c1 SET c = c + ? WHERE k = ?")
        .await
        .unwrap();
    session
        .execute_unpaged(&update, (Counter(1), "warm"))
        .await
        .unwrap();
    assert_eq!(session.flush_now().await.applied, 1);
    let mut fed = 1_i128;
    for i in 1..=10_i64 {
        session
            .execute_unpaged(&update, (Counter(i), format!("k{i}")))
            .await
            .unwrap();
        fed += i128::from(i);
    }
    server.set_faults(vec!["delay,for=1s,table=w.c1".parse().unwrap()]);
    let cancelled = tokio::time::timeout(Duration::from_millis(300), session.flush_now()).await;
    assert!(
        cancelled.is_err(),
        "the caller gave up while the writes were held"
    );
    // Waits for the flusher, which the cancelled flush holds until it has settled.
    session.flush_now().await;
    server.clear_faults();
    let accounting = session.stats().accounting;
    assert!(accounting.is_balanced(), "{accounting:?}");
    assert_eq!(
        (accounting.applied, accounting.in_flight, accounting.unknown),
        (fed, 0, 0),
        "{accounting:?}"
    );
    let unknown_path = session.log_path(OutcomeLog::Unknown).await;
    assert!(records(&unknown_path).is_empty(), "nothing unknown");
    session.shutdown().await;
    assert_eq!(server.stats().table("w", "c1").counter_delta_sum, fed);
    store.shutdown().await;
}

/// A replay chunk that ends unknown (every write times out) while the application
/// makes no calls: the rounds after it send nothing, which says nothing of the store, so
/// the rest of the spill is tried again without waiting for new traffic or a restart.
/// The timed-out rows are logged unknown, never replayed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_replay_chunk_does_not_park_the_rest_of_the_spill() {
    let store = launch(StoreOptions::cqlsim_only("times out every write")).await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let dir = tempfile::tempdir().unwrap();
    let earlier: BTreeMap<String, i64> = (0..5).map(|i| (format!("s{i}"), 10 + i)).collect();
    std::fs::write(
        dir.path()
            .join(countersink::state::wrapper_files::SPILL_FILE),
        spill_lines(&earlier),
    )
    .unwrap();
    let session = wrap(&store.contact_point(), dir.path(), |c| {
        // A quarter of 2,900 bytes holds fewer than the five rows: several groups.
        c.limits.max_pending_bytes = 2900;
    })
    .await;
    server.set_faults(vec!["write-timeout,table=w.c1".parse().unwrap()]);
    let first = session.flush_now().await;
    let timed_out = first.replayed_rows;
    assert!((1..5).contains(&timed_out), "one chunk: {first:?}");
    assert_eq!(first.unknown, first.writes, "{first:?}");
    server.clear_faults();
    // The round after the timed-out chunk sends nothing (the store's answer is still
    // unknown), the rounds after it take a chunk each.
    let mut replayed = 0;
    for _ in 0..6 {
        replayed += session.flush_now().await.replayed_rows;
    }
    assert_eq!(replayed, 5 - timed_out, "the rest of the spill, once");
    let unknown = records(&session.log_path(OutcomeLog::Unknown).await);
    assert_eq!(unknown.len() as u64, timed_out, "{unknown:?}");
    session.shutdown().await;
    let mut applied = earlier.clone();
    for record in &unknown {
        applied.remove(record.key["k"].trim_matches('\''));
    }
    for (key, delta) in &applied {
        assert_eq!(
            cell(server, "w.c1", "c", &format!("k = '{key}'")),
            Some(*delta),
            "{key}"
        );
    }
    assert!(spilled(dir.path()).is_empty(), "nothing left to replay");
    store.shutdown().await;
}

/// A transient outage (the Cassandra persona answers every write `Unavailable`: not
/// applied) while the application creates a new key every millisecond: the rows the
/// wrapper holds never pass `limits.max_pending_rows` (a re-queued row keeps the room it
/// had; past the limit, calls are sent unchanged), the flush loop backs off instead of
/// re-sending the backlog every interval, and once the store heals every increment the
/// application was told succeeded is in the store, exactly, or in a record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_keeps_the_wrapper_within_its_row_limit_and_loses_nothing() {
    const LIMIT: usize = 100;
    let store = launch(StoreOptions::cqlsim_only("answers every write unavailable")).await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let dir = tempfile::tempdir().unwrap();
    let session = wrap(&store.contact_point(), dir.path(), |c| {
        c.limits.max_pending_rows = LIMIT;
        c.store.request_timeout = Duration::from_secs(2);
        c.flush.interval = Duration::from_millis(20);
        c.flush.jitter = Duration::ZERO;
        c.flush.max_backoff = Duration::from_millis(500);
    })
    .await;
    let update = session
        .prepare("UPDATE w.c1 SET c = c + ? WHERE k = ?")
        .await
        .unwrap();
    server.set_faults(vec!["unavailable,table=w.c1".parse().unwrap()]);
    let flushes_before = session.stats().flushes;
    let mut acknowledged: BTreeMap<String, i64> = BTreeMap::new();
    let mut most_rows = 0;
    let outage = std::time::Instant::now();
    for i in 0..2_000_i64 {
        let key = format!("k{i}");
        let delta = i % 7 + 1;
        // Past the limit the call is sent unchanged and the store refuses it: the
        // application sees the error, and the increment is its own to retry.
        if session
            .execute_unpaged(&update, (Counter(delta), &key))
            .await
            .is_ok()
        {
            *acknowledged.entry(key).or_default() += delta;
        }
        most_rows = most_rows.max(session.stats().pending_rows);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let outage = outage.elapsed();
    let flushes = session.stats().flushes - flushes_before;
    assert!(
        most_rows <= LIMIT as u64,
        "held {most_rows} rows, limit {LIMIT}"
    );
    let every_interval = (outage.as_millis() / 20) as u64;
    assert!(
        flushes * 4 <= every_interval,
        "{flushes} flushes in {outage:?}: backing off, not one every 20 ms"
    );
    server.clear_faults();
    for _ in 0..50 {
        if session.stats().pending_rows == 0 {
            break;
        }
        session.flush_now().await;
    }
    let unknown_path = session.log_path(OutcomeLog::Unknown).await;
    let rejected_path = session.log_path(OutcomeLog::Rejected).await;
    session.shutdown().await;
    let mut recorded: BTreeMap<String, i64> = BTreeMap::new();
    for records in [
        records(&unknown_path),
        records(&rejected_path),
        spilled(dir.path()),
    ] {
        for (key, sum) in sums_by_key(&records) {
            *recorded.entry(key).or_default() += sum;
        }
    }
    assert!(!acknowledged.is_empty());
    for (key, fed) in &acknowledged {
        let stored = cell(server, "w.c1", "c", &format!("k = '{key}'")).unwrap_or(0);
        let in_records = recorded.get(key).copied().unwrap_or(0);
        assert_eq!(
            stored + in_records,
            *fed,
            "row {key}: fed {fed}, stored {stored}, in records {in_records}"
        );
    }
    store.shutdown().await;
}
