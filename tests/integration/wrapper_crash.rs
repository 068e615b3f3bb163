//! The driver wrapper killed (SIGKILL) at a step of its flush, then started again on the
//! same state directory: what was in flight is in `wrapper_unknown.jsonl`
//! (`in_flight_at_crash`) and never sent again, and spilled rows a killed flush had
//! already taken are not replayed a second time.
//!
//! The process killed is this test binary run again with only [`wrapper_child`] selected:
//! it wraps a session to the parent's cqlsim, feeds or replays, flushes, and stops at the
//! crash point `COUNTERSINK_CRASH_POINT` names (feature `dev`), where the parent kills it.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use countersink::CounterSession;
use countersink::config::Config;
use countersink::state::wrapper_files::SPILL_FILE;
use countersink::state::{OutcomeLog, WriteRecord};
use countersink::wrapper::records::hex;
use scylla::client::session_builder::SessionBuilder;
use scylla::value::Counter;

use crate::common::{StoreOptions, cell, config, launch};

/// Set in the child's environment: `contact|state dir|increments to feed`, and optionally
/// `|keys|requests in flight|limits.max_pending_bytes` (10 keys and the defaults
/// otherwise).
const CHILD_ENV: &str = "COUNTERSINK_WRAPPER_CRASH_CHILD";

const SCHEMA: &str = "
    CREATE KEYSPACE wk WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1};
    CREATE TABLE wk.c (k text PRIMARY KEY, c counter);
";

async fn wrap(contact: &str, dir: &Path) -> CounterSession {
    wrap_with(contact, dir, None, None).await
}

async fn wrap_with(
    contact: &str,
    dir: &Path,
    max_in_flight: Option<usize>,
    max_pending_bytes: Option<usize>,
) -> CounterSession {
    let mut config: Config = config(dir);
    config.store.contact_points = vec![contact.to_owned()];
    if let Some(max_in_flight) = max_in_flight {
        config.flush.max_in_flight = max_in_flight;
    }
    if let Some(bytes) = max_pending_bytes {
        config.limits.max_pending_bytes = bytes;
    }
    config.flush.interval = Duration::from_secs(3600);
    let session = SessionBuilder::new()
        .known_node(contact)
        .build()
        .await
        .expect("session");
    CounterSession::new(session, &config)
        .await
        .expect("wrapper")
}

/// The process the tests below kill: a child process's entry point, not a test of its own.
/// Ignored, so that a plain run reports it as not run rather than passed; the tests below
/// run it with `--ignored`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the entry point of the wrapper crash tests' child process, run by them with --ignored"]
async fn wrapper_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut parts = spec.split('|');
    let (contact, dir, feed) = (
        parts.next().expect("contact"),
        parts.next().expect("dir"),
        parts.next().expect("feed").parse::<i64>().expect("feed"),
    );
    let keys = parts.next().map_or(10, |k| k.parse::<i64>().expect("keys"));
    let in_flight = parts
        .next()
        .and_then(|n| (n != "-").then(|| n.parse::<usize>().expect("in flight")));
    let bytes = parts
        .next()
        .map(|n| n.parse::<usize>().expect("max_pending_bytes"));
    let session = wrap_with(contact, Path::new(dir), in_flight, bytes).await;
    let update = session
        .prepare("UPDATE wk.c SET c = c + ? WHERE k = ?")
        .await
        .expect("prepare");
    for i in 0..feed {
        session
            .execute_unpaged(&update, (Counter(i + 1), format!("k{}", i % keys)))
            .await
            .expect("buffered");
    }
    // A replay's refusals wait for the round after the rows before them.
    for _ in 0..3 {
        session.flush_now().await;
    }
    panic!("the crash point was not reached");
}

/// What the child feeds: key → sum.
fn fed(feed: i64) -> BTreeMap<String, i64> {
    let mut sums = BTreeMap::new();
    for i in 0..feed {
        *sums.entry(format!("k{}", i % 10)).or_default() += i + 1;
    }
    sums
}

