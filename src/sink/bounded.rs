//! Sending many requests to a store with bounded concurrency, until a cut-off: the one
//! loop the counter writes (`flush::send`), the totals writes (`totals`) and the driver
//! wrapper's requests (`wrapper::flush`) share.
//!
//! At most `max_in_flight` requests run at once; a new one starts as soon as one
//! answers, in the order given. When the cut-off passes, nothing more starts and what is
//! still running is dropped (cancelled): each request then ended in one of three ways,
//! [`Ended`], and the caller's settle step decides what that means for its rows.
//!
//! It lives with the sink contract, above `totals` and `flush`, so that every sending
//! path can use it without importing a path below it.

use std::future::Future;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::time::Instant;

use super::{Outcome, WriteError};

/// When sending must stop.
///
/// A trait rather than one type because the senders learn their cut-off differently:
/// the flusher's `flush::shutdown::Deadline` is unknown until shutdown is requested and
/// then fixed by the request (a flush already running stops at it too), while the driver
/// wrapper knows its final flush's deadline as an instant up front and has none for the
/// other flushes (`Option<Instant>`, implemented here).
pub trait Cutoff {
    /// Whether the cut-off has passed.
    fn passed(&mut self) -> bool;
    /// Resolves when it passes (never, while there is no cut-off yet).
    fn wait(&mut self) -> impl Future<Output = ()> + Send;
}

/// A known instant, or no cut-off at all.
impl Cutoff for Option<Instant> {
    fn passed(&mut self) -> bool {
        self.is_some_and(|at| Instant::now() >= at)
    }

    async fn wait(&mut self) {
        match *self {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }
}

/// How one request ended, from the sender's point of view. `O` is what a request
/// answers: a sink's [`Outcome`] for every sender so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended<O = Outcome> {
    /// The store answered.
    Done(O),
    /// The cut-off passed before it was started: definitely not applied.
    NotStarted,
    /// The cut-off passed while it was in flight: it may have been applied.
    Cancelled,
}

/// The error recorded for a request still in flight when the shutdown deadline passed.
pub fn cancelled_at_deadline() -> WriteError {
    WriteError::new(
        "cancelled_at_deadline",
        "the shutdown deadline passed while the request was in flight",
    )
}

/// What a sender hears while sending: asked before each request starts, told of each
/// answer as it arrives.
pub trait Progress<T, O> {
    /// Whether request `index` may start now. `false` starts nothing more: it and the
    /// requests after it end [`Ended::NotStarted`] (for a caller that must make
    /// something durable before a request leaves the process, and could not).
    fn may_start(&mut self, index: usize) -> bool;
    /// One answer, in completion order, before the next request starts.
    fn answered(&mut self, index: usize, item: &T, answer: &O);
}

/// Every request may start; each answer goes to the closure.
struct Answers<F>(F);

impl<T, O, F: FnMut(usize, &T, &O)> Progress<T, O> for Answers<F> {
    fn may_start(&mut self, _: usize) -> bool {
        true
    }

    fn answered(&mut self, index: usize, item: &T, answer: &O) {
        (self.0)(index, item, answer);
    }
}

/// Sends every item of `items` with `send`, at most `max_in_flight` at once (at least
/// one), in order, until all have answered or `cutoff` passes; returns how each ended, in
/// the order of `items`.
///
/// `on_done(index, item, answer)` is called for each answer as it arrives, in completion
/// order, before the next request starts: for a caller that must act on an answer before
/// the flush goes on (record it in the journal, count it), or keep its own tally. An item
/// cut off never reaches it; the returned list says which those were.
///
/// Once the cut-off passes, the requests still in flight are dropped, which cancels them
/// on the client side: the store may or may not have applied them ([`Ended::Cancelled`]).
pub async fn send_bounded<'a, T, O, Fut>(
    items: &'a [T],
    max_in_flight: usize,
    cutoff: &mut impl Cutoff,
    send: impl Fn(&'a T) -> Fut,
    on_done: impl FnMut(usize, &T, &O),
) -> Vec<Ended<O>>
where
    Fut: Future<Output = O>,
{
    send_with_progress(items, max_in_flight, cutoff, send, &mut Answers(on_done)).await
}

