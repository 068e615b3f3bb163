//! Spilled totals being written again: streamed from their replay files one chunk at a
//! time, sent with their own writer column and write time until they apply, and their
//! files deleted (or, at shutdown, rewritten with the rows left).
//!
//! Memory: a replay file may hold far more rows than memory may (a long outage spills
//! every closed row), so it is never loaded whole. A chunk is read only once every row
//! of the one before it applied (or was rejected): at most half the room the memory
//! budget has left, and at most the flush's share of `limits.max_pending_bytes`, each row
//! charged to the budget while it is held ([`crate::aggregate::Aggregator`]), like a
//! running total. While the store fails, the chunk in hand backs off and nothing more is
//! read. A row the budget has no room for ends the chunk; it stays on disk for the next.
//!
//! Counting: a row counts from when it is read. One spilled by an earlier process is
//! accepted anew (`replayed`), one this process spilled moves from `spilled` back to
//! pending; either leaves pending when it applies, is rejected, or is still in its file
//! at shutdown (spilled again). Rows not read yet stay where they were: on disk, spilled
//! (this process's) or not yet accepted (an earlier one's).

use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use crate::aggregate::{Aggregator, Columns};
use crate::family::Families;
use crate::sink::{TotalRow, TotalsWrite, WriteError};
use crate::state::spill::MAX_REPLAY_CHUNK_ROWS;
use crate::state::{OutcomeLog, StateDir};
use crate::telemetry::{Ledger, Settled};

use super::book::{self, RowId};
use super::records::{self, Recorder, Replayed, TotalRecord};
use super::spill::{ReadRecord, SpillFiles};

/// Where replayed rows come from, which decides how they are counted.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    /// Spilled by an earlier process: accepted anew (`replayed`).
    PreviousRun,
    /// Spilled by this process: back from `spilled` to pending.
    ThisRun,
}

/// A replay file and how far it has been read.
struct ReplayFile {
    /// Names the file in its rows (files leave the queue, so not an index).
    id: u64,
    path: PathBuf,
    origin: Origin,
    /// Byte offset of the first line not read yet.
    read_to: u64,
    /// Whether every line has been read.
    read_all: bool,
}

/// A spilled total read back, waiting to be written again.
struct ReplayRow {
    /// Its file's id.
    file: u64,
    /// Its line in the file: kept there at shutdown if it has not applied.
    line: Range<u64>,
    id: RowId,
    writer: Arc<str>,
    timestamp: i64,
    total: Columns,
    unconfirmed: Columns,
    failures: u32,
    not_before: u64,
    /// Bytes charged to the memory budget while it is held.
    charge: usize,
    /// Applied or rejected during this flush: forgotten at its end.
    settled: bool,
}

/// The replay files of this process, oldest first, and the rows read from them.
pub(super) struct Replays {
    files: Vec<ReplayFile>,
    rows: Vec<ReplayRow>,
    spill: SpillFiles,
    next_file_id: u64,
}

/// What one chunk may still take.
struct ChunkRoom {
    rows: usize,
    bytes: usize,
}

impl ChunkRoom {
    /// Half the room the budget has left (the rest stays for fresh increments), within
    /// [`MAX_REPLAY_CHUNK_ROWS`] and the flush's share of the byte limit (the flush copies each
    /// row into its write).
    fn of(aggregator: &Aggregator) -> ChunkRoom {
        let room = aggregator.room();
        ChunkRoom {
            rows: (room.rows / 2).min(MAX_REPLAY_CHUNK_ROWS),
            bytes: (room.bytes / 2).min(aggregator.limits().flush_chunk_bytes()),
        }
    }

    /// Takes room for a row of `charge` bytes from the chunk and the budget; false, with
    /// nothing taken, when either has none.
    fn take(&mut self, charge: usize, aggregator: &Aggregator) -> bool {
        if self.rows == 0 || charge > self.bytes || !aggregator.reserve_replayed(charge) {
            return false;
        }
        self.rows -= 1;
        self.bytes -= charge;
        true
    }
}

/// Why reading a file stopped.
enum Stopped {
    /// Its last line was read: the chunk goes on with the next file.
    EndOfFile,
    /// The chunk is full, or the file could not be read: the chunk ends here.
    ChunkEnds,
}

/// The unconfirmed part a record counts for.
fn unconfirmed_of(record: &TotalRecord) -> i128 {
    record.unconfirmed.values().map(|v| i128::from(*v)).sum()
}

/// What a read row costs while it is held: the row, and the write a flush plans from it
/// (its series and totals copied, its writer shared).
fn charge_of(replayed: &Replayed, writer: &str) -> usize {
    size_of::<ReplayRow>()
        + size_of::<TotalsWrite>()
        + size_of::<TotalRow>()
        + 2 * replayed.id.series.len()
        + writer.len()
        + 2 * replayed.total.heap_bytes()
        + replayed.unconfirmed.heap_bytes()
}

