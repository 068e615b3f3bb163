//! The start-up check: the tables the configuration names exist, with the key and counter
//! columns the configuration says, so a mistake is one clear message at start instead of
//! a rejected-write log growing at runtime.

use scylla::client::session::Session;
use scylla::cluster::metadata::{ColumnKind, ColumnType, NativeType, Table};

use crate::config::{CountingMode, TimeType};
use crate::layout::{Role, TableLayout};
use crate::vocabulary::Granularity;

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
    check_key_places(table, layout)?;
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
        let expected = match role {
            Role::Key(_) => {
                let key_type = native.and_then(key_type).ok_or_else(|| {
                    format!("key column `{column}` has type {}; supported: text, ascii, bigint, int, smallint, tinyint, uuid, timeuuid", type_name(typ))
                })?;
                key_types.push(key_type);
                continue;
            }
            Role::Day(_) | Role::Month(_) | Role::Minute(_) | Role::Hour(_) => {
                check_time_type(column, *role, typ, layout)?;
                continue;
            }
            Role::Shard => NativeType::TinyInt,
            Role::Epoch => NativeType::Int,
            Role::Writer => NativeType::Text,
        };
        if native != Some(&expected) {
            return Err(format!(
                "column `{column}` has type {}, expected {}",
                type_name(typ),
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
                "column `{column}` is not a {mode} column (type {})",
                type_name(&found.typ)
            ));
        }
    }
    Ok(key_types)
}

/// Each configured key column exists and sits where the configuration puts it (partition
/// key or clustering key), so a renamed or misplaced column is named on its own rather
/// than as two differing key lists.
fn check_key_places(table: &Table, layout: &TableLayout) -> Result<(), String> {
    let places = [
        (
            &layout.partition_key,
            ColumnKind::PartitionKey,
            "the partition key",
        ),
        (
            &layout.clustering_key,
            ColumnKind::Clustering,
            "the clustering key",
        ),
    ];
    for (columns, kind, place) in places {
        for (column, role) in columns {
            let what = match role {
                Role::Key(_) => "key column",
                Role::Day(_) | Role::Month(_) | Role::Minute(_) | Role::Hour(_) => "time column",
                Role::Shard => "shard column",
                Role::Epoch => "epoch column",
                Role::Writer => "writer column",
            };
            let found = table.columns.get(column).ok_or_else(|| {
                format!("{what} `{column}` is missing (the configuration needs it in {place})")
            })?;
            if found.kind != kind {
                let actual = match found.kind {
                    ColumnKind::PartitionKey => "is in the partition key",
                    ColumnKind::Clustering => "is a clustering column",
                    ColumnKind::Regular | ColumnKind::Static => "is not in the primary key",
                    _ => "is not where expected",
                };
                return Err(format!(
                    "{what} `{column}` {actual}; the configuration needs it in {place}"
                ));
            }
        }
    }
    Ok(())
}

/// A time column's type is the one configured; when it is not, the message says whether
/// the column's type could hold the value (and which setting says so) or cannot at all.
fn check_time_type(
    column: &str,
    role: Role,
    typ: &ColumnType,
    layout: &TableLayout,
) -> Result<(), String> {
    let Some((time_role, configured)) = role.time() else {
        return Ok(());
    };
    let actual = type_name(typ);
    if TimeType::parse(&actual) == Some(configured) {
        return Ok(());
    }
    let section = match layout.kind {
        Granularity::Minute => "minute_time",
        Granularity::Day => "day_time",
        // The hour table's time columns are fixed (`day date`, `hour smallint`) and a
        // total table has none: no setting changes them.
        Granularity::Hour | Granularity::Total => {
            return Err(format!(
                "column `{column}` has type {actual}; the {} table needs {}",
                layout.kind.as_str(),
                configured.as_str()
            ));
        }
    };
    let setting = format!("{section}.{}.type", time_role.as_str());
    match TimeType::check(&actual, time_role) {
        Ok(usable) => Err(format!(
            "column `{column}` has type {actual}, the configuration says {} (`{setting}`); set `{setting} = \"{}\"` to write this table",
            configured.as_str(),
            usable.as_str()
        )),
        Err(cannot) => Err(format!(
            "column `{column}` has type {actual}, the configuration says {} (`{setting}`): {cannot}",
            configured.as_str()
        )),
    }
}

/// A column type as CQL writes it (`smallint`, `date`), for messages.
fn type_name(typ: &ColumnType) -> String {
    match typ {
        ColumnType::Native(native) => match native {
            NativeType::Ascii => "ascii",
            NativeType::Boolean => "boolean",
            NativeType::Blob => "blob",
            NativeType::Counter => "counter",
            NativeType::Date => "date",
            NativeType::Decimal => "decimal",
            NativeType::Double => "double",
            NativeType::Duration => "duration",
            NativeType::Float => "float",
            NativeType::Int => "int",
            NativeType::BigInt => "bigint",
            NativeType::Text => "text",
            NativeType::Timestamp => "timestamp",
            NativeType::Inet => "inet",
            NativeType::SmallInt => "smallint",
            NativeType::TinyInt => "tinyint",
            NativeType::Time => "time",
            NativeType::Timeuuid => "timeuuid",
            NativeType::Uuid => "uuid",
            NativeType::Varint => "varint",
            _ => return format!("{native:?}").to_lowercase(),
        }
        .to_owned(),
        other => format!("{other:?}"),
    }
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
