//! `countersink reconcile`: an outside writer is the one unexplained key (exit 3) and
//! `--repair` makes a closed day equal its ledger, equal unknown requests stay ambiguous
//! and distinct ones are resolved, on any store (the real node too; unknown writes come
//! from a fault proxy in front of it); against cqlsim's injected faults, every `resolved`
//! verdict matches what its request log says it applied, and a repair undoes unknown
//! writes that did not apply.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use countersink::bucket::{Day, format_date};
use countersink::config::Config;
use countersink::ops::reconcile::{self, Options, Report, verdict::Status};
use cqlsim::{FaultKind, FaultRule};

use crate::common::{
    FaultProxy, Store, Swallow, T0, Writer, config, day_and_minute, run_cli, start_cqlsim,
    start_store,
};

/// The opcode of a successful answer (CQL v4 RESULT).
const RESULT: u8 = 0x08;

/// 2026-11-30 22:58Z: a day long closed when the tests run.
const AT: i64 = T0 - 3600;

pub(crate) fn exact_config(state: &std::path::Path) -> Config {
    let mut config = config(state);
    for family in &mut config.families {
        family.exact = true;
    }
    config.store.request_timeout = Duration::from_millis(300);
    config.exact.retry_backoff_min = Duration::from_millis(5);
    config.exact.retry_backoff_max = Duration::from_millis(20);
    config
}

/// Writes the annotated example configuration, seed 000's `views` family made exact, as
/// a file for the binary against `store`.
fn write_exact_config(store: &Store, file: &std::path::Path) {
    let mut example: toml::Table =
        toml::from_str(include_str!("../../examples/countersink.toml")).unwrap();
    example["family"][0]
        .as_table_mut()
        .unwrap()
        .insert("exact".into(), true.into());
    std::fs::write(file, store.config_file(&toml::to_string(&example).unwrap())).unwrap();
}

pub(crate) fn day() -> Day {
    Day((AT / 86_400) as u32)
}

async fn settle(writer: &mut Writer) {
    for _ in 0..40 {
        if writer.engine.aggregator().pending_rows() == 0
            && writer.ledger.exact_ledger().held_rows == 0
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        writer.flusher.flush_now().await;
    }
    panic!("still pending");
}

async fn run_reconcile(writer: &Writer, config: &Config) -> Report {
    let families = countersink::family::Families::from_config(config).unwrap();
    let family = families.by_name("views").unwrap();
    let options = Options {
        day: day(),
        tags: Vec::new(),
        threshold: 0.0,
        now_unix_secs: countersink::bucket::unix_secs(std::time::SystemTime::now()),
        concurrency: 8,
        max_listed: reconcile::MAX_LISTED,
        slice: None,
    };
    reconcile::reconcile(&writer.session, config, family, &options, &|_| {})
        .await
        .expect("reconcile")
}

/// Issue test 3: with no fault, every key is ok and reconcile exits 0; an outside writer
/// adds +7 to one minute row: exactly one unexplained key, with drift 7, and exit code 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outside_writer_is_the_one_unexplained_key_and_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = exact_config(dir.path());
    let store = start_store(&mut config).await;
    let mut writer = Writer::start(&config).await;
    for i in 0..300_i64 {
        let key = format!("p{}", i % 30);
        writer.incr(
            "page.views",
            &[("page_id", key.as_str())],
            1 + i % 4,
            AT + i % 120,
        );
    }
    writer.flusher.flush_now().await;
    settle(&mut writer).await;
    let file = dir.path().join("countersink.toml");
    write_exact_config(&store, &file);
    let day_text = format_date(day().date());
    let args = |format: &str| {
        vec![
            "reconcile".to_owned(),
            "--config".into(),
            file.display().to_string(),
            "--day".into(),
            day_text.clone(),
            "--format".into(),
            format.into(),
        ]
    };
    let out = run_cli(args("text"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("keys 30 "), "{text}");
    assert!(text.contains("ok=60"), "{text}");

    let (date, minute) = day_and_minute(AT);
    store
        .execute(&format!(
            "UPDATE {} SET views = views + 7 WHERE page_id = 'p3' AND day = '{date}' AND minute = {minute}",
            config.families[0].minute_table
        ))
        .await;
    let out = run_cli(args("json"));
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reports: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let keys = reports[0]["keys"].as_array().unwrap();
    let unexplained: Vec<_> = keys.iter().filter(|k| k["status"] != "ok").collect();
    assert_eq!(unexplained.len(), 1, "{unexplained:?}");
    assert_eq!(unexplained[0]["status"], "unexplained");
    assert_eq!(unexplained[0]["key"], serde_json::json!(["p3"]));
    assert_eq!(unexplained[0]["granularity"], "minute");
    assert_eq!(unexplained[0]["drift"]["views"], 7);
    assert_eq!(reports[0]["summary"]["drift_unexplained"], 7);
    // A threshold above 7 / exact accepts it.
    let mut lenient = args("text");
    lenient.extend(["--threshold".to_owned(), "1.0".to_owned()]);
    assert_eq!(run_cli(lenient).status.code(), Some(0));
    store.shutdown().await;
}

