//! The cardinality caps' metrics: increments each cap dropped, per family and reason, and
//! the distinct contexts of each capped family in the window now. Read from the
//! aggregator's [`crate::aggregate::Cardinality`] at scrape time.

use std::sync::Arc;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounterVec, IntGaugeVec};

use crate::engine::{self, Engine};
use crate::vocabulary::DropReason;

use super::catalogue;

/// The two reasons a cardinality cap drops for, in label order.
pub const REASONS: [DropReason; 2] = [DropReason::CardinalityFamily, DropReason::CardinalityTag];

/// Reads the cardinality trackers at scrape time.
pub struct CardinalityCollector {
    engine: Arc<Engine>,
    dropped: IntCounterVec,
    contexts: IntGaugeVec,
    descs: Vec<Desc>,
}

impl CardinalityCollector {
    /// A collector of `engine`'s cardinality caps.
    pub fn new(engine: Arc<Engine>) -> CardinalityCollector {
        let dropped = catalogue::CARDINALITY_DROPPED.int_counter_vec();
        let contexts = catalogue::CARDINALITY_CONTEXTS.int_gauge_vec();
        let descs = [dropped.desc(), contexts.desc()]
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        CardinalityCollector {
            engine,
            dropped,
            contexts,
            descs,
        }
    }
}

impl Collector for CardinalityCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let cardinality = self.engine.aggregator().cardinality();
        let dropped = cardinality.dropped();
        // Every family and reason from the first scrape (0 for a family without caps).
        self.dropped.reset();
        for family in self.engine.families().iter() {
            for reason in REASONS {
                let n = dropped
                    .iter()
                    .find(|(name, r, _)| *name == family.name && *r == reason)
                    .map_or(0, |(_, _, n)| *n);
                self.dropped
                    .with_label_values(&[family.name.as_str(), reason.as_str()])
                    .inc_by(n);
            }
        }
        self.contexts.reset();
        for (family, contexts) in cardinality.contexts(engine::now_unix_secs()) {
            self.contexts
                .with_label_values(&[family.as_str()])
                .set(i64::try_from(contexts).unwrap_or(i64::MAX));
        }
        let mut out = self.dropped.collect();
        out.extend(self.contexts.collect());
        out
    }
}
