//! `countersink state-size`: the most disk a state directory can take with a
//! configuration (see [`crate::state::bound`]), to size its volume by.

use std::path::PathBuf;

use clap::Args;

use crate::config::Config;
use crate::state::bound::{self, StateBound};

use super::Failure;

/// The flags of `state-size`.
#[derive(Debug, Args)]
pub(super) struct StateSizeArgs {
    /// Config file (`[state]` and `limits.max_pending_bytes` set the bound).
    #[arg(long, env = "COUNTERSINK_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// One JSON object: `spill`, `logs`, `journal`, `small_files`, `otlp_streams`,
    /// `ingest_log`, `total`
    /// (bytes), and
    /// `free` (bytes free on the directory's filesystem, null where unknown).
    #[arg(long)]
    json: bool,
}

/// The bound of the configuration's state directory. The same for a sidecar's, a
/// `Recorder`'s and a driver wrapper's directory (they share the outcome logs, and each
/// spills within `state.max_spill_bytes`), plus the OTLP stream table when a receiver
/// is on and the ingest log with a durable receiver.
pub(super) fn state_bound(config: &Config) -> StateBound {
    let mut bound = StateBound::of(&config.state, config.limits.max_pending_bytes as u64);
    let ingest = &config.ingest;
    if ingest.durable() {
        let http = &ingest.http;
        let keys = if http.enabled && http.durable {
            http.max_idempotency_keys
        } else {
            0
        };
        let streams =
            if ingest.otlp.durable && (ingest.otlp_http.enabled || ingest.otlp_grpc.enabled) {
                ingest.otlp.max_streams
            } else {
                0
            };
        bound = bound.with_ingest_log(config.state.max_ingest_log_bytes, keys, streams);
    }
    // A build without the `otlp` feature runs no OTLP receiver, so writes no stream table.
    #[cfg(feature = "otlp")]
    {
        let ingest = &config.ingest;
        if ingest.otlp_grpc.enabled || ingest.otlp_http.enabled {
            return bound.with_otlp_streams(crate::ingest::otlp::persist::max_file_bytes(
                ingest.otlp.max_streams,
            ));
        }
    }
    bound
}

/// Prints the bound, and the room the directory's filesystem has now.
pub(super) fn run(args: StateSizeArgs) -> Result<(), Failure> {
    let config = match &args.config {
        Some(path) => Config::from_file(path).map_err(Failure::usage)?,
        None => Config::default(),
    };
    let bound = state_bound(&config);
    let free = bound::free_bytes(&config.state.dir).ok();
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "dir": config.state.dir,
                "spill": bound.spill,
                "logs": bound.logs,
                "journal": bound.journal,
                "small_files": bound.small_files,
                "otlp_streams": bound.otlp_streams,
                "ingest_log": bound.ingest_log,
                "total": bound.total(),
                "free": free,
            })
        );
        return Ok(());
    }
    let mib = |bytes: u64| format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64);
    println!(
        "{}: at most {} (spill {}, outcome logs {}, journal {}, small files {}, OTLP streams {}, ingest log {})",
        config.state.dir.display(),
        mib(bound.total()),
        mib(bound.spill),
        mib(bound.logs),
        mib(bound.journal),
        mib(bound.small_files),
        mib(bound.otlp_streams),
        mib(bound.ingest_log)
    );
    match free {
        Some(free) => println!("its filesystem has {} free now", mib(free)),
        None => println!("its filesystem's free space could not be read"),
    }
    Ok(())
}
