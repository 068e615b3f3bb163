//! Spilled totals being written again: read from the spill segments through the state
//! directory's one replay cursor, a chunk at a time, each chunk written and settled
//! within one flush.
//!
//! Reading: through the one replay loop ([`crate::stage::replay`], which counts what it
//! reads and refuses what no longer maps), the records of running totals (those with a
//! [`crate::state::TotalOf`]) from the cursor on, up to the first record of another kind
//! (the counter replay's to take) or the end of the chunk's room. Refused records are a
//! chunk of their own, consumed at once (see [`Replays::load_chunk`]). A chunk is at most half the room the memory budget
//! has left and the flush's share of `limits.max_pending_bytes`, each row charged to the
//! budget while it is held ([`crate::aggregate::Aggregator`]), like a running total; a
//! row the budget has no room for ends the chunk, still on disk.
//!
//! Writing: every row of the chunk is a write of the flush's totals group, whose commit
//! names the cursor past the chunk. After the flush's writes settle, the rows that did
//! not apply (and were not refused) are carried into the flush's totals segment, written
//! again with the writer column and write time they had, and that segment's header names
//! the same cursor; the group's end then makes the cursor durable. So no chunk outlives
//! its flush in memory, and a kill at any point leaves each row in one place: before the
//! commit, on disk behind the cursor; after it, in the group's intents (recovery spills
//! those not known applied) or the flush's segment. A carried chunk needs no room under
//! `state.max_spill_bytes` (its rows are on disk already, see
//! `Spill::write_segment_carrying`); only when the segment cannot be written is it not
//! carried: the cursor stays before the chunk, which is read again later, whole (its
//! applied rows re-sent, harmlessly: a total is absolute; its refused rows refused
//! again). So a refused row's record waits for `rejected.jsonl` until its chunk is
//! known consumed ([`Replays::finish`]): logged once, by the read that consumes it.
//!
//! Counting: a row counts from when it is read (the loop's). One spilled by an earlier
//! process is accepted anew (`replayed`), one this process spilled moves from `spilled`
//! back to pending; either leaves pending when it applies, is rejected, or is carried
//! (spilled again). Rows not read yet stay where they were: on disk, spilled (this process's) or
//! not yet accepted (an earlier one's). A chunk not consumed counts as not read, its
//! applied and rejected rows too: the read again counts each row once.

use std::sync::Arc;

use crate::aggregate::{Aggregator, Columns};
use crate::family::Families;
use crate::sink::{TotalRow, TotalsWrite, WriteError};
use crate::stage::replay::{self, Taken};
use crate::state::spill::MAX_REPLAY_CHUNK_ROWS;
use crate::state::{Cursor, StateDir, WriteRecord};
use crate::telemetry::{Ledger, Settled};
use crate::vocabulary::Granularity;

use super::book::RowId;
use super::records::{self, Recorder, Replayed, SpilledRow};

/// A spilled total read back, waiting to be written again.
struct ReplayRow {
    id: RowId,
    writer: Arc<str>,
    timestamp: i64,
    total: Columns,
    unconfirmed: Columns,
    /// Spilled by this process (its segment's incarnation is this one).
    own: bool,
    /// Bytes charged to the memory budget while it is held.
    charge: usize,
    /// Applied or rejected (`None`: neither yet).
    settled: Option<SettledAs>,
    /// The request it was written in, and why it did not apply (for its carried record).
    failed: Option<(u32, Option<WriteError>)>,
}

/// How a replayed row settled.
enum SettledAs {
    Applied,
    /// Refused for good: its record for `rejected.jsonl`, held until the chunk is known
    /// consumed (see [`Replays::finish`]).
    Rejected(Box<WriteRecord>),
}

/// The chunk of spilled totals of the flush in progress.
#[derive(Default)]
pub(super) struct Replays {
    rows: Vec<ReplayRow>,
    /// The replay cursor past the chunk (what the flush's group consumes).
    read_to: Option<Cursor>,
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

