//! Exact totals through the real driver: on any store (the real node too) the delta
//! ledger records exactly what was fed and the counters equal it; against cqlsim's
//! injected faults it still records exactly what was fed whatever the counter writes went
//! through, a re-sent ledger row carries the same values, and a ledger outage holds the
//! counter writes.

use std::collections::BTreeMap;
use std::time::Duration;

use countersink::config::Config;
use countersink::vocabulary::Granularity;
use cqlsim::{FaultKind, FaultRule};
use futures_util::TryStreamExt;

use crate::common::{FaultProxy, Swallow, T0, Writer, config, start_cqlsim, start_store};

/// The example configuration with the views family exact, short timeouts and back-offs.
fn exact_config(state: &std::path::Path) -> Config {
    let mut config = config(state);
    for family in &mut config.families {
        family.exact = true;
    }
    config.store.request_timeout = Duration::from_millis(300);
    config.exact.retry_backoff_min = Duration::from_millis(5);
    config.exact.retry_backoff_max = Duration::from_millis(20);
    config.flush.max_in_flight = 32;
    config
}

/// The views family's tables and the ledger, as this test's store names them.
struct Tables {
    minute: String,
    day: String,
    ledger: String,
}

fn tables(config: &Config) -> Tables {
    let views = &config.families[0];
    Tables {
        minute: views.minute_table.clone(),
        day: views.day_table.clone(),
        ledger: format!("{}.delta_ledger", config.exact_keyspace()),
    }
}

/// One stored ledger row: (key, minute of day, writer, incarnation, flush, part) and its
/// deltas.
type LedgerRow = ((String, i16, String, i64, i64, i16), BTreeMap<String, i64>);

/// Every row of the ledger table, read back through the driver.
async fn read_ledger(writer: &Writer, table: &str) -> Vec<LedgerRow> {
    writer
        .session
        .query_iter(
            format!(
                "SELECT key, minute, writer, incarnation, flush_seq, part, deltas FROM {table}"
            ),
            (),
        )
        .await
        .expect("ledger scan")
        .rows_stream::<(String, i16, String, i64, i64, i16, BTreeMap<String, i64>)>()
        .expect("ledger rows")
        .map_ok(|(key, minute, w, inc, seq, part, deltas)| {
            ((key, minute, w, inc, seq, part), deltas)
        })
        .try_collect()
        .await
        .expect("ledger rows")
}

/// The ledger's `views` sum per (key, minute of day).
fn ledger_views(rows: &[LedgerRow]) -> BTreeMap<(String, i16), i64> {
    let mut sums = BTreeMap::new();
    for ((key, minute, ..), deltas) in rows {
        *sums.entry((key.clone(), *minute)).or_default() +=
            deltas.get("views").copied().unwrap_or(0);
    }
    sums
}

/// Flushes until nothing is pending or held.
async fn settle(writer: &mut Writer) {
    for _ in 0..40 {
        let held = writer.ledger.exact_ledger().held_rows;
        if writer.engine.aggregator().pending_rows() == 0 && held == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        writer.flusher.flush_now().await;
    }
    panic!(
        "still pending: {} rows, {:?}",
        writer.engine.aggregator().pending_rows(),
        writer.ledger.exact_ledger()
    );
}

