//! The one hook the flush offers: after every drain, observers learn which writes the
//! flush is about to send, before any is sent. The key index is fed this way (the keys
//! each flush carries). An observer must return quickly and never block: it runs on the
//! flush task, between the drain and the first send.

use crate::sink::{PartitionWrite, TotalsWrite};

/// Told what each flush is about to send.
pub trait FlushObserver: Send + Sync + 'static {
    /// The counter writes planned from this flush's drain (re-queued and replayed rows
    /// included).
    fn planned(&self, writes: &[PartitionWrite]);

    /// The writes of running totals (`writer_totals` families) this flush is about to
    /// send, after its counter writes: changed rows, retried rows and replayed spills.
    /// Required, so that no observer misses the keys of one counting mode.
    fn planned_totals(&self, writes: &[TotalsWrite]);
}