    /// Takes room for a record kept as read until the read ends (refused, for
    /// `rejected.jsonl`) from the chunk, not the budget; false when the chunk has none
    /// and took something already (the first record always fits: progress).
    fn take_kept(&mut self, charge: usize, taken_any: bool) -> bool {
        if taken_any && (self.rows == 0 || charge > self.bytes) {
            return false;
        }
        self.rows = self.rows.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(charge);
        true
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

/// Moves a row's unconfirmed part back to where it was before it was read: spilled
/// (this process's), or not yet accepted (an earlier one's).
fn unread(ledger: &Ledger, table: Granularity, own: bool, unconfirmed: i128) {
    ledger.update(table, |s| {
        replay::unread(s, own, unconfirmed);
        s.in_flight -= unconfirmed;
    });
}

impl Replays {
    /// Whether a chunk is in hand.
    pub(super) fn has_rows(&self) -> bool {
        !self.rows.is_empty()
    }

    /// The cursor past the chunk in hand (`None` without one).
    pub(super) fn read_to(&self) -> Option<Cursor> {
        self.read_to
    }

    /// Reads the next chunk of spilled totals from the replay cursor (see the module
    /// doc). A record today's configuration cannot map (its family gone or counting
    /// with counters, its columns changed) is logged as rejected as it is read, and
    /// only the durable cursor passing it keeps the next process from logging it again:
    /// so refusals never share a chunk with rows (whose cursor is durable only once
    /// their flush's group ends). A run of refusals is a chunk of its own, consumed at
    /// once; the rows behind it are read next, in the same call (a second run of
    /// refusals is not: a call reads one chunk's room of them).
    pub(super) fn load_chunk(&mut self, reading: &Reading<'_>, state: &mut StateDir) {
        debug_assert!(self.rows.is_empty(), "a chunk never outlives its flush");
        if self.load_one(reading, state, true) {
            self.load_one(reading, state, false);
        }
    }

    /// Reads one chunk (see [`Replays::load_chunk`]), refusing records only if
    /// `refusals_too` (otherwise the first to refuse ends it): whether it was a run of
    /// refusals, consumed at once.
    fn load_one(
        &mut self,
        reading: &Reading<'_>,
        state: &mut StateDir,
        refusals_too: bool,
    ) -> bool {
        let mut chunk = ChunkRoom::of(reading.aggregator);
        let rows = &mut self.rows;
        // Refused records are held until the read ends: they take the chunk's room too,
        // or a spill a configuration change made unmappable would be read whole.
        let mut refusals = 0_usize;
        replay::read_chunk(state, reading.ledger, |_, own, record| {
            let Some(total) = &record.total else {
                // Another kind of write: its replay takes it from here.
                return Taken::Declined;
            };
            match records::from_record(record, reading.families) {
                // The refusals are a chunk of their own, consumed at once: the rows are
                // read from the first one next.
                Ok(_) if refusals > 0 => Taken::Declined,
                // A refusal ends a chunk of rows (see `load_chunk`).
                Err(_) if !rows.is_empty() || !refusals_too => Taken::Declined,
                Ok(replayed) => {
                    let charge = charge_of(&replayed, &total.column);
                    if !chunk.take(charge, reading.aggregator) {
                        return Taken::Declined;
                    }
                    let (table, sum) = (replayed.id.table, replayed.unconfirmed.sum());
                    rows.push(ReplayRow {
                        id: replayed.id,
                        writer: total.column.as_str().into(),
                        timestamp: total.timestamp,
                        total: replayed.total,
                        unconfirmed: replayed.unconfirmed,
                        own,
                        charge,
                        settled: None,
                        failed: None,
                    });
                    Taken::Row { table, sum }
                }
                Err(why) => {
                    if !chunk.take_kept(replay::REFUSED_RECORD_BYTES, refusals > 0) {
                        return Taken::Declined;
                    }
                    refusals += 1;
                    Taken::Unmappable(why.to_string())
                }
            }
        });
        let loaded = state.replay_loaded();
        if self.rows.is_empty() {
            // Nothing to write (refused records, unreadable lines, or nothing read):
            // consumed now.
            if let Err(error) = state.commit_replay(loaded) {
                tracing::error!(%error, "Could not record the replay cursor.");
            }
            return refusals > 0;
        }
        self.read_to = loaded;
        tracing::info!(rows = self.rows.len(), "Replaying spilled writer totals.");
        false
    }

    /// The writes of the chunk: one per row, with the row's own writer and write time;
    /// the first of each pair is the row's index.
    pub(super) fn writes(&self) -> Vec<(usize, TotalsWrite)> {
        self.rows
            .iter()
            .enumerate()
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
        self.settle(index, ledger, SettledAs::Applied, |s, u| s.applied += u);
    }

    /// Row `index` was refused for good: its unconfirmed part counts as rejected, and its
    /// record waits for `rejected.jsonl` until the chunk is known consumed (see
    /// [`Replays::finish`]).
    pub(super) fn rejected(&mut self, index: usize, error: &WriteError, reading: &Reading<'_>) {
        let row = &self.rows[index];
        let record = records::rejected_record(
            &row.id,
            reading.families.get(row.id.family),
            &row.unconfirmed,
            error,
            reading.by,
        );
        let settled = SettledAs::Rejected(Box::new(record));
        self.settle(index, reading.ledger, settled, |s, u| s.rejected += u);
    }

    /// Row `index`, written in request `request`, did not apply: it is carried.
    pub(super) fn failed(&mut self, index: usize, request: u32, error: Option<WriteError>) {
        self.rows[index].failed = Some((request, error));
    }

    fn settle(
        &mut self,
        index: usize,
        ledger: &Ledger,
        settled: SettledAs,
        stage: impl Fn(&mut Settled, i128),
    ) {
        let row = &mut self.rows[index];
        let unconfirmed = row.unconfirmed.sum();
        ledger.update(row.id.table, |s| {
            stage(s, unconfirmed);
            s.in_flight -= unconfirmed;
        });
        row.settled = Some(settled);
    }

    /// The record lines of the rows that did not settle, to carry into the flush's
    /// totals segment (each under the request it was written in, `request_id` names it,
    /// row 0), serialized one record at a time, and how many. The chunk is kept until
    /// [`Replays::finish`].
    pub(super) fn left(
        &self,
        families: &Families,
        by: &Recorder<'_>,
        request_id: impl Fn(u32) -> String,
    ) -> std::io::Result<(Vec<u8>, usize)> {
        let mut lines = Vec::new();
        let mut count = 0;
        for row in self.rows.iter().filter(|row| row.settled.is_none()) {
            let (request_id, error) = match &row.failed {
                Some((request, error)) => (request_id(*request), error.as_ref()),
                None => (by.request_id.clone(), None),
            };
            let record = records::total_record(
                &SpilledRow {
                    id: &row.id,
                    writer: &row.writer,
                    total: &row.total,
                    unconfirmed: &row.unconfirmed,
                    timestamp: row.timestamp,
                    error,
                },
                families.get(row.id.family),
                &Recorder {
                    request_id,
                    row: 0,
                    ..*by
                },
            );
            serde_json::to_writer(&mut lines, &record).map_err(std::io::Error::other)?;
            lines.push(b'\n');
            count += 1;
        }
        Ok((lines, count))
    }

    /// Ends the chunk, `consumed` (every row settled or carried into the flush's
    /// segment) or not; returns the records of the rows refused for good, for
    /// `rejected.jsonl`: only a consumed chunk has any. Consumed, the rows left unsettled
    /// count as spilled again. Not consumed, the chunk stays on disk behind the cursor and
    /// is read again, whole: each of its rows, settled or not, counts as before it was
    /// read, so that the read again counts it once, and a refused row's record is
    /// dropped, logged when the read again refuses it (an applied row is written again,
    /// harmlessly: a total is absolute). `rewind` puts the read position back (a chunk
    /// not consumed). Every row's room goes back to the budget.
    pub(super) fn finish(
        &mut self,
        consumed: bool,
        rewind: Option<&mut StateDir>,
        ledger: &Ledger,
        aggregator: &Aggregator,
    ) -> Vec<WriteRecord> {
        let mut refused = Vec::new();
        for row in self.rows.drain(..) {
            aggregator.release_held(1, row.charge);
            let unconfirmed = row.unconfirmed.sum();
            match (row.settled, consumed) {
                (Some(SettledAs::Rejected(record)), true) => refused.push(*record),
                (Some(_), true) => {}
                (None, true) => ledger.update(row.id.table, |s| {
                    s.spilled += unconfirmed;
                    s.in_flight -= unconfirmed;
                }),
                (Some(settled), false) => ledger.update(row.id.table, |s| {
                    match settled {
                        SettledAs::Applied => s.applied -= unconfirmed,
                        SettledAs::Rejected(_) => s.rejected -= unconfirmed,
                    }
                    replay::unread(s, row.own, unconfirmed);
                }),
                (None, false) => unread(ledger, row.id.table, row.own, unconfirmed),
            }
        }
        if let Some(state) = rewind {
            state.rewind_replay();
        }
        self.read_to = None;
        refused
    }

    /// Gives the room of every row still held back (the replay is going away).
    pub(super) fn release_all(&mut self, aggregator: &Aggregator) {
        for row in self.rows.drain(..) {
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
