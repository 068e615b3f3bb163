//! The settle step: what becomes of one write, decided from how it ended and nothing
//! else.
//!
//! A pure, synchronous function with time passed in. The flusher calls it once per write
//! and executes the [`Action`] it returns (the buffer, the outcome logs, the spill,
//! the accounting); the policy itself — which outcome may be sent again, when a re-queued
//! write has waited long enough, what the final flush does — lives here, in one table
//! with one test row per case.

use crate::sink::bounded::Ended;
use crate::sink::{Outcome, OutcomeClass, PartitionWrite, WriteError};

pub use crate::sink::bounded::cancelled_at_deadline;

/// How a counter write ended, from the flusher's point of view: how its send
/// ([`Ended`]) ended, or [`Sent::Held`].
///
/// Not [`Ended`] itself because of `Held`, which only the counter path has: when its
/// group commit fails, its writes are never sent and their rows go back to the buffer
/// with their re-queue times unchanged (a held write is not a failed one). The totals
/// path and the driver wrapper settle a failed group commit with the cases they already
/// have (not started; a transient error).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sent {
    /// The sink answered.
    Done(Outcome),
    /// The deadline passed before it was started (or the flush held it back): definitely
    /// not applied.
    NotStarted,
    /// The deadline passed while it was in flight: it may have been applied.
    Cancelled,
    /// Held back before anything was sent: the journal could not record the flush's
    /// intents, and sending without them would lose the trail.
    Held,
}

/// What the flusher must do with one write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Count its deltas as applied.
    Applied,
    /// Merge its rows back into the buffer, for the table it was meant for only: it
    /// definitely did not apply and may be sent again.
    Requeue(WriteError),
    /// Merge its rows back unchanged (not sent: the journal failed); they go out with a
    /// later flush.
    Hold,
    /// Write its rows to the spill, for a later flush or the next start; with the
    /// error when the store gave one (a write never started has none).
    Spill(Option<WriteError>),
    /// Record it in `unknown.jsonl` and never send it again.
    LogUnknown(WriteError),
    /// Record it in `rejected.jsonl`.
    LogRejected(WriteError),
}

/// The decision for one write: its action, and the outcome class it is counted under in
/// `countersink_cql_writes_total` (none for a write that was never sent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The class it is counted under.
    pub counted: Option<OutcomeClass>,
    /// What to do.
    pub action: Action,
}

/// The facts the decision depends on besides the write's own outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Circumstances {
    /// Now, in Unix seconds.
    pub now_unix_secs: u32,
    /// `flush.requeue_max_age`, in seconds: a write re-queued for this long is spilled.
    pub requeue_max_age_secs: u32,
    /// Whether this is the final flush of shutdown (nothing can be re-queued then).
    pub final_flush: bool,
}

impl From<Ended> for Sent {
    fn from(ended: Ended) -> Sent {
        match ended {
            Ended::Done(outcome) => Sent::Done(outcome),
            Ended::NotStarted => Sent::NotStarted,
            Ended::Cancelled => Sent::Cancelled,
        }
    }
}

/// Decides what becomes of `write`, which ended as `sent`.
pub fn settle(write: &PartitionWrite, sent: Sent, now: &Circumstances) -> Decision {
    let decision = |counted, action| Decision {
        counted: Some(counted),
        action,
    };
    match sent {
        Sent::Done(Outcome::Applied) => decision(OutcomeClass::Applied, Action::Applied),
        Sent::Done(Outcome::NotAppliedTransient(error)) => {
            let action = if now.final_flush || waited_too_long(write, now) {
                Action::Spill(Some(error))
            } else {
                Action::Requeue(error)
            };
            decision(OutcomeClass::Requeued, action)
        }
        Sent::Done(Outcome::NotAppliedPermanent(error)) => {
            decision(OutcomeClass::Rejected, Action::LogRejected(error))
        }
        Sent::Done(Outcome::Unknown(error)) => {
            decision(OutcomeClass::Unknown, Action::LogUnknown(error))
        }
        Sent::Cancelled => decision(
            OutcomeClass::Unknown,
            Action::LogUnknown(cancelled_at_deadline()),
        ),
        Sent::NotStarted => Decision {
            counted: None,
            action: Action::Spill(None),
        },
        Sent::Held => Decision {
            counted: None,
            action: if now.final_flush {
                Action::Spill(None)
            } else {
                Action::Hold
            },
        },
    }
}

