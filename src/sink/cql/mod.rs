//! The CQL sink: counter writes through the `scylla` driver (and, for `writer_totals`
//! families, the idempotent writes of running totals: `totals.rs`).
//!
//! Each table's UPDATE is prepared once at start, with every counter column of the
//! table; a row binds an unset value for a column it has no delta for. A write of one row
//! is an EXECUTE; a write of several rows (always one partition) is a COUNTER BATCH of the
//! same prepared statement. Every statement and batch is non-idempotent, carries the
//! fall-through retry policy and no speculative execution, so the driver never sends a
//! counter write twice.

pub mod bind;
pub mod classify;
mod exact;
pub mod profile;
pub mod schema;
pub mod session;
pub mod store;
pub mod time;
#[cfg(feature = "tls")]
pub mod tls;
mod totals;

use std::collections::HashMap;
use std::sync::Arc;

use scylla::client::session::Session;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;

use crate::config::{CountingMode, StoreConfig};
use crate::family::Families;
use crate::layout::TableLayout;
use crate::sink::{Outcome, PartitionWrite, TotalsWrite, WriteError};
use crate::vocabulary::{FamilyId, Granularity};

use self::profile::WriteProfile;
use self::totals::PreparedTotals;

use super::{Request, Sink};

pub use self::schema::{KeyType, SchemaError};
pub use self::session::SessionError;
pub use self::store::{StoreIdentity, StoreKind};

/// Why the CQL sink could not start.
#[derive(Debug, thiserror::Error)]
pub enum CqlSinkError {
    /// No session.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// A configured table does not match.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// A statement could not be prepared.
    #[error("cannot prepare `{statement}`: {error}")]
    Prepare {
        /// The statement.
        statement: String,
        /// The driver's error.
        error: scylla::errors::PrepareError,
    },
}

impl CqlSinkError {
    /// Whether retrying cannot help: a table that does not match, or a statement the
    /// store refuses. A session that cannot be opened, or a PREPARE that failed because
    /// the store did not answer well (a timeout, an overloaded node, a lost
    /// connection), may work on the next attempt.
    pub fn is_permanent(&self) -> bool {
        match self {
            CqlSinkError::Session(_) => false,
            CqlSinkError::Schema(_) => true,
            CqlSinkError::Prepare { error, .. } => classify::prepare_failure_is_permanent(error),
        }
    }
}

/// One table, ready to write.
struct PreparedTable {
    layout: TableLayout,
    statement: PreparedStatement,
    key_types: Vec<KeyType>,
}

/// Counter tables checked and prepared for families a live reload adds (see
/// [`CqlSink::prepare_tables`]).
pub struct AddedTables(Vec<((FamilyId, Granularity), Arc<PreparedTable>)>);

/// Prepares the UPDATE of one counter table, with the counter write profile.
async fn prepare_counter(
    session: &Session,
    store: &StoreConfig,
    layout: TableLayout,
    key_types: Vec<KeyType>,
) -> Result<PreparedTable, CqlSinkError> {
    let text = layout.update_statement();
    let mut statement =
        session
            .prepare(text.clone())
            .await
            .map_err(|error| CqlSinkError::Prepare {
                statement: text,
                error,
            })?;
    WriteProfile::counter(store.consistency, store.request_timeout).apply(&mut statement);
    Ok(PreparedTable {
        layout,
        statement,
        key_types,
    })
}

/// Writes counter deltas with the `scylla` driver.
pub struct CqlSink {
    session: Arc<Session>,
    tables: HashMap<(FamilyId, Granularity), PreparedTable>,
    /// The tables of families a live reload added (see [`CqlSink::prepare_tables`]),
    /// looked up when `tables` has no entry.
    added: parking_lot::RwLock<HashMap<(FamilyId, Granularity), Arc<PreparedTable>>>,
    /// The tables of `writer_totals` families.
    totals: HashMap<(FamilyId, Granularity), PreparedTotals>,
    store: StoreConfig,
    /// Which store answers (what `Unavailable` means depends on it).
    identity: StoreIdentity,
    /// Things about the schema worth an operator's attention that do not stop the start.
    schema_warnings: Vec<String>,
    /// Error texts shared between failures alike.
    texts: classify::SharedTexts,
    /// The ledger and outcome INSERTs, when a family keeps exact totals.
    exact: Option<self::exact::ExactStatements>,
}

impl CqlSink {
    /// Connects, checks every table of every family against the live schema, and prepares
    /// their UPDATEs.
    pub async fn connect(
        store: &StoreConfig,
        families: &Families,
    ) -> Result<CqlSink, CqlSinkError> {
        let session = Arc::new(session::connect(store).await?);
        Self::with_session(session, store, families).await
    }

