//! The spill file: writes that could not be sent, kept for the next start.
//!
//! # Crash windows
//!
//! A replayed delta must never be applied twice, so the files move through three names,
//! each step a single `rename` or `unlink`:
//!
//! 1. `spill.jsonl` — appended to while running (a write re-queued for longer than
//!    `flush.requeue_max_age`) and at shutdown (what the final flush could not send).
//! 2. `spill.loaded.<tag>.jsonl` — at start, and while running once the store answers
//!    again, `spill.jsonl` is renamed to this and its rows are merged into the buffer.
//!    Nothing has been sent yet: if the process dies now, the next start loads the file
//!    again, which is safe.
//! 3. `spill.inflight.<incarnation>.jsonl` — just before the first flush sends anything,
//!    loaded files are renamed to this. Once that flush has recorded every outcome
//!    (applied, logged, or re-queued in memory), the file is deleted. If the process dies
//!    while a file has this name, its rows may or may not have been applied: the next
//!    start moves them to `unknown.jsonl` (outcome unknown), never re-sends them.
//!
//! A torn last line (a crash in the middle of an append) cannot be parsed; it is copied
//! to `spill.corrupt.jsonl` and counted instead of being guessed at.

use std::fs;
use std::io::{self, BufRead};
use std::path::{Path, PathBuf};

use super::jsonl::JsonlLog;
use super::record::{ErrorInfo, RecordOutcome, WriteRecord};

const SPILL: &str = "spill.jsonl";
const CORRUPT: &str = "spill.corrupt.jsonl";

/// What the start-up recovery found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Rows to merge back into the buffer.
    pub replay: Vec<WriteRecord>,
    /// Rows of an interrupted replay, moved to the unknown log.
    pub interrupted: u64,
    /// Lines that could not be parsed, copied to `spill.corrupt.jsonl`.
    pub corrupt_lines: u64,
}

/// The spill file and the replay bookkeeping.
pub struct Spill {
    dir: PathBuf,
    appender: Option<JsonlLog>,
    loaded: Vec<PathBuf>,
    inflight: Vec<PathBuf>,
}

fn list(dir: &Path, prefix: &str) -> io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(prefix) && name.ends_with(".jsonl") {
            found.push(entry.path());
        }
    }
    found.sort();
    Ok(found)
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

impl Spill {
    /// Recovers after the previous run: interrupted replays go to `unknown`, pending
    /// spills are renamed to "loaded" and returned for replay.
    pub fn recover(
        dir: &Path,
        incarnation: u64,
        unknown: &mut JsonlLog,
    ) -> io::Result<(Spill, Recovered)> {
        let mut recovered = Recovered::default();
        let mut corrupt: Vec<String> = Vec::new();

        for path in list(dir, "spill.inflight.")? {
            for record in read_records(&path, &mut corrupt)? {
                let mut record = record;
                record.outcome = RecordOutcome::Unknown;
                record.error = Some(ErrorInfo {
                    kind: "replay_interrupted".into(),
                    text: "the process stopped while these replayed rows were being sent; they may or may not have been applied".into(),
                });
                unknown.append(&record)?;
                recovered.interrupted += 1;
            }
            unknown.sync()?;
            fs::remove_file(&path)?;
        }

        let spill = dir.join(SPILL);
        if spill.exists() {
            let target = dir.join(format!("spill.loaded.{incarnation}.jsonl"));
            fs::rename(&spill, &target)?;
        }
        sync_dir(dir)?;

        let loaded = list(dir, "spill.loaded.")?;
        for path in &loaded {
            recovered.replay.extend(read_records(path, &mut corrupt)?);
        }
        if !corrupt.is_empty() {
            let mut log = JsonlLog::open(dir.join(CORRUPT), u64::MAX, 1)?;
            for line in &corrupt {
                log.append(&serde_json::json!({ "unparsed": line }))?;
            }
            log.sync()?;
            recovered.corrupt_lines = corrupt.len() as u64;
        }
        Ok((
            Spill {
                dir: dir.to_owned(),
                appender: None,
                loaded,
                inflight: Vec::new(),
            },
            recovered,
        ))
    }

