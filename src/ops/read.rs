//! Reading counts back: one partition of a family's minute or day table, every shard and
//! every writer summed, at a chosen consistency. The one read path of `get`,
//! `Recorder::read_day`/`read_minutes`, leaderboards and migration, for both counting
//! modes.
//!
//! A family sharded in the partition key keeps one partition per shard (seed 000: "a read
//! becomes sixteen partition reads, best issued concurrently and summed in the client"),
//! so those reads go out together and the answer takes about one read's time, not
//! sixteen. A family sharded in the clustering key keeps its shards in one partition: one
//! read, whose rows are summed. A `writer_totals` family keeps one row per writer (writer
//! id, incarnation) and bucket in the same partition: one read, whose rows are summed, so
//! its cost is its rows: writers x incarnations per bucket ([`PartitionRead`] counts
//! them). Statements are prepared once per table and column set.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures_util::future::try_join_all;
use parking_lot::Mutex;
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::{CqlValue, Row};

use crate::bucket::Day;
use crate::config::{ConsistencyLevel, ShardPlacement};
use crate::cql_text::{self, STATEMENTS};
use crate::family::{Families, FamilyDef, TableName, TagSet, Unplaced};
use crate::layout::{Role, TableLayout};
use crate::sink::cql::{KeyType, SchemaError, bind, schema, session, time};
use crate::vocabulary::Granularity;

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The counter asked for cannot be named this way (a missing key tag, an unknown
    /// column); the message says what to give.
    #[error("{0}")]
    Usage(String),
    /// The table does not match the configuration.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// The store refused or failed the read.
    #[error("`{statement}`: {error}")]
    Store {
        /// The statement.
        statement: String,
        /// What the driver said.
        error: String,
    },
    /// No session: the reader was built without a store.
    #[error("no session to the store: reads need `Recorder::connect`")]
    NoStore,
    /// A write that would be wrong at this time, and was not made (why).
    #[error("{0}")]
    Refused(String),
}

/// One counter: a family's column for one key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CounterRef {
    /// The family's name.
    pub family: String,
    /// The counter column's name.
    pub column: String,
    /// The key values, in the family's key order (generic: name, canonical tags).
    pub keys: Vec<String>,
    /// The epoch read, for a family with an epoch column (`None`: epoch 0, before the
    /// first reset). See [`crate::epoch`].
    pub epoch: Option<i32>,
}

/// The counter a metric name and tags are written to: the family that maps the name (its
/// key from the tags), else the generic family by name and canonical tags, exactly as an
/// increment with these tags lands.
pub fn resolve(
    families: &Families,
    name: &str,
    tags: &[(&str, &str)],
) -> Result<CounterRef, ReadError> {
    if let Some((id, column)) = families.column_of(name) {
        let family = families.get(id);
        let mut keys = Vec::new();
        for key in &family.key_columns {
            let value = tags.value_of(key).ok_or_else(|| {
                ReadError::Usage(format!(
                    "`{name}` belongs to family `{}`: give --tag {key}:VALUE",
                    family.name
                ))
            })?;
            keys.push(value.to_owned());
        }
        return Ok(CounterRef {
            family: family.name.clone(),
            column: family.columns[column].clone(),
            keys,
            epoch: None,
        });
    }
    // A `[[mapping]]` rule's family, or the generic family: the resolver writes the key
    // (captures, tag rules) exactly as for an increment.
    let mut series = Vec::new();
    let target = families
        .resolve(name, tags, &mut series)
        .map_err(|unplaced| {
            ReadError::Usage(match unplaced {
                Unplaced::MissingKeyTag | Unplaced::AmbiguousKeyTag => format!(
                    "`{name}` is mapped to a family by a [[mapping]] rule: give each key column the rule does not fill with --tag KEY:VALUE (once)"
                ),
                Unplaced::KeyTooLong => format!("the key of `{name}` is longer than limits.max_key_bytes"),
                Unplaced::Unconfigured => format!(
                    "no family takes `{name}` and the generic family is disabled"
                ),
            })
        })?;
    let family = families.get(target.family);
    Ok(CounterRef {
        family: family.name.clone(),
        column: family.columns[target.column].clone(),
        keys: crate::series::fields(&series).map(str::to_owned).collect(),
        epoch: None,
    })
}

