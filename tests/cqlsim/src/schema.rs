//! The schema catalog: keyspaces, tables and columns, with Cassandra's DDL validation (the
//! counter rules of research §4.1 included). Tables are immutable `Arc`s replaced on ALTER, so
//! a running statement keeps a consistent view.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use md5::{Digest, Md5};

use crate::cql::ast::{ColumnDef, CreateTable, Literal};
use crate::error::CqlError;
use crate::types::ColType;

/// Where a column sits in the primary key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ColumnKind {
    PartitionKey,
    Clustering,
    Regular,
    Static,
}

impl ColumnKind {
    /// The `system_schema.columns.kind` string.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ColumnKind::PartitionKey => "partition_key",
            ColumnKind::Clustering => "clustering",
            ColumnKind::Regular => "regular",
            ColumnKind::Static => "static",
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Column {
    pub(crate) name: String,
    pub(crate) ty: ColType,
    pub(crate) kind: ColumnKind,
    /// Position in the partition or clustering key; for other columns, the cell slot in a row.
    pub(crate) index: usize,
    /// Clustering columns only: stored in descending order.
    pub(crate) desc: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct TableSchema {
    pub(crate) keyspace: String,
    pub(crate) name: String,
    /// A name-based UUID of `keyspace.name` (keyspace names hold no `.`, so distinct names
    /// give distinct ids): the key of the table's data in [`crate::storage::Db`], which
    /// relies on it never being anything else.
    pub(crate) id: [u8; 16],
    /// Partition key, clustering columns, then the others by name (Cassandra's `*` order).
    pub(crate) columns: Vec<Column>,
    by_name: HashMap<String, usize>,
    pub(crate) partition_key: Vec<usize>,
    pub(crate) clustering: Vec<usize>,
    /// Regular and static columns, in cell-slot order.
    pub(crate) cells: Vec<usize>,
    pub(crate) is_counter: bool,
    /// `WITH` options as given, kept for `system_schema.tables` and snapshots.
    pub(crate) options: Vec<(String, Literal)>,
    /// Rows come from `system.rs`, not from storage, and writes are refused.
    pub(crate) is_virtual: bool,
}

impl TableSchema {
    pub(crate) fn column(&self, name: &str) -> Option<&Column> {
        self.by_name.get(name).map(|i| &self.columns[*i])
    }

    /// The position in [`TableSchema::columns`] of the column called `name`.
    pub(crate) fn column_position(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// The integer value of a `WITH` option, if set.
    pub(crate) fn int_option(&self, name: &str) -> Option<i64> {
        self.options
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| match v {
                Literal::Int(s) => s.parse().ok(),
                Literal::Str(s) => s.parse().ok(),
                _ => None,
            })
    }

    /// Builds and validates a table from CREATE TABLE.
    pub(crate) fn build(
        keyspace: &str,
        ct: &CreateTable,
        is_virtual: bool,
    ) -> Result<TableSchema, CqlError> {
        let mut defs: Vec<&ColumnDef> = Vec::new();
        for c in &ct.columns {
            if defs.iter().any(|d| d.name == c.name) {
                return Err(CqlError::invalid(format!(
                    "Duplicate column '{}' declaration for table '{keyspace}.{}'",
                    c.name, ct.name.name
                )));
            }
            defs.push(c);
        }
        let find = |n: &str| -> Result<&ColumnDef, CqlError> {
            defs.iter().find(|d| d.name == n).copied().ok_or_else(|| {
                CqlError::invalid(format!("Unknown definition {n} referenced in PRIMARY KEY"))
            })
        };
        let mut columns = Vec::new();
        for (i, n) in ct.partition_key.iter().chain(&ct.clustering).enumerate() {
            if ct
                .partition_key
                .iter()
                .chain(&ct.clustering)
                .filter(|x| *x == n)
                .count()
                > 1
            {
                return Err(CqlError::invalid(format!(
                    "Multiple definition of identifier {n}"
                )));
            }
            let d = find(n)?;
            if d.ty.is_counter() {
                return Err(CqlError::invalid(format!(
                    "counter type is not supported for PRIMARY KEY column '{n}'"
                )));
            }
            if d.ty.is_collection() && !matches!(d.ty, ColType::Frozen(_)) {
                return Err(CqlError::invalid(format!(
                    "Invalid non-frozen collection type for PRIMARY KEY component {n}"
                )));
            }
            if d.is_static {
                return Err(CqlError::invalid(format!(
                    "Static column {n} cannot be part of the PRIMARY KEY"
                )));
            }
            let is_pk = i < ct.partition_key.len();
            let index = if is_pk { i } else { i - ct.partition_key.len() };
            columns.push(Column {
                name: n.clone(),
                ty: d.ty.clone(),
                kind: if is_pk {
                    ColumnKind::PartitionKey
                } else {
                    ColumnKind::Clustering
                },
                index,
                desc: false,
            });
        }
        for (k, (name, desc)) in ct.clustering_order.iter().enumerate() {
            if !ct.clustering.contains(name) {
                return Err(CqlError::invalid(format!(
                    "Only clustering key columns can be defined in CLUSTERING ORDER directive: {name} is not a clustering column"
                )));
            }
            if ct.clustering.get(k) != Some(name) {
                return Err(CqlError::invalid(
                    "The order of columns in the CLUSTERING ORDER directive must match that of the clustering columns",
                ));
            }
            if let Some(c) = columns.iter_mut().find(|c| &c.name == name) {
                c.desc = *desc;
            }
        }
        let mut rest: Vec<&ColumnDef> = defs
            .iter()
            .copied()
            .filter(|d| !ct.partition_key.contains(&d.name) && !ct.clustering.contains(&d.name))
            .collect();
        rest.sort_by(|a, b| a.name.cmp(&b.name));
        let mut any_counter = false;
        let mut any_other = false;
        for (slot, d) in rest.iter().enumerate() {
            if d.ty.contains_counter() && !d.ty.is_counter() {
                return Err(CqlError::invalid(format!(
                    "Counters are not allowed inside collections: {}",
                    d.ty
                )));
            }
            if d.ty.is_counter() {
                any_counter = true;
            } else {
                any_other = true;
            }
            if d.is_static && ct.clustering.is_empty() {
                return Err(CqlError::invalid(format!(
                    "Static columns are only useful (and thus allowed) if the table has at least one clustering column ({})",
                    d.name
                )));
            }
            columns.push(Column {
                name: d.name.clone(),
                ty: d.ty.clone(),
                kind: if d.is_static {
                    ColumnKind::Static
                } else {
                    ColumnKind::Regular
                },
                index: slot,
                desc: false,
            });
        }
        if any_counter && any_other {
            return Err(CqlError::invalid(
                "Cannot mix counter and non counter columns in the same table",
            ));
        }
        let mut t = TableSchema {
            keyspace: keyspace.to_owned(),
            name: ct.name.name.clone(),
            id: name_uuid(&format!("table:{keyspace}.{}", ct.name.name)),
            columns,
            by_name: HashMap::new(),
            partition_key: Vec::new(),
            clustering: Vec::new(),
            cells: Vec::new(),
            is_counter: any_counter,
            options: Vec::new(),
            is_virtual,
        };
        t.set_options(&ct.options)?;
        t.reindex();
        Ok(t)
    }

    fn reindex(&mut self) {
        self.by_name = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.clone(), i))
            .collect();
        let of = |k: ColumnKind| -> Vec<usize> {
            let mut v: Vec<usize> = (0..self.columns.len())
                .filter(|i| self.columns[*i].kind == k)
                .collect();
            v.sort_by_key(|i| self.columns[*i].index);
            v
        };
        self.partition_key = of(ColumnKind::PartitionKey);
        self.clustering = of(ColumnKind::Clustering);
        let mut cells: Vec<usize> = (0..self.columns.len())
            .filter(|i| {
                matches!(
                    self.columns[*i].kind,
                    ColumnKind::Regular | ColumnKind::Static
                )
            })
            .collect();
        cells.sort_by_key(|i| self.columns[*i].index);
        self.cells = cells;
    }

