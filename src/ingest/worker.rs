//! What every receive thread shares: the stop flag, the idle clock, the drain deadline and
//! rate-limited warnings.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::{IDLE_INTERVAL, MAX_DRAIN};

/// Raised once by [`Receivers::shutdown`](super::Receivers::shutdown); every thread polls it
/// after each read (at least every [`IDLE_INTERVAL`], the read timeout).
#[derive(Debug, Clone, Default)]
pub(super) struct StopFlag(Arc<AtomicBool>);

impl StopFlag {
    pub(super) fn raise(&self) {
        self.0.store(true, Ordering::Release);
    }

    pub(super) fn is_raised(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// Whether the thread runs normally or drains before exiting.
#[derive(Debug, Clone, Copy)]
pub(super) enum Phase {
    /// Blocking reads with the idle timeout.
    Running,
    /// Non-blocking reads until the queue is empty or the deadline passes.
    Draining { deadline: Instant },
}

impl Phase {
    /// Moves to `Draining` the first time the stop flag is seen raised.
    pub(super) fn update(&mut self, stop: &StopFlag) {
        if matches!(self, Phase::Running) && stop.is_raised() {
            *self = Phase::Draining {
                deadline: Instant::now() + MAX_DRAIN,
            };
        }
    }

    pub(super) fn is_draining(self) -> bool {
        matches!(self, Phase::Draining { .. })
    }

    /// True when draining for longer than [`MAX_DRAIN`] (senders keep the queue full).
    pub(super) fn drain_expired(self) -> bool {
        match self {
            Phase::Running => false,
            Phase::Draining { deadline } => Instant::now() >= deadline,
        }
    }
}

/// Tells a busy receive loop when [`PacketHandler::idle`](super::PacketHandler::idle) is due.
#[derive(Debug)]
pub(super) struct IdleClock {
    next: Instant,
}

impl IdleClock {
    pub(super) fn new() -> IdleClock {
        IdleClock {
            next: Instant::now() + IDLE_INTERVAL,
        }
    }

    /// True (and restarts the interval) when an interval has passed since the last `idle()`.
    pub(super) fn due(&mut self) -> bool {
        let now = Instant::now();
        if now >= self.next {
            self.next = now + IDLE_INTERVAL;
            true
        } else {
            false
        }
    }

    /// Records that `idle()` was just called for another reason (read timeout).
    pub(super) fn reset(&mut self) {
        self.next = Instant::now() + IDLE_INTERVAL;
    }
}

/// At most one warning per [`RateLimitedLog::INTERVAL`] from one thread; the number of
/// suppressed ones is passed to the next.
#[derive(Debug, Default)]
pub(super) struct RateLimitedLog {
    last: Option<Instant>,
    suppressed: u64,
}

impl RateLimitedLog {
    const INTERVAL: Duration = Duration::from_secs(10);

    /// Calls `log(suppressed_since_last)` unless a warning was logged less than 10 s ago.
    pub(super) fn log(&mut self, log: impl FnOnce(u64)) {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|last| now.duration_since(last) < Self::INTERVAL)
        {
            self.suppressed += 1;
            return;
        }
        log(self.suppressed);
        self.last = Some(now);
        self.suppressed = 0;
    }
}

/// Pause after an unexpected receive error, so a persistent one cannot spin a core.
pub(super) const ERROR_BACKOFF: Duration = Duration::from_millis(10);
