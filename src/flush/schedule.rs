//! When the next flush starts: every interval (± jitter) while the store applies writes,
//! backing off exponentially while it applies none.
//!
//! A flush that sent writes and had none applied (the store is down, unreachable, or
//! answering every write with an error) counts as a failure. Each consecutive failure
//! doubles the wait, up to `flush.max_backoff`; the first flush that applies anything
//! resets it. The wait while backing off is jittered ("equal jitter": between half the
//! back-off and all of it, never below the interval), so a fleet that lost the same
//! cluster at the same instant does not come back in lockstep, and there is never more
//! than one attempt per interval. Early flushes (memory pressure) are not taken while
//! backing off: against a failing store they would free nothing and only add requests.
//!
//! Pure and synchronous, time and randomness passed in, like the settle step. The driver
//! wrapper's flush loop runs on the same schedule: a flush tells it what it sent and what
//! applied as an [`Attempt`], which both flushes' reports convert into.

use std::time::Duration;

use crate::backoff::Backoff;
use crate::config::FlushConfig;

use super::FlushReport;

/// What the schedule learns from one flush: the requests it sent, and how they ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attempt {
    /// Requests sent or meant to be sent.
    pub writes: usize,
    /// Requests applied.
    pub applied: usize,
    /// Requests definitely not applied, kept for a later flush.
    pub requeued: usize,
    /// Requests whose outcome is unknown.
    pub unknown: usize,
}

impl From<&FlushReport> for Attempt {
    fn from(report: &FlushReport) -> Attempt {
        Attempt {
            writes: report.writes,
            applied: report.applied,
            requeued: report.requeued,
            unknown: report.unknown,
        }
    }
}

/// The flush schedule and its back-off state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    interval: Duration,
    jitter: Duration,
    max_backoff: Duration,
    /// Consecutive flushes that sent writes and had none applied.
    failures: u32,
}

/// Smallest wait between two flushes, whatever the configuration says.
const MIN_WAIT: Duration = Duration::from_millis(1);

impl Schedule {
    /// The schedule of `config`, not backing off.
    pub fn new(config: &FlushConfig) -> Schedule {
        Schedule {
            interval: config.interval,
            jitter: config.jitter,
            max_backoff: config.max_backoff,
            failures: 0,
        }
    }

    /// Takes a flush's outcome into account: nothing applied of what was sent is one more
    /// failure, anything applied resets the back-off, and a flush that sent nothing
    /// proves nothing either way.
    pub fn record(&mut self, report: impl Into<Attempt>) {
        let report = report.into();
        if report.applied > 0 {
            self.failures = 0;
        } else if report.writes > 0 {
            self.failures = self.failures.saturating_add(1);
        }
    }

    /// Consecutive flushes that applied nothing.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Whether the schedule is backing off (early flushes are not taken then).
    pub fn backing_off(&self) -> bool {
        self.failures > 0
    }

    /// The wait before the next flush; `random` is uniform in `[0, 1)`.
    pub fn next_wait(&self, random: f64) -> Duration {
        let random = random.clamp(0.0, 1.0);
        if self.failures == 0 {
            // interval ± jitter
            let spread = self.jitter.as_secs_f64() * (2.0 * random - 1.0);
            let wait = (self.interval.as_secs_f64() + spread).max(MIN_WAIT.as_secs_f64());
            return Duration::from_secs_f64(wait);
        }
        let ceiling = self.backoff_ceiling();
        let floor = self.interval.max(ceiling / 2).min(ceiling);
        floor + (ceiling - floor).mul_f64(random)
    }

    /// The longest wait at the current number of failures: the interval doubled per
    /// failure, capped by `flush.max_backoff` (but never below the interval).
    ///
    /// The interval is the wait at no failure, so the first failure already doubles it:
    /// counted as a [`Backoff`] from the interval, the schedule stands one failure further
    /// on than it has seen.
    pub fn backoff_ceiling(&self) -> Duration {
        let cap = self.max_backoff.max(self.interval);
        Backoff::new(self.interval, cap)
            .delay(self.failures.saturating_add(1))
            .max(MIN_WAIT)
    }
}

