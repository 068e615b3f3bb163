//! The cumulative stream table both OTLP receivers share, and when it is saved.
//!
//! **Why at the flush, right after the drain.** A point's difference reaches the buffer
//! after the table recorded the point; a flush sends what it drained. Saved after the
//! drain, the file holds every point whose difference the flush carries (and perhaps a
//! few whose differences are still in memory); saved before anything of the drained rows
//! is written (an exact family's ledger rows, a held segment, the journal's intents, the
//! first send), no difference reaches the store or the disk unless the file already
//! holds its point. Only there: a save at a replay chunk would record points whose
//! differences are still only in memory. Rows that do not apply go back to memory with
//! their points in the file: a kill loses them as it loses any pending row (the next
//! start reports them in the previous stop's pending figure). So
//! after a restart, the next point's difference from the file's value is exactly what the
//! store has not received: never counted twice. What can be lost is what a crash loses
//! anyway (differences still in memory), and only those whose point was recorded between
//! the drain and the save; the others come back with the next point. A save that fails
//! removes the file (an older table read back could count twice), so that those streams'
//! next points after a restart are counted baselines instead.
//!
//! The sidecar calls [`StreamState::save_if_changed`] from the flush's drain hook
//! ([`crate::flush::FlushObserver::drained`]).
//!
//! **Durable receivers** (`ingest.otlp.durable`) never save the table from memory: each
//! change is written with the increment it produced to the ingest log (see `durable.rs`),
//! whose `ingest.streams.jsonl` keeps the table; a start merges that into this one
//! ([`StreamState::merge`]). The two files never both count: a durable start writes the
//! table into the ingest log's file and removes `otlp_streams.bin`; a start that is not
//! durable saves the merged table here and removes the ingest log's file. Merging takes,
//! per stream, the later point, and the later completeness mark, so a start killed
//! between the two steps merges again to the same table.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use super::persist::{self, Loaded};
use super::streams::{Last, Streams};
use crate::config::ingest::OtlpConfig;
use crate::ingest::IngestStats;
use crate::state::ingest_log::{RecoveredStreams, StreamLine};

/// The stream table, and the state directory it is saved in (none: in memory only).
#[derive(Debug)]
pub struct StreamState {
    table: Mutex<Streams>,
    dir: Option<PathBuf>,
    /// The table's generation the file holds.
    saved: Mutex<u64>,
    /// Streams read from the file at start.
    restored: u64,
    /// A file found unreadable at start (0 or 1).
    corrupt: u64,
    /// Saves that failed.
    save_errors: AtomicU64,
    /// The receivers' counters, once they run (the table's size is published there).
    stats: OnceLock<Arc<IngestStats>>,
    /// Durable receivers: the ingest log keeps the table, this file is never written.
    durable: bool,
    /// No file was found at start: the table's mark is the start, which the ingest log's
    /// table, if it has one, replaces ([`StreamState::merge`]).
    absent: bool,
}

impl StreamState {
    /// A table kept in memory only (a restart forgets it), complete since `now_unix_nanos`.
    pub fn in_memory(config: &OtlpConfig, now_unix_nanos: u64) -> StreamState {
        StreamState::with(Streams::new(config.max_streams, now_unix_nanos), None, 0, 0)
    }

    /// The table saved in `dir`, or an empty one complete since `now_unix_nanos` when
    /// the directory holds none (or an unreadable one: counted, logged, set aside).
    pub fn open(config: &OtlpConfig, dir: PathBuf, now_unix_nanos: u64) -> StreamState {
        let capacity = config.max_streams;
        let (table, corrupt) = match persist::load(&dir) {
            Ok(Loaded::Table {
                complete_since,
                entries,
            }) => (
                Streams::restore(capacity, complete_since, entries, now_unix_nanos),
                0,
            ),
            Ok(Loaded::Absent) => {
                let state =
                    StreamState::with(Streams::new(capacity, now_unix_nanos), Some(dir), 0, 0);
                return StreamState {
                    absent: true,
                    ..state
                };
            }
            Ok(Loaded::Corrupt(why)) => {
                tracing::warn!(
                    file = %persist::path(&dir).display(),
                    reason = %why,
                    "The OTLP cumulative stream table could not be read; it is set aside as {} and the table starts empty: each stream's next point only sets its baseline.",
                    persist::CORRUPT
                );
                (Streams::new(capacity, now_unix_nanos), 1)
            }
            Err(error) => {
                tracing::warn!(
                    file = %persist::path(&dir).display(),
                    %error,
                    "The OTLP cumulative stream table could not be read; the table starts empty: each stream's next point only sets its baseline."
                );
                (Streams::new(capacity, now_unix_nanos), 1)
            }
        };
        let restored = table.len() as u64;
        if restored > 0 {
            tracing::info!(
                streams = restored,
                "Restored the OTLP cumulative stream table."
            );
        }
        StreamState::with(table, Some(dir), restored, corrupt)
    }