/// [`send_bounded`], asking `progress` before each request starts (see [`Progress`]).
pub async fn send_with_progress<'a, T, O, Fut>(
    items: &'a [T],
    max_in_flight: usize,
    cutoff: &mut impl Cutoff,
    send: impl Fn(&'a T) -> Fut,
    progress: &mut impl Progress<T, O>,
) -> Vec<Ended<O>>
where
    Fut: Future<Output = O>,
{
    let mut ended: Vec<Ended<O>> = items.iter().map(|_| Ended::NotStarted).collect();
    let mut running = FuturesUnordered::new();
    let mut started = 0;
    let mut refused = false;
    loop {
        while !refused
            && running.len() < max_in_flight.max(1)
            && started < items.len()
            && !cutoff.passed()
        {
            if !progress.may_start(started) {
                refused = true;
                break;
            }
            let index = started;
            let sending = send(&items[index]);
            running.push(async move { (index, sending.await) });
            // Started: cancelled unless its answer arrives.
            ended[index] = Ended::Cancelled;
            started += 1;
        }
        if running.is_empty() {
            break;
        }
        tokio::select! {
            Some((index, answer)) = running.next() => {
                progress.answered(index, &items[index], &answer);
                ended[index] = Ended::Done(answer);
            }
            _ = cutoff.wait() => break,
        }
    }
    // Dropping `running` cancels whatever is still in flight.
    drop(running);
    ended
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};
    use std::time::Duration;

    use super::*;

    /// Items are the seconds each request takes.
    fn sleeping<'c>(
        in_flight: &'c Cell<usize>,
        most: &'c Cell<usize>,
    ) -> impl Fn(&u64) -> std::pin::Pin<Box<dyn Future<Output = u64> + 'c>> {
        move |secs: &u64| {
            let secs = *secs;
            Box::pin(async move {
                in_flight.set(in_flight.get() + 1);
                most.set(most.get().max(in_flight.get()));
                tokio::time::sleep(Duration::from_secs(secs)).await;
                in_flight.set(in_flight.get() - 1);
                secs
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn never_more_than_the_bound_in_flight_and_answers_heard_as_they_arrive() {
        let (in_flight, most) = (Cell::new(0), Cell::new(0));
        let heard = RefCell::new(Vec::new());
        let items = [5, 1, 3, 1, 2];
        let ended = send_bounded(
            &items,
            2,
            &mut None,
            sleeping(&in_flight, &most),
            |index, item, answer| {
                assert_eq!(item, answer, "the callback sees the item answered");
                heard.borrow_mut().push(index);
            },
        )
        .await;
        assert_eq!(most.get(), 2);
        assert_eq!(
            ended,
            items.iter().map(|s| Ended::Done(*s)).collect::<Vec<_>>()
        );
        // Two slots. 0 s: #0 (until 5 s) and #1 (until 1 s); 1 s: #1 answers, #2 starts
        // (until 4 s); 4 s: #2 answers, #3 starts (until 5 s); 5 s: #0 and #3 answer, in
        // whichever order they are polled, and #4 starts (until 7 s).
        let heard = heard.into_inner();
        assert_eq!(heard[..2], [1, 2]);
        let mut together = heard[2..4].to_vec();
        together.sort_unstable();
        assert_eq!(together, [0, 3]);
        assert_eq!(heard[4..], [4]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_bound_of_zero_still_sends_one_at_a_time() {
        let (in_flight, most) = (Cell::new(0), Cell::new(0));
        let ended = send_bounded(
            &[1, 1],
            0,
            &mut None,
            sleeping(&in_flight, &most),
            |_, _, _| {},
        )
        .await;
        assert_eq!(most.get(), 1);
        assert_eq!(ended, [Ended::Done(1), Ended::Done(1)]);
    }

    #[tokio::test(start_paused = true)]
    async fn at_the_cutoff_what_runs_is_cancelled_and_the_rest_never_starts() {
        let (in_flight, most) = (Cell::new(0), Cell::new(0));
        let started = Instant::now();
        let mut cutoff = Some(started + Duration::from_secs(3));
        let ended = send_bounded(
            &[1, 10, 1, 10, 1],
            2,
            &mut cutoff,
            sleeping(&in_flight, &most),
            |_, _, _| {},
        )
        .await;
        assert_eq!(
            ended,
            [
                Ended::Done(1),
                Ended::Cancelled,
                Ended::Done(1),
                Ended::Cancelled,
                Ended::NotStarted
            ]
        );
        assert_eq!(Instant::now(), started + Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_cutoff_already_passed_starts_nothing() {
        let (in_flight, most) = (Cell::new(0), Cell::new(0));
        let mut cutoff = Some(Instant::now());
        let ended = send_bounded(
            &[1, 1],
            4,
            &mut cutoff,
            sleeping(&in_flight, &most),
            |_, _, _| panic!("nothing was sent"),
        )
        .await;
        assert_eq!(most.get(), 0);
        assert_eq!(ended, [Ended::NotStarted, Ended::NotStarted]);
    }
}
