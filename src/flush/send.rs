//! Sending a flush's writes: at most `max_in_flight` at once, until all are answered or
//! the shutdown deadline passes.

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::watch;

use crate::sink::Sink;

use crate::sink::Outcome;
use crate::sink::PartitionWrite;

/// How a write ended from the flusher's point of view.
pub(super) enum Sent {
    /// The sink answered.
    Done(Outcome),
    /// The deadline passed before it was started: definitely not applied.
    NotStarted,
    /// The deadline passed while it was in flight: it may have been applied.
    Cancelled,
}

/// The end of a deadline-bounded flush: `None` until shutdown is requested, then the
/// instant by which the last flush must be done.
pub(super) struct Deadline {
    at: Option<tokio::time::Instant>,
    shutdown: watch::Receiver<bool>,
    grace: Duration,
}

impl Deadline {
    /// No deadline until shutdown is requested; then `grace` from that moment.
    pub(super) fn on_shutdown(shutdown: watch::Receiver<bool>, grace: Duration) -> Deadline {
        Deadline {
            at: None,
            shutdown,
            grace,
        }
    }

    /// `grace` from now.
    pub(super) fn from_now(shutdown: watch::Receiver<bool>, grace: Duration) -> Deadline {
        Deadline {
            at: Some(tokio::time::Instant::now() + grace),
            shutdown,
            grace,
        }
    }

    fn passed(&self) -> bool {
        self.at.is_some_and(|at| tokio::time::Instant::now() >= at)
    }

    /// Resolves when the deadline passes; arms it when shutdown is requested.
    async fn wait(&mut self) {
        loop {
            if let Some(at) = self.at {
                tokio::time::sleep_until(at).await;
                return;
            }
            if *self.shutdown.borrow_and_update() {
                self.at = Some(tokio::time::Instant::now() + self.grace);
                continue;
            }
            if self.shutdown.changed().await.is_err() {
                // The handle is gone: treat it as a shutdown request.
                self.at = Some(tokio::time::Instant::now() + self.grace);
            }
        }
    }
}

/// Resolves once `rx` holds `true` (or its sender is gone).
pub(super) async fn wait_true(rx: &mut watch::Receiver<bool>) {
    while !*rx.borrow_and_update() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// Sends every write with at most `max_in_flight` at once, until done or the deadline.
pub(super) async fn send_all<S: Sink>(
    sink: &S,
    writes: Vec<PartitionWrite>,
    max_in_flight: usize,
    deadline: &mut Deadline,
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
                Some((index, outcome)) = running.next() => outcomes[index] = Some(outcome),
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