/// Issues tests 1 and 5 without faults, on any store (the real node too): increments
/// (negative ones among them) over six flushes across a day boundary, two writers' worth
/// of rows meeting again flush after flush; the ledger holds exactly what was fed per key
/// and minute, one row per key, minute and flush, and the counters read back equal it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_and_the_counters_equal_what_was_fed() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = exact_config(dir.path());
    // A real node on a shared machine may answer late: no client timeout should make a
    // write unknown here.
    config.store.request_timeout = Duration::from_secs(5);
    let store = start_store(&mut config).await;
    let t = tables(&config);
    let mut writer = Writer::start(&config).await;
    let mut fed: BTreeMap<(String, i16), i64> = BTreeMap::new();
    for flush in 0..6_i64 {
        // 23:57 to 00:02: three minutes of one day, three of the next.
        let now = T0 - 60 + flush * 60;
        for i in 0..3_000_i64 {
            let key = format!("p{}", i % 150);
            let delta = if i % 11 == 0 { -2 } else { 1 + i % 4 };
            writer.incr("page.views", &[("page_id", key.as_str())], delta, now);
            let minute = (now.rem_euclid(86_400) / 60) as i16;
            *fed.entry((format!("[\"{key}\"]"), minute)).or_default() += delta;
        }
        writer.flusher.flush_now().await;
    }
    settle(&mut writer).await;
    assert_eq!(writer.engine.aggregator().counters().dropped_total(), 0);

    let rows = read_ledger(&writer, &t.ledger).await;
    assert_eq!(
        ledger_views(&rows),
        fed,
        "the ledger sum per key and minute"
    );
    let mut per_flush = BTreeMap::new();
    for ((key, minute, w, inc, seq, _part), _) in &rows {
        *per_flush.entry((key, minute, w, inc, seq)).or_insert(0) += 1;
    }
    assert_eq!(per_flush.len(), 6 * 150, "one ledger row per key and flush");
    assert!(per_flush.values().all(|&n| n == 1));

    // The counters, read back per key and minute (the six minutes are distinct).
    let counters = store
        .select(&format!("SELECT page_id, minute, views FROM {}", t.minute))
        .await;
    let mut stored: BTreeMap<(String, i16), i64> = BTreeMap::new();
    for row in 0..counters.len() {
        let key = counters.text(row, "page_id").expect("page_id");
        let minute = counters.get_i64(row, "minute").expect("minute") as i16;
        *stored.entry((format!("[\"{key}\"]"), minute)).or_default() +=
            counters.get_i64(row, "views").unwrap_or(0);
    }
    assert_eq!(stored, fed, "the minute counters equal the ledger");
    let total: i64 = fed.values().sum();
    assert_eq!(
        store.table_sum("metrics.views_by_day", "views").await,
        i128::from(total)
    );
    let a = writer.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        (a.minute.applied, a.day.applied, a.minute.unknown),
        (i128::from(total), i128::from(total), 0),
        "{a:?}"
    );
    store.shutdown().await;
}

