//! The sidecar: receivers, engine, flusher and HTTP endpoints in one process.
//!
//! Start order: open the state directory (replaying its spill), bind the sockets and the
//! HTTP port (a bad address fails here, before anything runs), start receiving, and
//! connect to the store in the background (see [`lazy`]). Stop order (SIGTERM/SIGINT):
//! stop the receivers after draining what the kernel already holds, run the final flush
//! with its deadline, then stop HTTP. SIGHUP and `POST /-/reload` re-read the
//! configuration (see [`reload`]).

pub mod handler;
pub mod http;
pub mod lazy;
pub mod log_filter;
#[cfg(feature = "otlp")]
mod otlp_streams;
pub mod reload;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{Config, ConfigError};
use crate::engine::Engine;
use crate::epoch::EpochRegistry;
use crate::flush::{FlushObserver, FlushReport};
use crate::ingest::{self, Address, ListenError, Listening, Receivers};
use crate::ops::keyindex::KeyIndex;
use crate::ops::leaderboard::{self, Leaderboards};
use crate::pipeline::{Pipeline, StartError};
use crate::telemetry::{HotKeys, Metrics, ObservedSink, OperationsMetrics};
use crate::vocabulary::Transport;

use self::handler::EngineHandler;
use self::lazy::{ConnectFailure, LazyCqlSink};
use self::reload::{ConfigSource, ReloadError, Reloaded, Reloader};

/// Why the sidecar could not start (or had to stop).
#[derive(Debug, thiserror::Error)]
pub enum SidecarError {
    /// Invalid configuration (exit code 2).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A socket could not be bound (exit code 2).
    #[error(transparent)]
    Listen(#[from] ListenError),
    /// The metrics address could not be bound (exit code 2).
    #[error("cannot listen for HTTP on {addr}: {error}")]
    Http {
        /// The address.
        addr: SocketAddr,
        /// The error.
        error: std::io::Error,
    },
    /// The state directory, or something else at start (exit code 1).
    #[error(transparent)]
    Start(#[from] StartError),
    /// The configured tables do not match the store (exit code 2).
    #[error("the store's schema does not match the configuration: {0}")]
    Schema(String),
}

impl SidecarError {
    /// The process exit code for this error: 2 for configuration and arguments (including
    /// addresses that cannot be bound and tables that do not match), 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            SidecarError::Config(_)
            | SidecarError::Listen(_)
            | SidecarError::Http { .. }
            | SidecarError::Schema(_) => 2,
            SidecarError::Start(StartError::Config(_)) => 2,
            SidecarError::Start(_) => 1,
        }
    }
}

/// A running sidecar.
pub struct Sidecar {
    engine: Arc<Engine>,
    pipeline: Pipeline,
    receivers: Option<Receivers>,
    sink: LazyCqlSink,
    metrics: Arc<Metrics>,
    http: Option<(SocketAddr, JoinHandle<()>)>,
    stop: watch::Sender<bool>,
    fatal: watch::Receiver<Option<String>>,
    connect: JoinHandle<()>,
    index_task: Option<JoinHandle<()>>,
    /// Tells the key index when its drain ends (see [`crate::ops::keyindex::drain_end`]).
    index_stop: watch::Sender<Option<std::time::Instant>>,
    /// `flush.shutdown_deadline`.
    shutdown_deadline: std::time::Duration,
    /// Re-reads and applies the configuration (SIGHUP, `POST /-/reload`).
    reloader: Arc<Reloader>,
}

/// Runs the leaderboard jobs that `run_in_serve` asks for, until `stop`.
async fn run_leaderboards(
    config: &Config,
    session: Arc<scylla::client::session::Session>,
    operations: OperationsMetrics,
    stop: watch::Receiver<bool>,
) {
    match Leaderboards::new(config, session, operations) {
        Ok(jobs) => leaderboard::serve_jobs(Arc::new(jobs), stop).await,
        Err(error) => tracing::error!(%error, "Cannot start the leaderboard jobs."),
    }
}

/// Where a running sidecar listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bound {
    /// Every receiver, in start order (see [`Listening`]).
    pub listening: Vec<Listening>,
    /// `net.unix.max_dgram_qlen` of the Unix datagram socket, if on and readable.
    pub uds_max_dgram_qlen: Option<u64>,
    /// HTTP address, if on.
    pub metrics: Option<SocketAddr>,
}

impl Bound {
    /// The bound address of `transport` (the real port when port 0 was configured), if on.
    pub fn inet(&self, transport: Transport) -> Option<SocketAddr> {
        self.listening.iter().find_map(|l| match &l.address {
            Address::Inet(addr) if l.transport == transport => Some(*addr),
            _ => None,
        })
    }

    /// The socket path of `transport`, if on.
    pub fn path(&self, transport: Transport) -> Option<PathBuf> {
        self.listening.iter().find_map(|l| match &l.address {
            Address::Path(path) if l.transport == transport => Some(path.clone()),
            _ => None,
        })
    }
}

