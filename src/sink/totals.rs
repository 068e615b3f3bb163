//! What a sink is asked to write for a `writer_totals` family: one writer's running totals
//! of some rows of one partition, at one write time.
//!
//! Unlike a counter delta, such a write is idempotent: sending it again, or late, cannot
//! count twice, and its write time (from the writer's own monotonic clock) makes a newer
//! total win over an older one whatever order they reach the store in.

use std::sync::Arc;

use crate::aggregate::Columns;
use crate::bucket::Day;
use crate::vocabulary::{FamilyId, Granularity};

/// One row of a totals write: its clustering bucket and its absolute totals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TotalRow {
    /// The minute (minute table) or the day (day table), counted from the epoch.
    pub bucket: u32,
    /// The writer's running total of each value column since its incarnation started.
    pub totals: Columns,
}

impl TotalRow {
    /// The day of a day-table row, or of the minute of a minute-table row.
    pub fn day(&self, table: Granularity) -> Day {
        crate::bucket::day_of(table, self.bucket)
    }
}

/// One request: rows of a single partition of one table, all of one writer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TotalsWrite {
    /// The family.
    pub family: FamilyId,
    /// Which of its tables.
    pub table: Granularity,
    /// The encoded series (key values).
    pub series: Box<[u8]>,
    /// The writer column's value (writer id, incarnation, start nonce).
    pub writer: Arc<str>,
    /// Write time in microseconds since the epoch (`USING TIMESTAMP`).
    pub timestamp: i64,
    /// The rows, all in the same partition; at least one.
    pub rows: Vec<TotalRow>,
}

impl super::PlannedWrite for TotalsWrite {
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