/// Two writers with one configured writer id (two hosts, or one reused with a fresh
/// state directory) count the same key and minute in their first flush: the same writer
/// id, incarnation 1, flush 1. Each start's nonce is in its ledger rows' writer (and in
/// its request ids), so neither overwrites the other's: the ledger holds both deltas and
/// every key reconciles `ok`. (Without it the second row replaced the first, and the
/// counter stood above its ledger: `unexplained`, and a `--repair` would have subtracted
/// real counts.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_writers_sharing_a_writer_id_keep_both_ledger_rows() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut config_a = exact_config(dir_a.path());
    config_a.state.writer_id = Some("shared".to_owned());
    let store = start_store(&mut config_a).await;
    let mut config_b = config_a.clone();
    config_b.state.dir = dir_b.path().to_owned();
    let mut writer_a = Writer::start(&config_a).await;
    let mut writer_b = Writer::start(&config_b).await;
    for (writer, delta) in [(&mut writer_a, 2), (&mut writer_b, 5)] {
        for key in ["p1", "p2"] {
            writer.incr("page.views", &[("page_id", key)], delta, AT);
        }
        writer.flusher.flush_now().await;
        settle(writer).await;
    }
    let report = run_reconcile(&writer_a, &config_a).await;
    assert!(
        report.keys.is_empty(),
        "every key and granularity ok: {:?}",
        report.keys
    );
    assert_eq!(report.summary.keys, 2, "{:?}", report.summary);
    assert_eq!(report.summary.ledger_rows, 4, "two writers x two keys");
    assert_eq!(report.summary.exact_total, 14, "2 + 5 for each key");
    store.shutdown().await;
}

/// Issue 26 item 2: writers A and B count the same keys of a closed day; the store
/// refuses B's counter writes (Unavailable: not applied) and its final flush spills
/// them, their ledger rows confirmed. A `reconcile --repair` from a machine without B's
/// state directory sees B's `owed` mark in the outcomes table: the day is still open and
/// nothing is corrected. B restarts and replays: every counter equals what was fed, the
/// mark turns `replayed`, the day closes, and a repair finds nothing to correct. (Without
/// the mark the repair raised the counters to the ledger, and B's replay then counted
/// its rows a second time: counter = ledger + B's deltas.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_waits_for_a_writer_whose_spill_still_owes_the_day() {
    const MINUTE_TABLE: &str = "metrics.views_by_minute";
    const DAY_TABLE: &str = "metrics.views_by_day";
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut config_a = exact_config(dir_a.path());
    let store = start_cqlsim(&mut config_a, "injects Unavailable on the counter tables").await;
    let mut config_b = config_a.clone();
    config_b.state.dir = dir_b.path().to_owned();
    let pages = ["p1", "p2", "p3", "p4"];
    let mut writer_a = Writer::start(&config_a).await;
    for page in pages {
        writer_a.incr("page.views", &[("page_id", page)], 3, AT);
    }
    writer_a.flusher.flush_now().await;
    settle(&mut writer_a).await;
    let writer_b = Writer::start(&config_b).await;
    store.sim().set_faults(vec![
        FaultRule::new(FaultKind::Unavailable).table(&config_a.families[0].minute_table),
        FaultRule::new(FaultKind::Unavailable).table(&config_a.families[0].day_table),
    ]);
    for page in pages {
        writer_b.incr("page.views", &[("page_id", page)], 5, AT + 60);
    }
    writer_b.flusher.finish().await;
    store.sim().clear_faults();
    assert_eq!(
        crate::common::spilled_records(dir_b.path()).len(),
        8,
        "B's minute and day rows wait in its spill"
    );
    let fed = 4 * (3 + 5);
    assert_eq!(store.table_sum(MINUTE_TABLE, "views").await, 4 * 3);

    let file = dir_a.path().join("countersink.toml");
    write_exact_config(&store, &file);
    let repair = || {
        run_cli([
            "reconcile".to_owned(),
            "--config".into(),
            file.display().to_string(),
            "--day".into(),
            format_date(day().date()),
            "--repair".into(),
        ])
    };
    let refused = repair();
    let stderr = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("not closed yet") && stderr.contains("owed"),
        "{stderr}"
    );
    assert_eq!(
        store.table_sum(MINUTE_TABLE, "views").await,
        4 * 3,
        "nothing corrected"
    );

    let mut writer_b = Writer::start(&config_b).await;
    let owed = writer_b.ledger.exact_ledger();
    assert_eq!(
        (owed.owed_days, owed.owed_marks_queued),
        (1, 1),
        "its start asserts the day it owes again"
    );
    writer_b.flusher.flush_now().await;
    settle(&mut writer_b).await;
    writer_b.flusher.flush_now().await;
    let owed = writer_b.ledger.exact_ledger();
    assert_eq!((owed.owed_days, owed.owed_marks_queued), (0, 0));
    assert_eq!(store.table_sum(MINUTE_TABLE, "views").await, fed);
    assert_eq!(store.table_sum(DAY_TABLE, "views").await, fed);
    let report = run_reconcile(&writer_a, &config_a).await;
    assert!(report.closed, "{:?}", report.open_because);
    assert!(report.owed_by.is_empty(), "{:?}", report.owed_by);
    assert!(report.keys.is_empty(), "every key ok: {:?}", report.keys);
    assert_eq!(report.summary.exact_total, fed);

    let repaired = repair();
    let stdout = String::from_utf8_lossy(&repaired.stdout).into_owned();
    assert_eq!(
        repaired.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&repaired.stderr)
    );
    assert!(!stdout.contains("repair "), "nothing to correct: {stdout}");
    assert_eq!(store.table_sum(MINUTE_TABLE, "views").await, fed);
    assert_eq!(store.table_sum(DAY_TABLE, "views").await, fed);
    store.shutdown().await;
}