/// Runs the child with every reply of the store to its writes held back (each write
/// applies on arrival, its answer is late), waits until the store holds all it was fed,
/// then kills it (SIGKILL): its flush's requests are in flight, applied, and not one of
/// their answers was heard, so its journal holds their intents and no outcome.
fn kill_child_with_replies_pending(
    contact: &str,
    dir: &Path,
    feed: i64,
    server: &cqlsim::Server,
    expected: &BTreeMap<String, i64>,
) {
    kill_child_when(contact, dir, &feed.to_string(), server, || {
        expected
            .iter()
            .all(|(key, sum)| cell(server, "wk.c", "c", &format!("k = '{key}'")) == Some(*sum))
    });
}

/// Runs the child (`spec`: what follows the state directory in [`CHILD_ENV`]) with every
/// reply of the store to its writes held back, until `ready`, then kills it (SIGKILL).
fn kill_child_when(
    contact: &str,
    dir: &Path,
    spec: &str,
    server: &cqlsim::Server,
    ready: impl Fn() -> bool,
) {
    server.set_faults(vec![
        cqlsim::FaultRule::new(cqlsim::FaultKind::Delay)
            .table("wk.c")
            .duration(Duration::from_secs(600)),
    ]);
    let mut child = spawn_child(contact, dir, spec, None);
    let started = std::time::Instant::now();
    while !ready() {
        if started.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("the child's writes never reached the store");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    server.clear_faults();
}

/// The child process, feeding `feed` increments into `dir`, stopping at `crash_point`.
fn spawn_child(
    contact: &str,
    dir: &Path,
    spec: &str,
    crash_point: Option<&str>,
) -> std::process::Child {
    let mut command = Command::new(std::env::current_exe().expect("test binary"));
    command
        .args([
            "--ignored",
            "--exact",
            "wrapper_crash::wrapper_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, format!("{contact}|{}|{spec}", dir.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    match crash_point {
        Some(point) => command.env("COUNTERSINK_CRASH_POINT", point),
        None => command.env_remove("COUNTERSINK_CRASH_POINT"),
    };
    command.spawn().expect("child")
}

/// Runs the child until it reports `crash_point`, then kills it (SIGKILL).
fn run_child_until(contact: &str, dir: &Path, feed: i64, crash_point: &str) {
    let mut child = spawn_child(contact, dir, &feed.to_string(), Some(crash_point));
    wait_for_crash_point(&mut child, crash_point);
}

/// Waits until `child` reports `crash_point`, then kills it (SIGKILL).
fn wait_for_crash_point(child: &mut std::process::Child, crash_point: &str) {
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    // `NAME:N` stops at the Nth time; the child names the step alone.
    let name = crash_point.split(':').next().unwrap_or(crash_point);
    let wanted = format!("crash point {name} reached");
    let mut seen = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(line) if line.contains(&wanted) => break,
            Ok(line) => seen.push(line),
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "the child never reached {crash_point}:\n{}",
                    seen.join("\n")
                );
            }
        }
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
}

fn records(path: &Path) -> Vec<WriteRecord> {
    crate::wrapper::records(path)
}

/// The kind of a record's error.
fn error_kind(record: &WriteRecord) -> Option<&str> {
    record.error.as_ref().map(|e| e.kind.as_str())
}

/// What `countersink outcomes` reads from `dir` for the wrapper: (outcome, source) →
/// key → delta sum of column `c`.
fn outcomes(dir: &Path) -> BTreeMap<(String, String), BTreeMap<String, i64>> {
    let mut read: BTreeMap<(String, String), BTreeMap<String, i64>> = BTreeMap::new();
    countersink::ops::outcomes::scan(dir, |source, record| {
        assert_eq!(record.family, "wrapper");
        let outcome = countersink::ops::outcomes::outcome_label(record.outcome);
        let key = record.key["k"].trim_matches('\'').to_owned();
        let key = match key.strip_prefix("0x") {
            // Read from the journal: the key's bytes in hex.
            Some(hex) => {
                let bytes = countersink::wrapper::records::unhex(hex).expect("hex");
                String::from_utf8(bytes).expect("utf-8")
            }
            None => key,
        };
        *read
            .entry((outcome.to_owned(), source.as_str().to_owned()))
            .or_default()
            .entry(key)
            .or_default() += record.deltas.get("c").copied().unwrap_or(0);
    })
    .expect("scan");
    read
}

