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
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::state::JsonlLog;
use crate::state::jsonl::LineReader;
use crate::state::private::{sync_dir, write_atomically_with};
use crate::state::spill;

use super::records::TotalRecord;

// The state directory names its spill files: the totals spill is part of its budget.
const SPILL: &str = spill::TOTALS_SPILL;
const REPLAY_PREFIX: &str = spill::TOTALS_REPLAY_PREFIX;
const CORRUPT: &str = "totals.spill.corrupt.jsonl";

/// The totals spill files of one state directory.
#[derive(Clone)]
pub(crate) struct SpillFiles {
    dir: PathBuf,
}

/// What a replay file held (tests read whole files).
#[cfg(test)]
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
        spill::totals_spill_bytes(&self.dir)
    }

    /// Calls `each` with every record `totals.spill.jsonl` holds now, one line in memory
    /// at a time (unreadable lines skipped: reading the file for replay sets them aside).
    pub(crate) fn for_each_spilled(&self, mut each: impl FnMut(TotalRecord)) -> io::Result<()> {
        let mut lines = match LineReader::open(&self.dir.join(SPILL), 0) {
            Ok(lines) => lines,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        while let Some(line) = lines.next_line()? {
            if let Ok(record) = serde_json::from_slice::<TotalRecord>(line.text) {
                each(record);
            }
        }
        Ok(())
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
            if spill::is_totals_spill(&name) && name != SPILL {
                found.push(entry.path());
            }
        }
        found.sort();
        Ok(found)
    }

    /// Reads a replay file from byte `offset` on, one record at a time (see
    /// [`ReplayReader`]).
    pub(crate) fn read_from(&self, path: &Path, offset: u64) -> io::Result<ReplayReader> {
        Ok(ReplayReader {
            lines: LineReader::open(path, offset)?,
            corrupt: None,
            corrupt_path: self.dir.join(CORRUPT),
            set_aside: 0,
        })
    }

    /// Every record of a replay file, unreadable lines set aside.
    #[cfg(test)]
    pub(crate) fn load(&self, path: &Path) -> io::Result<Loaded> {
        let mut reader = self.read_from(path, 0)?;
        let mut records = Vec::new();
        while let Some(read) = reader.next_record()? {
            records.push(read.record);
        }
        Ok(Loaded {
            records,
            corrupt_lines: reader.finish()?,
        })
    }

    /// Rewrites a replay file to hold only its lines at `spans` (in file order) and
    /// everything from byte `rest_from` on: at shutdown, the rows read and not applied,
    /// and those not read yet. Streamed, so the file may be larger than memory; removed
    /// when nothing is left.
    pub(crate) fn keep_only(
        &self,
        path: &Path,
        spans: &[Range<u64>],
        rest_from: u64,
    ) -> io::Result<()> {
        let mut source = fs::File::open(path)?;
        let size = source.metadata()?.len();
        if spans.is_empty() && rest_from >= size {
            drop(source);
            return self.remove(path);
        }
        write_atomically_with(&self.dir, path, |out| {
            for span in spans {
                source.seek(SeekFrom::Start(span.start))?;
                io::copy(&mut (&mut source).take(span.end - span.start), out)?;
            }
            source.seek(SeekFrom::Start(rest_from.min(size)))?;
            io::copy(&mut source, out)?;
            Ok(())
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

/// A replay file read one record at a time, from an offset, without holding the file in
/// memory. Unreadable lines met on the way (a torn last line) are set aside in
/// `totals.spill.corrupt.jsonl` and skipped; they leave the replay file when it is
/// deleted or rewritten ([`SpillFiles::keep_only`] keeps only lines that were read).
pub(crate) struct ReplayReader {
    lines: LineReader,
    corrupt: Option<JsonlLog>,
    corrupt_path: PathBuf,
    set_aside: u64,
}

/// One record of a replay file, and where its line is.
pub(crate) struct ReadRecord {
    /// The record.
    pub(crate) record: TotalRecord,
    /// Its line in the file, newline included.
    pub(crate) span: Range<u64>,
}

impl ReplayReader {
    /// The next record, or `None` at the end of the file.
    pub(crate) fn next_record(&mut self) -> io::Result<Option<ReadRecord>> {
        loop {
            let Some(line) = self.lines.next_line()? else {
                return Ok(None);
            };
            let span = line.offset..line.offset + line.text.len() as u64 + u64::from(line.complete);
            if line.text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<TotalRecord>(line.text) {
                Ok(record) => return Ok(Some(ReadRecord { record, span })),
                Err(_) => {
                    let text = String::from_utf8_lossy(line.text).into_owned();
                    self.set_aside(&text)?;
                }
            }
        }
    }

    fn set_aside(&mut self, text: &str) -> io::Result<()> {
        let log = match &mut self.corrupt {
            Some(log) => log,
            None => self
                .corrupt
                .insert(JsonlLog::open(self.corrupt_path.clone(), u64::MAX, 1)?),
        };
        log.append(&serde_json::json!({ "unparsed": text }))?;
        self.set_aside += 1;
        Ok(())
    }

    /// Makes the lines set aside durable; returns how many there were.
    pub(crate) fn finish(mut self) -> io::Result<u64> {
        if let Some(log) = &mut self.corrupt {
            log.sync()?;
        }
        Ok(self.set_aside)
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

    /// A replay file keeps, at shutdown, the rows read and not applied and the rest not
    /// read yet, byte for byte.
    #[test]
    fn keep_only_keeps_the_spans_and_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let files = SpillFiles::new(dir.path());
        let all: Vec<TotalRecord> = (1..=5).map(record).collect();
        files.append(&all, u64::MAX).unwrap();
        let taken = files.take_spill("3-0").unwrap().unwrap();
        let mut reader = files.read_from(&taken, 0).unwrap();
        let spans: Vec<Range<u64>> = (0..3)
            .map(|_| reader.next_record().unwrap().unwrap().span)
            .collect();
        files
            .keep_only(&taken, &[spans[1].clone()], spans[2].end)
            .unwrap();
        assert_eq!(
            files.load(&taken).unwrap().records,
            [record(2), record(4), record(5)]
        );
        files.keep_only(&taken, &[], u64::MAX).unwrap();
        assert!(
            files.replay_files().unwrap().is_empty(),
            "nothing left: removed"
        );
    }

    /// A torn last line (a crash in the middle of an append) is set aside when read, and
    /// leaves the file when it is rewritten.
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
        let corrupt = fs::read_to_string(dir.path().join(CORRUPT)).unwrap();
        assert!(corrupt.contains("unparsed"));
        // Rewritten at shutdown with the one row read: the torn line is gone.
        let mut reader = files.read_from(&taken, 0).unwrap();
        let span = reader.next_record().unwrap().unwrap().span;
        files.keep_only(&taken, &[span], u64::MAX).unwrap();
        let again = files.load(&taken).unwrap();
        assert_eq!((again.records, again.corrupt_lines), (vec![record(1)], 0));
    }
}
