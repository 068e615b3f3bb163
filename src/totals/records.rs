//! The records of the totals path: a spilled total ([`TotalRecord`], in
//! `totals.spill.jsonl`), and the rejected log's [`WriteRecord`] for the part of a total
//! the store refused.
//!
//! A spilled total keeps what is needed to write it again exactly as it would have been
//! written: its writer column, its absolute totals and its write time. Replaying it any
//! number of times leaves the same cell. It also keeps the part of it not known applied
//! (`unconfirmed`), which is what the accounting counts as spilled.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::aggregate::Columns;
use crate::bucket::{self, Day, MINUTES_PER_DAY, Minute};
use crate::family::{Families, FamilyDef};
use crate::series;
use crate::sink::WriteError;
use crate::state::{ErrorInfo, RecordOutcome, WriteRecord};
use crate::vocabulary::Granularity;

use super::book::RowId;

/// One spilled running total.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TotalRecord {
    /// When it was spilled, RFC 3339 UTC.
    pub time: String,
    /// The writer column it belongs to (writer id, incarnation, start nonce).
    pub writer: String,
    /// Family name.
    pub family: String,
    /// `keyspace.table`.
    pub table: String,
    /// `minute` or `day`.
    pub granularity: String,
    /// Key column → value.
    pub key: BTreeMap<String, String>,
    /// The day, `YYYY-MM-DD`.
    pub day: String,
    /// Minute of the day (minute table only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minute: Option<i16>,
    /// The month partition, `YYYY-MM` (day table only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub month: Option<String>,
    /// Value column → the writer's absolute total.
    pub totals: BTreeMap<String, i64>,
    /// Value column → the part of the total not known applied when it was spilled.
    pub unconfirmed: BTreeMap<String, i64>,
    /// The write time to write it with, microseconds: later than every write of this row
    /// sent before it was spilled.
    pub timestamp: i64,
    /// The last error, when a write of it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
}

/// Where a row is, in the words of the records.
struct Place {
    table: String,
    key: BTreeMap<String, String>,
    day: String,
    minute: Option<i16>,
    month: Option<String>,
}

fn place(id: &RowId, family: &FamilyDef) -> Place {
    let key = family
        .key_columns
        .iter()
        .cloned()
        .zip(series::fields(&id.series).map(str::to_owned))
        .collect();
    let (table, day) = match id.table {
        Granularity::Minute => (&family.minute_table, Minute(id.bucket).day()),
        Granularity::Day => (&family.day_table, Day(id.bucket)),
    };
    Place {
        table: table.to_string(),
        key,
        day: bucket::format_date(day.date()),
        minute: (id.table == Granularity::Minute).then(|| Minute(id.bucket).minute_of_day()),
        month: (id.table == Granularity::Day).then(|| day.month()),
    }
}

fn by_column(family: &FamilyDef, columns: &Columns, skip_zero: bool) -> BTreeMap<String, i64> {
    family
        .columns
        .iter()
        .zip(columns.as_slice())
        .filter(|(_, v)| !skip_zero || **v != 0)
        .map(|(c, v)| (c.clone(), *v))
        .collect()
}

/// Everything a spilled row needs.
pub(crate) struct SpilledRow<'a> {
    /// The row.
    pub(crate) id: &'a RowId,
    /// Its writer column.
    pub(crate) writer: &'a str,
    /// Its newest total.
    pub(crate) total: &'a Columns,
    /// The part not known applied.
    pub(crate) unconfirmed: &'a Columns,
    /// The write time to replay it with.
    pub(crate) timestamp: i64,
    /// Its last error.
    pub(crate) error: Option<&'a WriteError>,
}

/// The spill record of a row.
pub(crate) fn total_record(row: &SpilledRow<'_>, family: &FamilyDef, time: &str) -> TotalRecord {
    let place = place(row.id, family);
    TotalRecord {
        time: time.to_owned(),
        writer: row.writer.to_owned(),
        family: family.name.clone(),
        table: place.table,
        granularity: row.id.table.as_str().to_owned(),
        key: place.key,
        day: place.day,
        minute: place.minute,
        month: place.month,
        totals: by_column(family, row.total, false),
        unconfirmed: by_column(family, row.unconfirmed, false),
        timestamp: row.timestamp,
        error: row.error.map(ErrorInfo::of),
    }
}

