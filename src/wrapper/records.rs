//! The records of flushed rows that did not simply apply: [`WriteRecord`]s whose target
//! is the application's table, in the state directory's outcome logs beside the
//! sidecar's (`unknown.jsonl`, `rejected.jsonl`: the same rotation and size limits,
//! `state.max_log_bytes` and `state.max_log_files`).
//!
//! | outcome | where |
//! |---|---|
//! | `unknown` | `unknown.jsonl`: may or may not have applied; never re-sent, reconcile by hand |
//! | `rejected` | `rejected.jsonl`: refused by the store for good; or definitely not applied and not replayable (`error.kind` `spill_full`: past `state.max_spill_bytes`; `not_replayable`: no longer matching its table's schema at replay): apply by hand if wanted |
//! | `spilled` | the spill segments ([`crate::state::spill`]), replayed by the next start |
//!
//! A record names the request (`writer/incarnation/wFLUSH/request`), the table, the key
//! as CQL literals (and as the bytes' hex, `key_hex`), and every non-zero delta, so a row
//! can be checked against the store and applied by hand with one UPDATE.

use scylla::cluster::metadata::ColumnType;
use scylla::deserialize::FrameSlice;
use scylla::deserialize::value::DeserializeValue;
use scylla::value::CqlValue;

use crate::sink::WriteError;
use crate::state::wrapper_files::{TableRecordSource, table_record};
pub use crate::state::wrapper_files::{hex, unhex};
pub use crate::state::{ErrorInfo, RecordOutcome, WriteRecord};

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

/// The record of `row` of `table`, at position `position` of its request.
pub fn record(
    table: &TableShape,
    key: &[&[u8]],
    row: &PendingRow,
    position: u16,
    source: TableRecordSource<'_>,
    outcome: RecordOutcome,
    error: Option<&WriteError>,
) -> WriteRecord {
    let literals = table
        .key_columns()
        .zip(key.iter().zip(&table.key_types))
        .map(|(column, (bytes, typ))| (column.to_owned(), literal(typ, bytes)))
        .collect();
    let deltas = table.counters.iter().zip(row.deltas.iter());
    let mut record = table_record(
        &table.qualified_name(),
        literals,
        key,
        deltas,
        source,
        outcome,
    );
    record.row = position;
    record.error = error.map(ErrorInfo::of);
    record
}

/// Why a row definitely not applied is not in the spill: the spill is full. `failed`:
/// how its write failed, if it was sent.
pub fn spill_full(failed: Option<&ErrorInfo>) -> ErrorInfo {
    let mut text =
        "the spill is at state.max_spill_bytes: not applied, and not replayed".to_owned();
    if let Some(failed) = failed {
        text.push_str(&format!(
            " (its write failed: {}: {})",
            failed.kind, failed.text
        ));
    }
    ErrorInfo {
        kind: "spill_full".into(),
        text,
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
