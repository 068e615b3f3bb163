//! What became of one write request.
//!
//! Four classes, because a counter write is not idempotent: only a write that
//! *definitely did not apply* may be sent again.

/// How one write request ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The store acknowledged it.
    Applied,
    /// Definitely not applied, and worth trying again (node unavailable, bootstrapping,
    /// no connection so nothing was sent). Re-queued, up to the maximum age.
    NotAppliedTransient(Failure),
    /// Definitely not applied, and trying again cannot help (invalid statement, schema
    /// mismatch, unauthorized). Written to the rejected log.
    NotAppliedPermanent(Failure),
    /// It may or may not have applied (write timeout, overloaded, server error, client
    /// timeout, connection lost after sending). Written to the unknown log, never re-sent.
    Unknown(Failure),
}

impl Outcome {
    /// Metric label: applied, requeued, rejected or unknown.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::NotAppliedTransient(_) => "requeued",
            Outcome::NotAppliedPermanent(_) => "rejected",
            Outcome::Unknown(_) => "unknown",
        }
    }
}

/// Why a write failed: a short, bounded kind (for metrics and grouping) and the full
/// error text (for the log record).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// A stable identifier such as `write_timeout` or `unavailable`.
    pub kind: &'static str,
    /// The error as the driver or sink described it.
    pub text: String,
}

impl Failure {
    /// A failure of `kind` described by `text`.
    pub fn new(kind: &'static str, text: impl Into<String>) -> Failure {
        Failure {
            kind,
            text: text.into(),
        }
    }
}
