//! countersink: client-side pre-aggregation for Cassandra and ScyllaDB counter tables.
//!
//! Applications send increments (StatsD/DogStatsD counter lines, or calls into
//! [`Recorder`](crate)); countersink sums them per (key, minute) and flushes one delta per
//! row every few seconds into minute and day counter tables, never re-sending a write whose
//! outcome is unknown.

pub mod line;

#[cfg(feature = "sidecar")]
pub mod ingest;
