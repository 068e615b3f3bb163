//! The driver wrapper's files in the state directory, as every reader sees them: the
//! layout of a row key in its journal intents, what recovery writes for an unended
//! wrapper flush ([`group_records`]), and the files of earlier versions: the logs of
//! versions before the wrapper shared the outcome logs, and the spill
//! `wrapper_spill.jsonl` with its cursor of versions before it shared the spill
//! segments (a start moves it into one).
//!
//! The wrapper's records are [`WriteRecord`]s whose [`super::Target`] is an application
//! table (no family, no granularity, no day; `key` as CQL literals and `key_hex`, the
//! key values' bytes). Unknown and rejected rows go to `unknown.jsonl` and
//! `rejected.jsonl` beside the sidecar's; rows definitely not applied that a later start
//! replays go to the spill segments, beside the sidecar's. The wrapper writes them (`crate::wrapper`);
//! `countersink outcomes` reads them through this module, so that the operator tools
//! need nothing of the wrapper itself.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::Path;

use serde::Deserialize;

use super::ids::SegmentId;
use super::jsonl::LineReader;

use super::journal::{FlushGroup, WrapperGroup, WrapperTable};
use super::record::{ErrorInfo, RecordOutcome, WriteRecord};
use super::recovery::home_of;

/// The wrapper's spill file of earlier versions (a start moves it into a segment).
pub const SPILL_FILE: &str = "wrapper_spill.jsonl";

/// That spill's replay cursor file (a byte offset).
pub const CURSOR_FILE: &str = "wrapper_spill.cursor";

/// Moves the spill an earlier version of the wrapper wrote (`wrapper_spill.jsonl`, read
/// from its cursor on) into the segment the start of `incarnation` names
/// ([`SegmentId::migration`], as for the `writer_totals` files: after every segment and
/// cursor an earlier run left), then removes the file and its cursor. `journal_offset`:
/// the furthest offset a committed flush of that version consumed (its rows are in that
/// flush's intents, and its recovery's to place).
///
/// Kill-safe: the segment is written whole (temporary file, fsync, rename) before the
/// old files go, and a start that finds the segment and the file both only removes the
/// file. Returns how many rows it moved.
pub(super) fn migrate_spill(
    dir: &Path,
    journal_offset: Option<u64>,
    incarnation: u64,
) -> io::Result<u64> {
    let path = dir.join(SPILL_FILE);
    let cursor_path = dir.join(CURSOR_FILE);
    if !path.exists() {
        remove_if_present(&cursor_path)?;
        return Ok(0);
    }
    let target = dir.join(SegmentId::migration(incarnation, false).file_name());
    let mut moved = 0;
    if SegmentId::migration_in(dir, false)?.is_none() {
        let on_disk = match fs::read_to_string(&cursor_path) {
            Ok(text) => text.trim().parse::<u64>().unwrap_or(0),
            Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e),
        };
        let from = on_disk.max(journal_offset.unwrap_or(0));
        let mut out = Vec::new();
        let mut lines = LineReader::open(&path, from)?;
        while let Some(line) = lines.next_line()? {
            if !line.complete {
                // A torn last append: never synced, so its flush's recovery places it.
                break;
            }
            match read_line(line.text, true) {
                Some(record) => {
                    serde_json::to_writer(&mut out, &record).map_err(io::Error::other)?;
                    moved += 1;
                }
                // Kept as it was: the segment's reader sets it aside as unreadable.
                None => out.extend_from_slice(line.text),
            }
            out.push(b'\n');
        }
        if !out.is_empty() {
            super::private::write_atomically(dir, &target, &out)?;
        }
    }
    crate::test_hooks::crash_point("wrapper_spill_migrated");
    remove_if_present(&path)?;
    remove_if_present(&cursor_path)?;
    super::private::sync_dir(dir)?;
    Ok(moved)
}

fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// The stems of the wrapper's own logs of earlier versions (each rotated as
/// `<stem>.N.jsonl`): read by `countersink outcomes`, never written any more.
pub const LEGACY_LOG_STEMS: [&str; 3] = ["wrapper_unknown", "wrapper_rejected", "wrapper_unsent"];

/// A line of the wrapper's files as earlier versions wrote them (its own record type,
/// the error as two strings): read so that an upgrade loses no spilled row and
/// `countersink outcomes` still shows the old logs, never written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LegacyWrapperRecord {
    time: String,
    request_id: String,
    row: u16,
    /// `unknown`, `rejected` or `unsent`.
    outcome: String,
    table: String,
    key: BTreeMap<String, String>,
    #[serde(default)]
    key_hex: Option<Vec<String>>,
    deltas: BTreeMap<String, i64>,
    #[serde(default)]
    error_kind: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

