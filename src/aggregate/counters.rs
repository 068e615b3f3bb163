//! Counters kept by each stripe under its own lock, summed when metrics are read.
//!
//! Keeping them inside the stripe (instead of in shared atomics) means the hot path
//! writes only memory its thread already owns; a scrape pays for the sum instead.

use crate::line::{IgnoredKind, InvalidReason};
use crate::vocabulary::{DropReason, Transport};

/// What one stripe (or, summed, the whole buffer) has seen since start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Lines received, per [`Transport`] (indexed by `Transport::ALL`).
    pub lines_received: [u64; Transport::ALL.len()],
    /// Invalid lines (and invalid in-process calls), per [`InvalidReason`].
    pub lines_invalid: [u64; InvalidReason::ALL.len()],
    /// Well-formed lines of other metric types, per [`IgnoredKind`].
    pub lines_ignored: [u64; IgnoredKind::ALL.len()],
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
    /// Counts `count` accepted increments summing to `sum`.
    pub(crate) fn accept(&mut self, count: u64, sum: i128) {
        self.accepted += count;
        self.accepted_sum += sum;
    }

    /// Counts accepted increments that a limit then dropped.
    pub(crate) fn drop_accepted(&mut self, reason: DropReason, count: u64, sum: i128) {
        self.dropped[reason.index()] += count;
        self.dropped_sum[reason.index()] += sum;
    }

    pub(crate) fn count_line(&mut self, transport: Transport) {
        self.lines_received[transport as usize] += 1;
    }

    pub(crate) fn count_invalid(&mut self, reason: InvalidReason) {
        self.lines_invalid[reason as usize] += 1;
    }

    pub(crate) fn count_ignored(&mut self, kind: IgnoredKind) {
        self.lines_ignored[kind as usize] += 1;
    }

    /// Adds another stripe's counters into these.
    pub fn merge(&mut self, other: &Counters) {
        fn add<const N: usize, T: Copy + std::ops::AddAssign>(a: &mut [T; N], b: &[T; N]) {
            for (x, y) in a.iter_mut().zip(b) {
                *x += *y;
            }
        }
        add(&mut self.lines_received, &other.lines_received);
        add(&mut self.lines_invalid, &other.lines_invalid);
        add(&mut self.lines_ignored, &other.lines_ignored);
        self.accepted += other.accepted;
        self.accepted_sum += other.accepted_sum;
        add(&mut self.dropped, &other.dropped);
        add(&mut self.dropped_sum, &other.dropped_sum);
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

    /// Invalid lines for one reason.
    pub fn invalid_for(&self, reason: InvalidReason) -> u64 {
        self.lines_invalid[reason as usize]
    }

    /// Ignored lines of one kind.
    pub fn ignored_for(&self, kind: IgnoredKind) -> u64 {
        self.lines_ignored[kind as usize]
    }

    /// Lines received over one transport.
    pub fn received_for(&self, transport: Transport) -> u64 {
        self.lines_received[transport as usize]
    }
}
