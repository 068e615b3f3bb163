//! The executor: runs a parsed statement against the store. Pure and synchronous: the caller
//! holds the database lock, so each statement (and each batch) is atomic and isolated.
//!
//! Writes are planned first (`write.rs` turns statements into [`write::Mutation`]s, checking
//! every rule) and applied after, so a batch with one bad statement changes nothing.

mod apply;
pub(crate) mod bind;
mod ddl;
pub(crate) use ddl::SYSTEM_KEYSPACES;
pub(crate) mod prepare;
pub(crate) mod select;
pub(crate) mod write;

use std::sync::Arc;

use crate::cql::ast::{Parsed, QualifiedName, Statement};
use crate::error::CqlError;
use crate::proto::request::BatchKind;
use crate::proto::wire::BoundValue;
use crate::schema::TableSchema;
use crate::storage::{Db, TableData};
use crate::types::ColType;
use crate::value::Value;
use bind::Bindings;

/// A column spec of prepared or result metadata.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ColSpec {
    pub(crate) keyspace: String,
    pub(crate) table: String,
    pub(crate) name: String,
    pub(crate) ty: ColType,
}

/// Rows of a SELECT.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResultRows {
    pub(crate) cols: Vec<ColSpec>,
    pub(crate) rows: Vec<Vec<Option<Value>>>,
    /// Set when a paged request has more rows.
    pub(crate) paging_state: Option<Vec<u8>>,
}

/// What changed in a schema change (S §4.2.6 SCHEMA_CHANGE).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SchemaChange {
    pub(crate) change: &'static str,
    pub(crate) keyspace: String,
    /// `None` for a keyspace change.
    pub(crate) table: Option<String>,
}

/// A successful statement's result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    Void,
    Rows(ResultRows),
    SetKeyspace(String),
    SchemaChange(SchemaChange),
}

/// What a write actually applied, per table: the source of the statistics.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Effects {
    pub(crate) tables: Vec<TableEffect>,
    /// Every DELETE mutation, in order (tests assert what was deleted, and how much).
    pub(crate) deletes: Vec<DeleteEffect>,
}

/// One DELETE mutation as applied.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeleteEffect {
    pub(crate) keyspace: String,
    pub(crate) table: String,
    pub(crate) record: crate::stats::DeleteRecord,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TableEffect {
    pub(crate) keyspace: String,
    pub(crate) table: String,
    pub(crate) rows: u64,
    pub(crate) counter_delta: i128,
}

impl Effects {
    pub(crate) fn add(&mut self, t: &TableSchema, rows: u64, delta: i128) {
        match self
            .tables
            .iter_mut()
            .find(|e| e.keyspace == t.keyspace && e.table == t.name)
        {
            Some(e) => {
                e.rows += rows;
                e.counter_delta += delta;
            }
            None => self.tables.push(TableEffect {
                keyspace: t.keyspace.clone(),
                table: t.name.clone(),
                rows,
                counter_delta: delta,
            }),
        }
    }
}

/// Supplies the rows of virtual tables (system keyspaces, `cqlsim.*`).
pub(crate) trait Virtual {
    fn materialize(&self, db: &Db, t: &TableSchema) -> TableData;
}

/// Paging for one request.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Paging<'a> {
    pub(crate) page_size: Option<usize>,
    pub(crate) state: Option<&'a [u8]>,
}

/// Resolves `ks.t` or `t` against the current keyspace.
pub(crate) fn resolve_table<'d>(
    db: &'d Db,
    q: &QualifiedName,
    keyspace: Option<&str>,
) -> Result<&'d Arc<TableSchema>, CqlError> {
    let ks = table_keyspace(q, keyspace)?;
    db.catalog.table(ks, &q.name)
}

pub(crate) fn table_keyspace<'a>(
    q: &'a QualifiedName,
    keyspace: Option<&'a str>,
) -> Result<&'a str, CqlError> {
    q.keyspace.as_deref().or(keyspace).ok_or_else(|| {
        CqlError::invalid("No keyspace has been specified. USE a keyspace, or explicitly specify keyspace.tablename")
    })
}

