//! The stage runner: one group of requests of one kind of write, from its group commit
//! to its end in the journal.
//!
//! ```text
//! group commit ─▶ bounded send to the cut-off ─▶ decide ─▶ apply ─▶ finish ─▶ end
//!   (intents,      (answers journaled as         (the one   (memory,   (logs,    (cursor,
//!    durable)       they arrive; start windows)   table)     records)   spill)    End)
//! ```
//!
//! The order is the crash-safety argument, so it exists once, here:
//!
//! - nothing is sent before the group commit returns; a group commit that fails holds
//!   every request back ([`Sent::Held`]), and nothing of the group is journaled after;
//! - once the cut-off (the shutdown deadline) has passed, no group commit is made at all:
//!   nothing would be sent, and every request ends [`Sent::NotStarted`];
//! - each answer is journaled as it arrives, before the next request starts, and before
//!   a request of a new start window starts its window's bound is durable (the journal
//!   does that for the groups that keep start windows);
//! - every answer reaches the file before the first decision is acted on;
//! - what the decisions leave for files (logs, spill) is written before the group ends.
//!
//! A kind of write ([`WriteKind`]) says only what differs: its intents, how it sends one
//! request, the facts its age rule reads, how a decision is carried out, what it writes
//! before the end, and how its group ends.

use std::future::Future;

use crate::sink::Outcome;
use crate::sink::bounded::{Cutoff, Progress, cancelled_at_deadline, send_with_progress};
use crate::state::{Settled, StateDir};
use crate::test_hooks::crash_point;

use super::decide::{Decision, Facts, Policy, Sent, decide};

/// Where a kind of write stops for the crash tests (`COUNTERSINK_CRASH_POINT`): after
/// its group commit, after its answers reached the journal, after its decisions were
/// carried out in memory, after its end. `None`: no crash point there.
#[derive(Clone, Copy, Debug)]
pub struct CrashPoints {
    /// After the group commit, before the first request is sent.
    pub committed: Option<&'static str>,
    /// Every answer in the journal, nothing decided.
    pub sent: Option<&'static str>,
    /// Every decision carried out in memory, nothing written to the logs or the spill.
    pub settled: Option<&'static str>,
    /// After the group's end.
    pub ended: Option<&'static str>,
}

/// How requests of one kind are sent: a sink's method, or the driver wrapper's session.
/// Apart from the kind, so that sending (shared, many requests at once) and settling
/// (one request at a time, with the state directory) borrow different things.
pub trait Sender<R>: Sync {
    /// Sends one request and says how it ended. It never retries an answer that may
    /// have applied: the decision table does that, or not, by the kind's policy.
    fn send<'a>(&'a self, request: &'a R) -> impl Future<Output = Outcome> + Send + 'a;
}

impl CrashPoints {
    /// No crash point (a kind whose requests are not journaled has no window to test).
    pub const NONE: CrashPoints = CrashPoints {
        committed: None,
        sent: None,
        settled: None,
        ended: None,
    };
}

/// A kind of write, as the runner sees it.
pub trait WriteKind {
    /// One request: what one answer of the store is about.
    type Request: Sync;

    /// Its column of the decision table.
    const POLICY: Policy;

    /// Its crash points.
    const CRASH_POINTS: CrashPoints;

    /// The state directory whose journal records the group; `None` for a kind whose
    /// requests are idempotent rows kept in memory until they apply (the delta ledger,
    /// the outcomes table): nothing of them is journaled.
    fn journal(&mut self) -> Option<&mut StateDir>;

    /// The group commit: makes the intents of `requests` durable in the journal
    /// (request `i` of them is request `first_request + i` of the flush). Nothing of
    /// them may be sent before it returns `Ok`. A kind without a journal commits
    /// nothing.
    fn begin(&mut self, requests: &[Self::Request], first_request: u32) -> std::io::Result<()>;

    /// The facts of one request, from the ones every request of the group shares: its
    /// rows' failure streak and whether they are closed, for the age rule.
    fn facts(&self, request: &Self::Request, shared: Facts) -> Facts {
        let _ = request;
        shared
    }

    /// Carries out the decision for request `index` (of the flush): memory, records,
    /// accounting. What must reach a file is collected for [`WriteKind::finish`].
    fn apply(&mut self, index: u32, request: Self::Request, decision: Decision);

    /// After every decision was carried out: writes what they left for files (the
    /// outcome logs, the spill), before the group ends.
    fn finish(&mut self);

    /// Ends the group in the journal (making durable first what its end would
    /// otherwise discard, such as the replay cursor it consumed). Called only after a
    /// group commit was made.
    fn end(&mut self) -> std::io::Result<()>;
}

/// Requests started per durable start bound: 64 times the requests in flight, at least
/// 256. A kill then turns at most about one window of never-started requests into
/// unknown ones (instead of the whole flush's), for one fdatasync per window, the first
/// riding on the group commit. Measured on the flush bench: a window of eight times in
/// flight cost about a tenth of a 100k-row flush's rate; at 64 times, a window is some
/// 100 ms of sending at 40k requests/s, so its fdatasync costs a few per cent.
pub fn start_window(max_in_flight: usize) -> u32 {
    u32::try_from(max_in_flight.saturating_mul(64))
        .unwrap_or(u32::MAX)
        .max(256)
}

