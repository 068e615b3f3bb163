//! Test hooks, compiled in with the `dev` feature only (a production build has none).
//!
//! - `COUNTERSINK_CRASH_POINT=NAME` (or `NAME:N`, the Nth time): when the process reaches
//!   the named step it prints `countersink: crash point NAME reached` on stderr and stops
//!   there, so a test can kill it (SIGKILL) at exactly that step. The names are listed
//!   with the crash windows in docs/src/architecture/journal.md.
//!
//! Nothing here changes what the process writes or sends: the crash tests check the
//! journal, logs and spill exactly as a production build leaves them.

/// Stops here if `COUNTERSINK_CRASH_POINT` names this step (feature `dev` only).
#[cfg(feature = "dev")]
pub fn crash_point(name: &'static str) {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static TARGET: OnceLock<Option<(String, u64)>> = OnceLock::new();
    static HITS: AtomicU64 = AtomicU64::new(0);
    let target = TARGET.get_or_init(|| {
        let value = std::env::var("COUNTERSINK_CRASH_POINT").ok()?;
        Some(match value.split_once(':') {
            Some((name, n)) => (name.to_owned(), n.parse().unwrap_or(1)),
            None => (value, 1),
        })
    });
    let Some((target, nth)) = target else {
        return;
    };
    if target != name || HITS.fetch_add(1, Ordering::Relaxed) + 1 != *nth {
        return;
    }
    eprintln!("countersink: crash point {name} reached");
    let park = || loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    };
    // On a runtime worker, hand its other tasks (the metrics endpoint the test polls
    // among them) to the other workers first: a task left in this worker's queue would
    // never run again, and the test would wait for it instead of killing the process.
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(park),
        _ => park(),
    }
}

/// Without the `dev` feature: nothing.
#[cfg(not(feature = "dev"))]
#[inline(always)]
pub fn crash_point(_name: &'static str) {}
