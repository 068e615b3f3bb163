//! Which prepared statements the wrapper aggregates, decided once per statement.
//!
//! A statement is aggregated when three sources agree: its text has the form
//! [`super::parse`] reads; the driver's metadata of the prepared statement has one bind
//! marker per marker in the text, named after the same column, on the same table; and the
//! table's schema in the driver's cluster metadata says every SET column is a counter and
//! the WHERE clause binds every primary-key column (partition and clustering) with `= ?`.
//! Anything else is a [`PassthroughReason`]: the statement goes to the store unchanged.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use scylla::cluster::ClusterState;
use scylla::cluster::metadata::{ColumnType, NativeType, Table};
use scylla::statement::prepared::PreparedStatement;

use super::parse::{self, Rejection, Term};

/// Why a request went to the store unchanged: the `reason` label of
/// `countersink_wrapper_passthrough_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PassthroughReason {
    /// Not an UPDATE of a counter table: reads, inserts, deletes, DDL, regular tables.
    NotCounterUpdate,
    /// `USING TTL/TIMESTAMP` or `IF`.
    UsingOrIf,
    /// `IN` on a key column.
    InRelation,
    /// A primary-key column set by a literal, or not restricted at all.
    UnboundKey,
    /// A SET clause that is not an increment of a counter column.
    NonCounterColumn,
    /// Any other form, or metadata that disagrees with the statement's text.
    UnsupportedForm,
    /// The table is not in the driver's schema metadata.
    UnknownTable,
    /// A null or unset delta or key value: the store answers it as it would.
    NullOrUnsetValue,
    /// The values do not serialize for the statement: the driver reports the error.
    InvalidValues,
    /// The statement carries its own consistency, serial consistency or timestamp.
    StatementOptions,
    /// The buffer's row or byte budget is used up: sent now instead of buffered.
    BufferFull,
    /// Adding the delta would take the row's pending sum out of the i64 range.
    DeltaOverflow,
    /// `query_unpaged`: an unprepared statement (prepare counter UPDATEs to aggregate them).
    Unprepared,
    /// A BATCH that is not a COUNTER BATCH of aggregatable prepared statements.
    BatchUnsupported,
    /// After `shutdown` began.
    AfterShutdown,
}

impl PassthroughReason {
    /// Every reason, in label order.
    pub const ALL: [PassthroughReason; 15] = [
        PassthroughReason::NotCounterUpdate,
        PassthroughReason::UsingOrIf,
        PassthroughReason::InRelation,
        PassthroughReason::UnboundKey,
        PassthroughReason::NonCounterColumn,
        PassthroughReason::UnsupportedForm,
        PassthroughReason::UnknownTable,
        PassthroughReason::NullOrUnsetValue,
        PassthroughReason::InvalidValues,
        PassthroughReason::StatementOptions,
        PassthroughReason::BufferFull,
        PassthroughReason::DeltaOverflow,
        PassthroughReason::Unprepared,
        PassthroughReason::BatchUnsupported,
        PassthroughReason::AfterShutdown,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            PassthroughReason::NotCounterUpdate => "not_counter_update",
            PassthroughReason::UsingOrIf => "using_or_if",
            PassthroughReason::InRelation => "in_relation",
            PassthroughReason::UnboundKey => "unbound_key",
            PassthroughReason::NonCounterColumn => "non_counter_column",
            PassthroughReason::UnsupportedForm => "unsupported_form",
            PassthroughReason::UnknownTable => "unknown_table",
            PassthroughReason::NullOrUnsetValue => "null_or_unset_value",
            PassthroughReason::InvalidValues => "invalid_values",
            PassthroughReason::StatementOptions => "statement_options",
            PassthroughReason::BufferFull => "buffer_full",
            PassthroughReason::DeltaOverflow => "delta_overflow",
            PassthroughReason::Unprepared => "unprepared",
            PassthroughReason::BatchUnsupported => "batch_unsupported",
            PassthroughReason::AfterShutdown => "after_shutdown",
        }
    }

    /// Its position in [`PassthroughReason::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A counter table the wrapper buffers rows of, as its schema said when first seen.
#[derive(Debug, PartialEq)]
pub struct TableShape {
    /// Its number in this wrapper (the first bytes of every buffered row's key).
    pub id: u32,
    /// The keyspace.
    pub keyspace: String,
    /// The table.
    pub name: String,
    /// The partition key columns, in order.
    pub partition_key: Vec<String>,
    /// The clustering columns, in order.
    pub clustering_key: Vec<String>,
    /// The types of the key columns, partition then clustering (to print keys in records).
    pub key_types: Vec<ColumnType<'static>>,
    /// The counter columns, sorted by name: a row's deltas are in this order.
    pub counters: Vec<String>,
}

