//! The column layout of a family's two tables: which columns form the partition key and
//! the clustering key, in which order, and what fills each of them.
//!
//! One description serves the DDL (`countersink schema`), the UPDATE text and its bind
//! order, the start-up check against `system_schema`, and the read-back queries.

use crate::config::{CountingMode, ShardPlacement, TableTime, TimeColumn, TimeRole, TimeType};
use crate::family::{FamilyDef, TableName};
use crate::vocabulary::Granularity;

pub use crate::vocabulary::WRITER_COLUMN;

/// What fills a key column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The family's key column number `n` (a tag value; for the generic family, 0 is the
    /// metric name and 1 the canonical tags).
    Key(usize),
    /// The UTC day (the minute table's partition, the day table's clustering), stored
    /// as this type (countersink's own tables: `day date`).
    Day(TimeType),
    /// The UTC month (the day table's partition), stored as this type (countersink's
    /// own tables: `month text`, `'YYYY-MM'`).
    Month(TimeType),
    /// The UTC minute (the minute table's clustering), stored as this type
    /// (countersink's own tables: `minute smallint`, the minute of the day).
    Minute(TimeType),
    /// The UTC hour (the hour table's clustering): `hour smallint`, the hour of the day.
    Hour(TimeType),
    /// The `tinyint` shard of a sharded family.
    Shard,
    /// The `int` epoch of a family reset by epochs: the start minute of the epoch the row
    /// belongs to (0 before the first reset); see [`crate::epoch`].
    Epoch,
    /// `writer text`: whose running total the row holds (`writer_totals` tables, last
    /// clustering column).
    Writer,
}

impl Role {
    /// The role of a time column.
    pub fn of_time(column: &TimeColumn) -> Role {
        match column.role {
            TimeRole::Minute => Role::Minute(column.typ),
            TimeRole::Day => Role::Day(column.typ),
            TimeRole::Month => Role::Month(column.typ),
            TimeRole::Hour => Role::Hour(column.typ),
        }
    }

    /// The period and type of a time column; `None` for the other roles.
    pub fn time(self) -> Option<(TimeRole, TimeType)> {
        match self {
            Role::Minute(t) => Some((TimeRole::Minute, t)),
            Role::Day(t) => Some((TimeRole::Day, t)),
            Role::Month(t) => Some((TimeRole::Month, t)),
            Role::Hour(t) => Some((TimeRole::Hour, t)),
            Role::Key(_) | Role::Shard | Role::Epoch | Role::Writer => None,
        }
    }
}

/// The layout of one table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableLayout {
    /// The table.
    pub table: TableName,
    /// Minute, hour, day or total table.
    pub kind: Granularity,
    /// Partition key columns, in order.
    pub partition_key: Vec<(String, Role)>,
    /// Clustering columns, in order.
    pub clustering_key: Vec<(String, Role)>,
    /// Value columns, in the family's column order: counters, or the `bigint` totals of
    /// a `writer_totals` table.
    pub counters: Vec<String>,
    /// How the table counts.
    pub mode: CountingMode,
}

impl TableLayout {
    /// The layout of `family`'s `kind` table; `None` when the family has no such table.
    ///
    /// Minute: partition (key, day), clustering minute. Hour: partition (key, day),
    /// clustering hour of the day. Day: partition (key, month), clustering day. Total:
    /// partition (key), no time column: one row per key (per shard).
    pub fn of(family: &FamilyDef, kind: Granularity) -> Option<TableLayout> {
        let table = family.table(kind)?.clone();
        let mut partition_key: Vec<(String, Role)> = family
            .key_columns
            .iter()
            .enumerate()
            .map(|(i, c)| (c.clone(), Role::Key(i)))
            .collect();
        if let Some(epoch) = &family.epoch_column {
            partition_key.push((epoch.clone(), Role::Epoch));
        }
        let hour = TableTime::hour();
        let time = match kind {
            Granularity::Minute => Some(&family.minute_time),
            Granularity::Day => Some(&family.day_time),
            Granularity::Hour => Some(&hour),
            Granularity::Total => None,
        };
        if let Some(time) = time {
            partition_key.push((time.partition.name.clone(), Role::of_time(&time.partition)));
        }
        let mut clustering_key = Vec::new();
        if let Some(sharding) = &family.sharding {
            let shard = (sharding.column.clone(), Role::Shard);
            match sharding.placement {
                ShardPlacement::Partition => partition_key.push(shard),
                ShardPlacement::Clustering => clustering_key.push(shard),
            }
        }
        if let Some(time) = time {
            clustering_key.push((
                time.clustering.name.clone(),
                Role::of_time(&time.clustering),
            ));
        }
        if family.mode == CountingMode::WriterTotals {
            clustering_key.push((WRITER_COLUMN.into(), Role::Writer));
        }
        Some(TableLayout {
            table,
            kind,
            partition_key,
            clustering_key,
            counters: family.columns.clone(),
            mode: family.mode,
        })
    }

