//! Live reload: SIGHUP and `POST /-/reload` re-read the configuration the process was
//! started with and take what can change live.
//!
//! In order: read the file (with the same flags and environment on top as at start),
//! validate it as at start, refuse any change to a field that needs a restart, naming it
//! (see [`crate::config::reload`]); build the families and work out which of them are
//! added or changed (each gets a new id) and which retire, refusing by name what cannot
//! change live (see [`crate::family::Families::reshape`]); check the tables of the added
//! and changed families against the live schema, as at start, and prepare their
//! statements (a missing or mismatched table refuses the whole reload; nothing routes to
//! them yet); then hand the new families, routing, cardinality caps and limits to the
//! flush task, which flushes everything pending through the normal flush (journal,
//! outcomes, spill) to the tables it was placed for and swaps them in before its next
//! drain (see [`crate::flush::barrier`]); then put a new `log.filter` in force (see
//! [`super::log_filter`]). A refusal leaves the running configuration in force and
//! counts `countersink_config_reload_failures_total`.
//!
//! Reloads run one at a time, each compared with the configuration last taken.

use std::sync::Arc;

use tokio::sync::Mutex;

use crate::config::{self, Config};
use crate::engine::Engine;
use crate::family::{Families, FamilyDef};
use crate::flush::BarrierHandle;
use crate::sidecar::log_filter;
use crate::telemetry::OperationsMetrics;

/// Reads the configuration anew: the file the process was started with, and what the
/// command line and the environment put on top of it.
pub type ConfigSource = Arc<dyn Fn() -> Result<Config, String> + Send + Sync>;

/// Told the families after a reload changed them, before the flush that may send rows of
/// the new ones: what names families by id beside the engine (the key index, the
/// `table` labels of the write metrics, `/debug/hot`).
pub type FamiliesNamed = Arc<dyn Fn(&Families) + Send + Sync>;

/// Checks the tables of families a reload adds against the live schema and prepares
/// their statements in the sink, before any routing leads to them (see
/// [`super::lazy::LazyCqlSink::add_tables`]); says why not otherwise.
pub type TableCheck = Arc<
    dyn Fn(Vec<FamilyDef>) -> futures_util::future::BoxFuture<'static, Result<(), String>>
        + Send
        + Sync,
>;

/// Why a reload did not take effect; the running configuration stays.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReloadError {
    /// The process has no file to re-read (started from a configuration built in code).
    #[error("this process was not started from a configuration file")]
    NoSource,
    /// The file cannot be read, parsed or validated.
    #[error("invalid configuration: {0}")]
    Invalid(String),
    /// It changes fields that need a restart.
    #[error("{0}")]
    Fixed(String),
    /// A table of an added or changed family is missing or does not match, or the store
    /// cannot check it now.
    #[error("the new families' tables: {0}")]
    Tables(String),
    /// The flush task has stopped (the process is shutting down).
    #[error("the sidecar is shutting down")]
    Stopping,
}

/// What a reload that took effect did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reloaded {
    /// The configuration's generation now (0 as started).
    pub generation: i64,
    /// Rows the flush before the swap drained.
    pub flushed_rows: usize,
}

/// Re-reads and applies the configuration (see the module doc).
pub struct Reloader {
    source: Option<ConfigSource>,
    /// The configuration in force; its lock makes reloads run one at a time.
    running: Mutex<Config>,
    engine: Arc<Engine>,
    barriers: BarrierHandle,
    metrics: OperationsMetrics,
    tables: TableCheck,
    named: Vec<FamiliesNamed>,
}

impl Reloader {
    /// A reloader of a sidecar started with `running`, re-reading `source`.
    pub fn new(
        source: Option<ConfigSource>,
        running: Config,
        engine: Arc<Engine>,
        barriers: BarrierHandle,
        metrics: OperationsMetrics,
        tables: TableCheck,
        named: Vec<FamiliesNamed>,
    ) -> Reloader {
        Reloader {
            source,
            running: Mutex::new(running),
            engine,
            barriers,
            metrics,
            tables,
            named,
        }
    }