    /// Whether rows were spilled by this process and wait in `spill.jsonl`.
    pub fn has_pending(&self) -> bool {
        self.appender.is_some() && fs::metadata(self.dir.join(SPILL)).is_ok_and(|m| m.len() > 0)
    }

    /// Step 2 while running: renames `spill.jsonl` to `spill.loaded.<tag>.jsonl` and
    /// returns its rows for the buffer. `tag` must be unique within the directory.
    pub fn reload(&mut self, tag: &str) -> io::Result<Recovered> {
        let mut recovered = Recovered::default();
        if let Some(mut log) = self.appender.take() {
            log.sync()?;
        }
        let spill = self.dir.join(SPILL);
        if !spill.exists() {
            return Ok(recovered);
        }
        let target = self.dir.join(format!("spill.loaded.{tag}.jsonl"));
        fs::rename(&spill, &target)?;
        sync_dir(&self.dir)?;
        let mut corrupt = Vec::new();
        recovered.replay = read_records(&target, &mut corrupt)?;
        recovered.corrupt_lines = corrupt.len() as u64;
        if !corrupt.is_empty() {
            let mut log = JsonlLog::open(self.dir.join(CORRUPT), u64::MAX, 1)?;
            for line in &corrupt {
                log.append(&serde_json::json!({ "unparsed": line }))?;
            }
            log.sync()?;
        }
        self.loaded.push(target);
        Ok(recovered)
    }

    /// Appends rows to the spill file (durably, once [`Spill::sync`] returns).
    pub fn append(&mut self, record: &WriteRecord) -> io::Result<()> {
        if self.appender.is_none() {
            self.appender = Some(JsonlLog::open(self.dir.join(SPILL), u64::MAX, 1)?);
        }
        match &mut self.appender {
            Some(log) => log.append(record),
            None => Err(io::Error::other("spill file not open")),
        }
    }

    /// Makes appended rows durable.
    pub fn sync(&mut self) -> io::Result<()> {
        match &mut self.appender {
            Some(log) => log.sync(),
            None => Ok(()),
        }
    }

    /// Whether replayed rows are waiting for their first send.
    pub fn has_loaded(&self) -> bool {
        !self.loaded.is_empty()
    }

    /// Step 3: called before a flush that carries replayed rows sends anything.
    pub fn begin_send(&mut self) -> io::Result<()> {
        for path in std::mem::take(&mut self.loaded) {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("spill.loaded.0.jsonl")
                .replacen("spill.loaded.", "spill.inflight.", 1);
            let target = self.dir.join(name);
            fs::rename(&path, &target)?;
            self.inflight.push(target);
        }
        sync_dir(&self.dir)
    }

    /// Called once that flush has recorded every outcome.
    pub fn finish_send(&mut self) -> io::Result<()> {
        for path in std::mem::take(&mut self.inflight) {
            fs::remove_file(&path)?;
        }
        sync_dir(&self.dir)
    }
}

