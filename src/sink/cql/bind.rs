//! Bind values of one row of an UPDATE, in the statement's marker order: one counter
//! increment per counter column (unset when the row has no delta for it), then the key
//! columns in layout order.

use scylla::value::{Counter, CqlTimeuuid, CqlValue, MaybeUnset};

use crate::bucket::{Day, Minute};
use crate::layout::{Role, TableLayout};
use crate::series;
use crate::sink::{PartitionWrite, RowDelta, WriteError};
use crate::vocabulary::Granularity;

use super::schema::KeyType;
use super::time;

/// One row's values.
pub type RowValues = Vec<MaybeUnset<CqlValue>>;

/// Converts a tag value to the key column's type.
pub fn key_value(text: &str, typ: KeyType) -> Result<CqlValue, String> {
    let bad = |what: &str| format!("key value `{text}` is not a valid {what}");
    Ok(match typ {
        KeyType::Text => CqlValue::Text(text.to_owned()),
        KeyType::Ascii if text.is_ascii() => CqlValue::Ascii(text.to_owned()),
        KeyType::Ascii => return Err(bad("ascii")),
        KeyType::BigInt => CqlValue::BigInt(text.parse().map_err(|_| bad("bigint"))?),
        KeyType::Int => CqlValue::Int(text.parse().map_err(|_| bad("int"))?),
        KeyType::SmallInt => CqlValue::SmallInt(text.parse().map_err(|_| bad("smallint"))?),
        KeyType::TinyInt => CqlValue::TinyInt(text.parse().map_err(|_| bad("tinyint"))?),
        KeyType::Uuid => CqlValue::Uuid(text.parse().map_err(|_| bad("uuid"))?),
        KeyType::Timeuuid => CqlValue::Timeuuid(CqlTimeuuid::from(
            uuid::Uuid::parse_str(text).map_err(|_| bad("timeuuid"))?,
        )),
    })
}

/// The key tag values of an encoded series, converted to their columns' types.
pub fn typed_keys(series: &[u8], key_types: &[KeyType]) -> Result<Vec<CqlValue>, WriteError> {
    series::fields(series)
        .enumerate()
        .map(|(i, text)| {
            let typ = key_types.get(i).copied().unwrap_or(KeyType::Text);
            key_value(text, typ).map_err(|e| WriteError::new("bad_key_value", e))
        })
        .collect()
}

/// Where one row sits: what fills the key columns besides the key tags.
#[derive(Clone, Copy, Debug)]
pub struct RowPlace<'a> {
    /// Minute or day table.
    pub table: Granularity,
    /// The row's minute (minute table) or day (day table), counted from the epoch.
    pub bucket: u32,
    /// The shard, for sharded families.
    pub shard: Option<u8>,
    /// The writer, for `writer_totals` tables (a counter table has no writer column).
    pub writer: Option<&'a str>,
    /// The epoch, for families with an epoch column.
    pub epoch: Option<i32>,
}

/// The value of the key column that `role` fills, for the row at `place`.
pub fn key_column(role: Role, keys: &[CqlValue], place: RowPlace<'_>) -> CqlValue {
    let day: Day = crate::bucket::day_of(place.table, place.bucket);
    match role {
        Role::Key(i) => keys
            .get(i)
            .cloned()
            .unwrap_or(CqlValue::Text(String::new())),
        Role::Day(typ) => time::day(typ, day),
        Role::Month(typ) => time::month(typ, day),
        Role::Minute(typ) => time::minute(typ, Minute(place.bucket)),
        Role::Hour(typ) => time::hour(typ, place.bucket),
        Role::Shard => CqlValue::TinyInt(place.shard.unwrap_or(0) as i8),
        Role::Writer => CqlValue::Text(place.writer.unwrap_or_default().to_owned()),
        Role::Epoch => CqlValue::Int(place.epoch.unwrap_or(0)),
    }
}

/// The values of every row of `write`.
pub fn rows(
    write: &PartitionWrite,
    layout: &TableLayout,
    key_types: &[KeyType],
) -> Result<Vec<RowValues>, WriteError> {
    let key_values = typed_keys(&write.series, key_types)?;
    Ok(write
        .rows
        .iter()
        .map(|row| row_values(write, row, layout, &key_values))
        .collect())
}

fn row_values(
    write: &PartitionWrite,
    row: &RowDelta,
    layout: &TableLayout,
    keys: &[CqlValue],
) -> RowValues {
    let mut values: RowValues = row
        .columns
        .as_slice()
        .iter()
        .map(|&delta| {
            if delta == 0 {
                MaybeUnset::Unset
            } else {
                MaybeUnset::Set(CqlValue::Counter(Counter(delta)))
            }
        })
        .collect();
    let place = RowPlace {
        table: write.table,
        bucket: row.bucket,
        shard: write.shard,
        writer: None,
        epoch: write.epoch,
    };
    for (_, role) in layout.key_columns() {
        values.push(MaybeUnset::Set(key_column(*role, keys, place)));
    }
    values
}
