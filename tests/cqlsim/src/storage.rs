//! In-memory rows. One ordered map of partitions per table, one ordered map of rows per
//! partition. Partitions are ordered by key value rather than by Murmur3 token: a full scan is
//! deterministic, which is what tests want (documented in the README).
//!
//! The whole database sits behind one mutex (see `server.rs`): statements are short and never
//! await while holding it, and one lock makes every statement and batch atomic and isolated.
//!
//! Regular cells carry their write time (microseconds), and deletions leave their time behind
//! (on the partition, on a clustering prefix, on a row, or on a cell), so that a write arriving
//! after a newer one, or after a newer deletion, loses as it does in Cassandra
//! (`exec/apply.rs` has the rules). Tombstones are never purged: this store has no
//! `gc_grace_seconds`. Counter cells have no write time: they add.

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
    /// Write time of each slot: of the value in `cells`, or, when `cells` holds `None`, of
    /// the tombstone that removed it (a null write, a column delete). `None`: nothing was
    /// written there, or what was has been shadowed by a deletion since.
    pub(crate) written: Vec<Option<i64>>,
    /// Write time of the marker, while `marker` is set.
    pub(crate) marker_time: i64,
    /// When the row itself was deleted: writes at or before it stay deleted.
    pub(crate) deleted: Option<i64>,
}

impl Row {
    /// A row exists while it has a marker or a live cell.
    pub(crate) fn is_live(&self) -> bool {
        self.marker || self.cells.iter().any(Option::is_some)
    }

    /// Whether the row must be kept although it may be dead: it remembers a deletion that
    /// later-arriving older writes must lose against.
    pub(crate) fn holds_tombstone(&self) -> bool {
        self.deleted.is_some()
            || self
                .written
                .iter()
                .zip(&self.cells)
                .any(|(w, c)| w.is_some() && c.is_none())
    }

    /// Sizes the slot vectors for a table of `n` cell slots.
    pub(crate) fn fit(&mut self, n: usize) {
        self.cells.resize(n, None);
        self.written.resize(n, None);
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Partition {
    /// Static cells, by slot (non-static slots stay `None`).
    pub(crate) statics: Vec<Option<Value>>,
    /// Write times of the static slots, as [`Row::written`].
    pub(crate) statics_written: Vec<Option<i64>>,
    pub(crate) rows: BTreeMap<ClusteringKey, Row>,
    /// When the whole partition was deleted.
    pub(crate) deleted: Option<i64>,
    /// Deletions of clustering prefixes shorter than the full key: (prefix values, time).
    pub(crate) range_deletions: Vec<(Vec<Value>, i64)>,
}

impl Partition {
    /// Nothing live and nothing to remember: the partition can go.
    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty()
            && self.statics.iter().all(Option::is_none)
            && self.statics_written.iter().all(Option::is_none)
            && self.deleted.is_none()
            && self.range_deletions.is_empty()
    }

    /// Whether a read sees anything of this partition.
    pub(crate) fn has_live_data(&self) -> bool {
        self.statics.iter().any(Option::is_some) || self.rows.values().any(Row::is_live)
    }

    /// The latest deletion covering the row at `ck` from above it (the partition's, or a
    /// deleted prefix of `ck`).
    pub(crate) fn deletion_over(&self, ck: &ClusteringKey) -> Option<i64> {
        let ranges = self
            .range_deletions
            .iter()
            .filter(|(prefix, _)| {
                prefix.len() <= ck.len() && prefix.iter().zip(ck).all(|(v, k)| *v == k.value)
            })
            .map(|(_, at)| *at);
        self.deleted.into_iter().chain(ranges).max()
    }

    /// Sizes the static slot vectors for a table of `n` cell slots.
    pub(crate) fn fit(&mut self, n: usize) {
        self.statics.resize(n, None);
        self.statics_written.resize(n, None);
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
    /// Each table's data, by [`TableSchema::id`]: the id is a function of the keyspace and
    /// table names (see `schema.rs`), so this is keyed by name as Cassandra's data is, and
    /// a write finds its table without building an owned name key per row.
    pub(crate) data: HashMap<[u8; 16], TableData>,
    /// The last write time handed out by [`Db::next_write_time`].
    last_write_time: i64,
    /// The server posed as (DDL rules that differ: tablets).
    pub(crate) persona: crate::persona::Persona,
    /// ScyllaDB persona: accept counter tables in keyspaces with tablets.
    pub(crate) counters_with_tablets: bool,
    /// ScyllaDB persona: `tablets_mode_for_new_keyspaces`.
    pub(crate) tablets_mode: crate::persona::TabletsMode,
}

impl Db {
    pub(crate) fn new() -> Db {
        Db {
            catalog: Catalog::new(),
            data: HashMap::new(),
            last_write_time: i64::MIN,
            persona: crate::persona::Persona::default(),
            counters_with_tablets: false,
            tablets_mode: crate::persona::TabletsMode::default(),
        }
    }

    /// The server's write time for a write that brings none (no `USING TIMESTAMP`, no
    /// client timestamp in the frame): the wall clock in microseconds, at millisecond
    /// precision, and always above the last one handed out, as Cassandra's
    /// `ClientState.getTimestamp`.
    pub(crate) fn next_write_time(&mut self) -> i64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| {
                i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 1000) * 1000
            });
        self.last_write_time = now.max(self.last_write_time.saturating_add(1));
        self.last_write_time
    }

    pub(crate) fn table_data(&self, t: &TableSchema) -> Option<&TableData> {
        self.data.get(&t.id)
    }

    pub(crate) fn table_data_mut(&mut self, t: &TableSchema) -> &mut TableData {
        self.data.entry(t.id).or_default()
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
