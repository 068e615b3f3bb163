//! The schema countersink writes to, rendered from `cql/` for a configuration: what
//! `countersink schema` prints and `--apply` (and `countersink dev`) runs.

use std::collections::BTreeSet;

use crate::config::{Config, ConfigError, CountingMode, TableTime};
use crate::cql_text::{self, EPOCHS, EXACT, FAMILY, GENERIC, KEY_INDEX, LEADERBOARD, TOTALS};
use crate::family::{Families, FamilyDef, TableName};
use crate::layout::{Role, TableLayout};
use crate::vocabulary::Granularity;

/// Replication for a single-node development store. Production keyspaces should use
/// `NetworkTopologyStrategy` with the operator's data centres; countersink only creates a
/// keyspace when it does not exist.
pub const DEV_REPLICATION: &str = "{'class': 'SimpleStrategy', 'replication_factor': 1}";

/// How new keyspaces are created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keyspaces {
    /// `WITH replication = ...`, nothing else (Apache Cassandra; the store's defaults).
    Plain,
    /// Also `AND tablets = {'enabled': false}`: ScyllaDB 6.0 and later, where counter
    /// tables are refused in keyspaces with tablets (through at least 2025.2).
    WithoutTablets,
}

/// Every statement needed for `config`: keyspaces, generic tables, family tables.
pub fn statements(config: &Config, replication: &str) -> Result<Vec<String>, ConfigError> {
    statements_with(config, replication, Keyspaces::Plain)
}

/// The same, with keyspaces created as `keyspaces` says.
pub fn statements_with(
    config: &Config,
    replication: &str,
    keyspaces_as: Keyspaces,
) -> Result<Vec<String>, ConfigError> {
    let create_keyspace = match keyspaces_as {
        Keyspaces::Plain => "create_keyspace",
        Keyspaces::WithoutTablets => "create_keyspace_without_tablets",
    };
    let families = Families::from_config(config)?;
    let mut keyspaces = BTreeSet::new();
    for family in families.iter() {
        if family.is_generic() && !families.generic_enabled() {
            continue;
        }
        for table in family.granularities().filter_map(|g| family.table(g)) {
            keyspaces.insert(table.keyspace.clone());
        }
    }
    let index_table = TableName::resolve(&config.key_index.table, &config.store.keyspace);
    if config.key_index.enabled {
        keyspaces.insert(index_table.keyspace.clone());
    }
    if !config.leaderboards.is_empty() {
        keyspaces.insert(config.store.keyspace.clone());
    }
    if uses_epochs(config) {
        keyspaces.insert(epochs_table(config).keyspace);
    }
    if config.any_exact() {
        keyspaces.insert(config.exact_keyspace().to_owned());
    }
    let mut out: Vec<String> = keyspaces
        .iter()
        .map(|ks| {
            cql_text::statement(
                GENERIC,
                create_keyspace,
                &[("keyspace", ks), ("replication", replication)],
            )
        })
        .collect();
    for family in families.iter() {
        if family.is_generic() && !families.generic_enabled() {
            continue;
        }
        if family.mode == CountingMode::WriterTotals {
            out.extend(totals_tables(family));
            continue;
        }
        if family.is_generic() {
            out.extend(generic_tables(family));
            continue;
        }
        out.extend(family_tables(family));
    }
    out.extend(operation_tables(config, &index_table));
    Ok(out)
}

/// The generic family's two tables (`cql/generic.cql`).
fn generic_tables(family: &FamilyDef) -> Vec<String> {
    let (Some(minute), Some(day)) = (&family.minute_table, &family.day_table) else {
        return Vec::new();
    };
    let values = [
        ("keyspace", minute.keyspace.as_str()),
        ("minute_table", minute.table.as_str()),
        ("day_table", day.table.as_str()),
    ];
    let day_values = [
        ("keyspace", day.keyspace.as_str()),
        ("minute_table", minute.table.as_str()),
        ("day_table", day.table.as_str()),
    ];
    vec![
        cql_text::statement(GENERIC, "create_generic_minute", &values),
        cql_text::statement(GENERIC, "create_generic_day", &day_values),
    ]
}

