//! The ingest log: increments of durable requests (the HTTP increment API with
//! `ingest.http.durable`), on disk before their request is answered.
//!
//! # Files
//!
//! - `ingest.log`, the active file: one JSON line per increment ([`IngestEntry`]),
//!   appended by the request handlers. A request's lines go out in one `write`; the
//!   request is answered once an `fdatasync` covers them.
//! - `ingest.<incarnation>.<seq>.sealed`: an active file a flush took (its fsync, then
//!   a rename), waiting to become the spill segment `spill.<incarnation>.<seq>.jsonl`.
//!   The flusher reserves the sequence number for it, so no flush of its own writes that
//!   segment. At start, a leftover `ingest.log` is sealed under the new incarnation and
//!   sequence 0, which no flush uses.
//!
//! A sealed file is summed per row and written as that segment whole (temporary file,
//! fsync, rename); only then is it removed. A start that finds both knows the segment
//! holds it and removes the file: each logged increment is in exactly one of the two.
//! (The flusher replays nothing while a written file's removal is pending, so a segment
//! is never consumed while its file remains; and a file that waited while the replay
//! moved past its number is first renumbered after the replay cursor
//! ([`IngestLog::renumber`]), or its segment would count as consumed.)
//! From the segment on, the spill's cursor and the journal carry it as they carry any
//! spilled row (see [`super::spill`]).
//!
//! # Idempotency keys
//!
//! A durable request with an `Idempotency-Key` writes, after its increments and in the
//! same append, a [`KeyLine`]: the key, its body's hash and the answer. When a sealed
//! file is moved into the spill its key lines are carried to `ingest.keys.jsonl` (first
//! line: the seed of the body hashes, made once per directory), which a start reads back
//! with the key lines of the files not moved yet, keeping those inside the window (the
//! newest `ingest.http.max_idempotency_keys`) and rewriting the file with them. So a key
//! answered before a SIGKILL is answered again after the restart: a client's retry of a
//! request whose answer it lost is not counted twice.
//!
//! # Group commit
//!
//! Appends take one lock for the `write` only; one thread (`ingest_log/sync.rs`) makes
//! them durable, each `fdatasync` covering every append made before it started, so
//! concurrent requests share it and wait for one wake-up each. A seal syncs the file
//! itself before renaming it.
//!
//! # Bound
//!
//! `state.max_ingest_log_bytes` bounds the active and sealed files together: a request
//! that would pass it is refused before anything is written (the HTTP API answers 429),
//! never dropped after it was answered.

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use self::sync::GroupCommit;
use super::private::{options, sync_dir};

pub mod streams;
mod sync;

pub use streams::{Recovered as RecoveredStreams, StreamLine};

/// The active file's name.
pub const ACTIVE: &str = "ingest.log";
/// The answered idempotency keys carried out of moved sealed files.
pub const KEYS: &str = "ingest.keys.jsonl";
const SEALED_PREFIX: &str = "ingest.";
const SEALED_SUFFIX: &str = ".sealed";
/// How a [`KeyLine`] begins.
const KEY_LINE_START: &[u8] = b"{\"key\":";
/// A line count past any bound: the next carry rewrites its file whole (after an append
/// that failed and may have left part of a line).
const FORCE_REWRITE: usize = usize::MAX / 4;
/// How an append begins: `{"g":N}`, N the lines that follow it (see [`read_sealed`]).
const GROUP_LINE_START: &[u8] = b"{\"g\":";

/// One logged increment: what the request said, with the minute it was placed in when
/// it was accepted (so a later start does not judge its time window again).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IngestEntry {
    /// The metric name.
    #[serde(rename = "n")]
    pub name: String,
    /// The tags, in request order.
    #[serde(rename = "t", default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<(String, String)>,
    /// The delta.
    #[serde(rename = "d")]
    pub delta: i64,
    /// The minute it counts in (minutes since the Unix epoch).
    #[serde(rename = "m")]
    pub minute: u32,
}

impl IngestEntry {
    /// Appends the entry's line to `out`.
    pub fn write_line(
        out: &mut Vec<u8>,
        name: &str,
        tags: &[(&str, &str)],
        delta: i64,
        minute: u32,
    ) {
        #[derive(Serialize)]
        struct Line<'a> {
            n: &'a str,
            #[serde(skip_serializing_if = "<[_]>::is_empty")]
            t: &'a [(&'a str, &'a str)],
            d: i64,
            m: u32,
        }
        let line = Line {
            n: name,
            t: tags,
            d: delta,
            m: minute,
        };
        // Serializing strings and integers into a Vec cannot fail.
        if serde_json::to_writer(&mut *out, &line).is_ok() {
            out.push(b'\n');
        }
    }
}

/// An answered `Idempotency-Key`, as the ingest log and `ingest.keys.jsonl` keep it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyLine {
    /// The key.
    pub key: String,
    /// The body's hash, with the directory's seed.
    #[serde(rename = "h")]
    pub body_hash: u64,
    /// The answer's status.
    #[serde(rename = "s")]
    pub status: u16,
    /// The answer's body.
    #[serde(rename = "b")]
    pub answer: String,
    /// When it was answered, Unix seconds.
    pub at: i64,
}