/// The store's value of every key of `expected`, checked.
fn assert_store(server: &cqlsim::Server, expected: &BTreeMap<String, i64>, what: &str) {
    for (key, sum) in expected {
        let value = cell(server, "wk.c", "c", &format!("k = '{key}'"));
        assert_eq!(value, Some(*sum), "{what}: {key}");
    }
}

/// Killed after its requests reached the store and before any answer came back (every
/// answer is journaled as it arrives, so only requests still in flight lack one): the
/// next start logs every row as unknown (`in_flight_at_crash`, exact deltas) and sends
/// none of them again; a third start adds no record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrapper_killed_with_a_flush_in_flight_logs_it_unknown_and_never_resends_it() {
    let store = launch(StoreOptions::cqlsim_only(
        "kills a wrapper and counts its writes",
    ))
    .await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let dir = tempfile::tempdir().unwrap();
    let contact = store.contact_point();
    let expected = fed(100);

    kill_child_with_replies_pending(&contact, dir.path(), 100, server, &expected);
    assert_store(server, &expected, "applied before the kill");
    let writes = server.stats().table("wk", "c").write_requests;
    assert!(writes > 0);
    // `countersink outcomes` reads the killed flush from the journal as recovery will
    // log it.
    let before = outcomes(dir.path());
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(before[&("unknown".into(), "journal".into())], expected);

    let session = wrap(&contact, dir.path()).await;
    let recovery = session.recovery().clone();
    assert_eq!(recovery.flushes, 1, "{recovery:?}");
    assert_eq!(recovery.unknown_rows, 10, "{recovery:?}");
    let unknown_path = session.log_path(OutcomeLog::Unknown).await;
    let logged = records(&unknown_path);
    let mut by_key: BTreeMap<String, i64> = BTreeMap::new();
    for record in &logged {
        assert_eq!(error_kind(record), Some("in_flight_at_crash"));
        *by_key
            .entry(record.key["k"].trim_matches('\'').to_owned())
            .or_default() += record.deltas["c"];
    }
    assert_eq!(by_key, expected, "each in-flight row once, with its deltas");
    let after = outcomes(dir.path());
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(after[&("unknown".into(), "log".into())], expected);
    let report = session.flush_now().await;
    assert_eq!((report.rows, report.replayed_rows), (0, 0), "{report:?}");
    session.shutdown().await;
    assert_store(server, &expected, "after the restart");
    assert_eq!(
        server.stats().table("wk", "c").write_requests,
        writes,
        "nothing sent again"
    );

    let session = wrap(&contact, dir.path()).await;
    assert_eq!(session.recovery().flushes, 0);
    session.shutdown().await;
    assert_eq!(
        records(&unknown_path).len(),
        logged.len(),
        "no record twice"
    );
    store.shutdown().await;
}

/// A large flush killed early: 2,000 requests (one key each), 2 in flight, every answer
/// held back. Its requests start in windows of 256, each window's bound durable before
/// its first request starts, so the next start logs as unknown only the requests of the
/// first window (the two that applied among them), and spills the rest, which certainly
/// never left the process, and replays them: each row is in the store or in the unknown
/// log, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_early_in_a_large_wrapper_flush_logs_unknown_only_what_may_have_started() {
    let store = launch(StoreOptions::cqlsim_only(
        "kills a wrapper with its answers held back",
    ))
    .await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let dir = tempfile::tempdir().unwrap();
    let contact = store.contact_point();
    let (feed, keys) = (2000, 2000);
    let expected: BTreeMap<String, i64> = (0..feed).map(|i| (format!("k{i}"), i + 1)).collect();
    kill_child_when(
        &contact,
        dir.path(),
        &format!("{feed}|{keys}|2"),
        server,
        || server.stats().table("wk", "c").write_requests >= 2,
    );
    let applied_at_kill: BTreeMap<String, i64> = expected
        .keys()
        .filter_map(|k| Some((k.clone(), cell(server, "wk.c", "c", &format!("k = '{k}'"))?)))
        .collect();
    assert_eq!(applied_at_kill.len(), 2, "two requests were in flight");

    let session = wrap(&contact, dir.path()).await;
    let recovery = session.recovery().clone();
    assert_eq!(recovery.flushes, 1, "{recovery:?}");
    assert!(
        recovery.unknown_rows <= 256,
        "at most one window is unknown: {recovery:?}"
    );
    assert_eq!(
        recovery.unknown_rows + recovery.spilled_rows,
        2000,
        "every row has one home: {recovery:?}"
    );
    let unknown: BTreeMap<String, i64> = records(&session.log_path(OutcomeLog::Unknown).await)
        .into_iter()
        .map(|r| (r.key["k"].trim_matches('\'').to_owned(), r.deltas["c"]))
        .collect();
    for key in applied_at_kill.keys() {
        assert!(unknown.contains_key(key), "{key} applied: logged unknown");
    }
    let report = session.flush_now().await;
    assert_eq!(report.replayed_rows, recovery.spilled_rows, "{report:?}");
    session.shutdown().await;
    for (key, fed) in &expected {
        let stored = cell(server, "wk.c", "c", &format!("k = '{key}'")).unwrap_or(0);
        let logged = unknown.get(key).copied().unwrap_or(0);
        if applied_at_kill.contains_key(key) {
            assert_eq!(
                (stored, logged),
                (*fed, *fed),
                "{key}: applied once, logged"
            );
        } else if logged > 0 {
            assert_eq!((stored, logged), (0, *fed), "{key}: never sent, logged");
        } else {
            assert_eq!(stored, *fed, "{key}: spilled and replayed once");
        }
    }
    store.shutdown().await;
}

