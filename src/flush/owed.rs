//! What a state directory still owes the exact families' counters, made visible in the
//! store, so that `reconcile` waits for every writer and not only for the state directory
//! it can read (the shipped CronJob reads none).
//!
//! A writer owes a family-day while its spill holds rows of it (their ledger rows are
//! confirmed, their counter writes not sent yet), and while rows a replay brought back
//! into the buffer wait there for a later flush. For each such family-day the outcomes
//! table holds a row `outcome = owed`, request id `owed/<owner>` (the owner is the writer
//! id and the state directory's own id); the row becomes `replayed` once nothing of the
//! day is owed any more. `reconcile` keeps a day open while any writer's row says `owed`:
//! `--repair` and `--close` wait, and the counters of an open day are judged against
//! their ceiling only (a counter above its ledger is still `unexplained` at once). A
//! repair before the replay would have counted the spilled rows twice.
//!
//! The marks are one row per family-day and state directory, whatever the number of keys,
//! sent beside the outcome rows in order (a later mark overwrites an earlier one, so the
//! queue keeps only the latest of a family-day: see `OutcomeQueue::marks`), retried
//! until they apply, never dropped. Which days are owed follows from the spill, which is
//! durable: every start asserts `owed` for every day its spill holds. `owed.days` (in the
//! state directory, one JSON day per line) lists the days whose `owed` mark may be in the
//! table: written before a new day's mark is queued, and cut down once the `replayed`
//! marks applied, so that a start also clears a day whose clearing a kill interrupted.
//!
//! What stays blind: a writer that spills while it cannot reach the outcomes table
//! (an outage, a stop with the store down) writes its marks when it can, at the latest
//! at its next start; a reconcile in between cannot see that debt (docs/src/operations/reconcile.md says so).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::aggregate::RowKey;
use crate::bucket::{self, Day};
use crate::family::Families;
use crate::sink::{OutcomeRow, PartitionWrite};
use crate::state::WriteRecord;
use crate::vocabulary::{FamilyId, Granularity};

/// The file of days whose `owed` mark may be in the table.
pub const FILE_NAME: &str = "owed.days";

/// The outcome of a family-day a writer still owes rows of.
pub const OWED: &str = "owed";

/// The outcome of a family-day whose owed rows have all left the writer's state.
pub const REPLAYED: &str = "replayed";

/// The outcome of a family-day an operator released for a state directory lost for good
/// (`reconcile --release-owed`): its owed rows will never be replayed.
pub const RELEASED: &str = "released";

/// The request id prefix of the marks.
pub const REQUEST_PREFIX: &str = "owed/";

/// The `released` mark of `family`'s `day` for `owner` (a state directory's owner id, as
/// reconcile names it): written over its `owed` mark, it stops holding the day open.
pub fn released_mark(family: &str, day: Day, owner: &str) -> OutcomeRow {
    OutcomeRow {
        family: family.to_owned(),
        day,
        request_id: format!("{REQUEST_PREFIX}{owner}"),
        row: 0,
        outcome: RELEASED.to_owned(),
        granularity: String::new(),
        key: String::new(),
        minute: None,
        shard: None,
        deltas: BTreeMap::new(),
        error_kind: None,
        error: None,
        recorded_ms: bucket::unix_secs(SystemTime::now()).saturating_mul(1000),
    }
}

/// An owed family-day (of an exact family).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OwedDay {
    /// The family's name.
    pub family: String,
    /// The day, `YYYY-MM-DD`.
    pub day: String,
}

impl OwedDay {
    /// The day of a spilled record of an exact family (`None` for another family).
    pub fn of(families: &Families, record: &WriteRecord) -> Option<OwedDay> {
        families
            .by_name(&record.family)
            .is_some_and(|f| f.exact)
            .then(|| OwedDay {
                family: record.family.clone(),
                day: record.day.clone(),
            })
    }

    /// Its row of the outcomes table, with `outcome` (`owed` or `replayed`): one row per
    /// family-day and state directory (`owner`), whatever the process.
    fn mark(&self, owner: &str, outcome: &str) -> Option<OutcomeRow> {
        let day = bucket::parse_date(&self.day).and_then(Day::from_date)?;
        let recorded_ms = bucket::unix_secs(SystemTime::now()).saturating_mul(1000);
        Some(OutcomeRow {
            family: self.family.clone(),
            day,
            request_id: format!("{REQUEST_PREFIX}{owner}"),
            row: 0,
            outcome: outcome.to_owned(),
            granularity: String::new(),
            key: String::new(),
            minute: None,
            shard: None,
            deltas: BTreeMap::new(),
            error_kind: None,
            error: None,
            recorded_ms,
        })
    }
}

