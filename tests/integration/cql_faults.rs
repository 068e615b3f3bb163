//! Every fault cqlsim can inject, with `applied=yes` and `applied=no` wherever both
//! exist, at 10 % of writes during a 50k-increment run, checked against the store's own
//! truth:
//!
//! - the accounting identity holds exactly, for minute and day tables;
//! - per row of both tables, against a model of what the test fed, the store's request
//!   log and the outcome records (see `crash::check`; the journal as it ships, which
//!   keeps no settled flush): nothing stored beyond what was
//!   fed, every acknowledged write stored, each fed delta in at most one request that may
//!   have applied (a re-sent unknown write fails this whether or not the store applied
//!   it), each request received at most once and exactly once when the store answered
//!   it, every record once, and every missing delta explained by a record;
//! - every minute row was written in one flush only, so its stored value is either its
//!   whole delta or nothing;
//! - transient failures end up applied.
//!
//! Every case runs twice: against cqlsim posing as Apache Cassandra and as ScyllaDB.
//! They differ where the stores differ: a ScyllaDB counter leader applies a write, then
//! may answer `Unavailable`, so there it is an unknown outcome, never re-sent.

use std::collections::HashMap;
use std::time::Duration;

use countersink::vocabulary::Granularity;
use cqlsim::{FaultKind, FaultRule, Persona};

use crate::common::{T0, Writer, config, day_and_minute, start_cqlsim, start_cqlsim_as, table_sum};
use crate::crash::check::{Model, check_views};

const PERSONAS: [Persona; 2] = [Persona::Cassandra, Persona::Scylla];

const KEYS: usize = 200;
const FLUSHES: i64 = 10;
const INCREMENTS: usize = 50_000;

/// Runs the case under both personas, with the same expectations.
async fn run(rule: FaultRule, expect_unknown: bool, expect_requeued: bool) {
    for persona in PERSONAS {
        run_as(persona, rule.clone(), expect_unknown, expect_requeued).await;
    }
}

