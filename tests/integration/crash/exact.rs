//! Exact totals across a kill: the delta ledger and the outcomes table explain what a
//! SIGKILL with a flush in flight did to the counters.

use std::sync::Arc;
use std::time::Duration;

use countersink::bucket::Day;
use countersink::config::Config;
use countersink::family::Families;
use countersink::ops::reconcile::{self, Options, verdict::Status};
use cqlsim::{FaultKind, FaultRule};

use super::check::check;
use super::harness::{Rig, Settings};

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
    rig.server.set_faults(vec![
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
                .server
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
    rig.server.clear_faults();
    tokio::task::block_in_place(|| {
        let serve = rig.start(None);
        rig.settle_and_stop(serve);
    });
    let findings = check(&rig);
    assert!(findings.in_flight_at_crash >= 8, "{findings:?}");
    assert_eq!(findings.beyond_bound(), 0, "{findings:?}");

    let mut config = Config::from_file(rig.config_file()).expect("config");
    config.store.contact_points = vec![rig.server.local_addr().to_string()];
    let session = Arc::new(
        countersink::sink::cql::session::connect(&config.store)
            .await
            .expect("session"),
    );
    let families = Families::from_config(&config).unwrap();
    let options = Options {
        day: Day((rig.base / 86_400) as u32),
        tags: Vec::new(),
        threshold: 0.0,
        // As if the day had closed: it is today's.
        now_unix_secs: rig.base + 3 * 86_400,
        concurrency: 4,
        max_listed: reconcile::MAX_LISTED,
    };
    let report = reconcile::reconcile(
        &session,
        &config,
        families.by_name("views").unwrap(),
        &options,
        &|_| {},
    )
    .await
    .expect("reconcile");
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