/// The rows of one logical partition (every shard and writer summed): clustering bucket →
/// one sum per requested column. The bucket is the minute of the day (minute table) or the
/// day counted from the epoch (day table).
pub type PartitionSums = BTreeMap<i64, Vec<i64>>;

/// One partition read and what it cost.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionRead {
    /// The sums.
    pub sums: PartitionSums,
    /// Rows the store returned: per bucket, one per shard of a counter family, one per
    /// writer and incarnation of a `writer_totals` family.
    pub rows_read: usize,
    /// Queries sent (one per shard in the partition key).
    pub requests: usize,
}

/// The reads of one table's partitions, prepared ([`Reader::partition_query`]).
pub struct PartitionQuery {
    layout: TableLayout,
    key_types: Vec<KeyType>,
    statement: PreparedStatement,
    shards: Vec<Option<u8>>,
    width: usize,
}

/// Reads counter partitions; cheap to share (statements are prepared once).
pub struct Reader {
    session: Arc<Session>,
    prepared: Mutex<HashMap<String, PreparedStatement>>,
    key_types: Mutex<HashMap<TableName, Vec<KeyType>>>,
}

impl Reader {
    /// A reader on `session`.
    pub fn new(session: Arc<Session>) -> Reader {
        Reader {
            session,
            prepared: Mutex::new(HashMap::new()),
            key_types: Mutex::new(HashMap::new()),
        }
    }

    /// The session.
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// The logical partition of `keys` holding `day` in `family`'s `kind` table: the
    /// minute table's (key, day) partition or the day table's (key, month) partition,
    /// summed over every shard and writer, for the value columns `columns` (indices into
    /// the family's columns).
    pub async fn partition(
        &self,
        family: &FamilyDef,
        kind: Granularity,
        keys: &[String],
        day: Day,
        columns: &[usize],
        consistency: ConsistencyLevel,
    ) -> Result<PartitionSums, ReadError> {
        Ok(self
            .read_partition(family, kind, keys, day, columns, consistency)
            .await?
            .sums)
    }

    /// [`Reader::partition`], with the rows and requests it took.
    pub async fn read_partition(
        &self,
        family: &FamilyDef,
        kind: Granularity,
        keys: &[String],
        day: Day,
        columns: &[usize],
        consistency: ConsistencyLevel,
    ) -> Result<PartitionRead, ReadError> {
        self.read_partition_in_epoch(family, kind, keys, None, day, columns, consistency)
            .await
    }

    /// [`Reader::read_partition`] in one epoch of a family with an epoch column
    /// (`None`: epoch 0).
    #[allow(clippy::too_many_arguments)]
    pub async fn read_partition_in_epoch(
        &self,
        family: &FamilyDef,
        kind: Granularity,
        keys: &[String],
        epoch: Option<i32>,
        day: Day,
        columns: &[usize],
        consistency: ConsistencyLevel,
    ) -> Result<PartitionRead, ReadError> {
        let query = self
            .partition_query(family, kind, columns, consistency)
            .await?;
        self.read_query(&query, keys, epoch, day).await
    }

    /// Prepares the reads of `family`'s `kind` partitions for the value columns
    /// `columns` at `consistency`, for a caller that reads many keys the same way
    /// (reconcile): the statement, layout and key types are then found once, not per read.
    pub async fn partition_query(
        &self,
        family: &FamilyDef,
        kind: Granularity,
        columns: &[usize],
        consistency: ConsistencyLevel,
    ) -> Result<PartitionQuery, ReadError> {
        let layout = TableLayout::of(family, kind).ok_or_else(|| {
            ReadError::Usage(format!(
                "family `{}` has no {} table",
                family.name,
                kind.as_str()
            ))
        })?;
        let names: Vec<&str> = columns
            .iter()
            .map(|&c| family.columns.get(c).map(String::as_str))
            .collect::<Option<_>>()
            .ok_or_else(|| ReadError::Usage("no such counter column".into()))?;
        let key_types = self.key_types(&layout)?;
        let mut statement = self.prepared(&layout, &names).await?;
        statement.set_consistency(session::consistency(consistency));
        let shards: Vec<Option<u8>> = match &family.sharding {
            Some(s) if s.placement == ShardPlacement::Partition => {
                (0..s.shards).map(Some).collect()
            }
            _ => vec![None],
        };
        Ok(PartitionQuery {
            width: names.len(),
            layout,
            key_types,
            statement,
            shards,
        })
    }