/// A row a replay brought back into the buffer: (table, series, bucket), the identity of
/// the buffer's row it merged into (a later write carrying that bucket carries it).
type BufferedRow = (Granularity, Box<[u8]>, u32);

/// The rows a state directory owes, by family-day, and the marks to send.
#[derive(Debug)]
pub struct OwedBook {
    /// The directory, for [`FILE_NAME`].
    dir: PathBuf,
    /// Who owes: the state directory's owner id (writer id and directory id).
    owner: String,
    /// Spilled records not replayed yet, per day.
    spilled: BTreeMap<OwedDay, u64>,
    /// Rows of committed replays back in the buffer (re-queued, or held by the epoch
    /// registry), per day.
    buffered: BTreeMap<OwedDay, BTreeSet<BufferedRow>>,
    /// Days whose `owed` mark may be in the table (what the file lists).
    marked: BTreeSet<OwedDay>,
    /// Days whose `replayed` mark is queued and not known applied yet.
    clearing: BTreeSet<OwedDay>,
    /// Days that owe less than before, looked at by [`OwedBook::sweep`].
    candidates: BTreeSet<OwedDay>,
}

impl OwedBook {
    /// The book of the state directory `dir`, owned by `owner`, from the days its file
    /// lists; nothing is owed until the spill is counted.
    pub fn open(dir: &Path, owner: String) -> io::Result<OwedBook> {
        let marked = match std::fs::read_to_string(dir.join(FILE_NAME)) {
            Ok(text) => text
                .lines()
                .filter_map(|line| serde_json::from_str(line).ok())
                .collect(),
            Err(error) if error.kind() == io::ErrorKind::NotFound => BTreeSet::new(),
            Err(error) => return Err(error),
        };
        Ok(OwedBook {
            dir: dir.to_owned(),
            owner,
            spilled: BTreeMap::new(),
            buffered: BTreeMap::new(),
            marked,
            clearing: BTreeSet::new(),
            candidates: BTreeSet::new(),
        })
    }

    /// At start, one record of the spill (read, not consumed). Nothing is written until
    /// [`OwedBook::start_marks`].
    pub fn count_spilled(&mut self, families: &Families, record: &WriteRecord) {
        if let Some(day) = OwedDay::of(families, record) {
            *self.spilled.entry(day).or_default() += 1;
        }
    }

    /// At start, once the spill was counted: every day it holds is listed in the file,
    /// and the marks to send are `owed` for those days (again: the previous process may
    /// not have written them) and `replayed` for the days the file lists and the spill no
    /// longer holds (a kill interrupted their clearing).
    pub fn start_marks(&mut self) -> io::Result<Vec<OutcomeRow>> {
        let gone: Vec<OwedDay> = self
            .marked
            .iter()
            .filter(|d| !self.spilled.contains_key(*d))
            .cloned()
            .collect();
        self.clearing.extend(gone.iter().cloned());
        let before = self.marked.len();
        self.marked.extend(self.spilled.keys().cloned());
        if self.marked.len() != before {
            self.persist()?;
        }
        let owed = self
            .spilled
            .keys()
            .filter_map(|d| d.mark(&self.owner, OWED));
        let cleared = gone.iter().filter_map(|d| d.mark(&self.owner, REPLAYED));
        Ok(owed.chain(cleared).collect())
    }