impl TableShape {
    /// Every key column: partition, then clustering.
    pub fn key_columns(&self) -> impl Iterator<Item = &str> {
        self.partition_key
            .iter()
            .chain(&self.clustering_key)
            .map(String::as_str)
    }

    /// Whether `other` has the same keys and counters (a table whose schema changed gets
    /// a new number, so rows buffered under the old one keep their old column order).
    fn same_schema(&self, other: &TableShape) -> bool {
        self.partition_key == other.partition_key
            && self.clustering_key == other.clustering_key
            && self.key_types == other.key_types
            && self.counters == other.counters
    }

    /// `keyspace.table`.
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.keyspace, self.name)
    }
}

/// Where one delta of an execution comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeltaValue {
    /// The bound value at this position.
    Marker(usize),
    /// A literal in the statement (already signed).
    Literal(i64),
}

/// One SET increment of an aggregatable statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeltaSource {
    /// The column's position in [`TableShape::counters`].
    pub column: usize,
    /// Whether a bound value is subtracted (`c = c - ?`).
    pub negated: bool,
    /// The value.
    pub value: DeltaValue,
}

/// How the executions of one aggregatable statement become buffered deltas.
#[derive(Debug)]
pub struct CounterPlan {
    /// The table.
    pub table: Arc<TableShape>,
    /// The bind-marker position of each key column (partition, then clustering).
    pub key_markers: Box<[usize]>,
    /// The deltas.
    pub deltas: Box<[DeltaSource]>,
    /// How many bind markers the statement has.
    pub markers: usize,
}

/// The counter tables seen so far, numbered.
#[derive(Default)]
pub struct Tables {
    inner: Mutex<TablesInner>,
}

#[derive(Default)]
struct TablesInner {
    by_name: HashMap<(String, String), Arc<TableShape>>,
    by_id: Vec<Arc<TableShape>>,
}

impl Tables {
    /// The shape of `keyspace.name` as `schema` describes it, numbered on first sight (and
    /// again if its schema changed since).
    fn shape(&self, keyspace: &str, name: &str, schema: &Table) -> Arc<TableShape> {
        let mut inner = self.inner.lock();
        let mut counters: Vec<String> = schema
            .columns
            .iter()
            .filter(|(_, c)| is_counter(&c.typ))
            .map(|(n, _)| n.clone())
            .collect();
        counters.sort();
        let key_types = schema
            .partition_key
            .iter()
            .chain(&schema.clustering_key)
            .map(|k| {
                schema
                    .columns
                    .get(k)
                    .map_or(ColumnType::Native(NativeType::Blob), |c| c.typ.clone())
            })
            .collect();
        let candidate = TableShape {
            id: 0,
            keyspace: keyspace.to_owned(),
            name: name.to_owned(),
            partition_key: schema.partition_key.clone(),
            clustering_key: schema.clustering_key.clone(),
            key_types,
            counters,
        };
        let key = (keyspace.to_owned(), name.to_owned());
        if let Some(known) = inner.by_name.get(&key)
            && known.same_schema(&candidate)
        {
            return Arc::clone(known);
        }
        let shape = Arc::new(TableShape {
            id: u32::try_from(inner.by_id.len()).unwrap_or(u32::MAX),
            ..candidate
        });
        inner.by_id.push(Arc::clone(&shape));
        inner.by_name.insert(key, Arc::clone(&shape));
        shape
    }

    /// The shape of `keyspace.name` as the driver's metadata has it now, if it is a
    /// counter table (replayed rows are rebuilt on it).
    pub fn named(
        &self,
        cluster: &ClusterState,
        keyspace: &str,
        name: &str,
    ) -> Option<Arc<TableShape>> {
        let schema = cluster.get_keyspace(keyspace)?.tables.get(name)?;
        schema
            .columns
            .values()
            .any(|c| is_counter(&c.typ))
            .then(|| self.shape(keyspace, name, schema))
    }

    /// The table numbered `id`.
    pub fn get(&self, id: u32) -> Option<Arc<TableShape>> {
        self.inner.lock().by_id.get(id as usize).cloned()
    }
}

fn is_counter(typ: &ColumnType<'_>) -> bool {
    matches!(typ, ColumnType::Native(NativeType::Counter))
}