/// Says when the store stopped applying writes (once per doubling of the back-off, so a
/// long outage logs a handful of lines) and when it applies them again.
pub(crate) fn log_backoff(schedule: &Schedule, was_backing_off: bool, report: impl Into<Attempt>) {
    let report = report.into();
    let failures = schedule.failures();
    if failures > 0 && failures.is_power_of_two() {
        tracing::warn!(
            consecutive_failed_flushes = failures,
            requests = report.writes,
            requeued = report.requeued,
            unknown = report.unknown,
            next_flush_within = ?schedule.backoff_ceiling(),
            "The store applied none of this flush's writes; backing off."
        );
    } else if was_backing_off && failures == 0 {
        tracing::info!(
            applied = report.applied,
            "The store applies writes again; flushing every interval."
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(interval: u64, max_backoff: u64) -> Schedule {
        Schedule::new(&FlushConfig {
            interval: Duration::from_secs(interval),
            jitter: Duration::from_millis(500),
            max_backoff: Duration::from_secs(max_backoff),
            ..FlushConfig::default()
        })
    }

    fn failed() -> FlushReport {
        FlushReport {
            writes: 3,
            requeued: 3,
            ..FlushReport::default()
        }
    }

    #[test]
    fn without_failures_the_wait_is_the_interval_give_or_take_the_jitter() {
        let s = schedule(5, 60);
        assert_eq!(s.next_wait(0.0), Duration::from_millis(4500));
        assert_eq!(s.next_wait(0.5), Duration::from_secs(5));
        assert!(s.next_wait(0.999_999) <= Duration::from_millis(5500));
        assert!(!s.backing_off());
    }

    #[test]
    fn each_failure_doubles_the_ceiling_up_to_the_cap_and_never_waits_less_than_the_interval() {
        let mut s = schedule(5, 60);
        let mut ceilings = Vec::new();
        for _ in 0..6 {
            s.record(&failed());
            ceilings.push(s.backoff_ceiling().as_secs());
            for random in [0.0, 0.3, 0.999] {
                let wait = s.next_wait(random);
                assert!(wait >= Duration::from_secs(5), "{wait:?}");
                assert!(wait <= s.backoff_ceiling(), "{wait:?}");
            }
        }
        assert_eq!(ceilings, [10, 20, 40, 60, 60, 60]);
        // Equal jitter: between half the ceiling and all of it.
        assert_eq!(s.next_wait(0.0), Duration::from_secs(30));
        assert_eq!(s.next_wait(0.5), Duration::from_secs(45));
    }

    #[test]
    fn anything_applied_resets_and_an_empty_flush_changes_nothing() {
        let mut s = schedule(5, 60);
        s.record(&failed());
        s.record(&failed());
        assert_eq!(s.failures(), 2);
        s.record(&FlushReport::default());
        assert_eq!(s.failures(), 2, "an empty flush proves nothing");
        s.record(&FlushReport {
            writes: 3,
            applied: 1,
            requeued: 2,
            ..FlushReport::default()
        });
        assert_eq!(s.failures(), 0);
        assert!(!s.backing_off());
    }

    #[test]
    fn a_cap_below_the_interval_still_waits_one_interval() {
        let mut s = schedule(5, 1);
        s.record(&failed());
        assert_eq!(s.next_wait(0.0), Duration::from_secs(5));
        assert_eq!(s.next_wait(0.9), Duration::from_secs(5));
    }

    #[test]
    fn many_failures_do_not_overflow() {
        let mut s = schedule(5, 3600);
        for _ in 0..100 {
            s.record(&failed());
        }
        assert_eq!(s.backoff_ceiling(), Duration::from_secs(3600));
    }
}
