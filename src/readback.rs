//! Reading counts back, for `countersink get` and for Rust services (in-process).
//!
//! A count is spread over rows: a sharded counter family writes one row per shard, and a
//! `writer_totals` family one row per writer (writer id, incarnation) and bucket. A read
//! asks for the whole clustering range of one partition (the day's minutes, or the
//! month's days) per shard and adds every row of a bucket, so its cost is the rows it
//! reads: one per bucket for a counter family (times the shards in the partition key),
//! writers x incarnations per bucket for a `writer_totals` family. [`Reading`] says how
//! many rows and requests a read took.

use std::collections::BTreeMap;

use scylla::client::session::Session;
use scylla::value::CqlValue;

use crate::bucket::Day;
use crate::config::ShardPlacement;
use crate::cql_text::{self, STATEMENTS};
use crate::family::{Families, FamilyDef, TagSet};
use crate::layout::TableLayout;
use crate::sink::cql::bind::{self, RowPlace};
use crate::sink::cql::schema::{self, KeyType, SchemaError};
use crate::vocabulary::Granularity;

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The name belongs to a configured family and a key tag is missing.
    #[error("`{name}` belongs to family `{family}`: give the tag {key}:VALUE")]
    MissingKey {
        /// The metric name.
        name: String,
        /// Its family.
        family: String,
        /// The missing key tag.
        key: String,
    },
    /// The table does not match the configuration.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// A key value does not fit its column's type.
    #[error("{0}")]
    BadKey(String),
    /// The store failed the query.
    #[error("{statement}: {error}")]
    Query {
        /// The statement.
        statement: String,
        /// What went wrong.
        error: String,
    },
}

/// What a metric name and its tags point at: a family, one of its value columns, and the
/// key values of its rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located<'a> {
    /// The family.
    pub family: &'a FamilyDef,
    /// The value column.
    pub column: String,
    /// Key values, in key column order.
    pub keys: Vec<String>,
}

/// Finds where `name` with `tags` is counted, as the engine would place an increment (a
/// tag without value is `(key, "")`).
pub fn locate<'a>(
    families: &'a Families,
    name: &str,
    tags: &[(&str, &str)],
) -> Result<Located<'a>, ReadError> {
    if let Some((id, column)) = families.column_of(name) {
        let family = families.get(id);
        let mut keys = Vec::new();
        for key in &family.key_columns {
            let value = tags.value_of(key).ok_or_else(|| ReadError::MissingKey {
                name: name.to_owned(),
                family: family.name.clone(),
                key: key.clone(),
            })?;
            keys.push(value.to_owned());
        }
        return Ok(Located {
            family,
            column: family.columns[column].clone(),
            keys,
        });
    }
    let generic = families.get(crate::family::GENERIC);
    let mut canonical = Vec::new();
    tags.write_canonical(&mut canonical);
    Ok(Located {
        family: generic,
        column: "value".into(),
        keys: vec![
            name.to_owned(),
            String::from_utf8_lossy(&canonical).into_owned(),
        ],
    })
}

/// The sums a read found, and what it cost.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reading {
    /// Sum per clustering bucket: minute of the day (minute table), or days since the
    /// epoch (day table).
    pub buckets: BTreeMap<i64, i128>,
    /// Rows the store returned (each shard's and each writer's row of a bucket is one).
    pub rows_read: usize,
    /// Queries sent (one per shard in the partition key).
    pub requests: usize,
}

impl Reading {
    /// The sum of one bucket (0 when no row holds it).
    pub fn get(&self, bucket: i64) -> i128 {
        self.buckets.get(&bucket).copied().unwrap_or(0)
    }
}