    /// Validates and merges `WITH` options (CREATE or ALTER).
    pub(crate) fn set_options(&mut self, opts: &[(String, Literal)]) -> Result<(), CqlError> {
        for (k, v) in opts {
            if !TABLE_OPTIONS.contains(&k.as_str()) {
                return Err(CqlError::syntax(format!("Unknown property '{k}'")));
            }
            if k == "default_time_to_live" {
                let ttl: i64 = match v {
                    Literal::Int(s) => s.parse().map_err(|_| {
                        CqlError::syntax("Invalid integer value for default_time_to_live")
                    })?,
                    _ => {
                        return Err(CqlError::syntax(format!(
                            "Invalid value for default_time_to_live: {v}"
                        )));
                    }
                };
                if ttl < 0 {
                    return Err(CqlError::Config(
                        "default_time_to_live must be greater than or equal to 0".into(),
                    ));
                }
                if ttl > 0 && self.is_counter {
                    return Err(CqlError::invalid(
                        "Cannot set default_time_to_live on a table with counters",
                    ));
                }
            }
            self.options.retain(|(x, _)| x != k);
            self.options.push((k.clone(), v.clone()));
        }
        Ok(())
    }

    /// Cassandra's answer for a column the table does not have.
    pub(crate) fn undefined(&self, column: &str) -> CqlError {
        CqlError::invalid(format!(
            "Undefined column name {column} in table {}.{}",
            self.keyspace, self.name
        ))
    }