/// Rows an earlier run spilled: key → delta.
fn five_spilled_rows() -> BTreeMap<String, i64> {
    (0..5).map(|i| (format!("s{i}"), 10 + i)).collect()
}

/// The spill file's lines holding `rows` of `wk.c`, as an earlier run writes them.
fn spill_lines(rows: &BTreeMap<String, i64>) -> String {
    rows.iter()
        .enumerate()
        .map(|(i, (key, delta))| {
            let record = serde_json::json!({
                "time": "2026-01-01T00:00:00Z", "writer": "earlier", "incarnation": 1,
                "flush_seq": 9, "request_id": format!("earlier/1/w9/{i}"), "row": 0,
                "outcome": "spilled", "table": "wk.c", "key": {"k": format!("'{key}'")},
                "key_hex": [hex(key.as_bytes())], "deltas": {"c": delta},
            });
            format!("{record}\n")
        })
        .collect()
}

/// One line of an earlier version's own spill file (its record type, `unsent`): `key`'s
/// row of `table`, with `delta` in column `c`.
fn unsent_line(table: &str, key: &str, delta: i64) -> String {
    let record = serde_json::json!({
        "time": "2026-01-01T00:00:00Z", "request_id": format!("earlier/1/w3/{key}"),
        "row": 0, "outcome": "unsent", "table": table, "key": {"k": format!("'{key}'")},
        "key_hex": [hex(key.as_bytes())], "deltas": {"c": delta},
    });
    format!("{record}\n")
}

/// A spill larger than a flush's chunk goes out in groups of its own, each consuming the
/// spill offset past exactly its rows: killed after the first group's cursor (two of the
/// five rows applied), the next start replays the other three, and the store holds each
/// row once. (Loaded into the buffer and drained in chunks, the offset would have passed
/// rows still only in memory.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_larger_than_a_chunk_killed_after_its_first_group_loses_nothing() {
    let store = launch(StoreOptions::cqlsim_only(
        "kills a wrapper between two groups of a replay",
    ))
    .await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let contact = store.contact_point();
    let spilled = five_spilled_rows();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(SPILL_FILE), spill_lines(&spilled)).unwrap();
    // A quarter of 2,900 bytes holds two of these rows: a replay group each.
    let mut child = spawn_child(
        &contact,
        dir.path(),
        "0|10|-|2900",
        Some("replay_cursor_committed"),
    );
    wait_for_crash_point(&mut child, "replay_cursor_committed");
    let applied: Vec<String> = spilled
        .keys()
        .filter(|k| cell(server, "wk.c", "c", &format!("k = '{k}'")).is_some())
        .cloned()
        .collect();
    assert_eq!(applied.len(), 2, "the first group: {applied:?}");
    let session = wrap(&contact, dir.path()).await;
    let report = session.flush_now().await;
    assert_eq!(report.replayed_rows, 3, "{report:?}");
    session.shutdown().await;
    assert_store(server, &spilled, "each spilled row once");
    store.shutdown().await;
}