impl Sidecar {
    /// Starts everything. Must run inside a tokio runtime. A reload is refused: there is
    /// no file to re-read (see [`Sidecar::start_reloadable`]).
    pub async fn start(config: &Config) -> Result<Sidecar, SidecarError> {
        Self::start_reloadable(config, None).await
    }

    /// Starts everything, re-reading the configuration from `source` on a reload
    /// (`countersink serve` passes its file with its flags and environment on top).
    pub async fn start_reloadable(
        config: &Config,
        source: Option<ConfigSource>,
    ) -> Result<Sidecar, SidecarError> {
        config.validate()?;
        config.ingest.validate()?;
        let engine = Arc::new(Engine::new(config)?);
        let sink = LazyCqlSink::default();
        let operations = OperationsMetrics::default();
        let boards: Vec<String> = config.leaderboards.iter().map(|b| b.name.clone()).collect();
        operations.show(engine.families(), &boards);
        let hot = Arc::new(HotKeys::new(engine.families(), HotKeys::DEFAULT_CAPACITY));
        let observed = ObservedSink::new(
            sink.clone(),
            engine.families(),
            operations.clone(),
            hot.clone(),
        );
        let key_index = config
            .key_index
            .enabled
            .then(|| KeyIndex::new(config, engine.families(), operations.clone()));
        let mut observers: Vec<Arc<dyn FlushObserver>> = key_index
            .iter()
            .map(|index| Arc::new(index.clone()) as Arc<dyn FlushObserver>)
            .collect();
        #[cfg(feature = "otlp")]
        let (kept, save_streams) = otlp_streams::open(config);
        #[cfg(not(feature = "otlp"))]
        let (kept, save_streams) = (ingest::Kept::default(), None);
        observers.extend(save_streams);
        let epochs = EpochRegistry::new(
            config,
            engine.families(),
            &operations,
            crate::engine::now_unix_secs(),
        );
        let mut named: Vec<reload::FamiliesNamed> = Vec::new();
        let labels = observed.table_labels();
        named.push(Arc::new(move |families| labels.name_families(families)));
        let hot_names = hot.clone();
        named.push(Arc::new(move |families| hot_names.name_families(families)));
        if let Some(index) = key_index.clone() {
            named.push(Arc::new(move |families| index.name_families(families)));
        }
        let pipeline =
            Pipeline::start_placed(engine.clone(), config, observed, observers, epochs.clone())
                .await?;
        let metrics = Arc::new(
            Metrics::new(engine.clone(), pipeline.ledger().clone())
                .map_err(|e| StartError::Config(ConfigError::invalid("metrics", e.to_string())))?,
        );
        let _ = operations.register(metrics.registry());
        let reloader = Arc::new(Reloader::new(
            source,
            config.clone(),
            engine.clone(),
            pipeline.barriers().clone(),
            operations.clone(),
            {
                let sink = sink.clone();
                Arc::new(move |families| {
                    let sink = sink.clone();
                    Box::pin(async move { sink.add_tables(&families).await })
                })
            },
            named,
        ));

        let handler_engine = engine.clone();
        let ingest_log = pipeline.ingest_log().cloned();
        #[cfg(feature = "otlp")]
        if let Err(error) = otlp_streams::adopt(&kept, config, ingest_log.as_ref()) {
            let mut pipeline = pipeline;
            pipeline.shutdown().await;
            return Err(StartError::State(crate::state::StateError::Io {
                dir: config.state.dir.clone(),
                step: "merging the OTLP stream table the ingest log kept (ingest.streams.jsonl) with otlp_streams.bin",
                error,
            })
            .into());
        }
        let receivers = match ingest::start_keeping(&config.ingest, kept, move |transport| {
            EngineHandler::new(handler_engine.clone(), transport)
                .with_ingest_log(ingest_log.clone())
        }) {
            Ok(receivers) => receivers,
            Err(error) => {
                let mut pipeline = pipeline;
                pipeline.shutdown().await;
                return Err(error.into());
            }
        };
        // The receivers' counters join the same registry.
        let _ = metrics
            .registry()
            .register(Box::new(crate::telemetry::IngestCollector::new(
                receivers.stats(),
            )));

        let (stop, stop_rx) = watch::channel(false);
        let http = match config.metrics.listen {
            None => None,
            Some(addr) => {
                let listener = match http::bind(addr).await {
                    Ok(listener) => listener,
                    Err(error) => {
                        receivers.shutdown_async().await;
                        let mut pipeline = pipeline;
                        pipeline.shutdown().await;
                        return Err(SidecarError::Http { addr, error });
                    }
                };
                let local = listener.local_addr().unwrap_or(addr);
                tracing::info!(address = %local, "Serving metrics, health and operations over HTTP.");
                let ready_sink = sink.clone();
                let state = http::HttpState {
                    metrics: metrics.clone(),
                    ready: Arc::new(move || ready_sink.readiness()),
                    hot: hot.clone(),
                    contexts: {
                        let engine = engine.clone();
                        Arc::new(move || {
                            engine
                                .aggregator()
                                .cardinality()
                                .report(crate::engine::now_unix_secs())
                        })
                    },
                    reloader: reloader.clone(),
                };
                let mut stopped = stop_rx.clone();
                let task = tokio::spawn(async move {
                    let serve = axum::serve(listener, http::router(state)).with_graceful_shutdown(
                        async move {
                            let _ = stopped.wait_for(|s| *s).await;
                        },
                    );
                    if let Err(error) = serve.await {
                        tracing::error!(%error, "The HTTP endpoint failed.");
                    }
                });
                Some((local, task))
            }
        };

        let (fatal_tx, fatal) = watch::channel(None);
        let connect = {
            let (sink, store, engine, stop_rx) = (
                sink.clone(),
                config.store.clone(),
                engine.clone(),
                stop_rx.clone(),
            );
            let key_index = key_index.clone();
            let (jobs_config, jobs_stop, operations) =
                (config.clone(), stop_rx.clone(), operations.clone());
            tokio::spawn(async move {
                let epoch_engine = engine.clone();
                match sink.connect_until(store, engine, stop_rx).await {
                    Err(ConnectFailure::Fatal(error)) => {
                        tracing::error!(%error, "The store's schema does not match the configuration; stopping.");
                        let _ = fatal_tx.send(Some(error.to_string()));
                    }
                    Ok(()) => {
                        let Some(connected) = sink.get() else { return };
                        if let Some(index) = &key_index {
                            index.set_session(connected.session().clone());
                        }
                        if jobs_config.key_index.enabled || epoch_engine.families().any_exact() {
                            let (session, config, engine) = (
                                connected.session().clone(),
                                jobs_config.clone(),
                                epoch_engine.clone(),
                            );
                            let today = crate::bucket::Day(
                                (crate::engine::now_unix_secs() / 86_400) as u32,
                            );
                            tokio::spawn(async move {
                                crate::ops::sizing::warn_at_start(
                                    &session,
                                    &config,
                                    engine.families(),
                                    today,
                                )
                                .await;
                            });
                        }
                        if let Some(epochs) = epochs {
                            tokio::spawn(epochs.run(
                                connected.session().clone(),
                                epoch_engine,
                                jobs_stop.clone(),
                            ));
                        }
                        if jobs_config.leaderboards.iter().any(|b| b.run_in_serve) {
                            run_leaderboards(
                                &jobs_config,
                                connected.session().clone(),
                                operations,
                                jobs_stop,
                            )
                            .await;
                        }
                    }
                }
            })
        };
        // The key index writes beside the flush; at shutdown it drains what the final
        // flush queued, for at most this long.
        let (index_stop, index_stopped) = watch::channel(None);
        let index_task = key_index.map(|index| tokio::spawn(index.run(index_stopped)));

        Ok(Sidecar {
            engine,
            pipeline,
            receivers: Some(receivers),
            sink,
            metrics,
            http,
            stop,
            fatal,
            connect,
            index_task,
            index_stop,
            shutdown_deadline: config.flush.shutdown_deadline,
            reloader,
        })
    }

