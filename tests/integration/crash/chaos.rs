//! The crash-chaos test: many iterations of random faults, a SIGKILL at a random moment
//! (or at a random crash point), and a restart on the same state directory; then a
//! clean stop and the checker. `CHAOS_ITERATIONS` (default 50) and `CHAOS_SEED` choose
//! the run; by hand:
//!
//! ```sh
//! CHAOS_ITERATIONS=500 cargo test --release --test integration crash::chaos -- --nocapture
//! ```

use std::time::Duration;

use cqlsim::{FaultKind, FaultRule};

use super::check::check;
use super::harness::{Rig, Settings};

const POINTS: [&str; 9] = [
    "drained",
    "journal_committed",
    "sent",
    "settled_in_memory",
    "spill_written",
    "logs_appended",
    "ended",
    "replay_loaded",
    "replay_cursor_committed",
];

pub(super) fn random_faults(rng: &mut fastrand::Rng) -> Vec<FaultRule> {
    let p = [0.1, 0.3, 0.6][rng.usize(..3)];
    let rule = |kind| FaultRule::new(kind).probability(p);
    let mut faults = Vec::new();
    for _ in 0..rng.usize(0..3) {
        faults.push(match rng.usize(..9) {
            0 => rule(FaultKind::Unavailable),
            1 => rule(FaultKind::WriteTimeout).applied(rng.bool()),
            2 => rule(FaultKind::Overloaded).applied(rng.bool()),
            3 => rule(FaultKind::ServerError).applied(rng.bool()),
            4 => rule(FaultKind::Bootstrapping),
            5 => rule(FaultKind::Delay).duration(Duration::from_millis(rng.u64(50..700))),
            6 => rule(FaultKind::Close).applied(rng.bool()),
            7 => rule(FaultKind::NoReply).applied(rng.bool()),
            _ => rule(FaultKind::WriteFailure).applied(rng.bool()),
        });
    }
    faults
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_chaos() {
    let iterations: u64 = std::env::var("CHAOS_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let seed: u64 = std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_261_130);
    let mut rng = fastrand::Rng::with_seed(seed);
    let settings = Settings {
        requeue_max_age: "1s",
        ..Settings::default()
    };
    let mut rig = Rig::new(settings).await;
    for iteration in 0..iterations {
        rig.server().set_faults(random_faults(&mut rng));
        let point = (rng.u8(..10) < 3).then(|| POINTS[rng.usize(..POINTS.len())]);
        let increments: Vec<(u32, i64, i64)> = (0..rng.usize(10..60))
            .map(|_| (rng.u32(..20), rig.base + 60 * rng.i64(0..35), rng.i64(1..5)))
            .collect();
        let wait = Duration::from_millis(rng.u64(0..700));
        tokio::task::block_in_place(|| {
            let mut serve = rig.start(point);
            rig.feed(&mut serve, &increments);
            match point {
                Some(point) => {
                    let marker = format!("crash point {point} reached");
                    for _ in 0..40 {
                        if serve.logged(&marker) {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(25));
                    }
                }
                None => std::thread::sleep(wait),
            }
            rig.kill(serve);
        });
        if iteration % 10 == 9 {
            eprintln!("crash chaos: {} iterations so far", iteration + 1);
        }
    }
    rig.server().clear_faults();
    tokio::task::block_in_place(|| {
        let serve = rig.start(None);
        rig.settle_and_stop(serve);
    });
    let findings = check(&rig);
    println!(
        "crash chaos (seed {seed}): {iterations} iterations, {} kills, {} rows checked, {} requests logged unknown, {} received by the store, {} rows in flight at a kill; fed {}, lost from memory at kills {:?} (reported bound {:?}); largest unexplained difference beyond the bound: {}",
        rig.kills,
        findings.rows,
        findings.unknown_requests,
        findings.received,
        findings.in_flight_at_crash,
        rig.model.total(),
        findings.unexplained,
        findings.bound,
        findings.beyond_bound()
    );
    assert_eq!(findings.beyond_bound(), 0, "{findings:?}");
}