/// A flush that replayed and applied every spilled row, killed between the spill
/// cursor's write and the end of the flush in the journal: the next start replays
/// nothing (the cursor, or the journal's still open group, says the rows were consumed)
/// and the store holds each row once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_killed_as_its_flush_ends_is_not_replayed_again() {
    let store = launch(StoreOptions::cqlsim_only(
        "kills a wrapper as a replay ends",
    ))
    .await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let contact = store.contact_point();
    let spilled = five_spilled_rows();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(SPILL_FILE), spill_lines(&spilled)).unwrap();
    run_child_until(&contact, dir.path(), 0, "replay_cursor_committed");
    assert_store(server, &spilled, "applied by the killed flush");
    let session = wrap(&contact, dir.path()).await;
    let recovery = session.recovery().clone();
    let report = session.flush_now().await;
    session.shutdown().await;
    assert_store(server, &spilled, "not replayed a second time");
    assert_eq!(report.replayed_rows, 0, "{report:?}, {recovery:?}");
    store.shutdown().await;
}

/// Spilled rows of an earlier run, loaded by a flush that is killed after its journal
/// group commit (before sending): the next start logs them as unknown and does not
/// replay them again. Killed before that group commit instead, they are replayed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spilled_rows_a_killed_flush_took_are_not_replayed_twice() {
    let store = launch(StoreOptions::cqlsim_only("kills a wrapper during replay")).await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let contact = store.contact_point();
    let spilled = five_spilled_rows();
    let spill_lines = spill_lines(&spilled);

    // Killed after the group commit that took them: unknown, never replayed again.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(SPILL_FILE), &spill_lines).unwrap();
    let read = outcomes(dir.path());
    assert_eq!(read.len(), 1, "{read:?}");
    assert_eq!(read[&("spilled".into(), "spill".into())], spilled);
    run_child_until(&contact, dir.path(), 0, "wrapper_journal_committed");
    let read = outcomes(dir.path());
    assert_eq!(read.len(), 1, "the journal's group owns them: {read:?}");
    assert_eq!(read[&("unknown".into(), "journal".into())], spilled);
    assert_eq!(server.stats().table("wk", "c").write_requests, 0);
    let session = wrap(&contact, dir.path()).await;
    assert_eq!(
        session.recovery().unknown_rows,
        5,
        "{:?}",
        session.recovery()
    );
    let report = session.flush_now().await;
    assert_eq!(report.replayed_rows, 0, "{report:?}");
    session.shutdown().await;
    assert_eq!(server.stats().table("wk", "c").write_requests, 0);

    // Killed before the group commit (at a step before it is written: the spill was
    // loaded, nothing sent): replayed once by the next start.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(SPILL_FILE), &spill_lines).unwrap();
    run_child_until(&contact, dir.path(), 0, "wrapper_replay_loaded");
    let session = wrap(&contact, dir.path()).await;
    assert_eq!(session.recovery().flushes, 0, "{:?}", session.recovery());
    let report = session.flush_now().await;
    assert_eq!(report.replayed_rows, 5, "{report:?}");
    assert_eq!(report.applied, report.writes, "{report:?}");
    session.shutdown().await;
    assert_store(server, &spilled, "replayed once");
    let session = wrap(&contact, dir.path()).await;
    assert_eq!(session.flush_now().await.replayed_rows, 0);
    session.shutdown().await;
    assert_store(server, &spilled, "not twice");
    store.shutdown().await;
}

/// Recovery itself killed after it appended its records and before it ended the flush:
/// the next start runs it again and appends nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_killed_before_it_ends_runs_again_without_duplicates() {
    let store = launch(StoreOptions::cqlsim_only("kills a wrapper twice")).await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let dir = tempfile::tempdir().unwrap();
    let contact = store.contact_point();
    let expected = fed(40);
    kill_child_with_replies_pending(&contact, dir.path(), 40, server, &expected);
    // The child's start recovers the flush and is killed before ending it.
    run_child_until(&contact, dir.path(), 0, "wrapper_recovery_logged");
    let unknown = dir.path().join(OutcomeLog::Unknown.file_name());
    assert_eq!(records(&unknown).len(), 10, "logged by the killed recovery");
    let session = wrap(&contact, dir.path()).await;
    let recovery = session.recovery().clone();
    assert_eq!(
        (recovery.flushes, recovery.unknown_rows),
        (1, 0),
        "{recovery:?}"
    );
    session.shutdown().await;
    let logged = records(&unknown);
    assert_eq!(logged.len(), 10, "no record twice");
    let keys: std::collections::BTreeSet<String> =
        logged.iter().map(|r| r.key["k"].clone()).collect();
    assert_eq!(keys.len(), 10);
    assert_store(server, &expected, "sent once");
    store.shutdown().await;
}