impl Replays {
    /// None yet.
    pub(super) fn new(spill: SpillFiles) -> Replays {
        Replays {
            files: Vec::new(),
            rows: Vec::new(),
            spill,
            next_file_id: 0,
        }
    }

    /// Whether replay files wait, read or not.
    pub(super) fn has_work(&self) -> bool {
        !self.files.is_empty()
    }

    /// Replay files waiting.
    pub(super) fn files(&self) -> usize {
        self.files.len()
    }

    /// Queues a replay file; its rows are read chunk by chunk ([`Replays::load_chunk`]).
    pub(super) fn add_file(&mut self, path: PathBuf, origin: Origin) {
        self.files.push(ReplayFile {
            id: self.next_file_id,
            path,
            origin,
            read_to: 0,
            read_all: false,
        });
        self.next_file_id += 1;
    }

    /// Reads the next chunk of rows, when every row of the last one has settled. A record
    /// today's configuration cannot map (its family gone or counting with counters, its
    /// columns changed) is logged as rejected.
    pub(super) fn load_chunk(&mut self, reading: &Reading<'_>, state: &mut StateDir) {
        if !self.rows.is_empty() {
            return;
        }
        let mut chunk = ChunkRoom::of(reading.aggregator);
        for index in 0..self.files.len() {
            if self.files[index].read_all {
                continue;
            }
            if let Stopped::ChunkEnds = self.read_file(index, &mut chunk, reading, state) {
                break;
            }
        }
    }

    /// Reads rows of file `index` into the chunk until it is full or the file ends.
    fn read_file(
        &mut self,
        index: usize,
        chunk: &mut ChunkRoom,
        reading: &Reading<'_>,
        state: &mut StateDir,
    ) -> Stopped {
        let file = &self.files[index];
        let mut reader = match self.spill.read_from(&file.path, file.read_to) {
            Ok(reader) => reader,
            Err(error) => {
                tracing::error!(%error, file = %file.path.display(), "Could not read a totals replay file; it waits for a later flush.");
                return Stopped::ChunkEnds;
            }
        };
        let stopped = loop {
            let read = match reader.next_record() {
                Ok(Some(read)) => read,
                Ok(None) => {
                    self.files[index].read_all = true;
                    break Stopped::EndOfFile;
                }
                Err(error) => {
                    tracing::error!(%error, file = %self.files[index].path.display(), "Could not read a totals replay file; the rest waits for a later flush.");
                    break Stopped::ChunkEnds;
                }
            };
            let end = read.span.end;
            if !self.take_record(index, read, chunk, reading, state) {
                break Stopped::ChunkEnds;
            }
            self.files[index].read_to = end;
        };
        match reader.finish() {
            Ok(0) => {}
            Ok(lines) => tracing::error!(
                lines,
                "Unreadable lines of a totals spill file were set aside in totals.spill.corrupt.jsonl."
            ),
            Err(error) => {
                tracing::error!(%error, "Could not set aside the unreadable lines of a totals spill file.")
            }
        }
        stopped
    }

    /// Takes one record of file `index`: a row to write again (false, nothing taken,
    /// when the chunk has no room for it), or a rejected one.
    fn take_record(
        &mut self,
        index: usize,
        read: ReadRecord,
        chunk: &mut ChunkRoom,
        reading: &Reading<'_>,
        state: &mut StateDir,
    ) -> bool {
        let ReadRecord { record, span } = read;
        let unconfirmed = unconfirmed_of(&record);
        let table = records::granularity_of(&record);
        let file = &self.files[index];
        let origin = file.origin;
        let bring_back = |ledger: &Ledger| {
            ledger.update(table, |s| match origin {
                Origin::PreviousRun => s.replayed += unconfirmed,
                Origin::ThisRun => s.spilled -= unconfirmed,
            });
        };
        match records::from_record(&record, reading.families) {
            Ok(replayed) => {
                let charge = charge_of(&replayed, &record.writer);
                if !chunk.take(charge, reading.aggregator) {
                    return false;
                }
                bring_back(reading.ledger);
                reading.ledger.update(table, |s| s.in_flight += unconfirmed);
                self.rows.push(ReplayRow {
                    file: file.id,
                    line: span,
                    id: replayed.id,
                    writer: record.writer.as_str().into(),
                    timestamp: record.timestamp,
                    total: replayed.total,
                    unconfirmed: replayed.unconfirmed,
                    failures: 0,
                    not_before: 0,
                    charge,
                    settled: false,
                });
            }
            Err(why) => {
                bring_back(reading.ledger);
                let by = Recorder {
                    request_id: String::new(),
                    row: 0,
                    ..*reading.by
                };
                let rejected = records::unmappable_record(&record, &why, &by);
                let appended = state.append_now(OutcomeLog::Rejected, &[rejected]);
                reading
                    .ledger
                    .count_appended(OutcomeLog::Rejected, &appended);
                reading.ledger.update(table, |s| s.rejected += unconfirmed);
                tracing::warn!(%why, family = record.family, "A spilled writer total cannot be replayed; recorded in rejected.jsonl.");
            }
        }
        true
    }

