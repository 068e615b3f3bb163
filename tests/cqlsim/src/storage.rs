//! In-memory rows. One ordered map of partitions per table, one ordered map of rows per
//! partition. Partitions are ordered by key value rather than by Murmur3 token: a full scan is
//! deterministic, which is what tests want (documented in the README).
//!
//! The whole database sits behind one mutex (see `server.rs`): statements are short and never
//! await while holding it, and one lock makes every statement and batch atomic and isolated.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

use crate::schema::{Catalog, TableSchema};
use crate::value::Value;

/// A clustering-key component carrying its column's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyPart {
    pub(crate) value: Value,
    pub(crate) desc: bool,
}

impl Ord for KeyPart {
    fn cmp(&self, other: &Self) -> Ordering {
        let o = self.value.cmp(&other.value);
        if self.desc { o.reverse() } else { o }
    }
}

impl PartialOrd for KeyPart {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Clustering key in the table's storage order (empty for tables without clustering columns).
pub(crate) type ClusteringKey = Vec<KeyPart>;

/// One CQL row: a row marker (set by INSERT, like Cassandra's primary-key liveness) and the
/// cells of the regular columns, by slot. Static slots stay `None` here.
#[derive(Debug, Clone, Default)]
pub(crate) struct Row {
    pub(crate) marker: bool,
    pub(crate) cells: Vec<Option<Value>>,
}

impl Row {
    /// A row exists while it has a marker or a live cell.
    pub(crate) fn is_live(&self) -> bool {
        self.marker || self.cells.iter().any(Option::is_some)
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Partition {
    /// Static cells, by slot (non-static slots stay `None`).
    pub(crate) statics: Vec<Option<Value>>,
    pub(crate) rows: BTreeMap<ClusteringKey, Row>,
}

impl Partition {
    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty() && self.statics.iter().all(Option::is_none)
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct TableData {
    pub(crate) partitions: BTreeMap<Vec<Value>, Partition>,
}

/// The store: schema plus data.
#[derive(Debug, Clone)]
pub(crate) struct Db {
    pub(crate) catalog: Catalog,
    pub(crate) data: HashMap<(String, String), TableData>,
    /// The server posed as (DDL rules that differ: tablets).
    pub(crate) persona: crate::persona::Persona,
    /// ScyllaDB persona: accept counter tables in keyspaces with tablets.
    pub(crate) counters_with_tablets: bool,
}

impl Db {
    pub(crate) fn new() -> Db {
        Db {
            catalog: Catalog::new(),
            data: HashMap::new(),
            persona: crate::persona::Persona::default(),
            counters_with_tablets: false,
        }
    }

    pub(crate) fn table_data(&self, t: &TableSchema) -> Option<&TableData> {
        self.data.get(&(t.keyspace.clone(), t.name.clone()))
    }

    pub(crate) fn table_data_mut(&mut self, t: &TableSchema) -> &mut TableData {
        self.data
            .entry((t.keyspace.clone(), t.name.clone()))
            .or_default()
    }
}

/// Builds a clustering key from values in clustering-column order.
pub(crate) fn clustering_key(t: &TableSchema, values: Vec<Value>) -> ClusteringKey {
    values
        .into_iter()
        .zip(&t.clustering)
        .map(|(value, ci)| KeyPart {
            value,
            desc: t.columns[*ci].desc,
        })
        .collect()
}
