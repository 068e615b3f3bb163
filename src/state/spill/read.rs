//! Reading the spill back: record by record from the loaded cursor, each taken,
//! refused or declined by its reader; unreadable lines passed over and reported once.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Seek, SeekFrom};

use crate::state::record::WriteRecord;

use super::{Cursor, SegmentId, Spill};

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

impl Spill {
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
                        // (A scan, which consumes nothing, takes nothing either.)
                        Took::Taken => self.taken_since_open |= report,
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
}