    /// The writes of flush `seq`: one per row due (all at shutdown), with the row's own
    /// writer and write time; the first of each pair is the row's index.
    pub(super) fn writes(&self, seq: u64, last: bool) -> Vec<(usize, TotalsWrite)> {
        self.rows
            .iter()
            .enumerate()
            .filter(|(_, row)| !row.settled && (last || row.not_before <= seq))
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
    pub(super) fn applied(&mut self, index: usize, ledger: &Ledger, aggregator: &Aggregator) {
        self.settled(index, ledger, aggregator, |s, u| s.applied += u);
    }

    /// Row `index` was refused for good: its unconfirmed part is logged as rejected.
    pub(super) fn rejected(
        &mut self,
        index: usize,
        error: &WriteError,
        reading: &Reading<'_>,
        state: &mut StateDir,
    ) {
        let row = &self.rows[index];
        let record = records::rejected_record(
            &row.id,
            reading.families.get(row.id.family),
            &row.unconfirmed,
            error,
            reading.by,
        );
        let appended = state.append_now(OutcomeLog::Rejected, &[record]);
        reading
            .ledger
            .count_appended(OutcomeLog::Rejected, &appended);
        self.settled(index, reading.ledger, reading.aggregator, |s, u| {
            s.rejected += u
        });
    }

    /// Row `index` did not apply: it backs off like a held row.
    pub(super) fn failed(&mut self, index: usize, seq: u64) {
        let row = &mut self.rows[index];
        row.failures = row.failures.saturating_add(1);
        row.not_before = book::next_attempt(row.failures, seq);
    }

    fn settled(
        &mut self,
        index: usize,
        ledger: &Ledger,
        aggregator: &Aggregator,
        stage: impl Fn(&mut Settled, i128),
    ) {
        let row = &mut self.rows[index];
        let unconfirmed = row.unconfirmed.sum();
        ledger.update(row.id.table, |s| {
            stage(s, unconfirmed);
            s.in_flight -= unconfirmed;
        });
        aggregator.release_held(1, row.charge);
        row.settled = true;
    }

    /// After a flush: forgets settled rows and deletes the files read to their end whose
    /// rows all settled. At shutdown, rewrites every file read in part with the rows left
    /// (read and not applied, which count as spilled again, and not read yet).
    pub(super) fn finish(&mut self, last: bool, ledger: &Ledger, aggregator: &Aggregator) {
        let mut kept = Vec::with_capacity(self.files.len());
        for mut file in std::mem::take(&mut self.files) {
            let waiting = self.rows.iter().any(|r| r.file == file.id && !r.settled);
            if file.read_all && !waiting {
                if let Err(error) = self.spill.remove(&file.path) {
                    tracing::warn!(%error, file = %file.path.display(), "Could not delete a replayed totals file; the next start replays it again (harmlessly).");
                }
                continue;
            }
            if last && file.read_to > 0 {
                self.keep_what_is_left(&mut file, ledger, aggregator);
            }
            kept.push(file);
        }
        self.files = kept;
        self.rows.retain(|row| !row.settled);
    }

    /// Rewrites `file` at shutdown with its rows not applied and its lines not read: the
    /// rows leave memory, spilled again, and the file is read from its start next time.
    fn keep_what_is_left(
        &mut self,
        file: &mut ReplayFile,
        ledger: &Ledger,
        aggregator: &Aggregator,
    ) {
        let mut spans = Vec::new();
        for row in self
            .rows
            .iter_mut()
            .filter(|r| r.file == file.id && !r.settled)
        {
            let unconfirmed = row.unconfirmed.sum();
            ledger.update(row.id.table, |s| {
                s.spilled += unconfirmed;
                s.in_flight -= unconfirmed;
            });
            aggregator.release_held(1, row.charge);
            row.settled = true;
            spans.push(row.line.clone());
        }
        if let Err(error) = self.spill.keep_only(&file.path, &spans, file.read_to) {
            tracing::warn!(%error, file = %file.path.display(), "Could not rewrite a totals replay file; the next start replays all of it again (harmlessly).");
        }
        file.read_to = 0;
        file.read_all = false;
    }

    /// Gives the room of every row still held back (the replay is going away).
    pub(super) fn release_all(&mut self, aggregator: &Aggregator) {
        for row in self.rows.drain(..).filter(|r| !r.settled) {
            aggregator.release_held(1, row.charge);
        }
    }
}

/// What reading and settling replayed rows consult: the budget, the families, the
/// ledger, and who records.
pub(super) struct Reading<'a> {
    pub(super) aggregator: &'a Aggregator,
    pub(super) families: &'a Families,
    pub(super) ledger: &'a Ledger,
    pub(super) by: &'a Recorder<'a>,
}
