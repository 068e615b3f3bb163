//! How much disk a state directory can take at most, from the configuration: what an
//! operator sizes its volume by (`countersink state-size`), and what `serve` compares
//! with the free space of the directory's filesystem at start.
//!
//! | part | at most |
//! |---|---|
//! | spill (the segments, whichever kind of write spilled them) | `state.max_spill_bytes` |
//! | outcome logs (`unknown`, `rejected`: the current file and `state.max_log_files` rotated ones each) | 2 × (`max_log_files` + 1) × `max_log_bytes` |
//! | the journal (zero-filled to 4 MiB; grows to the largest group: one flush chunk's intents and answers, a chunk's writes being a quarter of `limits.max_pending_bytes`) | 4 MiB + `max_pending_bytes` / 2 |
//! | small files (identity, status, cursors, marks, `ledger_pending.jsonl`, torn lines) | 1 MiB |
//! | with an OTLP receiver on, the cumulative stream table (`otlp_streams.bin`, its temporary file while it is replaced, and one `otlp_streams.corrupt` set aside) | 3 × (44 + 40 × `ingest.otlp.max_streams`) |
//! | with a durable receiver, the ingest log (`ingest.log` and its sealed files); with a durable HTTP listener its kept keys (`ingest.keys.jsonl`: compacted past twice `max_idempotency_keys` lines of at most [`KEY_LINE_BYTES`], plus the keys of one sealed file, at most the log's size); with durable OTLP receivers its kept streams (`ingest.streams.jsonl`: compacted past twice `max_streams` lines of at most [`STREAM_LINE_BYTES`], and its temporary file while it is rewritten) | 2 × `state.max_ingest_log_bytes` + 2 × `ingest.http.max_idempotency_keys` × 1400 + 4 × `ingest.otlp.max_streams` × 120 |
//!
//! A driver wrapper's directory has the same bound: its records go to the same two
//! outcome logs, its rows to the same spill segments within `state.max_spill_bytes`.
//!
//! Past a full disk nothing is lost silently (a spill or record that cannot be written is
//! counted), but an emptyDir past its `sizeLimit` evicts the pod and the directory is
//! gone: size both together.

use std::io;
use std::path::Path;

use crate::config::StateConfig;

use super::OutcomeLog;

/// The journal's preallocated size (see [`super::journal`]).
const JOURNAL_FLOOR: u64 = 4 << 20;

/// Small files beside the logs, the spill and the journal.
const SMALL_FILES: u64 = 1 << 20;

/// The longest line of `ingest.keys.jsonl`: a 255-character key (escaped, at most
/// twice as long), the hash, the status, an answer listing 100 refused indices (escaped),
/// the time and the field names.
pub const KEY_LINE_BYTES: u64 = 1400;

/// The longest line of `ingest.streams.jsonl`: a 32-digit stream id, three 20-digit
/// integers and the field names.
pub const STREAM_LINE_BYTES: u64 = 120;

/// The most a state directory takes, by part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateBound {
    /// The spill (`state.max_spill_bytes`).
    pub spill: u64,
    /// The outcome logs with their rotated files.
    pub logs: u64,
    /// The journal.
    pub journal: u64,
    /// Everything else.
    pub small_files: u64,
    /// The OTLP cumulative stream table's files (0 without an OTLP receiver).
    pub otlp_streams: u64,
    /// The ingest log and its kept keys (0 without a durable listener).
    pub ingest_log: u64,
}

impl StateBound {
    /// The bound of a state directory (a sidecar's, a `Recorder`'s or a driver
    /// wrapper's) with `state` and `limits.max_pending_bytes`.
    pub fn of(state: &StateConfig, max_pending_bytes: u64) -> StateBound {
        let logs = OutcomeLog::ALL.len() as u64;
        let per_log = u64::from(state.max_log_files)
            .saturating_add(1)
            .saturating_mul(state.max_log_bytes);
        StateBound {
            spill: state.max_spill_bytes,
            logs: logs.saturating_mul(per_log),
            journal: JOURNAL_FLOOR.saturating_add(max_pending_bytes / 2),
            small_files: SMALL_FILES,
            otlp_streams: 0,
            ingest_log: 0,
        }
    }

    /// The bound with an OTLP receiver on, whose stream table file takes at most
    /// `file_bytes`: the file, its temporary copy while it is replaced, and one file set
    /// aside as corrupt.
    pub fn with_otlp_streams(self, file_bytes: u64) -> StateBound {
        StateBound {
            otlp_streams: file_bytes.saturating_mul(3),
            ..self
        }
    }

