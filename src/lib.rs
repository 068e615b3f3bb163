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
//! In layers: a module imports only modules of its own row or of rows above it
//! ([`vocabulary`] and [`backoff`] import nothing of this crate).
//! `tests/integration/layers.rs` reads this table and fails on an import that runs back
//! up it; one such import remains and is listed there with its reason (`ops` reading the
//! driver wrapper's records), so the list can only shrink. The same test fails on any
//! circle of imports among the files of `src/`, a module's use of its own ancestors
//! aside (a parent re-exports its children).
//!
//! | module | job |
//! |---|---|
//! | [`vocabulary`], [`backoff`], [`test_hooks`] | the shared words: `FamilyId`, `Granularity`, `DropReason`, `Transport`; the one exponential back-off rule; crash points for tests (feature `dev`) |
//! | [`line`](mod@line), [`bucket`], [`series`] | the StatsD/DogStatsD parser; UTC minute/day buckets; encoded series keys |
//! | [`aggregate`] | the synchronous core: one stripe's map, limits, counters, and the striped front |
//! | [`config`] | the configuration file (every section, `[ingest.*]` included, in every build), defaults, validation |
//! | [`family`], [`layout`], [`cql_text`], [`ddl`] | families and their shards; table layouts; the `cql/` files; the schema |
//! | [`engine`] | families + aggregator: the line path and the in-process path |
//! | [`sink`] | where writes go, and the contract: `PartitionWrite`, `Outcome`; the CQL, memory and log sinks; the bounded sending loop every path shares |
//! | [`state`] | the state directory: intent journal, outcome logs, spill segments and replay cursor, crash recovery, writer identity |
//! | `ingest` | (feature `sidecar`) socket receivers |
//! | [`telemetry`] | the metric catalogue, the accounting identity, the flusher's ledger, the Prometheus collectors |
//! | [`epoch`] | resets by epoch: the registry view, the pure choice of a row's epoch, the refresh timer |
//! | [`stage`] | the one write pipeline: the decision table, with a policy per kind of write |
//! | [`totals`] | the `writer_totals` counting mode: running totals per writer, idempotent writes retried until applied, their spill |
//! | [`flush`] | the plan, the loop, the pure settle step (outcome → action), one shutdown deadline |
//! | [`ops`] | operating the tables: the read path (summing shards and writers, both counting modes), the key index, leaderboards, retention, migration, shard advice; reading the state directory's outcomes |
//! | [`pipeline`], [`recorder`] | engine + state + flusher assembled; the in-process `Recorder` |
//! | [`wrapper`] | the driver wrapper: `CounterSession` pre-aggregates the counter UPDATEs an application sends through its own `scylla` session |
//! | `facade` | (feature `metrics-facade`) a recorder for the `metrics` crate: `counter!` lands in the engine |
//! | `sidecar`, `cli` | (feature `sidecar`) the sidecar runtime and HTTP, the command line (`dev` needs feature `dev`) |

pub mod line;
pub mod ops;

#[cfg(feature = "sidecar")]
pub mod cli;
#[cfg(feature = "sidecar")]
pub mod ingest;
#[cfg(feature = "sidecar")]
pub mod sidecar;

pub mod aggregate;
pub mod backoff;
pub mod bucket;
pub mod config;
pub mod engine;
pub mod epoch;
#[cfg(feature = "metrics-facade")]
pub mod facade;
pub mod family;
pub mod flush;
pub mod pipeline;
pub mod recorder;
pub mod series;
pub mod sink;
pub mod stage;
pub mod state;
pub mod telemetry;
pub mod test_hooks;
pub mod totals;
pub mod vocabulary;
pub mod wrapper;

pub use crate::config::Config;
pub use crate::recorder::Recorder;
pub use crate::wrapper::CounterSession;
pub mod cql_text;
pub mod ddl;
pub mod layout;
