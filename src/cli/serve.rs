//! `countersink serve`.

use std::sync::Arc;

use crate::config::Config;
use crate::sidecar::Sidecar;
use crate::sidecar::reload::{ConfigSource, Reloader};
use crate::state::bound;

use super::args::ServeArgs;
use super::{Failure, logging};

/// Runs the sidecar until SIGTERM or SIGINT; SIGHUP re-reads the configuration.
pub(super) async fn run(args: ServeArgs) -> Result<(), Failure> {
    let config = args.load()?;
    logging::init(&config.log).map_err(Failure::usage)?;
    check_state_room(&config, args.strict)?;
    let args = Arc::new(args);
    let source: ConfigSource = Arc::new(move || args.load().map_err(|f| f.to_string()));
    run_sidecar(&config, Some(source), |_| {}).await
}

/// Compares what the configuration lets countersink write to its state directory with
/// the room its filesystem has (see [`crate::state::bound`]): a warning, or with
/// `strict` a refusal to start. A figure that cannot be read is a warning either way.
pub(super) fn check_state_room(config: &Config, strict: bool) -> Result<(), Failure> {
    let dir = &config.state.dir;
    let bound = super::state_size::state_bound(config);
    let (free, used) = match (bound::free_bytes(dir), bound::used_bytes(dir)) {
        (Ok(free), Ok(used)) => (free, used),
        (Err(error), _) | (_, Err(error)) => {
            tracing::warn!(%error, dir = %dir.display(), "Could not read the free space of the state directory's filesystem; its room is not checked.");
            return Ok(());
        }
    };
    let bound::Room::Short { bound: total, .. } = bound::room(bound.total(), free, used) else {
        return Ok(());
    };
    let message = format!(
        "the state directory {} can take up to {} (spill {}, outcome logs {}, journal {}; `countersink state-size`), but its filesystem has {} free and the directory holds {}: past the free space, spilled rows and outcome records are dropped (counted); lower state.max_spill_bytes or state.max_log_bytes, or give the directory more room",
        dir.display(),
        mib(total),
        mib(bound.spill),
        mib(bound.logs),
        mib(bound.journal),
        mib(free),
        mib(used),
    );
    if strict {
        return Err(Failure::usage(format!("{message} (refused: --strict)")));
    }
    tracing::warn!("The {message}.");
    Ok(())
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

/// Starts a sidecar for `config` (re-read from `source` on SIGHUP), calls `started` with
/// it (dev prints its banner there), waits for a signal (or a fatal schema mismatch), and
/// shuts down in order.
pub(super) async fn run_sidecar(
    config: &Config,
    source: Option<ConfigSource>,
    started: impl FnOnce(&Sidecar),
) -> Result<(), Failure> {
    // Installed before the sidecar starts and before `started` announces it: a signal sent
    // as soon as the banner appears must reach the handler, not the default action (which
    // would kill the process without its final flush).
    let mut signals = ShutdownSignals::install();
    // SIGHUP too: its default action would kill the process.
    let hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
    let mut sidecar = Sidecar::start_reloadable(config, source)
        .await
        .map_err(|e| Failure::with_code(e.exit_code(), e))?;
    let reloads = watch_reloads(hangups, sidecar.reloader());
    let bound = sidecar.bound();
    tracing::info!(
        listening = %bound
            .listening
            .iter()
            .map(|l| format!("{} {}", l.transport, l.address))
            .collect::<Vec<_>>()
            .join(", "),
        metrics = ?bound.metrics,
        state_dir = %config.state.dir.display(),
        "countersink is running."
    );
    started(&sidecar);
    let stop_reason = tokio::select! {
        signal = signals.recv() => signal,
        reason = sidecar.fatal() => reason,
    };
    reloads.abort();
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

/// Reloads the configuration on every SIGHUP `hangups` sees (one at a time; a refusal is
/// logged and counted by the reloader), until aborted. Without a watch on SIGHUP, says
/// so once.
fn watch_reloads(
    hangups: std::io::Result<tokio::signal::unix::Signal>,
    reloader: Arc<Reloader>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut hangups = match hangups {
            Ok(hangups) => hangups,
            Err(error) => {
                tracing::warn!(%error, "Cannot watch SIGHUP; reload with POST /-/reload instead.");
                return;
            }
        };
        while hangups.recv().await.is_some() {
            let _ = reloader.reload("SIGHUP").await;
        }
    })
}

/// SIGTERM and SIGINT, watched from the moment [`ShutdownSignals::install`] returns.
pub(super) struct ShutdownSignals {
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
}

impl ShutdownSignals {
    /// Replaces the default action of both signals (terminate) with a watch. A signal that
    /// cannot be watched is logged; the other still stops the process.
    pub(super) fn install() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        let watch = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(watch) => Some(watch),
            Err(error) => {
                tracing::warn!(%error, "Cannot watch {name}; only the other signal will stop the process.");
                None
            }
        };
        ShutdownSignals {
            term: watch(SignalKind::terminate(), "SIGTERM"),
            int: watch(SignalKind::interrupt(), "SIGINT"),
        }
    }

    /// Resolves on the first SIGTERM or SIGINT, naming it. Never resolves when neither
    /// could be watched.
    pub(super) async fn recv(&mut self) -> String {
        async fn next(watch: &mut Option<tokio::signal::unix::Signal>) {
            match watch {
                Some(watch) => {
                    watch.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            _ = next(&mut self.term) => "SIGTERM".into(),
            _ = next(&mut self.int) => "SIGINT".into(),
        }
    }
}