/// Two open groups (a flush whose end could not be written, then a later flush's group
/// after it) and a recovery killed while it finishes the second: ending the journal after
/// the first group started it over, so the next start found no group and the second's
/// rows in flight were never logged. The journal is now ended once, after the last group:
/// the next start finishes both, each row logged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_killed_in_its_second_open_group_still_finishes_it() {
    let store = launch(StoreOptions::cqlsim_only("kills a wrapper twice")).await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let dir = tempfile::tempdir().unwrap();
    let contact = store.contact_point();
    let expected = fed(40);
    kill_child_with_replies_pending(&contact, dir.path(), 40, server, &expected);
    // A second open group after the first: the same rows under a later flush's ids, as a
    // flush after one whose end failed would have committed them.
    {
        let config = config(dir.path());
        let mut state = countersink::state::StateDir::open(&config.state).unwrap();
        let (groups, _) = state.take_wrapper_groups();
        assert_eq!(groups.len(), 1);
        let wrapper = groups[0].wrapper.as_ref().unwrap();
        let intents: Vec<_> = wrapper
            .intents
            .iter()
            .map(|intent| {
                let rows = intent
                    .rows
                    .iter()
                    .map(|row| (row.key.as_slice(), row.deltas.as_slice()))
                    .collect();
                (intent.table, rows)
            })
            .collect();
        let flush = state.flush_id(groups[0].flush.flush_seq + 1);
        state
            .wrapper_journal_begin(&flush, "t", None, &wrapper.tables, &intents)
            .unwrap();
        // Not ended: the process stops here.
    }
    let unknown = dir.path().join(OutcomeLog::Unknown.file_name());
    run_child_until(&contact, dir.path(), 0, "wrapper_recovery_before_logs:2");
    assert_eq!(
        records(&unknown).len(),
        10,
        "the killed recovery logged the first group's rows"
    );
    let session = wrap(&contact, dir.path()).await;
    let recovery = session.recovery().clone();
    assert_eq!(recovery.flushes, 2, "{recovery:?}");
    session.shutdown().await;
    let logged = records(&unknown);
    let ids: std::collections::BTreeSet<(String, u16)> = logged
        .iter()
        .map(|r| (r.request_id.clone(), r.row))
        .collect();
    assert_eq!(logged.len(), 20, "both groups' rows, once each: {logged:?}");
    assert_eq!(ids.len(), 20);
    assert_store(server, &expected, "nothing sent again");
    store.shutdown().await;
}

