use super::*;

const NOW: u32 = 1_000_000;
const MAX_AGE: u32 = 600;

fn error() -> WriteError {
    WriteError::new("kind", "text")
}

/// The kinds of write, in the order of the table's columns.
const KINDS: [(&str, Policy); 5] = [
    ("counter", Policy::COUNTER),
    ("wrapper", Policy::WRAPPER),
    ("totals", Policy::TOTALS),
    ("ledger", Policy::LEDGER),
    ("outcomes", Policy::OUTCOMES),
];

/// The circumstances of a case: final flush, since when its rows fail, closed.
#[derive(Clone, Copy)]
struct When {
    final_flush: bool,
    failing_since: Option<u32>,
    closed: bool,
}

const FRESH: When = When {
    final_flush: false,
    failing_since: None,
    closed: false,
};
const FINAL: When = When {
    final_flush: true,
    ..FRESH
};
/// Failing for a little less than the maximum age.
const FAILING_NOT_LONG: When = When {
    failing_since: Some(NOW - MAX_AGE + 1),
    ..FRESH
};
/// Failing for exactly the maximum age, rows still open.
const FAILING_LONG: When = When {
    failing_since: Some(NOW - MAX_AGE),
    ..FRESH
};
/// Failing for the maximum age, rows closed.
const CLOSED_FAILING_LONG: When = When {
    closed: true,
    ..FAILING_LONG
};
/// Closed, failing not long.
const CLOSED_FAILING_NOT_LONG: When = When {
    closed: true,
    ..FAILING_NOT_LONG
};

/// Expected actions, written short: one letter per action.
#[derive(Clone, Copy, Debug)]
enum E {
    /// Applied.
    Ok,
    /// Retried, with the store's error.
    Retry,
    /// Retried, never sent (no error).
    Retry0,
    /// Held unchanged.
    Hold,
    /// Spilled with the store's error.
    Spill,
    /// Spilled without an error (never sent).
    Spill0,
    /// Logged unknown with the store's error.
    Unknown,
    /// Logged rejected.
    Rejected,
}

impl E {
    fn action(self) -> Action {
        match self {
            E::Ok => Action::Applied,
            E::Retry => Action::Retry(Some(error())),
            E::Retry0 => Action::Retry(None),
            E::Hold => Action::Hold,
            E::Spill => Action::Spill(Some(error())),
            E::Spill0 => Action::Spill(None),
            E::Unknown => Action::LogUnknown(error()),
            E::Rejected => Action::LogRejected(error()),
        }
    }
}

/// A "may have applied" answer cut off in flight: retried by idempotent kinds with the
/// deadline's error, not the store's.
fn cut_retry(final_flush: bool, kind: &str) -> Action {
    let error = Some(cancelled_at_deadline());
    match (final_flush, kind) {
        (true, "ledger" | "outcomes") | (false, _) => Action::Retry(error),
        (true, _) => Action::Spill(error),
    }
}

