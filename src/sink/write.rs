//! What a sink is asked to write: one request, for the rows of one partition of one
//! table.

use crate::aggregate::Columns;
use crate::bucket::{Day, Minute};
use crate::vocabulary::{FamilyId, Granularity};

/// One destination row of a write: its clustering bucket and its deltas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowDelta {
    /// The minute (minute table) or the day (day table), counted from the epoch.
    pub bucket: u32,
    /// The deltas, one per counter column.
    pub columns: Columns,
    /// Unix seconds of the first failed attempt, 0 when never attempted before.
    pub requeued_since: u32,
}

impl RowDelta {
    /// The minute of a minute-table row.
    pub fn minute(&self) -> Minute {
        Minute(self.bucket)
    }

    /// The day of a day-table row, or of the minute of a minute-table row.
    pub fn day(&self, table: Granularity) -> Day {
        crate::bucket::day_of(table, self.bucket)
    }
}

/// A write a flush is about to send, as those who watch the flush see it
/// ([`crate::flush::FlushObserver`]), whatever kind of write it is: the partition it
/// writes and the buckets of its rows. Each kind's write type implements it beside its
/// definition, so an observer (the key index, for one) needs no change for a new kind.
pub trait PlannedWrite: Sync {
    /// The family.
    fn family(&self) -> FamilyId;
    /// Which of its tables.
    fn table(&self) -> Granularity;
    /// The encoded series (key values).
    fn series(&self) -> &[u8];
    /// Calls `each` with the bucket of every row, in row order.
    fn for_each_bucket(&self, each: &mut dyn FnMut(u32));
}

/// Writes of one kind as [`PlannedWrite`]s.
pub fn planned<W: PlannedWrite>(writes: &[W]) -> Vec<&dyn PlannedWrite> {
    writes.iter().map(|w| w as &dyn PlannedWrite).collect()
}

impl PlannedWrite for PartitionWrite {
    fn family(&self) -> FamilyId {
        self.family
    }
    fn table(&self) -> Granularity {
        self.table
    }
    fn series(&self) -> &[u8] {
        &self.series
    }
    fn for_each_bucket(&self, each: &mut dyn FnMut(u32)) {
        self.rows.iter().for_each(|row| each(row.bucket));
    }
}

/// One write request: rows of a single partition of one table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionWrite {
    /// The family.
    pub family: FamilyId,
    /// Which of its tables.
    pub table: Granularity,
    /// The encoded series (key values).
    pub series: Box<[u8]>,
    /// The shard this write goes to, for sharded families.
    pub shard: Option<u8>,
    /// The epoch this write goes to, for families reset by epochs (see [`crate::epoch`]).
    pub epoch: Option<i32>,
    /// The rows, all in the same partition; at least one.
    pub rows: Vec<RowDelta>,
}

impl PartitionWrite {
    /// Signed sum of every delta in the write.
    pub fn sum(&self) -> i128 {
        self.rows.iter().map(|r| r.columns.sum()).sum()
    }

    /// Unix seconds when its longest-failing row first failed: the oldest re-queue time
    /// of its rows (None when none was re-queued), what the counter age rule reads.
    pub fn failing_since(&self) -> Option<u32> {
        self.rows
            .iter()
            .map(|r| r.requeued_since)
            .filter(|since| *since != 0)
            .min()
    }
}
