//! Append-only JSON-lines files with a size cap and rotation.
//!
//! A crash in the middle of an append leaves a torn last line. Opening the file copies
//! such a tail to `NAME.jsonl.torn`, counts it and truncates it, so the next append
//! starts on a line of its own instead of being glued to the fragment.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// An append-only `.jsonl` file. [`JsonlLog::rotate_if_full`] renames it to
/// `name.1.jsonl` (older ones shift to `.2`, `.3`, …) once it passed `max_bytes`; files
/// beyond `max_files` are deleted and their records counted.
pub struct JsonlLog {
    path: PathBuf,
    file: File,
    size: u64,
    max_bytes: u64,
    max_files: u32,
    /// Records in the files deleted by rotation and not yet reported.
    deleted_records: u64,
    /// Torn lines set aside when the file was opened.
    torn_lines: u64,
}

/// The `(request_id, row)` of the records of the file at `path` from `offset` on (an
/// absent file has none).
pub fn keys_in(path: &Path, offset: u64) -> io::Result<HashSet<(String, u16)>> {
    keys_where(path, offset, None)
}

/// A line's hash (64 bits: a set of them stands for the lines it was taken from).
pub fn line_hash(line: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    line.hash(&mut hasher);
    hasher.finish()
}

/// The lines of the file at `path` (without their newline) that contain one of `needles`,
/// by [`line_hash`], with how many times each occurs; none when there is no such file. A
/// last line without its newline (a torn append) is left out: it names no record whole.
pub fn lines_containing(
    path: &Path,
    needles: &[&str],
) -> io::Result<std::collections::HashMap<u64, u32>> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Default::default()),
        Err(e) => return Err(e),
    };
    let finders: Vec<_> = needles
        .iter()
        .map(|n| memchr::memmem::Finder::new(n.as_bytes()))
        .collect();
    let mut found = std::collections::HashMap::new();
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        if line.pop() != Some(b'\n') {
            break;
        }
        if finders.iter().any(|f| f.find(&line).is_some()) {
            *found.entry(line_hash(&line)).or_default() += 1;
        }
    }
    Ok(found)
}

/// The `(request_id, row)` of the records of the file at `path` from `offset` on, only
/// those whose request id starts with `prefix` when one is given. A line that does not
/// read as a record (a torn or glued line an append that failed part-way left, bytes
/// that are not UTF-8) is passed over: it names no record this file holds whole.
fn keys_where(
    path: &Path,
    offset: u64,
    prefix: Option<&str>,
) -> io::Result<HashSet<(String, u16)>> {
    #[derive(serde::Deserialize)]
    struct Identity {
        #[serde(default)]
        request_id: String,
        #[serde(default)]
        row: u16,
    }
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(HashSet::new()),
        Err(e) => return Err(e),
    };
    file.seek(SeekFrom::Start(offset))?;
    // A prefix JSON writes as it is (no character it escapes) is looked for in the raw
    // line first: most lines are other flushes' and are not parsed.
    let raw = prefix
        .filter(|p| !p.chars().any(|c| c == '"' || c == '\\' || c.is_control()))
        .map(|p| memchr::memmem::Finder::new(p.as_bytes()));
    let mut keys = HashSet::new();
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        if raw.as_ref().is_some_and(|f| f.find(&line).is_none()) {
            continue;
        }
        let Ok(id) = serde_json::from_slice::<Identity>(&line) else {
            continue;
        };
        if prefix.is_none_or(|p| id.request_id.starts_with(p)) {
            keys.insert((id.request_id, id.row));
        }
    }
    Ok(keys)
}

impl JsonlLog {
    /// Opens (creating if needed) a log for appending, setting a torn last line aside.
    pub fn open(path: PathBuf, max_bytes: u64, max_files: u32) -> io::Result<JsonlLog> {
        let mut file = super::private::options()
            .create(true)
            .read(true)
            .append(true)
            .open(&path)?;
        let mut size = file.metadata()?.len();
        let mut torn_lines = 0;
        if size > 0 {
            let keep = complete_prefix(&mut file, size)?;
            if keep < size {
                let mut tail = Vec::new();
                file.seek(SeekFrom::Start(keep))?;
                file.read_to_end(&mut tail)?;
                let mut aside = super::private::options()
                    .create(true)
                    .append(true)
                    .open(torn_path(&path))?;
                aside.write_all(&tail)?;
                aside.write_all(b"\n")?;
                aside.sync_data()?;
                file.set_len(keep)?;
                file.sync_data()?;
                size = keep;
                torn_lines = 1;
            }
        }
        Ok(JsonlLog {
            path,
            file,
            size,
            max_bytes,
            max_files,
            deleted_records: 0,
            torn_lines,
        })
    }

