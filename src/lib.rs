//! countersink: client-side pre-aggregation for Cassandra and ScyllaDB counter tables.
//!
//! Applications send increments — StatsD/DogStatsD counter lines to the sidecar, or calls
//! to [`Recorder`] — and countersink sums them per (key, minute), flushes one delta per
//! row every few seconds into minute and day counter tables with non-idempotent prepared
//! statements, logs writes whose outcome is unknown instead of retrying them, and flushes
//! on shutdown. The README states the guarantees exactly as implemented.
//!
//! # Layout
//!
//! | module | job |
//! |---|---|
//! | [`line`](mod@line) | the StatsD/DogStatsD line parser: bytes in, one verdict per line |
//! | [`family`], [`series`], [`bucket`] | where an increment goes: family, key bytes, UTC minute/day |
//! | [`aggregate`] | the synchronous core (one stripe's map, limits, counters) and its striped concurrent front |
//! | [`engine`] | families + aggregator: the line path and the in-process path |
//! | [`flush`] | the flush plan (minute and day rows, partitions), the loop, outcome classes, accounting ledger |
//! | [`sink`] | where writes go: the CQL sink (driver session, schema check, classification), memory, log |
//! | [`state`] | the state directory: outcome logs, spill file and its replay, writer identity |
//! | [`pipeline`], [`recorder`] | engine + state + flusher assembled; the in-process `Recorder` |
//! | [`accounting`], [`metrics`] | the accounting identity; Prometheus metrics on an own registry |
//! | [`config`], [`layout`], [`ddl`], [`cql_text`] | configuration; table layouts; the schema; the `cql/` files |
//! | `ingest`, `sidecar`, `cli` | (feature `sidecar`) socket receivers, the sidecar runtime and HTTP, the command line |
//! | `facade` | (feature `metrics-facade`) a recorder for the `metrics` crate: `counter!` lands in the engine |

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
#[cfg(feature = "metrics-facade")]
pub mod facade;
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
