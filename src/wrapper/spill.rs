//! The wrapper's spill: rows definitely not applied that no flush of this process will
//! send (the final flush could not, or a re-queued row's sum left the i64 range), kept
//! in `wrapper_spill.jsonl` and replayed once by the next `CounterSession` on the same
//! state directory.
//!
//! # Replayed once, crash or not
//!
//! `wrapper_spill.cursor` holds how far replay has consumed the file (a byte offset).
//! Each flush loads the rows after the part already loaded into its buffer (as far as the
//! buffer's budget allows) before it drains, and its journal group records the offset it
//! loaded up to (`WrapperBegin`): from that group commit on, those rows are in the
//! flush's intents, and whatever happens to them is the journal's to say. Once the flush
//! has settled, the cursor is written (temporary file, fsync, rename), and only then is
//! the flush ended in the journal (`End` starts the journal over, and the group's offset
//! with it); a cursor that cannot be written leaves the group open. Once the cursor
//! reaches the end of the file, the file and then the cursor are removed. At open, the
//! cursor is the furthest of the file and the journal's unended committed groups, so a
//! kill anywhere between the group commit and `End` neither replays a row twice nor
//! forgets one: rows not yet in a committed group are loaded again, rows in one are not.
//!
//! Records are [`WriteRecord`]s of an application table, with `key_hex` (the key values'
//! bytes): a replayed row is rebuilt from the table's current schema in the driver's
//! metadata. A row that no longer maps to it (table dropped, key or counter columns
//! changed) is recorded in `rejected.jsonl` instead (`not_replayable`), to apply by hand.
//! Lines earlier versions wrote (their own record type) are read as well.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::state::JsonlLog;
use crate::state::jsonl::LineReader;

use crate::state::WriteRecord;
use crate::state::wrapper_files;

pub use crate::state::wrapper_files::{CURSOR_FILE, SPILL_FILE};

/// What loading read from the spill.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Records `take` accepted.
    pub rows: u64,
    /// Lines that could not be read as records.
    pub corrupt: u64,
}

/// `wrapper_spill.jsonl` and its cursor.
pub struct WrapperSpill {
    dir: PathBuf,
    log: JsonlLog,
    max_bytes: u64,
    /// The durable cursor: everything before it was consumed by a flush that ended.
    consumed: u64,
    /// How far rows were loaded into the buffer (at least `consumed`).
    loaded: u64,
}

