//! Delta-ledger rows formed and not confirmed when a process stopped (the exact families;
//! see `flush::ledger_gate`), and where they wait for the next start.
//!
//! At the shutdown deadline with the ledger unreachable, the rows a flush drained for an
//! exact family can neither go to the counter tables (their ledger rows are not
//! confirmed) nor be formed again later (a ledger row formed once is sent verbatim: a row
//! that may already be applied under one identity must not be written again under
//! another). So both are kept, in one atomic write: the drained rows go to a spill
//! segment of their own (the flush's held segment, `spill.<inc>.<seq>.held.jsonl`), whose
//! header carries their ledger rows verbatim (`spill::HeldLedger`), before the flush sends
//! anything more. A kill at any point of the final flush finds both or neither: never
//! rows whose ledger rows are lost (their deltas would replay unrecorded), never ledger
//! rows whose rows are lost (the ledger would record deltas no counter received).
//!
//! Only when that segment cannot be written (the spill is full or failing: the rows are
//! dropped, counted, and the outcomes table says so) do their ledger rows go to
//! `ledger_pending.jsonl` (this module's file): they may be applied already, and the
//! ledger must then record them, with the drop explained. If that file cannot be written
//! either, the ledger rows are forgotten: no later chunk of the final flush sends them or
//! writes them here.
//!
//! The ingest log's segments carry the ledger rows of their exact families' increments
//! in their headers the same way (see `flush/flusher/ingest.rs`).
//!
//! The next start ([`load`]) sends the ledger rows of the file and of every segment
//! first (again, idempotently) and replays no spill until every one is confirmed; then
//! the file is deleted (a held segment goes once replay consumed it; a start before that
//! sends its ledger rows once more, harmlessly).

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::Path;

use crate::sink::LedgerRow;

use super::spill::HeldLedger;

/// The file's name in the state directory.
pub const FILE_NAME: &str = "ledger_pending.jsonl";

/// Replaces the file with `rows` (atomically, durably); removes it when `rows` is empty.
pub fn store(dir: &Path, rows: &[LedgerRow]) -> io::Result<()> {
    let path = dir.join(FILE_NAME);
    if rows.is_empty() {
        return remove(dir);
    }
    let mut bytes = Vec::new();
    for row in rows {
        serde_json::to_writer(&mut bytes, &HeldLedger::of(row)).map_err(io::Error::other)?;
        bytes.push(b'\n');
    }
    super::private::write_atomically(dir, &path, &bytes)
}

/// Every ledger row waiting to be confirmed: those of the file, then those of the held
/// segments' headers, each once. Damage is an error, not a skipped row: both are only
/// ever written whole, and skipping a row could let its counter deltas replay
/// unrecorded.
pub fn load(dir: &Path) -> io::Result<Vec<LedgerRow>> {
    let mut rows = load_file(dir)?;
    for (path, entries) in super::spill::held_ledger(dir)? {
        for (index, entry) in entries.into_iter().enumerate() {
            rows.push(
                entry
                    .into_row(&|| format!("{}: header ledger row {}", path.display(), index + 1))?,
            );
        }
    }
    // A row is in the file and a header only if a store of the file repeated it (it
    // holds every unconfirmed row): one request each is enough.
    let mut seen = HashSet::new();
    rows.retain(|row| {
        seen.insert((
            row.family.clone(),
            row.key.clone(),
            row.minute,
            row.writer.clone(),
            row.incarnation,
            row.flush_seq,
            row.part,
        ))
    });
    Ok(rows)
}

/// The rows of the file alone (none when there is no file).
pub fn load_file(dir: &Path) -> io::Result<Vec<LedgerRow>> {
    let path = dir.join(FILE_NAME);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error),
    };
    let mut rows = Vec::new();
    for (number, line) in text.lines().enumerate().filter(|(_, l)| !l.is_empty()) {
        let at = || format!("{}: line {}", path.display(), number + 1);
        let line: HeldLedger = serde_json::from_str(line).map_err(|error| {
            io::Error::new(io::ErrorKind::InvalidData, format!("{}: {error}", at()))
        })?;
        rows.push(line.into_row(&at)?);
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
    use std::sync::Arc;

    use super::*;
    use crate::bucket::Minute;

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
