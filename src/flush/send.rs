//! Sending a flush's writes: at most `max_in_flight` at once, until all are answered or
//! the shutdown deadline passes.

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};

use crate::sink::{Outcome, PartitionWrite, Sink};

use super::settle::Sent;
use super::shutdown::Deadline;

/// What the sender tells its caller while it runs.
pub(super) enum Progress<'a> {
    /// Request `index` ended with this outcome.
    Done(usize, &'a Outcome),
    /// Nothing is ready: the sender is about to wait (the moment to hand buffered
    /// outcome records to the kernel).
    Waiting,
}

/// Sends every write with at most `max_in_flight` at once, until done or the deadline.
/// `progress` hears of every outcome as it arrives.
pub(super) async fn send_all<S: Sink>(
    sink: &S,
    writes: Vec<PartitionWrite>,
    max_in_flight: usize,
    deadline: &mut Deadline,
    mut progress: impl FnMut(Progress<'_>),
) -> Vec<(PartitionWrite, Sent)> {
    let count = writes.len();
    let mut outcomes: Vec<Option<Outcome>> = (0..count).map(|_| None).collect();
    let mut started = 0;
    {
        let mut running = FuturesUnordered::new();
        let send = |index: usize| {
            let write = &writes[index];
            async move { (index, sink.write(write).await) }
        };
        loop {
            while running.len() < max_in_flight.max(1) && started < count && !deadline.passed() {
                running.push(send(started));
                started += 1;
            }
            if running.is_empty() {
                break;
            }
            // Take what is ready without waiting; before waiting, let the caller write.
            let ready = match running.next().now_or_never() {
                Some(next) => next,
                None => {
                    progress(Progress::Waiting);
                    tokio::select! {
                        next = running.next() => next,
                        _ = deadline.wait() => break,
                    }
                }
            };
            if let Some((index, outcome)) = ready {
                progress(Progress::Done(index, &outcome));
                outcomes[index] = Some(outcome);
            }
        }
        // Dropping `running` here cancels whatever is still in flight.
    }
    progress(Progress::Waiting);
    writes
        .into_iter()
        .zip(outcomes)
        .enumerate()
        .map(|(index, (write, outcome))| {
            let sent = match outcome {
                Some(outcome) => Sent::Done(outcome),
                None if index < started => Sent::Cancelled,
                None => Sent::NotStarted,
            };
            (write, sent)
        })
        .collect()
}