    fn with(table: Streams, dir: Option<PathBuf>, restored: u64, corrupt: u64) -> StreamState {
        let saved = table.generation();
        StreamState {
            table: Mutex::new(table),
            dir,
            saved: Mutex::new(saved),
            restored,
            corrupt,
            save_errors: AtomicU64::new(0),
            stats: OnceLock::new(),
            durable: false,
            absent: false,
        }
    }

    /// The same table, kept by the ingest log of durable receivers from now on.
    pub fn durable(self) -> StreamState {
        StreamState {
            durable: true,
            ..self
        }
    }

    /// Merges the table the ingest log kept (see the module documentation): per stream,
    /// the later point; the later completeness mark of the two files, or the ingest
    /// log's alone when `otlp_streams.bin` was not there (the mark of a table that
    /// starts empty, the start, is then no mark at all: the ingest log's table is the
    /// whole of what was counted).
    pub fn merge(&self, recovered: &RecoveredStreams, now_unix_nanos: u64) {
        let mut table = self.table.lock();
        if let Some(mark) = recovered.complete_since {
            if self.absent {
                table.set_complete_since(mark);
            } else {
                table.raise_complete_since(mark);
            }
        }
        for line in &recovered.lines {
            let last = Last {
                start: line.start,
                time: line.time,
                value: line.value,
            };
            table.set_latest(line.stream, last, now_unix_nanos);
        }
    }

    /// The table as the ingest log's stream file holds it, oldest first.
    pub fn snapshot(&self) -> RecoveredStreams {
        let table = self.table.lock();
        let mut lines: Vec<StreamLine> = table
            .entries()
            .map(|(stream, last)| StreamLine {
                stream,
                start: last.start,
                time: last.time,
                value: last.value,
            })
            .collect();
        lines.sort_by_key(|l| (l.time, l.stream));
        RecoveredStreams {
            complete_since: Some(table.complete_since()),
            lines,
        }
    }

    /// Writes the table to the state directory now (a start that merged the ingest
    /// log's table); whether it was written.
    pub fn save(&self) -> bool {
        *self.saved.lock() = u64::MAX;
        self.save_if_changed()
    }

    /// Removes `otlp_streams.bin` (durable receivers: the ingest log keeps the table).
    pub fn remove_file(&self) -> std::io::Result<()> {
        match &self.dir {
            Some(dir) => persist::remove(dir),
            None => Ok(()),
        }
    }

