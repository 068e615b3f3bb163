//! What the ledger holds of several writers and what closing a day makes of it: two starts sharing a writer id, a repair waiting on a writer whose spill still owes the day, a closed total beyond `i64`.

use super::*;

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
    let config_b = beside(&config_a, dir_b.path());
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

/// Writers A and B count the same keys (4 pages) of a closed day; the store refuses B's
/// counter writes (Unavailable: not applied) and its final flush spills them, their
/// ledger rows confirmed: B's `owed` mark holds the day open. (`fed`: what both fed.)
struct OwedByB {
    dir_a: tempfile::TempDir,
    dir_b: tempfile::TempDir,
    config_a: Config,
    config_b: Config,
    store: Store,
    writer_a: Writer,
    fed: i128,
}

const MINUTE_TABLE: &str = "metrics.views_by_minute";
const DAY_TABLE: &str = "metrics.views_by_day";

async fn owed_by_b() -> OwedByB {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut config_a = exact_config(dir_a.path());
    let store = start_cqlsim(&mut config_a, "injects Unavailable on the counter tables").await;
    let config_b = beside(&config_a, dir_b.path());
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
    OwedByB {
        dir_a,
        dir_b,
        config_a,
        config_b,
        store,
        writer_a,
        fed,
    }
}

/// The same day owed by B, whose state directory is then lost for good (its spill will
/// never be replayed): `--release-owed` with a name no mark carries is refused, nothing
/// written; with B's name (as the report's `owed_by` gives it) B's mark becomes
/// `released`, the day closes, and the repair in the same run raises the counters to the
/// ledger: B's rows, confirmed in the ledger, reach the counters once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_writers_owed_mark_is_released_and_the_repair_counts_its_rows() {
    let OwedByB {
        dir_a,
        dir_b,
        config_a,
        store,
        writer_a,
        fed,
        ..
    } = owed_by_b().await;
    let report = run_reconcile(&writer_a, &config_a).await;
    assert!(!report.closed, "B's mark holds the day open");
    assert_eq!(report.owed_by.len(), 1, "{:?}", report.owed_by);
    let owner = report.owed_by[0].clone();
    drop(dir_b);
    let file = dir_a.path().join("countersink.toml");
    write_exact_config(&store, &file);

    let mistyped = reconcile_cli(&file, &["--release-owed", "nobody~0", "--repair"]);
    let stderr = String::from_utf8_lossy(&mistyped.stderr).into_owned();
    assert_eq!(mistyped.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("nobody~0") && stderr.contains(&owner),
        "{stderr}"
    );
    let report = run_reconcile(&writer_a, &config_a).await;
    assert_eq!(
        report.owed_by,
        std::slice::from_ref(&owner),
        "nothing written"
    );

    let released = reconcile_cli(&file, &["--release-owed", &owner, "--repair"]);
    let stderr = String::from_utf8_lossy(&released.stderr).into_owned();
    assert_eq!(released.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("released"), "{stderr}");
    assert_eq!(store.table_sum(MINUTE_TABLE, "views").await, fed);
    assert_eq!(store.table_sum(DAY_TABLE, "views").await, fed);
    let report = run_reconcile(&writer_a, &config_a).await;
    assert!(report.closed, "{:?}", report.open_because);
    assert!(report.owed_by.is_empty(), "{:?}", report.owed_by);
    assert!(report.passes(), "{:?}", report.keys);
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
    let OwedByB {
        dir_a,
        dir_b: _dir_b,
        config_a,
        config_b,
        store,
        writer_a,
        fed,
    } = owed_by_b().await;
    let file = dir_a.path().join("countersink.toml");
    write_exact_config(&store, &file);
    let repair = || reconcile_cli(&file, &["--repair"]);
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
    let out = reconcile_cli(&file, &["--close", "--threshold", "1.0"]);
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
    let out = reconcile_cli(&file, &["--repair", "--threshold", "1.0"]);
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

