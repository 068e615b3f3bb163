//! The state directory: one writer's outcome logs, spill file and identity.
//!
//! | file | what |
//! |---|---|
//! | `lock` | held (`flock`) while a process uses the directory: one writer per directory |
//! | `writer_id` | this writer's id, generated once unless configured |
//! | `incarnation` | how many times the directory was opened; part of every record's identity |
//! | `status.json` | pending rows after the last flush, and whether the process stopped cleanly |
//! | `unknown.jsonl` | writes whose outcome is unknown (never re-sent) |
//! | `rejected.jsonl` | writes the store refused permanently |
//! | `spill.jsonl` and `spill.*.jsonl` | writes not sent yet, replayed at the next start (see [`spill`]) |
//!
//! The directory is `0700` and every file `0600` (see [`private`]).

pub mod jsonl;
pub mod private;
pub mod record;
pub mod spill;

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::StateConfig;

pub use self::jsonl::JsonlLog;
pub use self::record::{ErrorInfo, RecordOutcome, WriteRecord};
pub use self::spill::{Recovered, Spill};

/// A problem opening the state directory.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Another process holds the directory.
    #[error("state directory {} is in use by another countersink process (lock file {})", dir.display(), dir.join("lock").display())]
    Locked {
        /// The directory.
        dir: PathBuf,
    },
    /// A file could not be read or written.
    #[error("state directory {}: {step}: {error}", dir.display())]
    Io {
        /// The directory.
        dir: PathBuf,
        /// What was being done.
        step: &'static str,
        /// The error.
        error: io::Error,
    },
}

/// What the previous process left in `status.json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// Whether it stopped through a clean shutdown.
    pub clean: bool,
    /// Its incarnation.
    pub incarnation: u64,
    /// Rows pending in memory after its last flush (lost if it did not stop cleanly,
    /// together with whatever arrived after that flush).
    pub pending_rows: u64,
    /// Their signed delta sum, as text (an i128).
    pub pending_sum: String,
    /// When the status was written, RFC 3339.
    pub time: String,
}

/// An open, locked state directory.
///
/// Callers use its operations, never its files: append records to an outcome log, spill
/// records, and take a spill replay through its steps (reload, begin sending, finish).
/// Each step that moves a file is one `rename` or `unlink` (see [`spill`] for the crash
/// windows).
pub struct StateDir {
    dir: PathBuf,
    _lock: File,
    writer_id: String,
    incarnation: u64,
    unknown: JsonlLog,
    rejected: JsonlLog,
    spill: Spill,
    unclean_previous_run: Option<Status>,
}

/// The two append-only outcome logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OutcomeLog {
    /// `unknown.jsonl`: writes whose outcome is unknown (never re-sent).
    Unknown,
    /// `rejected.jsonl`: writes the store refused permanently.
    Rejected,
}

impl OutcomeLog {
    /// Both logs, in label order.
    pub const ALL: [OutcomeLog; 2] = [OutcomeLog::Unknown, OutcomeLog::Rejected];

    /// The file name, also the `log` label of `countersink_outcome_records_lost_total`.
    pub fn file_name(self) -> &'static str {
        match self {
            OutcomeLog::Unknown => "unknown.jsonl",
            OutcomeLog::Rejected => "rejected.jsonl",
        }
    }
}

/// Why records meant for an outcome log are not in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LostRecords {
    /// In a rotated file that rotation deleted (more than `state.max_log_files`).
    RotatedOut,
    /// The append failed (a full disk); these records were never written.
    WriteError,
}

impl LostRecords {
    /// Both reasons, in label order.
    pub const ALL: [LostRecords; 2] = [LostRecords::RotatedOut, LostRecords::WriteError];

    /// The `reason` label of `countersink_outcome_records_lost_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            LostRecords::RotatedOut => "rotated_out",
            LostRecords::WriteError => "write_error",
        }
    }
}

/// What an append to an outcome log did: records lost to rotation since the last
/// append, and records not written because the append failed.
#[derive(Debug, Default)]
pub struct Appended {
    /// Records in rotated files deleted since the last append.
    pub rotated_out: u64,
    /// Records not written, and why.
    pub failed: Option<(u64, io::Error)>,
}

