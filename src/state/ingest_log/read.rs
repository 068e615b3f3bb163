//! Reading a sealed file of the ingest log: its appends, whole or not at all, one at a
//! time (see [`read_sealed`]).

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;

use serde::Deserialize;

use super::streams::{self, StreamLine};
use super::{IngestEntry, KEY_LINE_START, KeyLine};

/// How an append begins: `{"g":N}`, N the lines that follow it (see [`read_sealed`]).
pub(super) const GROUP_LINE_START: &[u8] = b"{\"g\":";

/// One append of a sealed file, whole: one request's lines (or, in a file an earlier
/// version wrote, one line).
#[derive(Debug, Default)]
pub struct Append {
    /// The increments.
    pub entries: Vec<IngestEntry>,
    /// The answered keys.
    pub keys: Vec<KeyLine>,
    /// The cumulative streams' last points.
    pub streams: Vec<StreamLine>,
}

impl Append {
    /// Lines held.
    fn lines(&self) -> u64 {
        (self.entries.len() + self.keys.len() + self.streams.len()) as u64
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.keys.clear();
        self.streams.clear();
    }
}

/// Reads a sealed file, calling `each` with every append it holds whole, in order;
/// returns the lines that did not read (a torn last line of an append cut short by a
/// crash, never answered, or damage). What `each` leaves in the append is dropped.
///
/// Each append begins with a line giving the number of lines that follow it; an append
/// cut short (a SIGKILL inside its `write`: never synced, so never answered), or one
/// with a line that does not read, is counted unread whole and none of its lines
/// is taken. Without it, the increments of a
/// request could be read without the idempotency key written after them, and its retry
/// counted again; or a cumulative point's increment without the stream's point. In a
/// file without any group (a log an earlier version wrote) lines are taken one by one;
/// in one with groups, a line outside them is damage and is not taken.
///
/// Only the append being read is held: a sealed file may be as large as
/// `state.max_ingest_log_bytes`, and its parsed lines several times that, so what the
/// caller keeps of it (rows summed, keys) is all that grows with the file.
pub fn read_sealed(path: &Path, mut each: impl FnMut(&mut Append)) -> io::Result<u64> {
    let mut unread = 0_u64;
    // The append being read: the lines it still has to come (`None`: no append is being
    // read), what it held so far, and how many of its lines did not read.
    let mut left: Option<u64> = None;
    let mut held = Append::default();
    let mut held_unread = 0_u64;
    // Whether the file is this version's (its appends are groups): then a line outside
    // any group is damage (what a power cut can leave), not a line of an earlier version.
    let mut grouped = false;
    let mut reader = BufReader::new(File::open(path)?);
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        if line.last() == Some(&b'\n') && line.starts_with(GROUP_LINE_START) {
            #[derive(Deserialize)]
            struct Group {
                g: u64,
            }
            if left.take().is_some() {
                unread += held.lines() + std::mem::take(&mut held_unread);
                held.clear();
            }
            grouped = true;
            match serde_json::from_slice::<Group>(&line[..line.len() - 1]) {
                Ok(Group { g: 0 }) => {}
                Ok(Group { g }) => left = Some(g),
                Err(_) => unread += 1,
            }
            continue;
        }
        if line.last() != Some(&b'\n') {
            // The file's last bytes, cut inside a line: an append cut short, whose lines
            // are none of them taken, even when this was the last it had to come.
            if left.take().is_some() {
                unread += held.lines() + std::mem::take(&mut held_unread);
                held.clear();
            }
            unread += 1;
            break;
        }
        if left.is_none() && grouped {
            unread += 1;
            continue;
        }
        if !held.read_line(&line) {
            held_unread += 1;
        }
        let done = match &mut left {
            Some(left) => {
                *left -= 1;
                *left == 0
            }
            // A line of an earlier version's file: an append of its own.
            None => true,
        };
        if done {
            if held_unread == 0 {
                each(&mut held);
            } else {
                // A line of it does not read (damage a power cut can leave): none of its
                // lines is taken, as for an append cut short.
                unread += held.lines() + held_unread;
            }
            held.clear();
            held_unread = 0;
            left = None;
        }
    }
    if left.is_some() {
        unread += held.lines() + held_unread;
    }
    Ok(unread)
}

impl Append {
    /// Takes one whole line of a sealed file: whether it read.
    fn read_line(&mut self, line: &[u8]) -> bool {
        let Some(line) = line.strip_suffix(b"\n") else {
            return false;
        };
        // A key line starts with its key (serde writes fields in order); telling the
        // kinds apart by that prefix spares an untagged enum's buffering per line.
        if line.starts_with(KEY_LINE_START) {
            serde_json::from_slice::<KeyLine>(line).map(|key| self.keys.push(key))
        } else if line.starts_with(streams::LINE_START) {
            serde_json::from_slice::<StreamLine>(line).map(|stream| self.streams.push(stream))
        } else {
            serde_json::from_slice::<IngestEntry>(line).map(|entry| self.entries.push(entry))
        }
        .is_ok()
    }
}

/// What a sealed file holds, all of it in memory: for tests only (see [`read_sealed`]
/// for why the flusher and a start read one append at a time).
#[cfg(test)]
#[derive(Debug, Default)]
pub struct SealedContent {
    /// The increments.
    pub entries: Vec<IngestEntry>,
    /// The answered keys.
    pub keys: Vec<KeyLine>,
    /// The cumulative streams' last points.
    pub streams: Vec<StreamLine>,
    /// Lines that did not read.
    pub unread: u64,
}

/// Reads a whole sealed file into memory (tests only).
#[cfg(test)]
pub fn read_sealed_whole(path: &Path) -> io::Result<SealedContent> {
    let mut content = SealedContent::default();
    let unread = read_sealed(path, |append| {
        content.entries.append(&mut append.entries);
        content.keys.append(&mut append.keys);
        content.streams.append(&mut append.streams);
    })?;
    content.unread = unread;
    Ok(content)
}
