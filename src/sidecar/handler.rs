//! The bridge from a receive thread to the engine.

use std::sync::Arc;

use crate::bucket::Minute;
use crate::engine::{self, Engine};
use crate::ingest::{PacketHandler, RecordOne, Recorded};
use crate::state::ingest_log::IngestLog;
use crate::vocabulary::Transport;

/// Hands each datagram (or stream message) to the engine, stamped with the time it was
/// read. One per receive thread, so each thread adds into its own stripe.
///
/// The stamp comes from the engine's coarse clock (see [`engine::now_unix_secs`]): a
/// datagram read in the first timer tick of a minute may land in the minute before, never
/// after; reading the precise clock per datagram cost more than parsing a one-line
/// datagram.
pub struct EngineHandler {
    engine: Arc<Engine>,
    transport: Transport,
    ingest_log: Option<Arc<IngestLog>>,
}

impl EngineHandler {
    /// A handler for one receive thread of `transport`.
    pub fn new(engine: Arc<Engine>, transport: Transport) -> EngineHandler {
        EngineHandler {
            engine,
            transport,
            ingest_log: None,
        }
    }

    /// The same, handing durable requests to `ingest_log` (see
    /// [`crate::state::ingest_log`]).
    pub fn with_ingest_log(mut self, ingest_log: Option<Arc<IngestLog>>) -> EngineHandler {
        self.ingest_log = ingest_log;
        self
    }
}

impl PacketHandler for EngineHandler {
    fn handle(&mut self, packet: &[u8]) {
        let now = engine::now_unix_secs();
        self.engine.ingest_packet(packet, self.transport, now);
    }

    fn record(
        &mut self,
        name: &str,
        tags: &[(&str, &str)],
        delta: i64,
        at: Option<i64>,
    ) -> Recorded {
        let now = engine::now_unix_secs();
        match self
            .engine
            .record_from(self.transport, name, tags, delta, now, at)
        {
            Ok(()) => Recorded::Accepted,
            Err(_) => Recorded::Refused,
        }
    }

    fn check(
        &mut self,
        name: &str,
        tags: &[(&str, &str)],
        delta: i64,
        at: Option<i64>,
    ) -> Result<Minute, engine::Refusal> {
        let now = engine::now_unix_secs();
        self.engine.check_from(name, tags, delta, now, at)
    }

    fn count_checked(&mut self, accepted: u64, refused: &[engine::Refusal]) {
        self.engine.count_checked(self.transport, accepted, refused);
    }

    fn ingest_log(&self) -> Option<Arc<IngestLog>> {
        self.ingest_log.clone()
    }

    /// One [`Batch`](engine::Batch) for the request: the stripe and the routing taken
    /// once, the clock read once.
    fn record_each(&mut self, increments: &mut dyn FnMut(&mut RecordOne<'_>)) {
        let mut batch = self.engine.batch(self.transport, engine::now_unix_secs());
        increments(
            &mut |name, tags, delta, at| match batch.record(name, tags, delta, at) {
                Ok(()) => Recorded::Accepted,
                Err(_) => Recorded::Refused,
            },
        );
    }

    fn busy(&self) -> bool {
        let aggregator = self.engine.aggregator();
        aggregator.under_pressure() || aggregator.is_closed()
    }
}