    /// ALTER TABLE ... ADD, with the same counter-mixing rule as CREATE.
    pub(crate) fn add_columns(&mut self, defs: &[ColumnDef]) -> Result<(), CqlError> {
        for d in defs {
            if self.column(&d.name).is_some() {
                return Err(CqlError::invalid(format!(
                    "Column with name '{}' already exists",
                    d.name
                )));
            }
            if d.ty.is_counter() != self.is_counter {
                let kind = if self.is_counter {
                    "a non counter"
                } else {
                    "a counter"
                };
                let table = if self.is_counter {
                    "a counter"
                } else {
                    "a non counter"
                };
                return Err(CqlError::Config(format!(
                    "{}.{}: Cannot have {kind} column (\"{}\") in {table} table",
                    self.keyspace, self.name, d.name
                )));
            }
            if d.is_static && self.clustering.is_empty() {
                return Err(CqlError::invalid(
                    "Static columns are not allowed in COMPACT STORAGE tables or tables without clustering columns",
                ));
            }
            let slot = self.cells.len();
            self.columns.push(Column {
                name: d.name.clone(),
                ty: d.ty.clone(),
                kind: if d.is_static {
                    ColumnKind::Static
                } else {
                    ColumnKind::Regular
                },
                index: slot,
                desc: false,
            });
            self.reindex();
        }
        Ok(())
    }
}

/// Table options Cassandra 3.11 and 4.x accept; they are stored and otherwise ignored.
const TABLE_OPTIONS: [&str; 21] = [
    "bloom_filter_fp_chance",
    "caching",
    "cdc",
    "comment",
    "compaction",
    "compression",
    "crc_check_chance",
    "dclocal_read_repair_chance",
    "default_time_to_live",
    "extensions",
    "gc_grace_seconds",
    "max_index_interval",
    "memtable_flush_period_in_ms",
    "min_index_interval",
    "read_repair_chance",
    "speculative_retry",
    "additional_write_policy",
    "read_repair",
    "id",
    "populate_io_cache_on_flush",
    "paxos_grace_seconds",
];

#[derive(Debug, Clone)]
pub(crate) struct Keyspace {
    pub(crate) name: String,
    pub(crate) replication: Vec<(String, String)>,
    pub(crate) durable_writes: bool,
    pub(crate) tables: BTreeMap<String, Arc<TableSchema>>,
    pub(crate) is_system: bool,
    /// ScyllaDB persona: `Some(initial)` when the keyspace uses tablets.
    pub(crate) tablets: Option<i32>,
}

/// All keyspaces plus the schema version that clients poll for agreement.
#[derive(Debug, Clone)]
pub(crate) struct Catalog {
    pub(crate) keyspaces: BTreeMap<String, Keyspace>,
    pub(crate) version: [u8; 16],
    changes: u64,
}

impl Catalog {
    pub(crate) fn new() -> Catalog {
        let mut c = Catalog {
            keyspaces: BTreeMap::new(),
            version: [0; 16],
            changes: 0,
        };
        c.bump_version();
        c
    }

    /// Called after every schema change; drivers wait for this uuid to settle.
    pub(crate) fn bump_version(&mut self) {
        self.changes += 1;
        self.version = name_uuid(&format!("schema-version:{}", self.changes));
    }

    pub(crate) fn keyspace(&self, name: &str) -> Result<&Keyspace, CqlError> {
        self.keyspaces
            .get(name)
            .ok_or_else(|| CqlError::invalid(format!("keyspace {name} does not exist")))
    }

    /// Resolves a table, with Cassandra's messages for a missing keyspace or table.
    pub(crate) fn table(&self, keyspace: &str, name: &str) -> Result<&Arc<TableSchema>, CqlError> {
        self.keyspace(keyspace)?
            .tables
            .get(name)
            .ok_or_else(|| CqlError::invalid(format!("table {name} does not exist")))
    }
}

/// A name-based (version 3, MD5) UUID: deterministic ids for tables, hosts and schema versions.
pub(crate) fn name_uuid(name: &str) -> [u8; 16] {
    let mut u: [u8; 16] = Md5::digest(name.as_bytes()).into();
    u[6] = (u[6] & 0x0f) | 0x30;
    u[8] = (u[8] & 0x3f) | 0x80;
    u
}

/// Keyspace names: Cassandra's rule.
pub(crate) fn validate_keyspace_name(name: &str) -> Result<(), CqlError> {
    if name.is_empty()
        || name.len() > 48
        || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return Err(CqlError::invalid(format!(
            "Keyspace name must not be empty, more than 48 characters long, or contain non-alphanumeric-underscore characters (got \"{name}\")"
        )));
    }
    Ok(())
}
