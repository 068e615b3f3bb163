//! The records of the totals path, all [`WriteRecord`]s: a spilled total (with its
//! [`TotalOf`], in a totals spill segment), and the rejected log's record of the part of
//! a total the store refused.
//!
//! A spilled total keeps what is needed to write it again exactly as it would have been
//! written: its writer column, its absolute totals and its write time. Replaying it any
//! number of times leaves the same cell. Its deltas are the part of it not known applied
//! (`unconfirmed`), which is what the accounting counts as spilled.

use std::collections::BTreeMap;

use crate::aggregate::Columns;
use crate::bucket::{self, Day, MINUTES_PER_DAY, Minute};
use crate::family::{Families, FamilyDef};
use crate::series;
use crate::sink::WriteError;
use crate::state::{ErrorInfo, RecordOutcome, TotalOf, WriteRecord};
use crate::vocabulary::Granularity;

use super::book::RowId;

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
    let day = bucket::day_of(id.table, id.bucket);
    Place {
        table: family.table_text(id.table),
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

/// The spill record of a row, under `by`'s identity (the request it was written in).
pub(crate) fn total_record(
    row: &SpilledRow<'_>,
    family: &FamilyDef,
    by: &Recorder<'_>,
) -> WriteRecord {
    let place = place(row.id, family);
    WriteRecord {
        time: by.time.to_owned(),
        writer: by.writer.to_owned(),
        incarnation: by.incarnation,
        flush_seq: by.flush_seq,
        request_id: by.request_id.clone(),
        row: by.row,
        outcome: RecordOutcome::Spilled,
        family: family.name.clone(),
        table: place.table,
        granularity: row.id.table.as_str().to_owned(),
        key: place.key,
        key_hex: None,
        shard: None,
        epoch: None,
        day: place.day,
        minute: place.minute,
        month: place.month,
        hour: None,
        deltas: by_column(family, row.unconfirmed, true),
        error: row.error.map(ErrorInfo::of),
        total: Some(TotalOf {
            column: row.writer.to_owned(),
            totals: by_column(family, row.total, false),
            timestamp: row.timestamp,
        }),
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
    /// [`crate::state::FlushId::request_id`]).
    pub(crate) request_id: String,
    /// The row's position within the request.
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
        total: None,
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
        hour: None,
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

/// The row a spilled total stands for: a record with its [`TotalOf`] (the caller reads
/// only those), whose totals cover the family's columns and whose deltas (the part not
/// known applied, zeros left out) name only them.
pub(crate) fn from_record(
    record: &WriteRecord,
    families: &Families,
) -> Result<Replayed, Unmappable> {
    let family = families
        .by_name(&record.family)
        .filter(|f| f.mode == crate::config::CountingMode::WriterTotals)
        .ok_or_else(|| Unmappable::Family(record.family.clone()))?;
    let total = record.total.as_ref().ok_or(Unmappable::Columns)?;
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
    if total.totals.len() != family.columns.len()
        || record.deltas.keys().any(|c| !family.columns.contains(c))
    {
        return Err(Unmappable::Columns);
    }
    let mut totals = Columns::zeroed(family.width());
    let mut unconfirmed = Columns::zeroed(family.width());
    for (i, column) in family.columns.iter().enumerate() {
        totals.checked_add_at(i, *total.totals.get(column).ok_or(Unmappable::Columns)?);
        unconfirmed.checked_add_at(i, record.deltas.get(column).copied().unwrap_or(0));
    }
    Ok(Replayed {
        id: RowId {
            family: family.id,
            table,
            series: series.into_boxed_slice(),
            bucket,
        },
        total: totals,
        unconfirmed,
    })
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

    fn by() -> Recorder<'static> {
        Recorder {
            writer: "w",
            incarnation: 1,
            flush_seq: 3,
            request_id: "w/1/3/0".into(),
            row: 0,
            time: "t",
        }
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
                &by(),
            );
            let text = serde_json::to_string(&record).unwrap();
            let back: WriteRecord = serde_json::from_str(&text).unwrap();
            assert_eq!(back.total.as_ref().unwrap().timestamp, 42);
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
        let record = crate::state::totals_files::LegacyTotalRecord {
            time: "t".into(),
            writer: "w/1/00".into(),
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
        }
        .into_record(0);
        assert!(from_record(&record, &families(CountingMode::WriterTotals)).is_ok());
        assert!(matches!(
            from_record(&record, &families(CountingMode::Counter)),
            Err(Unmappable::Family(_))
        ));
        let mut one_column = record.clone();
        one_column.total.as_mut().unwrap().totals.remove("bytes");
        assert_eq!(
            from_record(&one_column, &families(CountingMode::WriterTotals)),
            Err(Unmappable::Columns)
        );
        let mut gone_column = record;
        gone_column.deltas.insert("clicks".into(), 1);
        assert_eq!(
            from_record(&gone_column, &families(CountingMode::WriterTotals)),
            Err(Unmappable::Columns)
        );
    }
}