    /// One logical partition read with a [`PartitionQuery`]: every shard, summed.
    pub async fn read_query(
        &self,
        query: &PartitionQuery,
        keys: &[String],
        epoch: Option<i32>,
        day: Day,
    ) -> Result<PartitionRead, ReadError> {
        let PartitionQuery {
            layout,
            key_types,
            statement,
            shards,
            width,
        } = query;
        let mut bound = Vec::with_capacity(shards.len());
        for shard in shards {
            let mut values = partition_values(layout, key_types, keys, day, *shard)?;
            for ((_, role), value) in layout.partition_key.iter().zip(values.iter_mut()) {
                if *role == Role::Epoch {
                    *value = CqlValue::Int(epoch.unwrap_or(0));
                }
            }
            bound.push(values);
        }
        let reads = bound.into_iter().map(|values| {
            let statement = &statement;
            async move {
                let result = self
                    .session
                    .execute_unpaged(statement, values)
                    .await
                    .map_err(|e| store_error(statement, e))?;
                let rows = result
                    .into_rows_result()
                    .map_err(|e| store_error(statement, e))?;
                rows.rows::<Row>()
                    .map_err(|e| store_error(statement, e))?
                    .map(|row| row.map_err(|e| store_error(statement, e)))
                    .collect::<Result<Vec<Row>, ReadError>>()
            }
        });
        let mut read = PartitionRead::default();
        for rows in try_join_all(reads).await? {
            read.requests += 1;
            for row in rows {
                read.rows_read += 1;
                let mut cells = row.columns.into_iter();
                // A total table's rows have no bucket column: the one row is bucket 0.
                let cell = if layout.kind == Granularity::Total {
                    Some(CqlValue::SmallInt(0))
                } else {
                    cells.next().flatten()
                };
                let bucket = match (layout.kind, &cell) {
                    (Granularity::Minute, Some(value)) => time::read_minute_of_day(value),
                    (Granularity::Hour, Some(value)) => time::read_hour_of_day(value),
                    (Granularity::Day, Some(value)) => {
                        time::read_day(value).map(|day| i64::from(day.0))
                    }
                    (Granularity::Total, Some(_)) => Some(0),
                    (_, None) => None,
                };
                let bucket = match bucket {
                    Some(bucket) => bucket,
                    None => {
                        return Err(ReadError::Store {
                            statement: layout.table.to_string(),
                            error: format!("unexpected bucket value {cell:?}"),
                        });
                    }
                };
                let entry = read.sums.entry(bucket).or_insert_with(|| vec![0; *width]);
                for (sum, cell) in entry.iter_mut().zip(cells) {
                    // A counter shard's cell, or one writer's running total (`bigint`);
                    // added as the store adds a counter, wrapping at the `i64` range.
                    match cell {
                        Some(CqlValue::Counter(c)) => *sum = sum.wrapping_add(c.0),
                        Some(CqlValue::BigInt(v)) => *sum = sum.wrapping_add(v),
                        _ => {}
                    }
                }
            }
        }
        Ok(read)
    }

    /// The partition of one counter that holds `day` in its `kind` table (the minutes of
    /// that day, or the days of its month), every shard and writer summed: one value per
    /// bucket, and what the read cost.
    pub async fn counter_partition(
        &self,
        families: &Families,
        counter: &CounterRef,
        kind: Granularity,
        day: Day,
        consistency: ConsistencyLevel,
    ) -> Result<PartitionRead, ReadError> {
        let (family, column) = locate(families, counter)?;
        self.read_partition_in_epoch(
            family,
            kind,
            &counter.keys,
            counter.epoch,
            day,
            &[column],
            consistency,
        )
        .await
    }

    /// One counter's values in its `kind` table, every shard and writer summed: bucket →
    /// value. The bucket is the minute or hour of `day`, a day of `day`'s month (the day
    /// table's partition), or 0 for the all-time total (whose read ignores `day`).
    pub async fn series(
        &self,
        families: &Families,
        counter: &CounterRef,
        kind: Granularity,
        day: Day,
        consistency: ConsistencyLevel,
    ) -> Result<BTreeMap<i64, i64>, ReadError> {
        let read = self
            .counter_partition(families, counter, kind, day, consistency)
            .await?;
        Ok(read.sums.into_iter().map(|(b, v)| (b, v[0])).collect())
    }

