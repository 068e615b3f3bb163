//! Structured logs with `tracing`: text for people, JSON for log pipelines.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::{LogConfig, LogFormat};

/// Installs the global subscriber. `RUST_LOG` (or `COUNTERSINK_LOG`) overrides the
/// configured filter.
pub(super) fn init(config: &LogConfig) {
    let filter = std::env::var("COUNTERSINK_LOG")
        .ok()
        .or_else(|| std::env::var("RUST_LOG").ok())
        .unwrap_or_else(|| config.filter.clone());
    let filter = EnvFilter::try_new(&filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let result = match config.format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
    // A subscriber may already be installed (tests); that one then wins.
    let _ = result;
}