impl LegacyWrapperRecord {
    /// The record as this version writes it. `in_spill`: read from the spill, where an
    /// `unsent` row waits to be replayed; in a log it was not applied and is not to be
    /// sent again (`rejected`). Writer, incarnation and flush come from its request id
    /// (`writer/incarnation/wSEQ/request`).
    pub fn into_record(self, in_spill: bool) -> WriteRecord {
        let outcome = match self.outcome.as_str() {
            "unknown" => RecordOutcome::Unknown,
            "unsent" if in_spill => RecordOutcome::Spilled,
            _ => RecordOutcome::Rejected,
        };
        let mut parts = self.request_id.rsplitn(4, '/');
        let _request = parts.next();
        let flush_seq = parts
            .next()
            .and_then(|s| s.strip_prefix('w'))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let incarnation = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
        let writer = parts.next().unwrap_or_default().to_owned();
        WriteRecord {
            total: None,
            time: self.time,
            writer,
            incarnation,
            flush_seq,
            request_id: self.request_id,
            row: self.row,
            outcome,
            family: String::new(),
            table: self.table,
            granularity: String::new(),
            key: self.key,
            key_hex: self.key_hex,
            shard: None,
            epoch: None,
            day: String::new(),
            minute: None,
            month: None,
            hour: None,
            deltas: self.deltas,
            error: self.error_kind.map(|kind| ErrorInfo {
                kind,
                text: self.error.unwrap_or_default(),
            }),
        }
    }
}

/// A line of the wrapper's spill or of an old wrapper log, whichever version wrote it.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum WrapperLine {
    /// As this version writes it.
    Current(WriteRecord),
    /// As earlier versions wrote it.
    Legacy(LegacyWrapperRecord),
}

impl WrapperLine {
    /// The record (see [`LegacyWrapperRecord::into_record`] for `in_spill`).
    pub fn into_record(self, in_spill: bool) -> WriteRecord {
        match self {
            WrapperLine::Current(record) => record,
            WrapperLine::Legacy(legacy) => legacy.into_record(in_spill),
        }
    }
}

/// A line of the wrapper's spill or of an old wrapper log as a record, if it reads as one.
pub fn read_line(line: &[u8], in_spill: bool) -> Option<WriteRecord> {
    serde_json::from_slice::<WrapperLine>(line)
        .ok()
        .map(|line| line.into_record(in_spill))
}

/// The request id of request `request` of wrapper flush `seq`.
pub fn request_id(writer: &str, incarnation: u64, seq: u64, request: u32) -> String {
    format!("{}{request}", request_prefix(writer, incarnation, seq))
}

/// What every request id of wrapper flush `seq` starts with.
pub fn request_prefix(writer: &str, incarnation: u64, seq: u64) -> String {
    format!("{writer}/{incarnation}/w{seq}/")
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
/// `spilled` (to the wrapper's spill), `rejected` or `unknown`, where the sidecar's
/// recovery classifier ([`home_of`]) puts each request (`is_last`: no later group follows
/// it in the journal). `literal` prints key value `i` of a table as a CQL literal (the
/// wrapper uses the driver's schema metadata; without it, hex). Also what `countersink
/// outcomes` shows for such a flush.
pub fn group_records(
    group: &FlushGroup,
    wrapper: &WrapperGroup,
    is_last: bool,
    time: &str,
    literal: &dyn Fn(&WrapperTable, usize, &[u8]) -> String,
) -> Vec<WriteRecord> {
    let mut out = Vec::new();
    for intent in &wrapper.intents {
        let Some(table) = wrapper.table(intent.table) else {
            continue;
        };
        let (Some(outcome), error) = home_of(group, intent.request, is_last) else {
            continue;
        };
        let id = request_id(
            &group.flush.writer,
            group.flush.incarnation,
            group.flush.flush_seq,
            intent.request,
        );
        for (i, row) in intent.rows.iter().enumerate() {
            let Some((_, values)) = split_key(&row.key) else {
                continue;
            };
            let key = table
                .key_columns
                .iter()
                .zip(&values)
                .enumerate()
                .map(|(n, (column, bytes))| (column.clone(), literal(table, n, bytes)))
                .collect();
            let deltas = table.counters.iter().zip(&row.deltas[..]);
            let mut record = table_record(
                &format!("{}.{}", table.keyspace, table.name),
                key,
                &values,
                deltas,
                TableRecordSource {
                    writer: &group.flush.writer,
                    incarnation: group.flush.incarnation,
                    flush_seq: group.flush.flush_seq,
                    request_id: &id,
                    time,
                },
                outcome,
            );
            record.row = u16::try_from(i).unwrap_or(u16::MAX);
            record.error.clone_from(&error);
            out.push(record);
        }
    }
    out
}

/// Who wrote a row of an application table, and when its outcome was recorded.
#[derive(Clone, Copy, Debug)]
pub struct TableRecordSource<'a> {
    /// The writer id.
    pub writer: &'a str,
    /// The state directory's incarnation.
    pub incarnation: u64,
    /// The wrapper flush.
    pub flush_seq: u64,
    /// The request (see [`request_id`]).
    pub request_id: &'a str,
    /// RFC 3339.
    pub time: &'a str,
}