/// What the runner was given besides the kind, its sender and the requests.
pub struct StageCx<'a, C> {
    /// When sending must stop.
    pub cutoff: &'a mut C,
    /// Most requests in flight at once.
    pub max_in_flight: usize,
    /// The facts every request shares (final flush, now, the maximum age).
    pub facts: Facts,
    /// The flush's index of the first request (a flush's second group numbers its
    /// requests after the first's, so every request id of a flush is unique).
    pub first_request: u32,
}

/// What one group did: requests by how they were counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StageReport {
    /// Requests given.
    pub requests: usize,
    /// Applied.
    pub applied: usize,
    /// Definitely not applied.
    pub requeued: usize,
    /// Refused for good.
    pub rejected: usize,
    /// May have applied (cut off in flight included).
    pub unknown: usize,
    /// Never sent: not started before the cut-off, or held back.
    pub not_sent: usize,
    /// Whether the group commit was made (false: nothing was sent). A kind without a
    /// journal commits by sending.
    pub committed: bool,
}

impl StageReport {
    fn count(&mut self, decision: &Decision) {
        use crate::sink::OutcomeClass as C;
        match decision.counted {
            Some(C::Applied) => self.applied += 1,
            Some(C::Requeued) => self.requeued += 1,
            Some(C::Rejected) => self.rejected += 1,
            Some(C::Unknown) => self.unknown += 1,
            None => self.not_sent += 1,
        }
    }
}

/// Runs one group of `requests` of `kind`, sent by `sender` (see the module doc). An
/// empty group makes no group commit and has no end; its kind still finishes.
pub async fn run_stage<K: WriteKind, C: Cutoff>(
    kind: &mut K,
    sender: &impl Sender<K::Request>,
    requests: Vec<K::Request>,
    cx: StageCx<'_, C>,
) -> StageReport {
    let StageCx {
        cutoff,
        max_in_flight,
        facts,
        first_request,
    } = cx;
    let mut report = StageReport {
        requests: requests.len(),
        ..StageReport::default()
    };
    let points = K::CRASH_POINTS;
    // Nothing to send makes no group; past the cut-off nothing can be sent, so no group
    // commit (and no fdatasync) is made for it either.
    let sent: Vec<Sent> = if requests.is_empty() || cutoff.passed() {
        requests.iter().map(|_| Sent::NotStarted).collect()
    } else {
        match kind.begin(&requests, first_request) {
            Ok(()) => {
                report.committed = true;
                stop_at(points.committed);
                let mut journaled = Journaled {
                    state: kind.journal(),
                    first_request,
                };
                let ended = send_with_progress(
                    &requests,
                    max_in_flight,
                    cutoff,
                    |request| sender.send(request),
                    &mut journaled,
                )
                .await;
                // Every answer reaches the file before a decision is acted on.
                if let Some(state) = kind.journal() {
                    state.journal_flush();
                }
                stop_at(points.sent);
                ended.into_iter().map(Sent::from).collect()
            }
            Err(error) => {
                tracing::error!(%error, requests = requests.len(), "Could not write the group's intents to the journal; nothing of it is sent.");
                requests.iter().map(|_| Sent::Held).collect()
            }
        }
    };
    for (offset, (request, sent)) in requests.into_iter().zip(sent).enumerate() {
        let index = first_request.saturating_add(u32::try_from(offset).unwrap_or(u32::MAX));
        if report.committed
            && let Some(state) = kind.journal()
        {
            // The answers were journaled as they arrived; these two ends had none.
            match &sent {
                Sent::NotStarted => state.journal_outcome(index, &Settled::NotStarted),
                Sent::Cancelled => state.journal_outcome(
                    index,
                    &Settled::of(&Outcome::Unknown(cancelled_at_deadline())),
                ),
                Sent::Done(_) | Sent::Held => {}
            }
        }
        let facts = kind.facts(&request, facts);
        let decision = decide(&K::POLICY, sent, &facts);
        report.count(&decision);
        kind.apply(index, request, decision);
    }
    if let Some(state) = kind.journal() {
        state.journal_flush();
    }
    stop_at(points.settled);
    kind.finish();
    if report.committed
        && let Err(error) = kind.end()
    {
        tracing::error!(%error, "Could not end the group in the journal: it stays open, and a restart (or the next group that ends) finishes it without sending anything again.");
    }
    stop_at(points.ended);
    report
}

fn stop_at(point: Option<&'static str>) {
    if let Some(point) = point {
        crash_point(point);
    }
}

/// The journal's side of sending: each start window's bound made durable before its
/// first request starts, each answer recorded as it arrives (nothing, for a kind
/// without a journal).
struct Journaled<'s> {
    state: Option<&'s mut StateDir>,
    first_request: u32,
}

impl Journaled<'_> {
    fn index(&self, offset: usize) -> u32 {
        self.first_request
            .saturating_add(u32::try_from(offset).unwrap_or(u32::MAX))
    }
}

impl<T> Progress<T, Outcome> for Journaled<'_> {
    fn may_start(&mut self, offset: usize) -> bool {
        let index = self.index(offset);
        let Some(state) = self.state.as_deref_mut() else {
            return true;
        };
        match state.journal_may_start(index) {
            Ok(()) => true,
            Err(error) => {
                tracing::error!(%error, request = index, "Could not record in the journal which requests may start; nothing more of the group is sent, the rest stays pending.");
                false
            }
        }
    }

    fn answered(&mut self, offset: usize, _: &T, outcome: &Outcome) {
        let index = self.index(offset);
        if let Some(state) = self.state.as_deref_mut() {
            state.journal_outcome(index, &Settled::of(outcome));
        }
    }
}
