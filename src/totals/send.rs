//! Sending a flush's totals writes: at most `max_in_flight` at once, until all are
//! answered or the shutdown deadline passes.

use std::future::Future;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

use crate::sink::{Outcome, Sink, TotalsWrite};

use super::decide::Ended;

/// When sending must stop: the flusher's shutdown deadline.
pub trait Cutoff {
    /// Whether the cut-off has passed.
    fn passed(&mut self) -> bool;
    /// Resolves when it passes (never, while shutdown is not requested).
    fn wait(&mut self) -> impl Future<Output = ()> + Send;
}

/// Sends every write with at most `max_in_flight` at once, until done or `cutoff`.
pub(crate) async fn send_all<S: Sink>(
    sink: &S,
    writes: Vec<TotalsWrite>,
    max_in_flight: usize,
    cutoff: &mut impl Cutoff,
) -> Vec<(TotalsWrite, Ended)> {
    let count = writes.len();
    let mut outcomes: Vec<Option<Outcome>> = (0..count).map(|_| None).collect();
    let mut started = 0;
    {
        let mut running = FuturesUnordered::new();
        let send = |index: usize| {
            let write = &writes[index];
            async move { (index, sink.write_totals(write).await) }
        };
        loop {
            while running.len() < max_in_flight.max(1) && started < count && !cutoff.passed() {
                running.push(send(started));
                started += 1;
            }
            if running.is_empty() {
                break;
            }
            tokio::select! {
                Some((index, outcome)) = running.next() => outcomes[index] = Some(outcome),
                _ = cutoff.wait() => break,
            }
        }
        // Dropping `running` cancels whatever is still in flight.
    }
    writes
        .into_iter()
        .zip(outcomes)
        .enumerate()
        .map(|(index, (write, outcome))| {
            let ended = match outcome {
                Some(outcome) => Ended::Done(outcome),
                None if index < started => Ended::Cancelled,
                None => Ended::NotStarted,
            };
            (write, ended)
        })
        .collect()
}