    /// The day total of one counter (its day row, every shard and writer summed).
    pub async fn day_total(
        &self,
        families: &Families,
        counter: &CounterRef,
        day: Day,
        consistency: ConsistencyLevel,
    ) -> Result<i64, ReadError> {
        let series = self
            .series(families, counter, Granularity::Day, day, consistency)
            .await?;
        Ok(value_at(&series, Granularity::Day, day))
    }

    /// The all-time total of one counter (its total table's row, every shard summed).
    pub async fn all_time_total(
        &self,
        families: &Families,
        counter: &CounterRef,
        consistency: ConsistencyLevel,
    ) -> Result<i64, ReadError> {
        let series = self
            .series(families, counter, Granularity::Total, Day(0), consistency)
            .await?;
        Ok(value_at(&series, Granularity::Total, Day(0)))
    }

    fn key_types(&self, layout: &TableLayout) -> Result<Vec<KeyType>, ReadError> {
        if let Some(types) = self.key_types.lock().get(&layout.table) {
            return Ok(types.clone());
        }
        let types = schema::check(&self.session, layout)?;
        self.key_types
            .lock()
            .insert(layout.table.clone(), types.clone());
        Ok(types)
    }

    async fn prepared(
        &self,
        layout: &TableLayout,
        columns: &[&str],
    ) -> Result<PreparedStatement, ReadError> {
        let text = select_partition(layout, columns);
        if let Some(statement) = self.prepared.lock().get(&text) {
            return Ok(statement.clone());
        }
        let mut statement =
            self.session
                .prepare(text.clone())
                .await
                .map_err(|e| ReadError::Store {
                    statement: text.clone(),
                    error: e.to_string(),
                })?;
        // A read changes nothing: the driver may retry it.
        statement.set_is_idempotent(true);
        self.prepared.lock().insert(text, statement.clone());
        Ok(statement)
    }
}

/// The one value a day or total read stands for in its `series`: the day's own bucket
/// (a day table's partition holds its whole month), or the total's; 0 when no row is
/// stored.
pub fn value_at(series: &BTreeMap<i64, i64>, kind: Granularity, day: Day) -> i64 {
    let bucket = match kind {
        Granularity::Total => 0,
        _ => i64::from(day.0),
    };
    series.get(&bucket).copied().unwrap_or(0)
}

/// The family and column index a counter reference names.
pub fn locate<'a>(
    families: &'a Families,
    counter: &CounterRef,
) -> Result<(&'a FamilyDef, usize), ReadError> {
    let family = families
        .by_name(&counter.family)
        .ok_or_else(|| ReadError::Usage(format!("no family is called `{}`", counter.family)))?;
    let column = family
        .columns
        .iter()
        .position(|c| *c == counter.column)
        .ok_or_else(|| {
            ReadError::Usage(format!(
                "family `{}` has no column `{}`",
                family.name, counter.column
            ))
        })?;
    if counter.keys.len() != family.key_columns.len() {
        return Err(ReadError::Usage(format!(
            "family `{}` is keyed by ({}); {} key values given",
            family.name,
            family.key_columns.join(", "),
            counter.keys.len()
        )));
    }
    Ok((family, column))
}

/// `SELECT bucket, columns FROM table WHERE partition key` (from `cql/statements.cql`):
/// the bucket is the table's clustering time column, whatever its name.
pub fn select_partition(layout: &TableLayout, columns: &[&str]) -> String {
    let bucket = layout.bucket_column();
    let conditions: Vec<String> = layout
        .partition_key
        .iter()
        .map(|(c, _)| format!("{c} = ?"))
        .collect();
    if layout.kind == Granularity::Total {
        return cql_text::statement(
            STATEMENTS,
            "select_total",
            &[
                ("columns", &columns.join(", ")),
                ("table", &layout.table.to_string()),
                ("conditions", &conditions.join(" AND ")),
            ],
        );
    }
    cql_text::statement(
        STATEMENTS,
        "select_partition",
        &[
            ("bucket", bucket),
            ("columns", &columns.join(", ")),
            ("table", &layout.table.to_string()),
            ("conditions", &conditions.join(" AND ")),
        ],
    )
}

