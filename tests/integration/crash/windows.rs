//! One test per crash window (docs/src/architecture/journal.md lists them): the child stops at the named step
//! (a test-only crash point), is killed there, and a restart must leave no row sent
//! twice, no record duplicated and nothing unaccounted.

use std::time::Duration;

use cqlsim::{FaultKind, FaultRule};

use super::check::{Findings, check};
use super::harness::{Rig, Settings};

fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// 40 increments over 8 pages and 3 minutes.
fn increments(base: i64, round: i64) -> Vec<(u32, i64, i64)> {
    (0..40)
        .map(|i| ((i % 8) as u32, base + (i % 3) * 60 + round * 180, 1 + i % 4))
        .collect()
}

/// Feeds with `faults` in force, stops at `point`, kills, restarts clean, stops, checks.
async fn kill_at(point: &str, settings: Settings, faults: Vec<FaultRule>) -> (Rig, Findings) {
    let mut rig = Rig::new(settings).await;
    rig.server().set_faults(faults);
    blocking(|| {
        let mut serve = rig.start(Some(point));
        rig.feed(&mut serve, &increments(rig.base, 0));
        serve.wait_for(
            &format!("crash point {point} reached"),
            Duration::from_secs(20),
        );
        rig.kill(serve);
    });
    rig.server().clear_faults();
    blocking(|| {
        let serve = rig.start(None);
        rig.settle_and_stop(serve);
    });
    let findings = check(&rig);
    assert_eq!(findings.beyond_bound(), 0, "{point}: {findings:?}");
    (rig, findings)
}