impl WrapperSpill {
    /// Opens the spill of `dir`. `journal_consumes`: the furthest offset a committed
    /// journal group of the previous process consumed (its rows are that group's).
    pub fn open(
        dir: &Path,
        max_bytes: u64,
        journal_consumes: Option<u64>,
    ) -> io::Result<WrapperSpill> {
        let cursor_path = dir.join(CURSOR_FILE);
        let on_disk = match fs::read_to_string(&cursor_path) {
            Ok(text) => text.trim().parse::<u64>().unwrap_or(0),
            Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e),
        };
        let consumed = on_disk.max(journal_consumes.unwrap_or(0));
        let log = JsonlLog::open(dir.join(SPILL_FILE), u64::MAX, 1)?;
        let mut spill = WrapperSpill {
            dir: dir.to_owned(),
            log,
            max_bytes,
            consumed: on_disk,
            loaded: on_disk,
        };
        spill.commit(Some(consumed))?;
        if spill.consumed > spill.log.size() {
            // A cursor left behind by a removal cut short: nothing is left to replay.
            spill.clear()?;
        }
        Ok(spill)
    }

    /// The file's size in bytes.
    pub fn size(&self) -> u64 {
        self.log.size()
    }

    /// The file.
    pub fn path(&self) -> &Path {
        self.log.path()
    }

    /// Whether rows wait to be loaded.
    pub fn has_unloaded(&self) -> bool {
        self.loaded < self.log.size()
    }

    /// Reads again from `to` (not before the durable cursor): rows read past it were not
    /// consumed after all (the flush that was to send them could not be committed).
    pub fn rewind(&mut self, to: Option<u64>) {
        self.loaded = to.unwrap_or(0).max(self.consumed).min(self.loaded);
    }

    /// The offset loaded up to, when rows were loaded that no ended flush consumed yet.
    pub fn loaded(&self) -> Option<u64> {
        (self.loaded > self.consumed).then_some(self.loaded)
    }

    /// Loads records after the part already loaded, in file order, while `take` accepts
    /// them (`take` returns false to stop before a record: the buffer is full). Lines
    /// that do not read as records are counted and passed.
    pub fn load(&mut self, mut take: impl FnMut(&WriteRecord) -> bool) -> io::Result<Loaded> {
        let mut loaded = Loaded::default();
        if !self.has_unloaded() {
            return Ok(loaded);
        }
        self.log.sync()?;
        let mut reader = LineReader::open(self.log.path(), self.loaded)?;
        while let Some(line) = reader.next_line()? {
            if !line.complete {
                break;
            }
            let next = line.offset + line.text.len() as u64 + 1;
            match wrapper_files::read_line(line.text, true) {
                Some(record) => {
                    if !take(&record) {
                        break;
                    }
                    loaded.rows += 1;
                }
                None => loaded.corrupt += 1,
            }
            self.loaded = next;
        }
        Ok(loaded)
    }

    /// Appends `records` and syncs. Records past `state.max_spill_bytes` are not written:
    /// they are returned (the caller records them as unsent).
    pub fn append(&mut self, records: Vec<WriteRecord>) -> io::Result<Vec<WriteRecord>> {
        let mut over = Vec::new();
        for record in records {
            if self.log.size() >= self.max_bytes {
                over.push(record);
            } else {
                self.log.append(&record)?;
            }
        }
        self.log.sync()?;
        Ok(over)
    }

    /// The `(request_id, row)` of the records from `offset` on (crash recovery: what a
    /// flush had already spilled).
    pub fn keys_from(&self, offset: u64) -> io::Result<std::collections::HashSet<(String, u16)>> {
        self.log.keys_from(offset)
    }

    /// Makes `consumed` the durable cursor (a flush that consumed it ended); removes the
    /// file once everything in it is consumed.
    pub fn commit(&mut self, consumed: Option<u64>) -> io::Result<()> {
        let Some(consumed) = consumed.filter(|c| *c > self.consumed) else {
            return Ok(());
        };
        if consumed >= self.log.size() && self.loaded <= consumed {
            return self.clear();
        }
        crate::state::spill::write_atomically(
            &self.dir,
            &self.dir.join(CURSOR_FILE),
            consumed.to_string().as_bytes(),
        )?;
        self.consumed = consumed;
        self.loaded = self.loaded.max(consumed);
        Ok(())
    }

    /// Everything consumed: the file goes first, then the cursor (a cursor past the end
    /// of its file is cleared at the next open); an empty file is started over.
    fn clear(&mut self) -> io::Result<()> {
        let path = self.log.path().to_owned();
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        fs::File::open(&self.dir)?.sync_all()?;
        crate::test_hooks::crash_point("wrapper_spill_removed");
        match fs::remove_file(self.dir.join(CURSOR_FILE)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        self.log = JsonlLog::open(path, u64::MAX, 1)?;
        self.consumed = 0;
        self.loaded = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::RecordOutcome;
    use crate::state::wrapper_files::{TableRecordSource, table_record};

    fn record(n: u16) -> WriteRecord {
        let source = TableRecordSource {
            writer: "w",
            incarnation: 1,
            flush_seq: 1,
            request_id: "w/1/w1/0",
            time: "t",
        };
        let delta = i64::from(n) + 1;
        let mut record = table_record(
            "ks.t",
            [("k".to_owned(), format!("'{n}'"))].into(),
            &[&[n as u8][..]],
            [(&"c".to_owned(), &delta)],
            source,
            RecordOutcome::Spilled,
        );
        record.row = n;
        record
    }

    /// An upgrade replays the spill an earlier version wrote, in its own record type: no
    /// row is passed over as unreadable.
    #[test]
    fn a_spill_an_earlier_version_wrote_is_replayed() {
        let dir = tempfile::tempdir().unwrap();
        let old = r#"{"time":"t","request_id":"app/3/w7/2","row":1,"outcome":"unsent","table":"ks.t","key":{"k":"'a'"},"key_hex":["61"],"deltas":{"c":5},"error_kind":"write_timeout","error":"timed out"}"#;
        std::fs::write(dir.path().join(SPILL_FILE), format!("{old}\n")).unwrap();
        let mut spill = WrapperSpill::open(dir.path(), u64::MAX, None).unwrap();
        let mut read = Vec::new();
        let loaded = spill
            .load(|r| {
                read.push(r.clone());
                true
            })
            .unwrap();
        assert_eq!((loaded.rows, loaded.corrupt), (1, 0));
        let record = &read[0];
        assert_eq!(record.outcome, RecordOutcome::Spilled);
        assert_eq!(record.target(), crate::state::Target::Table("ks.t"));
        assert_eq!(
            (record.writer.as_str(), record.incarnation, record.flush_seq),
            ("app", 3, 7)
        );
        assert_eq!(record.key_hex, Some(vec!["61".to_owned()]));
        assert_eq!(record.deltas, [("c".to_owned(), 5)].into());
        assert_eq!(
            record.error.as_ref().map(|e| e.kind.as_str()),
            Some("write_timeout")
        );
    }

    fn rows(spill: &mut WrapperSpill, max: usize) -> Vec<u16> {
        let mut taken = Vec::new();
        spill
            .load(|r| {
                if taken.len() >= max {
                    return false;
                }
                taken.push(r.row);
                true
            })
            .unwrap();
        taken
    }

    #[test]
    fn rows_are_replayed_once_and_a_committed_journal_group_counts_as_consumed() {
        let dir = tempfile::tempdir().unwrap();
        let mut spill = WrapperSpill::open(dir.path(), u64::MAX, None).unwrap();
        assert!(
            spill
                .append((0..4).map(record).collect())
                .unwrap()
                .is_empty()
        );
        drop(spill);

        // A start loads two (the buffer is full), then is killed after the journal group
        // that consumed them committed, before the cursor was written.
        let mut spill = WrapperSpill::open(dir.path(), u64::MAX, None).unwrap();
        assert_eq!(rows(&mut spill, 2), [0, 1]);
        let consumed = spill.loaded();
        assert!(consumed.is_some());
        drop(spill);
        assert!(!dir.path().join(CURSOR_FILE).exists());

        // The next start: the journal's offset counts; only the last two come back.
        let mut spill = WrapperSpill::open(dir.path(), u64::MAX, consumed).unwrap();
        assert_eq!(rows(&mut spill, 10), [2, 3]);
        // Killed before that flush's group commit: the same two come back.
        drop(spill);
        let mut spill = WrapperSpill::open(dir.path(), u64::MAX, None).unwrap();
        assert_eq!(rows(&mut spill, 10), [2, 3]);
        let all = spill.loaded();
        spill.commit(all).unwrap();
        assert_eq!(
            std::fs::metadata(spill.path()).unwrap().len(),
            0,
            "consumed: the file is removed (and started over empty)"
        );
        assert!(!dir.path().join(CURSOR_FILE).exists());
        drop(spill);
        let mut spill = WrapperSpill::open(dir.path(), u64::MAX, None).unwrap();
        assert!(rows(&mut spill, 10).is_empty());
    }

    #[test]
    fn a_cursor_without_its_file_is_cleared_and_the_size_limit_returns_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(CURSOR_FILE), "500").unwrap();
        let mut spill = WrapperSpill::open(dir.path(), 1, None).unwrap();
        assert!(!dir.path().join(CURSOR_FILE).exists());
        let over = spill.append((0..3).map(record).collect()).unwrap();
        assert_eq!(
            over.len(),
            2,
            "one record fits under a 1-byte limit, the rest do not"
        );
        assert_eq!(rows(&mut spill, 10), [0]);
    }
}
