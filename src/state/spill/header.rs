//! A segment's header line: the replay cursor its flush consumed, and the ledger rows
//! a held segment (or an ingest log's) carries.

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::bucket::Minute;
use crate::sink::LedgerRow;

use super::{Cursor, SegmentId};

/// One ledger row as a line of the file, or an entry of a held segment's header.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HeldLedger {
    family: String,
    key: String,
    bucket: i16,
    minute: u32,
    writer: String,
    incarnation: u64,
    flush_seq: u64,
    part: u16,
    columns: Vec<String>,
    deltas: Vec<i64>,
}

impl HeldLedger {
    /// The stored form of `row`.
    pub fn of(row: &LedgerRow) -> HeldLedger {
        HeldLedger {
            family: row.family.to_string(),
            key: row.key.to_string(),
            bucket: row.bucket,
            minute: row.minute.0,
            writer: row.writer.to_string(),
            incarnation: row.incarnation,
            flush_seq: row.flush_seq,
            part: row.part,
            columns: row.columns.to_vec(),
            deltas: row.deltas.to_vec(),
        }
    }

    /// The ledger row, or why the stored form is damaged (`at` names where it was read).
    pub(in crate::state) fn into_row(self, at: &dyn Fn() -> String) -> io::Result<LedgerRow> {
        if self.columns.len() != self.deltas.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: {} columns for {} deltas",
                    at(),
                    self.columns.len(),
                    self.deltas.len()
                ),
            ));
        }
        Ok(LedgerRow {
            family: self.family.into(),
            key: self.key.into(),
            bucket: self.bucket,
            minute: Minute(self.minute),
            writer: self.writer.into(),
            incarnation: self.incarnation,
            flush_seq: self.flush_seq,
            part: self.part,
            columns: Arc::from(self.columns),
            deltas: self.deltas.into(),
        })
    }
}

/// The header line of a segment.
#[derive(Serialize, Deserialize)]
pub(super) struct Header {
    spill_segment: SegmentHeader,
}

#[derive(Serialize, Deserialize)]
struct SegmentHeader {
    consumes: Option<Cursor>,
    /// A held segment's ledger rows: written in the same atomic step as its rows (see
    /// [`super::ledger_pending`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    ledger: Vec<HeldLedger>,
}

/// A segment's header line, newline included.
pub(super) fn header_line(consumes: Option<Cursor>, ledger: &[LedgerRow]) -> io::Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec(&Header {
        spill_segment: SegmentHeader {
            consumes,
            ledger: ledger.iter().map(HeldLedger::of).collect(),
        },
    })
    .map_err(io::Error::other)?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// The ledger rows in the segments' headers of `dir` (held segments, and segments of the
/// ingest log holding increments of exact families), by segment path (see
/// [`crate::state::ledger_pending::load`]). A header that does not parse is an error: a segment
/// is only ever written whole.
pub fn held_ledger(dir: &Path) -> io::Result<Vec<(PathBuf, Vec<HeldLedger>)>> {
    let mut held = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let Some(id) = SegmentId::parse(&entry.file_name().to_string_lossy()) else {
            continue;
        };
        if id.totals || id.recovered {
            // Never written with ledger rows.
            continue;
        }
        let path = entry.path();
        let mut line = Vec::new();
        match File::open(&path) {
            Ok(file) => BufReader::new(file).read_until(b'\n', &mut line)?,
            // Consumed and deleted since the listing.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if !id.held && !is_header_line(&line) {
            // A live segment of an earlier version (no header): no ledger rows.
            continue;
        }
        let header: Header = serde_json::from_slice(line.trim_ascii_end()).map_err(|error| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: header: {error}", path.display()),
            )
        })?;
        held.push((id, path, header.spill_segment.ledger));
    }
    held.sort_by_key(|(id, ..)| *id);
    Ok(held
        .into_iter()
        .filter(|(.., ledger)| !ledger.is_empty())
        .map(|(_, path, ledger)| (path, ledger))
        .collect())
}

/// Whether a line is a segment's header line (its first).
pub fn is_header_line(line: &[u8]) -> bool {
    line.starts_with(b"{\"spill_segment\"")
}

/// The cursor a segment's header names, if it has a header that names one.
pub(super) fn read_header(path: &Path) -> io::Result<Option<Cursor>> {
    let mut line = Vec::new();
    BufReader::new(File::open(path)?).read_until(b'\n', &mut line)?;
    Ok(serde_json::from_slice::<Header>(line.trim_ascii_end())
        .ok()
        .and_then(|h| h.spill_segment.consumes))
}
