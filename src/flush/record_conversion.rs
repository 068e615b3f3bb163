//! Between the flusher's writes and the state directory's records: a planned write
//! becomes one [`WriteRecord`] per row (for the outcome logs and the spill), and a
//! spilled record becomes a pending row again, under today's configuration.

use crate::aggregate::{Columns, Row, RowKey, Slot};
use crate::bucket::{self, Day, MINUTES_PER_DAY, Minute};
use crate::family::{Families, FamilyDef};
use crate::series;
use crate::sink::{PartitionWrite, WriteError};
use crate::state::{ErrorInfo, FamilyEntry, RecordOutcome, RecordSource, WriteRecord, records_of};

/// The journal's description of a family (what its records and intents need).
pub fn family_entry(family: &FamilyDef) -> FamilyEntry {
    FamilyEntry {
        id: family.id.0,
        name: family.name.clone(),
        minute_table: family.minute_table.to_string(),
        day_table: family.day_table.to_string(),
        key_columns: family.key_columns.clone(),
        columns: family.columns.clone(),
    }
}

/// The error of a failed write, as records carry it.
pub fn error_info(error: &WriteError) -> ErrorInfo {
    ErrorInfo {
        kind: error.kind.to_owned(),
        text: error.text.to_string(),
    }
}

/// One record per row of `write`.
pub fn to_records(
    write: &PartitionWrite,
    family: &FamilyEntry,
    source: RecordSource<'_>,
    outcome: RecordOutcome,
    failure: Option<&WriteError>,
) -> Vec<WriteRecord> {
    records_of(
        family,
        write.table,
        &write.series,
        write.shard,
        write.rows.iter().map(|r| (r.bucket, r.columns.as_slice())),
        source,
        outcome,
        failure.map(error_info).as_ref(),
    )
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
