//! What becomes of one row of a totals write, decided from how the write ended and
//! nothing else: the totals path's settle step, pure, with time passed in.
//!
//! The counter path must never send a write twice, so it logs unknown outcomes. A total
//! can be sent any number of times (it is absolute, and its write time orders it), so here
//! every failure is retried, the newest total with a newer write time, until one applies:
//! there is no unknown stage. Only a permanent refusal (a schema or permission problem, a
//! key that does not fit its column) ends in the rejected log, and only shutdown, or a
//! closed row failing for longer than `flush.requeue_max_age`, sends a row to the spill
//! file.

use crate::sink::bounded::Ended;
use crate::sink::{Outcome, OutcomeClass, WriteError};

/// What to do with one row of the write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RowAction {
    /// The store holds the total sent: confirm it.
    Confirm,
    /// Send the row again, its newest total, after its back-off.
    Retry,
    /// Write the newest total to the spill file; `release` frees the row (closed rows
    /// only).
    Spill {
        /// Whether the row leaves memory.
        release: bool,
    },
    /// The store refused it for good: log the unapplied part as rejected.
    Reject(WriteError),
}

/// The facts about one row besides how its write ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RowFacts {
    /// Whether this is the final flush of shutdown.
    pub(crate) final_flush: bool,
    /// Whether the row is closed (no increment can reach it any more).
    pub(crate) closed: bool,
    /// Unix seconds of the first failure of the row's current streak, if it was failing
    /// before this write.
    pub(crate) failing_since: Option<u32>,
    /// Now, in Unix seconds.
    pub(crate) now_unix_secs: u32,
    /// `flush.requeue_max_age`, in seconds.
    pub(crate) requeue_max_age_secs: u32,
}

/// The class a write is counted under in `countersink_cql_writes_total` (none for a write
/// never sent).
pub(crate) fn counted(ended: &Ended) -> Option<OutcomeClass> {
    match ended {
        Ended::Done(outcome) => Some(outcome.class()),
        Ended::Cancelled => Some(OutcomeClass::Unknown),
        Ended::NotStarted => None,
    }
}

/// Decides what becomes of a row whose write ended as `ended`.
pub(crate) fn decide(ended: &Ended, row: &RowFacts) -> RowAction {
    match ended {
        Ended::Done(Outcome::Applied) => RowAction::Confirm,
        Ended::Done(Outcome::NotAppliedPermanent(error)) => RowAction::Reject(error.clone()),
        Ended::Done(Outcome::NotAppliedTransient(_) | Outcome::Unknown(_))
        | Ended::NotStarted
        | Ended::Cancelled => {
            if row.final_flush {
                return RowAction::Spill { release: false };
            }
            let since = row.failing_since.unwrap_or(row.now_unix_secs);
            let too_old = row.now_unix_secs.saturating_sub(since) >= row.requeue_max_age_secs;
            if row.closed && too_old {
                RowAction::Spill { release: true }
            } else {
                RowAction::Retry
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u32 = 1_000_000;
    const MAX_AGE: u32 = 600;

    fn error() -> WriteError {
        WriteError::new("kind", "text")
    }

    /// Every outcome: (case, how it ended, final flush, closed, failing since, counted as,
    /// action).
    #[test]
    fn the_totals_settle_table() {
        use OutcomeClass as C;
        use RowAction::*;
        let timeout = || Ended::Done(Outcome::Unknown(error()));
        type Case = (
            &'static str,
            Ended,
            bool,
            bool,
            Option<u32>,
            Option<C>,
            RowAction,
        );
        let cases: Vec<Case> = vec![
            (
                "applied",
                Ended::Done(Outcome::Applied),
                false,
                false,
                None,
                Some(C::Applied),
                Confirm,
            ),
            (
                "applied, final",
                Ended::Done(Outcome::Applied),
                true,
                true,
                Some(1),
                Some(C::Applied),
                Confirm,
            ),
            (
                "timeout: retried, not logged",
                timeout(),
                false,
                false,
                None,
                Some(C::Unknown),
                Retry,
            ),
            (
                "transient",
                Ended::Done(Outcome::NotAppliedTransient(error())),
                false,
                false,
                None,
                Some(C::Requeued),
                Retry,
            ),
            (
                "open row failing for long: still retried",
                timeout(),
                false,
                false,
                Some(NOW - 10 * MAX_AGE),
                Some(C::Unknown),
                Retry,
            ),
            (
                "closed row failing not long",
                timeout(),
                false,
                true,
                Some(NOW - MAX_AGE + 1),
                Some(C::Unknown),
                Retry,
            ),
            (
                "closed row failing the maximum age",
                timeout(),
                false,
                true,
                Some(NOW - MAX_AGE),
                Some(C::Unknown),
                Spill { release: true },
            ),
            (
                "final flush",
                timeout(),
                true,
                false,
                None,
                Some(C::Unknown),
                Spill { release: false },
            ),
            (
                "in flight at the deadline",
                Ended::Cancelled,
                true,
                false,
                None,
                Some(C::Unknown),
                Spill { release: false },
            ),
            (
                "not started before the deadline",
                Ended::NotStarted,
                true,
                false,
                None,
                None,
                Spill { release: false },
            ),
            (
                "permanent",
                Ended::Done(Outcome::NotAppliedPermanent(error())),
                false,
                false,
                None,
                Some(C::Rejected),
                Reject(error()),
            ),
            (
                "permanent, final",
                Ended::Done(Outcome::NotAppliedPermanent(error())),
                true,
                false,
                None,
                Some(C::Rejected),
                Reject(error()),
            ),
        ];
        for (case, ended, final_flush, closed, failing_since, class, action) in cases {
            let facts = RowFacts {
                final_flush,
                closed,
                failing_since,
                now_unix_secs: NOW,
                requeue_max_age_secs: MAX_AGE,
            };
            assert_eq!(counted(&ended), class, "{case}");
            assert_eq!(decide(&ended, &facts), action, "{case}");
        }
    }
}