    /// The file being appended to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Torn lines set aside when it was opened.
    pub fn torn_lines(&self) -> u64 {
        self.torn_lines
    }

    /// Appends one record as one line (never rotates: see [`JsonlLog::rotate_if_full`]).
    pub fn append<T: serde::Serialize>(&mut self, record: &T) -> io::Result<()> {
        let mut line = serde_json::to_vec(record).map_err(io::Error::other)?;
        line.push(b'\n');
        self.file.write_all(&line)?;
        self.size += line.len() as u64;
        Ok(())
    }

    /// Rotates the file if it reached `max_bytes`. Called before a batch of appends, so
    /// a batch always lands in one file (recovery reads it from a recorded offset).
    pub fn rotate_if_full(&mut self) -> io::Result<()> {
        if self.size >= self.max_bytes && self.size > 0 {
            self.rotate()?;
        }
        Ok(())
    }

    /// Records lost to rotation (in deleted files) since the last call.
    pub fn take_deleted_records(&mut self) -> u64 {
        std::mem::take(&mut self.deleted_records)
    }

    /// Makes appended records durable.
    pub fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    /// The `(request_id, row)` of every record from byte `offset` on: what a flush that
    /// crashed had already written here.
    pub fn keys_from(&self, offset: u64) -> io::Result<HashSet<(String, u16)>> {
        keys_in(&self.path, offset)
    }

    /// The `(request_id, row)` of every record of the current file whose request id
    /// starts with `prefix` (one flush's requests): what a crashed flush wrote here when
    /// where it started writing is not known.
    pub fn keys_of_requests(&self, prefix: &str) -> io::Result<HashSet<(String, u16)>> {
        keys_where(&self.path, 0, Some(prefix))
    }

    fn rotated(&self, n: u32) -> PathBuf {
        rotated_name(&self.path, n)
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.file.sync_data()?;
        let oldest = self.rotated(self.max_files.max(1));
        if oldest.exists() {
            // Whoever wrote them (this process or an earlier one), they are counted.
            self.deleted_records += count_lines(&oldest)?;
            std::fs::remove_file(&oldest)?;
        }
        crate::test_hooks::crash_point("log_rotating");
        for n in (1..self.max_files.max(1)).rev() {
            let from = self.rotated(n);
            if from.exists() {
                std::fs::rename(&from, self.rotated(n + 1))?;
            }
        }
        std::fs::rename(&self.path, self.rotated(1))?;
        self.file = super::private::options()
            .create(true)
            .read(true)
            .append(true)
            .open(&self.path)?;
        self.size = 0;
        Ok(())
    }
}

/// Reads a `.jsonl` file line by line from a byte offset without changing it: for
/// readers of the outcome logs and spill segments while a sidecar may be appending to
/// them (no lock, no truncation of a torn tail, one line in memory at a time).
pub struct LineReader {
    reader: BufReader<File>,
    offset: u64,
    line: Vec<u8>,
}

/// One line read by [`LineReader`].
#[derive(Debug)]
pub struct ReadLine<'a> {
    /// Byte offset of the line in the file.
    pub offset: u64,
    /// The line without its newline.
    pub text: &'a [u8],
    /// False for a last line without a newline: torn by a crash mid-append, or being
    /// appended right now.
    pub complete: bool,
}

impl LineReader {
    /// Opens `path` read-only, positioned at byte `offset`.
    pub fn open(path: &Path, offset: u64) -> io::Result<LineReader> {
        let mut file = File::open(path)?;
        file.seek(SeekFrom::Start(offset))?;
        Ok(LineReader {
            reader: BufReader::with_capacity(256 << 10, file),
            offset,
            line: Vec::with_capacity(1024),
        })
    }

    /// The next line, or `None` at the end of the file.
    pub fn next_line(&mut self) -> io::Result<Option<ReadLine<'_>>> {
        self.line.clear();
        let read = self.reader.read_until(b'\n', &mut self.line)?;
        if read == 0 {
            return Ok(None);
        }
        let offset = self.offset;
        self.offset += read as u64;
        let complete = self.line.last() == Some(&b'\n');
        let mut text = &self.line[..];
        if complete {
            text = &text[..text.len() - 1];
        }
        Ok(Some(ReadLine {
            offset,
            text,
            complete,
        }))
    }
}

/// `dir/name.jsonl` → `dir/name.N.jsonl`.
pub fn rotated_name(path: &Path, n: u32) -> PathBuf {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("log");
    path.with_file_name(format!("{stem}.{n}.jsonl"))
}

/// `dir/name.jsonl` → `dir/name.jsonl.torn`: where torn last lines are set aside.
pub fn torn_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".torn");
    path.with_file_name(name)
}

