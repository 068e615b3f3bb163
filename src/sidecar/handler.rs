//! The bridge from a receive thread to the engine.

use std::sync::Arc;
use std::time::SystemTime;

use crate::aggregate::Transport;
use crate::bucket;
use crate::engine::Engine;
use crate::ingest::PacketHandler;

/// Hands each datagram (or stream message) to the engine, stamped with the time it was
/// read. One per receive thread, so each thread adds into its own stripe.
pub struct EngineHandler {
    engine: Arc<Engine>,
    transport: Transport,
}

impl EngineHandler {
    /// A handler for one receive thread of `transport`.
    pub fn new(engine: Arc<Engine>, transport: Transport) -> EngineHandler {
        EngineHandler { engine, transport }
    }
}

impl PacketHandler for EngineHandler {
    fn handle(&mut self, packet: &[u8]) {
        let now = bucket::unix_secs(SystemTime::now());
        self.engine.ingest_packet(packet, self.transport, now);
    }
}