/// Issue test 1 on any store (the real node too), with the faults a proxy can make: every
/// 2nd ledger write's answer lost (the store applied it; the gate re-sends it), and
/// counter writes made unknown, applied (answer lost) or not (request lost), about one in
/// five. The ledger equals what was fed per key and minute, one row per key, minute and
/// flush; the counters lie between what was fed minus the unknown deltas and what was
/// fed; and reconcile explains every key of the day.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_equals_what_was_fed_when_writes_go_unknown() {
    let dir = tempfile::tempdir().unwrap();
    // Its 300 ms client timeout makes a swallowed write unknown; a slow answer of a
    // loaded node may too, which every assertion below allows (the gate re-sends a ledger
    // write; an unknown counter write is accounted and explained).
    let mut config = exact_config(dir.path());
    let store = start_store(&mut config).await;
    let proxy = FaultProxy::start(store.contact_point()).await;
    config.store.contact_points = vec![proxy.addr()];
    let t = tables(&config);
    let mut writer = Writer::start(&config).await;
    proxy.swallow_every(&t.ledger, Swallow::Answer, 2);
    for (table, answer, request) in [(&t.minute, 9, 11), (&t.day, 10, 13)] {
        proxy.swallow_every(table, Swallow::Answer, answer);
        proxy.swallow_every(table, Swallow::Request, request);
    }
    let at = T0 - 3600;
    let mut fed: BTreeMap<(String, i16), i64> = BTreeMap::new();
    for flush in 0..5_i64 {
        let now = at + flush * 60;
        for i in 0..2_000_i64 {
            let key = format!("p{}", i % 100);
            let delta = if i % 13 == 0 { -1 } else { i % 3 + 1 };
            writer.incr("page.views", &[("page_id", key.as_str())], delta, now);
            let minute = (now.rem_euclid(86_400) / 60) as i16;
            *fed.entry((format!("[\"{key}\"]"), minute)).or_default() += delta;
        }
        writer.flusher.flush_now().await;
    }
    proxy.clear();
    settle(&mut writer).await;
    assert_eq!(writer.engine.aggregator().counters().dropped_total(), 0);
    let swallowed = proxy.log();
    let count = |table: &str, kind: Swallow| {
        swallowed
            .iter()
            .filter(|s| s.swallow == kind && s.query.contains(table))
            .count()
    };
    assert!(count(&t.ledger, Swallow::Answer) > 0, "{swallowed:?}");
    for table in [&t.minute, &t.day] {
        assert!(count(table, Swallow::Answer) > 0 && count(table, Swallow::Request) > 0);
    }

    let rows = read_ledger(&writer, &t.ledger).await;
    assert_eq!(
        ledger_views(&rows),
        fed,
        "the ledger sum per key and minute"
    );
    let mut per_flush = BTreeMap::new();
    for ((key, minute, w, inc, seq, _part), _) in &rows {
        *per_flush.entry((key, minute, w, inc, seq)).or_insert(0) += 1;
    }
    assert_eq!(per_flush.len(), 5 * 100);
    assert!(
        per_flush.values().all(|&n| n == 1),
        "one ledger row per key, minute and flush"
    );
    let counts = writer.ledger.exact_ledger();
    assert!(
        counts.writes[&countersink::sink::OutcomeClass::Unknown] > 0,
        "the lost ledger answers made the gate re-send: {counts:?}"
    );

    let a = writer.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert!(a.minute.unknown > 0 && a.day.unknown > 0, "{a:?}");
    let total = i128::from(fed.values().sum::<i64>());
    for (table, unknown) in [
        ("metrics.views_by_minute", a.minute.unknown),
        ("metrics.views_by_day", a.day.unknown),
    ] {
        let stored = store.table_sum(table, "views").await;
        let (low, high) = (total - unknown.abs(), total + unknown.abs());
        assert!(
            (low..=high).contains(&stored) && stored != total,
            "{table}: {stored} outside [{low}, {high}] or untouched by the lost requests"
        );
    }

    let families = countersink::family::Families::from_config(&config).unwrap();
    let options = countersink::ops::reconcile::Options {
        day: countersink::bucket::Day((at / 86_400) as u32),
        tags: Vec::new(),
        threshold: 0.0,
        now_unix_secs: countersink::bucket::unix_secs(std::time::SystemTime::now()),
        concurrency: 8,
        max_listed: countersink::ops::reconcile::MAX_LISTED,
        slice: None,
    };
    let report = countersink::ops::reconcile::reconcile(
        &writer.session,
        &config,
        families.by_name("views").unwrap(),
        &options,
        &|_| {},
    )
    .await
    .expect("reconcile");
    assert_eq!(report.summary.keys, 100, "{:?}", report.summary);
    assert!(report.passes(), "every key explained: {:?}", report.summary);
    store.shutdown().await;
}