/// Runs one statement. `values` are the bound values in marker order; `client_time` is the
/// frame's client timestamp (flag 0x20), if it carries one; `cache` is the plan cache of a
/// prepared statement.
#[allow(clippy::too_many_arguments)]
pub(crate) fn execute(
    db: &mut Db,
    parsed: &Parsed,
    keyspace: Option<&str>,
    values: &[BoundValue],
    paging: Paging<'_>,
    virt: &dyn Virtual,
    client_time: Option<i64>,
    cache: Option<&write::PlanCache>,
) -> Result<(Outcome, Effects), CqlError> {
    let n = parsed.marker_names.len();
    if values.len() != n {
        return Err(CqlError::invalid(format!(
            "Invalid amount of bind variables: expected {n}, got {}",
            values.len()
        )));
    }
    let b = Bindings::new(values);
    match &parsed.stmt {
        Statement::Use(ks) => {
            if !db.catalog.keyspaces.contains_key(ks) {
                return Err(CqlError::invalid(format!("Keyspace '{ks}' does not exist")));
            }
            Ok((Outcome::SetKeyspace(ks.clone()), Effects::default()))
        }
        Statement::Select(s) => {
            if s.using_timeout && !db.persona.accepts_using_timeout() {
                return Err(CqlError::syntax(
                    "mismatched input 'USING' expecting EOF (USING TIMEOUT is ScyllaDB's)",
                ));
            }
            let t = resolve_table(db, &s.table, keyspace)?.clone();
            let rows = select::select(db, &t, s, b, paging, virt)?;
            Ok((Outcome::Rows(rows), Effects::default()))
        }
        Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_) => {
            let time = write::WriteTime {
                default: client_time.unwrap_or_else(|| db.next_write_time()),
            };
            let muts = write::plan(db, &parsed.stmt, keyspace, b, time, cache)?;
            Ok((Outcome::Void, apply::apply(db, muts)))
        }
        Statement::Batch(batch) => {
            let items: Vec<BatchItem<'_>> = batch
                .statements
                .iter()
                .map(|stmt| BatchItem {
                    stmt,
                    b,
                    keyspace,
                    cache: None,
                })
                .collect();
            let effects = run_batch(db, batch.kind, &batch.using, b, &items, client_time)?;
            Ok((Outcome::Void, effects))
        }
        Statement::Truncate(q) => {
            let t = resolve_table(db, q, keyspace)?.clone();
            ddl::refuse_system(&t.keyspace)?;
            db.table_data_mut(&t).partitions.clear();
            Ok((Outcome::Void, Effects::default()))
        }
        other => {
            if n > 0 {
                return Err(CqlError::invalid(
                    "Bind variables are not allowed in schema statements",
                ));
            }
            let change = ddl::run(db, other, keyspace)?;
            Ok((
                change.map_or(Outcome::Void, Outcome::SchemaChange),
                Effects::default(),
            ))
        }
    }
}

/// One statement of a batch, with its own values and keyspace (prepared statements of a BATCH
/// frame carry the keyspace they were prepared in).
#[derive(Clone, Copy)]
pub(crate) struct BatchItem<'a> {
    pub(crate) stmt: &'a Statement,
    pub(crate) b: Bindings<'a>,
    pub(crate) keyspace: Option<&'a str>,
    /// The plan cache of a prepared statement.
    pub(crate) cache: Option<&'a write::PlanCache>,
}

/// Runs a batch (from `BEGIN BATCH` text or a BATCH frame) atomically after Cassandra's
/// batch checks. Every statement without its own `USING TIMESTAMP` gets the batch's write
/// time: its `USING TIMESTAMP` (bound with `b`), else `client_time`, else the server's.
pub(crate) fn run_batch(
    db: &mut Db,
    kind: BatchKind,
    using: &crate::cql::ast::Using,
    b: Bindings<'_>,
    items: &[BatchItem<'_>],
    client_time: Option<i64>,
) -> Result<Effects, CqlError> {
    write::check_batch(db, kind, using, items)?;
    let own = write::batch_time(using, b)?;
    let time = write::WriteTime {
        default: match own.or(client_time) {
            Some(at) => at,
            None => db.next_write_time(),
        },
    };
    let mut all = Vec::with_capacity(items.len());
    for it in items {
        write::plan_into(db, it.stmt, it.keyspace, it.b, time, it.cache, &mut all)?;
    }
    Ok(apply::apply(db, all))
}

/// PREPARE-time checks: every rule that does not depend on bound values (counter rules,
/// unknown columns, key restrictions), so `session.prepare` fails like against Cassandra.
pub(crate) fn validate(
    db: &Db,
    parsed: &Parsed,
    keyspace: Option<&str>,
    virt: &dyn Virtual,
) -> Result<(), CqlError> {
    let b = Bindings::dry();
    match &parsed.stmt {
        s @ (Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_)) => {
            write::plan(db, s, keyspace, b, write::WriteTime::dry(), None).map(drop)
        }
        Statement::Batch(batch) => {
            let items: Vec<BatchItem<'_>> = batch
                .statements
                .iter()
                .map(|stmt| BatchItem {
                    stmt,
                    b,
                    keyspace,
                    cache: None,
                })
                .collect();
            write::check_batch(db, batch.kind, &batch.using, &items)?;
            for it in &items {
                write::plan(db, it.stmt, keyspace, b, write::WriteTime::dry(), None)?;
            }
            Ok(())
        }
        Statement::Select(s) => {
            let t = resolve_table(db, &s.table, keyspace)?;
            select::select(db, t, s, b, Paging::default(), virt).map(drop)
        }
        _ => Ok(()),
    }
}

/// Whether a keyspace belongs to the server (`system`, `system_schema`, `cqlsim`).
pub(crate) fn is_system_keyspace(ks: &str) -> bool {
    ddl::SYSTEM_KEYSPACES.contains(&ks)
}
