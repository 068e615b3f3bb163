//! What one flush (or one round of chunks) did: the figures `flush_now`, `finish` and
//! `run` return.

use crate::totals::TotalsReport;

/// What one flush did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlushReport {
    /// Flush sequence number.
    pub seq: u64,
    /// Rows drained from the buffer.
    pub rows: usize,
    /// Write requests planned.
    pub writes: usize,
    /// Requests applied.
    pub applied: usize,
    /// Requests re-queued in memory.
    pub requeued: usize,
    /// Requests rejected permanently.
    pub rejected: usize,
    /// Requests with an unknown outcome (including those cancelled at the deadline).
    pub unknown: usize,
    /// Requests spilled to disk (not attempted, or re-queued too long).
    pub spilled: usize,
    /// Requests that could not be spilled (the spill full, or failing): dropped, counted.
    pub dropped: usize,
    /// What the `writer_totals` families' writes did (not counted above).
    pub totals: TotalsReport,
}

impl FlushReport {
    /// Adds the figures of `chunk`, a later chunk of the same round, and takes its
    /// sequence number.
    pub(super) fn add(&mut self, chunk: &FlushReport) {
        self.seq = chunk.seq;
        self.rows += chunk.rows;
        self.writes += chunk.writes;
        self.applied += chunk.applied;
        self.requeued += chunk.requeued;
        self.rejected += chunk.rejected;
        self.unknown += chunk.unknown;
        self.spilled += chunk.spilled;
        self.dropped += chunk.dropped;
        self.totals.add(&chunk.totals);
    }
}
