//! countersink: client-side pre-aggregation for Cassandra and ScyllaDB counter tables.
//!
//! Applications send increments — StatsD/DogStatsD counter lines to the sidecar, or calls
//! to [`Recorder`] — and countersink sums them per (key, minute), flushes one delta per
//! row every few seconds into minute and day counter tables with non-idempotent prepared
//! statements, logs writes whose outcome is unknown instead of retrying them, and flushes
//! on shutdown. The book's chapter docs/src/guarantees.md states the guarantees exactly as
//! implemented.
//!
//! # Layout
//!
//! In layers: a module imports only modules of its own row or of rows above it
//! ([`vocabulary`] and [`backoff`] import nothing of this crate).
//! `tests/integration/layers.rs` reads this table and fails on an import that runs back
//! up it (none remains: the driver wrapper's file formats live in `state`, which the
//! operator tools read). The same test fails on any
//! circle of imports among the files of `src/`, a module's use of its own ancestors
//! aside (a parent re-exports its children).
//!
//! | module | job |
//! |---|---|
//! | [`vocabulary`], [`backoff`], [`test_hooks`] | the shared words: `FamilyId`, `Granularity`, `DropReason`, `Transport`; the one exponential back-off rule; crash points for tests (feature `dev`) |
//! | [`line`](mod@line), [`bucket`], [`series`], [`mapping`] | the StatsD/DogStatsD parser; UTC minute/day buckets; encoded series keys; name-mapping patterns and tag rules, compiled |
//! | [`aggregate`] | the synchronous core: one stripe's map, limits, cardinality caps, counters, and the striped front |
//! | [`config`] | the configuration file (every section, `[ingest.*]` included, in every build), defaults, validation, what a live reload may change |
//! | [`family`], [`layout`], [`cql_text`], [`ddl`] | families and their shards; table layouts; the `cql/` files; the schema |
//! | [`engine`] | families + aggregator: the line path and the in-process path |
//! | [`sink`] | where writes go, and the contract: `PartitionWrite`, `Outcome`; the CQL, memory and log sinks; the bounded sending loop every path shares |
//! | [`state`] | the state directory: intent journal, outcome logs, spill segments and replay cursor, crash recovery, writer identity; the driver wrapper's files as readers see them |
//! | `ingest` | (feature `sidecar`) socket receivers |
//! | [`telemetry`] | the metric catalogue, the accounting identity, the flusher's ledger, the Prometheus collectors |
//! | [`epoch`] | resets by epoch: the registry view, the pure choice of a row's epoch, the refresh timer |
//! | [`stage`] | the one write pipeline: the decision table (a policy column per kind of write), the stage runner every kind of write goes through (group commit, bounded send, decide, apply, logs and spill, end), and the one replay loop through the spill's cursor |
//! | [`totals`] | the `writer_totals` counting mode: running totals per writer, idempotent writes retried until applied, their records in the shared spill and their chunk of its replay |
//! | [`flush`] | the plan, the loop, the pure settle step (outcome → action), one shutdown deadline, barriers (a change applied after a flush round) |
//! | [`ops`] | operating the tables: the read path (summing shards and writers, both counting modes), the key index, leaderboards, retention, migration, shard advice; reading the state directory's outcomes |
//! | [`pipeline`], [`recorder`] | engine + state + flusher assembled; the in-process `Recorder` |
//! | [`wrapper`] | the driver wrapper: `CounterSession` pre-aggregates the counter UPDATEs an application sends through its own `scylla` session |
//! | `facade` | (feature `metrics-facade`) a recorder for the `metrics` crate: `counter!` lands in the engine |
//! | `sidecar`, `cli` | (feature `sidecar`) the sidecar runtime and HTTP, live reload, the command line (`dev` needs feature `dev`) |
//!
//! # Extension points
//!
//! Where something new plugs in, and the files it touches (non-test `src/` files,
//! counted on this tree by reading the exhaustive matches, the named fields and the
//! registration points).
//!
//! - **A kind of write** (a side table, the writes of a new counting mode): a
//!   [`stage::WriteKind`] (its journal or none, its intents, how a decision is carried
//!   out, what it writes before its end) and a [`stage::Sender`], in its own module; its
//!   [`stage::Policy`] column in `stage/decide.rs` unless one of the five fits; one
//!   [`stage::run_stage`] call where its groups run (`flush/flusher.rs` for the
//!   sidecar). The group commit, the send loop, the start windows, the decision table,
//!   the crash points and the end come with the runner.
//! - **An outcome class** (7 files, 8 with a journal record of its own): the variant, its
//!   label and its error (`sink/outcome.rs`); which driver errors are in it
//!   (`sink/cql/classify.rs`);
//!   its row of the decision table (`stage/decide.rs`) and its count (`stage/run.rs`);
//!   its journal record (`state/journal/mod.rs`, `Settled::of`; a new `Settled` variant also
//!   needs its home in `state/recovery.rs`, the one classifier the sidecar, the driver
//!   wrapper and `countersink outcomes` share); and the two readers that match every
//!   outcome: `ops/migrate/mod.rs`, `ops/reconcile/repair.rs` (`telemetry/observed.rs`
//!   counts errors by [`sink::Outcome::error`]). (16 to 19 before the write paths shared
//!   the table and the runner.)
//! - **A counting mode** (20 files outside its own folder, counted on this tree by
//!   reading every reference to `writer_totals`' types and variants and keeping the
//!   files whose code would change; 24 before the configuration's rules of a mode were
//!   gathered in `config/mode.rs`, 32 before the journal kept a kind's intents as
//!   opaque bodies and the flush's observers saw every kind's writes through one trait,
//!   and before files that name the mode only in docs or tests were told apart, such
//!   as `aggregate/mod.rs`, whose room for rows held past a drain any mode can take,
//!   and `telemetry/observed.rs`, which times every request by
//!   [`sink::Request::family_table`]; the earlier figure, "about 22", missed some of
//!   the files listed here): its flush path is a kind of write as above (`src/totals/stage.rs` is the example), but the mode also reaches
//!   the layers around the pipeline: the configuration (`config/mode.rs`: the variant,
//!   the column it adds to its tables, the features it refuses, which validation asks
//!   without naming a mode), the tables (`layout.rs`,
//!   `ddl.rs`, `sink/cql/schema.rs`), the sink contract (`sink/mod.rs`: a
//!   [`sink::Request`] variant, which sinks that wrap another forward unchanged;
//!   `sink/totals.rs`, what it sends) and the sinks that write it (`sink/memory.rs`,
//!   `sink/cql/mod.rs`, `sink/cql/totals.rs`), recovery (`state/{mod,recovery}.rs`:
//!   the finisher that reads its groups at start, one [`state::recovery::FinishKinds`]
//!   (today `totals::Recovery`, which `flush/flusher.rs` and `wrapper/mod.rs` pass:
//!   a second mode makes it a dispatch by [`state::KindId`]), and the totals segments
//!   and figures recovery spills what they owe to, which a second mode's records would
//!   share or need their own; its journal intents are a
//!   [`state::KindIntent`] with a [`state::KindId`] of its own and a body it encodes
//!   itself, as `src/totals/intent.rs` does, so the journal's files need no change),
//!   the spill (`state/record.rs`: what its records
//!   carry beyond a delta; `state/ids.rs`: its segments; `flush/replay.rs`: the counter
//!   replay stops at its records, which its own chunk takes through the one replay loop
//!   of `stage/replay.rs`),
//!   the flush's report (`flush/{flusher,report}.rs`; its observers, the key index among
//!   them, see its writes as [`sink::PlannedWrite`]s, which its write type implements
//!   beside its definition) and the operator tools (`ops/{read,outcomes}.rs`,
//!   `ops/outcomes/totals.rs`). Its own spill files, their replay and their share of the
//!   spill limit (`state/spill/`, `src/totals/spill.rs`) are gone: the spill, its
//!   cursor, its bound and its upgrade come with the state directory.
//! - **A transport** (5 files; about 14 before the seam): the `Transport` variant with its
//!   label and title (`vocabulary.rs`), its `[ingest.*]` section and ranges
//!   (`config/ingest.rs`), its module with a `start` that binds, records where it listens
//!   (`Receivers::listen_inet` or `listen_unix`) and spawns its threads
//!   (`ingest/<name>.rs`; a stream transport hands its listener to `ingest/stream.rs`,
//!   which brings the connection limit, framing, idle timeout and shutdown drain), its
//!   `mod` line (`ingest/mod.rs`) and its registration line (`ingest/start.rs`). Two
//!   places list every transport by hand and need a line for it too: the fixed-field
//!   check of a live reload (`config/reload.rs`, which names the transport's section or
//!   its changed address when a reload would change them; without the line such a change
//!   is still refused, but only as a change to `ingest`), and the live Prometheus check
//!   (`tests/deploy/prometheus_live.py`, which expects every transport's `{transport}`
//!   series, with traffic or quiet). Counters, metrics (every `{transport}` label), the
//!   sidecar's bound addresses, the `dev` banner and the start-up log follow from
//!   `Transport::ALL`. Optional: a command-line flag (`cli/args.rs`) and sending to it
//!   (`ingest/client.rs`, `cli/send.rs`), as TCP has: 8 files with those. A source that
//!   is not StatsD lines enters the engine through `Engine::record_from`, which keeps its
//!   `lines_received` count; the receivers' handler factory carries bytes, so such a
//!   receiver also needs its handler (`sidecar/handler.rs`) to reach the engine.
//!   The OTLP receivers (`ingest/otlp/`) are that case and took 9 files: the 5 above, the
//!   handler's `record`/`busy` (`sidecar/handler.rs`), and, for their request-level drop
//!   reasons and point counters, `ingest/stats.rs`, `telemetry/ingest.rs` and
//!   `telemetry/catalogue.rs`.

