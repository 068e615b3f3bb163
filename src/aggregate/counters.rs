//! Counters kept by each stripe under its own lock, summed when metrics are read.
//!
//! Keeping them inside the stripe (instead of in shared atomics) means the hot path
//! writes only memory its thread already owns; a scrape pays for the sum instead.

use super::limits::DropReason;

/// What one stripe (or, summed, the whole buffer) has seen since start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Increments accepted (valid counter values, before limits).
    pub accepted: u64,
    /// Signed sum of the accepted deltas.
    pub accepted_sum: i128,
    /// Increments dropped by a limit, per [`DropReason`] (indexed by `DropReason::ALL`).
    pub dropped: [u64; DropReason::ALL.len()],
    /// Signed sum of the dropped deltas, per reason.
    pub dropped_sum: [i128; DropReason::ALL.len()],
}

impl Counters {
    /// Counts an accepted increment.
    pub(crate) fn accept(&mut self, delta: i64) {
        self.accepted += 1;
        self.accepted_sum += i128::from(delta);
    }

    /// Counts an accepted increment that a limit then dropped.
    pub(crate) fn drop_accepted(&mut self, reason: DropReason, delta: i64) {
        self.dropped[reason.index()] += 1;
        self.dropped_sum[reason.index()] += i128::from(delta);
    }

    /// Adds another stripe's counters into these.
    pub fn merge(&mut self, other: &Counters) {
        self.accepted += other.accepted;
        self.accepted_sum += other.accepted_sum;
        for i in 0..self.dropped.len() {
            self.dropped[i] += other.dropped[i];
            self.dropped_sum[i] += other.dropped_sum[i];
        }
    }

    /// Total increments dropped, whatever the reason.
    pub fn dropped_total(&self) -> u64 {
        self.dropped.iter().sum()
    }

    /// Signed sum of all dropped deltas.
    pub fn dropped_sum_total(&self) -> i128 {
        self.dropped_sum.iter().sum()
    }

    /// Dropped increments for one reason.
    pub fn dropped_for(&self, reason: DropReason) -> u64 {
        self.dropped[reason.index()]
    }
}
