//! [`start`]: bringing every configured receiver up, one registration line per transport.
//!
//! Each transport's module has a `start` that binds its sockets, records where it
//! listens and spawns its threads through [`Receivers`]; this calls them in turn.

use std::sync::Arc;

use super::receivers::Receivers;
use super::{ListenError, PacketHandler};
use super::{tcp, udp, unix_datagram, unix_stream};
use crate::config::ingest::IngestConfig;
use crate::vocabulary::Transport;

/// What receivers keep beyond a restart, handed in by the process that runs them.
#[derive(Debug, Default, Clone)]
pub struct Kept {
    /// The OTLP cumulative stream table, read from the state directory (none: a table
    /// in memory only).
    #[cfg(feature = "otlp")]
    pub otlp_streams: Option<Arc<super::otlp::StreamState>>,
}

/// Binds every configured receiver and starts its threads, keeping nothing beyond a
/// restart (see [`start_keeping`]).
pub fn start<F, H>(config: &IngestConfig, factory: F) -> Result<Receivers, ListenError>
where
    F: Fn(Transport) -> H + Send + Sync + 'static,
    H: PacketHandler,
{
    start_keeping(config, Kept::default(), factory)
}

/// Binds every configured receiver and starts its threads, with what `kept` carries
/// over from an earlier run.
///
/// `factory` is called once per receive thread (and once per accepted stream connection,
/// from the accept thread) to create that thread's handler.
///
/// On error nothing is left behind: threads already started are stopped and joined, socket
/// files already created are removed.
pub fn start_keeping<F, H>(
    config: &IngestConfig,
    kept: Kept,
    factory: F,
) -> Result<Receivers, ListenError>
where
    F: Fn(Transport) -> H + Send + Sync + 'static,
    H: PacketHandler,
{
    config.validate()?;
    let factory = Arc::new(factory);
    // Dropped on any early return below, which stops what was started.
    let mut receivers = Receivers::empty();
    // The registration of every transport: one line each.
    udp::start(config, &mut receivers, &factory)?;
    unix_datagram::start(config, &mut receivers, &factory)?;
    unix_stream::start(config, &mut receivers, &factory)?;
    tcp::start(config, &mut receivers, &factory)?;
    super::http_api::start(config, &mut receivers, &factory)?;
    #[cfg(feature = "otlp")]
    super::otlp::start(config, kept.otlp_streams, &mut receivers, &factory)?;
    #[cfg(not(feature = "otlp"))]
    let Kept {} = kept;
    Ok(receivers)
}