/// Length of the file up to and including its last newline.
fn complete_prefix(file: &mut File, size: u64) -> io::Result<u64> {
    let mut end = size;
    let mut block = vec![0_u8; 64 * 1024];
    while end > 0 {
        let start = end.saturating_sub(block.len() as u64);
        let chunk = &mut block[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(chunk)?;
        if let Some(i) = chunk.iter().rposition(|b| *b == b'\n') {
            return Ok(start + i as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

fn count_lines(path: &Path) -> io::Result<u64> {
    let mut count = 0;
    let mut reader = BufReader::new(File::open(path)?);
    loop {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            return Ok(count);
        }
        count += memchr::memchr_iter(b'\n', buffer).count() as u64;
        let n = buffer.len();
        reader.consume(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotates_between_batches_keeping_at_most_max_files_and_counts_what_it_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("unknown.jsonl");
        // Files of an earlier run: their records count too when rotation deletes them.
        std::fs::write(rotated_name(&path, 2), "{}\n{}\n{}\n").unwrap();
        let mut log = JsonlLog::open(path.clone(), 40, 2).unwrap();
        for i in 0..10 {
            log.rotate_if_full().unwrap();
            log.append(&serde_json::json!({ "n": i, "pad": "xxxxxxxxxx" }))
                .unwrap();
        }
        log.sync().unwrap();
        // Lines of 27 bytes: a file takes two before it passes 40 bytes.
        let current = std::fs::read_to_string(&path).unwrap();
        assert_eq!(current.lines().count(), 2);
        assert!(current.contains("\"n\":9"));
        assert!(rotated_name(&path, 1).exists() && rotated_name(&path, 2).exists());
        assert!(!rotated_name(&path, 3).exists());
        assert_eq!(
            log.take_deleted_records(),
            3 + 2 + 2,
            "the earlier run's three, then two per deleted file of this run"
        );
        assert_eq!(log.take_deleted_records(), 0);
        let previous = std::fs::read_to_string(rotated_name(&path, 1)).unwrap();
        assert!(previous.contains("\"n\":7"));
    }

    #[test]
    fn a_torn_last_line_is_set_aside_and_the_next_append_starts_clean() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rejected.jsonl");
        std::fs::write(&path, "1\n2\n{\"torn").unwrap();
        let mut log = JsonlLog::open(path.clone(), 1 << 20, 2).unwrap();
        assert_eq!(log.torn_lines(), 1);
        assert_eq!(log.size(), 4);
        log.append(&3).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "1\n2\n3\n");
        assert_eq!(
            std::fs::read_to_string(torn_path(&path)).unwrap(),
            "{\"torn\n"
        );
        let again = JsonlLog::open(path, 1 << 20, 2).unwrap();
        assert_eq!(again.torn_lines(), 0);
    }

    #[test]
    fn the_line_reader_reads_from_an_offset_and_flags_a_torn_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("unknown.jsonl");
        std::fs::write(&path, "{\"a\":1}\n\n{\"b\":2}\n{\"to").unwrap();
        let mut reader = LineReader::open(&path, 8).unwrap();
        let mut seen = Vec::new();
        while let Some(line) = reader.next_line().unwrap() {
            seen.push((
                line.offset,
                String::from_utf8(line.text.to_vec()).unwrap(),
                line.complete,
            ));
        }
        assert_eq!(
            seen,
            [
                (8, String::new(), true),
                (9, "{\"b\":2}".to_string(), true),
                (17, "{\"to".to_string(), false)
            ]
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap().len(),
            21,
            "nothing is truncated"
        );
    }

    #[test]
    fn lines_containing_counts_whole_lines_and_leaves_a_torn_last_line_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rejected.jsonl");
        std::fs::write(
            &path,
            "{\"k\":\"x\"}\n{\"k\":\"y\"}\n{\"k\":\"x\"}\n{\"k\":\"x\"",
        )
        .unwrap();
        let found = lines_containing(&path, &["\"x\""]).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[&line_hash(b"{\"k\":\"x\"}")],
            2,
            "the torn third x left out"
        );
        let none = lines_containing(&dir.path().join("absent.jsonl"), &["x"]).unwrap();
        assert!(none.is_empty());
    }

    #[test]
    fn keys_from_an_offset_read_only_what_follows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("unknown.jsonl");
        let mut log = JsonlLog::open(path, 1 << 20, 2).unwrap();
        log.append(&serde_json::json!({"request_id": "w/1/1/0", "row": 0}))
            .unwrap();
        let at = log.size();
        log.append(&serde_json::json!({"request_id": "w/1/2/0", "row": 1}))
            .unwrap();
        let keys = log.keys_from(at).unwrap();
        assert_eq!(keys.len(), 1);
        assert!(keys.contains(&("w/1/2/0".to_string(), 1)));
    }
}
