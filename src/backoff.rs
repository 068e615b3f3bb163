//! Exponential back-off: how long to wait after some failures in a row.
//!
//! One rule for every retry loop of the crate (the flush schedule, the rows of
//! `writer_totals`, the delta ledger, the outcome table, the key index, the sidecar's
//! connection): the first step after the first failure, doubled per further failure,
//! never more than the ceiling. The arithmetic saturates, so no count of failures can
//! overflow or panic. Jitter is not part of it: the one caller that jitters (the flush
//! schedule) does so around the value it gets here.
//!
//! A leaf like `vocabulary`: it imports nothing of this crate, so any module may use it.

use std::time::Duration;

/// Doubling from `first` after each failure, never above `max`.
///
/// The unit is a [`Duration`] for waits in time, or a `u64` for a back-off counted in
/// something else (the `writer_totals` rows back off by flushes, not by time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff<T = Duration> {
    /// The wait after the first failure (and the shortest wait there is).
    pub first: T,
    /// The longest wait, whatever the count of failures. It wins over `first` when the
    /// two are given the wrong way round: a ceiling is a promise to whoever waits.
    pub max: T,
}

impl<T: Step> Backoff<T> {
    /// A back-off from `first` up to `max`.
    pub const fn new(first: T, max: T) -> Backoff<T> {
        Backoff { first, max }
    }

    /// The wait after `failures` failures in a row: `first` after one (and after none:
    /// the shortest wait), `first × 2^(failures − 1)` after more, at most `max`.
    pub fn delay(&self, failures: u32) -> T {
        let mut wait = self.first.min(self.max);
        // Each doubling that stays under the ceiling at least doubles a nonzero wait, so
        // this runs at most as many times as the unit has bits; a zero wait stays zero.
        for _ in 1..failures {
            if wait >= self.max || wait.is_nothing() {
                break;
            }
            wait = wait
                .doubled()
                .map_or(self.max, |doubled| doubled.min(self.max));
        }
        wait
    }
}

/// A unit a [`Backoff`] can count in.
pub trait Step: Copy + Ord {
    /// Twice this, or None when that overflows the unit.
    fn doubled(self) -> Option<Self>;
    /// Whether this is zero (which doubling leaves unchanged).
    fn is_nothing(self) -> bool;
}

impl Step for Duration {
    fn doubled(self) -> Option<Duration> {
        self.checked_mul(2)
    }
    fn is_nothing(self) -> bool {
        self.is_zero()
    }
}

impl Step for u64 {
    fn doubled(self) -> Option<u64> {
        self.checked_mul(2)
    }
    fn is_nothing(self) -> bool {
        self == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_wait_doubles_per_failure_from_the_first_step_up_to_the_ceiling() {
        let backoff = Backoff::new(MS * 100, Duration::from_secs(5));
        let cases: [(u32, Duration); 11] = [
            (0, MS * 100),
            (1, MS * 100),
            (2, MS * 200),
            (3, MS * 400),
            (6, MS * 3200),
            (7, Duration::from_secs(5)),
            (8, Duration::from_secs(5)),
            (64, Duration::from_secs(5)),
            (1000, Duration::from_secs(5)),
            (u32::MAX - 1, Duration::from_secs(5)),
            (u32::MAX, Duration::from_secs(5)),
        ];
        for (failures, expected) in cases {
            assert_eq!(
                backoff.delay(failures),
                expected,
                "after {failures} failures"
            );
        }
    }

    #[test]
    fn the_edges_of_the_unit_saturate_instead_of_overflowing() {
        let cases: [(Backoff, u32, Duration); 8] = [
            // A ceiling no doubling reaches before the unit overflows.
            (Backoff::new(MS, Duration::MAX), u32::MAX, Duration::MAX),
            (Backoff::new(Duration::MAX, Duration::MAX), 2, Duration::MAX),
            (
                Backoff::new(Duration::from_nanos(1), Duration::MAX),
                64,
                Duration::from_nanos(1 << 63),
            ),
            (
                Backoff::new(Duration::from_nanos(1), Duration::MAX),
                65,
                Duration::from_nanos(1 << 63) * 2,
            ),
            // The ceiling wins over a first step above it, from the first failure on.
            (
                Backoff::new(Duration::from_secs(10), Duration::from_secs(1)),
                0,
                Duration::from_secs(1),
            ),
            (
                Backoff::new(Duration::from_secs(10), Duration::from_secs(1)),
                u32::MAX,
                Duration::from_secs(1),
            ),
            // Nothing doubles to nothing, however often.
            (
                Backoff::new(Duration::ZERO, Duration::from_secs(1)),
                u32::MAX,
                Duration::ZERO,
            ),
            (Backoff::new(MS, Duration::ZERO), 3, Duration::ZERO),
        ];
        for (backoff, failures, expected) in cases {
            assert_eq!(
                backoff.delay(failures),
                expected,
                "{backoff:?} after {failures}"
            );
        }
    }

    #[test]
    fn a_back_off_counted_in_flushes_doubles_the_same_way() {
        let backoff = Backoff::new(1_u64, 12);
        let waits: Vec<u64> = (0..7).map(|failures| backoff.delay(failures)).collect();
        assert_eq!(waits, [1, 1, 2, 4, 8, 12, 12]);
        assert_eq!(backoff.delay(u32::MAX), 12);
        assert_eq!(Backoff::new(u64::MAX / 2 + 1, u64::MAX).delay(3), u64::MAX);
        assert_eq!(Backoff::new(3_u64, 1).delay(1), 1);
    }
}
