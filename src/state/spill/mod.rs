//! The spill: writes not sent (the shutdown deadline, a write re-queued too long), kept
//! on disk and replayed later in chunks that fit the memory budget.
//!
//! # Segments
//!
//! Each flush that spills writes one immutable segment, `spill.<incarnation>.<flush_seq>.jsonl`
//! (crash recovery writes `spill.<incarnation>.<flush_seq>.recovered.jsonl` for the
//! flush it finishes; a final flush writes the rows it held for the delta ledger, their
//! ledger rows in the header, to `spill.<incarnation>.<flush_seq>.held.jsonl`, before it
//! sends anything more), through
//! a temporary file, `fsync` and `rename`: a segment is on
//! disk whole or not at all, so there is never a torn spill line. Its first line is a
//! header naming the replay cursor its flush had consumed (below). Records carry the
//! request id they came from, so a restart can tell which requests a segment owns.
//!
//! # The replay cursor
//!
//! Segments are read in order (incarnation, flush sequence, recovered after live). A
//! [`Cursor`] (segment, byte offset) says how far rows were taken: everything before it
//! is consumed. Replay loads rows from the cursor into the buffer; the next flush's group
//! commit names the new cursor in the journal, in the same fdatasync as the intents that
//! carry those rows, before any of them is sent. So a restart that finds a chunk both in
//! a segment and covered by a committed cursor knows the journal owns it. Once that
//! flush has settled, the cursor is written to `spill.cursor` (tmp, fsync, rename), and
//! fully consumed segments are deleted once the journal holds no open group
//! ([`Spill::delete_passed`], which the state directory calls after an End and after
//! recovery): recovery tells a left-open group's rows that its own segment holds by
//! reading that segment, so it must still be there when a later group's cursor has
//! passed it. At start the cursor is the furthest of `spill.cursor`, the journal's last
//! committed group and the segments' headers.
//!
//! Every kind of write spills here: counter deltas, held rows, the ingest log, the
//! driver wrapper's rows and the running totals of `writer_totals` families (records
//! with a [`super::record::TotalOf`], in segments of their own,
//! `spill.<incarnation>.<flush>[.recovered].totals.jsonl`). One cursor reads them all in
//! order; each reader takes the records of its kind and stops at the first of another,
//! which the other's replay takes from there.
//!
//! `state.max_spill_bytes` bounds the spill on disk, whichever kind of write made it. A
//! write that does not fit is dropped, counted and logged by the caller.
//!
//! Here: the segments on disk and the cursor (open, commit, deletion). Beside it:
//! `write.rs` (segments written whole), `read.rs` (records read back, what a read passes
//! over), `header.rs` (a segment's header line), `view.rs` (the read-only view of tools),
//! `legacy.rs` (the spill files of earlier versions).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::private::sync_dir;
// Re-exported where callers outside the state module have always found it.
pub(crate) use super::private::write_atomically;

pub use super::ids::{Cursor, SegmentId};

pub(super) const CURSOR_FILE: &str = "spill.cursor";

/// Most rows one replay chunk brings back, whatever the budget allows: a flush carrying
/// a chunk should take seconds, not minutes. The counter replay and the
/// `writer_totals` replay both keep to it.
pub const MAX_REPLAY_CHUNK_ROWS: usize = 100_000;

mod header;
mod legacy;
mod read;
#[cfg(test)]
mod tests;
mod view;
mod write;

pub use self::header::{HeldLedger, held_ledger, is_header_line};
pub use self::read::{Chunk, Passed, Took};
pub use self::view::SpillView;

use self::header::read_header;
use self::legacy::migrate_legacy;

/// The spill segments of one state directory.
pub struct Spill {
    dir: PathBuf,
    max_bytes: u64,
    /// Segments on disk and their sizes.
    segments: BTreeMap<SegmentId, u64>,
    /// Consumed up to here, durably (named by a settled flush or written to `spill.cursor`).
    durable: Option<Cursor>,
    /// Loaded into the buffer up to here (ahead of `durable` while a flush carries them).
    loaded: Option<Cursor>,
    /// Where the lines this process reported are (records refused, unreadable lines set
    /// aside), until the durable cursor passes them: a read after a rewind passes over
    /// them without reporting them again (a record logged twice in `rejected.jsonl`
    /// could be fed back twice). Another process reads and reports them anew until the
    /// durable cursor passes them: after a kill, or a restart while a run of held rows
    /// they are in waits. Every replay (the counter, `writer_totals` and driver wrapper
    /// ones) gives refusals a chunk of their own, whose cursor is committed at once, so
    /// only an unreadable line inside a chunk of rows (or a run of held rows) is reported
    /// again.
    reported: BTreeSet<Cursor>,
    /// Whether a read of this process took a record (a row to send or to hold): until
    /// then, the records refused are those of the run of refusals found at the cursor at
    /// open, which the previous process may have logged before a kill kept it from
    /// writing their cursor (see [`StateDir::refusals_not_logged`](super::StateDir::refusals_not_logged)).
    taken_since_open: bool,
}