    /// The same, on an existing session (whose default profile should be
    /// [`session::write_profile`]).
    pub async fn with_session(
        session: Arc<Session>,
        store: &StoreConfig,
        families: &Families,
    ) -> Result<CqlSink, CqlSinkError> {
        let identity = store::detect(&session).await;
        let unavailable = if identity.kind.unavailable_means_not_applied() {
            "not applied, re-sent"
        } else {
            "outcome unknown, never re-sent"
        };
        match identity.kind {
            StoreKind::Unidentified => {
                tracing::warn!(store = %identity, unavailable, "Could not identify the store; Unavailable answers are treated as unknown outcomes.")
            }
            _ => tracing::info!(store = %identity, unavailable, "Store identified."),
        }
        let mut tables = HashMap::new();
        let mut totals = HashMap::new();
        let mut schema_warnings = Vec::new();
        for family in families.iter() {
            if family.is_generic() && !families.generic_enabled() {
                continue;
            }
            for kind in Granularity::ALL {
                let Some(layout) = TableLayout::of(family, kind) else {
                    continue;
                };
                let key_types = schema::check(&session, &layout)?;
                if family.mode == CountingMode::WriterTotals {
                    // A regular table: tablets do not concern it.
                    let prepared =
                        PreparedTotals::prepare(&session, store, layout, key_types).await?;
                    totals.insert((family.id, kind), prepared);
                    continue;
                }
                if let Some(warning) =
                    schema::tablets_warning(&session, &layout, identity.counters_with_tablets())
                    && !schema_warnings.contains(&warning)
                {
                    tracing::warn!("{warning}");
                    schema_warnings.push(warning);
                }
                tables.insert(
                    (family.id, kind),
                    prepare_counter(&session, store, layout, key_types).await?,
                );
            }
        }
        let exact = match families.exact_tables() {
            Some(tables) => Some(
                self::exact::ExactStatements::prepare(&session, store, tables, identity.kind)
                    .await?,
            ),
            None => None,
        };
        Ok(CqlSink {
            session,
            tables,
            added: Default::default(),
            totals,
            store: store.clone(),
            identity,
            schema_warnings,
            texts: classify::SharedTexts::default(),
            exact,
        })
    }

    /// Checks the tables of `families` (counter families a live reload adds) against the
    /// live schema, as at start, and prepares their UPDATEs; nothing is written to them
    /// before [`CqlSink::add_tables`] takes the result. A table that is missing or does
    /// not match refuses them all.
    pub async fn prepare_tables(
        &self,
        families: &[crate::family::FamilyDef],
    ) -> Result<AddedTables, CqlSinkError> {
        // Tables created since the session read the schema are not in its metadata yet.
        if let Err(error) = self.session.refresh_metadata().await {
            tracing::warn!(%error, "Could not read the schema again; the new tables are checked against the schema as last read.");
        }
        let mut added = Vec::new();
        for family in families {
            for kind in Granularity::ALL {
                let Some(layout) = TableLayout::of(family, kind) else {
                    continue;
                };
                let key_types = schema::check(&self.session, &layout)?;
                if let Some(warning) = schema::tablets_warning(
                    &self.session,
                    &layout,
                    self.identity.counters_with_tablets(),
                ) {
                    tracing::warn!("{warning}");
                }
                let table = prepare_counter(&self.session, &self.store, layout, key_types).await?;
                added.push(((family.id, kind), Arc::new(table)));
            }
        }
        Ok(AddedTables(added))
    }

    /// Writes to the tables [`CqlSink::prepare_tables`] prepared from now on (before the
    /// routing that leads to them is taken).
    pub fn add_tables(&self, tables: AddedTables) {
        self.added.write().extend(tables.0);
    }

    /// The store configuration it was connected with.
    pub fn store_config(&self) -> &StoreConfig {
        &self.store
    }

    /// Whether writes can be routed: a node is connected, and of `store.local_dc` when
    /// one is set (DC-aware routing sends nowhere else, so with no node of that data
    /// centre every write fails with `EmptyPlan`). Otherwise, why not.
    pub fn routable(&self) -> Result<(), String> {
        let state = self.session.get_cluster_state();
        let nodes = state.get_nodes_info();
        match &self.store.local_dc {
            None if nodes.iter().any(|n| n.is_connected()) => Ok(()),
            None => Err("no node of the cluster is connected".into()),
            Some(dc) => {
                let in_dc = |n: &std::sync::Arc<scylla::cluster::Node>| {
                    n.datacenter.as_deref() == Some(dc.as_str())
                };
                if nodes.iter().any(|n| in_dc(n) && n.is_connected()) {
                    return Ok(());
                }
                let mut seen: Vec<&str> = nodes
                    .iter()
                    .filter_map(|n| n.datacenter.as_deref())
                    .collect();
                seen.sort_unstable();
                seen.dedup();
                Err(if nodes.iter().any(in_dc) {
                    format!("no node of store.local_dc `{dc}` is connected")
                } else {
                    format!(
                        "no node of store.local_dc `{dc}` is known (data centres of the cluster: {}); every write fails until one is",
                        if seen.is_empty() {
                            "none reported".to_owned()
                        } else {
                            seen.join(", ")
                        }
                    )
                })
            }
        }
    }