    /// The CQL type of the value columns: `counter`, or `bigint` for `writer_totals`.
    pub fn value_type(&self) -> &'static str {
        match self.mode {
            CountingMode::Counter => "counter",
            CountingMode::WriterTotals => "bigint",
        }
    }

    /// Every key column (partition then clustering), in the order they are bound.
    pub fn key_columns(&self) -> impl Iterator<Item = &(String, Role)> {
        self.partition_key.iter().chain(&self.clustering_key)
    }

    /// The CQL type a key column is created with (key columns of configured families
    /// are created as `text`; an existing table may use another type, see the schema
    /// check); a time column has the type its role carries.
    pub fn default_type(role: Role) -> &'static str {
        match role {
            Role::Key(_) | Role::Writer => "text",
            Role::Day(t) | Role::Month(t) | Role::Minute(t) | Role::Hour(t) => t.as_str(),
            Role::Shard => "tinyint",
            Role::Epoch => "int",
        }
    }

    /// The time column of the clustering key: the row's minute or day.
    pub fn bucket_column(&self) -> &str {
        self.clustering_key
            .iter()
            .find(|(_, role)| role.time().is_some())
            .map_or("", |(name, _)| name.as_str())
    }

    /// `PRIMARY KEY` contents: `(p1, p2), c1, c2` (just `(p1, p2)` without clustering
    /// columns: a total table).
    pub fn primary_key_text(&self) -> String {
        let partition: Vec<&str> = self.partition_key.iter().map(|(c, _)| c.as_str()).collect();
        let mut text = format!("({})", partition.join(", "));
        for (column, _) in &self.clustering_key {
            text.push_str(", ");
            text.push_str(column);
        }
        text
    }

    /// The idempotent write of a `writer_totals` table (from `cql/totals.cql`): every key
    /// column, then every value column, then the write time, all bound.
    pub fn totals_insert_statement(&self) -> String {
        let columns: Vec<&str> = self
            .key_columns()
            .map(|(c, _)| c.as_str())
            .chain(self.counters.iter().map(String::as_str))
            .collect();
        let markers = vec!["?"; columns.len()];
        crate::cql_text::statement(
            crate::cql_text::TOTALS,
            "totals_insert",
            &[
                ("table", &self.table.to_string()),
                ("columns", &columns.join(", ")),
                ("markers", &markers.join(", ")),
            ],
        )
    }

    /// The counter UPDATE of this table (from `cql/statements.cql`).
    pub fn update_statement(&self) -> String {
        let increments: Vec<String> = self
            .counters
            .iter()
            .map(|c| format!("{c} = {c} + ?"))
            .collect();
        let conditions: Vec<String> = self
            .key_columns()
            .map(|(c, _)| format!("{c} = ?"))
            .collect();
        crate::cql_text::statement(
            crate::cql_text::STATEMENTS,
            "counter_update",
            &[
                ("table", &self.table.to_string()),
                ("increments", &increments.join(", ")),
                ("conditions", &conditions.join(" AND ")),
            ],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, FamilyConfig};
    use crate::family::Families;

    fn families(shards: u8, placement: ShardPlacement) -> Families {
        let mut config = Config::default();
        config.families.push(FamilyConfig {
            shards,
            shard_placement: placement,
            ..FamilyConfig::seed_views()
        });
        Families::from_config(&config).unwrap()
    }

    #[test]
    fn generic_updates_match_the_documented_tables() {
        let f = families(1, ShardPlacement::Partition);
        let generic = f.by_name("generic").unwrap();
        assert_eq!(
            TableLayout::of(generic, Granularity::Minute)
                .unwrap()
                .update_statement(),
            "UPDATE countersink.counts_by_minute SET value = value + ? WHERE name = ? AND tags = ? AND day = ? AND minute = ?"
        );
        assert_eq!(
            TableLayout::of(generic, Granularity::Day)
                .unwrap()
                .update_statement(),
            "UPDATE countersink.counts_by_day SET value = value + ? WHERE name = ? AND tags = ? AND month = ? AND day = ?"
        );
    }

    #[test]
    fn writer_totals_tables_cluster_by_writer_and_insert_with_a_timestamp() {
        let mut config = Config::default();
        config.generic.mode = CountingMode::WriterTotals;
        config.families.push(FamilyConfig {
            mode: CountingMode::WriterTotals,
            ..FamilyConfig::seed_views()
        });
        let f = Families::from_config(&config).unwrap();
        let views = f.by_name("views").unwrap();
        let minute = TableLayout::of(views, Granularity::Minute).unwrap();
        assert_eq!(minute.primary_key_text(), "(page_id, day), minute, writer");
        assert_eq!(minute.value_type(), "bigint");
        assert_eq!(
            minute.totals_insert_statement(),
            "INSERT INTO metrics.views_by_minute (page_id, day, minute, writer, bytes, views) VALUES (?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
        );
        let day = TableLayout::of(f.by_name("generic").unwrap(), Granularity::Day).unwrap();
        assert_eq!(day.primary_key_text(), "(name, tags, month), day, writer");
    }

    #[test]
    fn configured_family_with_and_without_shards() {
        let plain = families(1, ShardPlacement::Partition);
        let views = TableLayout::of(plain.by_name("views").unwrap(), Granularity::Minute).unwrap();
        assert_eq!(views.primary_key_text(), "(page_id, day), minute");
        assert_eq!(
            views.update_statement(),
            "UPDATE metrics.views_by_minute SET bytes = bytes + ?, views = views + ? WHERE page_id = ? AND day = ? AND minute = ?"
        );
        let partition = families(8, ShardPlacement::Partition);
        let day = TableLayout::of(partition.by_name("views").unwrap(), Granularity::Day).unwrap();
        assert_eq!(day.primary_key_text(), "(page_id, month, shard), day");
        let clustering = families(8, ShardPlacement::Clustering);
        let minute =
            TableLayout::of(clustering.by_name("views").unwrap(), Granularity::Minute).unwrap();
        assert_eq!(minute.primary_key_text(), "(page_id, day), shard, minute");
    }

    /// Renamed and retyped time columns take the places of `day`, `minute` and `month`
    /// in the key, the UPDATE and the read's bucket column.
    #[test]
    fn custom_time_columns_take_their_places() {
        use crate::config::tables::TimeColumnConfig;
        let mut config = Config::default();
        let mut views = FamilyConfig::seed_views();
        views.minute_time.day = TimeColumnConfig::new("ts_day", "date");
        views.minute_time.minute = TimeColumnConfig::new("bucket", "timestamp");
        views.day_time.month = TimeColumnConfig::new("ts_month", "date");
        config.families.push(views);
        let families = Families::from_config(&config).unwrap();
        let views = families.by_name("views").unwrap();
        let minute = TableLayout::of(views, Granularity::Minute).unwrap();
        assert_eq!(minute.primary_key_text(), "(page_id, ts_day), bucket");
        assert_eq!(minute.bucket_column(), "bucket");
        assert_eq!(
            minute.clustering_key,
            [("bucket".to_string(), Role::Minute(TimeType::Timestamp))]
        );
        assert_eq!(
            minute.update_statement(),
            "UPDATE metrics.views_by_minute SET bytes = bytes + ?, views = views + ? WHERE page_id = ? AND ts_day = ? AND bucket = ?"
        );
        let day = TableLayout::of(views, Granularity::Day).unwrap();
        assert_eq!(day.primary_key_text(), "(page_id, ts_month), day");
        assert_eq!(day.partition_key[1].1, Role::Month(TimeType::Date));
        assert_eq!(TableLayout::default_type(day.partition_key[1].1), "date");
    }

    #[test]
    fn the_epoch_column_follows_the_key_columns() {
        let mut config = Config::default();
        config.families.push(FamilyConfig {
            shards: 4,
            epoch_column: Some("epoch".into()),
            ..FamilyConfig::seed_views()
        });
        let families = Families::from_config(&config).unwrap();
        let views = families.by_name("views").unwrap();
        let minute = TableLayout::of(views, Granularity::Minute).unwrap();
        assert_eq!(
            minute.primary_key_text(),
            "(page_id, epoch, day, shard), minute"
        );
        assert_eq!(
            minute.update_statement(),
            "UPDATE metrics.views_by_minute SET bytes = bytes + ?, views = views + ? WHERE page_id = ? AND epoch = ? AND day = ? AND shard = ? AND minute = ?"
        );
        let day = TableLayout::of(views, Granularity::Day).unwrap();
        assert_eq!(
            day.primary_key_text(),
            "(page_id, epoch, month, shard), day"
        );
    }
}
