//! Exact totals across a kill: the delta ledger and the outcomes table explain what a
//! SIGKILL with a flush in flight did to the counters, on cqlsim (its request log checked
//! too) and on any store (the real node too, the flight held by a fault proxy).

use std::sync::Arc;
use std::time::Duration;

use countersink::bucket::Day;
use countersink::config::Config;
use countersink::family::Families;
use countersink::ops::reconcile::{self, Options, verdict::Status};
use cqlsim::{FaultKind, FaultRule};

use super::check::check;
use super::harness::{Rig, Settings};
use crate::common::Swallow;

/// Issue test 6: the store applies a flush's minute writes but answers late; the writer
/// is killed with them in flight and restarted. Recovery logs them as in flight at the
/// crash, the restarted run writes them to the outcomes table, and reconcile explains
/// every key: the in-flight requests are resolved as applied, nothing is unexplained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_explains_a_kill_with_writes_in_flight() {
    let mut rig = Rig::new(Settings {
        exact: true,
        ..Settings::default()
    })
    .await;
    rig.server().set_faults(vec![
        FaultRule::new(FaultKind::Delay)
            .table("metrics.views_by_minute")
            .duration(Duration::from_secs(8)),
    ]);
    let increments: Vec<(u32, i64, i64)> = (0..40)
        .map(|i| ((i % 8) as u32, rig.base + (i % 3) * 60, 1 + i % 4))
        .collect();
    tokio::task::block_in_place(|| {
        let mut serve = rig.start(None);
        rig.feed(&mut serve, &increments);
        for _ in 0..400 {
            let applied = rig
                .server()
                .request_log()
                .iter()
                .filter(|r| r.applied && r.statements.iter().any(|s| s.table == "views_by_minute"))
                .count();
            if applied >= 8 {
                break;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        rig.kill(serve);
    });
    rig.server().clear_faults();
    tokio::task::block_in_place(|| {
        let serve = rig.start(None);
        rig.settle_and_stop(serve);
    });
    let findings = check(&rig);
    assert!(findings.in_flight_at_crash >= 8, "{findings:?}");
    assert_eq!(findings.beyond_bound(), 0, "{findings:?}");

    let mut config = Config::from_file(rig.config_file()).expect("config");
    config.store.contact_points = vec![rig.server().local_addr().to_string()];
    let session = Arc::new(
        countersink::sink::cql::session::connect(&config.store)
            .await
            .expect("session"),
    );
    reconcile_explains_the_flight(&session, &config, rig.base).await;
}

/// Issue test 6 on any store (the real node too): the fault proxy in front of the store
/// forwards the minute writes and holds back the store's answers; `serve` is killed once
/// the store has answered at least 8 of them (so applied them) while they are still in
/// flight for `serve` (its request timeout is far off), then restarted. Recovery logs
/// them as in flight at the crash, the restarted run writes them to the outcomes table,
/// and reconcile explains every key: each in-flight request resolved as applied, no
/// drift, nothing unexplained.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_explains_a_kill_with_writes_in_flight_on_any_store() {
    let mut rig = Rig::on_any_store(Settings {
        exact: true,
        request_timeout: "30s",
        ..Settings::default()
    })
    .await;
    let minute_table = rig.proxied().0.table("metrics.views_by_minute");
    rig.proxied()
        .1
        .swallow(&minute_table, Swallow::Answer, u32::MAX);
    let increments: Vec<(u32, i64, i64)> = (0..40)
        .map(|i| ((i % 8) as u32, rig.base + (i % 3) * 60, 1 + i % 4))
        .collect();
    tokio::task::block_in_place(|| {
        let mut serve = rig.start(None);
        rig.feed(&mut serve, &increments);
        let answered = || {
            let log = rig.proxied().1.log();
            log.iter()
                .filter(|s| s.answer_opcode == Some(RESULT))
                .count()
        };
        for _ in 0..400 {
            if answered() >= 8 {
                break;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        assert!(answered() >= 8, "{:?}", rig.proxied().1.log());
        rig.kill(serve);
    });
    rig.proxied().1.clear();
    tokio::task::block_in_place(|| {
        let serve = rig.start(None);
        rig.settle_and_stop(serve);
    });

    let (store, _) = rig.proxied();
    let mut config = Config::from_file(rig.config_file()).expect("config");
    config.store.contact_points = vec![store.contact_point()];
    let session = Arc::new(
        countersink::sink::cql::session::connect(&config.store)
            .await
            .expect("session"),
    );
    reconcile_explains_the_flight(&session, &config, rig.base).await;
    // What the keys hold is what was fed: the model's minute rows, summed.
    let fed: i64 = increments.iter().map(|(_, _, d)| d).sum();
    assert_eq!(
        store.table_sum("metrics.views_by_minute", "views").await,
        i128::from(fed)
    );
    drop(session);
    rig.shutdown().await;
}

/// The shutdown deadline passes with the delta ledger unreachable: the final flush writes
/// the held rows, their ledger rows in the header, to their held segment in one atomic
/// step; `serve` is killed right after (`ledger_held_spilled`), before the rest of the
/// final flush. The next start confirms the ledger rows, then replays the rows once:
/// every fed row is in the counters once, and reconcile finds every key `ok`. (While the
/// rows waited in memory for the end of the final flush, this kill lost them and the next
/// start still confirmed their ledger rows: drift `unexplained`. While the ledger rows
/// went to `ledger_pending.jsonl` in a write of their own, a kill between the two writes
/// did the same.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_in_the_final_flush_after_the_held_segment_loses_no_held_row() {
    let mut rig = Rig::new(Settings {
        exact: true,
        shutdown_deadline: "1s",
        ..Settings::default()
    })
    .await;
    let mut config = Config::from_file(rig.config_file()).expect("config");
    let ledger = format!("{}.delta_ledger", config.exact_keyspace());
    rig.server()
        .set_faults(vec![FaultRule::new(FaultKind::Unavailable).table(&ledger)]);
    let increments: Vec<(u32, i64, i64)> = (0..40)
        .map(|i| ((i % 8) as u32, rig.base + (i % 3) * 60, 1 + i % 4))
        .collect();
    tokio::task::block_in_place(|| {
        let mut serve = rig.start(Some("ledger_held_spilled"));
        rig.feed(&mut serve, &increments);
        serve.request_stop();
        serve.wait_for(
            "crash point ledger_held_spilled reached",
            Duration::from_secs(30),
        );
        rig.kill(serve);
    });
    assert!(!rig.state().join("ledger_pending.jsonl").exists());
    let waiting = countersink::state::ledger_pending::load(rig.state()).expect("ledger rows");
    assert!(!waiting.is_empty(), "in the held segment's header");
    let fed: i64 = increments.iter().map(|(_, _, d)| d).sum();
    assert_eq!(
        rig.lost_bound,
        [i128::from(fed); 2],
        "the lost-at-crash figure of a kill in the final flush covers all it held"
    );
    rig.server().clear_faults();
    tokio::task::block_in_place(|| {
        let serve = rig.start(None);
        rig.settle_and_stop(serve);
    });
    let findings = check(&rig);
    assert_eq!(
        findings.unexplained,
        [0, 0],
        "no held row lost: {findings:?}"
    );
    for table in ["metrics.views_by_minute", "metrics.views_by_day"] {
        assert_eq!(
            crate::common::table_sum(rig.server(), table, "views"),
            i128::from(fed),
            "{table}: every row once"
        );
    }

    config.store.contact_points = vec![rig.server().local_addr().to_string()];
    let session = Arc::new(
        countersink::sink::cql::session::connect(&config.store)
            .await
            .expect("session"),
    );
    let report = reconcile_day(&session, &config, rig.base).await;
    let summary = &report.summary;
    assert!(
        report.keys.is_empty(),
        "only keys that are not ok are listed: {report:?}"
    );
    assert_eq!(summary.keys, 8, "{summary:?}");
    assert_eq!(
        summary.statuses.get("ok"),
        Some(&16),
        "minute and day: {summary:?}"
    );
    assert_eq!(
        summary.exact_total,
        i128::from(fed),
        "ledgered once: {summary:?}"
    );
    assert_eq!(summary.drift_unexplained, 0, "{summary:?}");
    assert!(report.passes());
}

/// Reconciles the rig's day (the `views` family) as if it had closed.
async fn reconcile_day(
    session: &Arc<scylla::client::session::Session>,
    config: &Config,
    base: i64,
) -> reconcile::Report {
    let families = Families::from_config(config).unwrap();
    let options = Options {
        day: Day((base / 86_400) as u32),
        tags: Vec::new(),
        threshold: 0.0,
        // As if the day had closed: it is today's.
        now_unix_secs: base + 3 * 86_400,
        concurrency: 4,
        max_listed: reconcile::MAX_LISTED,
        slice: None,
    };
    reconcile::reconcile(
        session,
        config,
        families.by_name("views").unwrap(),
        &options,
        &|_| {},
    )
    .await
    .expect("reconcile")
}

/// Reconciles the rig's day as if it had closed and checks that the kill is explained:
/// the 8 keys' minute rows carry at least 8 unknown requests (the flight, through the
/// outcomes table), each resolved as applied, no drift, nothing unexplained.
async fn reconcile_explains_the_flight(
    session: &Arc<scylla::client::session::Session>,
    config: &Config,
    base: i64,
) {
    let report = reconcile_day(session, config, base).await;
    let minute: Vec<_> = report
        .keys
        .iter()
        .filter(|k| k.granularity == "minute")
        .collect();
    assert_eq!(minute.len(), 8, "{report:?}");
    let in_flight: usize = minute.iter().map(|k| k.unknown_requests).sum();
    assert!(
        in_flight >= 8,
        "the in-flight requests reached the outcomes table: {report:?}"
    );
    for key in &report.keys {
        assert!(
            matches!(key.status, Status::Ok | Status::Resolved),
            "{key:?}"
        );
        assert!(key.resolution.values().all(|applied| *applied), "{key:?}");
        assert!(key.drift.values().all(|d| *d == 0), "{key:?}");
    }
    assert!(
        report.summary.unknowns_resolved >= 8,
        "{:?}",
        report.summary
    );
    assert!(report.passes());
}

/// The opcode of a successful answer (CQL v4 RESULT).
const RESULT: u8 = 0x08;
