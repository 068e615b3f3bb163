//! The totals path's spill files, in the state directory.
//!
//! | file | what |
//! |---|---|
//! | `totals.spill.jsonl` | totals spilled by this process: at shutdown, what the final flush could not write; while running, closed rows that kept failing for `flush.requeue_max_age` |
//! | `totals.replay.<tag>.jsonl` | a spill file taken for replay (at start, or once the store answers again); `<incarnation>-<flush>-recovered` when crash recovery wrote it from the journal |
//! | `totals.spill.corrupt.jsonl` | lines that could not be read (a torn last line) |
//!
//! # The size bound
//!
//! `totals.spill.jsonl` and the replay files are spill on disk like the counter path's
//! segments, and share `state.max_spill_bytes` with them (see [`crate::state::spill`]):
//! the configured figure bounds the whole spill of the state directory. A row that does
//! not fit is not written; the caller drops it and counts it (`spill_full`).
//!
//! # Crash windows
//!
//! There are none to guard here: a spilled total is absolute and carries its write time, so
//! writing it twice leaves the same cell, and no write of its row can be newer (its row was
//! released, or its process ended). Taking a spill for replay is one `rename`; a replay file
//! is deleted once every row in it applied, and rewritten with the rows left (a temporary
//! file and a `rename`) at shutdown. A crash at any point leaves files that the next start
//! replays again, harmlessly.

use std::fs;
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};

use crate::state::JsonlLog;
use crate::state::private::{sync_dir, write_atomically_with};

use super::records::TotalRecord;

const SPILL: &str = "totals.spill.jsonl";
const REPLAY_PREFIX: &str = "totals.replay.";
const CORRUPT: &str = "totals.spill.corrupt.jsonl";

/// The totals spill files of one state directory.
#[derive(Clone)]
pub(crate) struct SpillFiles {
    dir: PathBuf,
}

/// What a replay file held.
pub(crate) struct Loaded {
    /// Its records.
    pub(crate) records: Vec<TotalRecord>,
    /// Lines that could not be read, set aside in `totals.spill.corrupt.jsonl`.
    pub(crate) corrupt_lines: u64,
}

impl SpillFiles {
    /// The files of `dir` (the state directory, locked by its owner).
    pub(crate) fn new(dir: &Path) -> SpillFiles {
        SpillFiles {
            dir: dir.to_owned(),
        }
    }

    /// Appends to `totals.spill.jsonl`, durably, the records that fit in `room` bytes:
    /// the first ones, up to the first that would pass it. Returns how many were written.
    pub(crate) fn append(&self, records: &[TotalRecord], room: u64) -> io::Result<usize> {
        let fitting = fitting_prefix(records, room)?;
        if fitting == 0 {
            return Ok(0);
        }
        let path = self.dir.join(SPILL);
        let created = !path.exists();
        // Opening sets a torn last line aside, so the new lines start on their own.
        let mut log = JsonlLog::open(path, u64::MAX, 1)?;
        for record in &records[..fitting] {
            log.append(record)?;
        }
        log.sync()?;
        if created {
            sync_dir(&self.dir)?;
        }
        Ok(fitting)
    }

