//! What a sink is asked to write for the exact families: rows of the delta ledger and rows
//! of the outcomes table (`cql/exact.cql`). Both are regular-table rows written with
//! idempotent INSERTs: sending one twice writes the same cells, so a failure of any kind,
//! a timeout included, is simply sent again.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::bucket::{Day, Minute};

/// One row of the delta ledger. Formed once, for the deltas a flush drained for the first
/// time for one minute row, and never changed: every retry sends these very values.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LedgerRow {
    /// The family's name.
    pub family: Arc<str>,
    /// The key values as a JSON array of strings (the key index's form).
    pub key: Arc<str>,
    /// The ledger partition of the key: `hash(key) % exact.buckets`, fixed at formation.
    pub bucket: i16,
    /// The minute (from the epoch) the deltas belong to.
    pub minute: Minute,
    /// The writer id of the flush that formed it.
    pub writer: Arc<str>,
    /// That writer's incarnation.
    pub incarnation: u64,
    /// That flush's sequence number.
    pub flush_seq: u64,
    /// 0; 1 and up only for a minute whose summed deltas do not fit a bigint.
    pub part: u16,
    /// The family's counter columns, in delta order.
    pub columns: Arc<[String]>,
    /// One delta per column (0: no change).
    pub deltas: Box<[i64]>,
}

impl LedgerRow {
    /// The day of the row.
    pub fn day(&self) -> Day {
        self.minute.day()
    }

    /// The ledger partition the row belongs to: family, day, bucket.
    pub fn partition(&self) -> (&str, Day, i16) {
        (&self.family, self.day(), self.bucket)
    }

    /// Column → delta, non-zero deltas only (the stored map).
    pub fn delta_map(&self) -> BTreeMap<&str, i64> {
        self.columns
            .iter()
            .zip(self.deltas.iter())
            .filter(|(_, d)| **d != 0)
            .map(|(c, d)| (c.as_str(), *d))
            .collect()
    }

    /// Signed sum of the row's deltas.
    pub fn sum(&self) -> i128 {
        self.deltas.iter().map(|&d| i128::from(d)).sum()
    }

    /// The row's identity in the table (its primary key beyond the partition).
    pub fn identity(&self) -> (&str, i16, &str, u64, u64, u16) {
        (
            &self.key,
            self.minute.minute_of_day(),
            &self.writer,
            self.incarnation,
            self.flush_seq,
            self.part,
        )
    }
}

/// One row of the outcomes table: a row of a write that did not simply apply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutcomeRow {
    /// The family's name.
    pub family: String,
    /// The day of the row (partition key).
    pub day: Day,
    /// `writer/incarnation/flush_seq/request`, or `repair/...` for a corrective write.
    pub request_id: String,
    /// The row's place in its request.
    pub row: u16,
    /// `unknown`, `rejected`, `dropped`, `repair_unknown`, `repair_applied`,
    /// `repair_rejected`.
    pub outcome: String,
    /// `minute` or `day`.
    pub granularity: String,
    /// The key values as a JSON array.
    pub key: String,
    /// The minute of the day, for minute-table rows.
    pub minute: Option<i16>,
    /// The shard written to, for sharded families.
    pub shard: Option<u8>,
    /// Column → delta (non-zero only).
    pub deltas: BTreeMap<String, i64>,
    /// Error kind (`write_timeout`, `in_flight_at_crash`, ...).
    pub error_kind: Option<String>,
    /// Error text.
    pub error: Option<String>,
    /// When the outcome was recorded, milliseconds since the epoch.
    pub recorded_ms: i64,
}