/// Issue test 1: 50k increments with every counter fault kind (applied and not, where
/// both exist) at about 10 % of counter writes, and every 2nd ledger write timing out
/// after the store applied it: the ledger equals what was fed, per key and minute; every
/// ledger row was sent with one content only; no (key, minute, flush) has two rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_equals_what_was_fed_under_every_counter_fault() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = exact_config(dir.path());
    let store = start_cqlsim(&mut config, "injects faults and reads the request log").await;
    let server = store.sim();
    let t = tables(&config);
    server.enable_request_log();
    let mut writer = Writer::start(&config).await;
    let mut rules = vec![
        FaultRule::new(FaultKind::WriteTimeout)
            .applied(true)
            .table(&t.ledger)
            .every(2),
    ];
    for table in [&t.minute, &t.day] {
        for (kind, applied) in [
            (FaultKind::WriteTimeout, true),
            (FaultKind::WriteTimeout, false),
            (FaultKind::WriteFailure, true),
            (FaultKind::WriteFailure, false),
            (FaultKind::Overloaded, true),
            (FaultKind::Overloaded, false),
            (FaultKind::ServerError, true),
            (FaultKind::ServerError, false),
            (FaultKind::NoReply, true),
            (FaultKind::NoReply, false),
            (FaultKind::Close, true),
            (FaultKind::Close, false),
            (FaultKind::Unavailable, false),
            (FaultKind::Bootstrapping, false),
            (FaultKind::Unprepared, false),
        ] {
            rules.push(
                FaultRule::new(kind)
                    .applied(applied)
                    .table(table)
                    .probability(0.007),
            );
        }
    }
    server.set_faults(rules);

    let mut fed: BTreeMap<(String, i16), i64> = BTreeMap::new();
    for flush in 0..10_i64 {
        let now = T0 - 3600 + flush * 60;
        for i in 0..5_000_i64 {
            let key = format!("p{}", i % 200);
            let delta = if i % 13 == 0 { -1 } else { i % 3 + 1 };
            writer.incr("page.views", &[("page_id", key.as_str())], delta, now);
            let minute = (now.rem_euclid(86_400) / 60) as i16;
            *fed.entry((format!("[\"{key}\"]"), minute)).or_default() += delta;
        }
        writer.flusher.flush_now().await;
    }
    server.clear_faults();
    settle(&mut writer).await;

    let dropped = writer.engine.aggregator().counters().dropped_total();
    assert_eq!(
        dropped, 0,
        "nothing dropped, so the ledger owes everything fed"
    );
    let rows = read_ledger(&writer, &t.ledger).await;
    assert_eq!(
        ledger_views(&rows),
        fed,
        "the ledger sum per key and minute"
    );
    let mut per_flush = BTreeMap::new();
    for ((key, minute, w, inc, seq, _part), _) in &rows {
        *per_flush.entry((key, minute, w, inc, seq)).or_insert(0) += 1;
    }
    assert!(
        per_flush.values().all(|&n| n == 1),
        "one ledger row per key, minute and flush"
    );

    // Re-sent verbatim: every ledger primary key reached the store with one content.
    let mut contents: BTreeMap<Vec<String>, BTreeMap<String, String>> = BTreeMap::new();
    let mut ledger_requests = 0;
    let mut resent = 0;
    for request in server.request_log() {
        for statement in &request.statements {
            if statement.table != "delta_ledger" {
                continue;
            }
            ledger_requests += 1;
            let identity: Vec<String> = [
                "family",
                "day",
                "bucket",
                "key",
                "minute",
                "writer",
                "incarnation",
                "flush_seq",
                "part",
            ]
            .iter()
            .map(|c| statement.values.get(*c).cloned().unwrap_or_default())
            .collect();
            if let Some(first) = contents.insert(identity, statement.values.clone()) {
                resent += 1;
                assert_eq!(
                    first, statement.values,
                    "a ledger row re-sent with other values"
                );
            }
        }
    }
    assert!(
        ledger_requests > 0 && resent > 0,
        "timeouts made the gate re-send ({resent} of {ledger_requests})"
    );
    let counts = writer.ledger.exact_ledger();
    assert!(
        counts.writes[&countersink::sink::OutcomeClass::Unknown] > 0,
        "{counts:?}"
    );
    let a = writer.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert!(a.minute.unknown != 0, "counter faults left unknown writes");
    store.shutdown().await;
}