/// `--repair` and `--close` leave alone a day whose ledger rows may have started to
/// expire (`exact.ledger_ttl` from the day's start, less a day): exit 2, naming the TTL,
/// and nothing written. And a second `--close` does not replace a closed row with other
/// totals: it names the key and exits 3, until `--overwrite-closed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repair_and_close_leave_alone_an_expiring_day_and_a_differing_closed_row() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = exact_config(dir.path());
    let store = start_store(&mut config).await;
    let mut writer = Writer::start(&config).await;
    for page in ["p0", "p1"] {
        writer.incr("page.views", &[("page_id", page)], 3, AT);
    }
    writer.flusher.flush_now().await;
    settle(&mut writer).await;
    let (date, minute) = day_and_minute(AT);
    // An outside writer: p0's counter is 2 above its ledger (within --threshold 1.0).
    store
        .execute(&format!(
            "UPDATE {} SET views = views + 2 WHERE page_id = 'p0' AND day = '{date}' AND minute = {minute}",
            config.families[0].minute_table
        ))
        .await;
    const MINUTE_TABLE: &str = "metrics.views_by_minute";
    let before = store.table_sum(MINUTE_TABLE, "views").await;

    // The day is more than a day old: with a TTL of two days its rows may expire.
    let short = dir.path().join("short.toml");
    write_exact_config_with_ttl(&store, &short, "2d");
    for flag in ["--repair", "--close"] {
        let out = reconcile_cli(&short, &[flag]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag}: {stderr}");
        assert!(
            stderr.contains(&format!("{flag} refused")) && stderr.contains("exact.ledger_ttl"),
            "{stderr}"
        );
    }
    assert_eq!(
        store.table_sum(MINUTE_TABLE, "views").await,
        before,
        "nothing repaired"
    );
    let families = countersink::family::Families::from_config(&config).unwrap();
    let views = families.by_name("views").unwrap();
    let (session, config) = (&writer.session, &config);
    let exact = |key: &str| {
        let keys = vec![key.to_owned()];
        async move { reconcile::closed::exact_value(session, config, views, &keys, day()).await }
    };
    assert_eq!(
        exact("p1").await.unwrap().1,
        reconcile::closed::ExactSource::Ledger,
        "nothing closed"
    );

    let file = dir.path().join("countersink.toml");
    write_exact_config(&store, &file);
    let close = |extra: &[&str]| {
        let mut args = vec!["--close", "--threshold", "1.0"];
        args.extend(extra);
        reconcile_cli(&file, &args)
    };
    let out = close(&[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (totals, source) = exact("p1").await.unwrap();
    assert_eq!(source, reconcile::closed::ExactSource::Closed);
    assert_eq!(totals["views"], 3);
    // The same close again changes nothing and passes.
    assert_eq!(close(&[]).status.code(), Some(0));
    // p1's ledger changes (a row the closed total does not hold): the next close keeps
    // the closed row and names it.
    let key = r#"["p1"]"#;
    store
        .execute(&format!(
            "INSERT INTO {}.delta_ledger (family, day, bucket, key, minute, writer, incarnation, flush_seq, part, deltas) VALUES ('views', '{date}', {}, '{key}', {minute}, 'w', 1, 1, 0, {{'views': 2}})",
            config.exact_keyspace(),
            countersink::family::key_bucket(key, config.exact.buckets),
        ))
        .await;
    let out = close(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains(
            r#"["p1"]: exact_by_day holds {"views": 3}, the ledger sums to {"views": 5}"#
        ) && stderr.contains("--overwrite-closed"),
        "{stderr}"
    );
    assert_eq!(
        exact("p1").await.unwrap().0["views"],
        3,
        "the closed row kept"
    );
    let out = close(&["--overwrite-closed"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        exact("p1").await.unwrap().0["views"],
        5,
        "replaced when asked"
    );
    store.shutdown().await;
}

/// A ledger row whose key is not a JSON array of texts (an outside writer's) names no
/// counter: the run counts it in `unreadable_keys` and judges the other keys, where it
/// used to stop at it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_is_not_a_json_array_is_counted_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = exact_config(dir.path());
    let store = start_store(&mut config).await;
    let mut writer = Writer::start(&config).await;
    for page in ["p0", "p1", "p2"] {
        writer.incr("page.views", &[("page_id", page)], 3, AT);
    }
    writer.flusher.flush_now().await;
    settle(&mut writer).await;
    let (date, minute) = day_and_minute(AT);
    let key = "not json";
    store
        .execute(&format!(
            "INSERT INTO {}.delta_ledger (family, day, bucket, key, minute, writer, incarnation, flush_seq, part, deltas) VALUES ('views', '{date}', {}, '{key}', {minute}, 'w', 1, 1, 0, {{'views': 2}})",
            config.exact_keyspace(),
            countersink::family::key_bucket(key, config.exact.buckets),
        ))
        .await;
    let report = run_reconcile(&writer, &config).await;
    assert_eq!(report.summary.unreadable_keys, 1, "{:?}", report.summary);
    assert_eq!(report.summary.keys, 3, "{:?}", report.summary);
    assert_eq!(report.summary.statuses.get("ok"), Some(&6));
    assert!(report.passes());
    store.shutdown().await;
}
