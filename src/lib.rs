//! countersink: client-side pre-aggregation for Cassandra and ScyllaDB counter tables.
//!
//! Applications send increments (StatsD/DogStatsD counter lines, or calls into
//! [`Recorder`](crate)); countersink sums them per (key, minute) and flushes one delta per
//! row every few seconds into minute and day counter tables, never re-sending a write whose
//! outcome is unknown.

pub mod line;

#[cfg(feature = "sidecar")]
pub mod cli;
#[cfg(feature = "sidecar")]
pub mod ingest;
#[cfg(feature = "sidecar")]
pub mod sidecar;

pub mod accounting;
pub mod aggregate;
pub mod bucket;
pub mod config;
pub mod engine;
pub mod family;
pub mod flush;
pub mod pipeline;
pub mod recorder;
pub mod series;
pub mod sink;
pub mod state;

pub use crate::config::Config;
pub use crate::recorder::Recorder;
pub mod cql_text;
pub mod ddl;
pub mod layout;
pub mod metrics;