/// Issue test 4: while the ledger table is unavailable, the counter tables receive no
/// write; once it returns, everything lands once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_outage_holds_every_counter_write_until_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = exact_config(dir.path());
    let store = start_cqlsim(&mut config, "makes one table unavailable").await;
    let server = store.sim();
    let t = tables(&config);
    let mut writer = Writer::start(&config).await;
    server.set_faults(vec![
        FaultRule::new(FaultKind::Unavailable).table(&t.ledger),
    ]);
    server.reset_stats();
    let mut fed: BTreeMap<(String, i16), i64> = BTreeMap::new();
    for flush in 0..5_i64 {
        let now = T0 - 600 + flush * 60;
        for i in 0..400_i64 {
            let key = format!("p{}", i % 40);
            writer.incr("page.views", &[("page_id", key.as_str())], 2, now);
            let minute = (now.rem_euclid(86_400) / 60) as i16;
            *fed.entry((format!("[\"{key}\"]"), minute)).or_default() += 2;
        }
        writer.flusher.flush_now().await;
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let stats = server.stats();
    for table in [&t.minute, &t.day] {
        let (ks, name) = table.split_once('.').unwrap();
        assert_eq!(
            stats.table(ks, name).write_requests,
            0,
            "{table} got a write during the outage"
        );
    }
    let (ks, name) = t.ledger.split_once('.').unwrap();
    assert!(
        stats.table(ks, name).write_requests > 0,
        "the ledger was tried"
    );
    assert_eq!(writer.ledger.exact_ledger().held_rows, 5 * 40);
    let a = writer.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!((a.minute.ledgered, a.minute.pending), (5 * 400 * 2, 0));
    assert_eq!((a.day.ledgered, a.day.pending), (5 * 400 * 2, 0));

    server.clear_faults();
    settle(&mut writer).await;
    assert_eq!(ledger_views(&read_ledger(&writer, &t.ledger).await), fed);
    let stored: i128 = crate::common::table_sum(server, &t.minute, "views");
    assert_eq!(stored, 5 * 400 * 2, "everything landed once");
    assert_eq!(crate::common::table_sum(server, &t.day, "views"), stored);
    let a = writer.accounting();
    assert_eq!((a.minute.applied, a.day.applied), (stored, stored));
    store.shutdown().await;
}

/// Rows still held for the ledger at the shutdown deadline are spilled, their ledger rows
/// kept verbatim in their held segment's header; the next start replays no spilled row
/// while those ledger rows are unconfirmed, then confirms them (no second formation) and
/// only then replays the rows: ledger and counters both end equal to what was fed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_held_at_the_shutdown_deadline_are_spilled_and_their_ledger_rows_confirmed_first() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = exact_config(dir.path());
    config.flush.shutdown_deadline = Duration::from_millis(500);
    let store = start_cqlsim(&mut config, "makes one table unavailable").await;
    let server = store.sim();
    let t = tables(&config);
    let waiting = || countersink::state::ledger_pending::load(dir.path()).expect("ledger rows");
    server.set_faults(vec![
        FaultRule::new(FaultKind::Unavailable).table(&t.ledger),
    ]);
    let writer = Writer::start(&config).await;
    let mut fed: BTreeMap<(String, i16), i64> = BTreeMap::new();
    let now = T0 - 600;
    for i in 0..400_i64 {
        let key = format!("p{}", i % 40);
        writer.incr("page.views", &[("page_id", key.as_str())], 1 + i % 3, now);
        let minute = (now.rem_euclid(86_400) / 60) as i16;
        *fed.entry((format!("[\"{key}\"]"), minute)).or_default() += 1 + i % 3;
    }
    let total: i64 = fed.values().sum();
    let Writer {
        engine,
        ledger,
        flusher,
        ..
    } = writer;
    flusher.finish().await;
    let a = countersink::telemetry::Accounting::read(&engine, &ledger);
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        (a.minute.spilled, a.day.spilled, a.minute.ledgered),
        (i128::from(total), i128::from(total), 0),
        "{a:?}"
    );
    assert!(!dir.path().join("ledger_pending.jsonl").exists());
    assert_eq!(
        waiting().len(),
        40,
        "one ledger row per key and minute, in the held segments"
    );
    let spilled: i64 = crate::common::spilled_records(dir.path())
        .iter()
        .map(|r| r["deltas"]["views"].as_i64().expect("views delta"))
        .sum();
    assert_eq!(spilled, 2 * total, "each row spilled for both tables");

    // The ledger is still down: the next start replays nothing.
    let mut writer = Writer::start(&config).await;
    for _ in 0..3 {
        writer.flusher.flush_now().await;
    }
    assert_eq!(crate::common::table_sum(server, &t.minute, "views"), 0);
    assert_eq!(crate::common::table_sum(server, &t.day, "views"), 0);
    assert_eq!(waiting().len(), 40, "the held segments stay");

    server.clear_faults();
    for _ in 0..40 {
        writer.flusher.flush_now().await;
        if crate::common::table_sum(server, &t.day, "views") == i128::from(total) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rows = read_ledger(&writer, &t.ledger).await;
    assert_eq!(
        rows.len(),
        40,
        "the stored ledger rows were sent again, not formed anew"
    );
    assert_eq!(ledger_views(&rows), fed);
    assert_eq!(
        crate::common::table_sum(server, &t.minute, "views"),
        i128::from(total)
    );
    assert_eq!(
        crate::common::table_sum(server, &t.day, "views"),
        i128::from(total)
    );
    assert!(
        waiting().is_empty(),
        "the held segments are gone once replayed"
    );
    store.shutdown().await;
}

