//! Spilled totals being written again: read from their replay files, sent with their own
//! writer column and write time until they apply, and their files deleted (or, at
//! shutdown, rewritten with the rows left).
//!
//! Counting: a row spilled by an earlier process is accepted anew (`replayed`), one this
//! process spilled moves from `spilled` back to pending; either leaves pending when it
//! applies, is rejected, or is still in its file at shutdown (spilled again).

use std::path::PathBuf;
use std::sync::Arc;

use crate::aggregate::Columns;
use crate::family::Families;
use crate::sink::{TotalRow, TotalsWrite, WriteError};
use crate::state::{OutcomeLog, StateDir};
use crate::telemetry::{Ledger, Settled};

use super::book::{self, RowId};
use super::records::{self, Recorder, TotalRecord};
use super::spill::SpillFiles;

/// Where replayed rows come from, which decides how they are counted.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    /// Spilled by an earlier process: accepted anew (`replayed`).
    PreviousRun,
    /// Spilled by this process: back from `spilled` to pending.
    ThisRun,
}

/// A replay file and its records (`None` once applied or set aside).
struct ReplayFile {
    path: PathBuf,
    records: Vec<Option<TotalRecord>>,
}

/// A spilled total waiting to be written again.
struct ReplayRow {
    file: usize,
    index: usize,
    id: RowId,
    writer: Arc<str>,
    timestamp: i64,
    total: Columns,
    unconfirmed: Columns,
    failures: u32,
    not_before: u64,
}

/// The replay files of this process and their rows.
pub(super) struct Replays {
    files: Vec<ReplayFile>,
    rows: Vec<ReplayRow>,
    spill: SpillFiles,
}

/// The unconfirmed part a record counts for.
fn unconfirmed_of(record: &TotalRecord) -> i128 {
    record.unconfirmed.values().map(|v| i128::from(*v)).sum()
}

impl Replays {
    /// None yet.
    pub(super) fn new(spill: SpillFiles) -> Replays {
        Replays {
            files: Vec::new(),
            rows: Vec::new(),
            spill,
        }
    }

    /// Rows waiting to be written again.
    pub(super) fn len(&self) -> usize {
        self.rows.len()
    }

    /// Reads a replay file and queues its rows. A record today's configuration cannot
    /// map (its family gone or counting with counters, its columns changed) is logged as
    /// rejected.
    pub(super) fn load(
        &mut self,
        path: PathBuf,
        origin: Origin,
        families: &Families,
        ledger: &Ledger,
        state: &mut StateDir,
        by: &Recorder<'_>,
    ) {
        let loaded = match self.spill.load(&path) {
            Ok(loaded) => loaded,
            Err(error) => {
                tracing::error!(%error, file = %path.display(), "Could not read a totals replay file; it waits for the next start.");
                return;
            }
        };
        if loaded.corrupt_lines > 0 {
            tracing::error!(
                lines = loaded.corrupt_lines,
                "Unreadable lines of a totals spill file were set aside in totals.spill.corrupt.jsonl."
            );
        }
        let file = self.files.len();
        let mut kept = Vec::with_capacity(loaded.records.len());
        for (index, record) in loaded.records.into_iter().enumerate() {
            let unconfirmed = unconfirmed_of(&record);
            let table = records::granularity_of(&record);
            ledger.update(table, |s| match origin {
                Origin::PreviousRun => s.replayed += unconfirmed,
                Origin::ThisRun => s.spilled -= unconfirmed,
            });
            match records::from_record(&record, families) {
                Ok(replayed) => {
                    ledger.update(table, |s| s.in_flight += unconfirmed);
                    self.rows.push(ReplayRow {
                        file,
                        index,
                        id: replayed.id,
                        writer: record.writer.as_str().into(),
                        timestamp: record.timestamp,
                        total: replayed.total,
                        unconfirmed: replayed.unconfirmed,
                        failures: 0,
                        not_before: 0,
                    });
                    kept.push(Some(record));
                }
                Err(why) => {
                    let by = Recorder {
                        request_id: String::new(),
                        row: u16::try_from(index).unwrap_or(u16::MAX),
                        ..*by
                    };
                    let rejected = records::unmappable_record(&record, &why, &by);
                    let appended = state.append_now(OutcomeLog::Rejected, &[rejected]);
                    ledger.count_appended(OutcomeLog::Rejected, &appended);
                    ledger.update(table, |s| s.rejected += unconfirmed);
                    tracing::warn!(%why, family = record.family, "A spilled writer total cannot be replayed; recorded in rejected.jsonl.");
                    kept.push(None);
                }
            }
        }
        self.files.push(ReplayFile {
            path,
            records: kept,
        });
    }

