//! Structured logs with `tracing`: text for people, JSON for log pipelines.

use std::io::IsTerminal;

use crate::config::{LogConfig, LogFormat};
use crate::sidecar::log_filter;

/// Installs the global subscriber, its filter reloadable (a live reload may change
/// `log.filter`). `COUNTERSINK_LOG` (or `RUST_LOG`) overrides the configured filter, and
/// then keeps it. A filter that does not parse is an error naming where it came from.
pub(super) fn init(config: &LogConfig) -> Result<(), String> {
    let from_env = ["COUNTERSINK_LOG", "RUST_LOG"]
        .into_iter()
        .find_map(|name| std::env::var(name).ok().map(|value| (name, value)));
    let filter = match &from_env {
        Some((name, value)) => {
            log_filter::parse(value).map_err(|error| format!("{name}: {error}"))?
        }
        None => log_filter::parse(&config.filter)?,
    };
    let pinned_by = from_env.map(|(name, _)| name);
    let builder = tracing_subscriber::fmt()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    // A subscriber may already be installed (tests); that one then wins, and its filter
    // is not ours to change.
    match config.format {
        LogFormat::Json => {
            let builder = builder
                .json()
                .with_env_filter(filter)
                .with_filter_reloading();
            let handle = builder.reload_handle();
            if builder.try_init().is_ok() {
                log_filter::install(
                    move |f| handle.reload(f).map_err(|e| e.to_string()),
                    pinned_by,
                );
            }
        }
        LogFormat::Text => {
            let builder = builder.with_env_filter(filter).with_filter_reloading();
            let handle = builder.reload_handle();
            if builder.try_init().is_ok() {
                log_filter::install(
                    move |f| handle.reload(f).map_err(|e| e.to_string()),
                    pinned_by,
                );
            }
        }
    }
    Ok(())
}
