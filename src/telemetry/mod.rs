//! What countersink tells operators about itself: the metric catalogue, the accounting
//! identity, the flusher's ledger, and the Prometheus collectors that export them.
//!
//! | module | job |
//! |---|---|
//! | [`catalogue`] | every exported metric: name, help, labels (the one list) |
//! | [`accounting`] | the identity `accepted = applied + unknown + rejected + dropped + spilled + pending`, per granularity |
//! | [`cardinality`] | the cardinality caps' drops per family and contexts per window |
//! | [`exact`] | the delta ledger's metrics (exact families) |
//! | [`ledger`] | the flusher's counts: settled delta sums, writes per table and outcome class, late drops, lost records |
//! | [`registry`] | the engine's collector and a registry of our own, rendered for `/metrics` |
//! | `ingest` | (feature `sidecar`) the receivers' collector |
//! | [`operations`], [`observed`], [`hot`] | per-table write latency and error kinds, key index and leaderboard counts; the sink wrapper that measures writes; the hot-key tracker |
//!
//! The hot path never touches a Prometheus object: stripes count in plain integers and
//! the flusher keeps its ledger; collectors read both when a scrape happens. Label sets
//! come from the closed enums of their owners ([`crate::vocabulary`],
//! [`crate::sink::OutcomeClass`], [`crate::state::OutcomeLog`]), so every series is
//! exported from the first scrape, at 0.

pub mod accounting;
pub mod cardinality;
pub mod catalogue;
pub mod exact;
pub mod hot;
#[cfg(feature = "sidecar")]
pub mod ingest;
pub mod ledger;
pub mod observed;
pub mod operations;
pub mod registry;

pub use self::accounting::{Accounting, Stages};
pub use self::hot::{HotKeys, HotReport, HotRow};
#[cfg(feature = "sidecar")]
pub use self::ingest::IngestCollector;
pub use self::ledger::{ExactLedgerCounts, Ledger, Settled};
pub use self::observed::ObservedSink;
pub use self::operations::OperationsMetrics;
pub use self::registry::{EngineCollector, Metrics};

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use super::*;
    use crate::config::Config;
    use crate::engine::Engine;

    /// What `/metrics` shows is exactly the catalogue: nothing exported is missing from
    /// it, and no entry is left unexported.
    #[test]
    fn the_exported_metrics_are_the_catalogue() {
        // A cap, so that the contexts gauge of a capped family exists.
        let mut config = Config::default();
        config.generic.max_contexts = Some(10);
        let engine = Arc::new(Engine::new(&config).unwrap());
        let metrics = Metrics::new(engine.clone(), Arc::new(Ledger::default())).unwrap();
        let mut expected: BTreeSet<&str> =
            catalogue::ENGINE_METRICS.iter().map(|m| m.name).collect();
        expected.extend(catalogue::EXACT_METRICS.iter().map(|m| m.name));
        #[cfg(feature = "sidecar")]
        {
            let stats = Arc::new(crate::ingest::IngestStats::default());
            metrics
                .registry()
                .register(Box::new(IngestCollector::new(stats)))
                .unwrap();
            expected.extend(catalogue::INGEST_METRICS.iter().map(|m| m.name));
        }
        // The sidecar's operations metrics (one error series made to exist: they appear
        // with their first error).
        let operations = OperationsMetrics::default();
        operations.show(engine.families(), &["board".into()]);
        operations.register(metrics.registry()).unwrap();
        operations
            .write_errors
            .with_label_values(&["t", "write_timeout"])
            .inc();
        expected.extend(catalogue::OPERATIONS_METRICS.iter().map(|m| m.name));
        let text = metrics.render();
        let exported: BTreeSet<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        assert_eq!(exported, expected);
    }
}
