//! The JSON record written for every write that did not simply succeed, by every kind of
//! write: the sidecar's counter families and `writer_totals` families, and the driver
//! wrapper's writes to the application's own tables.
//!
//! One object per line, complete enough to reconcile by hand: who wrote it (writer id,
//! incarnation, flush sequence, request id and row within the request), where (its
//! [`Target`]: a family's table, key values, shard, epoch, bucket; or an application
//! table and its key), what (column deltas), and why it is here (outcome, error kind and
//! text). A running total of a `writer_totals` family is the same record with its
//! [`TotalOf`]: its deltas are the part of the total not known applied.

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
    /// The request this row was part of: `writer/incarnation.nonce/flush_seq/request`
    /// (see [`super::ids::FlushId::request_id`]), the id
    /// its intent has in the journal (empty in records of older versions).
    #[serde(default)]
    pub request_id: String,
    /// The row's position within its request: with `request_id`, one record's identity.
    #[serde(default)]
    pub row: u16,
    /// Why the record is here: `unknown`, `rejected` or `spilled`.
    pub outcome: RecordOutcome,
    /// Family name (`generic` for the generic tables); empty (absent from the line) for
    /// a row of an application table (see [`Target`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub family: String,
    /// `keyspace.table`.
    pub table: String,
    /// `minute`, `hour`, `day` or `total`; empty (absent) for a row of an application
    /// table.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub granularity: String,
    /// Key column → value (for an application table, as a CQL literal).
    pub key: BTreeMap<String, String>,
    /// For a row of an application table: the key values' bytes as the driver serialized
    /// them, hex, in key column order (partition, then clustering). A spilled row is
    /// replayed from these, on the table's schema at replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_hex: Option<Vec<String>>,
    /// Shard written to, for sharded families.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u8>,
    /// Epoch written to, for families with an epoch column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<i32>,
    /// The day, `YYYY-MM-DD`; empty (absent) for a row of an application table.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub day: String,
    /// Minute of the day (minute table only; in a day record of a family with an epoch
    /// column held at shutdown before its epoch was known, the minute that decides it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minute: Option<i16>,
    /// Hour of the day, 0..23 (hour table only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hour: Option<i16>,
    /// The month partition, `YYYY-MM` (day table only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub month: Option<String>,
    /// Counter column → delta (only columns with a non-zero delta).
    pub deltas: BTreeMap<String, i64>,
    /// Why the write is here; absent for rows spilled without being attempted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
    /// For a running total of a `writer_totals` family: what writes it again exactly
    /// as it would have been written (its `deltas` are the part of it not known
    /// applied, what the accounting owes). Absent for every other write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<TotalOf>,
}

/// What a record of a `writer_totals` row carries beyond a delta: the write itself.
/// Writing it any number of times leaves the same cell (absolute values, a fixed write
/// time), so a spilled total may be re-sent harmlessly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TotalOf {
    /// The writer column it belongs to (writer id, incarnation, start nonce).
    pub column: String,
    /// Value column → the writer's absolute total.
    pub totals: BTreeMap<String, i64>,
    /// The write time to write it with, microseconds: later than every write of this row
    /// sent before it was recorded.
    pub timestamp: i64,
}

/// Where a record's row was to be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target<'a> {
    /// A table of a configured family (`granularity` says which of its tables).
    Family(&'a str),
    /// An application's own table, `keyspace.table` (the driver wrapper's writes).
    Table(&'a str),
}

impl WriteRecord {
    /// Where its row was to be written.
    pub fn target(&self) -> Target<'_> {
        if self.family.is_empty() {
            Target::Table(&self.table)
        } else {
            Target::Family(&self.family)
        }
    }
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
    /// Not sent, kept for a later flush (a spill segment).
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

impl ErrorInfo {
    /// The record's form of a write error.
    pub fn of(error: &crate::sink::WriteError) -> ErrorInfo {
        ErrorInfo {
            kind: error.kind.to_owned(),
            text: error.text.to_string(),
        }
    }
}

/// What a request's records say about where they come from.
#[derive(Clone, Copy, Debug)]
pub struct RecordSource<'a> {
    /// The flush that sent (or meant to send) the request.
    pub flush: &'a super::ids::FlushId,
    /// The request's index within the flush.
    pub request: u32,
    /// When the outcome is recorded, RFC 3339.
    pub time: &'a str,
}

/// The records of one request, one per row: `rows` are (bucket, deltas in the family's
/// column order). The one place a request becomes records, for the flusher and for
/// crash recovery alike.
#[allow(clippy::too_many_arguments)]
pub fn records_of<'r>(
    family: &super::ids::FamilyEntry,
    table: crate::vocabulary::Granularity,
    series: &[u8],
    (shard, epoch): (Option<u8>, Option<i32>),
    rows: impl IntoIterator<Item = (u32, &'r [i64])>,
    source: RecordSource<'_>,
    outcome: RecordOutcome,
    error: Option<&ErrorInfo>,
) -> Vec<WriteRecord> {
    use crate::bucket::{self, Minute};
    use crate::vocabulary::Granularity;
    let key: BTreeMap<String, String> = family
        .key_columns
        .iter()
        .cloned()
        .zip(crate::series::fields(series).map(str::to_owned))
        .collect();
    let request_id = source.flush.request_id(source.request);
    rows.into_iter()
        .enumerate()
        .map(|(index, (bucket, deltas))| {
            let day = bucket::day_of(table, bucket);
            WriteRecord {
                time: source.time.to_owned(),
                writer: source.flush.writer.clone(),
                incarnation: source.flush.incarnation,
                flush_seq: source.flush.flush_seq,
                request_id: request_id.clone(),
                row: u16::try_from(index).unwrap_or(u16::MAX),
                outcome,
                family: family.name.clone(),
                table: family.table(table).to_owned(),
                granularity: table.as_str().to_owned(),
                key: key.clone(),
                key_hex: None,
                shard,
                epoch,
                day: bucket::format_date(day.date()),
                minute: (table == Granularity::Minute).then(|| Minute(bucket).minute_of_day()),
                hour: (table == Granularity::Hour)
                    .then_some((bucket % bucket::HOURS_PER_DAY) as i16),
                month: (table == Granularity::Day).then(|| day.month()),
                deltas: family
                    .columns
                    .iter()
                    .zip(deltas)
                    .filter(|(_, d)| **d != 0)
                    .map(|(c, d)| (c.clone(), *d))
                    .collect(),
                error: error.cloned(),
                total: None,
            }
        })
        .collect()
}
