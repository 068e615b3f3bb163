//! The metrics of the counter tables and of the operator jobs: per-table write latency
//! and error kinds (seed 000: "watch write latency and timeouts for the counter tables
//! specifically ... counter timeouts mean unknown outcomes"), the key index, leaderboard
//! runs, live reloads of the configuration. Plain Prometheus vectors, updated where the
//! thing happens (a write's outcome, an index write, a job run, a reload), never on the
//! ingest path.

use prometheus::{HistogramVec, IntCounter, IntCounterVec, IntGauge, Registry};

use crate::family::Families;

use super::catalogue;

/// The key index outcomes, in label order.
pub const KEY_INDEX_OUTCOMES: [&str; 3] = ["applied", "retried", "dropped"];

/// The vectors; clones share their series.
#[derive(Clone)]
pub struct OperationsMetrics {
    /// `countersink_cql_write_duration_seconds{table}`.
    pub write_duration: HistogramVec,
    /// `countersink_cql_write_errors_total{table, kind}`.
    pub write_errors: IntCounterVec,
    /// `countersink_key_index_writes_total{outcome}`.
    pub key_index_writes: IntCounterVec,
    /// `countersink_key_index_pending_keys`.
    pub key_index_pending: IntGauge,
    /// `countersink_leaderboard_runs_total{board, result}`.
    pub leaderboard_runs: IntCounterVec,
    /// `countersink_epoch_rows_held_total`.
    pub epoch_rows_held: IntCounter,
    /// `countersink_epoch_registry_age_seconds`.
    pub epoch_registry_age: IntGauge,
    /// `countersink_config_reloads_total`.
    pub config_reloads: IntCounter,
    /// `countersink_config_reload_failures_total`.
    pub config_reload_failures: IntCounter,
    /// `countersink_config_generation`.
    pub config_generation: IntGauge,
}

impl Default for OperationsMetrics {
    fn default() -> Self {
        let metrics = OperationsMetrics {
            write_duration: catalogue::CQL_WRITE_DURATION
                .histogram_vec(&catalogue::CQL_WRITE_DURATION_BUCKETS),
            write_errors: catalogue::CQL_WRITE_ERRORS.int_counter_vec(),
            key_index_writes: catalogue::KEY_INDEX_WRITES.int_counter_vec(),
            key_index_pending: catalogue::KEY_INDEX_PENDING.int_gauge(),
            leaderboard_runs: catalogue::LEADERBOARD_RUNS.int_counter_vec(),
            epoch_rows_held: catalogue::EPOCH_ROWS_HELD.int_counter(),
            epoch_registry_age: catalogue::EPOCH_REGISTRY_AGE.int_gauge(),
            config_reloads: catalogue::CONFIG_RELOADS.int_counter(),
            config_reload_failures: catalogue::CONFIG_RELOAD_FAILURES.int_counter(),
            config_generation: catalogue::CONFIG_GENERATION.int_gauge(),
        };
        for outcome in KEY_INDEX_OUTCOMES {
            metrics.key_index_writes.with_label_values(&[outcome]);
        }
        metrics
    }
}

impl OperationsMetrics {
    /// Shows a latency series for every table of `families` from the start, and a run
    /// series for every board (at 0). Error-kind series appear with the first error of
    /// their kind: every kind for every table would be dozens of zeros per table.
    pub fn show(&self, families: &Families, boards: &[String]) {
        for family in families.iter() {
            if family.is_generic() && !families.generic_enabled() {
                continue;
            }
            for kind in family.granularities() {
                self.write_duration
                    .with_label_values(&[family.table_text(kind).as_str()]);
            }
        }
        for board in boards {
            for result in ["ok", "failed"] {
                self.leaderboard_runs
                    .with_label_values(&[board.as_str(), result]);
            }
        }
    }

    /// Registers every vector in `registry`.
    pub fn register(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        registry.register(Box::new(self.write_duration.clone()))?;
        registry.register(Box::new(self.write_errors.clone()))?;
        registry.register(Box::new(self.key_index_writes.clone()))?;
        registry.register(Box::new(self.key_index_pending.clone()))?;
        registry.register(Box::new(self.epoch_rows_held.clone()))?;
        registry.register(Box::new(self.epoch_registry_age.clone()))?;
        registry.register(Box::new(self.config_reloads.clone()))?;
        registry.register(Box::new(self.config_reload_failures.clone()))?;
        registry.register(Box::new(self.config_generation.clone()))?;
        registry.register(Box::new(self.leaderboard_runs.clone()))
    }
}