    /// Where it listens (ports chosen by the system when the config said port 0).
    pub fn bound(&self) -> Bound {
        let receivers = self.receivers.as_ref();
        Bound {
            listening: receivers
                .map(|r| r.listening().to_vec())
                .unwrap_or_default(),
            uds_max_dgram_qlen: receivers.and_then(|r| r.uds_max_dgram_qlen()),
            metrics: self.http.as_ref().map(|(addr, _)| *addr),
        }
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The pipeline (accounting, ledger).
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// The metrics registry.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Re-reads the configuration and applies it, or refuses it (see [`reload`]).
    pub async fn reload(&self, cause: &str) -> Result<Reloaded, ReloadError> {
        self.reloader.reload(cause).await
    }

    /// The reloader, for a task of its own (a signal handler).
    pub fn reloader(&self) -> Arc<Reloader> {
        self.reloader.clone()
    }

    /// Whether the store is connected and its tables checked.
    pub fn is_ready(&self) -> bool {
        self.sink.is_connected()
    }

    /// Resolves when the sidecar must stop on its own (the store's schema does not match),
    /// with the reason.
    pub async fn fatal(&mut self) -> String {
        match self.fatal.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone().unwrap_or_default(),
            Err(_) => std::future::pending().await,
        }
    }

    /// The fatal reason, if one occurred.
    pub fn fatal_reason(&self) -> Option<String> {
        self.fatal.borrow().clone()
    }

    /// Stops: receivers (after draining the kernel queues), final flush (with the
    /// deadline), HTTP. Returns the final flush's report.
    pub async fn shutdown(mut self) -> Option<FlushReport> {
        if let Some(receivers) = self.receivers.take() {
            receivers.shutdown_async().await;
        }
        let requested = std::time::Instant::now();
        let report = self.pipeline.shutdown().await;
        let _ = self.stop.send(true);
        self.connect.abort();
        // The key index writes what the final flush queued, within the same deadline.
        let _ = self.index_stop.send(Some(crate::ops::keyindex::drain_end(
            requested,
            self.shutdown_deadline,
        )));
        if let Some(task) = self.index_task.take() {
            let _ = task.await;
        }
        if let Some((_, task)) = self.http.take() {
            let _ = task.await;
        }
        report
    }
}
