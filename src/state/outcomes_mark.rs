//! `outcomes.mark`: how far the outcome logs (`unknown.jsonl`, `rejected.jsonl`) are known
//! to be in the store's outcomes table (exact families; see `flush::exact_outcomes`).
//!
//! The logs are written first; the outcomes table gets the same rows from an in-memory
//! queue. Whenever that queue is empty, every record logged so far is in the table (or
//! was dropped from a full queue, counted), and the logs' sizes are recorded here. A
//! start offers the table every record logged past the mark again: the rows a kill or a
//! stop with the table unreachable left unwritten. Rows are written idempotently, so a
//! record offered twice costs a write, never a wrong row.

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Seek, SeekFrom};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::WriteRecord;
use super::jsonl::rotated_name;

/// The file's name in the state directory.
pub const FILE_NAME: &str = "outcomes.mark";

/// Sizes of the outcome logs, in bytes, when everything logged was in the table, and
/// which files they were (inode numbers: a log rotated since is found by its number).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    /// `unknown.jsonl`.
    pub unknown: u64,
    /// `rejected.jsonl`.
    pub rejected: u64,
    /// `unknown.jsonl`'s inode number then (0: unknown, or no file).
    #[serde(default)]
    pub unknown_file: u64,
    /// `rejected.jsonl`'s inode number then.
    #[serde(default)]
    pub rejected_file: u64,
}

/// The inode number of the file at `path` (0 when there is none).
pub fn file_id(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(path).map_or(0, |meta| meta.ino())
}

/// The mark (none when there is no file, or it does not parse: then every record of the
/// logs is offered again, which is safe).
pub fn load(dir: &Path) -> Option<Mark> {
    let text = fs::read_to_string(dir.join(FILE_NAME)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Records the mark (atomically).
pub fn store(dir: &Path, mark: Mark) -> io::Result<()> {
    let bytes = serde_json::to_vec(&mark).map_err(io::Error::other)?;
    super::private::write_atomically(dir, &dir.join(FILE_NAME), &bytes)
}

/// Calls `each` with every record of the log at `path` past byte `offset` of the file
/// whose inode number was `file` (0: not known, then only a log shorter than `offset` is
/// taken as rotated, once). When the log was rotated since (rotation renames, so the file keeps
/// its number as `name.N.jsonl`), the rest of that file and every newer one, whole, are
/// read, oldest first; if that file is gone, every rotated file left. Lines that do not
/// parse are skipped (recovery and the corrupt-line counters deal with them).
pub fn records_past(
    path: &Path,
    offset: u64,
    file: u64,
    mut each: impl FnMut(WriteRecord),
) -> io::Result<()> {
    let size = match fs::metadata(path) {
        Ok(meta) => meta.len(),
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
    };
    // A deleted file's inode number can be reused: a file with the marked number but
    // shorter than the mark is a newer one.
    let unrotated = size >= offset && (file == 0 || file_id(path) == file);
    if unrotated {
        return read_from(path, offset, &mut each);
    }
    // The rotated files, newest first, up to the marked one.
    let mut older = Vec::new();
    let mut from = 0;
    // Rotated files are numbered without gaps: the first missing one ends the search.
    for n in 1..=u32::MAX {
        let rotated = rotated_name(path, n);
        let id = file_id(&rotated);
        if id == 0 {
            break;
        }
        older.push(rotated);
        if file == 0 || id == file {
            from = offset;
            break;
        }
    }
    for (index, rotated) in older.iter().enumerate().rev() {
        let start = if index + 1 == older.len() { from } else { 0 };
        read_from(rotated, start, &mut each)?;
    }
    read_from(path, 0, &mut each)
}

fn read_from(path: &Path, offset: u64, each: &mut impl FnMut(WriteRecord)) -> io::Result<()> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
    };
    if file.metadata()?.len() <= offset {
        return Ok(());
    }
    file.seek(SeekFrom::Start(offset))?;
    for line in BufReader::new(file).lines() {
        if let Ok(record) = serde_json::from_str::<WriteRecord>(&line?) {
            each(record);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn line(n: u16) -> String {
        format!(
            r#"{{"time":"t","writer":"w","incarnation":1,"flush_seq":1,"request_id":"r","row":{n},"outcome":"unknown","family":"generic","table":"ks.t","granularity":"minute","key":{{}},"day":"2026-11-30","minute":1,"deltas":{{"value":1}}}}"#
        ) + "\n"
    }

    fn append(path: &Path, rows: std::ops::Range<u16>) {
        let mut file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        for n in rows {
            file.write_all(line(n).as_bytes()).unwrap();
        }
    }

    /// Rotation as the logs do it: every file moves one number up, by rename.
    fn rotate(path: &Path, files: u32) {
        for n in (1..files).rev() {
            let from = rotated_name(path, n);
            if from.exists() {
                fs::rename(&from, rotated_name(path, n + 1)).unwrap();
            }
        }
        fs::rename(path, rotated_name(path, 1)).unwrap();
    }

    fn rows_past(path: &Path, mark: (u64, u64)) -> Vec<u16> {
        let mut rows = Vec::new();
        records_past(path, mark.0, mark.1, |r| rows.push(r.row)).unwrap();
        rows
    }

    fn mark_of(path: &Path) -> (u64, u64) {
        (fs::metadata(path).unwrap().len(), file_id(path))
    }

    #[test]
    fn only_the_records_past_the_mark_are_read() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("unknown.jsonl");
        append(&log, 0..3);
        let mark = mark_of(&log);
        append(&log, 3..5);
        assert_eq!(rows_past(&log, mark), [3, 4]);
        assert!(rows_past(&log, mark_of(&log)).is_empty());
    }

    /// The log rotated and the new file grew past the marked size: sizes alone would
    /// read the new file from the old offset and miss records on both sides.
    #[test]
    fn a_rotation_is_found_by_the_file_even_when_the_new_log_is_longer() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("unknown.jsonl");
        append(&log, 0..2);
        let mark = mark_of(&log);
        append(&log, 2..4);
        rotate(&log, 8);
        append(&log, 4..10);
        assert!(fs::metadata(&log).unwrap().len() > mark.0);
        assert_eq!(rows_past(&log, mark), (2..10).collect::<Vec<_>>());
    }

    #[test]
    fn two_rotations_read_the_marked_file_on_and_every_newer_file() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("unknown.jsonl");
        append(&log, 0..2);
        let mark = mark_of(&log);
        append(&log, 2..3);
        rotate(&log, 8);
        append(&log, 3..5);
        rotate(&log, 8);
        append(&log, 5..6);
        assert_eq!(rows_past(&log, mark), (2..6).collect::<Vec<_>>());
    }

    /// The marked file was deleted by rotation: every file left is read, whole.
    #[test]
    fn a_marked_file_rotated_away_reads_every_file_left() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("unknown.jsonl");
        append(&log, 0..2);
        let mark = mark_of(&log);
        rotate(&log, 1);
        append(&log, 2..3);
        rotate(&log, 1);
        append(&log, 3..4);
        assert_eq!(rows_past(&log, mark), [2, 3]);
    }
}
