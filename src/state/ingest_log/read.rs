//! Reading a sealed file of the ingest log: its appends, whole or not at all (see
//! [`read_sealed`]).

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;

use serde::Deserialize;

use super::streams::{self, StreamLine};
use super::{IngestEntry, KEY_LINE_START, KeyLine, SealedContent};

/// How an append begins: `{"g":N}`, N the lines that follow it (see [`read_sealed`]).
pub(super) const GROUP_LINE_START: &[u8] = b"{\"g\":";

/// What a sealed file holds.
///
/// Each append begins with a line giving the number of lines that follow it; an append
/// cut short (a SIGKILL inside its `write`: never synced, so never answered), or one
/// with a line that does not read, is counted in `unread` whole and none of its lines
/// is taken. Without it, the increments of a
/// request could be read without the idempotency key written after them, and its retry
/// counted again; or a cumulative point's increment without the stream's point. In a
/// file without any group (a log an earlier version wrote) lines are taken one by one;
/// in one with groups, a line outside them is damage and is not taken.
pub fn read_sealed(path: &Path) -> io::Result<SealedContent> {
    let mut content = SealedContent::default();
    // The append being read: the lines it still has to come, and what it held so far.
    let mut group: Option<(u64, SealedContent)> = None;
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
            if let Some((_, cut)) = group.take() {
                content.unread += cut.lines();
            }
            grouped = true;
            match serde_json::from_slice::<Group>(&line[..line.len() - 1]) {
                Ok(Group { g: 0 }) => {}
                Ok(Group { g }) => group = Some((g, SealedContent::default())),
                Err(_) => content.unread += 1,
            }
            continue;
        }
        if line.last() != Some(&b'\n') {
            // The file's last bytes, cut inside a line: an append cut short, whose lines
            // are none of them taken, even when this was the last it had to come.
            if let Some((_, cut)) = group.take() {
                content.unread += cut.lines();
            }
            content.unread += 1;
            break;
        }
        let into = match &mut group {
            Some((_, held)) => held,
            None if grouped => {
                content.unread += 1;
                continue;
            }
            None => &mut content,
        };
        into.read_line(&line);
        if let Some((left, held)) = &mut group {
            *left -= 1;
            if *left == 0 {
                let held = std::mem::take(held);
                if held.unread == 0 {
                    content.absorb(held);
                } else {
                    // A line of it does not read (damage a power cut can leave): none
                    // of its lines is taken, as for an append cut short.
                    content.unread += held.lines();
                }
                group = None;
            }
        }
    }
    if let Some((_, cut)) = group {
        content.unread += cut.lines();
    }
    Ok(content)
}

impl SealedContent {
    /// Takes one line of a sealed file.
    fn read_line(&mut self, line: &[u8]) {
        match line.last() {
            // A key line starts with its key (serde writes fields in order); telling the
            // kinds apart by that prefix spares an untagged enum's buffering per line.
            Some(b'\n') if line.starts_with(KEY_LINE_START) => {
                match serde_json::from_slice::<KeyLine>(&line[..line.len() - 1]) {
                    Ok(key) => self.keys.push(key),
                    Err(_) => self.unread += 1,
                }
            }
            Some(b'\n') if line.starts_with(streams::LINE_START) => {
                match serde_json::from_slice::<StreamLine>(&line[..line.len() - 1]) {
                    Ok(stream) => self.streams.push(stream),
                    Err(_) => self.unread += 1,
                }
            }
            Some(b'\n') => match serde_json::from_slice::<IngestEntry>(&line[..line.len() - 1]) {
                Ok(entry) => self.entries.push(entry),
                Err(_) => self.unread += 1,
            },
            _ => self.unread += 1,
        }
    }

    /// Lines held, read or not.
    fn lines(&self) -> u64 {
        (self.entries.len() + self.keys.len() + self.streams.len()) as u64 + self.unread
    }

    /// Takes in a whole append's lines.
    fn absorb(&mut self, group: SealedContent) {
        self.entries.extend(group.entries);
        self.keys.extend(group.keys);
        self.streams.extend(group.streams);
        self.unread += group.unread;
    }
}
