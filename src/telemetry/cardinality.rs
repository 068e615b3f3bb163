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
        // By name: a family a live reload changed has a tracker per definition, and its
        // count is theirs summed, so that it never goes down.
        self.dropped.reset();
        let families = self.engine.families();
        for family in families.iter().filter(|f| families.in_force(f.id)) {
            for reason in REASONS {
                let n: u64 = dropped
                    .iter()
                    .filter(|(name, r, _)| *name == family.name && *r == reason)
                    .map(|(_, _, n)| *n)
                    .sum();
                self.dropped
                    .with_label_values(&[family.name.as_str(), reason.as_str()])
                    .inc_by(n);
            }
        }
        self.contexts.reset();
        let mut by_name: Vec<(String, u64)> = Vec::new();
        for (family, contexts) in cardinality.contexts(engine::now_unix_secs()) {
            // The most any definition of the family saw (see above).
            match by_name.iter_mut().find(|(name, _)| *name == family) {
                Some((_, most)) => *most = (*most).max(contexts),
                None => by_name.push((family, contexts)),
            }
        }
        for (family, contexts) in by_name {
            self.contexts
                .with_label_values(&[family.as_str()])
                .set(i64::try_from(contexts).unwrap_or(i64::MAX));
        }
        let mut out = self.dropped.collect();
        out.extend(self.contexts.collect());
        out
    }
}