impl KeyLine {
    /// Appends the key's line to `out`.
    pub fn write_line(&self, out: &mut Vec<u8>) {
        if serde_json::to_writer(&mut *out, self).is_ok() {
            out.push(b'\n');
        }
    }
}

/// What the log keeps besides increments: how long and how many answered keys
/// (`ingest.http.idempotency_window`, `ingest.http.max_idempotency_keys`), and how many
/// cumulative streams (`ingest.otlp.max_streams`).
#[derive(Clone, Copy, Debug)]
pub struct Retention {
    /// The keys' window, in seconds.
    pub window_secs: i64,
    /// The most keys kept.
    pub max_keys: usize,
    /// The most cumulative streams kept.
    pub max_streams: usize,
    /// Whether the streams' points of moved files are kept in `ingest.streams.jsonl`:
    /// with durable OTLP receivers, or none to take them. OTLP receivers that are not
    /// durable merged every point of the files found at start into their own table
    /// (`otlp_streams.bin`), and a file here would later bring back points that table
    /// has since moved past or evicted.
    pub keep_streams: bool,
}

/// What a sealed file holds.
#[derive(Debug, Default)]
pub struct SealedContent {
    /// The increments.
    pub entries: Vec<IngestEntry>,
    /// The answered keys.
    pub keys: Vec<KeyLine>,
    /// The cumulative streams' last points.
    pub streams: Vec<StreamLine>,
    /// Lines that did not read (a torn last line of an append cut short by a crash,
    /// never answered, or damage).
    pub unread: u64,
}

/// A sealed file: the segment it becomes, and where it is.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Sealed {
    /// The incarnation of the segment it becomes.
    pub incarnation: u64,
    /// The flush sequence of the segment it becomes.
    pub seq: u64,
    /// The file.
    pub path: PathBuf,
}

/// An append written into the active file and not yet known to be on disk.
#[derive(Debug)]
#[must_use = "an append is durable only once `IngestLog::synced` returns"]
pub struct Written {
    generation: u64,
    end: u64,
}

/// Why a durable append was not made durable.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    /// The log would pass `state.max_ingest_log_bytes`; nothing was written.
    #[error("the ingest log is full ({bytes} of {max} bytes)")]
    Full {
        /// Bytes the log holds.
        bytes: u64,
        /// The bound.
        max: u64,
    },
    /// A write or sync failed: the request's increments may or may not be on disk.
    #[error("the ingest log could not be written: {0}")]
    Io(#[from] io::Error),
    /// An earlier write or sync failed: after a failed fsync the file's state is
    /// unknown, so the log takes nothing more until a restart.
    #[error("the ingest log failed earlier and takes nothing more until a restart")]
    Failed,
}

/// The ingest log of one state directory, shared by the request handlers (appends) and
/// the flusher (seals).
pub struct IngestLog {
    dir: PathBuf,
    max_bytes: u64,
    active: Mutex<Active>,
    /// Makes appends durable (`sync.rs`).
    commit: GroupCommit,
    /// Bytes of the sealed files.
    sealed_bytes: AtomicU64,
    /// Bytes of the active file.
    active_bytes: AtomicU64,
    /// A write failed part-way: the file may end in a partial line, so nothing more goes
    /// in until a restart.
    failed: AtomicBool,
    /// Bytes appended since start.
    appended: AtomicU64,
    /// The seed of the body hashes of idempotency keys.
    seed: u64,
    retention: Retention,
    /// Key lines in `ingest.keys.jsonl` (compacted past twice the bound).
    key_lines: Mutex<usize>,
    /// The keys a start read back, for the HTTP listener to take.
    recovered: Mutex<Vec<KeyLine>>,
    /// `ingest.streams.jsonl` as this process knows it.
    streams_file: Mutex<StreamsFile>,
    /// The stream table a start read back, for the OTLP receivers to take.
    recovered_streams: Mutex<RecoveredStreams>,
}

/// What the stream file holds: its mark (none: no file) and how many lines.
struct StreamsFile {
    mark: Option<u64>,
    lines: usize,
}

struct Active {
    file: Arc<File>,
    /// Bumped at each seal: an append of an earlier generation is in a sealed file,
    /// synced by the seal.
    generation: u64,
    len: u64,
}