/// Unknown counter writes while the outcomes table is unreachable, then a stop without a
/// final flush (a kill, as far as memory goes): the next start finds the records the table
/// may lack in the outcome logs (past `outcomes.mark`) and writes them; once written, the
/// mark moves on and a later start offers nothing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcome_rows_unwritten_at_a_kill_reach_the_outcomes_table_after_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = exact_config(dir.path());
    let store = start_cqlsim(&mut config, "injects faults on chosen tables").await;
    let server = store.sim();
    let t = tables(&config);
    let outcomes = format!("{}.outcomes", config.exact_keyspace());
    server.set_faults(vec![
        FaultRule::new(FaultKind::Unavailable).table(&outcomes),
        FaultRule::new(FaultKind::WriteTimeout)
            .applied(true)
            .table(&t.minute),
    ]);
    let mut writer = Writer::start(&config).await;
    for i in 0..30_i64 {
        let key = format!("p{}", i % 6);
        writer.incr("page.views", &[("page_id", key.as_str())], 1, T0 - 600);
    }
    writer.flusher.flush_now().await;
    let unknown_rows = std::fs::read_to_string(dir.path().join("unknown.jsonl"))
        .expect("unknown.jsonl")
        .lines()
        .count();
    assert!(unknown_rows >= 6, "{unknown_rows} unknown rows logged");
    let count = |server: &cqlsim::Server| {
        server
            .execute(None, &format!("SELECT request_id FROM {outcomes}"))
            .expect("select")
            .rows
            .len()
    };
    assert_eq!(count(server), 0, "the outcomes table was unreachable");
    drop(writer);

    server.clear_faults();
    let mut writer = Writer::start(&config).await;
    writer.flusher.flush_now().await;
    assert_eq!(
        count(server),
        unknown_rows,
        "every logged unknown row is in the table"
    );
    drop(writer);

    // Everything is written: a later start offers the table nothing.
    server.reset_stats();
    let mut writer = Writer::start(&config).await;
    writer.flusher.flush_now().await;
    let (ks, name) = outcomes.split_once('.').unwrap();
    assert_eq!(server.stats().table(ks, name).write_requests, 0);
    drop(writer);
    store.shutdown().await;
}

/// Issue test 5: transient counter failures while new increments arrive (the re-queued
/// rows merge with fresh ones of the same rows): the ledger still equals what was fed,
/// and once the failures stop, so do the counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_merges_leave_the_ledger_equal_to_what_was_fed() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = exact_config(dir.path());
    let store = start_cqlsim(&mut config, "injects transient faults").await;
    let server = store.sim();
    let t = tables(&config);
    let mut writer = Writer::start(&config).await;
    server.set_faults(vec![
        FaultRule::new(FaultKind::Unavailable)
            .table(&t.minute)
            .probability(0.5),
        FaultRule::new(FaultKind::Unavailable)
            .table(&t.day)
            .probability(0.5),
    ]);
    let mut fed: BTreeMap<(String, i16), i64> = BTreeMap::new();
    for flush in 0..8_i64 {
        // Two minutes, the same rows again and again.
        let now = T0 - 600 + (flush % 2) * 60;
        for i in 0..300_i64 {
            let key = format!("p{}", i % 10);
            writer.incr("page.views", &[("page_id", key.as_str())], 1 + i % 2, now);
            let minute = (now.rem_euclid(86_400) / 60) as i16;
            *fed.entry((format!("[\"{key}\"]"), minute)).or_default() += 1 + i % 2;
        }
        writer.flusher.flush_now().await;
    }
    let requeued: u64 = writer
        .ledger
        .writes()
        .iter()
        .filter(|((_, class), _)| *class == countersink::sink::OutcomeClass::Requeued)
        .map(|(_, n)| n)
        .sum();
    assert!(requeued > 0, "counter writes were re-queued");
    server.clear_faults();
    settle(&mut writer).await;
    let ledger = ledger_views(&read_ledger(&writer, &t.ledger).await);
    assert_eq!(ledger, fed);
    let total: i64 = fed.values().sum();
    assert_eq!(
        crate::common::table_sum(server, &t.minute, "views"),
        i128::from(total)
    );
    assert_eq!(
        crate::common::table_sum(server, &t.day, "views"),
        i128::from(total)
    );
    let a = writer.accounting();
    assert!(
        a.is_balanced() && a.of(Granularity::Minute).pending == 0,
        "{a:?}"
    );
    store.shutdown().await;
}

