//! The async shell around the epoch registry: reads it on a timer into an [`EpochView`]
//! the flusher consults, keeps the view's age as a metric, and counts the rows held.
//! Also the one write to it, [`schedule`], which `countersink reset` sends.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use parking_lot::RwLock;
use prometheus::{IntCounter, IntGauge};
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::CqlTimestamp;
use tokio::sync::{OnceCell, watch};

use crate::bucket;
use crate::config::{Config, ConsistencyLevel};
use crate::cql_text::{self, EPOCHS};
use crate::engine::Engine;
use crate::family::{Families, TableName};
use crate::series;
use crate::sink::cql::session;
use crate::telemetry::OperationsMetrics;
use crate::vocabulary::FamilyId;

use super::choose::Horizon;
use super::view::EpochView;

/// Why the registry could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The store refused or did not answer.
    #[error("epoch registry {table}: {error}")]
    Store {
        /// The registry table.
        table: String,
        /// The driver's error.
        error: String,
    },
}

/// The registry a writer follows: the latest view read, and how to read the next.
pub struct EpochRegistry {
    table: TableName,
    horizon: Horizon,
    refresh: Duration,
    consistency: ConsistencyLevel,
    /// The families with an epoch column: their ids and names.
    families: Vec<(FamilyId, String)>,
    view: RwLock<Option<Arc<EpochView>>>,
    /// Unix seconds when this registry was made: the age of "no view yet".
    started: i64,
    select: OnceCell<PreparedStatement>,
    held: IntCounter,
    age: IntGauge,
}

impl EpochRegistry {
    /// The registry of `config`, or `None` when no family has an epoch column. Its
    /// metrics are `metrics`' epoch series.
    pub fn new(
        config: &Config,
        families: &Families,
        metrics: &OperationsMetrics,
        now_unix_secs: i64,
    ) -> Option<Arc<EpochRegistry>> {
        let epoch_families: Vec<(FamilyId, String)> = families
            .iter()
            .filter(|f| f.epoch_column.is_some())
            .map(|f| (f.id, f.name.clone()))
            .collect();
        if epoch_families.is_empty() {
            return None;
        }
        Some(Arc::new(EpochRegistry {
            table: crate::ddl::epochs_table(config),
            horizon: horizon(config),
            refresh: config.epochs.refresh_interval,
            consistency: config.epochs.consistency,
            families: epoch_families,
            view: RwLock::new(None),
            started: now_unix_secs,
            select: OnceCell::new(),
            held: metrics.epoch_rows_held.clone(),
            age: metrics.epoch_registry_age.clone(),
        }))
    }

    /// The latest view read, if any.
    pub fn view(&self) -> Option<Arc<EpochView>> {
        self.view.read().clone()
    }

    /// What the rules let a writer assume of epochs it has not seen.
    pub fn horizon(&self) -> &Horizon {
        &self.horizon
    }

    /// Counts rows a flush held back.
    pub fn count_held(&self, rows: usize) {
        self.held.inc_by(rows as u64);
    }

    /// The epoch to read for `family`, key `series`, on `day` when no epoch is asked: the
    /// one in force at the end of the day, or now for today. `None` before the first
    /// read of the registry.
    pub fn read_epoch(
        &self,
        family: FamilyId,
        series: &[u8],
        day: crate::bucket::Day,
        now_unix_secs: i64,
    ) -> Option<i32> {
        let view = self.view()?;
        Some(view.read_epoch(family, series, day, now_unix_secs))
    }

    /// Rows held so far.
    pub fn held(&self) -> u64 {
        self.held.get()
    }

    /// Installs a view, unless a newer one is already there.
    pub fn set_view(&self, view: EpochView) {
        let mut current = self.view.write();
        if current
            .as_ref()
            .is_none_or(|c| c.fetched_at() <= view.fetched_at())
        {
            *current = Some(Arc::new(view));
        }
    }

    /// Sets the age gauge: seconds since the read behind the current view was sent (since
    /// this registry was made, while there is none).
    pub fn update_age(&self, now_unix_secs: i64) {
        let since = self.view().map_or(self.started, |v| v.fetched_at());
        self.age.set((now_unix_secs - since).max(0));
    }

    /// Reads the registry once, the read sent at `now_unix_secs`, and installs the view.
    /// Time is passed in so that tests can run a fleet on a clock of their own; the
    /// timer of [`EpochRegistry::run`] passes the wall clock.
    pub async fn refresh_at(
        &self,
        session: &Session,
        families: &Families,
        now_unix_secs: i64,
    ) -> Result<(), RegistryError> {
        let view = self.read(session, families, now_unix_secs).await?;
        self.set_view(view);
        self.update_age(now_unix_secs);
        Ok(())
    }