impl IngestLog {
    /// Opens the log of `dir`: a leftover active file is sealed under `incarnation` and
    /// sequence 0 (see the module doc), and a fresh one started; the answered keys still
    /// inside `retention` are read back.
    pub fn open(
        dir: &Path,
        max_bytes: u64,
        incarnation: u64,
        retention: Retention,
    ) -> io::Result<IngestLog> {
        let active_path = dir.join(ACTIVE);
        match fs::metadata(&active_path) {
            Ok(meta) if meta.len() > 0 => {
                fs::rename(&active_path, dir.join(sealed_name(incarnation, 0)))?;
                sync_dir(dir)?;
            }
            Ok(_) => fs::remove_file(&active_path)?,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
        let file = create_active(dir)?;
        let log = IngestLog {
            dir: dir.to_owned(),
            max_bytes,
            active: Mutex::new(Active {
                file: Arc::new(file),
                generation: 0,
                len: 0,
            }),
            commit: GroupCommit::start()?,
            sealed_bytes: AtomicU64::new(0),
            active_bytes: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            appended: AtomicU64::new(0),
            seed: 0,
            retention,
            key_lines: Mutex::new(0),
            recovered: Mutex::new(Vec::new()),
            streams_file: Mutex::new(StreamsFile {
                mark: None,
                lines: 0,
            }),
            recovered_streams: Mutex::new(RecoveredStreams::default()),
        };
        let sealed = log.sealed()?;
        let bytes: u64 = sealed
            .iter()
            .filter_map(|s| fs::metadata(&s.path).ok())
            .map(|m| m.len())
            .sum();
        log.sealed_bytes.store(bytes, Ordering::Relaxed);
        let (seed, mut keys) = read_keys(&dir.join(KEYS))?;
        let (mark, lines) = streams::read(dir)?;
        let mut table = RecoveredStreams {
            complete_since: mark,
            lines: Vec::new(),
        };
        let now_nanos = unix_now_nanos();
        table.fold(lines, retention.max_streams, now_nanos);
        let file_lines = table.lines.len();
        for file in &sealed {
            let content = read_sealed(&file.path)?;
            keys.extend(content.keys);
            table.fold(content.streams, retention.max_streams, now_nanos);
        }
        *log.streams_file.lock() = StreamsFile {
            mark,
            lines: if mark.is_some() { file_lines } else { 0 },
        };
        *log.recovered_streams.lock() = table;
        let log = IngestLog {
            seed: seed.unwrap_or_else(|| fastrand::u64(..)),
            ..log
        };
        let kept = retain(keys, retention, unix_now());
        log.write_keys(&kept)?;
        *log.recovered.lock() = kept;
        Ok(log)
    }

    /// The seed of the idempotency keys' body hashes.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The answered keys a start read back (once).
    pub fn take_recovered_keys(&self) -> Vec<KeyLine> {
        std::mem::take(&mut *self.recovered.lock())
    }

    /// The stream table a start read back (once): `ingest.streams.jsonl` folded with the
    /// stream lines of the sealed files (see [`streams`]).
    pub fn take_recovered_streams(&self) -> RecoveredStreams {
        std::mem::take(&mut *self.recovered_streams.lock())
    }

    /// Appends the stream lines of a sealed file being moved into the spill to
    /// `ingest.streams.jsonl`, synced (before the file is removed); rewrites the file
    /// with the fold once it holds twice the bound. A file not there yet starts with
    /// the mark now: a stream it does not hold is then a baseline, never counted whole.
    pub fn carry_streams(&self, lines: &[StreamLine]) -> io::Result<()> {
        if lines.is_empty() || !self.retention.keep_streams {
            return Ok(());
        }
        let mut file = self.streams_file.lock();
        let max_streams = self.retention.max_streams;
        if file.mark.is_none() || file.lines + lines.len() > 2 * max_streams.max(1) {
            let now = unix_now_nanos();
            let (mark, held) = streams::read(&self.dir)?;
            let mut table = RecoveredStreams {
                complete_since: Some(mark.or(file.mark).unwrap_or(now)),
                lines: Vec::new(),
            };
            table.fold(
                held.into_iter().chain(lines.iter().copied()),
                max_streams,
                now,
            );
            return self.write_streams(&mut file, &table);
        }
        let mut out = Vec::new();
        for line in lines {
            line.write_line(&mut out);
        }
        let appended = options()
            .append(true)
            .open(self.dir.join(streams::FILE))
            .and_then(|mut handle| {
                handle.write_all(&out)?;
                handle.sync_data()
            });
        match appended {
            Ok(()) => file.lines += lines.len(),
            // The file may end in part of a line, which the next append would glue onto
            // its first line: the next carry rewrites the file whole instead.
            Err(_) => file.lines = FORCE_REWRITE,
        }
        appended
    }

    /// Replaces `ingest.streams.jsonl` with `table` folded with what the file holds (a
    /// durable OTLP receiver's table at start, merged with what it found elsewhere).
    pub fn rewrite_streams(&self, table: &RecoveredStreams) -> io::Result<()> {
        let mut file = self.streams_file.lock();
        let (mark, held) = streams::read(&self.dir)?;
        let now = unix_now_nanos();
        let mut merged = RecoveredStreams {
            complete_since: Some(table.complete_since.unwrap_or(now).max(mark.unwrap_or(0))),
            lines: table.lines.clone(),
        };
        merged.fold(held, self.retention.max_streams, now);
        self.write_streams(&mut file, &merged)
    }

    /// Removes `ingest.streams.jsonl` (a receiver that is not durable took its table into
    /// its own file).
    pub fn remove_streams(&self) -> io::Result<()> {
        let mut file = self.streams_file.lock();
        streams::remove(&self.dir)?;
        *file = StreamsFile {
            mark: None,
            lines: 0,
        };
        Ok(())
    }

    fn write_streams(&self, file: &mut StreamsFile, table: &RecoveredStreams) -> io::Result<()> {
        let mark = table.complete_since.unwrap_or_else(unix_now_nanos);
        super::private::write_atomically(
            &self.dir,
            &self.dir.join(streams::FILE),
            &table.encode(mark),
        )?;
        *file = StreamsFile {
            mark: Some(mark),
            lines: table.lines.len(),
        };
        Ok(())
    }

    /// Appends the keys of a sealed file being moved into the spill to
    /// `ingest.keys.jsonl`, synced (before the file is removed); rewrites the file with
    /// only the keys inside the window once it holds twice the bound.
    pub fn carry_keys(&self, keys: &[KeyLine]) -> io::Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        let mut lines = self.key_lines.lock();
        if *lines >= FORCE_REWRITE {
            // An append failed and may have left part of a line: the file is rewritten
            // with what reads back and these keys, never appended to.
            let (_, mut all) = read_keys(&self.dir.join(KEYS))?;
            all.extend_from_slice(keys);
            let kept = retain(all, self.retention, unix_now());
            drop(lines);
            return self.write_keys(&kept);
        }
        let mut out = Vec::new();
        for key in keys {
            key.write_line(&mut out);
        }
        let appended = options()
            .append(true)
            .open(self.dir.join(KEYS))
            .and_then(|mut file| {
                file.write_all(&out)?;
                file.sync_data()
            });
        if let Err(error) = appended {
            // As for the stream file: rewritten whole at the next carry.
            *lines = FORCE_REWRITE;
            return Err(error);
        }
        *lines += keys.len();
        if *lines > 2 * self.retention.max_keys.max(1) {
            let (_, all) = read_keys(&self.dir.join(KEYS))?;
            let kept = retain(all, self.retention, unix_now());
            drop(lines);
            self.write_keys(&kept)?;
        }
        Ok(())
    }