    /// The table, locked.
    pub fn table(&self) -> parking_lot::MutexGuard<'_, Streams> {
        self.table.lock()
    }

    /// Streams read from the state directory at start.
    pub fn restored(&self) -> u64 {
        self.restored
    }

    /// Whether the file found at start was unreadable (0 or 1).
    pub fn corrupt(&self) -> u64 {
        self.corrupt
    }

    /// Saves that failed so far.
    pub fn save_errors(&self) -> u64 {
        self.save_errors.load(Relaxed)
    }

    /// Publishes the table's figures in the receivers' counters from now on.
    pub(super) fn report_to(&self, stats: Arc<IngestStats>) {
        stats.otlp.restored.store(self.restored, Relaxed);
        stats.otlp.state_corrupt.store(self.corrupt, Relaxed);
        let _ = self.stats.set(stats);
    }

    /// Writes the table to the state directory if it changed since the last save.
    /// Called after a flush drained the buffer and before it sends (see the module
    /// documentation); returns whether a file was written.
    pub fn save_if_changed(&self) -> bool {
        let Some(dir) = self.dir.as_ref().filter(|_| !self.durable) else {
            return false;
        };
        let mut saved = self.saved.lock();
        let (bytes, generation) = {
            let table = self.table.lock();
            if table.generation() == *saved {
                return false;
            }
            (persist::encode(&table), table.generation())
        };
        match persist::save(dir, &bytes) {
            Ok(()) => {
                *saved = generation;
                true
            }
            Err(error) => {
                self.save_errors.fetch_add(1, Relaxed);
                if let Some(stats) = self.stats.get() {
                    stats.otlp.state_save_errors.fetch_add(1, Relaxed);
                }
                let removed = persist::remove(dir);
                tracing::error!(
                    file = %persist::path(dir).display(),
                    %error,
                    removed = removed.is_ok(),
                    "Could not save the OTLP cumulative stream table; the older file is removed so that a restart cannot count twice (each stream's first point after a restart then only sets its baseline)."
                );
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::otlp::streams::Last;

    fn config() -> OtlpConfig {
        OtlpConfig {
            max_streams: 10,
            ..OtlpConfig::default()
        }
    }

    fn last(value: i64) -> Last {
        Last {
            start: 1,
            time: 2,
            value,
        }
    }

    #[test]
    fn saved_only_when_changed_and_read_back_by_the_next_start() {
        let dir = tempfile::tempdir().unwrap();
        let state = StreamState::open(&config(), dir.path().into(), 100);
        assert_eq!(state.restored(), 0);
        assert!(!state.save_if_changed(), "nothing to save yet");
        state.table().set(7, last(5), 100);
        assert!(state.save_if_changed());
        assert!(!state.save_if_changed(), "unchanged since");
        state.table().set(7, last(9), 100);
        assert!(state.save_if_changed());
        drop(state);
        let again = StreamState::open(&config(), dir.path().into(), 500);
        assert_eq!(again.restored(), 1);
        assert_eq!(again.table().get(7), Some(last(9)));
        assert_eq!(again.table().complete_since(), 100, "the saved mark");
        assert!(
            !again.save_if_changed(),
            "what was read is what the file holds"
        );
    }

    /// A stream evicted with a start ahead of the sidecar's clock moved the mark past
    /// that start; the saved mark keeps it so after a restart (the file's format is as
    /// before: only the mark's value differs).
    #[test]
    fn the_saved_mark_stays_past_an_evicted_start_ahead_of_the_clock() {
        let dir = tempfile::tempdir().unwrap();
        let small = OtlpConfig {
            max_streams: 2,
            ..OtlpConfig::default()
        };
        let state = StreamState::open(&small, dir.path().into(), 100);
        let ahead = Last {
            start: 1_500,
            time: 1_550,
            value: 100,
        };
        state.table().set(9, ahead, 100);
        for id in 1..=4 {
            state.table().set(id, last(1), 200);
        }
        assert_eq!(state.table().get(9), None, "evicted");
        assert!(state.save_if_changed());
        drop(state);
        let again = StreamState::open(&small, dir.path().into(), 300);
        assert_eq!(again.table().complete_since(), 1_501);
        assert!(!again.table().is_complete_for(1_500, 1_600));
    }

    #[test]
    fn a_corrupt_file_is_counted_and_the_table_starts_empty_from_now() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(persist::FILE), b"garbage").unwrap();
        let state = StreamState::open(&config(), dir.path().into(), 500);
        assert_eq!(state.corrupt(), 1);
        assert_eq!(state.restored(), 0);
        assert!(state.table().is_empty());
        assert_eq!(state.table().complete_since(), 500);
        assert!(dir.path().join(persist::CORRUPT).exists());
    }

    /// A save that fails removes the older file: a restart then knows no stream (their
    /// next points are baselines) instead of counting from stale values.
    #[test]
    fn a_failed_save_removes_the_older_file() {
        let dir = tempfile::tempdir().unwrap();
        let state_dir = dir.path().join("state");
        std::fs::create_dir(&state_dir).unwrap();
        let state = StreamState::open(&config(), state_dir.clone(), 100);
        state.table().set(7, last(5), 100);
        assert!(state.save_if_changed());
        // The temporary file's name taken by a directory: the next save cannot write.
        std::fs::create_dir(persist::path(&state_dir).with_extension("tmp")).unwrap();
        state.table().set(7, last(9), 100);
        assert!(!state.save_if_changed());
        assert_eq!(state.save_errors(), 1);
        assert!(!persist::path(&state_dir).exists());
    }
}