impl Spill {
    /// Opens the spill of `dir`: moves in the sidecar's spill files of earlier versions
    /// (the state directory moves the driver wrapper's before), removes unfinished
    /// segment writes, and finds the cursor (the furthest of `spill.cursor`,
    /// `journal_cursor` and the segments' headers). The segments it has passed stay
    /// until [`Spill::delete_passed`]: recovery may need to read them first.
    pub fn open(dir: &Path, max_bytes: u64, journal_cursor: Option<Cursor>) -> io::Result<Spill> {
        migrate_legacy(dir)?;
        let mut segments = BTreeMap::new();
        // What the files say, durable whatever becomes of the journal.
        let mut on_disk = None;
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("spill.") && name.ends_with(".tmp") {
                // A segment whose write did not finish: its flush's journal owns the rows.
                fs::remove_file(entry.path())?;
            } else if let Some(id) = SegmentId::parse(&name) {
                let path = entry.path();
                on_disk = on_disk.max(read_header(&path)?);
                segments.insert(id, entry.metadata()?.len());
            }
        }
        on_disk = on_disk.max(read_cursor(dir)?);
        let cursor = on_disk.max(journal_cursor);
        let spill = Spill {
            dir: dir.to_owned(),
            max_bytes,
            segments,
            durable: cursor,
            loaded: cursor,
            reported: BTreeSet::new(),
            taken_since_open: false,
        };
        if journal_cursor > on_disk {
            // Only the journal names this cursor, and recovery is about to end its group,
            // which starts the journal over: written first, or a second start would
            // replay rows the journal's flush carried.
            spill.write_cursor(cursor)?;
        }
        Ok(spill)
    }

    /// Makes `cursor` durable in `spill.cursor`.
    fn write_cursor(&self, cursor: Option<Cursor>) -> io::Result<()> {
        let bytes = serde_json::to_vec(&cursor).map_err(io::Error::other)?;
        write_atomically(&self.dir, &self.dir.join(CURSOR_FILE), &bytes)
    }

    /// Bytes of the segments on disk, those the durable cursor has passed too until
    /// [`Spill::delete_passed`] deletes them: `state.max_spill_bytes` bounds the disk,
    /// also while a group left open keeps passed segments (a journal that cannot be
    /// written, with rounds that carry held rows from segment to segment).
    pub fn bytes(&self) -> u64 {
        self.segments.values().sum()
    }

    /// Whether the durable cursor has passed segment `id` of `size` bytes entirely.
    fn passed(&self, id: SegmentId, size: u64) -> bool {
        self.durable
            .is_some_and(|c| id < c.segment || (id == c.segment && c.offset >= size))
    }

    /// `state.max_spill_bytes`.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Whether a segment exists.
    pub fn has_segment(&self, id: SegmentId) -> bool {
        self.segments.contains_key(&id)
    }

    /// Whether rows wait beyond what was loaded.
    pub fn has_unloaded(&self) -> bool {
        self.segments.iter().any(|(id, size)| match self.loaded {
            None => true,
            Some(c) => *id > c.segment || (*id == c.segment && c.offset < *size),
        })
    }

    /// How far rows were read for replay.
    pub fn loaded(&self) -> Option<Cursor> {
        self.loaded
    }

    /// Reads again from `to` on (not before the durable cursor): the rows read past it
    /// were not consumed after all (the group that was to send them could not be
    /// committed), and stay on disk for a later read.
    pub fn rewind(&mut self, to: Option<Cursor>) {
        self.loaded = to.max(self.durable).min(self.loaded);
    }

    /// A flush that named `cursor` in its group commit has settled: `cursor` becomes
    /// durable in `spill.cursor`. The segments it passed are deleted later
    /// ([`Spill::delete_passed`]).
    pub fn commit(&mut self, cursor: Option<Cursor>) -> io::Result<()> {
        if cursor <= self.durable {
            return Ok(());
        }
        self.write_cursor(cursor)?;
        crate::test_hooks::crash_point("replay_cursor_written");
        self.durable = cursor;
        // Lines behind the durable cursor are never read again.
        self.reported.retain(|at| Some(*at) >= cursor);
        Ok(())
    }

    /// Whether a read of this process took a record (see `taken_since_open`).
    pub fn taken_since_open(&self) -> bool {
        self.taken_since_open
    }

    /// How far replay's progress is durable (in `spill.cursor`, or found at open).
    pub fn durable(&self) -> Option<Cursor> {
        self.durable
    }

    /// Deletes the segments the durable cursor has passed entirely. Only while the
    /// journal holds no open group: a group left open (its End not written) may have
    /// rows in a segment a later group's cursor passed, and recovery reads that segment
    /// to know them (else it spills them again, or logs them unknown).
    pub fn delete_passed(&mut self) -> io::Result<()> {
        let done: Vec<SegmentId> = self
            .segments
            .iter()
            .filter(|(id, size)| self.passed(**id, **size))
            .map(|(id, _)| *id)
            .collect();
        for id in &done {
            match fs::remove_file(self.dir.join(id.file_name())) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            self.segments.remove(id);
        }
        if !done.is_empty() {
            sync_dir(&self.dir)?;
        }
        Ok(())
    }
}

/// The cursor `spill.cursor` holds; `None` when there is no such file. A file that
/// cannot be read, or does not read as a cursor, is an error: taken for none, an older
/// cursor (a header's, the journal's) would replay rows already sent.
pub(super) fn read_cursor(dir: &Path) -> io::Result<Option<Cursor>> {
    let path = dir.join(CURSOR_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    // `null` once nothing was consumed.
    serde_json::from_str::<Option<Cursor>>(&text).map_err(|error| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} does not read as a replay cursor ({error}): the spill is not replayed, since an older cursor would send rows again. Restore it, or move it aside to replay from the segments' headers and the journal (rows it had passed may then be sent twice)",
                path.display()
            ),
        )
    })
}