    /// Replaces `ingest.keys.jsonl` with the seed and `keys`.
    fn write_keys(&self, keys: &[KeyLine]) -> io::Result<()> {
        let mut out = serde_json::to_vec(&serde_json::json!({ "seed": self.seed }))
            .map_err(io::Error::other)?;
        out.push(b'\n');
        for key in keys {
            key.write_line(&mut out);
        }
        super::private::write_atomically(&self.dir, &self.dir.join(KEYS), &out)?;
        *self.key_lines.lock() = keys.len();
        Ok(())
    }

    /// Bytes the active and sealed files hold.
    pub fn bytes(&self) -> u64 {
        self.sealed_bytes.load(Ordering::Relaxed) + self.active_bytes.load(Ordering::Relaxed)
    }

    /// The bound (`state.max_ingest_log_bytes`).
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Fsyncs made so far.
    pub fn syncs(&self) -> u64 {
        self.commit.syncs()
    }

    /// Bytes appended since start (the benchmark's bytes per increment).
    pub fn appended_bytes(&self) -> u64 {
        self.appended.load(Ordering::Relaxed)
    }

    /// Whether `more` bytes would pass the bound.
    pub fn would_overflow(&self, more: u64) -> bool {
        self.bytes().saturating_add(more) > self.max_bytes
    }

    /// Appends `lines` (whole [`IngestEntry`] and [`KeyLine`] lines) and returns once
    /// they are on disk. Blocking.
    pub fn append(&self, lines: &[u8]) -> Result<(), AppendError> {
        let (generation, end) = self.write(lines)?;
        if self.commit.wait_blocking(generation, end) {
            Ok(())
        } else {
            Err(AppendError::Failed)
        }
    }

    /// The same, waiting without a thread of its own: the `write` runs on the caller's
    /// thread (into the page cache), the sync on the group commit's.
    pub async fn append_async(&self, lines: &[u8]) -> Result<(), AppendError> {
        let (generation, end) = self.write(lines)?;
        if self.commit.wait(generation, end).await {
            Ok(())
        } else {
            Err(AppendError::Failed)
        }
    }

    /// Writes `lines` at the end of the active file, into the page cache (a SIGKILL no
    /// longer loses them, a power cut may), and asks for a sync; [`IngestLog::synced`]
    /// waits for it. The OTLP receivers write under their stream table's lock, so that
    /// what the table holds was written, and wait for the sync after releasing it.
    pub fn write_lines(&self, lines: &[u8]) -> Result<Written, AppendError> {
        let (generation, end) = self.write(lines)?;
        Ok(Written { generation, end })
    }

    /// Returns once the append `written` is on disk.
    pub async fn synced(&self, written: Written) -> Result<(), AppendError> {
        if self.commit.wait(written.generation, written.end).await {
            Ok(())
        } else {
            Err(AppendError::Failed)
        }
    }

    /// Writes `lines` at the end of the active file and asks for a sync: the generation
    /// and the end of the append.
    fn write(&self, lines: &[u8]) -> Result<(u64, u64), AppendError> {
        if self.failed.load(Ordering::Relaxed) || self.commit.failed() {
            return Err(AppendError::Failed);
        }
        // The append's first line says how many follow: a `write` a SIGKILL cuts short
        // (the kernel stops a write between pages for a fatal signal) leaves a prefix of
        // it, which a reader then tells from a whole append and skips.
        let count = lines.iter().filter(|&&b| b == b'\n').count();
        let mut group = format!("{{\"g\":{count}}}\n").into_bytes();
        group.extend_from_slice(lines);
        let lines = group.as_slice();
        let mut active = self.active.lock();
        let bytes = self.bytes();
        let more = lines.len() as u64;
        if bytes.saturating_add(more) > self.max_bytes {
            return Err(AppendError::Full {
                bytes,
                max: self.max_bytes,
            });
        }
        if let Err(error) = (&*active.file).write_all(lines) {
            // Part of the lines may be in the file, without a newline at its end: the
            // next append would glue onto it. Nothing more goes in.
            self.failed.store(true, Ordering::Relaxed);
            return Err(error.into());
        }
        active.len += more;
        self.active_bytes.store(active.len, Ordering::Relaxed);
        self.appended.fetch_add(more, Ordering::Relaxed);
        self.commit
            .request(active.generation, active.len, &active.file);
        Ok((active.generation, active.len))
    }