fn read_records(path: &Path, corrupt: &mut Vec<String>) -> io::Result<Vec<WriteRecord>> {
    let file = fs::File::open(path)?;
    let mut records = Vec::new();
    for line in io::BufReader::new(file).lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(&line) {
            Ok(record) => records.push(record),
            Err(_) => corrupt.push(line),
        }
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(n: i64) -> WriteRecord {
        WriteRecord {
            time: "2026-11-30T00:00:00Z".into(),
            writer: "w".into(),
            incarnation: 1,
            flush_seq: 1,
            outcome: RecordOutcome::Spilled,
            family: "generic".into(),
            table: "ks.counts_by_minute".into(),
            granularity: "minute".into(),
            key: [("name".to_string(), "x".to_string())].into(),
            shard: None,
            day: "2026-11-30".into(),
            minute: Some(1),
            month: None,
            deltas: [("value".to_string(), n)].into(),
            error: None,
        }
    }

    fn unknown_log(dir: &Path) -> JsonlLog {
        JsonlLog::open(dir.join("unknown.jsonl"), u64::MAX, 1).unwrap()
    }

    #[test]
    fn spill_then_replay_then_send_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let (mut spill, recovered) =
            Spill::recover(dir.path(), 1, &mut unknown_log(dir.path())).unwrap();
        assert!(recovered.replay.is_empty());
        spill.append(&record(5)).unwrap();
        spill.append(&record(6)).unwrap();
        spill.sync().unwrap();

        let (mut spill, recovered) =
            Spill::recover(dir.path(), 2, &mut unknown_log(dir.path())).unwrap();
        assert_eq!(recovered.replay, [record(5), record(6)]);
        assert!(spill.has_loaded());
        spill.begin_send().unwrap();
        spill.finish_send().unwrap();

        let (_, recovered) = Spill::recover(dir.path(), 3, &mut unknown_log(dir.path())).unwrap();
        assert!(
            recovered.replay.is_empty(),
            "a sent replay is never loaded again"
        );
        assert!(
            !dir.path()
                .join("unknown.jsonl")
                .metadata()
                .is_ok_and(|m| m.len() > 0)
        );
    }

    #[test]
    fn crash_before_sending_replays_again_crash_while_sending_goes_to_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let (mut spill, _) = Spill::recover(dir.path(), 1, &mut unknown_log(dir.path())).unwrap();
        spill.append(&record(7)).unwrap();
        spill.sync().unwrap();
        drop(spill);

        // Loaded, then the process dies before sending: loaded again, safely.
        let (spill, first) = Spill::recover(dir.path(), 2, &mut unknown_log(dir.path())).unwrap();
        drop(spill);
        let (mut spill, second) =
            Spill::recover(dir.path(), 3, &mut unknown_log(dir.path())).unwrap();
        assert_eq!(first.replay, second.replay);

        // Sending began, then the process dies: never re-sent, logged as unknown.
        spill.begin_send().unwrap();
        drop(spill);
        let (_, third) = Spill::recover(dir.path(), 4, &mut unknown_log(dir.path())).unwrap();
        assert!(third.replay.is_empty());
        assert_eq!(third.interrupted, 1);
        let unknown = fs::read_to_string(dir.path().join("unknown.jsonl")).unwrap();
        let logged: WriteRecord = serde_json::from_str(unknown.lines().next().unwrap()).unwrap();
        assert_eq!(logged.outcome, RecordOutcome::Unknown);
        assert_eq!(logged.deltas["value"], 7);
        assert_eq!(logged.error.unwrap().kind, "replay_interrupted");
    }

    #[test]
    fn rows_spilled_while_running_reload_through_the_same_steps() {
        let dir = tempfile::tempdir().unwrap();
        let (mut spill, _) = Spill::recover(dir.path(), 1, &mut unknown_log(dir.path())).unwrap();
        assert!(!spill.has_pending());
        spill.append(&record(3)).unwrap();
        spill.sync().unwrap();
        assert!(spill.has_pending());
        let reloaded = spill.reload("1-5").unwrap();
        assert_eq!(reloaded.replay, [record(3)]);
        assert!(!spill.has_pending() && spill.has_loaded());
        assert!(dir.path().join("spill.loaded.1-5.jsonl").exists());
        // Spilling again after a reload starts a new spill.jsonl.
        spill.append(&record(4)).unwrap();
        spill.sync().unwrap();
        spill.begin_send().unwrap();
        spill.finish_send().unwrap();
        drop(spill);
        let (_, next) = Spill::recover(dir.path(), 2, &mut unknown_log(dir.path())).unwrap();
        assert_eq!(next.replay, [record(4)], "only the rows not reloaded yet");
    }

    #[test]
    fn torn_line_is_set_aside_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let good = serde_json::to_string(&record(1)).unwrap();
        fs::write(
            dir.path().join(SPILL),
            format!("{good}\n{{\"time\":\"2026-"),
        )
        .unwrap();
        let (_, recovered) = Spill::recover(dir.path(), 1, &mut unknown_log(dir.path())).unwrap();
        assert_eq!(recovered.replay.len(), 1);
        assert_eq!(recovered.corrupt_lines, 1);
        assert!(
            fs::read_to_string(dir.path().join(CORRUPT))
                .unwrap()
                .contains("unparsed")
        );
    }
}