/// The bound values of a partition key: key values converted to their column types, the
/// day or month, and the shard.
pub fn partition_values(
    layout: &TableLayout,
    key_types: &[KeyType],
    keys: &[String],
    day: Day,
    shard: Option<u8>,
) -> Result<Vec<CqlValue>, ReadError> {
    let mut values = Vec::with_capacity(layout.partition_key.len());
    for (_, role) in &layout.partition_key {
        values.push(match role {
            Role::Key(i) => {
                let text = keys
                    .get(*i)
                    .ok_or_else(|| ReadError::Usage("too few key values".into()))?;
                let typ = key_types.get(*i).copied().unwrap_or(KeyType::Text);
                bind::key_value(text, typ).map_err(ReadError::Usage)?
            }
            Role::Day(typ) => time::day(*typ, day),
            Role::Month(typ) => time::month(*typ, day),
            Role::Shard => CqlValue::TinyInt(shard.unwrap_or(0) as i8),
            Role::Minute(_) | Role::Hour(_) => CqlValue::SmallInt(0),
            Role::Epoch => CqlValue::Int(0),
            Role::Writer => {
                return Err(ReadError::Usage(
                    "the writer column is a clustering column, never in a partition key".into(),
                ));
            }
        });
    }
    Ok(values)
}

fn store_error(statement: &PreparedStatement, error: impl std::fmt::Display) -> ReadError {
    ReadError::Store {
        statement: statement.get_statement().to_owned(),
        error: error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, FamilyConfig};

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
    fn names_resolve_as_increments_land() {
        let f = families(1, ShardPlacement::Partition);
        assert_eq!(
            resolve(&f, "page.views", &[("page_id", "home"), ("env", "x")]).unwrap(),
            CounterRef {
                family: "views".into(),
                column: "views".into(),
                keys: vec!["home".into()],
                epoch: None,
            }
        );
        assert!(matches!(
            resolve(&f, "page.views", &[("env", "x")]),
            Err(ReadError::Usage(m)) if m.contains("--tag page_id:VALUE")
        ));
        assert_eq!(
            resolve(&f, "api.calls", &[("route", "/a"), ("env", "x")])
                .unwrap()
                .keys,
            ["api.calls", "env:x,route:/a"]
        );
    }

    /// `get` of a name a `[[mapping]]` rule takes reads the rule's row, and the generic
    /// tag string drops what the tag rules drop, as the increments did.
    #[test]
    fn mapped_names_and_tag_rules_resolve_as_increments_land() {
        let mut config = Config::default();
        config.families.push(FamilyConfig::seed_views());
        config.mappings.push(crate::config::MappingConfig {
            pattern: "page.*.views".into(),
            family: "views".into(),
            column: "mobile".into(),
            key: [("page_id".to_string(), "$1".to_string())].into(),
            ..Default::default()
        });
        let f = Families::from_config(&config).unwrap();
        let mapped = resolve(&f, "page.home.views", &[("env", "x")]).unwrap();
        assert_eq!(
            (mapped.family.as_str(), mapped.column.as_str(), mapped.keys),
            ("views", "mobile", vec!["home".to_owned()])
        );
        let generic = resolve(
            &f,
            "api.calls",
            &[("dd.internal.entity_id", "pod-a"), ("env", "x")],
        );
        assert_eq!(generic.unwrap().keys, ["api.calls", "env:x"]);
        config.generic.enabled = false;
        let f = Families::from_config(&config).unwrap();
        assert!(matches!(
            resolve(&f, "api.calls", &[]),
            Err(ReadError::Usage(m)) if m.contains("generic family is disabled")
        ));
    }

    #[test]
    fn partition_reads_select_every_column_of_the_partition() {
        let f = families(4, ShardPlacement::Partition);
        let layout = TableLayout::of(f.by_name("views").unwrap(), Granularity::Day).unwrap();
        assert_eq!(
            select_partition(&layout, &["views", "bytes"]),
            "SELECT day, views, bytes FROM metrics.views_by_day WHERE page_id = ? AND month = ? AND shard = ?"
        );
        let values = partition_values(
            &layout,
            &[KeyType::Text],
            &["home".into()],
            Day(20_000),
            Some(3),
        )
        .unwrap();
        assert_eq!(
            values,
            [
                CqlValue::Text("home".into()),
                CqlValue::Text(Day(20_000).month()),
                CqlValue::TinyInt(3)
            ]
        );
    }
}