/// Issue item 5: a key whose ledger sums beyond i64 (two rows of `i64::MAX`) gets no
/// closed row, not a clamped `i64::MAX`: `reconcile --close` names it and exits 3, its
/// exact value still reads the ledger's true sum, and the other key is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_total_beyond_i64_is_refused_not_clamped() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = exact_config(dir.path());
    let store = start_store(&mut config).await;
    let mut writer = Writer::start(&config).await;
    writer.incr("page.views", &[("page_id", "p0")], 3, AT);
    writer.flusher.flush_now().await;
    settle(&mut writer).await;
    let huge = r#"["p1"]"#;
    let (date, minute) = day_and_minute(AT);
    for flush in 1..=2 {
        store
            .execute(&format!(
                "INSERT INTO {}.delta_ledger (family, day, bucket, key, minute, writer, incarnation, flush_seq, part, deltas) VALUES ('views', '{date}', {}, '{huge}', {minute}, 'w', 1, {flush}, 0, {{'views': {}}})",
                config.exact_keyspace(),
                countersink::family::key_bucket(huge, config.exact.buckets),
                i64::MAX
            ))
            .await;
    }
    let file = dir.path().join("countersink.toml");
    write_exact_config(&store, &file);
    let out = run_cli([
        "reconcile".to_owned(),
        "--config".into(),
        file.display().to_string(),
        "--day".into(),
        format_date(day().date()),
        "--close".into(),
        "--threshold".into(),
        "1.0".into(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let total = 2 * i128::from(i64::MAX);
    assert!(
        stderr.contains(&format!(
            r#"["p1"] views: exact total {total} is beyond i64"#
        )),
        "{stderr}"
    );
    let families = countersink::family::Families::from_config(&config).unwrap();
    let views = families.by_name("views").unwrap();
    let (session, config) = (&writer.session, &config);
    let exact = |key: &str| {
        let keys = vec![key.to_owned()];
        async move { reconcile::closed::exact_value(session, config, views, &keys, day()).await }
    };
    let (totals, source) = exact("p1").await.unwrap();
    assert_eq!(
        source,
        reconcile::closed::ExactSource::Ledger,
        "no closed row"
    );
    assert_eq!(totals["views"], total);
    let (totals, source) = exact("p0").await.unwrap();
    assert_eq!(source, reconcile::closed::ExactSource::Closed);
    assert_eq!(totals["views"], 3);

    // Its correction (`+2 * i64::MAX`) cannot be one counter write: listed, not sent.
    let out = run_cli([
        "reconcile".to_owned(),
        "--config".into(),
        file.display().to_string(),
        "--day".into(),
        format_date(day().date()),
        "--repair".into(),
        "--threshold".into(),
        "1.0".into(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    assert!(
        stdout.contains(r#"repair beyond_i64 minute ["p1"]"#),
        "{stdout}"
    );
    let counters = store
        .select(&format!(
            "SELECT views FROM {} WHERE page_id = 'p1' AND day = '{date}'",
            config.families[0].minute_table
        ))
        .await;
    assert_eq!(counters.len(), 0, "nothing was sent to p1's counter");
    store.shutdown().await;
}

/// Issue item 6: on the current (open) day, keys below or at their ledger wait for the
/// day to close (`open`, exit 0), but an outside `+7` on one key takes its counter above
/// anything countersink can have written: `reconcile --day today` names it `unexplained`
/// at once and exits 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outside_writer_on_the_open_day_is_unexplained_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = exact_config(dir.path());
    let store = start_store(&mut config).await;
    let mut writer = Writer::start(&config).await;
    let now = countersink::bucket::unix_secs(std::time::SystemTime::now());
    let at = (now - 60).max(now - now.rem_euclid(86_400));
    for i in 0..40_i64 {
        let key = format!("p{}", i % 20);
        writer.incr("page.views", &[("page_id", key.as_str())], 1 + i % 3, at);
    }
    writer.flusher.flush_now().await;
    settle(&mut writer).await;
    let file = dir.path().join("countersink.toml");
    write_exact_config(&store, &file);
    let args = || {
        [
            "reconcile",
            "--config",
            &file.display().to_string(),
            "--day",
            "today",
            "--format",
            "json",
        ]
        .map(str::to_owned)
    };
    let out = run_cli(args());
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reports: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reports[0]["closed"], false, "{reports}");
    assert_eq!(reports[0]["summary"]["keys"], 20, "{reports}");

    let (date, minute) = day_and_minute(at);
    store
        .execute(&format!(
            "UPDATE {} SET views = views + 7 WHERE page_id = 'p3' AND day = '{date}' AND minute = {minute}",
            config.families[0].minute_table
        ))
        .await;
    let out = run_cli(args());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    let reports: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reports[0]["closed"], false, "{reports}");
    let named: Vec<_> = reports[0]["keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| k["status"] != "open")
        .collect();
    assert_eq!(named.len(), 1, "{named:?}");
    assert_eq!(named[0]["status"], "unexplained");
    assert_eq!(named[0]["key"], serde_json::json!(["p3"]));
    assert_eq!(named[0]["granularity"], "minute");
    assert_eq!(named[0]["drift"]["views"], 7);
    store.shutdown().await;
}

/// Issue test 7, on any store: two +5 writes to one minute row made unknown by the
/// fault proxy in front of the store, the first applied (its answer lost), the second not
/// (the request lost); a drift of -5: `ambiguous`, not `resolved`, and explained; the day
/// rows, whose writes went through, are ok.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_equal_unknown_requests_are_ambiguous() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = exact_config(dir.path());
    // The client timeout that makes a swallowed write unknown; no real answer comes
    // near it.
    config.store.request_timeout = Duration::from_secs(1);
    let store = start_store(&mut config).await;
    let proxy = FaultProxy::start(store.contact_point()).await;
    config.store.contact_points = vec![proxy.addr()];
    let minute_table = config.families[0].minute_table.clone();
    let mut writer = Writer::start(&config).await;
    for swallow in [Swallow::Answer, Swallow::Request] {
        proxy.swallow(&minute_table, swallow, 1);
        writer.incr("page.views", &[("page_id", "a")], 5, AT);
        writer.flusher.flush_now().await;
    }
    proxy.clear();
    settle(&mut writer).await;
    let swallowed = proxy.log();
    assert_eq!(swallowed.len(), 2, "{swallowed:?}");
    assert!(
        swallowed.iter().all(|s| s.query.contains(&minute_table)),
        "{swallowed:?}"
    );
    assert_eq!(
        (swallowed[0].swallow, swallowed[0].answer_opcode),
        (Swallow::Answer, Some(RESULT)),
        "the store applied the write whose answer was dropped"
    );
    assert_eq!(swallowed[1].swallow, Swallow::Request);
    assert_eq!(writer.accounting().minute.unknown, 10);
    let report = run_reconcile(&writer, &config).await;
    let a: Vec<_> = report.keys.iter().filter(|k| k.key == ["a"]).collect();
    let minute = a.iter().find(|k| k.granularity == "minute").unwrap();
    assert_eq!(minute.status, Status::Ambiguous, "{minute:?}");
    assert_eq!(minute.drift["views"], -5);
    assert_eq!(minute.unknown_requests, 2);
    assert!(minute.resolution.is_empty());
    // Only keys that are not ok are listed: the day row is ok (the lost request never
    // reached it), so it is counted, not listed.
    assert!(
        !a.iter().any(|k| k.granularity == "day"),
        "the day row is ok: {a:?}"
    );
    assert_eq!(
        report.summary.statuses.get("ok"),
        Some(&1),
        "{:?}",
        report.summary
    );
    assert!(
        report.passes(),
        "ambiguous drift is explained, not a failure"
    );
    store.shutdown().await;
}

/// Issue test 7's resolvable twin, on any store: one +5 write made unknown and applied,
/// one +3 made unknown and lost: exactly one subset explains the drift of -3, so the key
/// is `resolved`, the +5 as applied and the +3 as not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_unknown_requests_are_resolved() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = exact_config(dir.path());
    config.store.request_timeout = Duration::from_secs(1);
    let store = start_store(&mut config).await;
    let proxy = FaultProxy::start(store.contact_point()).await;
    config.store.contact_points = vec![proxy.addr()];
    let minute_table = config.families[0].minute_table.clone();
    let mut writer = Writer::start(&config).await;
    for (swallow, delta) in [(Swallow::Answer, 5), (Swallow::Request, 3)] {
        proxy.swallow(&minute_table, swallow, 1);
        writer.incr("page.views", &[("page_id", "b")], delta, AT);
        writer.flusher.flush_now().await;
    }
    proxy.clear();
    settle(&mut writer).await;
    assert_eq!(proxy.log().len(), 2);
    let report = run_reconcile(&writer, &config).await;
    let minute = report
        .keys
        .iter()
        .find(|k| k.key == ["b"] && k.granularity == "minute")
        .unwrap();
    assert_eq!(minute.status, Status::Resolved, "{minute:?}");
    assert_eq!(minute.drift["views"], -3);
    let log = std::fs::read_to_string(dir.path().join("unknown.jsonl")).unwrap();
    let mut verdicts = Vec::new();
    for line in log.lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        let id = r["request_id"].as_str().unwrap();
        verdicts.push((
            r["deltas"]["views"].as_i64(),
            minute.resolution.get(id).copied(),
        ));
    }
    verdicts.sort();
    assert_eq!(
        verdicts,
        [(Some(3), Some(false)), (Some(5), Some(true))],
        "{minute:?}"
    );
    assert!(report.passes());

    // A run that lists no key still resolves its requests, and `--resolve` writes them:
    // a later run counts them as known.
    let families = countersink::family::Families::from_config(&config).unwrap();
    let mut options = Options {
        day: day(),
        tags: Vec::new(),
        threshold: 0.0,
        now_unix_secs: countersink::bucket::unix_secs(std::time::SystemTime::now()),
        concurrency: 8,
        max_listed: 0,
        slice: None,
    };
    let views = families.by_name("views").unwrap();
    let capped = reconcile::reconcile(&writer.session, &config, views, &options, &|_| {})
        .await
        .expect("reconcile");
    assert!(capped.keys.is_empty());
    assert_eq!(capped.resolved_requests, report.resolved_requests);
    let applied: Vec<bool> = capped.resolved_requests.values().map(|r| r.0).collect();
    assert_eq!(applied.len(), 2, "{:?}", capped.resolved_requests);
    let written = reconcile::write_resolutions(&writer.session, &config, &capped, day(), 0)
        .await
        .expect("resolve");
    assert_eq!(written, 2);
    options.max_listed = reconcile::MAX_LISTED;
    let after = reconcile::reconcile(&writer.session, &config, views, &options, &|_| {})
        .await
        .expect("reconcile");
    let minute = after
        .keys
        .iter()
        .find(|k| k.key == ["b"] && k.granularity == "minute")
        .unwrap();
    assert_eq!(minute.status, Status::Explained, "{minute:?}");
    store.shutdown().await;
}

/// Issue test 2: under write timeouts that applied and that did not, every `resolved`
/// verdict says of each unknown request what cqlsim's request log says it did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_resolved_verdict_matches_what_the_store_applied() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = exact_config(dir.path());
    config.flush.max_batch_rows = 1;
    let store = start_cqlsim(&mut config, "reads the fault log").await;
    let sim = store.sim();
    sim.enable_request_log();
    let (minute_table, day_table) = (
        config.families[0].minute_table.clone(),
        config.families[0].day_table.clone(),
    );
    let mut writer = Writer::start(&config).await;
    let mut rules = Vec::new();
    for table in [&minute_table, &day_table] {
        for applied in [true, false] {
            rules.push(
                FaultRule::new(FaultKind::WriteTimeout)
                    .applied(applied)
                    .table(table)
                    .probability(0.1),
            );
        }
    }
    sim.set_faults(rules);
    for flush in 0..6_i64 {
        for i in 0..200_i64 {
            let key = format!("p{}", i % 40);
            // Distinct deltas per flush make most requests' contents unique.
            writer.incr(
                "page.views",
                &[("page_id", key.as_str())],
                1 + flush * 7 + i % 5,
                AT + flush * 60,
            );
        }
        writer.flusher.flush_now().await;
    }
    sim.clear_faults();
    settle(&mut writer).await;
    let report = run_reconcile(&writer, &config).await;

    // What the store did with each faulted request, by content: (table, page_id, bucket,
    // views) of its one row.
    let mut applied_by_content: HashMap<(String, String, String, String), Vec<bool>> =
        HashMap::new();
    for request in sim.request_log() {
        let Some((FaultKind::WriteTimeout, _)) = request.fault else {
            continue;
        };
        let [statement] = request.statements.as_slice() else {
            continue;
        };
        let v = |c: &str| statement.values.get(c).cloned().unwrap_or_default();
        let bucket = if statement.table.ends_with("by_minute") {
            v("minute")
        } else {
            v("day")
        };
        applied_by_content
            .entry((statement.table.clone(), v("page_id"), bucket, v("views")))
            .or_default()
            .push(request.applied);
    }
    // The same requests from the writer's unknown log, by request id.
    let log = std::fs::read_to_string(dir.path().join("unknown.jsonl")).unwrap();
    let mut content_of: BTreeMap<String, (String, String, String, String)> = BTreeMap::new();
    for line in log.lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        let table = r["table"]
            .as_str()
            .unwrap()
            .rsplit('.')
            .next()
            .unwrap()
            .to_owned();
        let bucket = match r["minute"].as_i64() {
            Some(m) => m.to_string(),
            None => format!("'{}'", r["day"].as_str().unwrap()),
        };
        content_of.insert(
            r["request_id"].as_str().unwrap().to_owned(),
            (
                table,
                format!("'{}'", r["key"]["page_id"].as_str().unwrap()),
                bucket,
                r["deltas"]["views"].as_i64().unwrap_or(0).to_string(),
            ),
        );
    }
    let mut checked = 0;
    for key in report.keys.iter().filter(|k| k.status == Status::Resolved) {
        for (request, applied) in &key.resolution {
            let content = &content_of[request];
            let Some([store_applied]) = applied_by_content.get(content).map(Vec::as_slice) else {
                continue; // the same content in two requests: no match by content
            };
            assert_eq!(applied, store_applied, "{request} {content:?}");
            checked += 1;
        }
    }
    assert!(
        checked >= 5,
        "only {checked} verdicts checked: {:?}",
        report.summary
    );
    assert_eq!(report.summary.over_threshold, 0, "{:?}", report.summary);
    store.shutdown().await;
}

