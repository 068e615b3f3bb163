//! A family's counting mode and what it needs of the family's configuration: the one
//! place a new mode states its rules. Validation (`validate.rs`, `epochs.rs`,
//! `exact.rs`, `mapping.rs`) asks the mode; none of it names a mode.

use serde::{Deserialize, Serialize};

/// How a family's tables count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CountingMode {
    /// Counter tables: each flush adds one delta per row (`c = c + ?`). Cheap to read; a
    /// write whose outcome is unknown is logged and never re-sent. The default.
    #[default]
    Counter,
    /// Regular tables with `bigint` columns and a `writer` clustering column (seed 002):
    /// each writer writes the running absolute total of its own rows `USING TIMESTAMP`,
    /// so every write is idempotent and is retried until it applies; reads sum the writers.
    WriterTotals,
}

/// A feature of a family that a counting mode may not take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeFeature {
    /// More than one shard per partition (`shards > 1`).
    Shards,
    /// The delta ledger (`exact = true`).
    Exact,
    /// Resetting by epochs (`epoch_column`).
    Epochs,
    /// Tables other than exactly a minute and a day table (`hour_table`, `total_table`,
    /// or one of the two missing).
    OtherTables,
    /// Acknowledged ingest (`ingest.http.durable`, `ingest.otlp.durable`): the ingest
    /// log becomes counter delta records in the spill.
    DurableIngest,
}

impl CountingMode {
    /// The configuration value: `counter` or `writer_totals`.
    pub fn as_str(self) -> &'static str {
        match self {
            CountingMode::Counter => "counter",
            CountingMode::WriterTotals => "writer_totals",
        }
    }

    /// The column the mode adds to the family's tables, which no key or counter column
    /// may take: the writer column of `writer_totals`.
    pub fn own_column(self) -> Option<&'static str> {
        match self {
            CountingMode::Counter => None,
            CountingMode::WriterTotals => Some(crate::vocabulary::WRITER_COLUMN),
        }
    }

    /// Why the mode cannot go with `feature`; `None` when it can.
    pub fn refuses(self, feature: ModeFeature) -> Option<&'static str> {
        match (self, feature) {
            (CountingMode::Counter, _) => None,
            (CountingMode::WriterTotals, ModeFeature::Shards) => Some(
                "each writer writes rows of its own, so no cell is shared and there is nothing to spread",
            ),
            (CountingMode::WriterTotals, ModeFeature::Exact) => Some(
                "its running totals are exact by construction, and the delta ledger records counter deltas only",
            ),
            (CountingMode::WriterTotals, ModeFeature::Epochs) => {
                Some("epochs are built for counter families")
            }
            (CountingMode::WriterTotals, ModeFeature::OtherTables) => {
                Some("its totals are kept per minute and per day")
            }
            (CountingMode::WriterTotals, ModeFeature::DurableIngest) => Some(
                "the ingest log is replayed as counter deltas, and a running total is not built from them",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counter mode takes every feature; each refusal says why.
    #[test]
    fn refusals_say_why() {
        let features = [
            ModeFeature::Shards,
            ModeFeature::Exact,
            ModeFeature::Epochs,
            ModeFeature::OtherTables,
            ModeFeature::DurableIngest,
        ];
        for feature in features {
            assert_eq!(CountingMode::Counter.refuses(feature), None);
            let why = CountingMode::WriterTotals.refuses(feature).unwrap();
            assert!(!why.is_empty());
        }
        assert_eq!(CountingMode::Counter.own_column(), None);
        assert_eq!(CountingMode::WriterTotals.own_column(), Some("writer"));
    }
}
