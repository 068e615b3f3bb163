//! The start-up check: the tables the configuration names exist, with the key and counter
//! columns the configuration says, so a mistake is one clear message at start instead of
//! a rejected-write log growing at runtime.

use scylla::client::session::Session;
use scylla::cluster::metadata::{ColumnKind, ColumnType, NativeType, Table};

use crate::config::CountingMode;
use crate::layout::{Role, TableLayout};

/// How a key value (always text on the wire from clients) is bound to its column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyType {
    /// `text` or `varchar`.
    Text,
    /// `ascii`.
    Ascii,
    /// `bigint`.
    BigInt,
    /// `int`.
    Int,
    /// `smallint`.
    SmallInt,
    /// `tinyint`.
    TinyInt,
    /// `uuid`.
    Uuid,
    /// `timeuuid`.
    Timeuuid,
}

/// A table that does not match the configuration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("table {table}: {problem}")]
pub struct SchemaError {
    /// `keyspace.table`.
    pub table: String,
    /// What is wrong, naming the column.
    pub problem: String,
}

fn names(columns: &[(String, Role)]) -> Vec<&str> {
    columns.iter().map(|(c, _)| c.as_str()).collect()
}

/// Checks one table against the session's schema metadata; returns the types of the key
/// columns filled from tags (in key order).
pub fn check(session: &Session, layout: &TableLayout) -> Result<Vec<KeyType>, SchemaError> {
    let err = |problem: String| SchemaError {
        table: layout.table.to_string(),
        problem,
    };
    let state = session.get_cluster_state();
    let keyspace = state.get_keyspace(&layout.table.keyspace).ok_or_else(|| {
        err(format!(
            "keyspace `{}` does not exist (`countersink schema` prints the CQL that creates it)",
            layout.table.keyspace
        ))
    })?;
    let table = keyspace.tables.get(&layout.table.table).ok_or_else(|| {
        err("does not exist (`countersink schema` prints the CQL that creates it)".into())
    })?;
    check_table(table, layout).map_err(err)
}

/// A warning when the table's keyspace uses ScyllaDB tablets and the release does not
/// list `COUNTERS_WITH_TABLETS` (`counters_with_tablets`): ScyllaDB 6.0 and later put
/// `NetworkTopologyStrategy` keyspaces on tablets by default, and the releases before
/// that feature refuse counter tables there (6.0's first releases took them silently,
/// broken under tablet migration).
pub fn tablets_warning(
    session: &Session,
    layout: &TableLayout,
    counters_with_tablets: bool,
) -> Option<String> {
    if counters_with_tablets {
        return None;
    }
    let state = session.get_cluster_state();
    let keyspace = state.get_keyspace(&layout.table.keyspace)?;
    keyspace.tablet_based.then(|| {
        format!(
            "Counter table {} is in keyspace {}, which uses ScyllaDB tablets, and this ScyllaDB release does not list COUNTERS_WITH_TABLETS among its features (system.local.supported_features): counters are not supported with tablets before it. Recreate the keyspace with tablets = {{'enabled': false}} (`countersink schema --apply` does so on such a release), or upgrade.",
            layout.table, layout.table.keyspace
        )
    })
}

fn check_table(table: &Table, layout: &TableLayout) -> Result<Vec<KeyType>, String> {
    let expected_partition = names(&layout.partition_key);
    if table.partition_key != expected_partition {
        return Err(format!(
            "partition key is ({}), the configuration needs ({})",
            table.partition_key.join(", "),
            expected_partition.join(", ")
        ));
    }
    let expected_clustering = names(&layout.clustering_key);
    if table.clustering_key != expected_clustering {
        return Err(format!(
            "clustering columns are ({}), the configuration needs ({})",
            table.clustering_key.join(", "),
            expected_clustering.join(", ")
        ));
    }
    let mut key_types = Vec::new();
    for (column, role) in layout.key_columns() {
        let typ = &table
            .columns
            .get(column)
            .ok_or_else(|| format!("column `{column}` is missing"))?
            .typ;
        let native = match typ {
            ColumnType::Native(native) => Some(native),
            _ => None,
        };
        let ok = match role {
            Role::Key(_) => {
                let key_type = native.and_then(key_type).ok_or_else(|| {
                    format!("key column `{column}` has type {typ:?}; supported: text, ascii, bigint, int, smallint, tinyint, uuid, timeuuid")
                })?;
                key_types.push(key_type);
                true
            }
            Role::Day => native == Some(&NativeType::Date),
            Role::Month => native == Some(&NativeType::Text),
            Role::Minute => native == Some(&NativeType::SmallInt),
            Role::Shard => native == Some(&NativeType::TinyInt),
            Role::Epoch => native == Some(&NativeType::Int),
            Role::Writer => native == Some(&NativeType::Text),
        };
        if !ok {
            return Err(format!(
                "column `{column}` has type {typ:?}, expected {}",
                TableLayout::default_type(*role)
            ));
        }
    }
    let (value_type, mode) = match layout.mode {
        CountingMode::Counter => (NativeType::Counter, "counter"),
        CountingMode::WriterTotals => (NativeType::BigInt, "bigint (mode = \"writer_totals\")"),
    };
    for column in &layout.counters {
        let found = table
            .columns
            .get(column)
            .ok_or_else(|| format!("{mode} column `{column}` is missing"))?;
        if found.typ != ColumnType::Native(value_type.clone()) || found.kind != ColumnKind::Regular
        {
            return Err(format!(
                "column `{column}` is not a {mode} column (type {:?})",
                found.typ
            ));
        }
    }
    Ok(key_types)
}

fn key_type(native: &NativeType) -> Option<KeyType> {
    Some(match native {
        NativeType::Text => KeyType::Text,
        NativeType::Ascii => KeyType::Ascii,
        NativeType::BigInt => KeyType::BigInt,
        NativeType::Int => KeyType::Int,
        NativeType::SmallInt => KeyType::SmallInt,
        NativeType::TinyInt => KeyType::TinyInt,
        NativeType::Uuid => KeyType::Uuid,
        NativeType::Timeuuid => KeyType::Timeuuid,
        _ => return None,
    })
}
