//! Turning drained rows into writes: one per partition (split when large), for every
//! table of the family (minute, hour, day, all-time total), from the same drain.
//!
//! Pure synchronous code. A fresh row (`Slot::Both`) yields a minute row and a
//! contribution to its hour, day and total rows, for each of those tables its family
//! has; re-queued rows yield only the table they are owed to.
//! Deltas for the same destination row are summed; if a sum would overflow `i64`, the
//! parts are written as separate rows instead of wrapping.
//!
//! A family with an epoch column puts each row into the epoch of its minute, which
//! [`plan_placed`] asks of a placement function (see [`crate::epoch`]); a row it cannot
//! place yet is handed back as held, whole, to be merged back into the buffer.

use std::collections::HashMap;

use crate::aggregate::{Row, RowKey, Slot};
use crate::bucket::{self, Day, MINUTES_PER_DAY, Minute};
use crate::epoch::Placement;
use crate::sink::{PartitionWrite, RowDelta};
use crate::vocabulary::{FamilyId, Granularity};

/// The partition a destination row belongs to.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct PartitionKey {
    family: FamilyId,
    table: Granularity,
    series: Box<[u8]>,
    /// The epoch, for families with an epoch column.
    epoch: Option<i32>,
    /// Day (minute and hour tables), month number `year*12 + month-1` (day table), or
    /// 0 (total table: the key alone is the partition).
    partition_bucket: u32,
}

/// How to split drained rows into requests.
#[derive(Clone, Copy, Debug)]
pub struct PlanOptions {
    /// Most rows per request.
    pub max_batch_rows: usize,
}

/// Plans the writes for drained rows. `shard_of` gives the shard of a family's writes in
/// this flush (None for unsharded families). For families without an epoch column.
pub fn plan(
    rows: impl IntoIterator<Item = (RowKey, Row)>,
    options: PlanOptions,
    shard_of: impl Fn(FamilyId) -> Option<u8>,
) -> Vec<PartitionWrite> {
    plan_placed(
        rows,
        options,
        shard_of,
        |_, _, _| Placement::NoEpoch,
        |_, g| matches!(g, Granularity::Minute | Granularity::Day),
    )
    .writes
}

/// What a flush sends, and what it keeps back.
#[derive(Default)]
pub struct Planned {
    /// The write requests.
    pub writes: Vec<PartitionWrite>,
    /// Rows whose epoch cannot be chosen yet, as drained: they go back to the buffer.
    pub held: Vec<(RowKey, Row)>,
    /// Per granularity, the sum of fresh deltas of families without a table of that
    /// granularity: settled here, since no write is owed (the accounting's `no_table`).
    pub no_table: [i128; Granularity::COUNT],
}

/// [`plan`], with `place` giving the epoch of a row of (family, series, minute), or
/// holding it, and `has_table` saying which tables a family has. A day-only row is
/// placed by the first minute of its day.
pub fn plan_placed(
    rows: impl IntoIterator<Item = (RowKey, Row)>,
    options: PlanOptions,
    shard_of: impl Fn(FamilyId) -> Option<u8>,
    place: impl Fn(FamilyId, &[u8], Minute) -> Placement,
    has_table: impl Fn(FamilyId, Granularity) -> bool,
) -> Planned {
    let rows = rows.into_iter();
    // At least one partition per drained row's minute, often one more for its day: sized
    // for the first, so the table grows at most once.
    let mut partitions: HashMap<PartitionKey, Vec<RowDelta>> =
        HashMap::with_capacity(rows.size_hint().0);
    let mut held = Vec::new();
    let mut no_table = [0_i128; Granularity::COUNT];
    for (key, row) in rows {
        if row.columns.is_zero() {
            continue;
        }
        let family = key.family();
        let slot = key.slot();
        let epoch = match place(family, key.series(), slot.minute()) {
            Placement::Hold => {
                held.push((key, row));
                continue;
            }
            Placement::NoEpoch => None,
            Placement::Epoch(e) => Some(e),
        };
        let series = key.into_series();
        let mut add = |table, series, bucket| {
            add(
                &mut partitions,
                Destination {
                    family,
                    table,
                    series,
                    epoch,
                },
                bucket,
                &row,
            )
        };
        match slot.owed_to() {
            None => {
                let minute = slot.minute();
                for g in Granularity::ALL {
                    if has_table(family, g) {
                        add(g, series.clone(), bucket::bucket_of(g, minute));
                    } else {
                        no_table[g.index()] += row.columns.sum();
                    }
                }
            }
            Some((g, bucket)) => add(g, series, bucket),
        }
    }
    let mut sorted: Vec<_> = partitions.into_iter().collect();
    // Deterministic order: tests compare plans, and logs read better.
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let max = options.max_batch_rows.max(1);
    let mut writes = Vec::with_capacity(sorted.len());
    for (partition, mut rows) in sorted {
        rows.sort_by_key(|r| r.bucket);
        let shard = shard_of(partition.family);
        let mut series = Some(partition.series);
        while !rows.is_empty() {
            let rest = rows.split_off(rows.len().min(max));
            // The last (usually the only) write of a partition takes the series itself.
            let series = if rest.is_empty() {
                series.take().unwrap_or_default()
            } else {
                series.clone().unwrap_or_default()
            };
            writes.push(PartitionWrite {
                family: partition.family,
                table: partition.table,
                series,
                shard,
                epoch: partition.epoch,
                rows,
            });
            rows = rest;
        }
    }
    Planned {
        writes,
        held,
        no_table,
    }
}

