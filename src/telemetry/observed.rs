//! A sink wrapper that measures every counter write: its latency and error kind per table
//! ([`OperationsMetrics`]) and its rows' load ([`HotKeys`]). The flusher is unaware of it:
//! the sidecar wraps its CQL sink once, and an embedding service may wrap its own.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use crate::family::Families;
use crate::sink::{Outcome, Request, Sink};
use crate::vocabulary::{FamilyId, Granularity};

use super::hot::HotKeys;
use super::operations::OperationsMetrics;

/// `inner`, measured.
pub struct ObservedSink<S> {
    inner: S,
    tables: TableLabels,
    metrics: OperationsMetrics,
    hot: Arc<HotKeys>,
}

/// The `table` label of each family table, by family id and granularity.
#[derive(Clone, Default)]
pub struct TableLabels(Arc<parking_lot::RwLock<HashMap<(FamilyId, Granularity), String>>>);

impl TableLabels {
    /// Labels every table of `families` (those already labelled keep their label).
    pub fn name_families(&self, families: &Families) {
        let mut tables = self.0.write();
        for family in families.iter() {
            for kind in family.granularities() {
                let table = family.table_text(kind);
                tables.entry((family.id, kind)).or_insert(table);
            }
        }
    }
}

impl<S: Sink> ObservedSink<S> {
    /// Wraps `inner`; `families` names the tables in the `table` label.
    pub fn new(
        inner: S,
        families: &Families,
        metrics: OperationsMetrics,
        hot: Arc<HotKeys>,
    ) -> ObservedSink<S> {
        let tables = TableLabels::default();
        tables.name_families(families);
        ObservedSink {
            inner,
            tables,
            metrics,
            hot,
        }
    }
}

impl<S: Sink> ObservedSink<S> {
    /// Its `table` labels, shared: a live reload that adds families names their tables
    /// there.
    pub fn table_labels(&self) -> TableLabels {
        self.tables.clone()
    }

    /// Records the latency and the error kind of one write to `(family, table)`.
    fn measure(&self, family: FamilyId, table: Granularity, started: Instant, outcome: &Outcome) {
        let tables = self.tables.0.read();
        let table = tables
            .get(&(family, table))
            .map_or("unknown", String::as_str);
        self.metrics
            .write_duration
            .with_label_values(&[table])
            .observe(started.elapsed().as_secs_f64());
        if let Some(error) = outcome.error() {
            self.metrics
                .write_errors
                .with_label_values(&[table, error.kind])
                .inc();
        }
    }
}

impl<S: Sink> Sink for ObservedSink<S> {
    async fn send(&self, request: Request<'_>) -> Outcome {
        if let Request::Counter(write) = request {
            self.hot.record(write);
        }
        let started = Instant::now();
        let outcome = self.inner.send(request).await;
        // The side tables of exact families are not a family table: not measured here.
        if let Some((family, table)) = request.family_table() {
            self.measure(family, table, started, &outcome);
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::Columns;
    use crate::config::Config;
    use crate::sink::{PartitionWrite, RowDelta, WriteError};

    struct Fails;

    impl Sink for Fails {
        async fn send(&self, request: Request<'_>) -> Outcome {
            match request {
                Request::Counter(_) => {
                    Outcome::Unknown(WriteError::new("write_timeout", "timed out"))
                }
                Request::Totals(_) => {
                    Outcome::NotAppliedTransient(WriteError::new("overloaded", "overloaded"))
                }
                other => other.unsupported(),
            }
        }
    }

    #[tokio::test]
    async fn every_write_is_timed_and_every_failure_counted_by_kind() {
        let families = Families::from_config(&Config::default()).unwrap();
        let metrics = OperationsMetrics::default();
        let hot = Arc::new(HotKeys::new(&families, 16));
        let sink = ObservedSink::new(Fails, &families, metrics.clone(), hot.clone());
        let write = PartitionWrite {
            epoch: None,
            family: FamilyId(0),
            table: Granularity::Minute,
            series: crate::series::encode(["a", ""]).into_boxed_slice(),
            shard: None,
            rows: vec![RowDelta {
                bucket: 5,
                columns: Columns::One(3),
                requeued_since: 0,
            }],
        };
        assert_eq!(sink.write(&write).await.label(), "unknown");
        sink.write(&write).await;
        let table = "countersink.counts_by_minute";
        assert_eq!(
            metrics
                .write_errors
                .with_label_values(&[table, "write_timeout"])
                .get(),
            2
        );
        assert_eq!(
            metrics
                .write_duration
                .with_label_values(&[table])
                .get_sample_count(),
            2
        );
        assert_eq!(hot.report(1).by_writes[0].writes, 2);
    }
}
