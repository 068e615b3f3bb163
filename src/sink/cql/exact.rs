//! The exact families' regular-table writes through the driver: ledger rows (one ledger
//! partition per request: one INSERT, or an UNLOGGED BATCH of the partition's rows) and
//! outcome rows. Every statement is idempotent; the caller retries.
//!
//! A batch of one partition is applied as one mutation and is exempt from Cassandra's
//! batch size warning (CASSANDRA-10876; ScyllaDB warns only for batches of several
//! mutations), so a partition's rows of one flush go in one request.

use std::collections::BTreeMap;

use scylla::client::session::Session;
use scylla::statement::batch::BatchType;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::{CqlDate, CqlTimestamp, MaybeUnset};

use crate::config::StoreConfig;
use crate::cql_text::{self, EXACT};
use crate::family::ExactTables;
use crate::sink::{LedgerRow, Outcome, OutcomeRow};

use super::profile::WriteProfile;
use super::store::StoreKind;
use super::{CqlSinkError, classify};

/// The prepared INSERTs of the ledger and the outcomes table.
pub(super) struct ExactStatements {
    ledger: PreparedStatement,
    outcome: PreparedStatement,
    ttl: i32,
    /// Which store answers (how an `Unavailable` is classified; a ledger row is sent
    /// again whatever the class, the class only reaches the metrics).
    store_kind: StoreKind,
    /// How the statements and their batches are sent.
    profile: WriteProfile,
}

/// The bound values of one ledger row, in `insert_ledger`'s marker order.
type LedgerValues<'a> = (
    &'a str,
    CqlDate,
    i16,
    &'a str,
    i16,
    &'a str,
    i64,
    i64,
    i16,
    BTreeMap<&'a str, i64>,
    i32,
);

/// The bound values of one outcome row, in `insert_outcome`'s marker order (absent
/// values unset, so they write no cell and no tombstone).
type OutcomeValues<'a> = (
    &'a str,
    CqlDate,
    &'a str,
    i16,
    &'a str,
    &'a str,
    &'a str,
    MaybeUnset<i16>,
    MaybeUnset<i8>,
    &'a BTreeMap<String, i64>,
    MaybeUnset<&'a str>,
    MaybeUnset<&'a str>,
    CqlTimestamp,
);

impl ExactStatements {
    /// Prepares the statements (a missing table fails here, as a schema mismatch).
    pub(super) async fn prepare(
        session: &Session,
        store: &StoreConfig,
        tables: &ExactTables,
        store_kind: StoreKind,
    ) -> Result<ExactStatements, CqlSinkError> {
        Ok(ExactStatements {
            store_kind,
            ledger: prepare_one(session, store, tables, "insert_ledger").await?,
            outcome: prepare_one(session, store, tables, "insert_outcome").await?,
            ttl: tables.ledger_ttl_secs,
            profile: profile(store, tables),
        })
    }

    /// Writes rows of one ledger partition.
    pub(super) async fn write_ledger(&self, session: &Session, rows: &[LedgerRow]) -> Outcome {
        let values: Vec<LedgerValues<'_>> = rows
            .iter()
            .map(|row| {
                (
                    &*row.family,
                    CqlDate(row.day().cql_date()),
                    row.bucket,
                    &*row.key,
                    row.minute.minute_of_day(),
                    &*row.writer,
                    i64::try_from(row.incarnation).unwrap_or(i64::MAX),
                    i64::try_from(row.flush_seq).unwrap_or(i64::MAX),
                    i16::try_from(row.part).unwrap_or(i16::MAX),
                    row.delta_map(),
                    self.ttl,
                )
            })
            .collect();
        self.execute(session, &self.ledger, values).await
    }

    /// Writes outcome rows, one request per partition (family, day); the first outcome
    /// other than applied ends it (the caller sends them all again).
    pub(super) async fn write_outcomes(&self, session: &Session, rows: &[OutcomeRow]) -> Outcome {
        let mut partitions: BTreeMap<(&str, u32), Vec<OutcomeValues<'_>>> = BTreeMap::new();
        for row in rows {
            partitions
                .entry((&row.family, row.day.0))
                .or_default()
                .push((
                    &row.family,
                    CqlDate(row.day.cql_date()),
                    &row.request_id,
                    i16::try_from(row.row).unwrap_or(i16::MAX),
                    &row.outcome,
                    &row.granularity,
                    &row.key,
                    row.minute.map_or(MaybeUnset::Unset, MaybeUnset::Set),
                    row.shard
                        .map_or(MaybeUnset::Unset, |s| MaybeUnset::Set(s as i8)),
                    &row.deltas,
                    unset_str(&row.error_kind),
                    unset_str(&row.error),
                    CqlTimestamp(row.recorded_ms),
                ));
        }
        for (_, values) in partitions {
            let outcome = self.execute(session, &self.outcome, values).await;
            if outcome != Outcome::Applied {
                return outcome;
            }
        }
        Outcome::Applied
    }

    /// One request: a single INSERT, or an UNLOGGED BATCH of one partition's rows.
    async fn execute<V: scylla::serialize::row::SerializeRow>(
        &self,
        session: &Session,
        statement: &PreparedStatement,
        mut values: Vec<V>,
    ) -> Outcome {
        let result = match values.len() {
            0 => return Outcome::Applied,
            1 => match values.pop() {
                Some(row) => session.execute_unpaged(statement, row).await.map(|_| ()),
                None => return Outcome::Applied,
            },
            n => {
                let batch = self.profile.batch(BatchType::Unlogged, statement, n);
                session.batch(&batch, values).await.map(|_| ())
            }
        };
        match result {
            Ok(()) => Outcome::Applied,
            Err(error) => classify::classify(&error, self.store_kind),
        }
    }
}

/// The ledger's and the outcomes table's writes: idempotent, at the exact tables'
/// consistency.
fn profile(store: &StoreConfig, tables: &ExactTables) -> WriteProfile {
    WriteProfile::idempotent(tables.consistency, store.request_timeout)
}

/// An optional text as a bound value: unset when absent.
fn unset_str(value: &Option<String>) -> MaybeUnset<&str> {
    value.as_deref().map_or(MaybeUnset::Unset, MaybeUnset::Set)
}

async fn prepare_one(
    session: &Session,
    store: &StoreConfig,
    tables: &ExactTables,
    name: &str,
) -> Result<PreparedStatement, CqlSinkError> {
    let text = cql_text::statement(EXACT, name, &[("keyspace", tables.keyspace.as_str())]);
    let mut statement =
        session
            .prepare(text.clone())
            .await
            .map_err(|error| CqlSinkError::Prepare {
                statement: text,
                error,
            })?;
    // Retries are the caller's, with its back-off: one attempt per call here.
    profile(store, tables).apply(&mut statement);
    Ok(statement)
}
