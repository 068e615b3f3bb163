//! The flush path: from drained rows to settled outcomes.
//!
//! One flush: (replay a chunk of the spill) → drain → (ledger gate) → plan → journal (the group commit:
//! every request durable before the first send) → send (outcomes journaled as they
//! arrive) → settle (the pure step decides, the flusher executes: memory, spill segment,
//! outcome logs) → status → the journal's end.
//!
//! - [`plan`]: drained rows → one write per partition, minute and day tables.
//! - [`flusher`]: the loop that drains, sends with bounded concurrency, and executes
//!   what the settle step decides for each write.
//! - [`schedule`]: when the next flush starts: the interval, or a back-off while the store
//!   applies nothing.
//! - what becomes of each write is decided by the one decision table,
//!   [`crate::stage::decide()`], in its counter column.
//! - [`shutdown`]: the shutdown request and the one deadline derived from it.
//! - [`record_conversion`]: writes to the records of the outcome logs and the spill,
//!   and the families as the journal describes them,
//!   and spilled records back to rows.
//! - [`ledger_gate`]: the delta ledger of the exact families: the ledger rows of a
//!   drain's fresh deltas, confirmed before the counter writes may carry those deltas.
//! - [`exact_outcomes`]: the exact families' unknown and rejected rows, queued for the
//!   outcomes table (never holding a counter write).
//! - [`owed`]: the exact family-days this state directory still owes the counters (in
//!   its spill, or back in the buffer after a replay), marked in the outcomes table so
//!   that `reconcile` keeps those days open and `--repair` waits for the replay.
//! - [`barrier`]: a change applied by the flush task right after a flush round of
//!   what is pending (a live reload's new routing).
//! - [`observe`]: the hook after the drain ([`FlushObserver`]), which feeds the key index.
//!
//! Rows of `writer_totals` families leave this path right after the drain, for
//! [`crate::totals`], which the flusher then runs after the counter writes.

pub mod barrier;
pub mod exact_outcomes;
pub mod flusher;
pub mod ledger_gate;
pub mod observe;
pub mod owed;
pub mod plan;
pub mod record_conversion;
mod replay;
mod report;
pub mod schedule;
pub mod shutdown;

pub use self::barrier::{BarrierHandle, Barriers, barrier_channel};
pub use self::flusher::Flusher;
pub use self::observe::FlushObserver;
pub use self::plan::PlanOptions;
pub use self::report::FlushReport;
pub use self::shutdown::{ShutdownHandle, ShutdownSignal, shutdown_channel};

#[cfg(test)]
mod outage_tests;
#[cfg(test)]
mod tests;