/// The counter tables of a configured family (`cql/family.cql`), one per granularity it
/// has, in label order: key columns, the table's time columns (none for a total table),
/// the shard and epoch columns, one counter per counter column.
fn family_tables(family: &FamilyDef) -> Vec<String> {
    let layouts: Vec<TableLayout> = Granularity::ALL
        .into_iter()
        .filter_map(|g| TableLayout::of(family, g))
        .collect();
    let Some(first) = layouts.first() else {
        return Vec::new();
    };
    let mut columns = String::new();
    for (name, role) in first.key_columns() {
        if matches!(role, Role::Key(_) | Role::Shard | Role::Epoch) {
            columns.push_str(&format!(
                "    {name} {},\n",
                TableLayout::default_type(*role)
            ));
        }
    }
    let counters: String = family
        .columns
        .iter()
        .map(|c| format!("    {c} counter,\n"))
        .collect();
    let (columns, counters) = (
        columns.trim_end_matches('\n'),
        counters.trim_end_matches('\n'),
    );
    let hour_time = TableTime::hour();
    layouts
        .iter()
        .map(|layout| {
            let (name, time) = match layout.kind {
                Granularity::Minute => ("minute", Some(&family.minute_time)),
                Granularity::Day => ("day", Some(&family.day_time)),
                Granularity::Hour => ("hour", Some(&hour_time)),
                Granularity::Total => ("total", None),
            };
            let table = layout.table.to_string();
            let key = layout.primary_key_text();
            let time = time.map(|t| time_definitions(t, 0)).unwrap_or_default();
            let (table_field, time_field, key_field) = (
                format!("{name}_table"),
                format!("{name}_time_definitions"),
                format!("{name}_primary_key"),
            );
            let values = [
                (table_field.as_str(), table.as_str()),
                (time_field.as_str(), time.as_str()),
                ("column_definitions", columns),
                ("counter_definitions", counters),
                (key_field.as_str(), key.as_str()),
            ];
            cql_text::statement(FAMILY, &format!("create_family_{name}"), &values)
        })
        .collect()
}

/// Whether any family is reset by epochs.
pub fn uses_epochs(config: &Config) -> bool {
    config.families.iter().any(|f| f.epoch_column.is_some())
}

/// The epoch registry (`epochs.table`).
pub fn epochs_table(config: &Config) -> TableName {
    TableName::resolve(&config.epochs.table, &config.store.keyspace)
}

/// The two tables of a `writer_totals` family (the generic one included): key columns,
/// bucket columns, `writer text`, one `bigint` per value column.
fn totals_tables(family: &FamilyDef) -> Vec<String> {
    // The configuration allows writer totals with a minute and a day table only.
    let (Some(minute), Some(day)) = (
        TableLayout::of(family, Granularity::Minute),
        TableLayout::of(family, Granularity::Day),
    ) else {
        return Vec::new();
    };
    let columns: String = minute
        .key_columns()
        .filter(|(_, role)| matches!(role, Role::Key(_)))
        .map(|(name, role)| format!("    {name} {},\n", TableLayout::default_type(*role)))
        .collect();
    let values: String = family
        .columns
        .iter()
        .map(|c| format!("    {c} {},\n", minute.value_type()))
        .collect();
    let (minute_table, day_table) = (minute.table.to_string(), day.table.to_string());
    let (minute_key, day_key) = (minute.primary_key_text(), day.primary_key_text());
    // Aligned with the `writer text` line that follows them.
    let writer = crate::vocabulary::WRITER_COLUMN.len();
    let minute_time = time_definitions(&family.minute_time, writer);
    let day_time = time_definitions(&family.day_time, writer);
    let values = [
        ("minute_table", minute_table.as_str()),
        ("day_table", day_table.as_str()),
        ("minute_time_definitions", minute_time.as_str()),
        ("day_time_definitions", day_time.as_str()),
        ("column_definitions", columns.trim_end_matches('\n')),
        ("value_definitions", values.trim_end_matches('\n')),
        ("minute_primary_key", minute_key.as_str()),
        ("day_primary_key", day_key.as_str()),
    ];
    vec![
        cql_text::statement(TOTALS, "create_totals_minute", &values),
        cql_text::statement(TOTALS, "create_totals_day", &values),
    ]
}