/// Rows dropped after their ledger rows were written (the final flush could not send
/// them and the spill is full) are in the ledger, so the outcomes table says they were
/// dropped: reconcile counts their drift as known missing (`explained`), never as
/// `unexplained`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_dropped_after_their_ledger_rows_are_known_missing() {
    use countersink::ops::reconcile::{self, verdict::Status};
    let dir = tempfile::tempdir().unwrap();
    let mut config = exact_config(dir.path());
    config.state.max_spill_bytes = 1;
    let store = start_cqlsim(&mut config, "makes the minute table unavailable").await;
    let server = store.sim();
    let t = tables(&config);
    let outcomes = format!("{}.outcomes", config.exact_keyspace());
    server.set_faults(vec![
        FaultRule::new(FaultKind::Unavailable).table(&t.minute),
    ]);
    let writer = Writer::start(&config).await;
    let at = T0 - 600;
    let mut total = 0;
    for i in 0..60_i64 {
        let key = format!("p{}", i % 6);
        writer.incr("page.views", &[("page_id", key.as_str())], 1 + i % 4, at);
        total += 1 + i % 4;
    }
    let Writer {
        engine,
        ledger,
        flusher,
        session,
        ..
    } = writer;
    let report = flusher.finish().await;
    assert!(report.dropped > 0, "{report:?}");
    let a = countersink::telemetry::Accounting::read(&engine, &ledger);
    assert_eq!(a.minute.dropped, i128::from(total), "{a:?}");
    drop(session);

    server.clear_faults();
    let mut writer = Writer::start(&config).await;
    writer.flusher.flush_now().await;
    assert_eq!(crate::common::table_sum(server, &t.minute, "views"), 0);
    assert_eq!(
        crate::common::table_sum(server, &t.day, "views"),
        i128::from(total)
    );
    let rows = read_ledger(&writer, &t.ledger).await;
    assert_eq!(
        ledger_views(&rows).values().sum::<i64>(),
        total,
        "the ledger recorded every delta fed"
    );
    let dropped = server
        .execute(None, &format!("SELECT outcome FROM {outcomes}"))
        .expect("select")
        .rows
        .iter()
        .filter(|row| matches!(&row[0], Some(cqlsim::Value::Text(o)) if o == "dropped"))
        .count();
    assert_eq!(dropped, 6, "one dropped outcome row per key's minute row");

    let families = countersink::family::Families::from_config(&config).unwrap();
    let options = reconcile::Options {
        day: countersink::bucket::Day((at / 86_400) as u32),
        tags: Vec::new(),
        threshold: 0.0,
        now_unix_secs: at + 3 * 86_400,
        concurrency: 8,
        max_listed: reconcile::MAX_LISTED,
        slice: None,
    };
    let report = reconcile::reconcile(
        &writer.session,
        &config,
        families.by_name("views").unwrap(),
        &options,
        &|_| {},
    )
    .await
    .expect("reconcile");
    assert!(report.passes(), "{:?}", report.summary);
    let minute: Vec<_> = report
        .keys
        .iter()
        .filter(|k| k.granularity == "minute")
        .collect();
    assert_eq!(minute.len(), 6, "{:?}", report.keys);
    assert!(
        minute.iter().all(|k| k.status == Status::Explained),
        "{minute:?}"
    );
    drop(writer);
    store.shutdown().await;
}

