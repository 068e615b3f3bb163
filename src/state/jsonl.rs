//! Append-only JSON-lines files with a size cap and rotation.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// An append-only `.jsonl` file. When it passes `max_bytes` it is renamed to
/// `name.1.jsonl` (older ones shift to `.2`, `.3`, …) and a new file is started; files
/// beyond `max_files` are deleted and counted.
pub struct JsonlLog {
    path: PathBuf,
    file: File,
    size: u64,
    max_bytes: u64,
    max_files: u32,
    /// Rotated files deleted because there were more than `max_files`.
    pub deleted_files: u64,
    /// Records in the files deleted so far and not yet reported.
    deleted_records: u64,
    /// Records written to the current file by this process.
    records: u64,
    /// Records this process wrote to each rotated file, newest first (`.1`, `.2`, ...).
    rotated_records: std::collections::VecDeque<u64>,
}

impl JsonlLog {
    /// Opens (creating if needed) a log for appending.
    pub fn open(path: PathBuf, max_bytes: u64, max_files: u32) -> io::Result<JsonlLog> {
        let file = super::private::options()
            .create(true)
            .append(true)
            .open(&path)?;
        let size = file.metadata()?.len();
        Ok(JsonlLog {
            path,
            file,
            size,
            max_bytes,
            max_files,
            deleted_files: 0,
            deleted_records: 0,
            records: 0,
            rotated_records: std::collections::VecDeque::new(),
        })
    }

    /// The file being appended to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record as one line.
    pub fn append<T: serde::Serialize>(&mut self, record: &T) -> io::Result<()> {
        let mut line = serde_json::to_vec(record).map_err(io::Error::other)?;
        line.push(b'\n');
        if self.size > 0 && self.size + line.len() as u64 > self.max_bytes {
            self.rotate()?;
        }
        self.file.write_all(&line)?;
        self.size += line.len() as u64;
        self.records += 1;
        Ok(())
    }

    /// Records lost to rotation (in deleted files) since the last call. Records in files
    /// that were already there when the log was opened are not known, so not counted.
    pub fn take_deleted_records(&mut self) -> u64 {
        std::mem::take(&mut self.deleted_records)
    }

    /// Makes appended records durable.
    pub fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn rotated(&self, n: u32) -> PathBuf {
        rotated_name(&self.path, n)
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.file.sync_data()?;
        let oldest = self.rotated(self.max_files.max(1));
        if oldest.exists() {
            std::fs::remove_file(&oldest)?;
            self.deleted_files += 1;
            if self.rotated_records.len() >= self.max_files.max(1) as usize {
                self.deleted_records += self.rotated_records.pop_back().unwrap_or(0);
            }
        }
        for n in (1..self.max_files.max(1)).rev() {
            let from = self.rotated(n);
            if from.exists() {
                std::fs::rename(&from, self.rotated(n + 1))?;
            }
        }
        std::fs::rename(&self.path, self.rotated(1))?;
        self.rotated_records
            .push_front(std::mem::take(&mut self.records));
        self.file = super::private::options()
            .create(true)
            .append(true)
            .open(&self.path)?;
        self.size = 0;
        Ok(())
    }
}

/// `dir/name.jsonl` → `dir/name.N.jsonl`.
pub fn rotated_name(path: &Path, n: u32) -> PathBuf {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("log");
    path.with_file_name(format!("{stem}.{n}.jsonl"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_lines_and_rotates_keeping_at_most_max_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("unknown.jsonl");
        let mut log = JsonlLog::open(path.clone(), 40, 2).unwrap();
        for i in 0..10 {
            log.append(&serde_json::json!({ "n": i, "pad": "xxxxxxxxxx" }))
                .unwrap();
        }
        log.sync().unwrap();
        let current = std::fs::read_to_string(&path).unwrap();
        assert_eq!(current.lines().count(), 1);
        assert!(current.contains("\"n\":9"));
        assert!(rotated_name(&path, 1).exists() && rotated_name(&path, 2).exists());
        assert!(!rotated_name(&path, 3).exists());
        assert_eq!(log.deleted_files, 7);
        assert_eq!(
            log.take_deleted_records(),
            7,
            "one record per deleted file here"
        );
        assert_eq!(log.take_deleted_records(), 0);
        let previous = std::fs::read_to_string(rotated_name(&path, 1)).unwrap();
        assert!(previous.contains("\"n\":8"));
    }

    #[test]
    fn reopening_continues_the_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rejected.jsonl");
        JsonlLog::open(path.clone(), 1 << 20, 2)
            .unwrap()
            .append(&1)
            .unwrap();
        let mut log = JsonlLog::open(path.clone(), 1 << 20, 2).unwrap();
        log.append(&2).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "1\n2\n");
    }
}