/// A table's two time columns as column definitions, partition column first, their types
/// aligned (to at least `width` characters of name).
fn time_definitions(time: &TableTime, width: usize) -> String {
    let columns = [&time.partition, &time.clustering];
    let width = columns.iter().map(|c| c.name.len()).fold(width, usize::max);
    columns
        .iter()
        .map(|c| format!("    {:width$} {},", c.name, c.typ.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The regular tables of the operator features a configuration turns on: the key index
/// (`key_index.enabled`), the leaderboard tables (any `[[leaderboard]]`), the exact
/// tables (any family with `exact = true`) and the epoch registry (any family with an
/// `epoch_column`).
fn operation_tables(config: &Config, index_table: &TableName) -> Vec<String> {
    let mut out = Vec::new();
    if uses_epochs(config) {
        out.push(cql_text::statement(
            EPOCHS,
            "create_epochs",
            &[("table", &epochs_table(config).to_string())],
        ));
    }
    if config.key_index.enabled {
        out.push(cql_text::statement(
            KEY_INDEX,
            "create_key_index",
            &[("table", &index_table.to_string())],
        ));
    }
    if !config.leaderboards.is_empty() {
        let keyspace = [("keyspace", config.store.keyspace.as_str())];
        out.push(cql_text::statement(
            LEADERBOARD,
            "create_rankings",
            &keyspace,
        ));
        out.push(cql_text::statement(
            LEADERBOARD,
            "create_current",
            &keyspace,
        ));
    }
    if config.any_exact() {
        let keyspace = [("keyspace", config.exact_keyspace())];
        for name in ["create_ledger", "create_outcomes", "create_exact_days"] {
            out.push(cql_text::statement(EXACT, name, &keyspace));
        }
    }
    out
}

/// The statements as one script, `;`-terminated, for printing.
pub fn script(
    config: &Config,
    replication: &str,
    keyspaces_as: Keyspaces,
) -> Result<String, ConfigError> {
    Ok(statements_with(config, replication, keyspaces_as)?
        .iter()
        .map(|s| format!("{s};\n"))
        .collect::<Vec<_>>()
        .join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{FamilyConfig, ShardPlacement};

    #[test]
    fn default_config_creates_the_keyspace_and_the_generic_tables() {
        let all = statements(&Config::default(), DEV_REPLICATION).unwrap();
        assert_eq!(all.len(), 3);
        assert!(all[0].starts_with("CREATE KEYSPACE IF NOT EXISTS countersink"));
        assert!(all[1].contains("countersink.counts_by_minute"));
        assert!(all[1].contains("PRIMARY KEY ((name, tags, day), minute)"));
        assert!(all[2].contains("PRIMARY KEY ((name, tags, month), day)"));
        assert!(
            !all.iter()
                .any(|s| s.contains('{') && !s.contains("replication")),
            "{all:?}"
        );
    }

    /// Modes mix: a counter family beside `writer_totals` ones (the generic family too).
    #[test]
    fn writer_totals_tables_have_bigint_values_and_a_writer_column() {
        let mut config = Config::default();
        config.generic.mode = CountingMode::WriterTotals;
        config.families.push(FamilyConfig {
            mode: CountingMode::WriterTotals,
            ..FamilyConfig::seed_views()
        });
        config.families.push(FamilyConfig {
            name: "counted".into(),
            minute_table: "metrics.c_by_minute".into(),
            day_table: "metrics.c_by_day".into(),
            columns: [("c.views".to_string(), "views".to_string())].into(),
            ..FamilyConfig::seed_views()
        });
        let all = statements(&config, DEV_REPLICATION).unwrap();
        assert_eq!(
            all.len(),
            8,
            "two keyspaces, three families of two tables: {all:?}"
        );
        assert_eq!(
            all[2],
            "CREATE TABLE IF NOT EXISTS countersink.counts_by_minute (\n    name text,\n    tags text,\n    day    date,\n    minute smallint,\n    writer text,\n    value bigint,\n    PRIMARY KEY ((name, tags, day), minute, writer)\n)"
        );
        assert!(
            all[5].contains("views bigint")
                && all[5].contains("PRIMARY KEY ((page_id, month), day, writer)"),
            "{}",
            all[5]
        );
        assert!(
            all[6].contains("views counter") && !all[6].contains("writer"),
            "{}",
            all[6]
        );
    }

    #[test]
    fn the_key_index_and_leaderboard_tables_come_with_their_features() {
        let mut config = Config::default();
        config.key_index.enabled = true;
        config.key_index.table = "ops.keys".into();
        config.leaderboards.push(crate::config::LeaderboardConfig {
            name: "top".into(),
            family: "generic".into(),
            column: "value".into(),
            ..Default::default()
        });
        let all = statements(&config, DEV_REPLICATION).unwrap();
        assert!(
            all[0].contains("IF NOT EXISTS countersink") && all[1].contains("IF NOT EXISTS ops")
        );
        assert!(
            all.iter()
                .any(|s| s.starts_with("CREATE TABLE IF NOT EXISTS ops.keys")
                    && s.contains("PRIMARY KEY ((family, day, bucket), key)"))
        );
        assert!(
            all.iter()
                .any(|s| s.contains("countersink.leaderboard_rankings")
                    && s.contains("CLUSTERING ORDER BY (score DESC, key ASC)"))
        );
        assert!(
            all.iter()
                .any(|s| s.contains("countersink.leaderboard_current"))
        );
        assert_eq!(
            statements(&Config::default(), DEV_REPLICATION)
                .unwrap()
                .len(),
            3
        );
    }

    #[test]
    fn an_epoch_family_gets_its_int_column_and_the_registry() {
        let mut config = Config::default();
        config.generic.enabled = false;
        config.families.push(FamilyConfig {
            epoch_column: Some("epoch".into()),
            ..FamilyConfig::seed_views()
        });
        let all = statements(&config, DEV_REPLICATION).unwrap();
        assert!(
            all.iter().any(|s| s.contains("views_by_minute")
                && s.contains("    epoch int,\n")
                && s.contains("PRIMARY KEY ((page_id, epoch, day), minute)")),
            "{all:?}"
        );
        assert!(
            all.iter().any(
                |s| s.starts_with("CREATE TABLE IF NOT EXISTS countersink.epochs")
                    && s.contains("PRIMARY KEY ((family), scope, start_minute)")
            ),
            "{all:?}"
        );
        assert!(
            all.iter()
                .any(|s| s.contains("KEYSPACE IF NOT EXISTS countersink"))
        );
    }

    #[test]
    fn the_exact_tables_come_with_an_exact_family_in_their_keyspace() {
        let mut config = Config::default();
        config.exact.keyspace = Some("truth".into());
        assert!(
            !statements(&config, DEV_REPLICATION)
                .unwrap()
                .iter()
                .any(|s| s.contains("truth")),
            "nothing exact without an exact family"
        );
        config.generic.exact = true;
        let all = statements(&config, DEV_REPLICATION).unwrap();
        assert!(all.iter().any(|s| s == "CREATE KEYSPACE IF NOT EXISTS truth\n    WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}"), "{all:?}");
        for table in ["truth.delta_ledger", "truth.outcomes", "truth.exact_by_day"] {
            assert!(
                all.iter()
                    .any(|s| s.starts_with(&format!("CREATE TABLE IF NOT EXISTS {table} ("))),
                "{table}: {all:?}"
            );
        }
        assert!(all.iter().any(|s| s.contains(
            "PRIMARY KEY ((family, day, bucket), key, minute, writer, incarnation, flush_seq, part)"
        )));
    }

    #[test]
    fn family_tables_follow_their_layout() {
        let mut config = Config::default();
        config.generic.enabled = false;
        config.families.push(FamilyConfig {
            columns: [("page.views".into(), "views".into())].into(),
            shards: 4,
            shard_placement: ShardPlacement::Clustering,
            ..FamilyConfig::seed_views()
        });
        let all = statements(&config, DEV_REPLICATION).unwrap();
        assert_eq!(all.len(), 3, "one keyspace, two tables: {all:?}");
        assert!(all[0].contains("IF NOT EXISTS metrics"));
        assert_eq!(
            all[1],
            "CREATE TABLE IF NOT EXISTS metrics.views_by_minute (\n    page_id text,\n    shard tinyint,\n    day    date,\n    minute smallint,\n    views counter,\n    PRIMARY KEY ((page_id, day), shard, minute)\n)"
        );
        assert!(
            all[2].contains("month text")
                && all[2].contains("PRIMARY KEY ((page_id, month), shard, day)")
        );
    }

    /// A family's own time columns are created with their names and types.
    #[test]
    fn family_tables_carry_their_time_columns() {
        use crate::config::tables::TimeColumnConfig;
        let mut config = Config::default();
        config.generic.enabled = false;
        let mut views = FamilyConfig::seed_views();
        views.minute_time.day = TimeColumnConfig::new("ts_day", "date");
        views.minute_time.minute = TimeColumnConfig::new("bucket", "timestamp");
        views.day_time.day = TimeColumnConfig::new("day", "text");
        config.families.push(views);
        let all = statements(&config, DEV_REPLICATION).unwrap();
        assert_eq!(
            all[1],
            "CREATE TABLE IF NOT EXISTS metrics.views_by_minute (\n    page_id text,\n    ts_day date,\n    bucket timestamp,\n    bytes counter,\n    views counter,\n    PRIMARY KEY ((page_id, ts_day), bucket)\n)"
        );
        assert!(
            all[2].contains("    month text,\n    day   text,\n")
                && all[2].contains("PRIMARY KEY ((page_id, month), day)"),
            "{}",
            all[2]
        );
    }
}