/// Issue test 8, with `--close` and `get --exact`, on any store: a closed day drifted by
/// outside writers (a minute row up, a day row down); `--repair --dry-run` writes
/// nothing, `--repair` makes every counter equal the ledger and the run passes; `--close`
/// keeps the day's exact totals, which `get --exact` then reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repair_makes_a_closed_day_equal_its_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = exact_config(dir.path());
    // A real node on a shared machine may answer a write late; a client timeout here
    // would only add unknown writes the outside writers' drift does not need.
    config.store.request_timeout = Duration::from_secs(5);
    let store = start_store(&mut config).await;
    repair_scenario(&store, &config, dir.path(), None).await;
    store.shutdown().await;
}

/// Issue test 8 under injected faults: unknown minute writes (timeouts, some not applied)
/// and rejected day writes beside an outside writer; the repair undoes all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repair_makes_a_closed_day_equal_its_ledger_after_unknown_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = exact_config(dir.path());
    let store = start_cqlsim(&mut config, "injects faults that leave unknown writes").await;
    let faults = vec![
        FaultRule::new(FaultKind::WriteTimeout)
            .table(&config.families[0].minute_table)
            .probability(0.3),
        FaultRule::new(FaultKind::WriteFailure)
            .table(&config.families[0].day_table)
            .probability(0.3),
    ];
    repair_scenario(&store, &config, dir.path(), Some((store.sim(), faults))).await;
    store.shutdown().await;
}

