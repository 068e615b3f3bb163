//! [`Batch`]: the increments of one request of a non-line source (the points of an OTLP
//! request), recorded as [`Engine::record_from`] records one, with what is the same for
//! all of them done once.
//!
//! Per increment, `record_from` locks the thread's stripe twice (to count the increment
//! as received, then to add it), reads the shared routing and borrows the per-thread
//! scratch. A batch does each once: it holds the stripe and the routing for the request
//! (as [`Engine::ingest_packet`] holds the stripe for a packet) and keeps its own series
//! buffer. What each increment becomes, and every counter, is exactly what
//! `record_from` gives it.

use crate::aggregate::{self, Stripe};
use crate::family::{Router, TagSet};
use crate::vocabulary::Transport;

use super::{Engine, RecordError};

/// A run of increments from one source, received at one time (see the module).
///
/// It holds the calling thread's stripe: the flush waits for it to be dropped, and the
/// thread must not record into the engine by another way until then (the stripe's lock
/// is not re-entrant). Keep it for one request, not longer.
pub struct Batch<'e> {
    engine: &'e Engine,
    stripe: Stripe<'e>,
    router: Router<'e>,
    source: Transport,
    now_unix_secs: i64,
    series: Vec<u8>,
}

impl Engine {
    /// A batch of increments from `source` received at `now_unix_secs` (see [`Batch`]).
    pub fn batch(&self, source: Transport, now_unix_secs: i64) -> Batch<'_> {
        Batch {
            engine: self,
            stripe: self.aggregator.stripe(),
            router: self.families.router(),
            source,
            now_unix_secs,
            series: Vec::new(),
        }
    }
}

impl Batch<'_> {
    /// Counts one increment received and keeps it, as [`Engine::record_from`] does.
    pub fn record<T: TagSet + ?Sized>(
        &mut self,
        name: &str,
        tags: &T,
        delta: i64,
        at: Option<i64>,
    ) -> Result<(), RecordError> {
        let engine = self.engine;
        self.stripe.counters().count_line(self.source);
        let minute = aggregate::minute_for(self.now_unix_secs, at, &engine.aggregator.limits());
        let target = match self.router.resolve(name, tags, &mut self.series) {
            Ok(target) => target,
            Err(unplaced) => return Err(Engine::unplaced_in(&mut self.stripe, unplaced, delta)),
        };
        engine
            .add(
                &mut self.stripe,
                target,
                &self.series,
                None,
                delta,
                1,
                (minute, self.now_unix_secs),
            )
            .map_err(RecordError::Dropped)
    }
}
