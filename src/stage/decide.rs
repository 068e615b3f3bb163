//! The one decision table: what becomes of one write request, from how it ended, the
//! facts about its rows, and the policy of its kind of write. Pure and synchronous, with
//! time passed in.
//!
//! Every kind of write asks this table, and only this one: the sidecar's counter deltas,
//! the driver wrapper's, the running totals of `writer_totals`, the delta ledger's rows
//! and the outcomes table's rows. What differs between them is one thing, whether the
//! write may be sent twice, and it is a column here (a [`Policy`]), not a copy of the
//! table: a counter delta that may have applied is logged and never re-sent, an
//! idempotent write is sent again until it applies. The scylla driver splits its
//! request loop from its `RetryPolicy`, which takes `is_idempotent`, the same way.
//!
//! | how it ended | counter deltas, wrapper | `writer_totals` | ledger rows, outcome rows |
//! |---|---|---|---|
//! | applied | applied | applied (confirm) | applied |
//! | definitely not applied | retry; spill when final or aged | retry; spill when final or aged | retry (kept at the final flush) |
//! | refused for good | log rejected | log rejected | retry |
//! | may have applied (unknown, or cut off in flight) | log unknown | retry; spill when final or aged | retry |
//! | not started before the cut-off | retry; spill when final or aged | the same | retry |
//! | held back (its group commit failed) | hold; spill when final | hold; spill when final | hold |
//!
//! "Aged" is the kind's age rule: counter deltas re-queued for `flush.requeue_max_age`,
//! closed `writer_totals` rows failing that long; the wrapper and the idempotent side
//! tables have none.

use crate::sink::bounded::{Ended, cancelled_at_deadline};
use crate::sink::{Outcome, OutcomeClass, WriteError};

/// How a request ended, from the stage's point of view: how its send ended
/// ([`Ended`]), or [`Sent::Held`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sent {
    /// The store answered.
    Done(Outcome),
    /// The cut-off passed before it was started, or the journal could not record that
    /// it may start: definitely not applied.
    NotStarted,
    /// The cut-off passed while it was in flight: it may have been applied.
    Cancelled,
    /// Held back before anything was sent: the journal could not record the group's
    /// intents, and sending without them would lose the trail.
    Held,
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

impl Sent {
    /// The class a request is counted under in the write metrics: none for a request
    /// never sent.
    pub fn counted(&self) -> Option<OutcomeClass> {
        match self {
            Sent::Done(outcome) => Some(outcome.class()),
            Sent::Cancelled => Some(OutcomeClass::Unknown),
            Sent::NotStarted | Sent::Held => None,
        }
    }
}

/// What a kind of write does with a request that may have applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnUnknown {
    /// Record it in the unknown log and never send it again (not idempotent).
    Log,
    /// Send it again (idempotent): like a request that definitely did not apply.
    Resend,
}

/// What a kind of write does with a request the store refused for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnPermanent {
    /// Record it in the rejected log.
    Log,
    /// Keep sending it (rows of a side table that must get there: a refusal there is a
    /// schema or permission problem an operator fixes, and the rows wait for it).
    Resend,
}

/// What the final flush does with a request it cannot send again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtFinal {
    /// Write it to the spill, for the next start.
    Spill,
    /// Keep it with its kind, which gives up what it holds once the final flush is over
    /// (the delta ledger stores its rows with the spilled counter rows they gate).
    Keep,
}

/// When a request that keeps failing goes to the spill instead of being retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgeRule {
    /// Never: retried until the final flush.
    Never,
    /// When a row of it first failed at least the maximum age ago (counter deltas:
    /// `flush.requeue_max_age`).
    Failing,
    /// When its rows are closed (no increment can reach them) and have been failing for
    /// the maximum age (`writer_totals`: an open row stays in memory, where its total
    /// keeps growing).
    ClosedAndFailing,
}

/// One column of the table: how a kind of write treats what did not apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// A request that may have applied.
    pub unknown: OnUnknown,
    /// A request refused for good.
    pub permanent: OnPermanent,
    /// What the final flush does with what it cannot send again.
    pub at_final: AtFinal,
    /// When retrying gives way to the spill.
    pub aged: AgeRule,
}

impl Policy {
    /// The sidecar's counter deltas: never sent twice.
    pub const COUNTER: Policy = Policy {
        unknown: OnUnknown::Log,
        permanent: OnPermanent::Log,
        at_final: AtFinal::Spill,
        aged: AgeRule::Failing,
    };

    /// The driver wrapper's counter deltas: the counter policy, without an age rule (a
    /// wrapper re-queues until its final flush).
    pub const WRAPPER: Policy = Policy {
        aged: AgeRule::Never,
        ..Policy::COUNTER
    };

    /// Running totals (`writer_totals`): idempotent by their write time.
    pub const TOTALS: Policy = Policy {
        unknown: OnUnknown::Resend,
        permanent: OnPermanent::Log,
        at_final: AtFinal::Spill,
        aged: AgeRule::ClosedAndFailing,
    };

    /// Rows of the delta ledger: idempotent, and held (with the counter rows they gate)
    /// until they apply.
    pub const LEDGER: Policy = Policy {
        unknown: OnUnknown::Resend,
        permanent: OnPermanent::Resend,
        at_final: AtFinal::Keep,
        aged: AgeRule::Never,
    };