/// Every way a request ends, under every circumstance that changes the decision, for
/// every kind of write: (case, how it ended, when, counted as, one action per kind in
/// the order of [`KINDS`]).
#[test]
fn the_decision_table() {
    use E::*;
    use OutcomeClass as C;
    let applied = || Sent::Done(Outcome::Applied);
    let transient = || Sent::Done(Outcome::NotAppliedTransient(error()));
    let permanent = || Sent::Done(Outcome::NotAppliedPermanent(error()));
    let unknown = || Sent::Done(Outcome::Unknown(error()));
    type Case = (&'static str, Sent, When, Option<C>, [E; 5]);
    #[rustfmt::skip]
    let cases: Vec<Case> = vec![
        //                                                                     counter  wrapper  totals   ledger   outcomes
        ("applied",                             applied(),   FRESH,             Some(C::Applied),  [Ok,      Ok,      Ok,      Ok,      Ok]),
        ("applied, final",                      applied(),   FINAL,             Some(C::Applied),  [Ok,      Ok,      Ok,      Ok,      Ok]),
        ("transient",                           transient(), FRESH,             Some(C::Requeued), [Retry,   Retry,   Retry,   Retry,   Retry]),
        ("transient, failing not long",         transient(), FAILING_NOT_LONG,  Some(C::Requeued), [Retry,   Retry,   Retry,   Retry,   Retry]),
        ("transient, failing the maximum age",  transient(), FAILING_LONG,      Some(C::Requeued), [Spill,   Retry,   Retry,   Retry,   Retry]),
        ("transient, closed, failing long",     transient(), CLOSED_FAILING_LONG, Some(C::Requeued), [Spill, Retry,   Spill,   Retry,   Retry]),
        ("transient, closed, failing not long", transient(), CLOSED_FAILING_NOT_LONG, Some(C::Requeued), [Retry, Retry, Retry, Retry,   Retry]),
        ("transient, final",                    transient(), FINAL,             Some(C::Requeued), [Spill,   Spill,   Spill,   Retry,   Retry]),
        ("permanent",                           permanent(), FRESH,             Some(C::Rejected), [Rejected, Rejected, Rejected, Retry, Retry]),
        ("permanent, failing long",             permanent(), CLOSED_FAILING_LONG, Some(C::Rejected), [Rejected, Rejected, Rejected, Retry, Retry]),
        ("permanent, final",                    permanent(), FINAL,             Some(C::Rejected), [Rejected, Rejected, Rejected, Retry, Retry]),
        ("unknown",                             unknown(),   FRESH,             Some(C::Unknown),  [Unknown, Unknown, Retry,   Retry,   Retry]),
        ("unknown, closed, failing long",       unknown(),   CLOSED_FAILING_LONG, Some(C::Unknown), [Unknown, Unknown, Spill,  Retry,   Retry]),
        ("unknown, final",                      unknown(),   FINAL,             Some(C::Unknown),  [Unknown, Unknown, Spill,   Retry,   Retry]),
        ("not started",                         Sent::NotStarted, FRESH,        None,              [Retry0,  Retry0,  Retry0,  Retry0,  Retry0]),
        ("not started, failing long",           Sent::NotStarted, CLOSED_FAILING_LONG, None,       [Spill0,  Retry0,  Spill0,  Retry0,  Retry0]),
        ("not started, final",                  Sent::NotStarted, FINAL,        None,              [Spill0,  Spill0,  Spill0,  Retry0,  Retry0]),
        ("held back (group commit failed)",     Sent::Held,  FRESH,             None,              [Hold,    Hold,    Hold,    Hold,    Hold]),
        ("held back, failing long",             Sent::Held,  CLOSED_FAILING_LONG, None,            [Hold,    Hold,    Hold,    Hold,    Hold]),
        ("held back, final",                    Sent::Held,  FINAL,             None,              [Spill0,  Spill0,  Spill0,  Retry0,  Retry0]),
    ];
    for (case, sent, when, counted, expected) in cases {
        let facts = Facts {
            final_flush: when.final_flush,
            now_unix_secs: NOW,
            max_age_secs: MAX_AGE,
            failing_since: when.failing_since,
            closed: when.closed,
        };
        for ((kind, policy), expected) in KINDS.iter().zip(expected) {
            assert_eq!(
                decide(policy, sent.clone(), &facts),
                Decision {
                    counted,
                    action: expected.action(),
                },
                "{case}: {kind}"
            );
            // Decided for the request with facts no row has yet, then for one row with
            // its own: the same action as the table gives that row directly.
            let shared = Facts::fresh(when.final_flush, NOW, MAX_AGE);
            let request = decide(policy, sent.clone(), &shared).action;
            assert_eq!(
                for_row(policy, &request, &facts),
                expected.action(),
                "{case}: {kind}, decided per row"
            );
        }
    }
}

/// In flight at the deadline: logged unknown by the counter kinds (it may have applied,
/// and is never sent twice), sent again or spilled by the idempotent ones.
#[test]
fn a_request_cut_off_in_flight() {
    for final_flush in [false, true] {
        let facts = Facts::fresh(final_flush, NOW, MAX_AGE);
        for (kind, policy) in KINDS {
            let expected = match kind {
                "counter" | "wrapper" => Action::LogUnknown(cancelled_at_deadline()),
                _ => cut_retry(final_flush, kind),
            };
            assert_eq!(
                decide(&policy, Sent::Cancelled, &facts),
                Decision {
                    counted: Some(OutcomeClass::Unknown),
                    action: expected,
                },
                "{kind}, final flush: {final_flush}"
            );
        }
    }
}

#[test]
fn a_maximum_age_of_zero_spills_a_closed_total_at_its_first_failure_but_no_fresh_counter_row() {
    let facts = Facts {
        closed: true,
        ..Facts::fresh(false, NOW, 0)
    };
    let transient = || Sent::Done(Outcome::NotAppliedTransient(error()));
    assert_eq!(
        decide(&Policy::TOTALS, transient(), &facts).action,
        Action::Spill(Some(error()))
    );
    assert_eq!(
        decide(&Policy::COUNTER, transient(), &facts).action,
        Action::Retry(Some(error())),
        "a counter row never re-queued before has no age"
    );
}

#[test]
fn the_store_answers_when_something_applied_and_nothing_was_requeued() {
    assert!(store_answers(1, 0));
    assert!(!store_answers(0, 0), "an empty flush proves nothing");
    assert!(!store_answers(5, 1));
}
