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

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use self::sync::GroupCommit;
use super::private::{options, sync_dir};

mod read;
pub mod streams;
mod sync;
pub use self::read::{Append, read_sealed};
#[cfg(test)]
pub use self::read::{SealedContent, read_sealed_whole};

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
    /// The write failed: part of the append may be in the file, which a reader skips
    /// whole (its first line counts its lines); the log takes nothing more.
    #[error("the ingest log could not be written: {0}")]
    Io(#[from] io::Error),
    /// An earlier write or sync failed: after a failed fsync the file's state is
    /// unknown, so the log takes nothing more until a restart. Nothing was written.
    #[error("the ingest log failed earlier and takes nothing more until a restart")]
    Failed,
    /// The lines were written, but the sync that was to make them durable failed: they
    /// may or may not be on disk, so a restart may or may not count them. A client that
    /// sends them again could have them counted twice.
    #[error(
        "the ingest log's sync failed after the write: the increments may or may not be on disk"
    )]
    NotSynced,
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
            // Only the keys and the stream points are kept: the increments are read (an
            // append with a line that does not read gives none of its keys, as when the
            // flusher moves the file) and dropped append by append, so a start holds no
            // sealed file whole. The same parse as the flusher's, not a mere syntax
            // check: a key kept here for an append the flusher then skips would answer
            // a retry whose increments were never counted.
            // Keys past twice the bound and all but each stream's latest point are
            // dropped as they come: what the fold and `retain` keep is the same.
            let mut streams = HashMap::new();
            read_sealed(&file.path, |append| {
                keys.append(&mut append.keys);
                bound_keys(&mut keys, retention);
                for line in append.streams.drain(..) {
                    streams::keep_latest(&mut streams, line);
                }
            })?;
            table.fold(streams.into_values(), retention.max_streams, now_nanos);
        }
        *log.streams_file.lock() = StreamsFile {
            mark,
            lines: if streams::cut_short(dir)? {
                FORCE_REWRITE
            } else if mark.is_some() {
                file_lines
            } else {
                0
            },
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

    /// Drops from `keys` (answered keys read from sealed files, oldest first) what no
    /// later read could keep, once they pass twice `ingest.http.max_idempotency_keys`:
    /// the keys a start keeps of them and of any keys after them are the same, and a
    /// sealed file with a key per request is never held, nor carried, whole as keys.
    pub fn bound_keys(&self, keys: &mut Vec<KeyLine>) {
        bound_keys(keys, self.retention);
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
    /// `ingest.streams.jsonl`, synced (before the file is removed), whether the OTLP
    /// receivers are durable or not. Receivers that are not merge the file into their
    /// own table at start and remove it once that table is saved; until then (a kill
    /// before, or a table that could not be saved) the file is the only place the
    /// removed sealed file's points are, and without them the next cumulative point
    /// would be counted from an older one, again. Rewrites the file
    /// with the fold once it holds twice the bound. A file not there yet starts with
    /// the mark now: a stream it does not hold is then a baseline, never counted whole.
    pub fn carry_streams(&self, lines: &[StreamLine]) -> io::Result<()> {
        if lines.is_empty() {
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
            Err(AppendError::NotSynced)
        }
    }

    /// The same, waiting without a thread of its own: the `write` runs on the caller's
    /// thread (into the page cache), the sync on the group commit's.
    pub async fn append_async(&self, lines: &[u8]) -> Result<(), AppendError> {
        let (generation, end) = self.write(lines)?;
        if self.commit.wait(generation, end).await {
            Ok(())
        } else {
            Err(AppendError::NotSynced)
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
            Err(AppendError::NotSynced)
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
        // Again under the lock: a seal that failed the log did so holding it.
        if self.failed.load(Ordering::Relaxed) || self.commit.failed() {
            return Err(AppendError::Failed);
        }
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
    ///
    /// A log whose sync failed seals nothing (its last appends may not be on disk; a
    /// restart reads what is); one whose write failed still seals what it answered (a
    /// reader skips an append cut short whole), and takes no more appends. A failed sync
    /// of the file fails the log: a writeback error is reported once per file, so the
    /// group commit's next sync would succeed over pages that were lost. Once the file
    /// is renamed it is sealed whatever follows: when the next file cannot be started,
    /// the log fails rather than let appends go on into a file the flush is about to
    /// read and remove.
    pub fn seal(&self, incarnation: u64, seq: u64) -> io::Result<bool> {
        let mut active = self.active.lock();
        if self.commit.failed() {
            return Ok(false);
        }
        if active.len == 0 {
            return Ok(false);
        }
        if let Err(error) = active.file.sync_data() {
            self.fail();
            return Err(error);
        }
        // Nothing changed when this fails: the file stays the active one.
        fs::rename(
            self.dir.join(ACTIVE),
            self.dir.join(sealed_name(incarnation, seq)),
        )?;
        self.sealed_bytes.fetch_add(active.len, Ordering::Relaxed);
        active.generation += 1;
        active.len = 0;
        self.active_bytes.store(0, Ordering::Relaxed);
        self.commit.sealed(active.generation);
        // The new file's creation and the rename reach the disk with one directory sync.
        match create_active(&self.dir) {
            Ok(file) => {
                active.file = Arc::new(file);
                Ok(true)
            }
            Err(error) => {
                self.fail();
                Err(error)
            }
        }
    }

    /// Takes nothing more until a restart, and tells every append still waiting for its
    /// sync that it failed.
    fn fail(&self) {
        self.failed.store(true, Ordering::Relaxed);
        self.commit.fail();
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

    /// Removes a sealed file once its segment is on disk, durably: `Ok` only once the
    /// directory is synced. Called again for a file already gone (its unlink done, the
    /// sync that would make it durable failed), it syncs the directory again: until that
    /// succeeds, a power loss could bring the file back after its segment was replayed.
    /// Its bytes stop counting against the log's bound as soon as it is unlinked.
    pub fn remove(&self, path: &Path) -> io::Result<()> {
        match fs::metadata(path) {
            Ok(meta) => match fs::remove_file(path) {
                Ok(()) => {
                    let bytes = meta.len();
                    let _ =
                        self.sealed_bytes
                            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                                Some(b.saturating_sub(bytes))
                            });
                }
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => return Err(error),
            },
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
        sync_dir(&self.dir)
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

/// Replaces `keys` with what [`retain`] keeps of them once they pass twice the bound.
/// Whatever keys follow, `retain` then keeps the same as of them all: a key it drops
/// here is outside the window (and stays so), an older answer of a key, or older than
/// `max_keys` newer keys, which no later key undoes. So a sealed file holding a key per
/// request is never held whole as keys, nor carried whole into `ingest.keys.jsonl`.
fn bound_keys(keys: &mut Vec<KeyLine>, retention: Retention) {
    if keys.len() > 2 * retention.max_keys.max(1) {
        *keys = retain(std::mem::take(keys), retention, unix_now());
    }
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
mod tests;
