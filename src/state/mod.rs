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

pub mod jsonl;
pub mod record;
pub mod spill;

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::StateConfig;

pub use self::jsonl::JsonlLog;
pub use self::record::{ErrorInfo, WriteRecord};
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
pub struct StateDir {
    dir: PathBuf,
    _lock: File,
    /// This writer's id.
    pub writer_id: String,
    /// This process's incarnation.
    pub incarnation: u64,
    /// `unknown.jsonl`.
    pub unknown: JsonlLog,
    /// `rejected.jsonl`.
    pub rejected: JsonlLog,
    /// The spill file.
    pub spill: Spill,
    /// What the previous run left, when it did not stop cleanly.
    pub unclean_previous_run: Option<Status>,
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
        fs::create_dir_all(&dir).map_err(io_err("create"))?;
        let lock = OpenOptions::new()
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
        fs::write(&tmp, serde_json::to_vec(&status).map_err(io::Error::other)?)?;
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
    {
        let mut file = File::create(&tmp)?;
        io::Write::write_all(&mut file, bytes)?;
        file.sync_all()?;
    }
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
        let (id, inc) = (first.writer_id.clone(), first.incarnation);
        drop(first);
        let (second, _) = StateDir::open(&config(tmp.path())).unwrap();
        assert_eq!(second.writer_id, id);
        assert_eq!(second.incarnation, inc + 1);
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
        assert!(state.unclean_previous_run.is_none());
        state.write_status(false, 42, -7).unwrap();
        drop(state);
        let (state, _) = StateDir::open(&config(tmp.path())).unwrap();
        let previous = state.unclean_previous_run.clone().unwrap();
        assert_eq!(
            (previous.pending_rows, previous.pending_sum.as_str()),
            (42, "-7")
        );
        state.write_status(true, 0, 0).unwrap();
        drop(state);
        let (state, _) = StateDir::open(&config(tmp.path())).unwrap();
        assert!(state.unclean_previous_run.is_none());
    }
}