/// The table, key and epoch a row goes to.
struct Destination {
    family: FamilyId,
    table: Granularity,
    series: Box<[u8]>,
    epoch: Option<i32>,
}

fn add(
    partitions: &mut HashMap<PartitionKey, Vec<RowDelta>>,
    destination: Destination,
    bucket: u32,
    row: &Row,
) {
    let Destination {
        family,
        table,
        series,
        epoch,
    } = destination;
    let partition_bucket = match table {
        Granularity::Minute | Granularity::Hour => bucket::day_of(table, bucket).0,
        Granularity::Day => {
            let date = Day(bucket).date();
            (date.year().max(0) as u32) * 12 + u32::from(u8::from(date.month())) - 1
        }
        Granularity::Total => 0,
    };
    // Most partitions get one row per flush: no room for more until a second arrives.
    let rows = partitions
        .entry(PartitionKey {
            family,
            table,
            series,
            epoch,
            partition_bucket,
        })
        .or_insert_with(|| Vec::with_capacity(1));
    // A destination row may appear more than once only when summing would overflow.
    for existing in rows.iter_mut().filter(|r| r.bucket == bucket) {
        if existing.columns.checked_add(&row.columns) {
            existing.requeued_since = oldest(existing.requeued_since, row.requeued_since);
            return;
        }
    }
    rows.push(RowDelta {
        bucket,
        columns: row.columns.clone(),
        requeued_since: row.requeued_since,
    });
}

fn oldest(a: u32, b: u32) -> u32 {
    match (a, b) {
        (0, x) | (x, 0) => x,
        (x, y) => x.min(y),
    }
}

/// The rows of a write that definitely did not apply, as they are merged back into the
/// buffer: owed to that write's table only, and stamped with the time of their first
/// failure (kept when they failed before) for the maximum re-queue age.
pub fn requeued_rows(
    write: PartitionWrite,
    now_unix_secs: u32,
) -> impl Iterator<Item = (RowKey, Row)> {
    let (family, table, series, epoch) = (write.family, write.table, write.series, write.epoch);
    write.rows.into_iter().map(move |row| {
        let slot = owed_slot(table, row.bucket, epoch);
        let since = if row.requeued_since == 0 {
            now_unix_secs.max(1)
        } else {
            row.requeued_since
        };
        (
            RowKey::new(family, slot, series.clone()),
            Row {
                columns: row.columns,
                requeued_since: since,
            },
        )
    })
}

/// The rows of a write that was never sent, as they are merged back: owed to that
/// write's table only, their re-queue times unchanged.
pub fn held_rows(write: PartitionWrite) -> impl Iterator<Item = (RowKey, Row)> {
    let (family, table, series, epoch) = (write.family, write.table, write.series, write.epoch);
    write.rows.into_iter().map(move |row| {
        let slot = owed_slot(table, row.bucket, epoch);
        (
            RowKey::new(family, slot, series.clone()),
            Row {
                columns: row.columns,
                requeued_since: row.requeued_since,
            },
        )
    })
}

