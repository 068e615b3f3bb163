//! Sending a flush's writes: at most `max_in_flight` at once, until all are answered or
//! the shutdown deadline passes.

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

use crate::sink::{Outcome, PartitionWrite, Sink};

use super::settle::Sent;
use super::shutdown::Deadline;

/// Sends every write with at most `max_in_flight` at once, until done or the deadline.
/// `settled(index, outcome)` hears of every outcome as it arrives.
pub(super) async fn send_all<S: Sink>(
    sink: &S,
    writes: Vec<PartitionWrite>,
    max_in_flight: usize,
    deadline: &mut Deadline,
    mut settled: impl FnMut(usize, &Outcome),
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
            tokio::select! {
                Some((index, outcome)) = running.next() => {
                    settled(index, &outcome);
                    outcomes[index] = Some(outcome);
                }
                _ = deadline.wait() => break,
            }
        }
        // Dropping `running` here cancels whatever is still in flight.
    }
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
