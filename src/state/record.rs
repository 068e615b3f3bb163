//! The JSON record written for every write that did not simply succeed.
//!
//! One object per line, complete enough to reconcile by hand: who wrote it (writer id,
//! incarnation, flush sequence), where (table, key values, shard, bucket), what (column
//! deltas), and why it is here (outcome, error kind and text).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One row of a write that was spilled, rejected, or whose outcome is unknown.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteRecord {
    /// When the outcome was recorded, RFC 3339 UTC.
    pub time: String,
    /// The writer (see `state.writer_id`).
    pub writer: String,
    /// How many times this state directory has been opened; with the flush sequence it
    /// identifies a flush uniquely.
    pub incarnation: u64,
    /// Flush number within the incarnation.
    pub flush_seq: u64,
    /// Why the record is here: `unknown`, `rejected` or `spilled`.
    pub outcome: RecordOutcome,
    /// Family name (`generic` for the generic tables).
    pub family: String,
    /// `keyspace.table`.
    pub table: String,
    /// `minute` or `day`.
    pub granularity: String,
    /// Key column → value.
    pub key: BTreeMap<String, String>,
    /// Shard written to, for sharded families.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u8>,
    /// The day, `YYYY-MM-DD`.
    pub day: String,
    /// Minute of the day (minute table only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minute: Option<i16>,
    /// The month partition, `YYYY-MM` (day table only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub month: Option<String>,
    /// Counter column → delta (only columns with a non-zero delta).
    pub deltas: BTreeMap<String, i64>,
    /// Why the write is here; absent for rows spilled without being attempted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
}

/// Why a record was written: the file it goes to follows from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordOutcome {
    /// The write may or may not have applied (`unknown.jsonl`).
    Unknown,
    /// The store refused it permanently, or it can no longer be mapped to a table
    /// (`rejected.jsonl`).
    Rejected,
    /// Not sent, kept for a later flush (`spill.jsonl`).
    Spilled,
}

/// The error of a failed write.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorInfo {
    /// Stable kind, e.g. `write_timeout`.
    pub kind: String,
    /// The error text.
    pub text: String,
}