    /// Re-reads the configuration and applies it, or refuses it; logs and counts either
    /// way. `cause` names what asked (`SIGHUP`, `POST /-/reload`) in the log.
    pub async fn reload(&self, cause: &str) -> Result<Reloaded, ReloadError> {
        let result = self.try_reload().await;
        match &result {
            Ok(done) => {
                self.metrics.config_reloads.inc();
                tracing::info!(
                    cause,
                    generation = done.generation,
                    flushed_rows = done.flushed_rows,
                    "Configuration reloaded: rows pending under the previous one were flushed first."
                );
            }
            Err(error) => {
                self.metrics.config_reload_failures.inc();
                tracing::error!(cause, %error, "Configuration reload refused; the running configuration stays in force.");
            }
        }
        result
    }

    async fn try_reload(&self) -> Result<Reloaded, ReloadError> {
        let source = self.source.as_ref().ok_or(ReloadError::NoSource)?;
        let mut running = self.running.lock().await;
        let next = source().map_err(ReloadError::Invalid)?;
        next.validate()
            .map_err(|e| ReloadError::Invalid(e.to_string()))?;
        next.ingest
            .validate()
            .map_err(|e| ReloadError::Invalid(e.to_string()))?;
        let fixed = config::reload::fixed_changes(&running, &next);
        if !fixed.is_empty() {
            return Err(ReloadError::Fixed(config::reload::refusal(&fixed)));
        }
        let new_filter = running.log.filter != next.log.filter;
        if new_filter {
            log_filter::parse(&next.log.filter).map_err(ReloadError::Invalid)?;
        }
        let families =
            Families::from_config(&next).map_err(|e| ReloadError::Invalid(e.to_string()))?;
        let reshape = self
            .engine
            .families()
            .reshape(families)
            .map_err(|field| ReloadError::Fixed(config::reload::refusal(&[field])))?;
        // The caps name families as the new file numbers them.
        let caps: Vec<_> = next
            .family_caps()
            .into_iter()
            .filter_map(|mut caps| {
                caps.family = reshape.id_of(caps.family)?;
                Some(caps)
            })
            .collect();
        let added: Vec<String> = reshape.added().iter().map(|f| f.name.clone()).collect();
        let retired: Vec<String> = {
            let families = self.engine.families();
            reshape
                .retired()
                .iter()
                .map(|&id| families.get(id).name.clone())
                .collect()
        };
        // Checked against the live schema and prepared before anything is swapped: a
        // table that does not match refuses the whole reload.
        (self.tables)(reshape.added().to_vec())
            .await
            .map_err(ReloadError::Tables)?;
        let engine = self.engine.clone();
        let named = self.named.clone();
        let limits = next.clone();
        let (swapped, outcome) = tokio::sync::oneshot::channel();
        let report = self
            .barriers
            .flush_then(move || {
                let routed = engine.reshape_families(reshape);
                if routed.is_ok() {
                    for name in &named {
                        name(engine.families());
                    }
                    engine.aggregator().cardinality().replace_caps(caps);
                    engine.set_limits(&limits);
                }
                let _ = swapped.send(routed);
            })
            .await
            .ok_or(ReloadError::Stopping)?;
        // Reloads run one at a time, so the families did not change since the check; a
        // refusal now is a bug, reported.
        outcome
            .await
            .map_err(|_| ReloadError::Stopping)?
            .map_err(|field| ReloadError::Fixed(config::reload::refusal(&[field])))?;
        if !added.is_empty() || !retired.is_empty() {
            tracing::info!(
                ?added,
                ?retired,
                "Families changed: rows placed under a retired definition went to its tables; new rows go to the new ones."
            );
        }
        if new_filter {
            match log_filter::change(&next.log.filter) {
                Ok(log_filter::Change::Pinned(variable)) => {
                    tracing::warn!(variable, filter = %next.log.filter, "log.filter changed, but the environment sets the filter: it stays as started.");
                }
                Ok(_) => {
                    tracing::info!(filter = %next.log.filter, "Log filter changed.");
                }
                // Parsed above: the subscriber itself refused (it is gone).
                Err(error) => tracing::error!(%error, "The log filter could not be changed."),
            }
        }
        *running = next;
        self.metrics.config_generation.inc();
        Ok(Reloaded {
            generation: self.metrics.config_generation.get(),
            flushed_rows: report.rows,
        })
    }
}