/// The slot of a row owed to one table. A day row of an epoch is kept as a minute that
/// epoch covers on that day (its start, or the day's first minute when it started
/// earlier), so that placing it again finds the same epoch.
pub fn owed_slot(table: Granularity, bucket: u32, epoch: Option<i32>) -> Slot {
    match (table, epoch) {
        (Granularity::Minute, _) => Slot::MinuteOnly(Minute(bucket)),
        (Granularity::Day, None) => Slot::DayOnly(Day(bucket)),
        (Granularity::Day, Some(epoch)) => {
            let first = bucket * MINUTES_PER_DAY;
            let start = u32::try_from(epoch).unwrap_or(0);
            Slot::DayOnlyAt(Minute(start.clamp(first, first + MINUTES_PER_DAY - 1)))
        }
        // Families with an epoch column have only minute and day tables (the
        // configuration refuses others), so these never carry an epoch.
        (Granularity::Hour, _) => Slot::HourOnly(bucket),
        (Granularity::Total, _) => Slot::TotalOnly,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::Columns;
    use crate::series;

    fn row(family: u16, slot: Slot, key: &str, v: i64) -> (RowKey, Row) {
        (
            RowKey::new(
                FamilyId(family),
                slot,
                series::encode([key]).into_boxed_slice(),
            ),
            Row {
                columns: Columns::One(v),
                requeued_since: 0,
            },
        )
    }

    fn summary(writes: &[PartitionWrite]) -> Vec<String> {
        writes
            .iter()
            .map(|w| {
                let rows: Vec<String> = w
                    .rows
                    .iter()
                    .map(|r| format!("{}={:?}", r.bucket, r.columns))
                    .collect();
                format!(
                    "{:?} {} {}",
                    w.table,
                    series::fields(&w.series).next().unwrap_or(""),
                    rows.join(" ")
                )
            })
            .collect()
    }

    #[test]
    fn fresh_rows_feed_minute_and_day_and_partitions_group() {
        let day0 = 20_000 * MINUTES_PER_DAY;
        let writes = plan(
            [
                row(0, Slot::Both(Minute(day0 + 5)), "a", 2),
                row(0, Slot::Both(Minute(day0 + 6)), "a", 3),
                row(0, Slot::Both(Minute(day0 + MINUTES_PER_DAY)), "a", 4),
                row(0, Slot::Both(Minute(day0 + 5)), "b", 1),
            ],
            PlanOptions { max_batch_rows: 16 },
            |_| None,
        );
        assert_eq!(
            summary(&writes),
            [
                format!("Minute a {}=[2] {}=[3]", day0 + 5, day0 + 6),
                format!("Minute a {}=[4]", day0 + MINUTES_PER_DAY),
                format!("Minute b {}=[1]", day0 + 5),
                "Day a 20000=[5] 20001=[4]".to_string(),
                "Day b 20000=[1]".to_string(),
            ]
        );
    }

    #[test]
    fn requeued_rows_go_only_where_they_are_owed_and_merge_with_fresh_ones() {
        let m = 20_000 * MINUTES_PER_DAY + 10;
        let writes = plan(
            [
                row(0, Slot::Both(Minute(m)), "a", 1),
                row(0, Slot::MinuteOnly(Minute(m)), "a", 10),
                row(0, Slot::DayOnly(Day(20_000)), "a", 100),
            ],
            PlanOptions { max_batch_rows: 16 },
            |_| None,
        );
        assert_eq!(
            summary(&writes),
            [
                format!("Minute a {m}=[11]"),
                "Day a 20000=[101]".to_string()
            ]
        );
    }

    #[test]
    fn large_partitions_split_and_zero_rows_vanish() {
        let base = 20_000 * MINUTES_PER_DAY;
        let rows: Vec<_> = (0..5)
            .map(|i| row(0, Slot::MinuteOnly(Minute(base + i)), "a", 1))
            .collect();
        let mut all = rows;
        all.push(row(0, Slot::Both(Minute(base + 99)), "z", 0));
        let writes = plan(all, PlanOptions { max_batch_rows: 2 }, |_| None);
        assert_eq!(
            writes.iter().map(|w| w.rows.len()).collect::<Vec<_>>(),
            [2, 2, 1]
        );
        assert_eq!(writes.iter().map(PartitionWrite::sum).sum::<i128>(), 5);
    }

    #[test]
    fn overflowing_day_sum_becomes_two_rows_not_a_wrap() {
        let m = 20_000 * MINUTES_PER_DAY;
        let writes = plan(
            [
                row(0, Slot::Both(Minute(m)), "a", i64::MAX),
                row(0, Slot::Both(Minute(m + 1)), "a", 1),
            ],
            PlanOptions { max_batch_rows: 16 },
            |_| None,
        );
        let day = writes.iter().find(|w| w.table == Granularity::Day).unwrap();
        assert_eq!(day.rows.len(), 2);
        assert_eq!(day.sum(), i128::from(i64::MAX) + 1);
    }

    #[test]
    fn shards_are_assigned_per_family_and_requeue_keeps_the_first_failure_time() {
        let m = 20_000 * MINUTES_PER_DAY;
        let writes = plan(
            [
                row(1, Slot::Both(Minute(m)), "a", 1),
                row(0, Slot::Both(Minute(m)), "b", 1),
            ],
            PlanOptions { max_batch_rows: 16 },
            |f| (f == FamilyId(1)).then_some(3),
        );
        assert!(
            writes
                .iter()
                .all(|w| (w.family == FamilyId(1)) == (w.shard == Some(3)))
        );
        let minute = writes
            .into_iter()
            .find(|w| w.table == Granularity::Minute && w.family == FamilyId(0))
            .unwrap();
        let (key, requeued) = requeued_rows(minute, 1234).next().unwrap();
        assert_eq!(key.slot(), Slot::MinuteOnly(Minute(m)));
        assert_eq!(requeued.requeued_since, 1234);
    }

    /// A day split by a reset becomes two day rows, one per epoch; rows the placement
    /// holds come back whole; a re-queued day row of an epoch is placed into it again.
    #[test]
    fn epochs_split_partitions_and_held_rows_come_back_whole() {
        let day = 20_000;
        let base = day * MINUTES_PER_DAY;
        let reset = (base + 600) as i32;
        let place = |_: FamilyId, _: &[u8], m: Minute| {
            if m.0 >= base + 700 {
                Placement::Hold
            } else if m.0 as i32 >= reset {
                Placement::Epoch(reset)
            } else {
                Placement::Epoch(0)
            }
        };
        let planned = plan_placed(
            [
                row(1, Slot::Both(Minute(base + 599)), "a", 1),
                row(1, Slot::Both(Minute(base + 600)), "a", 10),
                row(1, Slot::Both(Minute(base + 601)), "a", 100),
                row(1, Slot::Both(Minute(base + 700)), "a", 1000),
            ],
            PlanOptions { max_batch_rows: 16 },
            |_| None,
            place,
            |_, g| matches!(g, Granularity::Minute | Granularity::Day),
        );
        let by_epoch: Vec<(Granularity, Option<i32>, i128)> = planned
            .writes
            .iter()
            .map(|w| (w.table, w.epoch, w.sum()))
            .collect();
        assert_eq!(
            by_epoch,
            [
                (Granularity::Minute, Some(0), 1),
                (Granularity::Minute, Some(reset), 110),
                (Granularity::Day, Some(0), 1),
                (Granularity::Day, Some(reset), 110),
            ]
        );
        assert_eq!(planned.held.len(), 1);
        assert_eq!(planned.held[0].0.slot(), Slot::Both(Minute(base + 700)));

        let day_write = planned
            .writes
            .into_iter()
            .find(|w| w.table == Granularity::Day && w.epoch == Some(reset))
            .unwrap();
        let requeued: Vec<_> = requeued_rows(day_write, 5).collect();
        assert_eq!(requeued[0].0.slot(), Slot::DayOnlyAt(Minute(base + 600)));
        let again = plan_placed(
            requeued,
            PlanOptions { max_batch_rows: 16 },
            |_| None,
            place,
            |_, g| matches!(g, Granularity::Minute | Granularity::Day),
        );
        assert_eq!(
            (
                again.writes[0].table,
                again.writes[0].epoch,
                again.writes[0].rows[0].bucket
            ),
            (Granularity::Day, Some(reset), day)
        );
        assert_eq!(
            owed_slot(Granularity::Day, day, Some(0)),
            Slot::DayOnlyAt(Minute(base)),
            "an epoch that began before the day is placed by the day's first minute"
        );
    }
}
