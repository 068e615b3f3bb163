//! [`Batch`]: the increments of one request of a non-line source (the points of an OTLP
//! request), recorded as [`Engine::record_from`] records one, with what is the same for
//! all of them done once.
//!
//! Per increment, `record_from` locks the thread's stripe twice (to count the increment
//! as received, then to add it), reads the shared routing and borrows the per-thread
//! scratch. A batch does each once: it holds the stripe and the routing for the request
//! (as [`Engine::ingest_packet`] holds the stripe for a packet) and keeps its own series
//! buffer. It reads the limits once too, works out a client time's minute once for the
//! increments in a row that share it, and its router looks a name up once for the
//! increments in a row that carry it (the points of one metric). What each increment
//! becomes, and every counter, is exactly what `record_from` gives it, under the routing
//! and limits of the batch's start: a reload meanwhile applies from the next batch.

use crate::aggregate::{self, Limits, Stripe};
use crate::bucket::Minute;
use crate::family::{Router, TagSet};
use crate::vocabulary::DropReason;
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
    /// The limits (their timestamp window) read once for the batch, as the routing is.
    limits: Limits,
    /// The last client time seen and its minute: a request's points mostly share one.
    last_minute: Option<(Option<i64>, Result<Minute, DropReason>)>,
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
            limits: self.aggregator.limits(),
            last_minute: None,
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
        let minute = match self.last_minute {
            Some((last_at, minute)) if last_at == at => minute,
            _ => {
                let minute = aggregate::minute_for(self.now_unix_secs, at, &self.limits);
                self.last_minute = Some((at, minute));
                minute
            }
        };
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
