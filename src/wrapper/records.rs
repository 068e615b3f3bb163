//! The records of flushed rows that did not simply apply, and the files they go to.
//!
//! One JSON object per line, in the state directory beside the sidecar's logs (the same
//! rotation and size limits, `state.max_log_bytes` and `state.max_log_files`):
//!
//! | file | what |
//! |---|---|
//! | `wrapper_unknown.jsonl` | may or may not have applied: never re-sent, reconcile by hand |
//! | `wrapper_rejected.jsonl` | refused by the store for good |
//! | `wrapper_unsent.jsonl` | definitely not applied, and not replayable: past `state.max_spill_bytes`, or spilled rows whose table no longer takes them at replay; apply by hand if wanted |
//!
//! Rows definitely not applied that this process will not send go to the spill
//! ([`super::spill`]) and are replayed by the next start.
//!
//! A record names the request (`writer/incarnation/flush/request`), the table, the key as
//! CQL literals (and as the bytes' hex), and every non-zero delta, so a row can be checked against the store and
//! applied by hand with one UPDATE.

use std::path::Path;

use scylla::cluster::metadata::ColumnType;
use scylla::deserialize::FrameSlice;
use scylla::deserialize::value::DeserializeValue;
use scylla::value::CqlValue;

use crate::config::StateConfig;
use crate::state::JsonlLog;
pub use crate::state::wrapper_files::{WrapperOutcome, WrapperRecord, hex, unhex};

use super::buffer::PendingRow;
use super::recognize::TableShape;

/// A key value as a CQL literal (hex bytes if it does not decode as its column's type).
pub fn literal(typ: &ColumnType<'_>, bytes: &[u8]) -> String {
    match CqlValue::type_check(typ)
        .ok()
        .and_then(|()| CqlValue::deserialize(typ, Some(FrameSlice::new_borrowed(bytes))).ok())
    {
        Some(value) => value.to_string(),
        None => {
            format!("0x{}", hex(bytes))
        }
    }
}

/// The record of `row` of `table`, at `time` (RFC 3339).
#[allow(clippy::too_many_arguments)]
pub fn record(
    table: &TableShape,
    key: &[&[u8]],
    row: &PendingRow,
    position: u16,
    request_id: &str,
    outcome: WrapperOutcome,
    error: Option<&crate::sink::WriteError>,
    time: &str,
) -> WrapperRecord {
    WrapperRecord {
        time: time.to_owned(),
        request_id: request_id.to_owned(),
        row: position,
        outcome,
        table: table.qualified_name(),
        key: table
            .key_columns()
            .zip(key.iter().zip(&table.key_types))
            .map(|(column, (bytes, typ))| (column.to_owned(), literal(typ, bytes)))
            .collect(),
        key_hex: Some(key.iter().map(|bytes| hex(bytes)).collect()),
        deltas: table
            .counters
            .iter()
            .zip(row.deltas.iter())
            .filter(|(_, d)| **d != 0)
            .map(|(c, d)| (c.clone(), *d))
            .collect(),
        error_kind: error.map(|e| e.kind.to_owned()),
        error: error.map(|e| e.text.to_string()),
    }
}

/// The three logs.
pub struct Logs {
    logs: [JsonlLog; 3],
}

impl Logs {
    /// Opens (creating) the logs in `dir`.
    pub fn open(dir: &Path, state: &StateConfig) -> std::io::Result<Logs> {
        let open = |outcome: WrapperOutcome| {
            JsonlLog::open(
                dir.join(outcome.file_name()),
                state.max_log_bytes,
                state.max_log_files,
            )
        };
        Ok(Logs {
            logs: [
                open(WrapperOutcome::Unknown)?,
                open(WrapperOutcome::Rejected)?,
                open(WrapperOutcome::Unsent)?,
            ],
        })
    }

    /// Rotates every full log. A flush calls it before it records the logs' sizes in the
    /// journal, so that its appends land in the files those sizes describe.
    pub fn rotate_full(&mut self) {
        for (log, outcome) in self.logs.iter_mut().zip(WrapperOutcome::ALL) {
            if let Err(error) = log.rotate_if_full() {
                tracing::error!(file = outcome.file_name(), %error, "Could not rotate a wrapper log.");
            }
        }
    }

    /// The sizes of `wrapper_unknown.jsonl` and `wrapper_rejected.jsonl`.
    pub fn sizes(&self) -> [u64; 2] {
        [self.logs[0].size(), self.logs[1].size()]
    }

    /// The `(request_id, row)` of the records of one log from `offset` on.
    pub fn keys_from(
        &self,
        outcome: WrapperOutcome,
        offset: u64,
    ) -> std::io::Result<std::collections::HashSet<(String, u16)>> {
        self.logs[outcome as usize].keys_from(offset)
    }

    /// Appends `records` to the log of their outcome and syncs it (no rotation: see
    /// [`Logs::rotate_full`]); the error if that failed.
    pub fn append(
        &mut self,
        outcome: WrapperOutcome,
        records: &[WrapperRecord],
    ) -> std::io::Result<()> {
        let log = &mut self.logs[outcome as usize];
        for record in records {
            log.append(record)?;
        }
        log.sync()
    }

    /// The path of one log.
    pub fn path(&self, outcome: WrapperOutcome) -> &Path {
        self.logs[outcome as usize].path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scylla::cluster::metadata::NativeType;

    #[test]
    fn key_values_print_as_cql_literals() {
        let text = ColumnType::Native(NativeType::Text);
        assert_eq!(literal(&text, b"it's"), "'it''s'");
        let int = ColumnType::Native(NativeType::Int);
        assert_eq!(literal(&int, &7_i32.to_be_bytes()), "7");
        assert_eq!(literal(&int, &[1, 2]), "0x0102");
    }
}