/// Runs 50k increments over 10 flushes (one minute each) with `rule` active, then heals
/// the store and flushes until nothing is pending, and checks the store's truth.
async fn run_as(persona: Persona, rule: FaultRule, expect_unknown: bool, expect_requeued: bool) {
    let name = format!("{} applied={} ({persona})", rule.kind.name(), rule.applied);
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    // Short where the fault makes requests hang (no reply, a closed connection), so the
    // run ends soon; where no outcome may be unknown, long enough that a loaded machine
    // cannot turn a slow answer into a client timeout, which the test would then count
    // against the product.
    config.store.request_timeout = if expect_unknown {
        Duration::from_millis(300)
    } else {
        Duration::from_secs(5)
    };
    config.flush.max_in_flight = 32;
    let store = start_cqlsim_as(
        &mut config,
        "injects faults and checks the store's request log",
        persona,
    )
    .await;
    let server = store.sim();
    server.enable_request_log();
    let mut writer = Writer::start(&config).await;
    server.reset_stats();
    let kind = rule.kind;
    server.add_fault(rule.probability(0.1));

    let mut expected: HashMap<(usize, i64), i64> = HashMap::new();
    let mut model = Model::default();
    let per_flush = INCREMENTS / FLUSHES as usize;
    for flush in 0..FLUSHES {
        let now = T0 - 3600 + flush * 60;
        for i in 0..per_flush {
            let key = i % KEYS;
            let delta = (i % 3) as i64 + 1;
            writer.incr("page.views", &[("page_id", &format!("p{key}"))], delta, now);
            *expected.entry((key, now / 60)).or_default() += delta;
            model.feed(key as u32, now, delta);
        }
        writer.flusher.flush_now().await;
    }
    server.clear_faults();
    server.node_up();
    for _ in 0..20 {
        if writer.engine.aggregator().pending_rows() == 0 {
            break;
        }
        // Connections closed by a fault come back on the driver's reconnect schedule.
        tokio::time::sleep(Duration::from_millis(200)).await;
        writer.flusher.flush_now().await;
    }

    let a = writer.accounting();
    assert!(a.is_balanced(), "{name}: {a:?}");
    assert_eq!(
        (a.minute.pending, a.day.pending),
        (0, 0),
        "{name}: everything settled"
    );
    assert_eq!(
        a.minute.accepted,
        expected.values().map(|v| i128::from(*v)).sum::<i128>()
    );

    let stats = server.stats();
    for (table, column, kind) in [
        ("metrics.views_by_minute", "views", Granularity::Minute),
        ("metrics.views_by_day", "views", Granularity::Day),
    ] {
        let stored = table_sum(server, table, column);
        let stages = a.of(kind);
        assert!(
            stages.applied <= stored && stored <= stages.applied + stages.unknown,
            "{name} {table}: applied {} <= stored {stored} <= applied + unknown {}",
            stages.applied,
            stages.applied + stages.unknown
        );
        let (ks, t) = table.split_once('.').unwrap();
        assert_eq!(
            stats.table(ks, t).counter_delta_sum,
            stored,
            "{name} {table}: the store's own sum"
        );
    }
    for ((key, minute), delta) in &expected {
        let (day, minute_of_day) = day_and_minute(minute * 60);
        let stored = crate::common::cell(
            server,
            "metrics.views_by_minute",
            "views",
            &format!("page_id = 'p{key}' AND day = '{day}' AND minute = {minute_of_day}"),
        )
        .unwrap_or(0);
        assert!(
            stored == *delta || stored == 0,
            "{name}: row p{key}@{minute} holds {stored}, sent {delta}"
        );
    }
    let findings = check_views(server, dir.path(), &model, [0, 0]);
    assert_eq!(
        findings.unexplained,
        [0, 0],
        "{name}: nothing is lost without a crash"
    );
    let fired = stats.fault(kind).fired;
    assert!(fired > 0, "{name}: the fault fired");
    if expect_unknown {
        assert!(
            a.minute.unknown + a.day.unknown > 0,
            "{name}: unknown outcomes recorded"
        );
        let log = std::fs::read_to_string(dir.path().join("unknown.jsonl")).unwrap();
        assert!(log.lines().count() > 0);
    } else {
        assert_eq!(
            a.minute.unknown + a.day.unknown,
            0,
            "{name}: no unknown outcome"
        );
    }
    if expect_requeued {
        let requeued: u64 = writer
            .ledger
            .writes()
            .iter()
            .filter(|((_, o), _)| o.label() == "requeued")
            .map(|(_, n)| n)
            .sum();
        assert!(requeued > 0, "{name}: transient failures were re-queued");
        assert_eq!(
            a.minute.applied, a.minute.accepted,
            "{name}: and all ended up applied"
        );
        assert_eq!(
            a.day.applied, a.day.accepted,
            "{name}: and all ended up applied"
        );
    }
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_timeout_applied_and_not() {
    run(
        FaultRule::new(FaultKind::WriteTimeout).applied(true),
        true,
        false,
    )
    .await;
    run(FaultRule::new(FaultKind::WriteTimeout), true, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_failure_applied_and_not_is_unknown() {
    run(
        FaultRule::new(FaultKind::WriteFailure).applied(true),
        true,
        false,
    )
    .await;
    run(FaultRule::new(FaultKind::WriteFailure), true, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_timeout_on_a_write_applied_and_not_is_unknown() {
    run(
        FaultRule::new(FaultKind::ReadTimeout).applied(true),
        true,
        false,
    )
    .await;
    run(FaultRule::new(FaultKind::ReadTimeout), true, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_and_bootstrapping_are_resent_until_applied() {
    run_as(
        Persona::Cassandra,
        FaultRule::new(FaultKind::Unavailable),
        false,
        true,
    )
    .await;
    run(FaultRule::new(FaultKind::Bootstrapping), false, true).await;
}

/// ScyllaDB's counter leader applies, then may answer `Unavailable`: there, and for a
/// store that applied before answering whatever it is, the write is unknown and never
/// re-sent (re-sending it counted it twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_after_applying_is_unknown_on_scylladb() {
    run_as(
        Persona::Scylla,
        FaultRule::new(FaultKind::Unavailable),
        true,
        false,
    )
    .await;
    run_as(
        Persona::Scylla,
        FaultRule::new(FaultKind::Unavailable).applied(true),
        true,
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overloaded_applied_and_not_is_unknown() {
    run(
        FaultRule::new(FaultKind::Overloaded).applied(true),
        true,
        false,
    )
    .await;
    run(FaultRule::new(FaultKind::Overloaded), true, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_error_applied_and_not_is_unknown() {
    run(
        FaultRule::new(FaultKind::ServerError).applied(true),
        true,
        false,
    )
    .await;
    run(FaultRule::new(FaultKind::ServerError), true, false).await;
}

/// The node goes down under a request (applied first, or not) for a short while: that
/// request's connection breaks (unknown), later ones find no connection (re-queued).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_down_under_a_request_applied_and_not() {
    for applied in [true, false] {
        run(
            FaultRule::new(FaultKind::Down)
                .applied(applied)
                .duration(Duration::from_millis(300))
                .max(3),
            true,
            false,
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_reply_is_a_client_timeout_and_unknown() {
    run(
        FaultRule::new(FaultKind::NoReply).applied(true),
        true,
        false,
    )
    .await;
    run(FaultRule::new(FaultKind::NoReply), true, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_closed_before_or_after_applying_is_unknown() {
    run(FaultRule::new(FaultKind::Close).applied(true), true, false).await;
    run(FaultRule::new(FaultKind::Close), true, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_and_lost_prepared_cache_apply_everything() {
    run(
        FaultRule::new(FaultKind::Delay).duration(Duration::from_millis(20)),
        false,
        false,
    )
    .await;
    run(FaultRule::new(FaultKind::Unprepared), false, false).await;
}

/// The node goes away for a while: writes fail before they are sent, are re-queued, and
/// are applied once it is back. Nothing lost, nothing doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_down_then_back_loses_and_doubles_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.store.request_timeout = Duration::from_millis(500);
    let store = start_cqlsim(&mut config, "takes the node down and up").await;
    let server = store.sim();
    let mut writer = Writer::start(&config).await;
    for i in 0..300 {
        writer.incr("req", &[("k", &format!("{}", i % 30))], 1, T0 - 600);
    }
    writer.flusher.flush_now().await;
    server.node_down();
    // Let the driver see its connections close; a request written to a socket the
    // server has already closed would be an unknown outcome (and is tested above).
    for _ in 0..200 {
        let state = writer.session.get_cluster_state();
        if state
            .get_nodes_info()
            .iter()
            .all(|node| !node.is_connected())
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    for i in 0..300 {
        writer.incr("req", &[("k", &format!("{}", i % 30))], 2, T0 - 540);
    }
    let down = writer.flusher.flush_now().await;
    assert_eq!(down.applied, 0, "{down:?}");
    assert!(down.requeued > 0, "{down:?}");
    server.node_up();
    for _ in 0..50 {
        if writer.engine.aggregator().pending_rows() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        writer.flusher.flush_now().await;
    }
    let a = writer.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(a.minute.unknown + a.day.unknown, 0, "{a:?}");
    assert_eq!(
        table_sum(server, "countersink.counts_by_minute", "value"),
        900
    );
    assert_eq!(table_sum(server, "countersink.counts_by_day", "value"), 900);
    store.shutdown().await;
}