/// Who records a rejection: the fields every record of a flush carries.
pub(crate) struct Recorder<'a> {
    /// Writer id.
    pub(crate) writer: &'a str,
    /// Incarnation.
    pub(crate) incarnation: u64,
    /// Flush sequence.
    pub(crate) flush_seq: u64,
    /// The request the record belongs to (`writer/incarnation/flush_seq/request`, see
    /// [`crate::state::FlushId::request_id`]); empty for a spilled total refused as it is
    /// loaded, which belongs to no request of this run.
    pub(crate) request_id: String,
    /// The row's position within the request (or, loading a spill, within its file).
    pub(crate) row: u16,
    /// RFC 3339 now.
    pub(crate) time: &'a str,
}

/// The rejected-log record of the part of a row's total the store refused.
pub(crate) fn rejected_record(
    id: &RowId,
    family: &FamilyDef,
    refused: &Columns,
    error: &WriteError,
    by: &Recorder<'_>,
) -> WriteRecord {
    let place = place(id, family);
    WriteRecord {
        key_hex: None,
        time: by.time.to_owned(),
        writer: by.writer.to_owned(),
        incarnation: by.incarnation,
        flush_seq: by.flush_seq,
        request_id: by.request_id.clone(),
        row: by.row,
        outcome: RecordOutcome::Rejected,
        family: family.name.clone(),
        table: place.table,
        granularity: id.table.as_str().to_owned(),
        key: place.key,
        shard: None,
        epoch: None,
        day: place.day,
        minute: place.minute,
        month: place.month,
        deltas: by_column(family, refused, true),
        error: Some(ErrorInfo::of(error)),
    }
}

/// A spilled total read back, under today's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Replayed {
    /// The row.
    pub(crate) id: RowId,
    /// Its absolute totals, in the family's column order.
    pub(crate) total: Columns,
    /// The part not known applied.
    pub(crate) unconfirmed: Columns,
}

/// Why a spilled total cannot be written under today's configuration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unmappable {
    /// The family is gone, or counts with counters now.
    #[error("family `{0}` is not a writer_totals family any more")]
    Family(String),
    /// The key columns changed.
    #[error("the record's key does not match the family's key columns")]
    Key,
    /// A value column is gone or new (a total must cover every column).
    #[error("the record's columns do not match the family's columns")]
    Columns,
    /// The day, minute or granularity cannot be read.
    #[error("bad time bucket: {0}")]
    Bucket(String),
}

/// The row a spilled total stands for.
pub(crate) fn from_record(
    record: &TotalRecord,
    families: &Families,
) -> Result<Replayed, Unmappable> {
    let family = families
        .by_name(&record.family)
        .filter(|f| f.mode == crate::config::CountingMode::WriterTotals)
        .ok_or_else(|| Unmappable::Family(record.family.clone()))?;
    if record.key.len() != family.key_columns.len() {
        return Err(Unmappable::Key);
    }
    let mut series = Vec::new();
    for column in &family.key_columns {
        let value = record.key.get(column).ok_or(Unmappable::Key)?;
        if !series::push_field(&mut series, value) {
            return Err(Unmappable::Key);
        }
    }
    let bad = || Unmappable::Bucket(record.day.clone());
    let day = bucket::parse_date(&record.day)
        .and_then(Day::from_date)
        .ok_or_else(bad)?;
    let (table, bucket) = match (record.granularity.as_str(), record.minute) {
        ("minute", Some(m)) if (0..MINUTES_PER_DAY as i16).contains(&m) => {
            (Granularity::Minute, day.0 * MINUTES_PER_DAY + m as u32)
        }
        ("day", None) => (Granularity::Day, day.0),
        _ => return Err(bad()),
    };
    let columns = |values: &BTreeMap<String, i64>| -> Result<Columns, Unmappable> {
        if values.len() != family.columns.len() {
            return Err(Unmappable::Columns);
        }
        let mut out = Columns::zeroed(family.width());
        for (i, column) in family.columns.iter().enumerate() {
            out.checked_add_at(i, *values.get(column).ok_or(Unmappable::Columns)?);
        }
        Ok(out)
    };
    Ok(Replayed {
        id: RowId {
            family: family.id,
            table,
            series: series.into_boxed_slice(),
            bucket,
        },
        total: columns(&record.totals)?,
        unconfirmed: columns(&record.unconfirmed)?,
    })
}