    /// Rows of the outcomes table: idempotent, queued until they apply (they are in the
    /// local logs meanwhile).
    pub const OUTCOMES: Policy = Policy::LEDGER;
}

/// The facts about a request besides how it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Facts {
    /// Whether this is the final flush of shutdown (nothing is retried after it).
    pub final_flush: bool,
    /// Now, in Unix seconds.
    pub now_unix_secs: u32,
    /// `flush.requeue_max_age`, in seconds.
    pub max_age_secs: u32,
    /// Unix seconds when its longest-failing row first failed (None: none failed
    /// before).
    pub failing_since: Option<u32>,
    /// Whether its rows are closed: no increment can reach them any more.
    pub closed: bool,
}

impl Facts {
    /// The facts of a request none of whose rows failed before, and that is not closed.
    pub fn fresh(final_flush: bool, now_unix_secs: u32, max_age_secs: u32) -> Facts {
        Facts {
            final_flush,
            now_unix_secs,
            max_age_secs,
            failing_since: None,
            closed: false,
        }
    }
}

/// What the stage must do with one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// It applied.
    Applied,
    /// Definitely not applied (or, for an idempotent write, not known applied): send it
    /// again later, with the error the store gave, if any. Counter rows go back into the
    /// buffer for the table they were meant for only.
    Retry(Option<WriteError>),
    /// Not sent (the journal failed): its rows stay as they were and go out with a later
    /// flush.
    Hold,
    /// Write it to the spill, for a later flush or the next start; with the error when
    /// the store gave one (a request never sent has none).
    Spill(Option<WriteError>),
    /// Record it in the unknown log and never send it again.
    LogUnknown(WriteError),
    /// Record it in the rejected log.
    LogRejected(WriteError),
}

impl Action {
    /// The error the action records, if any.
    pub fn error(&self) -> Option<&WriteError> {
        match self {
            Action::Applied | Action::Hold => None,
            Action::Retry(error) | Action::Spill(error) => error.as_ref(),
            Action::LogUnknown(error) | Action::LogRejected(error) => Some(error),
        }
    }
}

/// The decision for one request: its action, and the class it is counted under (none
/// for a request never sent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The class it is counted under.
    pub counted: Option<OutcomeClass>,
    /// What to do.
    pub action: Action,
}

/// Decides what becomes of a request of a kind with `policy` that ended as `sent`.
pub fn decide(policy: &Policy, sent: Sent, facts: &Facts) -> Decision {
    let counted = sent.counted();
    let action = match sent {
        Sent::Done(Outcome::Applied) => Action::Applied,
        Sent::Done(Outcome::NotAppliedTransient(error)) => again(policy, facts, Some(error)),
        Sent::Done(Outcome::NotAppliedPermanent(error)) => match policy.permanent {
            OnPermanent::Log => Action::LogRejected(error),
            OnPermanent::Resend => again(policy, facts, Some(error)),
        },
        Sent::Done(Outcome::Unknown(error)) => unknown(policy, facts, error),
        Sent::Cancelled => unknown(policy, facts, cancelled_at_deadline()),
        Sent::NotStarted => again(policy, facts, None),
        Sent::Held if facts.final_flush => again(policy, facts, None),
        Sent::Held => Action::Hold,
    };
    Decision { counted, action }
}

/// The action for one row of a request the table decided as `action` from the facts the
/// request's rows share: the same, but for the age rule, the one part of the table that
/// reads a row's own facts (its failure streak, whether it is closed). For a kind that
/// keeps its rows one by one (`writer_totals`).
pub fn for_row(policy: &Policy, action: &Action, row: &Facts) -> Action {
    match action {
        Action::Retry(error) if !row.final_flush && aged(policy.aged, row) => {
            Action::Spill(error.clone())
        }
        other => other.clone(),
    }
}

/// A request that may have applied.
fn unknown(policy: &Policy, facts: &Facts, error: WriteError) -> Action {
    match policy.unknown {
        OnUnknown::Log => Action::LogUnknown(error),
        OnUnknown::Resend => again(policy, facts, Some(error)),
    }
}

/// A request that may be sent again: retried, unless the final flush or the age rule
/// sends it to the spill.
fn again(policy: &Policy, facts: &Facts, error: Option<WriteError>) -> Action {
    if facts.final_flush {
        return match policy.at_final {
            AtFinal::Spill => Action::Spill(error),
            AtFinal::Keep => Action::Retry(error),
        };
    }
    if aged(policy.aged, facts) {
        Action::Spill(error)
    } else {
        Action::Retry(error)
    }
}

/// Whether the age rule sends the request to the spill.
fn aged(rule: AgeRule, facts: &Facts) -> bool {
    let failed_for = |since: u32| facts.now_unix_secs.saturating_sub(since);
    match rule {
        AgeRule::Never => false,
        AgeRule::Failing => facts
            .failing_since
            .is_some_and(|since| failed_for(since) >= facts.max_age_secs),
        AgeRule::ClosedAndFailing => {
            facts.closed
                && failed_for(facts.failing_since.unwrap_or(facts.now_unix_secs))
                    >= facts.max_age_secs
        }
    }
}

/// Whether a flush shows the store answering again (something applied, nothing
/// re-queued): the moment to bring rows spilled during an outage back.
pub fn store_answers(applied: usize, requeued: usize) -> bool {
    applied > 0 && requeued == 0
}

#[cfg(test)]
mod tests;