    /// Seals the active file as the segment-to-be `(incarnation, seq)` (nothing when it
    /// is empty) and starts a new one; returns whether it sealed.
    pub fn seal(&self, incarnation: u64, seq: u64) -> io::Result<bool> {
        let mut active = self.active.lock();
        if active.len == 0 {
            return Ok(false);
        }
        active.file.sync_data()?;
        fs::rename(
            self.dir.join(ACTIVE),
            self.dir.join(sealed_name(incarnation, seq)),
        )?;
        // The new file's creation and the rename reach the disk with one directory sync.
        let file = create_active(&self.dir)?;
        self.sealed_bytes.fetch_add(active.len, Ordering::Relaxed);
        active.file = Arc::new(file);
        active.generation += 1;
        active.len = 0;
        self.active_bytes.store(0, Ordering::Relaxed);
        self.commit.sealed(active.generation);
        Ok(true)
    }

    /// The sealed files, oldest first.
    pub fn sealed(&self) -> io::Result<Vec<Sealed>> {
        let mut sealed = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            if let Some((incarnation, seq)) = parse_sealed(&name.to_string_lossy()) {
                sealed.push(Sealed {
                    incarnation,
                    seq,
                    path: entry.path(),
                });
            }
        }
        sealed.sort();
        Ok(sealed)
    }

    /// Gives a sealed file the segment-to-be `(incarnation, seq)` instead of its own (the
    /// replay passed where its own would sort); returns it renamed.
    pub fn renumber(&self, sealed: &Sealed, incarnation: u64, seq: u64) -> io::Result<Sealed> {
        let path = self.dir.join(sealed_name(incarnation, seq));
        fs::rename(&sealed.path, &path)?;
        sync_dir(&self.dir)?;
        Ok(Sealed {
            incarnation,
            seq,
            path,
        })
    }

    /// Removes a sealed file once its segment is on disk.
    pub fn remove(&self, sealed: &Sealed) -> io::Result<()> {
        let bytes = fs::metadata(&sealed.path).map(|m| m.len()).unwrap_or(0);
        fs::remove_file(&sealed.path)?;
        sync_dir(&self.dir)?;
        let _ = self
            .sealed_bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                Some(b.saturating_sub(bytes))
            });
        Ok(())
    }
}

/// Whether `dir` holds an ingest log (an active file with anything in it, or a sealed
/// file): a start must move it into the spill even with no durable listener.
pub fn present(dir: &Path) -> io::Result<bool> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if parse_sealed(&name).is_some() || name == ACTIVE && entry.metadata()?.len() > 0 {
            return Ok(true);
        }
    }
    Ok(false)
}

/// What a sealed file holds.
///
/// Each append begins with a line giving the number of lines that follow it; an append
/// cut short (a SIGKILL inside its `write`: never synced, so never answered) is counted
/// in `unread` whole and none of its lines is taken. Without it, the increments of a
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
                content.absorb(std::mem::take(held));
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

/// The seed and the key lines of `ingest.keys.jsonl` (none when it is missing; an
/// unreadable line is skipped: a key lost makes a retry count again, it never loses an
/// increment).
fn read_keys(path: &Path) -> io::Result<(Option<u64>, Vec<KeyLine>)> {
    let text = match fs::read(path) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok((None, Vec::new())),
        Err(error) => return Err(error),
    };
    let mut lines = text.split(|b| *b == b'\n').filter(|l| !l.is_empty());
    #[derive(Deserialize)]
    struct Header {
        seed: u64,
    }
    let seed = lines
        .next()
        .and_then(|l| serde_json::from_slice::<Header>(l).ok())
        .map(|h| h.seed);
    let keys = lines
        .filter_map(|l| serde_json::from_slice::<KeyLine>(l).ok())
        .collect();
    Ok((seed, keys))
}

/// The keys still inside the window at `now`, the newest answer of each, at most the
/// newest `max_keys`, oldest first.
fn retain(mut keys: Vec<KeyLine>, retention: Retention, now: i64) -> Vec<KeyLine> {
    keys.retain(|k| now.saturating_sub(k.at) < retention.window_secs);
    keys.sort_by_key(|k| k.at);
    let mut seen = std::collections::HashSet::new();
    let mut newest_first: Vec<KeyLine> = keys
        .into_iter()
        .rev()
        .filter(|k| seen.insert(k.key.clone()))
        .take(retention.max_keys)
        .collect();
    newest_first.reverse();
    newest_first
}

/// Now, Unix nanoseconds (the OTLP receivers' clock).
pub fn unix_now_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Now, Unix seconds.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn create_active(dir: &Path) -> io::Result<File> {
    let file = options()
        .create(true)
        .append(true)
        .truncate(false)
        .open(dir.join(ACTIVE))?;
    sync_dir(dir)?;
    Ok(file)
}

fn sealed_name(incarnation: u64, seq: u64) -> String {
    format!("{SEALED_PREFIX}{incarnation:010}.{seq:012}{SEALED_SUFFIX}")
}