/// Killed after the flush's outcomes were recorded (every other write timed out after
/// applying), at its log step: before the appends (`wrapper_logs_at`) or after them
/// (`wrapper_logged`). The next start logs each unknown row exactly once, logs no applied
/// row, and sends nothing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrapper_killed_at_its_log_steps_logs_each_unknown_row_once() {
    // `refused_logs_at`: killed after the appends too, but the journal had refused the
    // record of the logs' sizes (its frame is cut from the file below): the flush logged
    // all the same, and recovery must find those records without the sizes.
    for crash_point in ["wrapper_logs_at", "wrapper_logged", "refused_logs_at"] {
        let store = launch(StoreOptions::cqlsim_only("injects write timeouts")).await;
        let server = store.sim();
        server.execute_script(None, SCHEMA).expect("schema");
        let mut rule = cqlsim::FaultRule::new(cqlsim::FaultKind::WriteTimeout).every(2);
        rule.applied = true;
        server.add_fault(rule);
        let dir = tempfile::tempdir().unwrap();
        let contact = store.contact_point();
        let expected = fed(100);
        if crash_point == "refused_logs_at" {
            run_child_until(&contact, dir.path(), 100, "wrapper_logged");
            cut_last_logs_at_record(&dir.path().join("journal.wal"));
        } else {
            run_child_until(&contact, dir.path(), 100, crash_point);
        }
        server.clear_faults();
        assert_store(server, &expected, crash_point);
        let writes = server.stats().table("wk", "c").write_requests;
        let unknown = dir.path().join(OutcomeLog::Unknown.file_name());
        let before = records(&unknown).len();

        let session = wrap(&contact, dir.path()).await;
        let recovery = session.recovery().clone();
        session.shutdown().await;
        let logged = records(&unknown);
        let ids: std::collections::BTreeSet<(String, u16)> = logged
            .iter()
            .map(|r| (r.request_id.clone(), r.row))
            .collect();
        assert_eq!(ids.len(), logged.len(), "{crash_point}: no record twice");
        assert!(!logged.is_empty(), "{crash_point}: the fault fired");
        assert!(
            logged.len() < 10,
            "{crash_point}: applied rows are not logged"
        );
        assert!(
            logged
                .iter()
                .all(|r| error_kind(r) == Some("write_timeout")),
            "{crash_point}: the recorded outcome, not in_flight_at_crash"
        );
        let (by_recovery, by_flush) = match crash_point {
            "wrapper_logs_at" => (logged.len(), 0),
            _ => (0, logged.len()),
        };
        assert_eq!(before, by_flush, "{crash_point}");
        assert_eq!(
            recovery.unknown_rows as usize, by_recovery,
            "{crash_point}: {recovery:?}"
        );
        assert_store(server, &expected, crash_point);
        assert_eq!(
            server.stats().table("wk", "c").write_requests,
            writes,
            "{crash_point}: nothing sent again"
        );
        store.shutdown().await;
    }
}

/// Cuts the journal at its last record of a wrapper flush's outcome log sizes, as if the
/// journal had refused it: frames are `[len u32][crc32c u32][payload]`, that record's
/// payload its tag (10) and three `u64` sizes; a zeroed frame ends the journal there.
fn cut_last_logs_at_record(journal: &Path) {
    let mut bytes = std::fs::read(journal).unwrap();
    let (mut pos, mut last) = (0, None);
    while let Some(header) = bytes.get(pos..pos + 8) {
        let len = u32::from_le_bytes(header[..4].try_into().unwrap()) as usize;
        let crc = u32::from_le_bytes(header[4..].try_into().unwrap());
        let Some(payload) = bytes.get(pos + 8..pos + 8 + len) else {
            break;
        };
        if len == 0 || crc32c::crc32c(payload) != crc {
            break;
        }
        if len == 25 && payload[0] == 10 {
            last = Some(pos);
        }
        pos += 8 + len;
    }
    let at = last.expect("the flush recorded its logs' sizes");
    bytes[at..at + 8 + 25].fill(0);
    std::fs::write(journal, bytes).unwrap();
}

/// A spilled row whose table no longer takes it (here: dropped) is recorded in
/// `rejected.jsonl` as `not_replayable`, once; the other rows are replayed. The spill is
/// in the record type of earlier versions (the wrapper's own): an upgrade replays it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spilled_row_that_no_longer_maps_is_recorded_rejected_once() {
    let store = launch(StoreOptions::cqlsim_only("replays into a changed schema")).await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let contact = store.contact_point();
    let dir = tempfile::tempdir().unwrap();
    let lines = unsent_line("wk.c", "kept", 7) + &unsent_line("wk.gone", "lost", 9);
    std::fs::write(dir.path().join(SPILL_FILE), lines).unwrap();
    let rejected = dir.path().join(OutcomeLog::Rejected.file_name());
    for start in 0..2 {
        let session = wrap(&contact, dir.path()).await;
        let report = session.flush_now().await;
        assert_eq!(report.replayed_rows, 1 - start, "{report:?}");
        // The row that no longer maps, behind the one sent, is a chunk of its own: the
        // next round's.
        session.flush_now().await;
        session.shutdown().await;
        let recorded = records(&rejected);
        assert_eq!(recorded.len(), 1, "start {start}: once");
        assert_eq!(recorded[0].table, "wk.gone");
        assert_eq!(error_kind(&recorded[0]), Some("not_replayable"));
        assert_eq!(
            recorded[0].writer, "earlier",
            "read from the old request id"
        );
        assert_eq!(recorded[0].deltas["c"], 9);
    }
    assert_eq!(cell(server, "wk.c", "c", "k = 'kept'"), Some(7));
    store.shutdown().await;
}

