//! The CQL side of `writer_totals` families: one prepared INSERT per table (every key
//! column, the writer among them, every value column, `USING TIMESTAMP ?`), sent as an
//! EXECUTE for one row or an UNLOGGED BATCH of one partition's rows.
//!
//! The statements are idempotent (writing the same total at the same write time twice
//! leaves the same cell), but the driver still never retries or speculates: the totals
//! path retries on its own schedule, always with the newest total and a newer write time,
//! so a slow store is not hit by the driver and by the flusher at once.

use scylla::client::session::Session;
use scylla::statement::batch::BatchType;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::CqlValue;

use crate::config::StoreConfig;
use crate::layout::TableLayout;
use crate::sink::{Outcome, TotalsWrite, WriteError};

use super::bind::{self, RowPlace};
use super::classify;
use super::profile::WriteProfile;
use super::schema::KeyType;
use super::store::StoreKind;

/// One `writer_totals` table, ready to write.
pub(super) struct PreparedTotals {
    layout: TableLayout,
    statement: PreparedStatement,
    key_types: Vec<KeyType>,
}

impl PreparedTotals {
    /// Prepares the INSERT of a checked table.
    pub(super) async fn prepare(
        session: &Session,
        store: &StoreConfig,
        layout: TableLayout,
        key_types: Vec<KeyType>,
    ) -> Result<PreparedTotals, super::CqlSinkError> {
        let text = layout.totals_insert_statement();
        let mut statement =
            session
                .prepare(text.clone())
                .await
                .map_err(|error| super::CqlSinkError::Prepare {
                    statement: text,
                    error,
                })?;
        WriteProfile::idempotent(store.consistency, store.request_timeout).apply(&mut statement);
        Ok(PreparedTotals {
            layout,
            statement,
            key_types,
        })
    }

    /// The prepared INSERT (for checks).
    pub(super) fn statement(&self) -> &PreparedStatement {
        &self.statement
    }

    /// Sends one totals write and classifies how it ended.
    pub(super) async fn write(
        &self,
        session: &Session,
        store: &StoreConfig,
        store_kind: StoreKind,
        write: &TotalsWrite,
    ) -> Outcome {
        let rows = match self.bind(write) {
            Ok(rows) => rows,
            Err(failure) => return Outcome::NotAppliedPermanent(failure),
        };
        let result =
            if let [row] = rows.as_slice() {
                session
                    .execute_unpaged(&self.statement, row)
                    .await
                    .map(|_| ())
            } else {
                let batch = WriteProfile::idempotent(store.consistency, store.request_timeout)
                    .batch(BatchType::Unlogged, &self.statement, rows.len());
                session.batch(&batch, rows).await.map(|_| ())
            };
        match result {
            Ok(()) => Outcome::Applied,
            Err(error) => classify::classify(&error, store_kind),
        }
    }

    /// The values of every row, in the INSERT's marker order: key columns, value
    /// columns, write time.
    fn bind(&self, write: &TotalsWrite) -> Result<Vec<Vec<CqlValue>>, WriteError> {
        let keys = bind::typed_keys(&write.series, &self.key_types)?;
        Ok(write
            .rows
            .iter()
            .map(|row| {
                let place = RowPlace {
                    table: write.table,
                    bucket: row.bucket,
                    shard: None,
                    writer: Some(&write.writer),
                    epoch: None,
                };
                let mut values: Vec<CqlValue> = self
                    .layout
                    .key_columns()
                    .map(|(_, role)| bind::key_column(*role, &keys, place))
                    .collect();
                values.extend(row.totals.as_slice().iter().map(|&t| CqlValue::BigInt(t)));
                values.push(CqlValue::BigInt(write.timestamp));
                values
            })
            .collect())
    }
}
