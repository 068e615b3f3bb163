//! The shutdown request and the one deadline that follows from it.
//!
//! Shutdown is requested once, and the instant of the request is kept with it. Every
//! flush still running then, and the final flush after it, stops sending at that instant
//! plus `flush.shutdown_deadline`: the deadline is fixed when shutdown is requested, not
//! when each flush notices it, so a flush that hangs at SIGTERM cannot push the final
//! flush's deadline further out (shutdown would then take twice the deadline, past a
//! Kubernetes grace period sized for one).

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::sink::bounded::Cutoff;

/// Requests shutdown. Clones request the same shutdown; the first request fixes its
/// instant.
#[derive(Clone, Debug)]
pub struct ShutdownHandle {
    requested: watch::Sender<Option<Instant>>,
}

/// What the flusher watches: unset until shutdown is requested, then its instant.
#[derive(Clone, Debug)]
pub struct ShutdownSignal {
    requested: watch::Receiver<Option<Instant>>,
}

/// A connected handle and signal, nothing requested yet.
pub fn shutdown_channel() -> (ShutdownHandle, ShutdownSignal) {
    let (requested, signal) = watch::channel(None);
    (
        ShutdownHandle { requested },
        ShutdownSignal { requested: signal },
    )
}

impl ShutdownHandle {
    /// Requests shutdown now; a later request keeps the first instant.
    pub fn request(&self) {
        self.requested.send_if_modified(|at| {
            if at.is_some() {
                return false;
            }
            *at = Some(Instant::now());
            true
        });
    }
}

impl ShutdownSignal {
    /// A signal that was requested now (a final flush run on its own).
    pub fn requested_now() -> ShutdownSignal {
        let (handle, signal) = shutdown_channel();
        handle.request();
        signal
    }

    /// When shutdown was requested, if it was.
    pub fn requested_at(&self) -> Option<Instant> {
        *self.requested.borrow()
    }

    /// Resolves when shutdown is requested, with its instant. When every handle is gone
    /// without a request, that counts as a request (nobody is left to make one), made
    /// when it is noticed.
    pub async fn requested(&mut self) -> Instant {
        loop {
            if let Some(at) = *self.requested.borrow_and_update() {
                return at;
            }
            if self.requested.changed().await.is_err() {
                return self.requested_at().unwrap_or_else(Instant::now);
            }
        }
    }
}

/// The instant by which a flush must stop sending: none until shutdown is requested,
/// then the request's instant plus the grace period. One value per shutdown: the flush
/// running at the request and the final flush share it.
#[derive(Debug)]
pub struct Deadline {
    signal: ShutdownSignal,
    grace: Duration,
    /// Fixed once known, so that every flush that asks after that sees the same instant
    /// (it matters when the handle vanished without a request).
    at: Option<Instant>,
}

impl Deadline {
    /// The deadline `grace` after shutdown is requested through `signal`.
    pub fn new(signal: ShutdownSignal, grace: Duration) -> Deadline {
        Deadline {
            signal,
            grace,
            at: None,
        }
    }

    /// The instant, once shutdown was requested.
    pub fn at(&mut self) -> Option<Instant> {
        if self.at.is_none() {
            self.at = self.signal.requested_at().map(|r| r + self.grace);
        }
        self.at
    }

    /// Whether the deadline has passed.
    pub fn passed(&mut self) -> bool {
        self.at().is_some_and(|at| Instant::now() >= at)
    }

    /// Resolves when the deadline passes (never, while shutdown is not requested).
    pub async fn wait(&mut self) {
        let at = match self.at() {
            Some(at) => at,
            None => {
                let requested = self.signal.requested().await;
                *self.at.get_or_insert(requested + self.grace)
            }
        };
        tokio::time::sleep_until(at).await;
    }

    /// Fixes the deadline now if shutdown was never requested (the final flush after the
    /// handle vanished), and returns it.
    pub fn fix(&mut self) -> Instant {
        match self.at() {
            Some(at) => at,
            None => *self.at.get_or_insert(Instant::now() + self.grace),
        }
    }
}

/// The deadline as the cut-off of the shared sending loop (the counter writes and the
/// totals writes of a flush stop at it).
impl Cutoff for Deadline {
    fn passed(&mut self) -> bool {
        Deadline::passed(self)
    }

    async fn wait(&mut self) {
        Deadline::wait(self).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_first_request_fixes_the_deadline_for_everyone() {
        let (handle, signal) = shutdown_channel();
        let grace = Duration::from_secs(3);
        let mut running = Deadline::new(signal.clone(), grace);
        assert_eq!(running.at(), None);
        assert!(!running.passed());
        let requested = Instant::now();
        handle.request();
        tokio::time::sleep(Duration::from_secs(2)).await;
        handle.request();
        let mut last = Deadline::new(signal, grace);
        assert_eq!(running.at(), Some(requested + grace));
        assert_eq!(
            last.at(),
            Some(requested + grace),
            "a later deadline sees the same instant"
        );
        running.wait().await;
        assert_eq!(Instant::now(), requested + grace);
        assert!(last.passed());
    }

    #[tokio::test(start_paused = true)]
    async fn a_vanished_handle_counts_as_a_request_fixed_once() {
        let (handle, signal) = shutdown_channel();
        let mut deadline = Deadline::new(signal, Duration::from_secs(1));
        drop(handle);
        let noticed = Instant::now();
        deadline.wait().await;
        assert_eq!(Instant::now(), noticed + Duration::from_secs(1));
        assert_eq!(deadline.fix(), noticed + Duration::from_secs(1));
    }
}