    /// The writes of flush `seq`: one per row due (all at shutdown), with the row's own
    /// writer and write time; the first of each pair is the row's index.
    pub(super) fn writes(&self, seq: u64, last: bool) -> Vec<(usize, TotalsWrite)> {
        self.rows
            .iter()
            .enumerate()
            .filter(|(_, row)| last || row.not_before <= seq)
            .map(|(index, row)| {
                (
                    index,
                    TotalsWrite {
                        family: row.id.family,
                        table: row.id.table,
                        series: row.id.series.clone(),
                        writer: row.writer.clone(),
                        timestamp: row.timestamp,
                        rows: vec![TotalRow {
                            bucket: row.id.bucket,
                            totals: row.total.clone(),
                        }],
                    },
                )
            })
            .collect()
    }

    /// The part of row `index`'s total not known applied.
    pub(super) fn unconfirmed(&self, index: usize) -> &Columns {
        &self.rows[index].unconfirmed
    }

    /// Row `index` applied.
    pub(super) fn applied(&mut self, index: usize, ledger: &Ledger) {
        self.settled(index, ledger, |s, u| s.applied += u);
    }

    /// Row `index` was refused for good: its unconfirmed part is logged as rejected.
    pub(super) fn rejected(
        &mut self,
        index: usize,
        error: &WriteError,
        families: &Families,
        ledger: &Ledger,
        state: &mut StateDir,
        by: &Recorder<'_>,
    ) {
        let row = &self.rows[index];
        let record = records::rejected_record(
            &row.id,
            families.get(row.id.family),
            &row.unconfirmed,
            error,
            by,
        );
        let appended = state.append_now(OutcomeLog::Rejected, &[record]);
        ledger.count_appended(OutcomeLog::Rejected, &appended);
        self.settled(index, ledger, |s, u| s.rejected += u);
    }

    /// Row `index` did not apply: it backs off like a held row.
    pub(super) fn failed(&mut self, index: usize, seq: u64) {
        let row = &mut self.rows[index];
        row.failures = row.failures.saturating_add(1);
        row.not_before = book::next_attempt(row.failures, seq);
    }

    fn settled(&mut self, index: usize, ledger: &Ledger, stage: impl Fn(&mut Settled, i128)) {
        let row = &self.rows[index];
        let unconfirmed = row.unconfirmed.sum();
        ledger.update(row.id.table, |s| {
            stage(s, unconfirmed);
            s.in_flight -= unconfirmed;
        });
        self.files[row.file].records[row.index] = None;
    }

    /// After a flush: deletes the files whose rows all settled; at shutdown, rewrites the
    /// others with the rows left, which count as spilled again. Forgets settled rows.
    pub(super) fn finish(&mut self, last: bool, ledger: &Ledger) {
        let mut keep = vec![false; self.files.len()];
        for (i, file) in self.files.iter().enumerate() {
            let left: Vec<TotalRecord> = file.records.iter().flatten().cloned().collect();
            if left.is_empty() {
                if let Err(error) = self.spill.remove(&file.path) {
                    tracing::warn!(%error, file = %file.path.display(), "Could not delete a replayed totals file; the next start replays it again (harmlessly).");
                }
            } else if last {
                for record in &left {
                    let unconfirmed = unconfirmed_of(record);
                    ledger.update(records::granularity_of(record), |s| {
                        s.spilled += unconfirmed;
                        s.in_flight -= unconfirmed;
                    });
                }
                if let Err(error) = self.spill.rewrite(&file.path, &left) {
                    tracing::warn!(%error, file = %file.path.display(), "Could not rewrite a totals replay file; the next start replays all of it again (harmlessly).");
                }
            } else {
                keep[i] = true;
            }
        }
        let mut renumber = vec![None; self.files.len()];
        let mut kept = Vec::new();
        for (i, file) in std::mem::take(&mut self.files).into_iter().enumerate() {
            if keep[i] {
                renumber[i] = Some(kept.len());
                kept.push(file);
            }
        }
        self.files = kept;
        let files = &self.files;
        self.rows.retain_mut(|row| match renumber[row.file] {
            Some(file) if files[file].records[row.index].is_some() => {
                row.file = file;
                true
            }
            _ => false,
        });
    }
}