impl Appended {
    /// The lost records, by reason (zero counts left out).
    pub fn lost(&self) -> impl Iterator<Item = (LostRecords, u64)> + use<> {
        let failed = self.failed.as_ref().map_or(0, |(n, _)| *n);
        [
            (LostRecords::RotatedOut, self.rotated_out),
            (LostRecords::WriteError, failed),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
    }
}

impl StateDir {
    /// Opens and locks the directory, recovering from the previous run. Returns the
    /// spilled rows to replay.
    pub fn open(config: &StateConfig) -> Result<(StateDir, Recovered), StateError> {
        let dir = config.dir.clone();
        let error_dir = dir.clone();
        let io_err = move |step: &'static str| {
            let dir = error_dir.clone();
            move |error: io::Error| StateError::Io { dir, step, error }
        };
        private::create_dir(&dir).map_err(io_err("create"))?;
        private::restrict_files(&dir).map_err(io_err("restrict permissions"))?;
        let lock = private::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("lock"))
            .map_err(io_err("open lock file"))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => return Err(StateError::Locked { dir }),
            Err(fs::TryLockError::Error(e)) => return Err(io_err("lock")(e)),
        }

        let writer_id = match &config.writer_id {
            Some(id) => id.clone(),
            None => read_or_create(&dir.join("writer_id"), generate_writer_id)
                .map_err(io_err("writer id"))?,
        };
        let incarnation =
            next_incarnation(&dir.join("incarnation")).map_err(io_err("incarnation"))?;
        let unclean_previous_run = match fs::read(dir.join("status.json")) {
            Ok(bytes) => serde_json::from_slice::<Status>(&bytes)
                .ok()
                .filter(|s| !s.clean),
            Err(_) => None,
        };

        let mut unknown = JsonlLog::open(
            dir.join("unknown.jsonl"),
            config.max_log_bytes,
            config.max_log_files,
        )
        .map_err(io_err("open unknown.jsonl"))?;
        let rejected = JsonlLog::open(
            dir.join("rejected.jsonl"),
            config.max_log_bytes,
            config.max_log_files,
        )
        .map_err(io_err("open rejected.jsonl"))?;
        let (spill, recovered) =
            Spill::recover(&dir, incarnation, &mut unknown).map_err(io_err("recover spill"))?;
        let state = StateDir {
            dir,
            _lock: lock,
            writer_id,
            incarnation,
            unknown,
            rejected,
            spill,
            unclean_previous_run,
        };
        state
            .write_status(false, 0, 0)
            .map_err(io_err("write status"))?;
        Ok((state, recovered))
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// This writer's id.
    pub fn writer_id(&self) -> &str {
        &self.writer_id
    }

    /// This process's incarnation: how many times the directory was opened.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// What the previous run left in `status.json`, when it did not stop cleanly.
    pub fn unclean_previous_run(&self) -> Option<&Status> {
        self.unclean_previous_run.as_ref()
    }

    /// Appends records to an outcome log, stopping at the first failed write. Durable
    /// once [`StateDir::sync_logs`] returns.
    pub fn append(&mut self, log: OutcomeLog, records: &[WriteRecord]) -> Appended {
        let file = match log {
            OutcomeLog::Unknown => &mut self.unknown,
            OutcomeLog::Rejected => &mut self.rejected,
        };
        let mut appended = Appended::default();
        for (i, record) in records.iter().enumerate() {
            if let Err(error) = file.append(record) {
                let lost = (records.len() - i) as u64;
                tracing::error!(%error, file = log.file_name(), records = lost, "Could not append outcome records.");
                appended.failed = Some((lost, error));
                break;
            }
        }
        appended.rotated_out = file.take_deleted_records();
        appended
    }

    /// Makes both outcome logs durable; the logs that could not be synced, with why.
    pub fn sync_logs(&mut self) -> Vec<(OutcomeLog, io::Error)> {
        let mut failed = Vec::new();
        for (log, file) in [
            (OutcomeLog::Unknown, &mut self.unknown),
            (OutcomeLog::Rejected, &mut self.rejected),
        ] {
            if let Err(error) = file.sync() {
                failed.push((log, error));
            }
        }
        failed
    }

    /// Appends records to the spill file and makes them durable. On an error part of
    /// them may be on disk (they are replayed like the rest).
    pub fn spill(&mut self, records: &[WriteRecord]) -> io::Result<()> {
        records
            .iter()
            .try_for_each(|r| self.spill.append(r))
            .and_then(|()| self.spill.sync())
    }

    /// Whether this process spilled rows that wait in `spill.jsonl`.
    pub fn has_spilled(&self) -> bool {
        self.spill.has_pending()
    }

    /// Replay step 2 while running: `spill.jsonl` becomes `spill.loaded.<tag>.jsonl` and
    /// its rows are returned, to be merged into the buffer. `tag` must be unique within
    /// the directory.
    pub fn reload_spill(&mut self, tag: &str) -> io::Result<Recovered> {
        self.spill.reload(tag)
    }

    /// Whether replayed rows are in the buffer and not sent yet.
    pub fn has_replay_loaded(&self) -> bool {
        self.spill.has_loaded()
    }

    /// Replay step 3: called before a flush that carries replayed rows sends anything.
    /// From here on a crash logs those rows as unknown instead of loading them again.
    pub fn begin_replay_send(&mut self) -> io::Result<()> {
        self.spill.begin_send()
    }

    /// The end of a replay: called once the flush that carried it recorded every outcome.
    pub fn finish_replay_send(&mut self) -> io::Result<()> {
        self.spill.finish_send()
    }

    /// Records pending rows after a flush (or, with `clean`, at the end of shutdown).
    pub fn write_status(
        &self,
        clean: bool,
        pending_rows: u64,
        pending_sum: i128,
    ) -> io::Result<()> {
        let status = Status {
            clean,
            incarnation: self.incarnation,
            pending_rows,
            pending_sum: pending_sum.to_string(),
            time: crate::bucket::rfc3339(std::time::SystemTime::now()),
        };
        let tmp = self.dir.join("status.json.tmp");
        let bytes = serde_json::to_vec(&status).map_err(io::Error::other)?;
        private::write(&tmp, &bytes, false)?;
        fs::rename(&tmp, self.dir.join("status.json"))
    }
}