/// Feeds a closed day (under `faults` on cqlsim, if given), adds outside writes, then
/// runs `reconcile --repair --dry-run`, `--repair`, `--close` and `get --exact`.
async fn repair_scenario(
    store: &Store,
    config: &Config,
    dir: &std::path::Path,
    faults: Option<(&cqlsim::Server, Vec<FaultRule>)>,
) {
    const MINUTE_TABLE: &str = "metrics.views_by_minute";
    const DAY_TABLE: &str = "metrics.views_by_day";
    let mut writer = Writer::start(config).await;
    if let Some((sim, rules)) = &faults {
        sim.set_faults(rules.clone());
    }
    let mut fed = 0_i128;
    let mut p3 = 0_i64;
    for flush in 0..4_i64 {
        for i in 0..120_i64 {
            let key = format!("p{}", i % 12);
            let delta = 1 + i % 5;
            writer.incr(
                "page.views",
                &[("page_id", key.as_str())],
                delta,
                AT + flush * 60,
            );
            fed += i128::from(delta);
            if i % 12 == 3 {
                p3 += delta;
            }
        }
        writer.flusher.flush_now().await;
    }
    if let Some((sim, _)) = &faults {
        sim.clear_faults();
    }
    settle(&mut writer).await;
    let (date, minute) = day_and_minute(AT);
    store
        .execute(&format!(
            "UPDATE {} SET views = views + 7 WHERE page_id = 'p5' AND day = '{date}' AND minute = {minute}",
            config.families[0].minute_table
        ))
        .await;
    store
        .execute(&format!(
            "UPDATE {} SET views = views - 4 WHERE page_id = 'p7' AND month = '{}' AND day = '{date}'",
            config.families[0].day_table,
            &date[..7]
        ))
        .await;
    let before = store.table_sum(MINUTE_TABLE, "views").await;
    assert_ne!(
        before, fed,
        "the outside writer (and the faults) made the counters drift"
    );
    if faults.is_none() {
        assert_eq!(before, fed + 7, "every write applied, then the outside +7");
        assert_eq!(store.table_sum(DAY_TABLE, "views").await, fed - 4);
    }

    let file = dir.join("countersink.toml");
    write_exact_config(store, &file);
    let day_text = format_date(day().date());
    let cli = |extra: &[&str]| {
        let mut args = vec![
            "reconcile".to_owned(),
            "--config".into(),
            file.display().to_string(),
            "--day".into(),
            day_text.clone(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        run_cli(args)
    };
    let dry = cli(&["--repair", "--dry-run"]);
    assert_eq!(
        dry.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&dry.stderr)
    );
    assert!(String::from_utf8_lossy(&dry.stdout).contains("repair planned"));
    assert_eq!(
        store.table_sum(MINUTE_TABLE, "views").await,
        before,
        "a dry run writes nothing"
    );

    let repaired = cli(&["--repair"]);
    let text = String::from_utf8_lossy(&repaired.stdout).into_owned();
    assert_eq!(
        repaired.status.code(),
        Some(0),
        "{text}\n{}",
        String::from_utf8_lossy(&repaired.stderr)
    );
    assert!(text.contains("repair applied"), "{text}");
    assert_eq!(store.table_sum(MINUTE_TABLE, "views").await, fed);
    assert_eq!(store.table_sum(DAY_TABLE, "views").await, fed);
    let report = run_reconcile(&writer, config).await;
    assert!(
        report
            .keys
            .iter()
            .all(|k| k.drift.values().all(|d| *d == 0)),
        "{report:?}"
    );
    assert_eq!(
        report.summary.statuses.get("unexplained"),
        None,
        "{:?}",
        report.summary
    );

    assert_eq!(cli(&["--close"]).status.code(), Some(0));
    let get = run_cli([
        "get",
        "--config",
        &file.display().to_string(),
        "page.views",
        "--tag",
        "page_id:p3",
        "--day",
        &day_text,
        "--exact",
    ]);
    assert!(
        get.status.success(),
        "{}",
        String::from_utf8_lossy(&get.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&get.stdout).trim(), p3.to_string());
    assert!(String::from_utf8_lossy(&get.stderr).contains("closed day"));
}

/// One key of [`streamed_day`]: its ledger value (none: no ledger row), its counter
/// (minute and day rows; none: no counter rows), and whether the key index has it.
pub(crate) struct Planned {
    pub(crate) ledger: Option<i64>,
    pub(crate) counter: Option<i64>,
    pub(crate) indexed: bool,
}

/// 2 000 keys of the generic family: most equal to their ledger; every 97th drifted +3
/// by an outside writer, every 89th only in the key index and the counters (its ledger
/// row lost), every 101st in the ledger only (its counter writes lost).
pub(crate) fn streamed_plan() -> Vec<Planned> {
    (0..2_000_i64)
        .map(|i| {
            let value = 1 + i % 9;
            match i {
                i if i % 97 == 0 => Planned {
                    ledger: Some(value),
                    counter: Some(value + 3),
                    indexed: true,
                },
                i if i % 89 == 0 => Planned {
                    ledger: None,
                    counter: Some(value),
                    indexed: true,
                },
                i if i % 101 == 0 => Planned {
                    ledger: Some(value),
                    counter: None,
                    indexed: true,
                },
                _ => Planned {
                    ledger: Some(value),
                    counter: Some(value),
                    indexed: true,
                },
            }
        })
        .collect()
}

/// Writes `plan` for `day` straight into cqlsim, bucketed as `config` says.
pub(crate) fn write_plan(sim: &cqlsim::Server, config: &Config, day: Day, plan: &[Planned]) {
    let families = countersink::family::Families::from_config(config).unwrap();
    let generic = families.by_name("generic").unwrap();
    let date = format_date(day.date());
    let ks = config.exact_keyspace();
    let index = countersink::ops::keyindex::index_table(config);
    for (i, key) in plan.iter().enumerate() {
        let tags = format!("key:k{i}");
        let json = serde_json::to_string(&["s", tags.as_str()]).unwrap();
        if let Some(value) = key.ledger {
            sim.execute(None, &format!(
                "INSERT INTO {ks}.delta_ledger (family, day, bucket, key, minute, writer, incarnation, flush_seq, part, deltas) VALUES ('generic', '{date}', {}, '{json}', 7, 'w', 1, 1, 0, {{'value': {value}}})",
                countersink::family::key_bucket(&json, config.exact.buckets)
            )).unwrap();
        }
        if key.indexed && config.key_index.enabled {
            sim.execute(None, &format!(
                "INSERT INTO {index} (family, day, bucket, key) VALUES ('generic', '{date}', {}, '{json}')",
                countersink::family::key_bucket(&json, config.key_index.buckets)
            )).unwrap();
        }
        if let Some(value) = key.counter {
            sim.execute(None, &format!(
                "UPDATE {} SET value = value + {value} WHERE name = 's' AND tags = '{tags}' AND day = '{date}' AND minute = 7",
                generic.minute_table
            )).unwrap();
            sim.execute(None, &format!(
                "UPDATE {} SET value = value + {value} WHERE name = 's' AND tags = '{tags}' AND month = '{}' AND day = '{date}'",
                generic.day_table, &date[..7]
            )).unwrap();
        }
    }
}

/// A streamed run over many slices (16 with the default 64 ledger and 16 index buckets;
/// 1 with coprime counts; 64 with the index off) counts exactly what the plan holds, key
/// by key: the same summary whatever the slicing, and a capped listing changes the
/// listing only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_run_counts_every_key_of_every_slice_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = exact_config(dir.path());
    config.generic.exact = true;
    config.key_index.enabled = true;
    let store = start_cqlsim(&mut config, "writes a day's rows in process").await;
    let session = std::sync::Arc::new(
        countersink::sink::cql::session::connect(&config.store)
            .await
            .unwrap(),
    );
    let plan = streamed_plan();
    let mut index_7 = config.clone();
    index_7.key_index.buckets = 7;
    let mut no_index = config.clone();
    no_index.key_index.enabled = false;
    let cases = [(&config, 16), (&index_7, 1), (&no_index, 64)];
    let mut summaries = Vec::new();
    for (n, (case, slices)) in cases.into_iter().enumerate() {
        assert_eq!(reconcile::slices(case), slices);
        let day = Day(day().0 - 1 - n as u32);
        write_plan(store.sim(), case, day, &plan);
        let indexed = case.key_index.enabled;
        // What the plan says, key by key.
        let seen: Vec<&Planned> = plan
            .iter()
            .filter(|k| k.ledger.is_some() || indexed)
            .collect();
        let exact: i128 = seen.iter().filter_map(|k| k.ledger).map(i128::from).sum();
        let counter: i128 = seen.iter().filter_map(|k| k.counter).map(i128::from).sum();
        let drifting = seen.iter().filter(|k| k.ledger != k.counter).count();
        let drift: i128 = seen
            .iter()
            .map(|k| (k.counter.unwrap_or(0) - k.ledger.unwrap_or(0)).abs() as i128)
            .sum();
        let families = countersink::family::Families::from_config(case).unwrap();
        let mut options = Options {
            day,
            tags: Vec::new(),
            threshold: 0.0,
            now_unix_secs: countersink::bucket::unix_secs(std::time::SystemTime::now()),
            concurrency: 16,
            max_listed: reconcile::MAX_LISTED,
            slice: None,
        };
        let generic = families.by_name("generic").unwrap();
        let report = reconcile::reconcile(&session, case, generic, &options, &|_| {})
            .await
            .unwrap();
        let s = &report.summary;
        assert_eq!(s.keys, seen.len(), "case {n}: {s:?}");
        assert_eq!(s.exact_total, exact, "case {n}");
        assert_eq!(s.counter_total["minute"], counter, "case {n}");
        assert_eq!(s.counter_total["day"], counter, "case {n}");
        assert_eq!(s.statuses["ok"], 2 * (seen.len() - drifting), "case {n}");
        assert_eq!(s.statuses["unexplained"], 2 * drifting, "case {n}");
        assert_eq!(s.drift_unexplained, 2 * drift, "case {n}");
        assert_eq!(report.keys.len(), 2 * drifting, "case {n}");
        assert_eq!(
            s.ledger_rows,
            plan.iter().filter(|k| k.ledger.is_some()).count() as u64
        );
        // The listing capped: the same counts, three keys listed, the rest counted.
        options.max_listed = 3;
        let capped = reconcile::reconcile(&session, case, generic, &options, &|_| {})
            .await
            .unwrap();
        assert_eq!(capped.keys.len(), 3);
        assert_eq!(capped.summary.not_listed, 2 * drifting - 3);
        assert_eq!(
            reconcile::Summary {
                not_listed: 0,
                ..capped.summary.clone()
            },
            *s
        );
        let mut comparable = s.clone();
        comparable.ledger_rows = 0;
        summaries.push((comparable, indexed));
    }
    // Every slicing with the index counts the same.
    assert_eq!(summaries[0], summaries[1]);
    store.shutdown().await;
}

