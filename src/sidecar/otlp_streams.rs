//! The OTLP cumulative stream table across restarts: read from the state directory at
//! start, saved by the flush between its drain and its first send (see
//! [`crate::ingest::otlp::state`] for why exactly there).

use std::sync::Arc;

use crate::config::Config;
use crate::flush::FlushObserver;
use crate::ingest::Kept;
use crate::ingest::otlp::{self, StreamState};
use crate::sink::{PartitionWrite, TotalsWrite};

/// Saves the stream table when a flush is about to send.
struct SaveStreams(Arc<StreamState>);

impl FlushObserver for SaveStreams {
    fn planned(&self, _writes: &[PartitionWrite]) {
        self.0.save_if_changed();
    }

    /// The totals stage sends after the counter stage, whose `planned` saved already.
    fn planned_totals(&self, _writes: &[TotalsWrite]) {}
}

/// The table read from the state directory and its flush observer, when an OTLP receiver
/// is on; nothing otherwise (no file is read or written).
pub(super) fn open(config: &Config) -> (Kept, Option<Arc<dyn FlushObserver>>) {
    let ingest = &config.ingest;
    if !ingest.otlp_http.enabled && !ingest.otlp_grpc.enabled {
        return (Kept::default(), None);
    }
    let state = Arc::new(StreamState::open(
        &ingest.otlp,
        config.state.dir.clone(),
        otlp::now_unix_nanos(),
    ));
    let observer = Arc::new(SaveStreams(Arc::clone(&state)));
    (
        Kept {
            otlp_streams: Some(state),
        },
        Some(observer),
    )
}
