//! The OTLP cumulative stream table across restarts: read from the state directory at
//! start, saved by the flush right after its drain, before anything of it is written (see
//! [`crate::ingest::otlp::state`] for why exactly there); with durable receivers, kept
//! by the ingest log instead.

use std::sync::Arc;

use crate::config::Config;
use crate::flush::FlushObserver;
use crate::ingest::Kept;
use crate::ingest::otlp::{self, StreamState};
use crate::sink::PlannedWrite;
use crate::state::ingest_log::{self, IngestLog, RecoveredStreams};

/// Saves the stream table when a flush has drained rows, before anything of them is
/// written (an exact family's ledger rows among them: written before the save, a kill
/// between the two would leave the file's older point, and the next point's difference
/// would be counted in the ledger twice).
struct SaveStreams(Arc<StreamState>);

impl FlushObserver for SaveStreams {
    fn planned(&self, _writes: &[&dyn PlannedWrite]) {}

    /// At every drain, and only there: a save at a replay chunk or at the running
    /// totals' writes would record points whose differences are still only in memory.
    fn drained(&self) {
        self.0.save_if_changed();
    }
}

/// The table read from the state directory and its flush observer, when an OTLP receiver
/// is on; nothing otherwise (no file is read or written).
pub(super) fn open(config: &Config) -> (Kept, Option<Arc<dyn FlushObserver>>) {
    let ingest = &config.ingest;
    if !ingest.otlp_http.enabled && !ingest.otlp_grpc.enabled {
        return (Kept::default(), None);
    }
    let state = StreamState::open(
        &ingest.otlp,
        config.state.dir.clone(),
        otlp::now_unix_nanos(),
    );
    if ingest.otlp.durable {
        // Nothing to save at a flush: the ingest log keeps the table.
        let state = Arc::new(state.durable());
        return (
            Kept {
                otlp_streams: Some(state),
            },
            None,
        );
    }
    let state = Arc::new(state);
    let observer = Arc::new(SaveStreams(Arc::clone(&state)));
    (
        Kept {
            otlp_streams: Some(state),
        },
        Some(observer),
    )
}

/// Merges the table the ingest log kept (its file, and the stream lines of its files not
/// moved yet) into `kept`'s, once the pipeline opened the log and before the receivers
/// start; then leaves the table in one file only (see [`crate::ingest::otlp::state`]).
pub(super) fn adopt(
    kept: &Kept,
    config: &Config,
    log: Option<&Arc<IngestLog>>,
) -> std::io::Result<()> {
    let Some(state) = &kept.otlp_streams else {
        return Ok(());
    };
    let dir = &config.state.dir;
    let now = otlp::now_unix_nanos();
    let recovered = match log {
        Some(log) => log.take_recovered_streams(),
        None => {
            let (complete_since, lines) = ingest_log::streams::read(dir)?;
            let mut table = RecoveredStreams {
                complete_since,
                lines: Vec::new(),
            };
            table.fold(lines, config.ingest.otlp.max_streams, now);
            table
        }
    };
    state.merge(&recovered, now);
    if config.ingest.otlp.durable {
        let Some(log) = log else {
            return Err(std::io::Error::other(
                "ingest.otlp.durable needs the pipeline's ingest log",
            ));
        };
        log.rewrite_streams(&state.snapshot())?;
        return state.remove_file();
    }
    if recovered.complete_since.is_none() && recovered.lines.is_empty() {
        return Ok(());
    }
    if !state.save() {
        return Err(std::io::Error::other(
            "the merged OTLP stream table could not be saved",
        ));
    }
    match log {
        Some(log) => log.remove_streams(),
        None => ingest_log::streams::remove(dir),
    }
}