    async fn read(
        &self,
        session: &Session,
        families: &Families,
        fetched_at: i64,
    ) -> Result<EpochView, RegistryError> {
        let store = |e: &dyn std::fmt::Display| RegistryError::Store {
            table: self.table.to_string(),
            error: e.to_string(),
        };
        let statement = self
            .select
            .get_or_try_init(|| async {
                let text = cql_text::statement(
                    EPOCHS,
                    "select_epochs",
                    &[("table", &self.table.to_string())],
                );
                let mut statement = session.prepare(text).await?;
                statement.set_is_idempotent(true);
                statement.set_consistency(session::consistency(self.consistency));
                Ok::<_, scylla::errors::PrepareError>(statement)
            })
            .await
            .map_err(|e| store(&e))?;
        let mut view = EpochView::new(fetched_at);
        for (id, name) in &self.families {
            let mut rows = session
                .execute_iter(statement.clone(), (name.as_str(),))
                .await
                .map_err(|e| store(&e))?
                .rows_stream::<(String, i32)>()
                .map_err(|e| store(&e))?;
            while let Some(row) = rows.next().await {
                let (scope, start) = row.map_err(|e| store(&e))?;
                if scope.is_empty() {
                    view.add(*id, None, start);
                } else if let Some(key) = scope_key(families, *id, &scope) {
                    view.add(*id, Some(&key), start);
                } else {
                    tracing::warn!(family = %name, scope = %scope, "An epoch's scope is not a key of the family; ignored.");
                }
            }
        }
        Ok(view)
    }

    /// Reads the registry every `epochs.refresh_interval` until `stop` turns true (a read
    /// under way is given up then: a shutdown does not wait for a store that does not
    /// answer). A failed read keeps the previous view: rows past what it covers wait
    /// (held, counted).
    pub async fn run(
        self: Arc<Self>,
        session: Arc<Session>,
        engine: Arc<Engine>,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut failing = false;
        loop {
            let now = bucket::unix_secs(SystemTime::now());
            let read = tokio::select! {
                read = self.refresh_at(&session, engine.families(), now) => read,
                _ = stop.wait_for(|s| *s) => return,
            };
            match read {
                Ok(()) if failing => {
                    failing = false;
                    tracing::info!(table = %self.table, "The epoch registry answers again.");
                }
                Ok(()) => {}
                Err(error) => {
                    self.update_age(bucket::unix_secs(SystemTime::now()));
                    if !failing {
                        failing = true;
                        tracing::warn!(%error, "Cannot read the epoch registry; rows of epoch families past what the last read covers are held until it answers.");
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(self.refresh) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }
}

/// The horizon rules of a configuration.
pub fn horizon(config: &Config) -> Horizon {
    Horizon {
        lead_secs: config.epochs.lead.as_secs() as i64,
        clock_margin_secs: config.epochs.clock_margin.as_secs() as i64,
    }
}

/// The encoded series of a per-key scope (a JSON array of the key values).
fn scope_key(families: &Families, family: FamilyId, scope: &str) -> Option<Vec<u8>> {
    let values: Vec<String> = serde_json::from_str(scope).ok()?;
    if values.len() != families.get(family).key_columns.len() {
        return None;
    }
    Some(series::encode(values.iter().map(String::as_str)))
}

/// The scope text of one key (its values in key order), as the registry stores it.
pub fn scope_of(values: &[&str]) -> String {
    serde_json::to_string(values).unwrap_or_default()
}

/// One row of the registry: a family's epoch, for `migrate` to copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochRow {
    /// `""` for the whole family, else the key (see [`scope_of`]).
    pub scope: String,
    /// The epoch's start minute.
    pub start_minute: i32,
    /// Why it was started.
    pub reason: String,
    /// When it was written, Unix seconds.
    pub created_unix_secs: i64,
}

/// Every registry row of `family` in `config`'s registry.
pub async fn rows_of(
    session: &Session,
    config: &Config,
    family: &str,
) -> Result<Vec<EpochRow>, RegistryError> {
    let table = crate::ddl::epochs_table(config);
    let store = |e: &dyn std::fmt::Display| RegistryError::Store {
        table: table.to_string(),
        error: e.to_string(),
    };
    let text = cql_text::statement(
        EPOCHS,
        "select_epoch_rows",
        &[("table", &table.to_string())],
    );
    let mut statement = session.prepare(text).await.map_err(|e| store(&e))?;
    statement.set_is_idempotent(true);
    statement.set_consistency(session::consistency(config.epochs.consistency));
    let mut rows = session
        .execute_iter(statement, (family,))
        .await
        .map_err(|e| store(&e))?
        .rows_stream::<(String, i32, Option<String>, Option<CqlTimestamp>)>()
        .map_err(|e| store(&e))?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().await {
        let (scope, start_minute, reason, created) = row.map_err(|e| store(&e))?;
        out.push(EpochRow {
            scope,
            start_minute,
            reason: reason.unwrap_or_default(),
            created_unix_secs: created.map_or(0, |c| c.0 / 1000),
        });
    }
    Ok(out)
}

/// Writes one epoch to the registry: `family` (and one key, `scope`, or `""` for all of
/// it) starts epoch `start_minute`.
pub async fn schedule(
    session: &Session,
    config: &Config,
    family: &str,
    scope: &str,
    start_minute: i32,
    reason: &str,
    now_unix_secs: i64,
) -> Result<(), RegistryError> {
    let table = crate::ddl::epochs_table(config);
    let store = |e: &dyn std::fmt::Display| RegistryError::Store {
        table: table.to_string(),
        error: e.to_string(),
    };
    let text = cql_text::statement(EPOCHS, "insert_epoch", &[("table", &table.to_string())]);
    let mut statement = session.prepare(text).await.map_err(|e| store(&e))?;
    // The same row every time: sending it again is harmless.
    statement.set_is_idempotent(true);
    statement.set_consistency(session::consistency(config.epochs.consistency));
    session
        .execute_unpaged(
            &statement,
            (
                family,
                scope,
                start_minute,
                reason,
                CqlTimestamp(now_unix_secs * 1000),
            ),
        )
        .await
        .map_err(|e| store(&e))?;
    Ok(())
}