/// Appends durable increments of `page.views`, (page, delta) each, in the minute of
/// `now`, to the writer's ingest log as an answered request leaves them; adds them to
/// `fed` per (key, minute of day).
fn log_views(
    writer: &Writer,
    views: &[(&str, i64)],
    now: i64,
    fed: &mut BTreeMap<(String, i16), i64>,
) {
    let mut lines = Vec::new();
    for &(page, delta) in views {
        countersink::state::ingest_log::IngestEntry::write_line(
            &mut lines,
            "page.views",
            &[("page_id", page)],
            delta,
            u32::try_from(now / 60).unwrap(),
        );
        let minute = (now.rem_euclid(86_400) / 60) as i16;
        *fed.entry((format!("[\"{page}\"]"), minute)).or_default() += delta;
    }
    let log = writer.flusher.ingest_log().expect("a durable listener");
    log.append(&lines).expect("logged");
}

/// The minute counters of `views`, per (key, minute of day).
async fn stored_views(store: &crate::common::Store, t: &Tables) -> BTreeMap<(String, i16), i64> {
    let counters = store
        .select(&format!("SELECT page_id, minute, views FROM {}", t.minute))
        .await;
    let mut stored = BTreeMap::new();
    for row in 0..counters.len() {
        let key = counters.text(row, "page_id").expect("page_id");
        let minute = counters.get_i64(row, "minute").expect("minute") as i16;
        *stored.entry((format!("[\"{key}\"]"), minute)).or_default() +=
            counters.get_i64(row, "views").unwrap_or(0);
    }
    stored
}

/// Durable ingest into an exact family: the acknowledged increments reach the ledger as
/// well as the counters (a replayed row forms no ledger row, so the ingest log's segment
/// carries them), each once, across a kill between a flush and the next (the writer
/// dropped without its final flush) and the restart that sends the segment's ledger rows
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_increments_reach_the_ledger_and_the_counters_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = exact_config(dir.path());
    config.ingest.http.enabled = true;
    config.ingest.http.durable = true;
    let store = start_cqlsim(&mut config, "a writer killed and started again").await;
    let t = tables(&config);
    let mut writer = Writer::start(&config).await;
    let mut fed = BTreeMap::new();
    log_views(
        &writer,
        &[("a", 3), ("b", -1), ("a", 4)],
        T0 - 120,
        &mut fed,
    );
    writer.flusher.flush_now().await;
    // Steady traffic: every round moves a new segment, whose ledger rows must not keep
    // the replay of the earlier ones waiting.
    let first = fed.clone();
    for _ in 0..3 {
        log_views(&writer, &[("c", 5)], T0 - 60, &mut fed);
        writer.flusher.flush_now().await;
    }
    let stored = stored_views(&store, &t).await;
    assert!(
        first.iter().all(|(k, v)| stored.get(k) == Some(v)),
        "the first request is written while traffic goes on: {stored:?}"
    );
    settle(&mut writer).await;
    assert_eq!(stored_views(&store, &t).await, fed, "the counters");
    let rows = read_ledger(&writer, &t.ledger).await;
    assert_eq!(ledger_views(&rows), fed, "the ledger equals the counters");

    // Logged, moved into the spill by one flush, then a kill before the next.
    log_views(&writer, &[("a", 10), ("d", 2)], T0 - 60, &mut fed);
    writer.flusher.flush_now().await;
    drop(writer);
    let mut again = Writer::start(&config).await;
    for _ in 0..3 {
        again.flusher.flush_now().await;
    }
    settle(&mut again).await;
    assert_eq!(stored_views(&store, &t).await, fed, "the counters, once");
    let rows = read_ledger(&again, &t.ledger).await;
    assert_eq!(ledger_views(&rows), fed, "the ledger, once");
    let a = again.accounting();
    assert!(a.is_balanced(), "{a:?}");
    store.shutdown().await;
}
