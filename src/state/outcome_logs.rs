//! The two outcome logs as the state directory keeps them: where a flush's records start
//! (recorded in the journal before its first append, so recovery logs nothing twice),
//! appends and syncs, rotation, and the lookups recovery and the exact families make.

use std::io;
use std::path::Path;

use super::{JsonlLog, StateDir, WriteRecord, outcomes_mark};

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

/// The error kinds of records refused at replay (the sidecar's, the driver wrapper's):
/// the only lines [`StateDir::refusals_not_logged`] looks at.
const REFUSAL_KINDS: [&str; 2] = ["\"replay_unmappable\"", "\"not_replayable\""];

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
    /// The `(request_id, row)` of the records `log` holds from `offset` on (its current
    /// file): what a recovery must not record again.
    pub fn log_keys_from(
        &self,
        log: OutcomeLog,
        offset: u64,
    ) -> io::Result<std::collections::HashSet<(String, u16)>> {
        self.log(log).keys_from(offset)
    }

    /// The `(request_id, row)` of the records `log`'s current file holds whose request
    /// id starts with `prefix`: what a crashed flush whose start in the log is not known
    /// (see [`JsonlLog::keys_of_requests`]) must not record again.
    pub fn log_keys_of_requests(
        &self,
        log: OutcomeLog,
        prefix: &str,
    ) -> io::Result<std::collections::HashSet<(String, u16)>> {
        self.log(log).keys_of_requests(prefix)
    }

    /// The current file of an outcome log.
    pub fn log_path(&self, log: OutcomeLog) -> &Path {
        self.log(log).path()
    }

    fn log(&self, log: OutcomeLog) -> &JsonlLog {
        match log {
            OutcomeLog::Unknown => &self.unknown,
            OutcomeLog::Rejected => &self.rejected,
        }
    }

    /// Before the open journal group first appends to the outcome logs: rotates full logs,
    /// then records the logs' sizes in the journal, durably, so that recovery finds what
    /// the group already logged from there (and logs nothing twice, nor misses a record
    /// whose outcome the journal holds). Once per group: a rotation after the sizes were
    /// recorded would move the records they point at. When the journal refuses the
    /// record, not again in the group: a rotation or sizes recorded later would hide the
    /// records the group appended meanwhile from its recovery, which then looks for them
    /// in the whole current files.
    pub fn note_logs_at(&mut self) {
        if self.logs_noted || self.logs_unrecorded {
            return;
        }
        self.rotate_full_logs();
        match self
            .journal
            .logs_at(self.unknown.size(), self.rejected.size())
        {
            Ok(()) => self.logs_noted = true,
            Err(error) => {
                self.logs_unrecorded = true;
                tracing::error!(%error, "Could not record the outcome logs' sizes in the journal; a crash before this flush ends could log some records twice.");
            }
        }
        crate::test_hooks::crash_point("logs_at_recorded");
    }

    /// Rotates each full outcome log (an error is logged: appends go on in the full file).
    pub(super) fn rotate_full_logs(&mut self) {
        if self.group_left_open {
            // An earlier group is still open (its cursor or its End could not be
            // written): its recovery looks for its records in the current files from
            // its recorded sizes, which a rotation would move them out of. The logs
            // rotate once it ends (until then they may pass `state.max_log_bytes`).
            return;
        }
        for (log, file) in [
            (OutcomeLog::Unknown, &mut self.unknown),
            (OutcomeLog::Rejected, &mut self.rejected),
        ] {
            if let Err(error) = file.rotate_if_full() {
                tracing::error!(%error, file = log.file_name(), "Could not rotate an outcome log.");
            }
        }
    }

    /// Appends records to an outcome log and syncs it, without rotating it or recording
    /// its size: for a driver wrapper's flush, whose group recorded the sizes before
    /// (see [`StateDir::wrapper_journal_logs_at`]).
    pub fn append_recorded(&mut self, log: OutcomeLog, records: &[WriteRecord]) -> Appended {
        let mut appended = self.append(log, records);
        let file = match log {
            OutcomeLog::Unknown => &mut self.unknown,
            OutcomeLog::Rejected => &mut self.rejected,
        };
        if let Err(error) = file.sync()
            && appended.failed.is_none()
        {
            appended.failed = Some((records.len() as u64, error));
        }
        appended
    }

    /// Appends one flush's outcome records (one batch per journal group): rotates full
    /// logs and records where the batch starts in the journal (durably, see
    /// [`StateDir::note_logs_at`]), appends, syncs. Returns what each log did.
    pub fn log_batch(
        &mut self,
        unknown: &[WriteRecord],
        rejected: &[WriteRecord],
    ) -> [Appended; 2] {
        let mut results = [Appended::default(), Appended::default()];
        if unknown.is_empty() && rejected.is_empty() {
            return results;
        }
        // A flush logs one batch per group: its sizes are noted afresh, full logs rotated.
        self.logs_noted = false;
        self.note_logs_at();
        for (i, (log, records)) in [
            (OutcomeLog::Unknown, unknown),
            (OutcomeLog::Rejected, rejected),
        ]
        .into_iter()
        .enumerate()
        {
            if !records.is_empty() {
                results[i] = self.append(log, records);
            }
        }
        crate::test_hooks::crash_point("logs_appended");
        for (log, error) in self.sync_logs() {
            tracing::error!(%error, file = log.file_name(), "Could not sync an outcome log.");
        }
        results
    }

    /// Appends records to an outcome log, stopping at the first failed write.
    pub(super) fn append(&mut self, log: OutcomeLog, records: &[WriteRecord]) -> Appended {
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
    pub(super) fn sync_logs(&mut self) -> Vec<(OutcomeLog, io::Error)> {
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

    /// Of `records` refused at replay (read back from the spill, logged to `log` as they
    /// are read), those not in it already. Refusals are a chunk of their own whose cursor
    /// is written right after their lines are synced: a kill between the two leaves them
    /// logged with the cursor before them, and the next process reads them again first,
    /// perhaps in shorter chunks (a chunk's room depends on the memory free). So until a
    /// read of this process takes a row, a record whose very line the log holds (a
    /// refused record's line is its spill line, its outcome and error set: the same
    /// bytes whoever writes it) is not logged again, as many times as the line is found.
    /// Found in the log's current file and its latest rotation (a flush of this process
    /// may have rotated it since), by hash, so that only 12 bytes a refusal line are
    /// held, and only until a read takes a row. Logged again when the log cannot be
    /// read, or the line differs (a configuration changed again between the two starts
    /// gives another reason, a newer version another field): twice rather than not at
    /// all.
    pub fn refusals_not_logged(
        &mut self,
        log: OutcomeLog,
        records: Vec<WriteRecord>,
    ) -> Vec<WriteRecord> {
        if self.spill.taken_since_open() {
            return records;
        }
        if records.is_empty() {
            return records;
        }
        if self.logged_refusals.is_none() {
            let path = self.log(log).path();
            let lines =
                super::jsonl::lines_containing(path, &REFUSAL_KINDS).and_then(|mut lines| {
                    let rotated = super::jsonl::rotated_name(path, 1);
                    for (line, count) in super::jsonl::lines_containing(&rotated, &REFUSAL_KINDS)? {
                        *lines.entry(line).or_default() += count;
                    }
                    Ok(lines)
                });
            match lines {
                Ok(lines) => self.logged_refusals = Some(lines),
                Err(error) => {
                    tracing::warn!(%error, file = log.file_name(), "Could not read an outcome log to find refusals logged before a kill; they are logged again.");
                    return records;
                }
            }
        }
        let logged = self.logged_refusals.get_or_insert_default();
        let before = records.len();
        let kept: Vec<WriteRecord> = records
            .into_iter()
            .filter(|record| {
                let Ok(line) = serde_json::to_vec(record) else {
                    return true;
                };
                match logged.get_mut(&super::jsonl::line_hash(&line)) {
                    Some(count) if *count > 0 => {
                        *count -= 1;
                        false
                    }
                    _ => true,
                }
            })
            .collect();
        if kept.len() < before {
            tracing::info!(
                records = before - kept.len(),
                file = log.file_name(),
                "Refused spilled rows were logged before the last stop wrote their cursor; not logged again."
            );
        }
        kept
    }

    /// Appends records to an outcome log outside a flush (replayed rows that no longer
    /// map to a table), durably.
    pub fn append_now(&mut self, log: OutcomeLog, records: &[WriteRecord]) -> Appended {
        self.note_logs_at();
        let appended = self.append(log, records);
        for (log, error) in self.sync_logs() {
            tracing::error!(%error, file = log.file_name(), "Could not sync an outcome log.");
        }
        appended
    }

    /// The outcome logs' sizes now (see [`outcomes_mark`]).
    pub fn outcome_log_sizes(&self) -> outcomes_mark::Mark {
        outcomes_mark::Mark {
            unknown: self.unknown.size(),
            rejected: self.rejected.size(),
            unknown_file: outcomes_mark::file_id(self.unknown.path()),
            rejected_file: outcomes_mark::file_id(self.rejected.path()),
        }
    }

    /// Calls `each` with every record the outcome logs hold past `mark` (see
    /// [`super::outcomes_mark::records_past`]).
    pub fn outcome_records_past(
        &self,
        mark: outcomes_mark::Mark,
        mut each: impl FnMut(WriteRecord),
    ) -> io::Result<()> {
        outcomes_mark::records_past(
            self.unknown.path(),
            mark.unknown,
            mark.unknown_file,
            &mut each,
        )?;
        outcomes_mark::records_past(
            self.rejected.path(),
            mark.rejected,
            mark.rejected_file,
            &mut each,
        )
    }
}