    /// The store found at connect.
    pub fn identity(&self) -> &StoreIdentity {
        &self.identity
    }

    /// Warnings about the schema found at connect (logged then; for example a counter
    /// table in a ScyllaDB keyspace that uses tablets).
    pub fn schema_warnings(&self) -> &[String] {
        &self.schema_warnings
    }

    /// The session.
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// Every prepared counter statement (for checks such as "all non-idempotent").
    pub fn statements(&self) -> impl Iterator<Item = &PreparedStatement> {
        self.tables.values().map(|t| &t.statement)
    }

    /// Every prepared totals INSERT of `writer_totals` families (idempotent).
    pub fn totals_statements(&self) -> impl Iterator<Item = &PreparedStatement> {
        self.totals.values().map(PreparedTotals::statement)
    }

    /// The COUNTER BATCH used for a write of `rows` rows of one table.
    pub fn batch_for(&self, family: FamilyId, table: Granularity, rows: usize) -> Option<Batch> {
        match self.tables.get(&(family, table)) {
            Some(prepared) => Some(self.counter_batch(&prepared.statement, rows)),
            None => {
                let added = self.added.read().get(&(family, table)).cloned()?;
                Some(self.counter_batch(&added.statement, rows))
            }
        }
    }

    fn counter_batch(&self, statement: &PreparedStatement, rows: usize) -> Batch {
        WriteProfile::counter(self.store.consistency, self.store.request_timeout).batch(
            BatchType::Counter,
            statement,
            rows,
        )
    }
}

impl CqlSink {
    /// Sends counter deltas of one partition: one UPDATE, or a COUNTER BATCH of them.
    async fn send_counter(&self, write: &PartitionWrite) -> Outcome {
        let key = (write.family, write.table);
        let added;
        let table = match self.tables.get(&key) {
            Some(table) => Some(table),
            None => {
                added = self.added.read().get(&key).cloned();
                added.as_deref()
            }
        };
        let Some(table) = table else {
            return Outcome::NotAppliedPermanent(crate::sink::WriteError::new(
                "no_statement",
                format!(
                    "no prepared statement for family {} {} table",
                    write.family.0,
                    write.table.as_str()
                ),
            ));
        };
        let rows = match bind::rows(write, &table.layout, &table.key_types) {
            Ok(rows) => rows,
            Err(failure) => return Outcome::NotAppliedPermanent(failure),
        };
        let result = if let [row] = rows.as_slice() {
            self.session
                .execute_unpaged(&table.statement, row)
                .await
                .map(|_| ())
        } else {
            let batch = self.counter_batch(&table.statement, rows.len());
            self.session.batch(&batch, rows).await.map(|_| ())
        };
        match result {
            Ok(()) => Outcome::Applied,
            Err(error) => self
                .texts
                .share(classify::classify(&error, self.identity.kind)),
        }
    }

    /// Sends one writer's running totals with its family table's totals statement.
    async fn send_totals(&self, write: &TotalsWrite) -> Outcome {
        match self.totals.get(&(write.family, write.table)) {
            Some(table) => {
                table
                    .write(&self.session, &self.store, self.identity.kind, write)
                    .await
            }
            None => Outcome::NotAppliedPermanent(crate::sink::WriteError::new(
                "no_statement",
                format!(
                    "no prepared totals statement for family {} {} table",
                    write.family.0,
                    write.table.as_str()
                ),
            )),
        }
    }
}

impl Sink for CqlSink {
    async fn send(&self, request: Request<'_>) -> Outcome {
        match request {
            Request::Counter(write) => self.send_counter(write).await,
            Request::Totals(write) => self.send_totals(write).await,
            Request::Ledger(rows) => match &self.exact {
                Some(exact) => exact.write_ledger(&self.session, rows).await,
                None => no_exact_tables(),
            },
            Request::Outcomes(rows) => match &self.exact {
                Some(exact) => exact.write_outcomes(&self.session, rows).await,
                None => no_exact_tables(),
            },
        }
    }
}

fn no_exact_tables() -> Outcome {
    Outcome::NotAppliedPermanent(WriteError::new(
        "no_exact_tables",
        "no family keeps exact totals, so the exact tables were not prepared",
    ))
}