fn parse_sealed(name: &str) -> Option<(u64, u64)> {
    let rest = name
        .strip_prefix(SEALED_PREFIX)?
        .strip_suffix(SEALED_SUFFIX)?;
    let (incarnation, seq) = rest.split_once('.')?;
    Some((incarnation.parse().ok()?, seq.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const RETENTION: Retention = Retention {
        window_secs: 600,
        max_keys: 4,
        max_streams: 4,
        keep_streams: true,
    };

    fn line(name: &str, delta: i64) -> Vec<u8> {
        let mut out = Vec::new();
        IngestEntry::write_line(&mut out, name, &[("k", "v")], delta, 7);
        out
    }

    #[test]
    fn appends_are_read_back_from_the_sealed_file() {
        let dir = tempfile::tempdir().unwrap();
        let log = IngestLog::open(dir.path(), 1 << 20, 3, RETENTION).unwrap();
        log.append(&line("a", 1)).unwrap();
        log.append(&line("b", -2)).unwrap();
        assert!(log.seal(3, 9).unwrap());
        assert!(
            !log.seal(3, 10).unwrap(),
            "an empty active file is not sealed"
        );
        let sealed = log.sealed().unwrap();
        assert_eq!(sealed.len(), 1);
        assert_eq!((sealed[0].incarnation, sealed[0].seq), (3, 9));
        let SealedContent {
            entries, unread, ..
        } = read_sealed(&sealed[0].path).unwrap();
        assert_eq!(unread, 0);
        assert_eq!(
            entries
                .iter()
                .map(|e| (e.name.as_str(), e.delta))
                .collect::<Vec<_>>(),
            [("a", 1), ("b", -2)]
        );
        assert_eq!(entries[0].tags, [("k".to_owned(), "v".to_owned())]);
        assert_eq!(entries[0].minute, 7);
        log.remove(&sealed[0]).unwrap();
        assert_eq!(log.bytes(), 0);
    }

    #[test]
    fn a_full_log_refuses_before_writing() {
        let dir = tempfile::tempdir().unwrap();
        let one = line("a", 1);
        // An append takes its lines and the line that begins its group.
        let appended = (one.len() + b"{\"g\":1}\n".len()) as u64;
        let log = IngestLog::open(dir.path(), appended * 2, 1, RETENTION).unwrap();
        log.append(&one).unwrap();
        log.append(&one).unwrap();
        assert!(matches!(log.append(&one), Err(AppendError::Full { .. })));
        assert_eq!(
            fs::metadata(dir.path().join(ACTIVE)).unwrap().len(),
            2 * appended
        );
        // Sealed files count against the bound until they are removed.
        log.seal(1, 1).unwrap();
        assert!(matches!(log.append(&one), Err(AppendError::Full { .. })));
    }

    #[test]
    fn a_leftover_active_file_is_sealed_at_start_and_a_torn_line_is_counted() {
        let dir = tempfile::tempdir().unwrap();
        {
            let log = IngestLog::open(dir.path(), 1 << 20, 1, RETENTION).unwrap();
            log.append(&line("a", 5)).unwrap();
        }
        let mut torn = fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join(ACTIVE))
            .unwrap();
        torn.write_all(b"{\"n\":\"b\",\"d\"").unwrap();
        let log = IngestLog::open(dir.path(), 1 << 20, 2, RETENTION).unwrap();
        let sealed = log.sealed().unwrap();
        assert_eq!(
            sealed
                .iter()
                .map(|s| (s.incarnation, s.seq))
                .collect::<Vec<_>>(),
            [(2, 0)]
        );
        let content = read_sealed(&sealed[0].path).unwrap();
        assert_eq!(
            (
                content.entries.len(),
                content.entries[0].delta,
                content.unread
            ),
            (1, 5, 1)
        );
        assert!(log.bytes() > 0);
    }

    #[test]
    fn concurrent_appends_share_syncs_and_all_land() {
        let dir = tempfile::tempdir().unwrap();
        let log = Arc::new(IngestLog::open(dir.path(), 1 << 24, 1, RETENTION).unwrap());
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let log = Arc::clone(&log);
                std::thread::spawn(move || {
                    for i in 0..50 {
                        log.append(&line(&format!("t{t}"), i)).unwrap();
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert!(log.syncs() <= 400, "never more than one sync per append");
        log.seal(1, 1).unwrap();
        let content = read_sealed(&log.sealed().unwrap()[0].path).unwrap();
        assert_eq!((content.entries.len(), content.unread), (400, 0));
        let sum: i64 = content.entries.iter().map(|e| e.delta).sum();
        assert_eq!(sum, 8 * (0..50).sum::<i64>());
    }

    fn key(name: &str, at: i64) -> KeyLine {
        KeyLine {
            key: name.into(),
            body_hash: 42,
            status: 200,
            answer: format!("{{\"accepted\":{at}}}"),
            at,
        }
    }

    #[test]
    fn answered_keys_outlive_a_restart_within_the_window_and_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let now = unix_now();
        let seed = {
            let log = IngestLog::open(dir.path(), 1 << 20, 1, RETENTION).unwrap();
            // Carried out of a moved file: an old key, one inside the window, and keys
            // past the bound.
            log.carry_keys(&[key("expired", now - 601), key("a", now - 10)])
                .unwrap();
            for i in 0..4 {
                log.carry_keys(&[key(&format!("b{i}"), now - 5 + i)])
                    .unwrap();
            }
            // Still in the active file when the process dies: written with its request.
            let mut lines = line("x", 1);
            key("in-log", now).write_line(&mut lines);
            key("a", now - 1).write_line(&mut lines);
            log.append(&lines).unwrap();
            log.seed()
        };
        let log = IngestLog::open(dir.path(), 1 << 20, 2, RETENTION).unwrap();
        assert_eq!(log.seed(), seed, "the seed is kept with the keys");
        let keys = log.take_recovered_keys();
        let names: Vec<&str> = keys.iter().map(|k| k.key.as_str()).collect();
        // The newest four, oldest first, each once (`a` with its later answer).
        assert_eq!(names, ["b2", "b3", "a", "in-log"], "{keys:?}");
        assert_eq!(keys[2].at, now - 1);
        assert!(log.take_recovered_keys().is_empty(), "taken once");
        // The file was rewritten with what was kept.
        let (_, on_disk) = read_keys(&dir.path().join(KEYS)).unwrap();
        assert_eq!(on_disk, keys);
    }

    #[test]
    fn the_keys_file_is_compacted_past_twice_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let now = unix_now();
        let log = IngestLog::open(dir.path(), 1 << 20, 1, RETENTION).unwrap();
        // RETENTION keeps 4 keys: the file is rewritten once it holds more than 8 lines.
        for i in 0..8 {
            log.carry_keys(&[key(&format!("k{i}"), now - 20 + i)])
                .unwrap();
        }
        assert_eq!(read_keys(&dir.path().join(KEYS)).unwrap().1.len(), 8);
        log.carry_keys(&[key("k8", now)]).unwrap();
        let (seed, kept) = read_keys(&dir.path().join(KEYS)).unwrap();
        assert_eq!(seed, Some(log.seed()), "the seed survives the rewrite");
        let names: Vec<&str> = kept.iter().map(|k| k.key.as_str()).collect();
        assert_eq!(
            names,
            ["k5", "k6", "k7", "k8"],
            "the newest four, oldest first"
        );
    }

    fn stream(id: u128, time: u64, value: i64) -> StreamLine {
        StreamLine {
            stream: id,
            start: 1,
            time,
            value,
        }
    }

    /// A start reads back every stream's latest point, whether it was carried to the
    /// stream file or is still in a sealed file, or in the active file a kill left.
    #[test]
    fn stream_points_outlive_a_restart_wherever_they_are() {
        let dir = tempfile::tempdir().unwrap();
        {
            let log = IngestLog::open(dir.path(), 1 << 20, 1, RETENTION).unwrap();
            assert_eq!(log.take_recovered_streams(), RecoveredStreams::default());
            let mut lines = line("a", 1);
            stream(1, 10, 5).write_line(&mut lines);
            stream(2, 10, 7).write_line(&mut lines);
            log.append(&lines).unwrap();
            assert!(log.seal(1, 1).unwrap());
            // Moved: its stream lines go to the stream file, then it goes.
            let sealed = log.sealed().unwrap();
            let content = read_sealed(&sealed[0].path).unwrap();
            assert_eq!(content.entries.len(), 1);
            assert_eq!(content.streams.len(), 2);
            log.carry_streams(&content.streams).unwrap();
            log.remove(&sealed[0]).unwrap();
            // Sealed, not moved yet: stream 1 moved on.
            let mut lines = Vec::new();
            stream(1, 20, 9).write_line(&mut lines);
            log.append(&lines).unwrap();
            assert!(log.seal(1, 2).unwrap());
            // Left in the active file by a kill: stream 3, and an older point of 2 that a
            // slower request wrote after the newer one.
            let mut lines = Vec::new();
            stream(3, 30, 1).write_line(&mut lines);
            stream(2, 5, 6).write_line(&mut lines);
            log.append(&lines).unwrap();
        }
        let log = IngestLog::open(dir.path(), 1 << 20, 2, RETENTION).unwrap();
        let recovered = log.take_recovered_streams();
        let mut points: Vec<(u128, u64, i64)> = recovered
            .lines
            .iter()
            .map(|l| (l.stream, l.time, l.value))
            .collect();
        points.sort_unstable();
        assert_eq!(points, [(1, 20, 9), (2, 10, 7), (3, 30, 1)]);
        assert!(recovered.complete_since.is_some(), "the file's mark");
        assert!(log.take_recovered_streams().lines.is_empty(), "taken once");
    }

    /// The stream file is folded past twice its bound, and what the bound drops moves
    /// the mark forward (their next point is a baseline, never counted whole).
    #[test]
    fn the_stream_file_is_compacted_and_a_dropped_stream_moves_the_mark() {
        let dir = tempfile::tempdir().unwrap();
        let log = IngestLog::open(dir.path(), 1 << 20, 1, RETENTION).unwrap();
        log.rewrite_streams(&RecoveredStreams {
            complete_since: Some(50),
            lines: Vec::new(),
        })
        .unwrap();
        // RETENTION keeps 4 streams: past 8 lines the file is folded.
        for i in 0..8u64 {
            log.carry_streams(&[stream(u128::from(i % 2), 10 + i, 1)])
                .unwrap();
        }
        assert_eq!(streams::read(dir.path()).unwrap().1.len(), 8);
        log.carry_streams(&[stream(7, 100, 1)]).unwrap();
        let (mark, lines) = streams::read(dir.path()).unwrap();
        assert_eq!(lines.len(), 3, "two streams folded, one new: {lines:?}");
        assert_eq!(mark, Some(50), "nothing dropped: the mark stays");
        let many: Vec<StreamLine> = (10..20u64).map(|i| stream(u128::from(i), i, 1)).collect();
        log.carry_streams(&many).unwrap();
        let (mark, lines) = streams::read(dir.path()).unwrap();
        assert_eq!(lines.len(), 4);
        assert!(mark.unwrap() > 1_000_000, "moved to now: {mark:?}");
        log.remove_streams().unwrap();
        assert_eq!(streams::read(dir.path()).unwrap(), (None, Vec::new()));
    }

    /// An append cut short inside its `write` (a SIGKILL between two pages) is skipped
    /// whole: its increments are not taken without the key written after them. Lines of
    /// a log an earlier version wrote, without groups, are taken one by one.
    #[test]
    fn an_append_cut_short_is_skipped_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(sealed_name(1, 1));
        let mut whole = line("a", 1);
        key("k1", 5).write_line(&mut whole);
        let mut cut = line("b", 2);
        cut.extend(line("c", 3));
        key("k2", 6).write_line(&mut cut);
        let mut bytes = b"{\"g\":2}\n".to_vec();
        bytes.extend(&whole);
        bytes.extend(b"{\"g\":3}\n");
        // The cut append: its increments whole, its key line missing.
        bytes.extend(&cut[..line("b", 2).len() + line("c", 3).len()]);
        std::fs::write(&path, &bytes).unwrap();
        let content = read_sealed(&path).unwrap();
        assert_eq!(
            content.entries.iter().map(|e| e.delta).collect::<Vec<_>>(),
            [1]
        );
        assert_eq!(content.keys.len(), 1);
        assert_eq!(content.unread, 2, "the cut append's two lines");
        // A line outside the groups of a file that has them is damage.
        let mut damaged = b"{\"g\":2}\n".to_vec();
        damaged.extend(&whole);
        damaged.extend(line("d", 4));
        std::fs::write(&path, &damaged).unwrap();
        let content = read_sealed(&path).unwrap();
        assert_eq!((content.entries.len(), content.unread), (1, 1));
        // Without groups (an earlier version's file) every whole line counts.
        let mut legacy = whole.clone();
        legacy.extend(&cut);
        std::fs::write(&path, &legacy).unwrap();
        let content = read_sealed(&path).unwrap();
        assert_eq!(content.entries.len(), 3);
        assert_eq!(content.keys.len(), 2);
        assert_eq!(content.unread, 0);
    }

    /// What `append` writes reads back as whole groups.
    #[test]
    fn appends_are_groups() {
        let dir = tempfile::tempdir().unwrap();
        let log = IngestLog::open(dir.path(), 1 << 20, 1, RETENTION).unwrap();
        let mut lines = line("a", 1);
        key("k", 5).write_line(&mut lines);
        log.append(&lines).unwrap();
        log.append(&line("b", 2)).unwrap();
        let text = std::fs::read_to_string(dir.path().join(ACTIVE)).unwrap();
        assert!(text.starts_with("{\"g\":2}\n"), "{text}");
        assert!(text.contains("\n{\"g\":1}\n"), "{text}");
        assert!(log.seal(1, 2).unwrap());
        let content = read_sealed(&log.sealed().unwrap()[0].path).unwrap();
        assert_eq!(
            (content.entries.len(), content.keys.len(), content.unread),
            (2, 1, 0)
        );
    }

    /// A carry whose append failed (it may have left part of a line) makes the next
    /// carry rewrite the file whole: a torn line never swallows the next key or point.
    #[test]
    fn a_failed_carry_is_followed_by_a_rewrite_not_an_append() {
        let dir = tempfile::tempdir().unwrap();
        let now = unix_now();
        let log = IngestLog::open(dir.path(), 1 << 20, 1, RETENTION).unwrap();
        log.carry_keys(&[key("k1", now)]).unwrap();
        log.rewrite_streams(&RecoveredStreams {
            complete_since: Some(50),
            lines: vec![stream(1, 10, 5)],
        })
        .unwrap();
        // What a failed append leaves: part of a line, no newline.
        for file in [KEYS, streams::FILE] {
            let mut handle = options().append(true).open(dir.path().join(file)).unwrap();
            handle.write_all(b"{\"torn").unwrap();
        }
        *log.key_lines.lock() = FORCE_REWRITE;
        log.streams_file.lock().lines = FORCE_REWRITE;
        log.carry_keys(&[key("k2", now)]).unwrap();
        log.carry_streams(&[stream(2, 11, 6)]).unwrap();
        let (_, keys) = read_keys(&dir.path().join(KEYS)).unwrap();
        let names: Vec<&str> = keys.iter().map(|k| k.key.as_str()).collect();
        assert_eq!(names, ["k1", "k2"]);
        let (mark, points) = streams::read(dir.path()).unwrap();
        assert_eq!(mark, Some(50));
        assert_eq!(points, [stream(1, 10, 5), stream(2, 11, 6)]);
    }
}
