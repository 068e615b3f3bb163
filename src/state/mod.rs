//! The state directory: one writer's intent journal, outcome logs, spill and identity.
//!
//! The book's "The state directory" (docs/src/operations/state-directory.md) lists every file it holds (the counter families',
//! the `writer_totals` families', the exact families' and the driver wrapper's) with its
//! content; this module owns the ones every kind of write shares:
//!
//! | module | files |
//! |---|---|
//! | this one | `lock`, `writer_id`, `dir_id`, `incarnation`, `status.json` |
//! | [`journal`] | `journal.wal`: the group commit of the flush in progress, its start windows and outcomes |
//! | [`jsonl`], [`record`] | `unknown.jsonl`, `rejected.jsonl` and their rotations and torn lines |
//! | [`spill`] | `spill.<incarnation>.<flush>[.recovered\|.held][.totals].jsonl`, `spill.cursor`, `spill.corrupt.jsonl`: every kind of write's spill, one cursor |
//! | [`totals_files`] | the `writer_totals` spill files of earlier versions (`totals.spill.jsonl`, `totals.replay.*.jsonl`), which a start moves into a segment |
//! | [`ingest_log`] | `ingest.log`, `ingest.<incarnation>.<seq>.sealed`: durable requests' increments, until a flush makes them a spill segment |
//! | [`ledger_pending`], [`outcomes_mark`] | `ledger_pending.jsonl`, `outcomes.mark` (exact families) |
//! | [`bound`] | how much disk the directory can take at most, and the free space of its filesystem |
//! | [`recovery`] | what opening the directory finishes for a killed process; a counting mode's own groups through the [`recovery::FinishKinds`] its opener hands in |
//! | [`wrapper_files`] | the driver wrapper's files as readers see them (its logs and spill of earlier versions, `wrapper_*.jsonl`, `wrapper_spill.jsonl` and `wrapper_spill.cursor`, which a start moves into a segment), and the records recovery writes for its unended flushes (the wrapper writes them) |
//!
//! Opening the directory finishes what a killed process left unfinished ([`recovery`]).
//!
//! The directory is `0700` and every file `0600` (see [`private`]).

pub mod bound;
pub mod ids;
pub mod ingest_log;
pub mod journal;
pub mod jsonl;
pub mod ledger_pending;
mod outcome_logs;
pub mod outcomes_mark;
pub mod private;
pub mod record;
pub mod recovery;
pub mod spill;
mod spilling;
mod status;
pub mod totals_files;
pub mod wrapper_files;

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use crate::config::StateConfig;
use crate::sink::PartitionWrite;
use crate::test_hooks;
use crate::vocabulary::Granularity;

pub use self::journal::{
    FamilyEntry, FlushGroup, FlushId, Journal, KindId, KindIntent, Settled, WrapperGroup,
    WrapperTable,
};
pub use self::jsonl::JsonlLog;
pub use self::outcome_logs::{Appended, LostRecords, OutcomeLog};
pub use self::record::{
    ErrorInfo, RecordOutcome, RecordSource, Target, TotalOf, WriteRecord, records_of,
};
pub use self::recovery::RecoveryReport;
pub use self::spill::{Chunk, Cursor, Passed, SegmentId, Spill, SpillView, Took};
pub use self::status::Status;