    /// The bound with a durable receiver: the ingest log within `max_log_bytes`, its
    /// kept keys (`max_keys`, 0 without a durable HTTP listener) and streams
    /// (`max_streams`, 0 without durable OTLP receivers; see the table above).
    pub fn with_ingest_log(
        self,
        max_log_bytes: u64,
        max_keys: usize,
        max_streams: usize,
    ) -> StateBound {
        let keys = (max_keys as u64)
            .saturating_mul(2)
            .saturating_mul(KEY_LINE_BYTES)
            .saturating_add(max_log_bytes);
        let streams = (max_streams as u64)
            .saturating_mul(4)
            .saturating_mul(STREAM_LINE_BYTES);
        StateBound {
            ingest_log: max_log_bytes.saturating_add(keys).saturating_add(streams),
            ..self
        }
    }

    /// The whole bound.
    pub fn total(&self) -> u64 {
        self.spill
            .saturating_add(self.logs)
            .saturating_add(self.journal)
            .saturating_add(self.small_files)
            .saturating_add(self.otlp_streams)
            .saturating_add(self.ingest_log)
    }
}

/// Whether the directory's filesystem can take the bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Room {
    /// The free space and what the directory already holds cover the bound.
    Fits,
    /// They do not: the bound, the free space, and what the directory holds.
    Short {
        /// The bound.
        bound: u64,
        /// Bytes free for this process on the filesystem.
        free: u64,
        /// Bytes the directory's files take now (they count toward the bound).
        used: u64,
    },
}

/// Compares `bound` with `free` bytes on the filesystem and `used` bytes the directory
/// already holds.
pub fn room(bound: u64, free: u64, used: u64) -> Room {
    if free.saturating_add(used) >= bound {
        Room::Fits
    } else {
        Room::Short { bound, free, used }
    }
}

/// Bytes free for an unprivileged writer on the filesystem of `dir` (or of its nearest
/// existing ancestor, before the directory is created).
#[cfg(target_os = "linux")]
pub fn free_bytes(dir: &Path) -> io::Result<u64> {
    let mut at = dir;
    while !at.exists() {
        at = match at.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        if at == Path::new(".") {
            break;
        }
    }
    let stat = rustix::fs::statvfs(at)?;
    Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// Elsewhere than Linux the free space is not read.
#[cfg(not(target_os = "linux"))]
pub fn free_bytes(_dir: &Path) -> io::Result<u64> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "the free space of a filesystem is read on Linux only",
    ))
}

/// Bytes the files directly in `dir` take now (0 when it does not exist).
pub fn used_bytes(dir: &Path) -> io::Result<u64> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(error) => return Err(error),
    };
    let mut used = 0_u64;
    for entry in entries {
        let meta = entry?.metadata()?;
        if meta.is_file() {
            used = used.saturating_add(meta.len());
        }
    }
    Ok(used)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn state(spill: u64, log_bytes: u64, log_files: u32) -> StateConfig {
        StateConfig {
            max_spill_bytes: spill,
            max_log_bytes: log_bytes,
            max_log_files: log_files,
            ..StateConfig::default()
        }
    }

    #[test]
    fn the_bound_adds_the_spill_the_rotated_logs_and_the_journal() {
        // The shipped Kubernetes sizes: 512 MiB of spill, 2 x 9 x 16 MiB of logs, a
        // journal for 32 MiB of pending rows.
        let bound = StateBound::of(&state(512 * MIB, 16 * MIB, 8), 32 * MIB);
        assert_eq!(bound.spill, 512 * MIB);
        assert_eq!(bound.logs, 288 * MIB);
        assert_eq!(bound.journal, 20 * MIB);
        assert_eq!(bound.total(), 821 * MIB);
        let otlp = bound.with_otlp_streams(4 * MIB);
        assert_eq!(
            otlp.otlp_streams,
            12 * MIB,
            "file, temporary copy, corrupt copy"
        );
        assert_eq!(otlp.total(), 833 * MIB);
        let huge = StateBound::of(&state(u64::MAX, u64::MAX, u32::MAX), u64::MAX);
        assert_eq!(huge.total(), u64::MAX, "saturates, never wraps");
    }

    #[test]
    fn room_counts_what_the_directory_already_holds() {
        assert_eq!(room(100, 100, 0), Room::Fits);
        assert_eq!(room(100, 40, 60), Room::Fits, "its own files count");
        assert_eq!(
            room(100, 40, 10),
            Room::Short {
                bound: 100,
                free: 40,
                used: 10
            }
        );
    }

    #[test]
    fn free_and_used_bytes_of_a_real_directory() {
        let dir = tempfile::tempdir().unwrap();
        assert!(free_bytes(dir.path()).unwrap() > 0);
        assert!(
            free_bytes(&dir.path().join("not/yet/made")).unwrap() > 0,
            "an ancestor that exists answers"
        );
        std::fs::write(dir.path().join("a"), [0_u8; 1000]).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        assert_eq!(used_bytes(dir.path()).unwrap(), 1000);
        assert_eq!(used_bytes(&dir.path().join("none")).unwrap(), 0);
    }
}