/// Rows that no longer map are held until their chunk's read ends: a run of them is read
/// within the chunk's room (a quarter of `max_pending_bytes`, each charged as the other
/// replays charge a refused record), not the whole spill at once; later rounds take the
/// rest, each row logged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_of_rows_that_no_longer_map_is_read_a_chunk_at_a_time() {
    let store = launch(StoreOptions::cqlsim_only("replays a dropped table's rows")).await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let contact = store.contact_point();
    let lines: String = (0..5)
        .map(|i| unsent_line("wk.gone", &format!("lost{i}"), 1))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(SPILL_FILE), lines).unwrap();
    let rejected = dir.path().join(OutcomeLog::Rejected.file_name());
    // Chunks of 1,024 bytes: two refused records (512 each) a round.
    let session = wrap_with(&contact, dir.path(), None, Some(4096)).await;
    session.flush_now().await;
    assert_eq!(records(&rejected).len(), 2, "one chunk's room of them");
    for _ in 0..3 {
        session.flush_now().await;
    }
    session.shutdown().await;
    let mut keys: Vec<String> = records(&rejected)
        .iter()
        .map(|r| r.key["k"].clone())
        .collect();
    keys.sort();
    let expected: Vec<String> = (0..5).map(|i| format!("'lost{i}'")).collect();
    assert_eq!(keys, expected, "each once");
    store.shutdown().await;
}

/// A spilled row that no longer maps is logged in `rejected.jsonl` as it is read: it never
/// shares a chunk with rows to send, whose cursor is durable only from their group
/// commit on, and its own chunk's cursor is written right after its line. A child killed
/// after it read a chunk of rows, before that commit, or after it logged the refusal,
/// before its cursor: the next start logs the row once (finding it logged in the second
/// case), whether it lies before or between rows to send, and sends every other row once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_that_no_longer_maps_beside_rows_is_recorded_once_after_a_kill() {
    let store = launch(StoreOptions::cqlsim_only(
        "kills a wrapper beside a refusal",
    ))
    .await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let contact = store.contact_point();
    // Per layout: its rows, `wk.gone` (dropped) refused at replay.
    let layouts: [&[(&str, &str)]; 2] = [
        &[("wk.c", "a1"), ("wk.gone", "a2"), ("wk.c", "a3")],
        &[("wk.gone", "b1"), ("wk.c", "b2")],
    ];
    // Killed after a chunk of rows was read, before its group commit; or after the
    // refusals were logged, before their cursor was written (their next read finds them
    // in the log).
    let points = ["wrapper_replay_loaded", "wrapper_refusals_logged"];
    let runs = layouts.into_iter().flat_map(|l| points.map(|p| (l, p)));
    for (run, (layout, point)) in runs.enumerate() {
        // Keys of their own per run: the store is the same.
        let layout: Vec<(&str, String)> = layout
            .iter()
            .map(|(table, key)| (*table, format!("{key}.{run}")))
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let lines: String = layout
            .iter()
            .map(|(table, key)| unsent_line(table, key, 7))
            .collect();
        std::fs::write(dir.path().join(SPILL_FILE), lines).unwrap();
        run_child_until(&contact, dir.path(), 0, point);
        let session = wrap(&contact, dir.path()).await;
        // A flush replays one chunk of rows, the refusals before it with it.
        for _ in 0..layout.len() {
            session.flush_now().await;
        }
        session.shutdown().await;
        let rejected = records(&dir.path().join(OutcomeLog::Rejected.file_name()));
        assert_eq!(rejected.len(), 1, "{layout:?}, {point}: once: {rejected:?}");
        assert_eq!(rejected[0].table, "wk.gone");
        assert_eq!(error_kind(&rejected[0]), Some("not_replayable"));
        for (table, key) in layout.iter().filter(|(table, _)| *table == "wk.c") {
            let filter = format!("k = '{key}'");
            assert_eq!(
                cell(server, table, "c", &filter),
                Some(7),
                "{key}, {point}: sent once"
            );
        }
    }
    store.shutdown().await;
}
