//! `countersink get`: read a counter back, summing shards.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;
use scylla::client::session::Session;
use scylla::value::{Counter, CqlValue};

use crate::bucket::{self, Day};
use crate::config::{Config, ShardPlacement};
use crate::cql_text::{self, STATEMENTS};
use crate::family::{Families, FamilyDef, TagSet};
use crate::layout::{Role, TableLayout};
use crate::sink::cql::{bind, schema, session};
use crate::vocabulary::Granularity;

use super::Failure;

/// The flags of `get`.
#[derive(Debug, Args)]
pub(super) struct GetArgs {
    /// Config file, to know configured families (and their shards).
    #[arg(long, env = "COUNTERSINK_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// A contact point; repeat for several [default: from the config, else 127.0.0.1:9042].
    #[arg(
        long = "contact-point",
        env = "COUNTERSINK_CONTACT_POINTS",
        value_name = "HOST:PORT",
        value_delimiter = ','
    )]
    contact_points: Vec<String>,
    /// Keyspace of the generic tables.
    #[arg(long, env = "COUNTERSINK_KEYSPACE", value_name = "KS")]
    keyspace: Option<String>,
    /// The metric name.
    #[arg(value_name = "NAME")]
    name: String,
    /// A tag, `key:value` (or `key` for a tag without value); repeat for several.
    #[arg(long = "tag", value_name = "K:V")]
    tags: Vec<String>,
    /// The UTC day, `YYYY-MM-DD` [default: today].
    #[arg(long, value_name = "YYYY-MM-DD")]
    day: Option<String>,
    /// Print the minute series of the day instead of its total.
    #[arg(long)]
    minutes: bool,
}

/// Prints the day total, or one `YYYY-MM-DDTHH:MMZ value` line per minute with data.
pub(super) async fn run(args: GetArgs) -> Result<(), Failure> {
    let mut config = match &args.config {
        Some(path) => Config::from_file(path).map_err(Failure::usage)?,
        None => Config::default(),
    };
    if !args.contact_points.is_empty() {
        config.store.contact_points = args.contact_points.clone();
    }
    if let Some(keyspace) = &args.keyspace {
        config.store.keyspace = keyspace.clone();
    }
    let families = Families::from_config(&config)?;
    let day = match &args.day {
        Some(text) => bucket::parse_date(text)
            .and_then(Day::from_date)
            .ok_or_else(|| {
                Failure::usage(format!("--day `{text}` is not a date like 2026-11-30"))
            })?,
        None => Day((bucket::unix_secs(std::time::SystemTime::now()) / 86_400) as u32),
    };
    let tags: Vec<(&str, &str)> = args
        .tags
        .iter()
        .map(|t| t.split_once(':').unwrap_or((t.as_str(), "")))
        .collect();
    let (family, column, keys) = resolve(&families, &args.name, &tags)?;
    let session = session::connect(&config.store)
        .await
        .map_err(Failure::other)?;
    let kind = if args.minutes {
        Granularity::Minute
    } else {
        Granularity::Day
    };
    let layout = TableLayout::of(family, kind);
    let per_bucket = read(&session, &layout, family, &column, &keys, day).await?;
    if args.minutes {
        for (minute, value) in per_bucket {
            println!(
                "{}T{:02}:{:02}Z {value}",
                bucket::format_date(day.date()),
                minute / 60,
                minute % 60
            );
        }
    } else {
        println!(
            "{}",
            per_bucket.get(&i64::from(day.0)).copied().unwrap_or(0)
        );
    }
    Ok(())
}

/// The family, counter column and key values of a metric name and its tags.
fn resolve<'a>(
    families: &'a Families,
    name: &str,
    tags: &[(&str, &str)],
) -> Result<(&'a FamilyDef, String, Vec<String>), Failure> {
    if let Some((id, column)) = families.column_of(name) {
        let family = families.get(id);
        let mut keys = Vec::new();
        for key in &family.key_columns {
            let value = tags.value_of(key).ok_or_else(|| {
                Failure::usage(format!(
                    "`{name}` belongs to family `{}`: give --tag {key}:VALUE",
                    family.name
                ))
            })?;
            keys.push(value.to_owned());
        }
        return Ok((family, family.columns[column].clone(), keys));
    }
    let generic = families.get(crate::family::GENERIC);
    let mut canonical = Vec::new();
    tags.write_canonical(&mut canonical);
    let tags = String::from_utf8(canonical).map_err(|e| Failure::usage(e.to_string()))?;
    Ok((generic, "value".into(), vec![name.to_owned(), tags]))
}

/// Sums the counter per clustering bucket (minute of day, or epoch day) over every shard.
async fn read(
    session: &Session,
    layout: &TableLayout,
    family: &FamilyDef,
    column: &str,
    keys: &[String],
    day: Day,
) -> Result<BTreeMap<i64, i64>, Failure> {
    let key_types = schema::check(session, layout).map_err(Failure::usage)?;
    let shards: Vec<Option<u8>> = match &family.sharding {
        Some(s) if s.placement == ShardPlacement::Partition => (0..s.shards).map(Some).collect(),
        _ => vec![None],
    };
    let (statement, clustering) = match layout.kind {
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
            ("column", column),
            ("table", &layout.table.to_string()),
            ("conditions", &conditions.join(" AND ")),
        ],
    );
    let mut sums = BTreeMap::new();
    for shard in shards {
        let mut values = Vec::new();
        for (_, role) in &layout.partition_key {
            values.push(match role {
                Role::Key(i) => {
                    let typ = key_types.get(*i).copied().unwrap_or(schema::KeyType::Text);
                    bind::key_value(&keys[*i], typ).map_err(Failure::usage)?
                }
                Role::Day => CqlValue::Date(scylla::value::CqlDate(day.cql_date())),
                Role::Month => CqlValue::Text(day.month()),
                Role::Shard => CqlValue::TinyInt(shard.unwrap_or(0) as i8),
                Role::Minute => CqlValue::SmallInt(0),
            });
        }
        let result = session
            .query_unpaged(text.clone(), values)
            .await
            .map_err(|e| Failure::other(format!("{text}: {e}")))?;
        let rows = result
            .into_rows_result()
            .map_err(|e| Failure::other(e.to_string()))?;
        for row in rows
            .rows::<(CqlValue, Option<Counter>)>()
            .map_err(|e| Failure::other(e.to_string()))?
        {
            let (bucket, value) = row.map_err(|e| Failure::other(e.to_string()))?;
            let bucket = match bucket {
                CqlValue::SmallInt(minute) => i64::from(minute),
                CqlValue::Date(date) => i64::from(date.0) - (1_i64 << 31),
                other => return Err(Failure::other(format!("unexpected bucket value {other:?}"))),
            };
            *sums.entry(bucket).or_insert(0_i64) += value.map_or(0, |c| c.0);
        }
    }
    Ok(sums)
}
