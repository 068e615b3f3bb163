//! The `writer_totals` spill files of earlier versions, `totals.spill.jsonl` and
//! `totals.replay.<tag>.jsonl`: read (by `countersink outcomes` until a start moves
//! them) and moved, at start, into one spill segment, after which running totals replay
//! through the one cursor like every other spilled write.
//!
//! Those versions wrote their own record type ([`LegacyTotalRecord`]); a line becomes a
//! [`WriteRecord`] with its [`TotalOf`]: the same writer column, absolute totals and
//! write time, its unconfirmed part as deltas. Their lines set aside,
//! `totals.spill.corrupt.jsonl`, stay where they are (read by nobody, never written).

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::ids::SegmentId;
use super::jsonl::LineReader;
use super::record::{ErrorInfo, RecordOutcome, TotalOf, WriteRecord};

/// The spill file of earlier versions.
pub const SPILL_FILE: &str = "totals.spill.jsonl";

/// The start of a replay file's name of earlier versions: `totals.replay.<tag>.jsonl`.
pub const REPLAY_PREFIX: &str = "totals.replay.";

/// The segment the files of an earlier version are moved into by the start of
/// `incarnation` ([`SegmentId::migration`]); its rows are accepted anew when replayed,
/// as an earlier run's.
pub fn migration_target(incarnation: u64) -> SegmentId {
    SegmentId::migration(incarnation, true)
}

/// The segment an earlier start moved the old files into, if it is still there.
pub fn migrated(dir: &Path) -> io::Result<Option<SegmentId>> {
    SegmentId::migration_in(dir, true)
}

/// A spilled running total as earlier versions wrote it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LegacyTotalRecord {
    /// When it was spilled, RFC 3339 UTC.
    pub time: String,
    /// The writer column (writer id, incarnation, start nonce).
    pub writer: String,
    /// Family name.
    pub family: String,
    /// `keyspace.table`.
    pub table: String,
    /// `minute` or `day`.
    pub granularity: String,
    /// Key column → value.
    pub key: BTreeMap<String, String>,
    /// The day, `YYYY-MM-DD`.
    pub day: String,
    /// Minute of the day (minute table only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minute: Option<i16>,
    /// The month partition, `YYYY-MM` (day table only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub month: Option<String>,
    /// Value column → the writer's absolute total.
    pub totals: BTreeMap<String, i64>,
    /// Value column → the part of the total not known applied.
    pub unconfirmed: BTreeMap<String, i64>,
    /// The write time, microseconds.
    pub timestamp: i64,
    /// The last error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
}

impl LegacyTotalRecord {
    /// The record as this version writes it: writer and incarnation from its writer
    /// column, the column itself as the request (`<column>/totals`), `row` its line.
    pub fn into_record(self, row: u16) -> WriteRecord {
        let mut column = self.writer.split('/');
        let writer = column.next().unwrap_or_default().to_owned();
        let incarnation = column.next().and_then(|s| s.parse().ok()).unwrap_or(0);
        WriteRecord {
            time: self.time,
            writer,
            incarnation,
            flush_seq: 0,
            request_id: format!("{}/totals", self.writer),
            row,
            outcome: RecordOutcome::Spilled,
            family: self.family,
            table: self.table,
            granularity: self.granularity,
            key: self.key,
            key_hex: None,
            shard: None,
            epoch: None,
            day: self.day,
            minute: self.minute,
            month: self.month,
            hour: None,
            deltas: self
                .unconfirmed
                .into_iter()
                .filter(|(_, v)| *v != 0)
                .collect(),
            error: self.error,
            total: Some(TotalOf {
                column: self.writer,
                totals: self.totals,
                timestamp: self.timestamp,
            }),
        }
    }
}