    /// Records kept in a spill segment: their days are owed. Returns the `owed` marks to
    /// send (days not asserted yet; the file lists them first).
    pub fn spilled<'a>(
        &mut self,
        families: &Families,
        records: impl IntoIterator<Item = &'a WriteRecord>,
    ) -> io::Result<Vec<OutcomeRow>> {
        let mut new = BTreeSet::new();
        for record in records {
            if let Some(day) = OwedDay::of(families, record) {
                *self.spilled.entry(day.clone()).or_default() += 1;
                if !self.marked.contains(&day) || self.clearing.contains(&day) {
                    new.insert(day);
                }
            }
        }
        if new.is_empty() {
            return Ok(Vec::new());
        }
        let before = self.marked.len();
        self.marked.extend(new.iter().cloned());
        if self.marked.len() != before {
            self.persist()?;
        }
        for day in &new {
            self.clearing.remove(day);
        }
        Ok(new
            .iter()
            .filter_map(|d| d.mark(&self.owner, OWED))
            .collect())
    }

    /// A committed replay group carried these records (counted per day): they left the
    /// spill.
    pub fn replayed(&mut self, days: BTreeMap<OwedDay, u64>) {
        for (day, count) in days {
            if let Some(held) = self.spilled.get_mut(&day) {
                *held = held.saturating_sub(count);
                if *held == 0 {
                    self.spilled.remove(&day);
                }
                self.candidates.insert(day);
            }
        }
    }

    /// A write of a committed replay group went back into the buffer (re-queued, or
    /// held): its rows are still owed until a later write carries them.
    pub fn buffered_write(&mut self, families: &Families, write: &PartitionWrite) {
        for row in &write.rows {
            if let Some(day) = owed_day(families, write.family, write.table, row.bucket) {
                self.buffered.entry(day).or_default().insert((
                    write.table,
                    write.series.clone(),
                    row.bucket,
                ));
            }
        }
    }

    /// Rows of a committed replay group the epoch registry could not place yet: they go
    /// back into the buffer, owed until a later write carries them.
    pub fn buffered_rows<'a>(
        &mut self,
        families: &Families,
        keys: impl Iterator<Item = &'a RowKey>,
    ) {
        for key in keys {
            // Exact families have a minute and a day table only (the configuration
            // refuses others).
            let places: &[(Granularity, u32)] = &match key.slot().owed_to() {
                None => {
                    let m = key.slot().minute();
                    [(Granularity::Minute, m.0), (Granularity::Day, m.day().0)]
                }
                Some(only) => [only; 2],
            };
            for (table, bucket) in places {
                if let Some(day) = owed_day(families, key.family(), *table, *bucket) {
                    self.buffered.entry(day).or_default().insert((
                        *table,
                        key.series().into(),
                        *bucket,
                    ));
                }
            }
        }
    }

    /// A write left the buffer for good (applied, unknown, rejected, or spilled, which
    /// owes its rows again): the replayed rows it carried are no longer in the buffer.
    pub fn settled(&mut self, families: &Families, write: &PartitionWrite) {
        if self.buffered.is_empty() {
            return;
        }
        for row in &write.rows {
            let Some(day) = owed_day(families, write.family, write.table, row.bucket) else {
                continue;
            };
            let Some(rows) = self.buffered.get_mut(&day) else {
                continue;
            };
            // A borrowed key: the series is compared without a copy.
            let found = rows
                .iter()
                .find(|(t, s, b)| *t == write.table && *b == row.bucket && **s == *write.series)
                .cloned();
            if let Some(found) = found {
                rows.remove(&found);
                if rows.is_empty() {
                    self.buffered.remove(&day);
                }
                self.candidates.insert(day);
            }
        }
    }

    /// The `replayed` marks of the days that owe nothing any more (neither in the spill
    /// nor in the buffer) and whose `owed` mark may be in the table.
    pub fn sweep(&mut self) -> Vec<OutcomeRow> {
        let mut marks = Vec::new();
        for day in std::mem::take(&mut self.candidates) {
            let owes = self.spilled.contains_key(&day) || self.buffered.contains_key(&day);
            if owes || !self.marked.contains(&day) || self.clearing.contains(&day) {
                continue;
            }
            marks.extend(day.mark(&self.owner, REPLAYED));
            self.clearing.insert(day);
        }
        marks
    }

    /// Every queued mark applied: the days being cleared leave the file.
    pub fn marks_applied(&mut self) -> io::Result<()> {
        if self.clearing.is_empty() {
            return Ok(());
        }
        for day in std::mem::take(&mut self.clearing) {
            self.marked.remove(&day);
        }
        self.persist()
    }

    /// Days owed now.
    pub fn owed_days(&self) -> usize {
        self.spilled
            .keys()
            .chain(self.buffered.keys())
            .collect::<BTreeSet<_>>()
            .len()
    }

    fn persist(&self) -> io::Result<()> {
        let path = self.dir.join(FILE_NAME);
        if self.marked.is_empty() {
            return match std::fs::remove_file(&path) {
                Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
                _ => Ok(()),
            };
        }
        let mut bytes = Vec::new();
        for day in &self.marked {
            serde_json::to_writer(&mut bytes, day).map_err(io::Error::other)?;
            bytes.push(b'\n');
        }
        crate::state::private::write_atomically(&self.dir, &path, &bytes)
    }
}

/// The owed day of a row of an exact family in `table` at `bucket` (`None` for a
/// family without exact totals).
fn owed_day(
    families: &Families,
    family: FamilyId,
    table: Granularity,
    bucket: u32,
) -> Option<OwedDay> {
    let def = families.get(family);
    if !def.exact {
        return None;
    }
    let day = crate::bucket::day_of(table, bucket);
    Some(OwedDay {
        family: def.name.clone(),
        day: bucket::format_date(day.date()),
    })
}

#[cfg(test)]
mod tests;
