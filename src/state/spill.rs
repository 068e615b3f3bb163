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
//! flush has settled, the cursor is written to `spill.cursor` (tmp, fsync, rename) and
//! only then are fully consumed segments deleted. At start the cursor is the furthest
//! of `spill.cursor`, the journal's last committed group and the segments' headers.
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

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::private::sync_dir;
// Re-exported where callers outside the state module have always found it.
pub(crate) use super::private::write_atomically;
use super::record::WriteRecord;
use crate::bucket::Minute;
use crate::sink::LedgerRow;

pub use super::ids::{Cursor, SegmentId};

const CURSOR_FILE: &str = "spill.cursor";

/// Most rows one replay chunk brings back, whatever the budget allows: a flush carrying
/// a chunk should take seconds, not minutes. The counter replay and the
/// `writer_totals` replay both keep to it.
pub const MAX_REPLAY_CHUNK_ROWS: usize = 100_000;

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
    pub(super) fn into_row(self, at: &dyn Fn() -> String) -> io::Result<LedgerRow> {
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
struct Header {
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
fn header_line(consumes: Option<Cursor>, ledger: &[LedgerRow]) -> io::Result<Vec<u8>> {
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

/// Rows read back for replay.
#[derive(Debug, Default)]
pub struct Chunk {
    /// The records, with the segment each came from.
    pub records: Vec<(SegmentId, WriteRecord)>,
    /// Lines that could not be read as records (counted, copied aside).
    pub corrupt: Vec<String>,
}

/// What a reader did with a record read back (see [`Spill::read`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Took {
    /// Taken: consumed (the read position moves past it).
    Taken,
    /// Refused for good, and reported by the reader (logged as rejected): consumed, and
    /// never handed to a reader of this process again, even after a rewind.
    Refused,
    /// Not taken: the read ends before it, and the next read starts with it.
    Declined,
}

/// What a read passed over without handing it to its reader.
#[derive(Debug, Default)]
pub struct Passed {
    /// Lines that could not be read as records and were not reported before: consumed,
    /// to be counted and set aside by the caller.
    pub corrupt: Vec<String>,
    /// Records a reader refused before a rewind: consumed again, not reported again.
    pub refused_again: usize,
    /// The error that ended the read early (a segment that could not be opened or
    /// read), if one did: what was read before it stands, the lines above included,
    /// which no later read reports.
    pub error: Option<io::Error>,
}

/// One line of a segment, as read.
enum Line {
    /// The segment's header, or an empty line.
    Skip,
    /// A record.
    Record(Box<WriteRecord>),
    /// Damage (not UTF-8, or not a record), as text.
    Corrupt(String),
}

/// Reads one line of a segment that starts at `offset`. A line that is not UTF-8 is
/// damage like any line that does not read (read as text, it would stop every later
/// read at it).
fn parse_line(line: &[u8], offset: u64) -> Line {
    let Ok(text) = std::str::from_utf8(line) else {
        return Line::Corrupt(String::from_utf8_lossy(line).trim_end().to_owned());
    };
    let text = text.trim_end();
    if text.is_empty() || (offset == 0 && text.starts_with("{\"spill_segment\"")) {
        return Line::Skip;
    }
    match serde_json::from_str::<WriteRecord>(text) {
        Ok(record) => Line::Record(Box::new(record)),
        Err(_) => Line::Corrupt(text.to_owned()),
    }
}

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
    /// they are in waits (the counter replay gives refusals a chunk of their own, which
    /// the cursor passes, so only an unreadable line inside such a run is reported again).
    reported: BTreeSet<Cursor>,
}

impl Spill {
    /// Opens the spill of `dir`: moves in the sidecar's spill files of earlier versions
    /// (the state directory moves the driver wrapper's before), removes unfinished
    /// segment writes, finds the cursor (the furthest of `spill.cursor`,
    /// `journal_cursor` and the segments' headers), and deletes the segments it has
    /// passed.
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
        let mut spill = Spill {
            dir: dir.to_owned(),
            max_bytes,
            segments,
            durable: cursor,
            loaded: cursor,
            reported: BTreeSet::new(),
        };
        if journal_cursor > on_disk {
            // Only the journal names this cursor, and recovery is about to end its group,
            // which starts the journal over: written first, or a second start would
            // replay rows the journal's flush carried.
            spill.write_cursor(cursor)?;
        }
        spill.delete_consumed()?;
        Ok(spill)
    }

    /// Makes `cursor` durable in `spill.cursor`.
    fn write_cursor(&self, cursor: Option<Cursor>) -> io::Result<()> {
        let bytes = serde_json::to_vec(&cursor).map_err(io::Error::other)?;
        write_atomically(&self.dir, &self.dir.join(CURSOR_FILE), &bytes)
    }

    /// Bytes of the segments on disk.
    pub fn bytes(&self) -> u64 {
        self.segments.values().sum()
    }

    /// `state.max_spill_bytes`.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Whether a segment exists.
    pub fn has_segment(&self, id: SegmentId) -> bool {
        self.segments.contains_key(&id)
    }

    /// Writes a segment holding the batches that fit under `state.max_spill_bytes` (in
    /// order; a batch is one write's records, kept whole). Returns, per batch, whether
    /// it was written. `consumes` is the replay cursor the writing flush had loaded;
    /// `ledger`, the ledger rows a held segment or an ingest log's segment carries in its
    /// header (written only with at least one batch).
    pub fn write_segment(
        &mut self,
        id: SegmentId,
        consumes: Option<Cursor>,
        batches: &[Vec<WriteRecord>],
        ledger: &[LedgerRow],
    ) -> io::Result<Vec<bool>> {
        self.write_lines(id, consumes, &[], batches, ledger)
    }

    /// [`Spill::write_segment`], the first `moved` batches being rows a replay read (up
    /// to `consumes`) and could not settle: kept whatever room is left, as
    /// [`Spill::write_segment_carrying`] keeps them; the rest get the room left after
    /// them. Per batch, whether it was written.
    pub fn write_segment_moving(
        &mut self,
        id: SegmentId,
        consumes: Option<Cursor>,
        batches: &[Vec<WriteRecord>],
        moved: usize,
    ) -> io::Result<Vec<bool>> {
        let (moved, fresh) = batches.split_at(moved.min(batches.len()));
        let mut lines = Vec::new();
        for record in moved.iter().flatten() {
            serde_json::to_writer(&mut lines, record).map_err(io::Error::other)?;
            lines.push(b'\n');
        }
        let kept = self.write_segment_carrying(id, consumes, &lines, fresh)?;
        let mut all = vec![true; moved.len()];
        all.extend(kept);
        Ok(all)
    }

    /// Writes a segment of `records`, whatever room `state.max_spill_bytes` leaves, its
    /// header carrying `ledger` and naming no cursor (see `StateDir::spill_ingest`).
    pub fn write_segment_whole(
        &mut self,
        id: SegmentId,
        records: &[WriteRecord],
        ledger: &[LedgerRow],
    ) -> io::Result<()> {
        let mut lines = Vec::new();
        for record in records {
            serde_json::to_writer(&mut lines, record).map_err(io::Error::other)?;
            lines.push(b'\n');
        }
        self.write_lines(id, None, &lines, &[], ledger)?;
        Ok(())
    }

    /// [`Spill::write_segment`], `first` (moved rows' lines, kept whatever the room)
    /// before the batches.
    fn write_lines(
        &mut self,
        id: SegmentId,
        consumes: Option<Cursor>,
        first: &[u8],
        batches: &[Vec<WriteRecord>],
        ledger: &[LedgerRow],
    ) -> io::Result<Vec<bool>> {
        let mut bytes = header_line(consumes, ledger)?;
        bytes.extend_from_slice(first);
        // `first` (moved rows) is kept whatever the room; the batches fit after it.
        let room = self.max_bytes.saturating_sub(self.bytes());
        let mut kept = Vec::with_capacity(batches.len());
        for batch in batches {
            let mut lines = Vec::new();
            for record in batch {
                serde_json::to_writer(&mut lines, record).map_err(io::Error::other)?;
                lines.push(b'\n');
            }
            let fits = (bytes.len() + lines.len()) as u64 <= room;
            if fits {
                bytes.extend_from_slice(&lines);
            }
            kept.push(fits);
        }
        if !first.is_empty() || kept.iter().any(|k| *k) {
            let path = self.dir.join(id.file_name());
            if let Err(error) = write_atomically(&self.dir, &path, &bytes) {
                // Renamed into place, with only the directory's sync failing: the segment
                // is there, and a start finds it. Taken as written; reported as not, its
                // rows would be written again elsewhere (or counted dropped) and then
                // replayed from both.
                if !fs::metadata(&path).is_ok_and(|m| m.len() == bytes.len() as u64) {
                    return Err(error);
                }
                tracing::warn!(%error, segment = %path.display(), "A spill segment is in place, but its directory could not be synced: taken as written.");
            }
            self.segments.insert(id, bytes.len() as u64);
        }
        Ok(kept)
    }

    /// Writes a segment as [`Spill::write_segment`] does, with `carried` first (record
    /// lines, already serialized: a chunk's worth never lives in memory as records): rows
    /// a replay read (up to `consumes`) that its flush could not settle, moved here. They
    /// are kept whatever room `state.max_spill_bytes` leaves, since they are on disk
    /// already: the limit bounds the rows admitted to the spill, and refusing a moved row
    /// would drop what the spill held (an answered increment of a durable listener among
    /// them). Until the flush's end deletes the segments its replay passed, the directory
    /// holds the moved rows twice; that passes the limit by at most one replay chunk (and
    /// the read part of a segment not yet wholly consumed). A moved record may also have
    /// grown by the error its write met (one error per record, replaced each time). `batches` (rows of the flush's
    /// own) get only the room left after them. The header names `consumes`. Returns, per
    /// batch, whether it was written; `carried` is kept whenever this returns `Ok` (an
    /// `Err`: the segment was not written, and neither was `carried`).
    pub fn write_segment_carrying(
        &mut self,
        id: SegmentId,
        consumes: Option<Cursor>,
        carried: &[u8],
        batches: &[Vec<WriteRecord>],
    ) -> io::Result<Vec<bool>> {
        self.write_lines(id, consumes, carried, batches, &[])
    }

    /// The (request id, row) of every record in a segment (recovery's check of which
    /// requests a segment owns). `None` when there is no such segment.
    pub fn segment_keys(&self, id: SegmentId) -> io::Result<Option<HashSet<(String, u16)>>> {
        if !self.segments.contains_key(&id) {
            return Ok(None);
        }
        let mut keys = HashSet::new();
        let file = File::open(self.dir.join(id.file_name()))?;
        // Bytes, not text: a line that is not UTF-8 is damage to pass over, not an error.
        for line in BufReader::new(file).split(b'\n') {
            if let Ok(record) = serde_json::from_slice::<WriteRecord>(&line?) {
                keys.insert((record.request_id, record.row));
            }
        }
        Ok(Some(keys))
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

    /// Reads records from the loaded cursor on, handing each to `take` with the segment
    /// it came from: a record `take` takes or refuses is consumed (the loaded cursor
    /// moves past it); the first one it declines ends the read, the loaded cursor before
    /// it, so the next read starts with that record again. Lines that cannot be read as
    /// records, and records refused before a rewind, are consumed without reaching
    /// `take`, and reported (returned) only the first time ([`Passed`]). Holds one
    /// record at a time, never a segment.
    pub fn read(&mut self, take: impl FnMut(SegmentId, WriteRecord) -> Took) -> Passed {
        let mut passed = Passed::default();
        passed.error = self.read_reporting(true, &mut passed, take).err();
        passed
    }

    /// [`Spill::read`]; `report`: whether the caller reports what it finds (a scan does
    /// not, and marks nothing as reported).
    fn read_reporting(
        &mut self,
        report: bool,
        passed: &mut Passed,
        mut take: impl FnMut(SegmentId, WriteRecord) -> Took,
    ) -> io::Result<()> {
        let ids: Vec<(SegmentId, u64)> = self
            .segments
            .iter()
            .map(|(id, size)| (*id, *size))
            .filter(|(id, _)| self.loaded.is_none_or(|c| *id >= c.segment))
            .collect();
        for (id, size) in ids {
            let start = match self.loaded {
                Some(c) if c.segment == id => c.offset,
                _ => 0,
            };
            if start >= size && start > 0 {
                continue;
            }
            let mut file = BufReader::new(File::open(self.dir.join(id.file_name()))?);
            file.seek(SeekFrom::Start(start))?;
            let mut offset = start;
            let mut line = Vec::new();
            loop {
                line.clear();
                let read = file.read_until(b'\n', &mut line)?;
                let here = Cursor {
                    segment: id,
                    offset,
                };
                if read == 0 {
                    self.loaded = Some(here);
                    break;
                }
                let next = Cursor {
                    segment: id,
                    offset: offset + read as u64,
                };
                match parse_line(&line, offset) {
                    Line::Skip => {}
                    Line::Corrupt(text) => {
                        if !self.reported.contains(&here) {
                            passed.corrupt.push(text);
                            if report {
                                self.reported.insert(here);
                            }
                        }
                    }
                    Line::Record(_) if self.reported.contains(&here) => {
                        passed.refused_again += 1;
                    }
                    Line::Record(record) => match take(id, *record) {
                        Took::Taken => {}
                        Took::Refused => {
                            if report {
                                self.reported.insert(here);
                            }
                        }
                        Took::Declined => {
                            self.loaded = Some(here);
                            return Ok(());
                        }
                    },
                }
                offset = next.offset;
                self.loaded = Some(next);
            }
        }
        Ok(())
    }

    /// Every record from the read position on, without consuming any (the position is
    /// where it was after); lines that do not read as records, and records refused,
    /// are passed over (a read that consumes them reports them).
    pub fn scan(&mut self, mut each: impl FnMut(&WriteRecord)) -> io::Result<()> {
        let at = self.loaded;
        let read = self.read_reporting(false, &mut Passed::default(), |_, record| {
            each(&record);
            Took::Taken
        });
        self.loaded = at;
        read
    }

    /// Reads records from the loaded cursor on, while `more(records so far, next record)`
    /// says so, into one [`Chunk`] (see [`Spill::read`]; tests and audits).
    pub fn load(&mut self, mut more: impl FnMut(usize, &WriteRecord) -> bool) -> io::Result<Chunk> {
        let mut records = Vec::new();
        let passed = self.read(|id, record| {
            if !more(records.len(), &record) {
                return Took::Declined;
            }
            records.push((id, record));
            Took::Taken
        });
        if let Some(error) = passed.error {
            return Err(error);
        }
        Ok(Chunk {
            records,
            corrupt: passed.corrupt,
        })
    }

    /// A flush that named `cursor` in its group commit has settled: `cursor` becomes
    /// durable in `spill.cursor`, then the segments it passed are deleted.
    pub fn commit(&mut self, cursor: Option<Cursor>) -> io::Result<()> {
        if cursor <= self.durable {
            return Ok(());
        }
        self.write_cursor(cursor)?;
        crate::test_hooks::crash_point("replay_cursor_written");
        self.durable = cursor;
        // Lines behind the durable cursor are never read again.
        self.reported.retain(|at| Some(*at) >= cursor);
        self.delete_consumed()
    }

    /// How far replay's progress is durable (in `spill.cursor`, or found at open).
    pub fn durable(&self) -> Option<Cursor> {
        self.durable
    }

    /// Deletes the segments the durable cursor has passed entirely.
    fn delete_consumed(&mut self) -> io::Result<()> {
        let Some(cursor) = self.durable else {
            return Ok(());
        };
        let done: Vec<SegmentId> = self
            .segments
            .iter()
            .filter(|(id, size)| {
                **id < cursor.segment || (**id == cursor.segment && cursor.offset >= **size)
            })
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

/// The spill as a reader sees it, without changing anything (no clean-up, no deletion,
/// no migration): for tools that read the state directory while a sidecar may run.
#[derive(Debug, Default)]
pub struct SpillView {
    /// The segments on disk, in replay order, with their paths.
    pub segments: Vec<(SegmentId, PathBuf)>,
    /// How far replay has consumed them, found as [`Spill::open`] finds it (the furthest
    /// of `spill.cursor`, `journal_cursor` and the segments' headers): rows before it are
    /// settled, or carried by a flush the journal holds.
    pub consumed: Option<Cursor>,
}

impl SpillView {
    /// Lists the segments of `dir` and finds the cursor.
    pub fn read(dir: &Path, journal_cursor: Option<Cursor>) -> io::Result<SpillView> {
        let mut segments = Vec::new();
        let mut cursor = journal_cursor;
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let Some(id) = SegmentId::parse(&entry.file_name().to_string_lossy()) else {
                continue;
            };
            let path = entry.path();
            match read_header(&path) {
                Ok(header) => cursor = cursor.max(header),
                // Consumed and deleted since the listing.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
            segments.push((id, path));
        }
        segments.sort();
        cursor = cursor.max(read_cursor(dir)?);
        Ok(SpillView {
            segments,
            consumed: cursor,
        })
    }

    /// The byte offset where the unconsumed rows of segment `id` start, or `None` when
    /// the cursor has passed the whole segment.
    pub fn unconsumed_from(&self, id: SegmentId) -> Option<u64> {
        match self.consumed {
            None => Some(0),
            Some(c) if id < c.segment => None,
            Some(c) if id == c.segment => Some(c.offset),
            Some(_) => Some(0),
        }
    }
}

/// The ledger rows in the segments' headers of `dir` (held segments, and segments of the
/// ingest log holding increments of exact families), by segment path (see
/// [`super::ledger_pending::load`]). A header that does not parse is an error: a segment
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

/// Files of the single-file spill of earlier versions, each moved by one atomic step:
/// `spill.jsonl` and `spill.loaded.*.jsonl` (never sent) become segments of incarnation 0,
/// replayed first; `spill.inflight.*.jsonl` (a replay that may have been sent) becomes
/// `unknown.replay-interrupted.*.jsonl` with every row marked unknown (written whole
/// before the input is removed; a restart that finds both only removes the input).
fn migrate_legacy(dir: &Path) -> io::Result<()> {
    let mut names: Vec<String> = fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            n == "spill.jsonl" || n.starts_with("spill.loaded.") || n.starts_with("spill.inflight.")
        })
        .collect();
    names.sort();
    for (index, name) in names.iter().enumerate() {
        let path = dir.join(name);
        if let Some(tag) = name.strip_prefix("spill.inflight.") {
            let target = dir.join(format!("unknown.replay-interrupted.{tag}"));
            if !target.exists() {
                let mut out = Vec::new();
                for line in BufReader::new(File::open(&path)?).lines() {
                    let line = line?;
                    match serde_json::from_str::<WriteRecord>(&line) {
                        Ok(mut record) => {
                            record.outcome = super::record::RecordOutcome::Unknown;
                            record.error = Some(super::record::ErrorInfo {
                                kind: "replay_interrupted".into(),
                                text: "an earlier version stopped while these replayed rows were being sent; they may or may not have been applied".into(),
                            });
                            serde_json::to_writer(&mut out, &record).map_err(io::Error::other)?;
                        }
                        Err(_) => out.extend_from_slice(line.as_bytes()),
                    }
                    out.push(b'\n');
                }
                write_atomically(dir, &target, &out)?;
            }
            fs::remove_file(&path)?;
        } else {
            let id = SegmentId::live(0, index as u64);
            fs::rename(&path, dir.join(id.file_name()))?;
        }
    }
    if !names.is_empty() {
        sync_dir(dir)?;
    }
    Ok(())
}

/// The cursor `spill.cursor` holds; `None` when there is no such file. A file that
/// cannot be read, or does not read as a cursor, is an error: taken for none, an older
/// cursor (a header's, the journal's) would replay rows already sent.
fn read_cursor(dir: &Path) -> io::Result<Option<Cursor>> {
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

/// The cursor a segment's header names, if it has a header that names one.
fn read_header(path: &Path) -> io::Result<Option<Cursor>> {
    let mut line = Vec::new();
    BufReader::new(File::open(path)?).read_until(b'\n', &mut line)?;
    Ok(serde_json::from_slice::<Header>(line.trim_ascii_end())
        .ok()
        .and_then(|h| h.spill_segment.consumes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::record::RecordOutcome;

    fn record(n: i64) -> WriteRecord {
        WriteRecord {
            total: None,
            key_hex: None,
            time: "2026-11-30T00:00:00Z".into(),
            writer: "w".into(),
            incarnation: 1,
            flush_seq: 1,
            request_id: format!("w/1/1/{n}"),
            row: 0,
            outcome: RecordOutcome::Spilled,
            family: "generic".into(),
            table: "ks.counts_by_minute".into(),
            granularity: "minute".into(),
            key: [("name".to_string(), "x".to_string())].into(),
            shard: None,
            epoch: None,
            day: "2026-11-30".into(),
            minute: Some(1),
            month: None,
            hour: None,
            deltas: [("value".to_string(), n)].into(),
            error: None,
        }
    }

    fn segment(seq: u64) -> SegmentId {
        SegmentId::live(1, seq)
    }

    fn all(spill: &mut Spill) -> Vec<i64> {
        spill
            .load(|_, _| true)
            .unwrap()
            .records
            .into_iter()
            .map(|(_, r)| r.deltas["value"])
            .collect()
    }

    /// A read that an error ends (a listed segment that cannot be opened) still returns
    /// the unreadable lines it passed before: they are marked reported, and no later
    /// read would report them.
    #[test]
    fn a_read_ended_by_an_error_returns_what_it_passed_before() {
        let dir = tempfile::tempdir().unwrap();
        let mut spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
        spill
            .write_segment(segment(1), None, &[vec![record(1)]], &[])
            .unwrap();
        let path = dir.path().join(segment(1).file_name());
        let mut file = fs::OpenOptions::new().append(true).open(&path).unwrap();
        std::io::Write::write_all(&mut file, b"{not a record\n").unwrap();
        drop(file);
        spill
            .segments
            .insert(segment(1), fs::metadata(&path).unwrap().len());
        // Listed, gone from the disk.
        spill.segments.insert(segment(2), 100);
        let passed = spill.read(|_, _| Took::Taken);
        assert_eq!(passed.corrupt, ["{not a record"]);
        assert!(passed.error.is_some());
    }

    /// A chunk read again after a rewind (its group commit failed) finds what the first
    /// read reported: a refused record is passed over, never handed to the reader again
    /// (it is in `rejected.jsonl` once), an unreadable line is not returned again (set
    /// aside once). A scan reports nothing, so the read after it still does.
    #[test]
    fn a_rewound_read_reports_refused_records_and_unreadable_lines_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
        spill
            .write_segment(segment(1), None, &[vec![record(1), record(2)]], &[])
            .unwrap();
        // Damage after the two records (a segment is written whole; this is the disk's).
        let path = dir.path().join(segment(1).file_name());
        let mut file = fs::OpenOptions::new().append(true).open(&path).unwrap();
        std::io::Write::write_all(&mut file, b"{not a record\n").unwrap();
        drop(file);
        spill
            .write_segment(segment(2), None, &[vec![record(3)]], &[])
            .unwrap();
        spill
            .segments
            .insert(segment(1), fs::metadata(&path).unwrap().len());

        let mut scanned = 0;
        spill.scan(|_| scanned += 1).unwrap();
        assert_eq!(scanned, 3);

        let read = |spill: &mut Spill| {
            let mut handed = Vec::new();
            let passed = spill.read(|_, record| {
                let value = record.deltas["value"];
                handed.push(value);
                if value == 2 {
                    Took::Refused
                } else {
                    Took::Taken
                }
            });
            assert!(passed.error.is_none(), "{:?}", passed.error);
            (handed, passed)
        };
        let (handed, passed) = read(&mut spill);
        assert_eq!(handed, [1, 2, 3]);
        assert_eq!(passed.corrupt, ["{not a record"], "reported after the scan");
        assert_eq!(passed.refused_again, 0);

        spill.rewind(None);
        let (handed, passed) = read(&mut spill);
        assert_eq!(
            handed,
            [1, 3],
            "the refused record is not handed over again"
        );
        assert!(passed.corrupt.is_empty(), "{:?}", passed.corrupt);
        assert_eq!(passed.refused_again, 1, "passed over, and counted as such");
        assert!(!spill.has_unloaded());

        // Once the durable cursor passes them, nothing is remembered.
        spill.commit(spill.loaded()).unwrap();
        assert!(spill.reported.is_empty(), "{:?}", spill.reported);
    }

    #[test]
    fn segments_replay_in_order_in_chunks_and_a_committed_cursor_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let mut spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
        spill
            .write_segment(segment(2), None, &[vec![record(3)], vec![record(4)]], &[])
            .unwrap();
        spill
            .write_segment(segment(1), None, &[vec![record(1), record(2)]], &[])
            .unwrap();
        assert!(spill.has_unloaded());
        let first = spill.load(|n, _| n < 3).unwrap();
        let values: Vec<i64> = first
            .records
            .iter()
            .map(|(_, r)| r.deltas["value"])
            .collect();
        assert_eq!(values, [1, 2, 3], "segment order, three at a time");
        let cursor = spill.loaded();
        // Not committed: a restart loads the same rows again.
        drop(spill);
        let mut spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
        assert_eq!(all(&mut spill), [1, 2, 3, 4]);
        // Committed (as after the flush that carried them settled): they are gone, and
        // the segment they emptied is deleted.
        let mut spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
        spill.load(|n, _| n < 3).unwrap();
        spill.commit(cursor).unwrap();
        assert!(!dir.path().join(segment(1).file_name()).exists());
        drop(spill);
        let mut spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
        assert_eq!(all(&mut spill), [4]);
        // A cursor named by the journal (a committed group) wins over an older file.
        let end = spill.loaded();
        drop(spill);
        let mut spill = Spill::open(dir.path(), u64::MAX, end).unwrap();
        assert!(!spill.has_unloaded());
        assert!(all(&mut spill).is_empty());
        assert_eq!(spill.bytes(), 0, "consumed segments are deleted");
    }

    #[test]
    fn a_segment_names_the_cursor_its_flush_consumed() {
        let dir = tempfile::tempdir().unwrap();
        let mut spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
        spill
            .write_segment(segment(1), None, &[vec![record(1)], vec![record(2)]], &[])
            .unwrap();
        spill.load(|n, _| n < 1).unwrap();
        let consumed = spill.loaded();
        // The flush that carried record 1 could not send it and spilled it again.
        spill
            .write_segment(segment(2), consumed, &[vec![record(1)]], &[])
            .unwrap();
        drop(spill);
        let mut spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
        assert_eq!(
            all(&mut spill),
            [2, 1],
            "record 1 once, from its new segment"
        );
    }

    /// Rows a replay read and its flush could not settle move to the flush's segment
    /// even when the spill is full (they are on disk already: refusing them would drop
    /// them), under a header naming the cursor they were read to; the flush's own rows
    /// get only the room left, and a restart reads every moved row once.
    #[test]
    fn carried_rows_are_kept_past_a_full_spill_and_their_cursor_named() {
        let dir = tempfile::tempdir().unwrap();
        let lines = |records: &[WriteRecord]| -> Vec<u8> {
            records
                .iter()
                .flat_map(|r| {
                    let mut line = serde_json::to_vec(r).unwrap();
                    line.push(b'\n');
                    line
                })
                .collect()
        };
        // A spill that two rows fill.
        let first = {
            let mut s = Spill::open(dir.path(), u64::MAX, None).unwrap();
            s.write_segment(segment(1), None, &[vec![record(1), record(2)]], &[])
                .unwrap();
            s.bytes()
        };
        let mut spill = Spill::open(dir.path(), first, None).unwrap();
        assert_eq!(spill.bytes(), spill.max_bytes(), "full");
        spill.load(|_, _| true).unwrap();
        let read_to = spill.loaded();
        assert!(read_to.is_some());
        // Both read rows are carried, the full spill notwithstanding; the flush's own
        // row finds no room and is refused.
        let kept = spill
            .write_segment_carrying(
                segment(2),
                read_to,
                &lines(&[record(1), record(2)]),
                &[vec![record(3)]],
            )
            .unwrap();
        assert_eq!(kept, vec![false]);
        let named = read_header(&dir.path().join(segment(2).file_name())).unwrap();
        assert_eq!(named, read_to);
        // The flush's end: the cursor passes segment 1, which is deleted; the spill is
        // back within its limit.
        spill.commit(read_to).unwrap();
        assert!(!dir.path().join(segment(1).file_name()).exists());
        assert!(
            spill.bytes() <= spill.max_bytes() + 200,
            "one header more than before"
        );
        drop(spill);
        let mut spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
        assert_eq!(all(&mut spill), [1, 2], "each moved row once");
    }

    /// A kill before the flush's end: the carrying segment's header names the cursor,
    /// so the next start reads the moved rows from there, not again from segment 1.
    #[test]
    fn a_kill_after_carrying_reads_the_moved_rows_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut spill = Spill::open(dir.path(), 1, None).unwrap();
        spill.max_bytes = u64::MAX;
        spill
            .write_segment(segment(1), None, &[vec![record(1)]], &[])
            .unwrap();
        spill.max_bytes = 1;
        spill.load(|_, _| true).unwrap();
        let read_to = spill.loaded();
        let line = {
            let mut l = serde_json::to_vec(&record(1)).unwrap();
            l.push(b'\n');
            l
        };
        spill
            .write_segment_carrying(segment(2), read_to, &line, &[])
            .unwrap();
        drop(spill);
        let mut spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
        assert_eq!(all(&mut spill), [1]);
    }

    #[test]
    fn the_size_limit_keeps_whole_writes_and_unfinished_segments_vanish() {
        let dir = tempfile::tempdir().unwrap();
        let one = serde_json::to_vec(&record(1)).unwrap().len() as u64 + 1;
        let mut spill = Spill::open(dir.path(), 80 + one * 3, None).unwrap();
        let kept = spill
            .write_segment(
                segment(1),
                None,
                &[
                    vec![record(1), record(2)],
                    vec![record(3), record(4)],
                    vec![record(5)],
                ],
                &[],
            )
            .unwrap();
        assert_eq!(kept, [true, false, true]);
        assert!(spill.bytes() <= spill.max_bytes());
        let kept = spill
            .write_segment(segment(2), None, &[vec![record(6)]], &[])
            .unwrap();
        assert_eq!(kept, [false], "full");
        assert!(!dir.path().join(segment(2).file_name()).exists());
        fs::write(
            dir.path().join("spill.0000000001.000000000003.tmp"),
            "{\"torn",
        )
        .unwrap();
        drop(spill);
        let mut spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
        assert_eq!(all(&mut spill), [1, 2, 5]);
        assert!(
            !dir.path()
                .join("spill.0000000001.000000000003.tmp")
                .exists()
        );
        let keys = spill.segment_keys(segment(1)).unwrap().unwrap();
        assert!(keys.contains(&("w/1/1/5".to_string(), 0)));
        assert_eq!(spill.segment_keys(segment(9)).unwrap(), None);
    }

    /// The single spill file of earlier versions: unsent rows are replayed, rows of an
    /// interrupted replay become unknown records.
    #[test]
    fn files_of_the_earlier_spill_are_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        let line = |n| format!("{}\n", serde_json::to_string(&record(n)).unwrap());
        fs::write(dir.path().join("spill.jsonl"), line(1)).unwrap();
        fs::write(dir.path().join("spill.loaded.3.jsonl"), line(2)).unwrap();
        fs::write(dir.path().join("spill.inflight.2.jsonl"), line(7)).unwrap();
        let mut spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
        let mut replayed = all(&mut spill);
        replayed.sort();
        assert_eq!(replayed, [1, 2]);
        let unknown =
            fs::read_to_string(dir.path().join("unknown.replay-interrupted.2.jsonl")).unwrap();
        let record: WriteRecord = serde_json::from_str(unknown.trim()).unwrap();
        assert_eq!(
            (record.outcome, record.deltas["value"]),
            (RecordOutcome::Unknown, 7)
        );
        assert!(!dir.path().join("spill.inflight.2.jsonl").exists());
    }

    #[test]
    fn the_read_only_view_finds_the_cursor_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut spill = Spill::open(dir.path(), u64::MAX, None).unwrap();
        spill
            .write_segment(segment(1), None, &[vec![record(1)], vec![record(2)]], &[])
            .unwrap();
        spill
            .write_segment(segment(2), None, &[vec![record(3)]], &[])
            .unwrap();
        spill.load(|n, _| n < 1).unwrap();
        let cursor = spill.loaded().unwrap();
        drop(spill);
        fs::write(dir.path().join("spill.0000000001.000000000009.tmp"), "x").unwrap();
        let listing = || {
            let mut names: Vec<String> = fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        let before = listing();
        let view = SpillView::read(dir.path(), None).unwrap();
        assert_eq!(view.consumed, None, "loaded, not committed");
        let ids: Vec<SegmentId> = view.segments.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [segment(1), segment(2)]);
        // A cursor the journal names (a committed flush carries those rows).
        let view = SpillView::read(dir.path(), Some(cursor)).unwrap();
        assert_eq!(view.unconsumed_from(segment(1)), Some(cursor.offset));
        assert_eq!(view.unconsumed_from(segment(2)), Some(0));
        let past = Cursor {
            segment: segment(2),
            offset: 0,
        };
        let view = SpillView::read(dir.path(), Some(past)).unwrap();
        assert_eq!(view.unconsumed_from(segment(1)), None);
        assert_eq!(listing(), before, "nothing created, moved or deleted");
    }

    #[test]
    fn segment_names_round_trip_and_sort_by_flush() {
        let live = segment(7);
        let recovered = SegmentId {
            recovered: true,
            ..live
        };
        let held = SegmentId { held: true, ..live };
        assert_eq!(SegmentId::parse(&live.file_name()), Some(live));
        assert_eq!(SegmentId::parse(&recovered.file_name()), Some(recovered));
        assert_eq!(SegmentId::parse(&held.file_name()), Some(held));
        assert_eq!(held.file_name(), "spill.0000000001.000000000007.held.jsonl");
        assert!(live < held && held < recovered && recovered < segment(8));
        assert_eq!(SegmentId::parse("spill.cursor"), None);
    }
}
