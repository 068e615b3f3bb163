//! `HandlerPool`: the handlers of a request-based receiver (the OTLP listeners, the
//! HTTP increment API), one per worker of its runtime ([`workers`]), so that requests on
//! several connections parse and record at the same time instead of queueing on one
//! locked handler.

use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

use parking_lot::{Mutex, MutexGuard};

/// Most runtime threads per listener. Reading a request (decoding protobuf, parsing
/// JSON) is a request receiver's largest cost and one thread reads one request at a
/// time, so more cores absorb more; beyond four the listeners would crowd the flush and
/// the line receivers out of a sidecar's cores.
pub const MAX_WORKERS: usize = 4;

/// Runtime threads per listener: the cores available, at most [`MAX_WORKERS`].
pub fn workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_WORKERS))
}

/// One handler per runtime worker: a request takes a free one, so requests on different
/// workers never wait on each other's handler.
pub(super) struct HandlerPool<H> {
    handlers: Vec<Mutex<H>>,
    /// Where the search for a free handler starts next.
    next: AtomicUsize,
}

impl<H> HandlerPool<H> {
    /// `size` handlers (at least one), each made by `make`.
    pub(super) fn new(size: usize, mut make: impl FnMut() -> H) -> HandlerPool<H> {
        HandlerPool {
            handlers: (0..size.max(1)).map(|_| Mutex::new(make())).collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// How many handlers there are: the runtime's worker count.
    pub(super) fn len(&self) -> usize {
        self.handlers.len()
    }

    /// A free handler (there is one per worker and a request holds one only while it is
    /// applied, without waiting on anything, so one is free unless a caller outside the
    /// runtime competes: then it waits for one).
    pub(super) fn take(&self) -> MutexGuard<'_, H> {
        let n = self.handlers.len();
        let first = self.next.fetch_add(1, Relaxed);
        (0..n)
            .find_map(|i| self.handlers[(first + i) % n].try_lock())
            .unwrap_or_else(|| self.handlers[first % n].lock())
    }

    /// Handler `i`, for a test to hold or look into.
    #[cfg(test)]
    pub(super) fn slot(&self, i: usize) -> &Mutex<H> {
        &self.handlers[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// While one handler is held, the next request gets another one, not a wait.
    #[test]
    fn a_held_handler_is_passed_over() {
        let mut made = 0;
        let pool = HandlerPool::new(2, || {
            made += 1;
            made
        });
        assert_eq!(pool.len(), 2);
        let first = pool.take();
        for _ in 0..4 {
            let other = pool.take();
            assert_ne!(*other, *first);
        }
    }

    /// A pool is never empty: asked for none, it holds one.
    #[test]
    fn at_least_one_handler() {
        let pool = HandlerPool::new(0, || ());
        assert_eq!(pool.len(), 1);
        drop(pool.take());
    }
}
