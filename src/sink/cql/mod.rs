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
pub mod schema;
pub mod session;
#[cfg(feature = "tls")]
pub mod tls;
mod totals;

use std::collections::HashMap;
use std::sync::Arc;

use scylla::client::session::Session;
use scylla::policies::retry::FallthroughRetryPolicy;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;

use crate::config::{CountingMode, StoreConfig};
use crate::family::Families;
use crate::layout::TableLayout;
use crate::sink::{LedgerRow, Outcome, OutcomeRow, PartitionWrite, TotalsWrite, WriteError};
use crate::vocabulary::{FamilyId, Granularity};

use self::totals::PreparedTotals;

use super::Sink;

pub use self::schema::{KeyType, SchemaError};
pub use self::session::SessionError;

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

/// One table, ready to write.
struct PreparedTable {
    layout: TableLayout,
    statement: PreparedStatement,
    key_types: Vec<KeyType>,
}

/// Writes counter deltas with the `scylla` driver.
pub struct CqlSink {
    session: Arc<Session>,
    tables: HashMap<(FamilyId, Granularity), PreparedTable>,
    /// The tables of `writer_totals` families.
    totals: HashMap<(FamilyId, Granularity), PreparedTotals>,
    store: StoreConfig,
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
        let mut tables = HashMap::new();
        let mut totals = HashMap::new();
        for family in families.iter() {
            if family.is_generic() && !families.generic_enabled() {
                continue;
            }
            for kind in Granularity::ALL {
                let layout = TableLayout::of(family, kind);
                let key_types = schema::check(&session, &layout)?;
                if family.mode == CountingMode::WriterTotals {
                    let prepared =
                        PreparedTotals::prepare(&session, store, layout, key_types).await?;
                    totals.insert((family.id, kind), prepared);
                    continue;
                }
                let text = layout.update_statement();
                let mut statement =
                    session
                        .prepare(text.clone())
                        .await
                        .map_err(|error| CqlSinkError::Prepare {
                            statement: text,
                            error,
                        })?;
                statement.set_is_idempotent(false);
                statement.set_retry_policy(Some(Arc::new(FallthroughRetryPolicy::new())));
                statement.set_consistency(session::consistency(store.consistency));
                statement.set_request_timeout(Some(store.request_timeout));
                tables.insert(
                    (family.id, kind),
                    PreparedTable {
                        layout,
                        statement,
                        key_types,
                    },
                );
            }
        }
        let exact = match families.exact_tables() {
            Some(tables) => {
                Some(self::exact::ExactStatements::prepare(&session, store, tables).await?)
            }
            None => None,
        };
        Ok(CqlSink {
            session,
            tables,
            totals,
            store: store.clone(),
            exact,
        })
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
        let prepared = self.tables.get(&(family, table))?;
        Some(self.counter_batch(&prepared.statement, rows))
    }

    fn counter_batch(&self, statement: &PreparedStatement, rows: usize) -> Batch {
        let mut batch = Batch::new(BatchType::Counter);
        for _ in 0..rows {
            batch.append_statement(statement.clone());
        }
        batch.set_is_idempotent(false);
        batch.set_retry_policy(Some(Arc::new(FallthroughRetryPolicy::new())));
        batch.set_consistency(session::consistency(self.store.consistency));
        batch.set_request_timeout(Some(self.store.request_timeout));
        batch
    }
}

impl Sink for CqlSink {
    async fn write(&self, write: &PartitionWrite) -> Outcome {
        let Some(table) = self.tables.get(&(write.family, write.table)) else {
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
            Err(error) => classify::classify(&error),
        }
    }

    async fn write_totals(&self, write: &TotalsWrite) -> Outcome {
        match self.totals.get(&(write.family, write.table)) {
            Some(table) => table.write(&self.session, &self.store, write).await,
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

    async fn write_ledger(&self, rows: &[LedgerRow]) -> Outcome {
        match &self.exact {
            Some(exact) => exact.write_ledger(&self.session, rows).await,
            None => no_exact_tables(),
        }
    }

    async fn write_outcomes(&self, rows: &[OutcomeRow]) -> Outcome {
        match &self.exact {
            Some(exact) => exact.write_outcomes(&self.session, rows).await,
            None => no_exact_tables(),
        }
    }
}

fn no_exact_tables() -> Outcome {
    Outcome::NotAppliedPermanent(WriteError::new(
        "no_exact_tables",
        "no family keeps exact totals, so the exact tables were not prepared",
    ))
}