/// `--repair` on a sharded family (shards in the partition key, then in the clustering
/// key): an outside writer adds +7 to shard 2 of one key's minute and day rows; the
/// correction goes to shard 0, and afterwards every key is ok: the counter reconcile
/// compares is the sum of the shards, which one shard's -7 brings back to the ledger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repair_of_a_sharded_family_corrects_the_sum_of_its_shards() {
    for placement in [
        countersink::config::ShardPlacement::Partition,
        countersink::config::ShardPlacement::Clustering,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut config = exact_config(dir.path());
        config.families[0].shards = 4;
        config.families[0].shard_placement = placement;
        let store = start_cqlsim(&mut config, "writes beside countersink in process").await;
        let mut writer = Writer::start(&config).await;
        for flush in 0..8_i64 {
            for i in 0..40_i64 {
                let key = format!("p{}", i % 10);
                writer.incr(
                    "page.views",
                    &[("page_id", key.as_str())],
                    1 + i % 3,
                    AT + flush,
                );
            }
            writer.flusher.flush_now().await;
        }
        settle(&mut writer).await;
        let (date, minute) = day_and_minute(AT);
        let family = &config.families[0];
        let sim = store.sim();
        sim.execute(None, &format!(
            "UPDATE {} SET views = views + 7 WHERE page_id = 'p3' AND shard = 2 AND day = '{date}' AND minute = {minute}",
            family.minute_table
        ))
        .unwrap();
        sim.execute(None, &format!(
            "UPDATE {} SET views = views + 7 WHERE page_id = 'p3' AND shard = 2 AND month = '{}' AND day = '{date}'",
            family.day_table,
            &date[..7]
        ))
        .unwrap();
        let report = run_reconcile(&writer, &config).await;
        assert_eq!(report.keys.len(), 2, "{placement:?}: {:?}", report.keys);
        assert!(
            report.keys.iter().all(|k| k.key == ["p3"]
                && k.status == Status::Unexplained
                && k.drift["views"] == 7)
        );

        let families = countersink::family::Families::from_config(&config).unwrap();
        let views = families.by_name("views").unwrap();
        let reader = countersink::ops::read::Reader::new(writer.session.clone());
        let mut corrections =
            reconcile::repair::plan(&writer.session, &reader, &config, views, &report, day())
                .await
                .unwrap();
        assert_eq!(corrections.len(), 2, "{corrections:?}");
        let sink = countersink::sink::cql::CqlSink::connect(&config.store, &families)
            .await
            .unwrap();
        reconcile::repair::apply(
            &writer.session,
            &sink,
            &config,
            views,
            day(),
            &mut corrections,
            1,
        )
        .await
        .unwrap();
        assert!(
            corrections.iter().all(|c| c.outcome == "applied"),
            "{corrections:?}"
        );
        let after = run_reconcile(&writer, &config).await;
        assert!(
            after.keys.iter().all(|k| k.drift.values().all(|d| *d == 0)),
            "{placement:?}: {:?}",
            after.keys
        );
        assert_eq!(after.summary.drift_unexplained, 0, "{placement:?}");
        assert!(after.passes());
        store.shutdown().await;
    }
}
