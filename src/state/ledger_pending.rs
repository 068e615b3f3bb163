//! `ledger_pending.jsonl`: delta-ledger rows formed and not confirmed when a process
//! stopped (the exact families; see `flush::ledger_gate`).
//!
//! At the shutdown deadline with the ledger unreachable, the rows a flush drained for an
//! exact family can neither go to the counter tables (their ledger rows are not
//! confirmed) nor be formed again later (a ledger row formed once is sent verbatim: a row
//! that may already be applied under one identity must not be written again under
//! another). So both are kept: their ledger rows, verbatim, go to this file, and as soon
//! as it is durable the drained rows go to a spill segment of their own (the flush's
//! held segment, `spill.<inc>.<seq>.held.jsonl`), before the flush sends anything more,
//! so a kill later in the final flush finds both. The next start sends these ledger rows
//! first (again, idempotently) and replays no spill until every one is confirmed; then
//! the file is deleted. Only a crash between the two writes (local, nothing is sent in
//! between) loses the drained rows, as a crash loses rows in memory, while their ledger
//! rows are sent again; the other order could replay counter deltas the ledger never
//! recorded, so it is never taken. If the file cannot be written, the rows are lost (not
//! spilled) and their ledger rows are forgotten: no later chunk of the final flush sends
//! them or writes them here.

use std::fs;
use std::io;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::bucket::Minute;
use crate::sink::LedgerRow;

/// The file's name in the state directory.
pub const FILE_NAME: &str = "ledger_pending.jsonl";

/// One ledger row as a line of the file.
#[derive(Serialize, Deserialize)]
struct Line {
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

/// Replaces the file with `rows` (atomically, durably); removes it when `rows` is empty.
pub fn store(dir: &Path, rows: &[LedgerRow]) -> io::Result<()> {
    let path = dir.join(FILE_NAME);
    if rows.is_empty() {
        return remove(dir);
    }
    let mut bytes = Vec::new();
    for row in rows {
        let line = Line {
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
        };
        serde_json::to_writer(&mut bytes, &line).map_err(io::Error::other)?;
        bytes.push(b'\n');
    }
    super::spill::write_atomically(dir, &path, &bytes)
}

/// The rows of the file (none when there is no file). A line that does not parse is an
/// error: the file is only ever written whole, so it means damage, and skipping a row
/// could let its counter deltas replay unrecorded.
pub fn load(dir: &Path) -> io::Result<Vec<LedgerRow>> {
    let path = dir.join(FILE_NAME);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error),
    };
    let mut rows = Vec::new();
    for (number, line) in text.lines().enumerate().filter(|(_, l)| !l.is_empty()) {
        let line: Line = serde_json::from_str(line).map_err(|error| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: line {}: {error}", path.display(), number + 1),
            )
        })?;
        if line.columns.len() != line.deltas.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: line {}: {} columns for {} deltas",
                    path.display(),
                    number + 1,
                    line.columns.len(),
                    line.deltas.len()
                ),
            ));
        }
        rows.push(LedgerRow {
            family: line.family.into(),
            key: line.key.into(),
            bucket: line.bucket,
            minute: Minute(line.minute),
            writer: line.writer.into(),
            incarnation: line.incarnation,
            flush_seq: line.flush_seq,
            part: line.part,
            columns: Arc::from(line.columns),
            deltas: line.deltas.into(),
        });
    }
    Ok(rows)
}

/// Deletes the file (durably); no file is not an error.
pub fn remove(dir: &Path) -> io::Result<()> {
    match fs::remove_file(dir.join(FILE_NAME)) {
        Ok(()) => fs::File::open(dir)?.sync_all(),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(minute: u32, deltas: &[i64]) -> LedgerRow {
        LedgerRow {
            family: "generic".into(),
            key: r#"["api.requests","route:/home"]"#.into(),
            bucket: 3,
            minute: Minute(minute),
            writer: "w1".into(),
            incarnation: 7,
            flush_seq: 42,
            part: 0,
            columns: Arc::from(vec!["value".to_owned(); deltas.len()]),
            deltas: deltas.into(),
        }
    }

    #[test]
    fn stored_rows_load_back_verbatim_and_an_empty_store_removes_the_file() {
        let dir = tempfile::tempdir().expect("dir");
        assert!(load(dir.path()).expect("load").is_empty());
        let rows = vec![row(29_000_000, &[5]), row(29_000_001, &[-3])];
        store(dir.path(), &rows).expect("store");
        assert_eq!(load(dir.path()).expect("load"), rows);
        store(dir.path(), &[]).expect("store none");
        assert!(!dir.path().join(FILE_NAME).exists());
    }

    #[test]
    fn a_damaged_line_is_an_error_not_a_skipped_row() {
        let dir = tempfile::tempdir().expect("dir");
        store(dir.path(), &[row(29_000_000, &[5])]).expect("store");
        let path = dir.path().join(FILE_NAME);
        let mut text = fs::read_to_string(&path).expect("read");
        text.push_str("{\"family\":\"generic\"\n");
        fs::write(&path, text).expect("write");
        let error = load(dir.path()).expect_err("damage");
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        assert!(error.to_string().contains("line 2"), "{error}");
    }
}
