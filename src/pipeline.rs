//! Assembling a running pipeline: engine, state directory, flusher task.
//!
//! Shared by the in-process [`crate::Recorder`] and the sidecar, so both open the state
//! directory, replay the spill and shut down the same way.

use std::sync::Arc;

use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::config::{Config, ConfigError};
use crate::engine::Engine;
use crate::epoch::EpochRegistry;
use crate::flush::{
    BarrierHandle, FlushObserver, FlushReport, Flusher, ShutdownHandle, barrier_channel,
    shutdown_channel,
};
use crate::sink::Sink;
use crate::state::StateError;
use crate::state::ingest_log::IngestLog;
use crate::telemetry::Accounting;
use crate::telemetry::Ledger;

/// Why a pipeline could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The state directory could not be opened.
    #[error(transparent)]
    State(#[from] StateError),
    /// The store could not be reached, or its schema does not match the configuration.
    #[error(transparent)]
    Cql(#[from] crate::sink::cql::CqlSinkError),
}

/// A running engine with its flush task.
pub struct Pipeline {
    engine: Arc<Engine>,
    ledger: Arc<Ledger>,
    shutdown: ShutdownHandle,
    /// Changes applied by the flush task after a flush round (a live reload).
    barriers: BarrierHandle,
    /// The ingest log durable requests go to, when the state directory keeps one.
    ingest_log: Option<Arc<IngestLog>>,
    task: Option<JoinHandle<FlushReport>>,
}

impl Pipeline {
    /// Opens the state directory (finishing what a killed run left unfinished; the spill is replayed by the flushes) and starts flushing into
    /// `sink`. Must be called inside a tokio runtime.
    pub async fn start<S: Sink>(config: &Config, sink: S) -> Result<Pipeline, StartError> {
        Self::start_with(Arc::new(Engine::new(config)?), config, sink).await
    }

    /// The same, with an engine built by the caller (for example with a fixed seed).
    pub async fn start_with<S: Sink>(
        engine: Arc<Engine>,
        config: &Config,
        sink: S,
    ) -> Result<Pipeline, StartError> {
        Self::start_observed(engine, config, sink, Vec::new()).await
    }

    /// The same, with observers of every flush's planned writes (the key index).
    pub async fn start_observed<S: Sink>(
        engine: Arc<Engine>,
        config: &Config,
        sink: S,
        observers: Vec<Arc<dyn FlushObserver>>,
    ) -> Result<Pipeline, StartError> {
        Self::start_placed(engine, config, sink, observers, None).await
    }

    /// The same, placing the rows of epoch families by `epochs` (see [`crate::epoch`]).
    pub async fn start_placed<S: Sink>(
        engine: Arc<Engine>,
        config: &Config,
        sink: S,
        observers: Vec<Arc<dyn FlushObserver>>,
        epochs: Option<Arc<EpochRegistry>>,
    ) -> Result<Pipeline, StartError> {
        let (blocking_engine, blocking_config) = (engine.clone(), config.clone());
        let flusher = tokio::task::spawn_blocking(move || {
            let mut flusher = Flusher::open(blocking_engine, Arc::new(sink), &blocking_config)?;
            for observer in observers {
                flusher.observe(observer);
            }
            if let Some(epochs) = epochs {
                flusher.place_epochs(epochs);
            }
            Ok::<_, StateError>(flusher)
        })
        .await
        .map_err(|e| StateError::Io {
            dir: config.state.dir.clone(),
            step: "open",
            error: std::io::Error::other(e),
        })??;
        let ledger = flusher.ledger().clone();
        let ingest_log = flusher.ingest_log().cloned();
        let early = Arc::new(Notify::new());
        let notify = early.clone();
        engine.aggregator().on_pressure(move || notify.notify_one());
        let (shutdown, signal) = shutdown_channel();
        let (barriers, accepted) = barrier_channel();
        let mut flusher = flusher;
        flusher.accept_barriers(accepted);
        let task = tokio::spawn(flusher.run(signal, early));
        Ok(Pipeline {
            engine,
            ledger,
            shutdown,
            barriers,
            ingest_log,
            task: Some(task),
        })
    }

    /// The engine (for recording and for metrics).
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Where to send a change the flush task applies right after flushing what is
    /// pending (see [`crate::flush::barrier`]).
    pub fn barriers(&self) -> &BarrierHandle {
        &self.barriers
    }

    /// The ingest log durable requests go to (`ingest.http.durable`), when there is one.
    pub fn ingest_log(&self) -> Option<&Arc<IngestLog>> {
        self.ingest_log.as_ref()
    }

    /// The flusher's ledger.
    pub fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    /// The accounting identity's stages now.
    pub fn accounting(&self) -> Accounting {
        Accounting::read(&self.engine, &self.ledger)
    }

    /// Asks the flush task to stop, without waiting (the final flush still runs). The
    /// shutdown deadline counts from the first request.
    pub fn request_shutdown(&self) {
        self.shutdown.request();
    }

    /// A function that asks the flush task to stop, usable where the pipeline is not
    /// (a `Drop` impl).
    pub fn shutdown_trigger(&self) -> impl FnOnce() + Send + 'static {
        let handle = self.shutdown.clone();
        move || handle.request()
    }

    /// Whether the flush task is still there to wait for.
    pub fn is_running(&self) -> bool {
        self.task.is_some()
    }

    /// Stops flushing: closes the buffer, runs the final flush with the configured
    /// deadline, spills what could not be sent, and returns the final flush's report.
    pub async fn shutdown(&mut self) -> Option<FlushReport> {
        self.request_shutdown();
        let task = self.task.take()?;
        match task.await {
            Ok(report) => Some(report),
            Err(error) => {
                tracing::error!(%error, "The flush task failed.");
                None
            }
        }
    }
}
