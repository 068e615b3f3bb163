//! Between the flusher's writes and the state directory's records: a planned write
//! becomes one [`WriteRecord`] per row (for the outcome logs and the spill file), and a
//! spilled record becomes a pending row again, under today's configuration.

use std::collections::BTreeMap;

use crate::aggregate::{Columns, Row, RowKey, Slot};
use crate::bucket::{self, Day, MINUTES_PER_DAY, Minute};
use crate::family::{Families, FamilyDef};
use crate::series;
use crate::sink::{PartitionWrite, WriteError};
use crate::state::{ErrorInfo, RecordOutcome, WriteRecord};
use crate::vocabulary::Granularity;

/// Who wrote a flush: the fields every record carries.
#[derive(Clone, Debug)]
pub struct FlushIdentity {
    /// Writer id.
    pub writer: String,
    /// Incarnation of the state directory.
    pub incarnation: u64,
    /// Flush sequence within the incarnation.
    pub flush_seq: u64,
}

/// One record per row of `write`.
pub fn to_records(
    write: &PartitionWrite,
    family: &FamilyDef,
    identity: &FlushIdentity,
    outcome: RecordOutcome,
    failure: Option<&WriteError>,
    time: &str,
) -> Vec<WriteRecord> {
    let key: BTreeMap<String, String> = family
        .key_columns
        .iter()
        .cloned()
        .zip(series::fields(&write.series).map(str::to_owned))
        .collect();
    let table = match write.table {
        Granularity::Minute => &family.minute_table,
        Granularity::Day => &family.day_table,
    };
    write
        .rows
        .iter()
        .map(|row| {
            let day = row.day(write.table);
            WriteRecord {
                time: time.to_owned(),
                writer: identity.writer.clone(),
                incarnation: identity.incarnation,
                flush_seq: identity.flush_seq,
                outcome,
                family: family.name.clone(),
                table: table.to_string(),
                granularity: write.table.as_str().to_owned(),
                key: key.clone(),
                shard: write.shard,
                day: bucket::format_date(day.date()),
                minute: (write.table == Granularity::Minute).then(|| row.minute().minute_of_day()),
                month: (write.table == Granularity::Day).then(|| day.month()),
                deltas: family
                    .columns
                    .iter()
                    .zip(row.columns.as_slice())
                    .filter(|(_, d)| **d != 0)
                    .map(|(c, d)| (c.clone(), *d))
                    .collect(),
                error: failure.map(|f| ErrorInfo {
                    kind: f.kind.to_owned(),
                    text: f.text.to_string(),
                }),
            }
        })
        .collect()
}

/// Why a spilled record cannot be replayed under the current configuration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// The family is not configured any more.
    #[error("family `{0}` is not configured")]
    UnknownFamily(String),
    /// A key column is missing from the record, or the family's key changed.
    #[error("the record's key does not match the family's key columns")]
    KeyMismatch,
    /// A column is not a counter column of the family any more.
    #[error("column `{0}` is not a counter column of the family")]
    UnknownColumn(String),
    /// The day, minute or granularity cannot be read.
    #[error("bad time bucket: {0}")]
    BadBucket(String),
}

/// The pending row a spilled record stands for, under today's configuration.
pub fn from_record(
    record: &WriteRecord,
    families: &Families,
) -> Result<(RowKey, Row), ReplayError> {
    let family = families
        .by_name(&record.family)
        .ok_or_else(|| ReplayError::UnknownFamily(record.family.clone()))?;
    if record.key.len() != family.key_columns.len() {
        return Err(ReplayError::KeyMismatch);
    }
    let mut key = Vec::new();
    for column in &family.key_columns {
        let value = record.key.get(column).ok_or(ReplayError::KeyMismatch)?;
        if !series::push_field(&mut key, value) {
            return Err(ReplayError::KeyMismatch);
        }
    }
    let date = bucket::parse_date(&record.day)
        .ok_or_else(|| ReplayError::BadBucket(record.day.clone()))?;
    let day = Day::from_date(date).ok_or_else(|| ReplayError::BadBucket(record.day.clone()))?;
    let slot = match (record.granularity.as_str(), record.minute) {
        ("minute", Some(m)) if (0..MINUTES_PER_DAY as i16).contains(&m) => {
            Slot::MinuteOnly(Minute(day.0 * MINUTES_PER_DAY + m as u32))
        }
        ("day", None) => Slot::DayOnly(day),
        _ => {
            return Err(ReplayError::BadBucket(format!(
                "{} {:?}",
                record.granularity, record.minute
            )));
        }
    };
    let mut columns = Columns::zeroed(family.width());
    for (column, delta) in &record.deltas {
        let index = family
            .columns
            .iter()
            .position(|c| c == column)
            .ok_or_else(|| ReplayError::UnknownColumn(column.clone()))?;
        columns.checked_add_at(index, *delta);
    }
    Ok((
        RowKey::new(family.id, slot, key.into_boxed_slice()),
        Row {
            columns,
            requeued_since: 0,
        },
    ))
}