/// A problem opening the state directory.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Another process holds the directory.
    #[error("state directory {} is in use by another countersink process (lock file {})", dir.display(), dir.join("lock").display())]
    Locked {
        /// The directory.
        dir: PathBuf,
    },
    /// The driver wrapper left flushes unfinished here: only `CounterSession` recovers
    /// them (a sidecar or `Recorder` would overwrite their trail).
    #[error("state directory {} holds {flushes} unfinished flush(es) of the driver wrapper (CounterSession): open it with CounterSession once to recover them, or give this process another state.dir", dir.display())]
    UnfinishedWrapperFlush {
        /// The directory.
        dir: PathBuf,
        /// How many flushes.
        flushes: usize,
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

/// An open, locked state directory.
///
/// Callers use its operations, never its files: the journal's group commit, outcomes and
/// end; a batch of outcome records; a spill segment; a chunk of replay. Every step that
/// other steps depend on is one `fsync`, `rename` or `unlink` (docs/src/architecture/journal.md
/// lists what a crash between two of them means).
pub struct StateDir {
    dir: PathBuf,
    _lock: File,
    writer_id: String,
    /// A random id made when the directory was first opened: what tells two directories
    /// apart whose writers share a configured writer id.
    dir_id: String,
    incarnation: u64,
    unknown: JsonlLog,
    rejected: JsonlLog,
    spill: Spill,
    journal: Journal,
    unclean_previous_run: Option<Status>,
    recovery: RecoveryReport,
    /// A replay cursor a flush consumed that could not be made durable: the flush's group
    /// is still open in the journal, the only record that names it.
    owed_cursor: Option<Cursor>,
    /// Whether the open journal group recorded the outcome logs' sizes already (see
    /// [`StateDir::note_logs_at`]).
    logs_noted: bool,
    /// Whether the journal refused the open group's record of the outcome logs' sizes:
    /// the group's later appends neither rotate the logs nor record sizes (which would
    /// point past what it appended), and recovery looks for its records in the whole
    /// current files (see `state/recovery.rs`, `logged`).
    logs_unrecorded: bool,
    /// False only in the flush benchmark's baseline (feature `dev`): no journal at all.
    journal_enabled: bool,
    /// This start's nonce (random): with the writer id and the incarnation, what tells
    /// this process's requests and rows apart from another's sharing its writer id.
    nonce: u32,
    /// Unsettled flushes of a driver wrapper found at open, for the wrapper to finish.
    wrapper_groups: Vec<FlushGroup>,
    /// Whether the last of them is the journal's last group.
    wrapper_last_in_journal: bool,
    /// A group's end could not be written (its cursor, or its End): it stays open, and
    /// the outcome logs do not rotate until an end succeeds (see `rotate_full_logs`).
    group_left_open: bool,
    /// Refusal lines a previous process may have logged before a kill kept it from
    /// writing their cursor, by hash, with how many times each was found: read once, at
    /// the first refusals of the run found at open, dropped once a read takes a row (see
    /// [`StateDir::refusals_not_logged`]).
    logged_refusals: Option<std::collections::HashMap<u64, u32>>,
}

/// Torn or unreadable lines set aside, by file (`countersink_state_lines_corrupt_total`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CorruptLines {
    /// Torn last lines of `unknown.jsonl` / `rejected.jsonl` set aside at start.
    pub torn: [u64; 2],
    /// Lines of spill segments that could not be read.
    pub spill: u64,
}

impl StateDir {
    /// Opens and locks the directory, and finishes what the previous process left
    /// unfinished (see [`recovery`]): an unsettled flush in the journal, unfinished
    /// spill writes, a torn outcome log.
    ///
    /// A committed, unfinished group of kind intents (a `writer_totals` flush) in it is
    /// an error here: an opener that may find one uses [`StateDir::open_with`].
    pub fn open(config: &StateConfig) -> Result<StateDir, StateError> {
        StateDir::open_with(config, &recovery::NoKinds)
    }

    /// [`StateDir::open`], finishing a killed flush's group of kind intents (a
    /// `writer_totals` group) with `kinds` (the counting modes' own recovery).
    pub fn open_with(
        config: &StateConfig,
        kinds: &dyn recovery::FinishKinds,
    ) -> Result<StateDir, StateError> {
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
        let dir_id = read_or_create(&dir.join("dir_id"), || {
            uuid::Uuid::new_v4().simple().to_string()[..16].to_owned()
        })
        .map_err(io_err("directory id"))?;
        let incarnation =
            next_incarnation(&dir.join("incarnation")).map_err(io_err("incarnation"))?;
        let previous_run = fs::read(dir.join("status.json"))
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Status>(&bytes).ok());
        let stopped = previous_run
            .as_ref()
            .filter(|s| s.stopped)
            .map(|s| s.incarnation);
        let unclean_previous_run = previous_run.filter(|s| !s.clean);

