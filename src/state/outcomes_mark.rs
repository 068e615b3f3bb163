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

/// Sizes of the outcome logs, in bytes, when everything logged was in the table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    /// `unknown.jsonl`.
    pub unknown: u64,
    /// `rejected.jsonl`.
    pub rejected: u64,
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
    super::spill::write_atomically(dir, &dir.join(FILE_NAME), &bytes)
}

/// Calls `each` with every record of the log at `path` past byte `offset`. When the log
/// is shorter than `offset` it was rotated since: the rest of the previous file
/// (`name.1.jsonl`) and the whole current one are read. Lines that do not parse are
/// skipped (recovery and the corrupt-line counters deal with them).
pub fn records_past(path: &Path, offset: u64, mut each: impl FnMut(WriteRecord)) -> io::Result<()> {
    let size = match fs::metadata(path) {
        Ok(meta) => meta.len(),
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
    };
    if size < offset {
        read_from(&rotated_name(path, 1), offset, &mut each)?;
        read_from(path, 0, &mut each)
    } else {
        read_from(path, offset, &mut each)
    }
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