    /// Bytes the totals spill takes on disk: `totals.spill.jsonl` and the replay files
    /// (rows spilled and not yet written again). Its share of `state.max_spill_bytes`.
    pub(crate) fn bytes_on_disk(&self) -> io::Result<u64> {
        let mut bytes = 0_u64;
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let spill =
                name == SPILL || (name.starts_with(REPLAY_PREFIX) && name.ends_with(".jsonl"));
            if spill {
                bytes = bytes.saturating_add(entry.metadata()?.len());
            }
        }
        Ok(bytes)
    }

    /// The records `totals.spill.jsonl` holds now (unreadable lines skipped: loading
    /// the file for replay sets them aside).
    pub(crate) fn spilled(&self) -> io::Result<Vec<TotalRecord>> {
        let file = match fs::File::open(self.dir.join(SPILL)) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut records = Vec::new();
        for line in io::BufReader::new(file).lines() {
            if let Ok(record) = serde_json::from_str::<TotalRecord>(&line?) {
                records.push(record);
            }
        }
        Ok(records)
    }

    /// Whether `totals.spill.jsonl` holds anything.
    pub(crate) fn has_spill(&self) -> bool {
        fs::metadata(self.dir.join(SPILL)).is_ok_and(|m| m.len() > 0)
    }

    /// Renames `totals.spill.jsonl` to `totals.replay.<tag>.jsonl` (`tag` unique in the
    /// directory) and returns the new path, if there was a spill file.
    pub(crate) fn take_spill(&self, tag: &str) -> io::Result<Option<PathBuf>> {
        let spill = self.dir.join(SPILL);
        if !spill.exists() {
            return Ok(None);
        }
        let target = self.dir.join(format!("{REPLAY_PREFIX}{tag}.jsonl"));
        fs::rename(&spill, &target)?;
        sync_dir(&self.dir)?;
        Ok(Some(target))
    }

    /// The replay file crash recovery writes for flush `flush_seq` of `incarnation`
    /// (a name no running process takes a spill to).
    pub(crate) fn recovered_path(&self, incarnation: u64, flush_seq: u64) -> PathBuf {
        self.dir.join(format!(
            "{REPLAY_PREFIX}{incarnation}-{flush_seq}-recovered.jsonl"
        ))
    }

    /// `totals.spill.jsonl` (it may not exist).
    pub(crate) fn spill_path(&self) -> PathBuf {
        self.dir.join(SPILL)
    }

    /// Every replay file, oldest tag first.
    pub(crate) fn replay_files(&self) -> io::Result<Vec<PathBuf>> {
        let mut found = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(REPLAY_PREFIX) && name.ends_with(".jsonl") {
                found.push(entry.path());
            }
        }
        found.sort();
        Ok(found)
    }

    /// Reads a replay file; unreadable lines go to `totals.spill.corrupt.jsonl`.
    pub(crate) fn load(&self, path: &Path) -> io::Result<Loaded> {
        let mut records = Vec::new();
        let mut corrupt = Vec::new();
        for line in io::BufReader::new(fs::File::open(path)?).lines() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<TotalRecord>(&line) {
                Ok(record) => records.push(record),
                Err(_) => corrupt.push(line),
            }
        }
        if !corrupt.is_empty() {
            let mut log = JsonlLog::open(self.dir.join(CORRUPT), u64::MAX, 1)?;
            for line in &corrupt {
                log.append(&serde_json::json!({ "unparsed": line }))?;
            }
            log.sync()?;
            // The file is read again by the next start if this run does not finish it:
            // keep only what could be read, so the same lines are not set aside twice.
            self.rewrite(path, &records)?;
        }
        Ok(Loaded {
            records,
            corrupt_lines: corrupt.len() as u64,
        })
    }

    /// Replaces a replay file's content with `records` (removes it when there are none).
    pub(crate) fn rewrite(&self, path: &Path, records: &[TotalRecord]) -> io::Result<()> {
        if records.is_empty() {
            return self.remove(path);
        }
        write_atomically_with(&self.dir, path, |out| {
            for record in records {
                serde_json::to_writer(&mut *out, record).map_err(io::Error::other)?;
                out.write_all(b"\n")?;
            }
            Ok(())
        })
    }

    /// Deletes a replay file whose rows all applied.
    pub(crate) fn remove(&self, path: &Path) -> io::Result<()> {
        match fs::remove_file(path) {
            Ok(()) => sync_dir(&self.dir),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// How many of the first `records` take at most `room` bytes as lines.
fn fitting_prefix(records: &[TotalRecord], room: u64) -> io::Result<usize> {
    let mut taken = 0_u64;
    for (fitting, record) in records.iter().enumerate() {
        let line = serde_json::to_vec(record).map_err(io::Error::other)?.len() as u64 + 1;
        taken = taken.saturating_add(line);
        if taken > room {
            return Ok(fitting);
        }
    }
    Ok(records.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(n: i64) -> TotalRecord {
        TotalRecord {
            time: "t".into(),
            writer: "w/1/00".into(),
            family: "generic".into(),
            table: "ks.t".into(),
            granularity: "minute".into(),
            key: Default::default(),
            day: "2026-11-30".into(),
            minute: Some(1),
            month: None,
            totals: [("value".to_string(), n)].into(),
            unconfirmed: [("value".to_string(), n)].into(),
            timestamp: n,
            error: None,
        }
    }

    #[test]
    fn spill_take_load_rewrite_remove() {
        let dir = tempfile::tempdir().unwrap();
        let files = SpillFiles::new(dir.path());
        assert!(!files.has_spill());
        assert_eq!(files.take_spill("1-0").unwrap(), None);
        assert_eq!(files.append(&[record(1), record(2)], u64::MAX).unwrap(), 2);
        assert_eq!(files.append(&[record(3)], u64::MAX).unwrap(), 1);
        assert!(files.has_spill());
        let taken = files.take_spill("1-0").unwrap().unwrap();
        assert!(!files.has_spill());
        assert_eq!(files.replay_files().unwrap(), std::slice::from_ref(&taken));
        let loaded = files.load(&taken).unwrap();
        assert_eq!(loaded.records, [record(1), record(2), record(3)]);
        files.rewrite(&taken, &[record(3)]).unwrap();
        assert_eq!(files.load(&taken).unwrap().records, [record(3)]);
        files.rewrite(&taken, &[]).unwrap();
        assert!(files.replay_files().unwrap().is_empty());
    }

    /// A torn last line (a crash in the middle of an append) is set aside, once.
    #[test]
    fn a_torn_line_is_set_aside_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let files = SpillFiles::new(dir.path());
        files.append(&[record(1)], u64::MAX).unwrap();
        let mut spill = fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join(SPILL))
            .unwrap();
        spill.write_all(b"{\"time\":\"t\",\"wri").unwrap();
        let taken = files.take_spill("2-0").unwrap().unwrap();
        let loaded = files.load(&taken).unwrap();
        assert_eq!((loaded.records.len(), loaded.corrupt_lines), (1, 1));
        assert_eq!(
            files.load(&taken).unwrap().corrupt_lines,
            0,
            "set aside once"
        );
        let corrupt = fs::read_to_string(dir.path().join(CORRUPT)).unwrap();
        assert!(corrupt.contains("unparsed"));
    }
}
