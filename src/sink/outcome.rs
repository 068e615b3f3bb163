//! What became of one write request: the contract between a sink and the flusher.
//!
//! Four classes, because a counter write is not idempotent: only a write that
//! *definitely did not apply* may be sent again. A sink only classifies; what is done
//! with each class belongs to the kind of write, not to the contract: a counter delta
//! (the sidecar's, the driver wrapper's) whose outcome is unknown is logged and never
//! sent again, while an idempotent write (`writer_totals` rows, delta-ledger rows,
//! outcome rows) is sent again until it applies. That policy is a column of the one
//! decision table, `stage::decide`.

/// How one write request ended, as the sink saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The store acknowledged it.
    Applied,
    /// Definitely not applied, and worth trying again (node unavailable, bootstrapping,
    /// no connection so nothing was sent). Re-queued, up to the maximum age.
    NotAppliedTransient(WriteError),
    /// Definitely not applied, and trying again cannot help (invalid statement, schema
    /// mismatch, unauthorized). Written to the rejected log.
    NotAppliedPermanent(WriteError),
    /// It may or may not have applied (write timeout, overloaded, server error, client
    /// timeout, connection lost after sending). A counter delta is written to the
    /// unknown log and never re-sent; an idempotent write is sent again.
    Unknown(WriteError),
}

impl Outcome {
    /// The class of this outcome, without its error.
    pub fn class(&self) -> OutcomeClass {
        match self {
            Outcome::Applied => OutcomeClass::Applied,
            Outcome::NotAppliedTransient(_) => OutcomeClass::Requeued,
            Outcome::NotAppliedPermanent(_) => OutcomeClass::Rejected,
            Outcome::Unknown(_) => OutcomeClass::Unknown,
        }
    }

    /// The metric label of its class.
    pub fn label(&self) -> &'static str {
        self.class().label()
    }

    /// The store's error, for every outcome but [`Outcome::Applied`].
    pub fn error(&self) -> Option<&WriteError> {
        match self {
            Outcome::Applied => None,
            Outcome::NotAppliedTransient(error)
            | Outcome::NotAppliedPermanent(error)
            | Outcome::Unknown(error) => Some(error),
        }
    }
}

/// The outcome classes as a closed set: the `outcome` label of
/// `countersink_cql_writes_total`, and the one list every exporter iterates, so a class
/// added here shows up everywhere (at 0) instead of silently missing from a series.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OutcomeClass {
    /// [`Outcome::Applied`].
    Applied,
    /// [`Outcome::NotAppliedTransient`]: re-queued (or spilled once too old).
    Requeued,
    /// [`Outcome::NotAppliedPermanent`].
    Rejected,
    /// [`Outcome::Unknown`], and requests cut off in flight by the shutdown deadline.
    Unknown,
}

impl OutcomeClass {
    /// Every class, in label order.
    pub const ALL: [OutcomeClass; 4] = [
        OutcomeClass::Applied,
        OutcomeClass::Requeued,
        OutcomeClass::Rejected,
        OutcomeClass::Unknown,
    ];

    /// The metric label: `applied`, `requeued`, `rejected` or `unknown`.
    pub fn label(self) -> &'static str {
        match self {
            OutcomeClass::Applied => "applied",
            OutcomeClass::Requeued => "requeued",
            OutcomeClass::Rejected => "rejected",
            OutcomeClass::Unknown => "unknown",
        }
    }
}

/// Why a write did not simply apply: a short, bounded kind (for metrics and grouping)
/// and the full error text (for the log record).
///
/// The text is shared: during an outage every write of a flush fails with the same
/// error, and a sink may hand out one text for all of them (see the CQL sink) instead
/// of holding a copy per write until the flush settles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteError {
    /// A stable identifier such as `write_timeout` or `unavailable`.
    pub kind: &'static str,
    /// The error as the driver or sink described it.
    pub text: std::sync::Arc<str>,
}

impl WriteError {
    /// An error of `kind` described by `text`.
    pub fn new(kind: &'static str, text: impl Into<std::sync::Arc<str>>) -> WriteError {
        WriteError {
            kind,
            text: text.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_maps_to_its_class_and_labels_are_distinct() {
        let error = || WriteError::new("k", "t");
        let outcomes = [
            Outcome::Applied,
            Outcome::NotAppliedTransient(error()),
            Outcome::NotAppliedPermanent(error()),
            Outcome::Unknown(error()),
        ];
        let classes: Vec<OutcomeClass> = outcomes.iter().map(Outcome::class).collect();
        assert_eq!(classes, OutcomeClass::ALL);
        let mut labels: Vec<&str> = OutcomeClass::ALL.iter().map(|c| c.label()).collect();
        labels.dedup();
        assert_eq!(labels, ["applied", "requeued", "rejected", "unknown"]);
    }
}
