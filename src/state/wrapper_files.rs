//! The driver wrapper's files in the state directory, as every reader sees them: its
//! records (`wrapper_unknown.jsonl`, `wrapper_rejected.jsonl`, `wrapper_unsent.jsonl`,
//! the spill `wrapper_spill.jsonl` and its cursor), the layout of a row key in its
//! journal intents, and what recovery writes for an unended wrapper flush
//! ([`group_records`]). The wrapper writes them (`crate::wrapper`); `countersink
//! outcomes` reads them through this module, so that the operator tools need nothing of
//! the wrapper itself.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::journal::{FlushGroup, WrapperGroup, WrapperTable};
use super::record::RecordOutcome;
use super::recovery::home_of;

/// The spill file's name in the state directory.
pub const SPILL_FILE: &str = "wrapper_spill.jsonl";

/// The spill's replay cursor file name.
pub const CURSOR_FILE: &str = "wrapper_spill.cursor";

/// The logs' file stems (each rotated as `<stem>.N.jsonl`).
pub const LOG_STEMS: [&str; 3] = ["wrapper_unknown", "wrapper_rejected", "wrapper_unsent"];

/// Why a row is recorded: the file it goes to follows from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WrapperOutcome {
    /// `wrapper_unknown.jsonl`.
    Unknown,
    /// `wrapper_rejected.jsonl`.
    Rejected,
    /// `wrapper_unsent.jsonl` (in the spill: to be replayed).
    Unsent,
}

impl WrapperOutcome {
    /// Every outcome, in file order.
    pub const ALL: [WrapperOutcome; 3] = [
        WrapperOutcome::Unknown,
        WrapperOutcome::Rejected,
        WrapperOutcome::Unsent,
    ];

    /// Its file in the state directory.
    pub fn file_name(self) -> &'static str {
        match self {
            WrapperOutcome::Unknown => "wrapper_unknown.jsonl",
            WrapperOutcome::Rejected => "wrapper_rejected.jsonl",
            WrapperOutcome::Unsent => "wrapper_unsent.jsonl",
        }
    }
}

/// One recorded row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WrapperRecord {
    /// When, RFC 3339 UTC.
    pub time: String,
    /// `writer/incarnation/wFLUSH/request` (see [`request_id`]).
    pub request_id: String,
    /// The row's position in its request.
    pub row: u16,
    /// Why it is here.
    pub outcome: WrapperOutcome,
    /// `keyspace.table`.
    pub table: String,
    /// Key column → value as a CQL literal.
    pub key: BTreeMap<String, String>,
    /// The key values' bytes as the driver serialized them, hex, in key column order
    /// (partition, then clustering): a spilled row is replayed from these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_hex: Option<Vec<String>>,
    /// Counter column → delta (non-zero only).
    pub deltas: BTreeMap<String, i64>,
    /// The error kind (`write_timeout`, `cancelled_at_deadline`, ...), when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<String>,
    /// The error text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The request id of request `request` of wrapper flush `seq`.
pub fn request_id(writer: &str, incarnation: u64, seq: u64, request: u32) -> String {
    format!("{writer}/{incarnation}/w{seq}/{request}")
}

/// Bytes as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hex back to bytes (`None` if it is not hex).
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Splits a row key (the table's number, little-endian, then each key value behind its
/// big-endian length) into its table number and key values.
pub fn split_key(key: &[u8]) -> Option<(u32, Vec<&[u8]>)> {
    let (id, mut rest) = key.split_first_chunk::<4>()?;
    let mut values = Vec::new();
    while !rest.is_empty() {
        let (len, tail) = rest.split_first_chunk::<4>()?;
        let len = u32::from_be_bytes(*len) as usize;
        if tail.len() < len {
            return None;
        }
        let (value, tail) = tail.split_at(len);
        values.push(value);
        rest = tail;
    }
    Some((u32::from_le_bytes(*id), values))
}

/// Appends a key value to a row key.
pub fn push_key_value(key: &mut Vec<u8>, value: &[u8]) {
    key.extend_from_slice(&u32::try_from(value.len()).unwrap_or(u32::MAX).to_be_bytes());
    key.extend_from_slice(value);
}

/// The records recovery writes for an unended, committed wrapper flush, row for row:
/// `unsent` (to the spill), `rejected` or `unknown`, where the sidecar's recovery
/// classifier ([`home_of`]) puts each request (`is_last`: no later group follows it in
/// the journal). `literal` prints key value `i` of a table as a CQL literal (the wrapper
/// uses the driver's schema metadata; without it, hex). Also what `countersink outcomes`
/// shows for such a flush.
pub fn group_records(
    group: &FlushGroup,
    wrapper: &WrapperGroup,
    is_last: bool,
    time: &str,
    literal: &dyn Fn(&WrapperTable, usize, &[u8]) -> String,
) -> Vec<WrapperRecord> {
    let mut out = Vec::new();
    for intent in &wrapper.intents {
        let Some(table) = wrapper.table(intent.table) else {
            continue;
        };
        let id = request_id(
            &group.flush.writer,
            group.flush.incarnation,
            group.flush.flush_seq,
            intent.request,
        );
        let (outcome, error) = match home_of(group, intent.request, is_last) {
            (None, _) => continue,
            (Some(RecordOutcome::Spilled), error) => (WrapperOutcome::Unsent, error),
            (Some(RecordOutcome::Rejected), error) => (WrapperOutcome::Rejected, error),
            (Some(RecordOutcome::Unknown), error) => (WrapperOutcome::Unknown, error),
        };
        for (i, row) in intent.rows.iter().enumerate() {
            let Some((_, values)) = split_key(&row.key) else {
                continue;
            };
            out.push(WrapperRecord {
                time: time.to_owned(),
                request_id: id.clone(),
                row: u16::try_from(i).unwrap_or(u16::MAX),
                outcome,
                table: format!("{}.{}", table.keyspace, table.name),
                key: table
                    .key_columns
                    .iter()
                    .zip(&values)
                    .enumerate()
                    .map(|(n, (column, bytes))| (column.clone(), literal(table, n, bytes)))
                    .collect(),
                key_hex: Some(values.iter().map(|bytes| hex(bytes)).collect()),
                deltas: table
                    .counters
                    .iter()
                    .zip(&row.deltas)
                    .filter(|(_, d)| **d != 0)
                    .map(|(c, d)| (c.clone(), *d))
                    .collect(),
                error_kind: error.as_ref().map(|e| e.kind.clone()),
                error: error.as_ref().map(|e| e.text.clone()),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_key_splits_into_its_table_and_values() {
        let mut key = 3_u32.to_le_bytes().to_vec();
        push_key_value(&mut key, b"home");
        push_key_value(&mut key, b"");
        let (id, values) = split_key(&key).unwrap();
        assert_eq!((id, values), (3, vec![&b"home"[..], &b""[..]]));
        assert_eq!(split_key(&key[..key.len() - 1]), None, "a torn length");
        assert_eq!(unhex(&hex(b"\x00\xffa")), Some(b"\x00\xffa".to_vec()));
        assert_eq!(unhex("0"), None);
    }
}