/// Whether any row of `write` was first re-queued at least the maximum age ago.
fn waited_too_long(write: &PartitionWrite, now: &Circumstances) -> bool {
    write.rows.iter().any(|row| {
        row.requeued_since != 0
            && now.now_unix_secs.saturating_sub(row.requeued_since) >= now.requeue_max_age_secs
    })
}

/// Whether a flush shows the store answering again (something applied, nothing
/// re-queued): the moment to bring rows spilled during an outage back.
pub fn store_answers(applied: usize, requeued: usize) -> bool {
    applied > 0 && requeued == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::Columns;
    use crate::sink::RowDelta;
    use crate::vocabulary::{FamilyId, Granularity};

    const NOW: u32 = 1_000_000;
    const MAX_AGE: u32 = 600;

    fn write(requeued_since: &[u32]) -> PartitionWrite {
        PartitionWrite {
            epoch: None,
            family: FamilyId(0),
            table: Granularity::Minute,
            series: Box::new([]),
            shard: None,
            rows: requeued_since
                .iter()
                .enumerate()
                .map(|(i, &since)| RowDelta {
                    bucket: i as u32,
                    columns: Columns::One(1),
                    requeued_since: since,
                })
                .collect(),
        }
    }

    fn error() -> WriteError {
        WriteError::new("kind", "text")
    }

    /// Every outcome, in a regular and in the final flush, fresh and re-queued before:
    /// (case, rows' first failure times, how it ended, final flush, counted as, action).
    #[test]
    fn the_settle_table() {
        use Action::*;
        use OutcomeClass as C;
        let transient = || Sent::Done(Outcome::NotAppliedTransient(error()));
        type Case = (&'static str, Vec<u32>, Sent, bool, Option<C>, Action);
        let cases: Vec<Case> = vec![
            (
                "applied",
                vec![0],
                Sent::Done(Outcome::Applied),
                false,
                Some(C::Applied),
                Applied,
            ),
            (
                "applied, final flush",
                vec![0],
                Sent::Done(Outcome::Applied),
                true,
                Some(C::Applied),
                Applied,
            ),
            (
                "transient, fresh",
                vec![0],
                transient(),
                false,
                Some(C::Requeued),
                Requeue(error()),
            ),
            (
                "transient, re-queued not long ago",
                vec![NOW - MAX_AGE + 1],
                transient(),
                false,
                Some(C::Requeued),
                Requeue(error()),
            ),
            (
                "transient, one row re-queued the maximum age ago",
                vec![0, NOW - MAX_AGE],
                transient(),
                false,
                Some(C::Requeued),
                Spill(Some(error())),
            ),
            (
                "transient, final flush",
                vec![0],
                transient(),
                true,
                Some(C::Requeued),
                Spill(Some(error())),
            ),
            (
                "permanent",
                vec![0],
                Sent::Done(Outcome::NotAppliedPermanent(error())),
                false,
                Some(C::Rejected),
                LogRejected(error()),
            ),
            (
                "permanent, re-queued before",
                vec![NOW - MAX_AGE],
                Sent::Done(Outcome::NotAppliedPermanent(error())),
                false,
                Some(C::Rejected),
                LogRejected(error()),
            ),
            (
                "unknown",
                vec![0],
                Sent::Done(Outcome::Unknown(error())),
                false,
                Some(C::Unknown),
                LogUnknown(error()),
            ),
            (
                "unknown, final flush",
                vec![0],
                Sent::Done(Outcome::Unknown(error())),
                true,
                Some(C::Unknown),
                LogUnknown(error()),
            ),
            (
                "in flight at the deadline",
                vec![0],
                Sent::Cancelled,
                true,
                Some(C::Unknown),
                LogUnknown(cancelled_at_deadline()),
            ),
            (
                "not started before the deadline",
                vec![0],
                Sent::NotStarted,
                true,
                None,
                Spill(None),
            ),
            (
                "held back (the journal failed)",
                vec![0],
                Sent::Held,
                false,
                None,
                Hold,
            ),
            (
                "held back in the final flush",
                vec![0],
                Sent::Held,
                true,
                None,
                Spill(None),
            ),
        ];
        for (case, since, sent, final_flush, counted, action) in cases {
            let now = Circumstances {
                now_unix_secs: NOW,
                requeue_max_age_secs: MAX_AGE,
                final_flush,
            };
            assert_eq!(
                settle(&write(&since), sent, &now),
                Decision { counted, action },
                "{case}"
            );
        }
    }

    #[test]
    fn the_store_answers_when_something_applied_and_nothing_was_requeued() {
        assert!(store_answers(1, 0));
        assert!(!store_answers(0, 0), "an empty flush proves nothing");
        assert!(!store_answers(5, 1));
    }
}
