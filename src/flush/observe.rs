//! The one hook the flush offers: after every drain, observers learn which writes the
//! flush is about to send, before any is sent. The key index is fed this way (the keys
//! each flush carries). An observer must return quickly and never block: it runs on the
//! flush task, between the drain and the first send.

use std::sync::Arc;

use crate::sink::PlannedWrite;

/// Told what each flush is about to send.
pub trait FlushObserver: Send + Sync + 'static {
    /// The writes of one kind planned from this flush's drain, before any of them is
    /// sent: once for its counter writes (re-queued and replayed rows included), then
    /// once for each other kind that has writes to send (the running totals of
    /// `writer_totals` families, after the counter writes). Whatever the kind, each write
    /// names its partition and its rows' buckets, so an observer sees every key of
    /// every counting mode without naming one.
    fn planned(&self, writes: &[&dyn PlannedWrite]);

    /// The flush has just taken rows out of memory to send them, before anything of
    /// them is written anywhere (the delta ledger's rows, a held segment, the journal's
    /// intents). Once per drain: a replay chunk brings back rows drained earlier.
    fn drained(&self) {}
}

/// Tells every observer the flush has drained rows (see [`FlushObserver::drained`]).
pub(crate) fn drained(observers: &[Arc<dyn FlushObserver>]) {
    for observer in observers {
        observer.drained();
    }
}

/// Tells every observer the writes of one kind a flush is about to send (nothing is
/// built when no one watches).
pub(crate) fn tell<W: PlannedWrite>(observers: &[Arc<dyn FlushObserver>], writes: &[W]) {
    if observers.is_empty() {
        return;
    }
    let planned = crate::sink::planned(writes);
    for observer in observers {
        observer.planned(&planned);
    }
}