/// Decides whether `statement` is aggregated, and how.
pub fn recognize(
    statement: &PreparedStatement,
    cluster: &ClusterState,
    tables: &Tables,
) -> Result<CounterPlan, PassthroughReason> {
    let parsed = parse::parse_update(statement.get_statement());
    if parsed == Err(Rejection::NotUpdate) {
        return Err(PassthroughReason::NotCounterUpdate);
    }
    // The table: from the driver's metadata of the bind markers, else from the text.
    let named = statement
        .get_table_spec()
        .map(|spec| (spec.ks_name().to_owned(), spec.table_name().to_owned()))
        .or_else(|| {
            let p = parsed.as_ref().ok()?;
            Some((p.keyspace.clone()?, p.table.clone()))
        });
    let schema = named.as_ref().and_then(|(ks, t)| {
        cluster
            .get_keyspace(ks)
            .and_then(|keyspace| keyspace.tables.get(t))
    });
    if let Some(schema) = schema
        && !schema.columns.values().any(|c| is_counter(&c.typ))
    {
        return Err(PassthroughReason::NotCounterUpdate);
    }
    let parsed = parsed.map_err(|rejection| match rejection {
        Rejection::NotUpdate => PassthroughReason::NotCounterUpdate,
        Rejection::UsingOrIf => PassthroughReason::UsingOrIf,
        Rejection::InRelation => PassthroughReason::InRelation,
        Rejection::NotIncrement => PassthroughReason::NonCounterColumn,
        Rejection::Unsupported => PassthroughReason::UnsupportedForm,
    })?;
    let (Some((keyspace, name)), Some(schema)) = (named, schema) else {
        return Err(if parsed.markers.is_empty() {
            PassthroughReason::UnboundKey
        } else {
            PassthroughReason::UnknownTable
        });
    };
    if parsed.table != name || parsed.keyspace.as_ref().is_some_and(|k| *k != keyspace) {
        return Err(PassthroughReason::UnsupportedForm);
    }
    // The text and the driver's metadata agree on every marker.
    let specs = statement.get_variable_col_specs();
    if specs.len() != parsed.markers.len()
        || specs.iter().zip(&parsed.markers).any(|(spec, column)| {
            spec.name() != column
                || spec.table_spec().ks_name() != keyspace
                || spec.table_spec().table_name() != name
        })
    {
        return Err(PassthroughReason::UnsupportedForm);
    }
    let table = tables.shape(&keyspace, &name, schema);
    let key_markers = key_markers(&table, &parsed.keys)?;
    let mut deltas: Vec<DeltaSource> = Vec::with_capacity(parsed.increments.len());
    for increment in &parsed.increments {
        let Some(column) = table.counters.iter().position(|c| *c == increment.column) else {
            return Err(PassthroughReason::NonCounterColumn);
        };
        if deltas.iter().any(|d| d.column == column) {
            return Err(PassthroughReason::UnsupportedForm);
        }
        let value = match increment.term {
            Term::Marker(at) => DeltaValue::Marker(at),
            Term::Integer(n) if increment.negated => {
                DeltaValue::Literal(n.checked_neg().ok_or(PassthroughReason::UnsupportedForm)?)
            }
            Term::Integer(n) => DeltaValue::Literal(n),
            Term::OtherLiteral => return Err(PassthroughReason::UnsupportedForm),
        };
        deltas.push(DeltaSource {
            column,
            negated: increment.negated,
            value,
        });
    }
    Ok(CounterPlan {
        table,
        key_markers,
        deltas: deltas.into_boxed_slice(),
        markers: parsed.markers.len(),
    })
}

/// The marker of each key column, or why the key is not fully bound.
fn key_markers(
    table: &TableShape,
    keys: &[parse::KeyEquality],
) -> Result<Box<[usize]>, PassthroughReason> {
    if keys
        .iter()
        .any(|k| !table.key_columns().any(|c| c == k.column))
    {
        // A relation on a regular column: the store refuses it; let it say so.
        return Err(PassthroughReason::UnsupportedForm);
    }
    table
        .key_columns()
        .map(|column| {
            let mut found = keys.iter().filter(|k| k.column == column);
            match (found.next(), found.next()) {
                (Some(only), None) => match only.term {
                    Term::Marker(at) => Ok(at),
                    Term::Integer(_) | Term::OtherLiteral => Err(PassthroughReason::UnboundKey),
                },
                (None, _) => Err(PassthroughReason::UnboundKey),
                (Some(_), Some(_)) => Err(PassthroughReason::UnsupportedForm),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_distinct_and_in_index_order() {
        let labels: Vec<&str> = PassthroughReason::ALL.iter().map(|r| r.label()).collect();
        let mut sorted = labels.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), labels.len());
        for (i, reason) in PassthroughReason::ALL.iter().enumerate() {
            assert_eq!(reason.index(), i);
        }
    }
}
