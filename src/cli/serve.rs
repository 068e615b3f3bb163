//! `countersink serve`.

use crate::config::Config;
use crate::sidecar::Sidecar;

use super::args::ServeArgs;
use super::{Failure, logging};

/// Runs the sidecar until SIGTERM or SIGINT.
pub(super) async fn run(args: ServeArgs) -> Result<(), Failure> {
    let config = args.load()?;
    logging::init(&config.log);
    run_sidecar(&config, |_| {}).await
}

/// Starts a sidecar for `config`, calls `started` with it (dev prints its banner there),
/// waits for a signal (or a fatal schema mismatch), and shuts down in order.
pub(super) async fn run_sidecar(
    config: &Config,
    started: impl FnOnce(&Sidecar),
) -> Result<(), Failure> {
    let mut sidecar = Sidecar::start(config)
        .await
        .map_err(|e| Failure::with_code(e.exit_code(), e))?;
    let bound = sidecar.bound();
    tracing::info!(
        udp = ?bound.udp,
        uds = ?bound.uds,
        uds_stream = ?bound.uds_stream,
        metrics = ?bound.metrics,
        state_dir = %config.state.dir.display(),
        "countersink is running."
    );
    started(&sidecar);
    let stop_reason = tokio::select! {
        signal = shutdown_signal() => signal,
        reason = sidecar.fatal() => reason,
    };
    tracing::info!(reason = %stop_reason, "Shutting down: draining sockets, then the final flush.");
    let fatal = sidecar.fatal_reason();
    let report = sidecar.shutdown().await;
    match &report {
        Some(r) => tracing::info!(
            rows = r.rows,
            writes = r.writes,
            applied = r.applied,
            unknown = r.unknown,
            spilled = r.spilled,
            "Final flush done."
        ),
        None => tracing::error!("The final flush did not complete."),
    }
    match fatal {
        Some(reason) => Err(Failure::usage(format!(
            "the store's schema does not match the configuration: {reason}"
        ))),
        None if report.is_none() => Err(Failure::other("the final flush did not complete")),
        None => Ok(()),
    }
}

/// Resolves on SIGTERM or SIGINT, naming it.
pub(super) async fn shutdown_signal() -> String {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(term) => term,
        Err(error) => {
            tracing::warn!(%error, "Cannot watch SIGTERM; only SIGINT will stop the sidecar.");
            let _ = tokio::signal::ctrl_c().await;
            return "SIGINT".into();
        }
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM".into(),
        _ = tokio::signal::ctrl_c() => "SIGINT".into(),
    }
}
