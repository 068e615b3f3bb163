//! The spill as a tool sees it while a sidecar may run: nothing changed.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::header::read_header;
use super::read_cursor;
use super::{Cursor, SegmentId};

/// The spill as a reader sees it, without changing anything (no clean-up, no deletion,
/// no migration): for tools that read the state directory while a sidecar may run.
#[derive(Debug, Default)]
pub struct SpillView {
    /// The segments on disk, in replay order, with their paths.
    pub segments: Vec<(SegmentId, PathBuf)>,
    /// How far replay has consumed them, found as [`super::Spill::open`] finds it (the furthest
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