/// The totals files of an earlier version in `dir`: the spill, then the replay files,
/// by name.
pub fn legacy_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut replays = Vec::new();
    let mut spill = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name == SPILL_FILE {
            spill.push(entry.path());
        } else if name.starts_with(REPLAY_PREFIX) && name.ends_with(".jsonl") {
            replays.push(entry.path());
        }
    }
    replays.sort();
    spill.extend(replays);
    Ok(spill)
}

/// Moves the totals files of an earlier version into the segment [`migration_target`],
/// streamed (a file may be larger than memory), then removes them. Every line moves:
/// a total re-sent is harmless, so none is skipped; a line that does not read as a
/// record moves as it was, and the segment's reader sets it aside as unreadable.
///
/// Kill-safe: the segment is written whole (temporary file, fsync, rename) before the
/// old files go, and a start that finds the segment and old files both only removes the
/// files. Returns how many records it moved.
pub(super) fn migrate_spill(dir: &Path, incarnation: u64) -> io::Result<u64> {
    let files = legacy_files(dir)?;
    if files.is_empty() {
        return Ok(0);
    }
    let target = dir.join(migration_target(incarnation).file_name());
    let mut moved = 0_u64;
    if migrated(dir)?.is_none() {
        let mut fill = |out: &mut dyn Write| -> io::Result<()> {
            for path in &files {
                let mut reader = LineReader::open(path, 0)?;
                let mut row = 0_u16;
                while let Some(line) = reader.next_line()? {
                    if line.text.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    match serde_json::from_slice::<LegacyTotalRecord>(line.text) {
                        Ok(record) => {
                            serde_json::to_writer(&mut *out, &record.into_record(row))
                                .map_err(io::Error::other)?;
                            row = row.saturating_add(1);
                            moved += 1;
                        }
                        Err(_) => out.write_all(line.text)?,
                    }
                    out.write_all(b"\n")?;
                }
            }
            Ok(())
        };
        // No segment for files that hold nothing.
        let mut bytes = 0_u64;
        for path in &files {
            bytes += fs::metadata(path)?.len();
        }
        if bytes > 0 {
            super::private::write_atomically_with(dir, &target, |out| fill(out))?;
        }
    }
    crate::test_hooks::crash_point("totals_spill_migrated");
    for path in &files {
        match fs::remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    super::private::sync_dir(dir)?;
    Ok(moved)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn legacy(page: &str, views: i64) -> LegacyTotalRecord {
        LegacyTotalRecord {
            time: "2026-11-30T00:00:00Z".into(),
            writer: "earlier/2/0000abcd".into(),
            family: "views".into(),
            table: "metrics.views_by_minute".into(),
            granularity: "minute".into(),
            key: [("page_id".to_string(), page.to_string())].into(),
            day: "2026-11-30".into(),
            minute: Some(7),
            month: None,
            totals: [("views".to_string(), views + 10)].into(),
            unconfirmed: [("views".to_string(), views)].into(),
            timestamp: 1_000,
            error: None,
        }
    }

    /// The incarnation of the start that moves the files.
    const START: u64 = 5;

    fn lines(records: &[LegacyTotalRecord]) -> String {
        records
            .iter()
            .map(|r| serde_json::to_string(r).unwrap() + "\n")
            .collect()
    }

    fn segment_rows(dir: &Path) -> Vec<WriteRecord> {
        migrated(dir)
            .unwrap()
            .map(|id| fs::read_to_string(dir.join(id.file_name())).unwrap())
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The spill and replay files of an earlier version move into one segment, each row
    /// once, as records of this version that write the same cell again.
    #[test]
    fn an_earlier_versions_totals_files_move_into_one_segment() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(SPILL_FILE), lines(&[legacy("a", 1)])).unwrap();
        fs::write(
            dir.path().join("totals.replay.3-0.jsonl"),
            lines(&[legacy("b", 2), legacy("c", 0)]),
        )
        .unwrap();
        assert_eq!(migrate_spill(dir.path(), START).unwrap(), 3);
        let rows = segment_rows(dir.path());
        let pages: Vec<&str> = rows.iter().map(|r| r.key["page_id"].as_str()).collect();
        assert_eq!(pages, ["a", "b", "c"]);
        let b = &rows[1];
        assert_eq!((b.writer.as_str(), b.incarnation), ("earlier", 2));
        assert_eq!(b.deltas, [("views".to_string(), 2)].into());
        assert_eq!(
            b.total,
            Some(TotalOf {
                column: "earlier/2/0000abcd".into(),
                totals: [("views".to_string(), 12)].into(),
                timestamp: 1_000,
            })
        );
        assert!(rows[2].deltas.is_empty(), "nothing unconfirmed: no delta");
        assert!(legacy_files(dir.path()).unwrap().is_empty());
        // Nothing left to move: a second start changes nothing.
        assert_eq!(migrate_spill(dir.path(), START + 1).unwrap(), 0);
        assert_eq!(segment_rows(dir.path()).len(), 3);
    }

    /// A start killed after the segment was written, before the old files went: the
    /// next start finds both and only removes the files, so no row is moved twice.
    #[test]
    fn a_move_cut_short_is_finished_without_moving_a_row_twice() {
        let dir = tempfile::tempdir().unwrap();
        let old = lines(&[legacy("a", 1), legacy("b", 2)]);
        fs::write(dir.path().join(SPILL_FILE), &old).unwrap();
        assert_eq!(migrate_spill(dir.path(), START).unwrap(), 2);
        // As if the removal had not happened; the next start is the next incarnation.
        fs::write(dir.path().join(SPILL_FILE), &old).unwrap();
        assert_eq!(migrate_spill(dir.path(), START + 1).unwrap(), 0);
        assert_eq!(segment_rows(dir.path()).len(), 2);
        assert!(!dir.path().join(SPILL_FILE).exists());
        // Killed before the segment's rename: its temporary file is not a segment, and
        // the move starts over from the old files.
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(SPILL_FILE), &old).unwrap();
        fs::write(
            dir.path()
                .join(migration_target(START).file_name())
                .with_extension("tmp"),
            "{\"torn",
        )
        .unwrap();
        assert_eq!(migrate_spill(dir.path(), START).unwrap(), 2);
        assert_eq!(segment_rows(dir.path()).len(), 2);
    }

    /// A torn last line (an append cut short) moves as it was, to be set aside by the
    /// segment's reader; empty files leave no segment.
    #[test]
    fn a_torn_line_moves_as_it_was_and_empty_files_leave_no_segment() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(SPILL_FILE), "").unwrap();
        assert_eq!(migrate_spill(dir.path(), START).unwrap(), 0);
        assert_eq!(migrated(dir.path()).unwrap(), None);
        assert!(!dir.path().join(SPILL_FILE).exists());
        let text = lines(&[legacy("a", 1)]) + "{\"time\":\"t\",\"wri";
        fs::write(dir.path().join(SPILL_FILE), text).unwrap();
        assert_eq!(migrate_spill(dir.path(), START).unwrap(), 1);
        let segment =
            fs::read_to_string(dir.path().join(migration_target(START).file_name())).unwrap();
        assert_eq!(segment.lines().count(), 2);
        assert!(segment.ends_with("{\"time\":\"t\",\"wri\n"));
    }

    /// The moved segment sorts after every cursor an earlier run could leave (one that
    /// sorted before it would count as consumed and be deleted unread) and before all
    /// this start will spill.
    #[test]
    fn the_moved_segment_sorts_after_earlier_cursors_and_before_this_runs_spill() {
        let target = migration_target(START);
        assert!(target > SegmentId::live(START - 1, u64::MAX - 1));
        assert!(target > SegmentId::recovered(START - 1, 1 << 40));
        assert!(target > SegmentId::totals(START - 1, 1 << 40, true));
        assert!(target < SegmentId::live(START, 0));
        assert!(target < SegmentId::totals(START, 1, false));
    }
}