/// Reads the partition of `located` that holds `day`: in the minute table, every minute
/// of that day; in the day table, every day of its month. Sums shards and writers.
pub async fn read(
    session: &Session,
    located: &Located<'_>,
    table: Granularity,
    day: Day,
) -> Result<Reading, ReadError> {
    let layout = TableLayout::of(located.family, table);
    let key_types = schema::check(session, &layout)?;
    let shards: Vec<Option<u8>> = match &located.family.sharding {
        Some(s) if s.placement == ShardPlacement::Partition => (0..s.shards).map(Some).collect(),
        _ => vec![None],
    };
    let (statement, clustering) = match table {
        Granularity::Minute => ("select_minutes", "minute"),
        Granularity::Day => ("select_days", "day"),
    };
    let conditions: Vec<String> = layout
        .partition_key
        .iter()
        .map(|(c, _)| format!("{c} = ?"))
        .collect();
    let text = cql_text::statement(
        STATEMENTS,
        statement,
        &[
            ("clustering", clustering),
            ("column", &located.column),
            ("table", &layout.table.to_string()),
            ("conditions", &conditions.join(" AND ")),
        ],
    );
    let keys: Vec<CqlValue> = located
        .keys
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let typ = key_types.get(i).copied().unwrap_or(KeyType::Text);
            bind::key_value(text, typ).map_err(ReadError::BadKey)
        })
        .collect::<Result<_, _>>()?;
    let bucket = match table {
        Granularity::Minute => day.0 * crate::bucket::MINUTES_PER_DAY,
        Granularity::Day => day.0,
    };
    let failed = |error: String| ReadError::Query {
        statement: text.clone(),
        error,
    };
    let mut reading = Reading::default();
    for shard in shards {
        let place = RowPlace {
            table,
            bucket,
            shard,
            writer: None,
        };
        let values: Vec<CqlValue> = layout
            .partition_key
            .iter()
            .map(|(_, role)| bind::key_column(*role, &keys, place))
            .collect();
        let result = session
            .query_unpaged(text.clone(), values)
            .await
            .map_err(|e| failed(e.to_string()))?;
        reading.requests += 1;
        let rows = result
            .into_rows_result()
            .map_err(|e| failed(e.to_string()))?;
        for row in rows
            .rows::<(CqlValue, Option<CqlValue>)>()
            .map_err(|e| failed(e.to_string()))?
        {
            let (bucket, value) = row.map_err(|e| failed(e.to_string()))?;
            let bucket = match bucket {
                CqlValue::SmallInt(minute) => i64::from(minute),
                CqlValue::Date(date) => i64::from(date.0) - (1_i64 << 31),
                other => return Err(failed(format!("unexpected bucket value {other:?}"))),
            };
            let value = match value {
                Some(CqlValue::Counter(c)) => i128::from(c.0),
                Some(CqlValue::BigInt(v)) => i128::from(v),
                None => 0,
                Some(other) => return Err(failed(format!("unexpected value {other:?}"))),
            };
            *reading.buckets.entry(bucket).or_insert(0) += value;
            reading.rows_read += 1;
        }
    }
    Ok(reading)
}

/// Reads counts from a session, for families configured as in the writers.
pub struct Reader<'a> {
    session: &'a Session,
    families: &'a Families,
}

impl<'a> Reader<'a> {
    /// A reader over `session` (any session: reads need no special profile).
    pub fn new(session: &'a Session, families: &'a Families) -> Reader<'a> {
        Reader { session, families }
    }

    /// The total of `name` with `tags` on `day`, from the day table, and the read's cost.
    pub async fn day_total(
        &self,
        name: &str,
        tags: &[(&str, &str)],
        day: Day,
    ) -> Result<(i128, Reading), ReadError> {
        let located = locate(self.families, name, tags)?;
        let reading = read(self.session, &located, Granularity::Day, day).await?;
        Ok((reading.get(i64::from(day.0)), reading))
    }

    /// The minutes of `day` that hold counts of `name` with `tags` (minute of the day →
    /// sum), from the minute table.
    pub async fn minutes(
        &self,
        name: &str,
        tags: &[(&str, &str)],
        day: Day,
    ) -> Result<Reading, ReadError> {
        let located = locate(self.families, name, tags)?;
        read(self.session, &located, Granularity::Minute, day).await
    }
}

/// Key columns a partition read binds never include the writer: it is a clustering column.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, CountingMode, FamilyConfig};
    use crate::layout::Role;

    #[test]
    fn the_writer_is_never_in_a_partition_key() {
        let mut config = Config::default();
        config.generic.mode = CountingMode::WriterTotals;
        config.families.push(FamilyConfig {
            mode: CountingMode::WriterTotals,
            ..FamilyConfig::seed_views()
        });
        let families = Families::from_config(&config).unwrap();
        for family in families.iter() {
            for table in Granularity::ALL {
                let layout = TableLayout::of(family, table);
                assert!(layout.partition_key.iter().all(|(_, r)| *r != Role::Writer));
                assert_eq!(layout.clustering_key.last().unwrap().1, Role::Writer);
            }
        }
        let located = locate(&families, "page.views", &[("page_id", "home")]).unwrap();
        assert_eq!(
            (located.family.name.as_str(), located.keys.as_slice()),
            ("views", &["home".to_string()][..])
        );
        assert!(matches!(
            locate(&families, "page.views", &[]),
            Err(ReadError::MissingKey { .. })
        ));
        let generic = locate(&families, "req", &[("b", "2"), ("a", "")]).unwrap();
        assert_eq!(generic.keys, ["req", "a,b:2"]);
    }
}