fn all_writes(kind: FaultKind) -> FaultRule {
    FaultRule::new(kind).table("metrics.views_by_minute")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_drain_before_the_group_commit() {
    let (_, findings) = kill_at("drained", Settings::default(), Vec::new()).await;
    assert!(
        findings.unexplained[0] > 0 && findings.in_flight_at_crash == 0,
        "the drained rows were lost from memory, never sent, and reported: {findings:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_group_commit_before_the_first_send() {
    let (rig, findings) = kill_at("journal_committed", Settings::default(), Vec::new()).await;
    // Its requests may have been sent (recovery cannot know): unknown, and never sent
    // since, so the store saw none of them.
    assert!(findings.in_flight_at_crash > 0, "{findings:?}");
    assert_eq!(
        rig.server()
            .stats()
            .table("metrics", "views_by_minute")
            .write_requests,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_every_outcome_before_the_settle_step() {
    let faults = vec![
        all_writes(FaultKind::Unavailable).probability(0.3),
        all_writes(FaultKind::WriteTimeout)
            .applied(true)
            .probability(0.3),
    ];
    kill_at("sent", Settings::default(), faults).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_settle_decisions_before_any_file() {
    let faults = vec![
        all_writes(FaultKind::Unavailable).probability(0.3),
        all_writes(FaultKind::WriteTimeout).probability(0.3),
        all_writes(FaultKind::ServerError)
            .applied(true)
            .probability(0.2),
    ];
    kill_at("settled_in_memory", Settings::default(), faults).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_between_recording_the_log_offsets_and_appending() {
    let faults = vec![all_writes(FaultKind::WriteTimeout).applied(true)];
    kill_at("logs_at_recorded", Settings::default(), faults).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_appending_outcome_records_before_the_end() {
    let faults = vec![
        all_writes(FaultKind::WriteTimeout)
            .applied(true)
            .probability(0.5),
        all_writes(FaultKind::Overloaded),
    ];
    kill_at("logs_appended", Settings::default(), faults).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_writing_a_spill_segment() {
    let settings = Settings {
        requeue_max_age: "1ms",
        ..Settings::default()
    };
    kill_at(
        "spill_written",
        settings,
        vec![all_writes(FaultKind::Unavailable)],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_end_of_a_flush() {
    kill_at("ended", Settings::default(), Vec::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_while_rotating_an_outcome_log() {
    let settings = Settings {
        max_log_bytes: 600,
        ..Settings::default()
    };
    let faults = vec![all_writes(FaultKind::WriteTimeout).applied(true)];
    let mut rig = Rig::new(settings).await;
    rig.server().set_faults(faults);
    blocking(|| {
        let mut serve = rig.start(Some("log_rotating"));
        // Several flushes' worth of unknown records: the log passes 600 bytes.
        for round in 0..4 {
            rig.feed(&mut serve, &increments(rig.base, round));
            std::thread::sleep(Duration::from_millis(300));
            if serve.logged("crash point log_rotating reached") {
                break;
            }
        }
        serve.wait_for("crash point log_rotating reached", Duration::from_secs(20));
        rig.kill(serve);
    });
    rig.server().clear_faults();
    blocking(|| {
        let serve = rig.start(None);
        rig.settle_and_stop(serve);
    });
    let findings = check(&rig);
    assert_eq!(findings.beyond_bound(), 0, "{findings:?}");
}

/// The first finding of the issue: a flush whose requests the store applied but answers
/// late is killed; every one of them must be in unknown.jsonl, none re-sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_with_applied_requests_in_flight() {
    let mut rig = Rig::new(Settings::default()).await;
    rig.server().set_faults(vec![
        FaultRule::new(FaultKind::Delay).duration(Duration::from_secs(8)),
    ]);
    blocking(|| {
        let mut serve = rig.start(None);
        rig.feed(&mut serve, &increments(rig.base, 0));
        for _ in 0..400 {
            if rig
                .server()
                .request_log()
                .iter()
                .filter(|r| r.applied)
                .count()
                >= 8
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        rig.kill(serve);
    });
    rig.server().clear_faults();
    blocking(|| {
        let serve = rig.start(None);
        rig.settle_and_stop(serve);
    });
    let findings = check(&rig);
    assert!(findings.in_flight_at_crash >= 8, "{findings:?}");
    assert_eq!(findings.beyond_bound(), 0, "{findings:?}");
}

/// A flush of 2,000 requests, two in flight and every reply 400 ms late, killed about a
/// second into sending (inside the first start window): only the requests that may have
/// started are logged unknown (the journal's start windows bound them); the rest were
/// never sent, are spilled by recovery and reach the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_early_in_a_large_flush_logs_unknown_only_what_may_have_started() {
    let mut rig = Rig::new(Settings {
        max_in_flight: 2,
        request_timeout: "10s",
        ..Settings::default()
    })
    .await;
    rig.server().set_faults(vec![
        FaultRule::new(FaultKind::Delay).duration(Duration::from_millis(400)),
    ]);
    // 1,000 pages, one minute each: 1,000 partitions in each table, one request each.
    let increments: Vec<(u32, i64, i64)> = (0..1000).map(|page| (page, rig.base, 1)).collect();
    blocking(|| {
        let mut serve = rig.start(None);
        rig.feed(&mut serve, &increments);
        for _ in 0..400 {
            if rig.server().request_log().len() >= 4 {
                break;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        assert!(
            rig.server().request_log().len() >= 4,
            "the flush never sent"
        );
        rig.kill(serve);
    });
    rig.server().clear_faults();
    blocking(|| {
        let serve = rig.start(None);
        rig.settle_and_stop(serve);
    });
    let findings = check(&rig);
    // One window is 256 requests (64 times two in flight, at least 256): a kill while
    // the first window is sending leaves at most that many unknown, not 2,000.
    assert!(
        (1..=256).contains(&findings.in_flight_at_crash),
        "{findings:?}"
    );
    assert_eq!(findings.beyond_bound(), 0, "{findings:?}");
}

/// Spilled rows from a previous run; the run that replays them is killed after loading
/// a chunk, or after making the cursor durable and before deleting the segment.
async fn kill_during_replay(point: &str) {
    let mut rig = Rig::new(Settings::default()).await;
    rig.server()
        .set_faults(vec![all_writes(FaultKind::Unavailable)]);
    blocking(|| {
        let mut serve = rig.start(None);
        rig.feed(&mut serve, &increments(rig.base, 0));
        // The final flush spills what the store refuses.
        rig.terminate_any(serve);
    });
    rig.server().clear_faults();
    blocking(|| {
        let serve = rig.start_until(Some(point), &format!("crash point {point} reached"));
        rig.kill(serve);
        let serve = rig.start(None);
        rig.settle_and_stop(serve);
    });
    let findings = check(&rig);
    assert_eq!(findings.beyond_bound(), 0, "{point}: {findings:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_loading_a_replay_chunk() {
    kill_during_replay("replay_loaded").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_replay_cursor_before_deleting_the_segment() {
    kill_during_replay("replay_cursor_written").await;
}

/// The window between the replay cursor and the journal's end: the flush's group is
/// still open, the cursor durable; nothing of the replayed chunk is sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_replay_cursor_before_the_journal_end() {
    kill_during_replay("replay_cursor_committed").await;
}

/// Right after the flush that replayed a chunk ended: the journal has started over, so
/// only `spill.cursor` says how far replay got.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_the_end_of_a_replaying_flush() {
    kill_during_replay("ended").await;
}

/// A replay chunk larger than a drain chunk (audit F4): a previous run spilled every row,
/// and the memory limit lets one drain chunk carry only about ten replayed rows. A kill
/// right after the first chunk of the replay ended loses no spilled row: each is in the
/// store once the next start has settled, none only in the memory of the killed run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_after_the_first_chunk_of_a_replay_loses_no_spilled_row() {
    let settings = Settings {
        max_pending_bytes: 9_000,
        ..Settings::default()
    };
    let mut rig = Rig::new(settings).await;
    rig.server()
        .set_faults(vec![all_writes(FaultKind::Unavailable)]);
    blocking(|| {
        let mut serve = rig.start(None);
        rig.feed(&mut serve, &increments(rig.base, 0));
        // The final flush spills what the store refuses.
        rig.terminate_any(serve);
    });
    rig.server().clear_faults();
    blocking(|| {
        let serve = rig.start_until(Some("ended"), "crash point ended reached");
        rig.kill(serve);
        let serve = rig.start(None);
        rig.settle_and_stop(serve);
    });
    let findings = check(&rig);
    assert_eq!(
        findings.unexplained,
        [0, 0],
        "a spilled row was lost: {findings:?}"
    );
}

/// A flush killed with mixed outcomes, then its recovery killed at a step of its own,
/// then recovery again.
async fn kill_during_recovery(point: &str) {
    let mut rig = Rig::new(Settings::default()).await;
    rig.server().set_faults(vec![
        all_writes(FaultKind::Unavailable).probability(0.4),
        all_writes(FaultKind::WriteTimeout)
            .applied(true)
            .probability(0.4),
    ]);
    blocking(|| {
        let mut serve = rig.start(Some("sent"));
        rig.feed(&mut serve, &increments(rig.base, 0));
        serve.wait_for("crash point sent reached", Duration::from_secs(20));
        rig.kill(serve);
    });
    rig.server().clear_faults();
    blocking(|| {
        let serve = rig.start_until(Some(point), &format!("crash point {point} reached"));
        rig.kill(serve);
        let serve = rig.start(None);
        rig.settle_and_stop(serve);
    });
    let findings = check(&rig);
    assert!(findings.unknown_requests + findings.received > 0);
    assert_eq!(findings.beyond_bound(), 0, "{point}: {findings:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_killed_before_its_spill() {
    kill_during_recovery("recovery_before_spill").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_killed_after_its_spill() {
    kill_during_recovery("recovery_spilled").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_killed_after_its_records() {
    kill_during_recovery("recovery_logged").await;
}

/// A final flush that can neither send nor spill (the spill is full) loses rows: the
/// stop is unclean, and the next start reports the figure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_flush_that_could_not_spill_is_an_unclean_stop() {
    let settings = Settings {
        max_spill_bytes: 1,
        ..Settings::default()
    };
    let mut rig = Rig::new(settings).await;
    rig.server()
        .set_faults(vec![all_writes(FaultKind::Unavailable)]);
    blocking(|| {
        let mut serve = rig.start(None);
        rig.feed(&mut serve, &increments(rig.base, 0));
        rig.terminate_any(serve);
        rig.account_unclean_stop();
    });
    rig.server().clear_faults();
    blocking(|| {
        let mut serve = rig.start(None);
        let text = serve.wait_metric(|t| t.contains("countersink_previous_stop_unclean 1"));
        assert!(
            !text.contains("countersink_previous_stop_pending_rows 0"),
            "{text}"
        );
        rig.settle_and_stop(serve);
    });
    let findings = check(&rig);
    assert!(findings.unexplained[0] > 0, "rows were lost: {findings:?}");
    assert_eq!(findings.beyond_bound(), 0, "{findings:?}");
}
