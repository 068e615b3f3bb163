//! Between the flusher's writes and the state directory's records: a planned write
//! becomes one [`WriteRecord`] per row (for the outcome logs and the spill), and a
//! spilled record becomes a pending row again, under today's configuration.

use crate::aggregate::{Columns, Row, RowKey, Slot};
use crate::bucket::{self, Day, MINUTES_PER_DAY, Minute};
use crate::family::Families;
use crate::series;
use crate::sink::{PartitionWrite, WriteError};
use crate::state::{ErrorInfo, FamilyEntry, RecordOutcome, RecordSource, WriteRecord, records_of};
use crate::vocabulary::Granularity;

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
        (write.shard, write.epoch),
        write.rows.iter().map(|r| (r.bucket, r.columns.as_slice())),
        source,
        outcome,
        failure.map(ErrorInfo::of).as_ref(),
    )
}

/// The spill records of a row held back at the final flush (its epoch not known yet):
/// one per table it owes, each with its table. A day record of a family with an epoch
/// column keeps, as `minute`, the minute that decides its epoch, so that its replay
/// places it where the row would have gone.
pub fn held_records(
    key: &RowKey,
    row: &Row,
    family: &FamilyEntry,
    source: RecordSource<'_>,
) -> Vec<(Granularity, WriteRecord)> {
    let deltas = row.columns.as_slice();
    let record = |table, bucket| {
        records_of(
            family,
            table,
            key.series(),
            (None, None),
            [(bucket, deltas)],
            source,
            RecordOutcome::Spilled,
            None,
        )
    };
    let slot = key.slot();
    // The minute that decides a day record's epoch: the row's own minute, unless the row
    // is owed to its day table alone without one.
    let deciding = match slot {
        Slot::DayOnly(_) => None,
        _ => Some(slot.minute().minute_of_day()),
    };
    let owed: Vec<(Granularity, u32)> = match slot.owed_to() {
        Some(only) => vec![only],
        None => Granularity::ALL
            .into_iter()
            .filter(|&g| !family.table(g).is_empty())
            .map(|g| (g, bucket::bucket_of(g, slot.minute())))
            .collect(),
    };
    owed.into_iter()
        .flat_map(|(table, bucket)| {
            record(table, bucket).into_iter().map(move |mut r| {
                if table == Granularity::Day {
                    r.minute = deciding;
                }
                (table, r)
            })
        })
        .collect()
}

/// Why a spilled record cannot be replayed under the current configuration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// The family is not configured any more.
    #[error("family `{0}` is not configured")]
    UnknownFamily(String),
    /// The family counts another way now (`writer_totals`): a counter delta has no
    /// place in its running totals.
    #[error("family `{0}` is not a counter family")]
    NotCounter(String),
    /// A key column is missing from the record, or the family's key changed.
    #[error("the record's key does not match the family's key columns")]
    KeyMismatch,
    /// A column is not a counter column of the family any more.
    #[error("column `{0}` is not a counter column of the family")]
    UnknownColumn(String),
    /// The family has no table of the record's granularity any more.
    #[error("the family has no {0} table")]
    NoTable(&'static str),
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
    if family.mode != crate::config::CountingMode::Counter {
        return Err(ReplayError::NotCounter(record.family.clone()));
    }
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
        // A day row of an epoch goes back to that epoch (placed again from a minute it
        // covers on that day), or, held before its epoch was known, to the epoch of the
        // minute it kept; without an epoch column, both are dropped.
        ("day", minute) => match (&family.epoch_column, record.epoch, minute) {
            (Some(_), Some(epoch), _) => {
                crate::flush::plan::owed_slot(Granularity::Day, day.0, Some(epoch))
            }
            (Some(_), None, Some(m)) if (0..MINUTES_PER_DAY as i16).contains(&m) => {
                Slot::DayOnlyAt(Minute(day.0 * MINUTES_PER_DAY + m as u32))
            }
            _ => Slot::DayOnly(day),
        },
        ("hour", _) => match record.hour {
            Some(h) if (0..bucket::HOURS_PER_DAY as i16).contains(&h) => {
                Slot::HourOnly(day.0 * bucket::HOURS_PER_DAY + h as u32)
            }
            _ => return Err(ReplayError::BadBucket(format!("hour {:?}", record.hour))),
        },
        ("total", _) => Slot::TotalOnly,
        _ => {
            return Err(ReplayError::BadBucket(format!(
                "{} {:?}",
                record.granularity, record.minute
            )));
        }
    };
    if let Some((table, _)) = slot.owed_to()
        && !family.has(table)
    {
        return Err(ReplayError::NoTable(table.as_str()));
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, CountingMode, FamilyConfig};

    fn families(mode: CountingMode) -> Families {
        let mut config = Config::default();
        config.families.push(FamilyConfig {
            mode,
            ..FamilyConfig::seed_views()
        });
        Families::from_config(&config).unwrap()
    }

    /// A spilled counter delta of the `views` family's minute table.
    fn delta_record() -> WriteRecord {
        serde_json::from_value(serde_json::json!({
            "time": "2026-01-01T00:00:00Z", "writer": "w", "incarnation": 1,
            "flush_seq": 1, "request_id": "w/1/1/0", "row": 0, "outcome": "spilled",
            "family": "views", "table": "metrics.views_by_minute", "granularity": "minute",
            "key": {"page_id": "home"}, "day": "2026-01-01", "minute": 5,
            "deltas": {"views": 3},
        }))
        .unwrap()
    }

    /// A counter delta replays into a counter family, and is refused by a family that
    /// counts running totals now (a state directory of an earlier configuration): a
    /// delta has no place in a running total, and written as a counter it would meet a
    /// table of `bigint` columns.
    #[test]
    fn a_delta_record_replays_into_counter_families_only() {
        let record = delta_record();
        let (_, row) = from_record(&record, &families(CountingMode::Counter)).unwrap();
        assert_eq!(row.columns.as_slice().iter().sum::<i64>(), 3);
        assert_eq!(
            from_record(&record, &families(CountingMode::WriterTotals)).unwrap_err(),
            ReplayError::NotCounter("views".into())
        );
    }
}
