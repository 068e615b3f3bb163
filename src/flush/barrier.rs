//! Flush barriers: a change that must wait until the rows pending now have gone through
//! a flush (the normal one: drain, plan, journal, send, settle, spill).
//!
//! A live reload is the one user: its new routing must not take effect while rows placed
//! by the old one are still pending, so the flush task, between two scheduled flushes,
//! runs one flush round of everything buffered and only then applies the change, before
//! the next drain. A row that could not be written in that round (the store refuses or
//! is away) is re-queued or spilled as in any flush, keeping its family.

use tokio::sync::{mpsc, oneshot};

use super::report::FlushReport;

/// A change to apply right after a flush round.
pub struct Barrier {
    then: Box<dyn FnOnce() + Send>,
    done: oneshot::Sender<FlushReport>,
}

impl Barrier {
    /// Applies the change and answers with the round's report.
    pub(super) fn pass(self, report: FlushReport) {
        (self.then)();
        let _ = self.done.send(report);
    }
}

/// Sends barriers to the flush task. Clones send to the same task.
#[derive(Clone)]
pub struct BarrierHandle {
    sender: mpsc::UnboundedSender<Barrier>,
}

/// What the flush task receives barriers from.
pub struct Barriers {
    receiver: mpsc::UnboundedReceiver<Barrier>,
}

/// A connected handle and receiver.
pub fn barrier_channel() -> (BarrierHandle, Barriers) {
    let (sender, receiver) = mpsc::unbounded_channel();
    (BarrierHandle { sender }, Barriers { receiver })
}

impl BarrierHandle {
    /// Runs `then` in the flush task right after a flush round of what is pending, and
    /// returns that round's report; `None` when the flush task has stopped (or stops
    /// first), in which case `then` did not run.
    pub async fn flush_then(&self, then: impl FnOnce() + Send + 'static) -> Option<FlushReport> {
        let (done, report) = oneshot::channel();
        let barrier = Barrier {
            then: Box::new(then),
            done,
        };
        self.sender.send(barrier).ok()?;
        report.await.ok()
    }
}

impl Barriers {
    /// The next barrier; never resolves once every handle is gone.
    pub(super) async fn next(barriers: &mut Option<Barriers>) -> Barrier {
        match barriers {
            Some(b) => match b.receiver.recv().await {
                Some(barrier) => barrier,
                None => std::future::pending().await,
            },
            None => std::future::pending().await,
        }
    }
}