fn read_or_create(path: &Path, make: impl FnOnce() -> String) -> io::Result<String> {
    match fs::read_to_string(path) {
        Ok(text) if !text.trim().is_empty() => Ok(text.trim().to_owned()),
        Ok(_) | Err(_) => {
            let value = make();
            write_durably(path, value.as_bytes())?;
            Ok(value)
        }
    }
}

fn next_incarnation(path: &Path) -> io::Result<u64> {
    let previous = fs::read_to_string(path)
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let next = previous + 1;
    write_durably(path, next.to_string().as_bytes())?;
    Ok(next)
}

fn write_durably(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    private::write(&tmp, bytes, true)?;
    fs::rename(&tmp, path)
}

/// `host-xxxxxxxx`: readable in logs, unique across a fleet.
fn generate_writer_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "countersink".into());
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..8];
    format!("{host}-{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &Path) -> StateConfig {
        StateConfig {
            dir: dir.to_owned(),
            ..StateConfig::default()
        }
    }

    #[test]
    fn identity_persists_and_incarnation_grows() {
        let tmp = tempfile::tempdir().unwrap();
        let (first, _) = StateDir::open(&config(tmp.path())).unwrap();
        let (id, inc) = (first.writer_id().to_owned(), first.incarnation());
        drop(first);
        let (second, _) = StateDir::open(&config(tmp.path())).unwrap();
        assert_eq!(second.writer_id(), id);
        assert_eq!(second.incarnation(), inc + 1);
    }

    #[test]
    fn one_process_per_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let (_held, _) = StateDir::open(&config(tmp.path())).unwrap();
        assert!(matches!(
            StateDir::open(&config(tmp.path())),
            Err(StateError::Locked { .. })
        ));
    }

    #[test]
    fn unclean_stop_is_reported_with_its_last_pending_rows() {
        let tmp = tempfile::tempdir().unwrap();
        let (state, _) = StateDir::open(&config(tmp.path())).unwrap();
        assert!(state.unclean_previous_run().is_none());
        state.write_status(false, 42, -7).unwrap();
        drop(state);
        let (state, _) = StateDir::open(&config(tmp.path())).unwrap();
        let previous = state.unclean_previous_run().cloned().unwrap();
        assert_eq!(
            (previous.pending_rows, previous.pending_sum.as_str()),
            (42, "-7")
        );
        state.write_status(true, 0, 0).unwrap();
        drop(state);
        let (state, _) = StateDir::open(&config(tmp.path())).unwrap();
        assert!(state.unclean_previous_run().is_none());
    }

    fn record() -> WriteRecord {
        serde_json::from_str(
            r#"{"time":"t","writer":"w","incarnation":1,"flush_seq":1,"outcome":"unknown","family":"generic",
                "table":"ks.t","granularity":"minute","key":{},"day":"2026-11-30","minute":1,"deltas":{"value":1}}"#,
        )
        .unwrap()
    }

    /// A full disk (`/dev/full` answers every write with ENOSPC) loses the records but
    /// never silently: the append says how many.
    #[test]
    fn records_that_cannot_be_written_are_counted() {
        let tmp = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/dev/full", tmp.path().join("unknown.jsonl")).unwrap();
        let (mut state, _) = StateDir::open(&config(tmp.path())).unwrap();
        let appended = state.append(OutcomeLog::Unknown, &[record(), record(), record()]);
        assert_eq!(
            appended.lost().collect::<Vec<_>>(),
            [(LostRecords::WriteError, 3)]
        );
    }

    /// Key values and deltas are for the owner only: the directory 0700, every file
    /// 0600, whatever the umask, and files left by an earlier version are tightened.
    #[test]
    fn the_directory_and_its_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state");
        fs::create_dir(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        fs::write(dir.join("unknown.jsonl"), "").unwrap();
        fs::set_permissions(dir.join("unknown.jsonl"), fs::Permissions::from_mode(0o644)).unwrap();
        let (mut state, _) = StateDir::open(&config(&dir)).unwrap();
        state.append(OutcomeLog::Rejected, &[record()]);
        state.spill(&[record()]).unwrap();
        state.write_status(false, 1, 1).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        let files: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert!(files.len() >= 7, "{files:?}");
        for file in files {
            assert_eq!(mode(&file), 0o600, "{}", file.display());
        }
    }

    #[test]
    fn records_deleted_by_rotation_are_counted() {
        let tmp = tempfile::tempdir().unwrap();
        let (mut state, _) = StateDir::open(&StateConfig {
            max_log_bytes: 10,
            max_log_files: 1,
            ..config(tmp.path())
        })
        .unwrap();
        let rotated: u64 = (0..4)
            .map(|_| state.append(OutcomeLog::Rejected, &[record()]).rotated_out)
            .sum();
        assert_eq!(rotated, 2);
    }
}