/// The record of one row of an application table (row 0 of its request, no error: the
/// caller sets both): `key` as CQL literals, `values` the key values' bytes, `deltas`
/// (column, delta) of which the non-zero ones are kept.
pub fn table_record<'c>(
    table: &str,
    key: BTreeMap<String, String>,
    values: &[&[u8]],
    deltas: impl IntoIterator<Item = (&'c String, &'c i64)>,
    source: TableRecordSource<'_>,
    outcome: RecordOutcome,
) -> WriteRecord {
    WriteRecord {
        total: None,
        time: source.time.to_owned(),
        writer: source.writer.to_owned(),
        incarnation: source.incarnation,
        flush_seq: source.flush_seq,
        request_id: source.request_id.to_owned(),
        row: 0,
        outcome,
        family: String::new(),
        table: table.to_owned(),
        granularity: String::new(),
        key,
        key_hex: Some(values.iter().map(|bytes| hex(bytes)).collect()),
        shard: None,
        epoch: None,
        day: String::new(),
        minute: None,
        month: None,
        hour: None,
        deltas: deltas
            .into_iter()
            .filter(|(_, d)| **d != 0)
            .map(|(c, d)| (c.clone(), *d))
            .collect(),
        error: None,
    }
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

    const OLD: &str = r#"{"time":"t","request_id":"app/3/w7/2","row":1,"outcome":"unsent","table":"ks.t","key":{"k":"'a'"},"key_hex":["61"],"deltas":{"c":5},"error_kind":"write_timeout","error":"timed out"}"#;

    fn line(row: u16) -> String {
        OLD.replace("\"row\":1", &format!("\"row\":{row}"))
    }

    /// The incarnation of the start that moves the files.
    const START: u64 = 4;

    fn segment_rows(dir: &Path) -> Vec<WriteRecord> {
        let moved = SegmentId::migration(START, false);
        let text = fs::read_to_string(dir.join(moved.file_name())).unwrap_or_default();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// An upgrade moves the spill an earlier version wrote, in its own record type, into
    /// a segment: from its cursor on, each row once, as a record of this version.
    #[test]
    fn an_earlier_versions_spill_moves_into_a_segment_from_its_cursor_on() {
        let dir = tempfile::tempdir().unwrap();
        let lines: String = (0..3).map(|r| line(r) + "\n").collect();
        let second = line(0).len() as u64 + 1;
        fs::write(dir.path().join(SPILL_FILE), &lines).unwrap();
        fs::write(dir.path().join(CURSOR_FILE), second.to_string()).unwrap();
        assert_eq!(migrate_spill(dir.path(), None, START).unwrap(), 2);
        let rows = segment_rows(dir.path());
        assert_eq!(rows.iter().map(|r| r.row).collect::<Vec<_>>(), [1, 2]);
        let record = &rows[0];
        assert_eq!(record.outcome, RecordOutcome::Spilled);
        assert_eq!(record.target(), super::super::Target::Table("ks.t"));
        assert_eq!(
            (record.writer.as_str(), record.incarnation, record.flush_seq),
            ("app", 3, 7)
        );
        assert_eq!(record.key_hex, Some(vec!["61".to_owned()]));
        assert_eq!(record.deltas, [("c".to_owned(), 5)].into());
        assert!(!dir.path().join(SPILL_FILE).exists());
        assert!(!dir.path().join(CURSOR_FILE).exists());
        // Nothing left to move: a second start changes nothing.
        assert_eq!(migrate_spill(dir.path(), None, START + 1).unwrap(), 0);
        assert_eq!(segment_rows(dir.path()).len(), 2);
    }

    /// The offset a committed flush of the earlier version consumed counts (its rows are
    /// its recovery's), and a torn last line is left to that recovery.
    #[test]
    fn a_journal_offset_counts_and_a_torn_last_line_is_not_moved() {
        let dir = tempfile::tempdir().unwrap();
        let third = 2 * (line(0).len() as u64 + 1);
        let lines = format!("{}\n{}\n{}\n{}", line(0), line(1), line(2), &line(3)[..20]);
        fs::write(dir.path().join(SPILL_FILE), lines).unwrap();
        assert_eq!(migrate_spill(dir.path(), Some(third), START).unwrap(), 1);
        assert_eq!(segment_rows(dir.path())[0].row, 2);
    }

    /// A start killed after the segment was written, before the old file went: the next
    /// start finds both and only removes the file, so no row is moved (and replayed)
    /// twice.
    #[test]
    fn a_move_cut_short_is_finished_without_moving_a_row_twice() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join(SPILL_FILE),
            line(0) + "\n" + &line(1) + "\n",
        )
        .unwrap();
        assert_eq!(migrate_spill(dir.path(), None, START).unwrap(), 2);
        // As if the removal had not happened.
        fs::write(
            dir.path().join(SPILL_FILE),
            line(0) + "\n" + &line(1) + "\n",
        )
        .unwrap();
        // The next start, numbered one further, finds the segment the first wrote.
        assert_eq!(migrate_spill(dir.path(), None, START + 1).unwrap(), 0);
        assert_eq!(segment_rows(dir.path()).len(), 2);
        assert!(!dir.path().join(SPILL_FILE).exists());
        // A cursor left alone (its file gone first) is removed.
        fs::write(dir.path().join(CURSOR_FILE), "10").unwrap();
        migrate_spill(dir.path(), None, START + 1).unwrap();
        assert!(!dir.path().join(CURSOR_FILE).exists());
    }
}