/// The rejected-log record of a spilled total that cannot be replayed: its unconfirmed
/// part, as deltas.
pub(crate) fn unmappable_record(
    record: &TotalRecord,
    why: &Unmappable,
    by: &Recorder<'_>,
) -> WriteRecord {
    as_write_record(
        record,
        by,
        RecordOutcome::Rejected,
        Some(ErrorInfo {
            kind: "replay_unmappable".into(),
            text: why.to_string(),
        }),
    )
}

/// A spilled total as a record of the outcome logs' form: its row, its unconfirmed part as
/// deltas (zeros left out), under `by`'s identity.
pub(crate) fn as_write_record(
    record: &TotalRecord,
    by: &Recorder<'_>,
    outcome: RecordOutcome,
    error: Option<ErrorInfo>,
) -> WriteRecord {
    WriteRecord {
        key_hex: None,
        time: by.time.to_owned(),
        writer: by.writer.to_owned(),
        incarnation: by.incarnation,
        flush_seq: by.flush_seq,
        request_id: by.request_id.clone(),
        row: by.row,
        outcome,
        family: record.family.clone(),
        table: record.table.clone(),
        granularity: record.granularity.clone(),
        key: record.key.clone(),
        shard: None,
        epoch: None,
        day: record.day.clone(),
        minute: record.minute,
        month: record.month.clone(),
        deltas: record
            .unconfirmed
            .iter()
            .filter(|(_, v)| **v != 0)
            .map(|(c, v)| (c.clone(), *v))
            .collect(),
        error,
    }
}

/// The granularity a record is owed to (minute unless it says day).
pub(crate) fn granularity_of(record: &TotalRecord) -> Granularity {
    if record.granularity == "day" {
        Granularity::Day
    } else {
        Granularity::Minute
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, CountingMode, FamilyConfig};
    use crate::vocabulary::FamilyId;

    fn families(mode: CountingMode) -> Families {
        let mut config = Config::default();
        config.families.push(FamilyConfig {
            mode,
            ..FamilyConfig::seed_views()
        });
        Families::from_config(&config).unwrap()
    }

    #[test]
    fn a_spilled_total_reads_back_as_the_same_row() {
        let families = families(CountingMode::WriterTotals);
        let family = families.by_name("views").unwrap();
        for (table, bucket) in [
            (Granularity::Minute, 20_000 * 1440 + 725),
            (Granularity::Day, 20_000),
        ] {
            let id = RowId {
                family: FamilyId(1),
                table,
                series: series::encode(["home"]).into_boxed_slice(),
                bucket,
            };
            let total = Columns::Many(Box::new(vec![7, 0]));
            let unconfirmed = Columns::Many(Box::new(vec![2, 0]));
            let record = total_record(
                &SpilledRow {
                    id: &id,
                    writer: "w/1/00",
                    total: &total,
                    unconfirmed: &unconfirmed,
                    timestamp: 42,
                    error: None,
                },
                family,
                "t",
            );
            let text = serde_json::to_string(&record).unwrap();
            let back: TotalRecord = serde_json::from_str(&text).unwrap();
            assert_eq!(
                from_record(&back, &families).unwrap(),
                Replayed {
                    id,
                    total,
                    unconfirmed
                }
            );
        }
    }

    #[test]
    fn a_family_that_counts_with_counters_now_cannot_replay_a_total() {
        let record = TotalRecord {
            time: "t".into(),
            writer: "w".into(),
            family: "views".into(),
            table: "metrics.views_by_day".into(),
            granularity: "day".into(),
            key: [("page_id".to_string(), "a".to_string())].into(),
            day: "2026-11-30".into(),
            minute: None,
            month: Some("2026-11".into()),
            totals: [("views".to_string(), 1), ("bytes".to_string(), 2)].into(),
            unconfirmed: [("views".to_string(), 1), ("bytes".to_string(), 2)].into(),
            timestamp: 1,
            error: None,
        };
        assert!(from_record(&record, &families(CountingMode::WriterTotals)).is_ok());
        assert!(matches!(
            from_record(&record, &families(CountingMode::Counter)),
            Err(Unmappable::Family(_))
        ));
        let mut one_column = record;
        one_column.totals.remove("bytes");
        assert_eq!(
            from_record(&one_column, &families(CountingMode::WriterTotals)),
            Err(Unmappable::Columns)
        );
    }
}