pub mod line;
pub mod mapping;
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

/// The book's chapters (`docs/src/`), so that `cargo test --doc` compiles every Rust
/// block they show (a block that is not Rust is marked with its language).
/// `tests/integration/docs.rs` checks that every chapter is here.
#[cfg(doctest)]
mod book {
    #[doc = include_str!("../docs/src/architecture/index.md")]
    mod architecture_index {}
    #[doc = include_str!("../docs/src/architecture/journal.md")]
    mod architecture_journal {}
    #[doc = include_str!("../docs/src/changelog.md")]
    mod changelog {}
    #[doc = include_str!("../docs/src/concepts/counting-modes.md")]
    mod concepts_counting_modes {}
    #[doc = include_str!("../docs/src/concepts/data-model.md")]
    mod concepts_data_model {}
    #[doc = include_str!("../docs/src/concepts/epochs.md")]
    mod concepts_epochs {}
    #[doc = include_str!("../docs/src/concepts/exact-totals.md")]
    mod concepts_exact_totals {}
    #[doc = include_str!("../docs/src/concepts/processing-model.md")]
    mod concepts_processing_model {}
    #[doc = include_str!("../docs/src/guarantees.md")]
    mod guarantees {}
    #[doc = include_str!("../docs/src/guide/clients.md")]
    mod guide_clients {}
    #[doc = include_str!("../docs/src/guide/driver-wrapper.md")]
    mod guide_driver_wrapper {}
    #[doc = include_str!("../docs/src/guide/embedding.md")]
    mod guide_embedding {}
    #[cfg(feature = "metrics-facade")]
    #[doc = include_str!("../docs/src/guide/facade.md")]
    mod guide_facade {}
    #[doc = include_str!("../docs/src/guide/quick-start.md")]
    mod guide_quick_start {}
    #[doc = include_str!("../docs/src/guide/sidecar.md")]
    mod guide_sidecar {}
    #[doc = include_str!("../docs/src/introduction.md")]
    mod introduction {}
    #[doc = include_str!("../docs/src/non-guarantees.md")]
    mod non_guarantees {}
    #[doc = include_str!("../docs/src/operations/building.md")]
    mod operations_building {}
    #[doc = include_str!("../docs/src/operations/deployment.md")]
    mod operations_deployment {}
    #[doc = include_str!("../docs/src/operations/monitoring.md")]
    mod operations_monitoring {}
    #[doc = include_str!("../docs/src/operations/outcomes.md")]
    mod operations_outcomes {}
    #[doc = include_str!("../docs/src/operations/reconcile.md")]
    mod operations_reconcile {}
    #[doc = include_str!("../docs/src/operations/state-directory.md")]
    mod operations_state_directory {}
    #[doc = include_str!("../docs/src/operations/tables.md")]
    mod operations_tables {}
    #[doc = include_str!("../docs/src/performance.md")]
    mod performance {}
    #[doc = include_str!("../docs/src/reference/cli.md")]
    mod reference_cli {}
    #[doc = include_str!("../docs/src/reference/configuration.md")]
    mod reference_configuration {}
    #[doc = include_str!("../docs/src/reference/metrics.md")]
    mod reference_metrics {}
}
