//! The Unix stream socket: binding it, and its registration. Its connections are served
//! by `stream` (length-prefixed or newline framing, see `ingest.uds_stream.framing`).

use std::path::Path;
use std::sync::Arc;

use socket2::{Socket, Type};

use super::receivers::Receivers;
use super::stream::{Acceptor, StreamSettings};
use super::unix_path::{self, SocketFile};
use super::{IDLE_INTERVAL, ListenError, PacketHandler, Step};
use crate::config::ingest::{IngestConfig, UnixStreamConfig};
use crate::vocabulary::Transport;

const TRANSPORT: Transport = Transport::UnixStream;
/// Starts the Unix stream receiver if `ingest.uds_stream.path` is set: the accept thread.
pub(super) fn start<F, H>(
    config: &IngestConfig,
    receivers: &mut Receivers,
    factory: &Arc<F>,
) -> Result<(), ListenError>
where
    F: Fn(Transport) -> H + Send + Sync + 'static,
    H: PacketHandler,
{
    let Some(path) = &config.uds_stream.path else {
        return Ok(());
    };
    let (listener, file) = bind(&config.uds_stream, path)?;
    receivers.listen_unix(TRANSPORT, path, file);
    let acceptor = Acceptor {
        listener,
        factory: Arc::clone(factory),
        stats: receivers.shared_stats(),
        stop: receivers.stop_flag(),
        settings: StreamSettings {
            transport: TRANSPORT,
            framing: config.uds_stream.framing,
            max_message_bytes: config.uds_stream.max_message_bytes,
            max_connections: config.uds_stream.max_connections,
            idle_timeout: config.uds_stream.idle_timeout,
        },
    };
    let address = path.display().to_string();
    receivers.spawn(TRANSPORT, &address, "cs-uds-accept".into(), move || {
        acceptor.run()
    })?;
    tracing::info!(
        path = address,
        mode = %config.uds_stream.mode,
        framing = ?config.uds_stream.framing,
        max_connections = config.uds_stream.max_connections,
        "Listening for StatsD messages on a Unix stream socket."
    );
    Ok(())
}

/// Binds and listens at `path`.
fn bind(config: &UnixStreamConfig, path: &Path) -> Result<(Socket, SocketFile), ListenError> {
    let address = path.display().to_string();
    unix_path::bind(path, Type::STREAM, config.mode, TRANSPORT, |socket| {
        // On Linux the receive timeout also bounds a blocking accept(2).
        socket.set_read_timeout(Some(IDLE_INTERVAL)).map_err(|e| {
            ListenError::io(
                TRANSPORT,
                address.clone(),
                Step::SetOption("SO_RCVTIMEO"),
                e,
            )
        })
    })
}