        let unknown = JsonlLog::open(
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
        let (journal, groups, torn_journal) =
            Journal::open(dir.join("journal.wal")).map_err(io_err("open journal.wal"))?;
        let journal_cursor = groups
            .iter()
            .filter(|g| g.committed)
            .filter_map(|g| g.consumes)
            .max();
        let wrapper_groups = groups
            .iter()
            .filter(|g| g.wrapper.is_some() && !g.ended)
            .cloned()
            .collect();
        let wrapper_last_in_journal = groups
            .last()
            .is_some_and(|g| g.wrapper.is_some() && !g.ended);
        // An earlier version's wrapper flush named an offset of its own spill file: the
        // file moves into a segment from the furthest one on.
        let wrapper_offset = groups
            .iter()
            .filter(|g| g.committed)
            .filter_map(|g| g.wrapper.as_ref()?.legacy_spill_offset)
            .max();
        wrapper_files::migrate_spill(&dir, wrapper_offset, incarnation)
            .map_err(io_err("move the wrapper spill of an earlier version"))?;
        totals_files::migrate_spill(&dir, incarnation)
            .map_err(io_err("move the writer_totals spill of an earlier version"))?;
        let spill = Spill::open(&dir, config.max_spill_bytes, journal_cursor)
            .map_err(io_err("open the spill"))?;
        let mut state = StateDir {
            dir,
            _lock: lock,
            writer_id,
            dir_id,
            incarnation,
            unknown,
            rejected,
            spill,
            journal,
            unclean_previous_run,
            recovery: RecoveryReport::default(),
            journal_enabled: true,
            nonce: fastrand::u32(..),
            owed_cursor: None,
            logs_noted: false,
            logs_unrecorded: false,
            wrapper_groups,
            wrapper_last_in_journal,
            group_left_open: false,
            logged_refusals: None,
        };
        let mut report =
            recovery::recover(&mut state, groups, kinds, stopped).map_err(io_err("recover"))?;
        // Recovery has ended the journal, unless the driver wrapper's groups wait for it.
        state.delete_passed_segments();
        report.torn_journal_bytes = torn_journal;
        state.recovery = report;
        state
            .write_status(false, 0, [0; Granularity::COUNT])
            .map_err(io_err("write status"))?;
        Ok(state)
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

    /// Who owns what this directory holds, whatever the process: the writer id and the
    /// directory id (`writer~dir_id`).
    pub fn owner(&self) -> String {
        format!("{}~{}", self.writer_id, self.dir_id)
    }

    /// This start's nonce (see [`FlushId::nonce`]).
    pub fn nonce(&self) -> u32 {
        self.nonce
    }

    /// The id of this process's flush `flush_seq`.
    pub fn flush_id(&self, flush_seq: u64) -> FlushId {
        FlushId {
            writer: self.writer_id.clone(),
            incarnation: self.incarnation,
            flush_seq,
            nonce: Some(self.nonce),
        }
    }

    /// What the previous run left in `status.json`, when it did not stop cleanly.
    pub fn unclean_previous_run(&self) -> Option<&Status> {
        self.unclean_previous_run.as_ref()
    }

    /// What opening the directory had to finish for the previous process.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// Torn or unreadable lines set aside at start.
    pub fn torn_lines(&self) -> [u64; 2] {
        [self.unknown.torn_lines(), self.rejected.torn_lines()]
    }

    /// Makes every later write of the journal fail, as a full or failing disk would: no
    /// group commit is made from now on, so what a flush leaves on disk is what a kill
    /// before its group commit would (tests).
    #[cfg(test)]
    pub(crate) fn fail_journal_writes(&mut self) {
        self.journal.fail_writes();
    }

    /// Turns the journal off: no intents, no outcomes, no crash recovery for this
    /// process's flushes. Only for the flush benchmark's baseline (what the journal
    /// costs is measured against it); never in a product build.
    #[cfg(feature = "dev")]
    pub fn disable_journal_for_benchmark(&mut self) {
        self.journal_enabled = false;
    }

    /// The journal's file.
    pub fn journal_path(&self) -> &Path {
        self.journal.path()
    }

    /// The group commit of a flush's counter writes: their intents, durable, with the
    /// replay cursor the group consumes (a group sending replayed rows: the cursor past
    /// exactly those rows). Nothing of the group may be sent before this returns `Ok`.
    pub fn journal_begin(
        &mut self,
        flush: &FlushId,
        time: &str,
        consumes: Option<Cursor>,
        families: &[FamilyEntry],
        writes: &[PartitionWrite],
    ) -> io::Result<()> {
        (self.logs_noted, self.logs_unrecorded) = (false, false);
        if !self.journal_enabled {
            return Ok(());
        }
        self.journal.begin(flush, time, consumes, families, writes)
    }

    /// The group commit of a kind of write that journals its own intents (running
    /// totals, `writer_totals`): a group of its own, after the counter writes' group
    /// ended, naming the replay cursor it consumes (a group carrying spilled rows of the
    /// kind: the cursor past exactly those rows); closed with
    /// [`StateDir::journal_end`]. Nothing of them may be sent before this returns `Ok`.
    pub fn journal_begin_kind(
        &mut self,
        flush: &FlushId,
        time: &str,
        consumes: Option<Cursor>,
        families: &[FamilyEntry],
        intents: &[KindIntent],
    ) -> io::Result<()> {
        (self.logs_noted, self.logs_unrecorded) = (false, false);
        if !self.journal_enabled {
            return Ok(());
        }
        self.journal
            .begin_kind(flush, time, consumes, families, intents)
    }

    /// Counter flushes from now on start their requests in windows of `window`, each
    /// window's bound durable before its first request starts: after a crash, requests
    /// past the last bound are known never sent and are spilled instead of logged as
    /// unknown (see the journal's start windows).
    pub fn set_start_window(&mut self, window: u32) {
        self.journal.set_start_window(window);
    }

    /// Before request `index` of the open counter flush starts (see
    /// [`StateDir::set_start_window`]). `Err`: the bound could not be made durable, and
    /// the request must not start.
    pub fn journal_may_start(&mut self, index: u32) -> io::Result<()> {
        if !self.journal_enabled {
            return Ok(());
        }
        self.journal.may_start(index)
    }

    /// Records how a request ended (buffered; see [`StateDir::journal_flush`]).
    pub fn journal_outcome(&mut self, request: u32, settled: &Settled) {
        if self.journal_enabled {
            self.journal.outcome(request, settled);
        }
    }

    /// Hands buffered outcome records to the kernel (they survive the process).
    pub fn journal_flush(&mut self) {
        if let Err(error) = self.journal.flush_pending() {
            tracing::warn!(%error, "Could not write outcome records to the journal; a crash now would log those requests as unknown.");
        }
    }

    /// Ends a flush: makes the replay cursor it consumed durable, marks the flush settled
    /// in the journal, then deletes the spill segments the cursor passed (not before: a
    /// group left open may own rows in them, see [`spill::Spill::delete_passed`]).
    ///
    /// In that order because the End starts the journal over, and with it goes the group
    /// that named the cursor: until `spill.cursor` holds it, that group is the only
    /// durable record that the replayed rows were sent. When the cursor cannot be
    /// written (a full disk: the journal is preallocated and keeps working, the cursor's
    /// temp file does not), the group stays open and the next start, or the next flush
    /// that ends, takes the cursor from it; a kill between the two finds the cursor
    /// durable and the group open, which recovery finishes without sending anything.
    ///
    /// A cursor that could not be made durable stays owed: every later end (a
    /// `writer_totals` group's too, whether it consumed a cursor or not) makes it durable before it
    /// writes its End, or writes none, so no End can discard the open group that names it.
    pub fn journal_end(&mut self, flush: &FlushId, consumed: Option<Cursor>) -> io::Result<()> {
        let consumed = consumed.max(self.owed_cursor);
        if let Err(error) = self.spill.commit(consumed) {
            // (`commit` moves the durable cursor only once `spill.cursor` holds it.)
            self.owed_cursor = consumed;
            self.group_left_open = true;
            return Err(error);
        }
        self.owed_cursor = None;
        test_hooks::crash_point("replay_cursor_committed");
        if self.journal_enabled {
            self.group_left_open = true;
            self.journal.end(flush.flush_seq)?;
        }
        self.group_left_open = false;
        (self.logs_noted, self.logs_unrecorded) = (false, false);
        // No group is open now: the segments the cursor passed can go.
        self.delete_passed_segments();
        Ok(())
    }

    /// Deletes the spill segments the durable cursor has passed, unless the journal holds
    /// an open group (see [`spill::Spill::delete_passed`]): one left open, one in
    /// progress, or the driver wrapper's waiting for its recovery. A failure is only
    /// logged: the cursor is durable, so they are never read again, and a later end or
    /// the next start deletes them.
    pub(super) fn delete_passed_segments(&mut self) {
        let open = self.group_left_open
            || (self.journal_enabled && self.journal.has_open_group())
            || !self.wrapper_groups.is_empty();
        if open {
            return;
        }
        if let Err(error) = self.spill.delete_passed() {
            tracing::warn!(%error, "Could not delete spill segments the replay cursor has passed; a later flush or the next start deletes them (nothing is replayed twice).");
        }
    }

    /// How many flushes of the driver wrapper the journal holds unfinished.
    pub fn unfinished_wrapper_flushes(&self) -> usize {
        self.wrapper_groups.len()
    }

    /// The driver wrapper's flushes the previous process did not end, oldest first, and
    /// whether the last of them is the journal's last group (only that group's
    /// not-applied rows are known to be nowhere else). Its crash
    /// recovery finishes them, then ends the journal once with [`StateDir::journal_end`].
    pub fn take_wrapper_groups(&mut self) -> (Vec<FlushGroup>, bool) {
        (
            std::mem::take(&mut self.wrapper_groups),
            self.wrapper_last_in_journal,
        )
    }

    /// The group commit of a driver wrapper's flush (see [`Journal::begin_wrapper`]).
    /// Nothing of the flush may be sent before this returns `Ok`.
    pub fn wrapper_journal_begin(
        &mut self,
        flush: &FlushId,
        time: &str,
        consumes: Option<Cursor>,
        tables: &[WrapperTable],
        intents: &journal::WrapperIntents<'_>,
    ) -> io::Result<()> {
        if !self.journal_enabled {
            return Ok(());
        }
        self.journal
            .begin_wrapper(flush, time, consumes, tables, intents)
    }

    /// Before a driver wrapper's flush first appends records: rotates full outcome logs,
    /// then records, durably, the logs' sizes in the journal, so that its recovery finds
    /// what the flush already recorded. Returns the sizes recorded (the third, an earlier
    /// version's spill file size, is 0: a spill segment names its flush).
    pub fn wrapper_journal_logs_at(&mut self) -> io::Result<[u64; 3]> {
        self.rotate_full_logs();
        let sizes = [self.unknown.size(), self.rejected.size(), 0];
        if self.journal_enabled {
            self.journal.logs_at_wrapper(sizes)?;
        }
        Ok(sizes)
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
mod tests;
