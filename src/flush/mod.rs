//! The flush path: from drained rows to settled outcomes.
//!
//! - [`plan`]: drained rows → one write per partition, minute and day tables.
//! - [`flusher`]: the loop that drains, sends with bounded concurrency, and settles each
//!   outcome (re-queue, reject log, unknown log, spill), keeping the delta accounting.
//! - [`records`]: the JSON records of the outcome logs and the spill file.

pub mod flusher;
pub mod plan;
pub mod record_conversion;
mod replay;
mod send;
pub mod settle;
pub mod shutdown;

pub use self::flusher::{FlushReport, Flusher};
pub use self::plan::PlanOptions;
pub use self::shutdown::{ShutdownHandle, ShutdownSignal, shutdown_channel};

#[cfg(test)]
mod tests;
