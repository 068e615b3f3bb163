//! Streamed replay: spilled rows come back one chunk at a time, each chunk sent as a
//! group of its own, never merged into the buffer before it is sent.
//!
//! A chunk's rows are exactly the group's intents, and its group commit names the
//! replay cursor past them: from the commit on, the journal (and, once the group ends,
//! `spill.cursor`) says those rows left the spill, and each has one home after a crash,
//! like any request of a flush. Were they merged into the buffer first, a drain chunk
//! could carry part of them while the cursor passed all of them, and a kill would lose
//! the rest (they would be on disk no more, and only in memory).
//!
//! Records are read one at a time; a chunk takes at most half the rows and bytes the
//! memory budget has left (the rest stays for fresh increments), writes within one
//! flush chunk's share of the limit, and never a row the budget refuses: that row ends
//! the chunk with the read position before it (it is still on disk, and comes back with
//! a later chunk). The reading, counting and refusing are the one replay loop's
//! ([`crate::stage::replay`]): a record that no longer maps to its family is logged as
//! rejected. A record of a running total (`writer_totals`) ends the chunk too: the totals
//! stage's replay reads on from there (see `crate::totals`).
//!
//! # Refused records
//!
//! A refused record is logged in `rejected.jsonl` as it is read, and only the durable
//! cursor passing it keeps the next process from logging it again. A chunk of rows makes
//! its cursor durable at its group commit, later; so refusals never share a chunk with
//! rows: a refusal ends a chunk of rows, a row ends a run of refusals, and a run of
//! refusals is a chunk of its own, whose cursor is committed at once. A kill between a
//! chunk's read and its group commit then never finds a refusal logged behind a cursor
//! that is not durable.
//!
//! # Rows the epoch registry cannot place
//!
//! A spilled row whose epoch the registry's last read does not cover may not be sent,
//! and may not go to memory either: once the cursor passes it, a kill would lose it (an
//! acknowledged increment of the ingest log among them). So a chunk is of one kind: rows
//! to send, which a row to hold ends, or a run of rows to hold, which a row to send
//! ends. A run to hold is never taken: it stays where it is when nothing follows it, or
//! is carried whole into a segment of its own at the end of the spill, whose header names
//! the cursor past the run, so that the rows behind it flow (see [`Flusher::carry_held`]).
//!
//! [`Flusher::carry_held`]: super::Flusher

use std::collections::BTreeMap;

use crate::aggregate::{Credit, Row, RowKey, Slot};
use crate::engine::Engine;
use crate::stage::replay::{self, REFUSED_RECORD_BYTES, Taken};
use crate::state::spill::MAX_REPLAY_CHUNK_ROWS;
use crate::state::{StateDir, WriteRecord};
use crate::telemetry::Ledger;
use crate::test_hooks::crash_point;
use crate::vocabulary::Granularity;

use super::owed::OwedDay;
use super::record_conversion;

/// Spilled rows read for a group of their own.
pub(super) struct ReplayChunk {
    /// The rows, each owed to one table.
    pub(super) rows: Vec<(RowKey, Row)>,
    /// Their room in the memory budget while they are in flight.
    pub(super) credit: Credit,
    /// Their delta sums (minute, day), by where they came from: this process's own
    /// spill (`[0]`), or an earlier process's (`[1]`, accepted anew by this one).
    pub(super) sums: [[i128; Granularity::COUNT]; 2],
    /// The exact families' records read, per owed day (see [`super::owed`]).
    pub(super) owed: BTreeMap<OwedDay, u64>,
    /// A run of rows the epoch registry cannot place yet, as read: the chunk is these
    /// records, `rows` is empty, and nothing of it may be sent or kept in memory.
    pub(super) held: Vec<WriteRecord>,
}

impl ReplayChunk {
    /// Their delta sums (minute, day).
    pub(super) fn in_flight(&self) -> [i128; Granularity::COUNT] {
        Granularity::ALL.map(|g| self.sums[0][g.index()] + self.sums[1][g.index()])
    }
}

/// Puts the accounting of a chunk with `sums` back as it was before it was read (its
/// group commit failed: the rows stay on disk, to be read again).
pub(super) fn unread(sums: [[i128; Granularity::COUNT]; 2], ledger: &Ledger) {
    for g in Granularity::ALL {
        ledger.update(g, |s| {
            replay::unread(s, true, sums[0][g.index()]);
            replay::unread(s, false, sums[1][g.index()]);
        });
    }
}

/// Reads the next chunk of spilled rows (see the module doc); `None` when nothing waits
/// or nothing could be read. Rows spilled by an earlier process are accepted anew
/// (`replayed`); rows this process spilled move from `spilled` back in flight. `holds`
/// says whether the epoch registry cannot place a row yet. Without `refusals_too`, a record
/// to refuse is declined like a row of another kind (a round reads one run of refusals).
pub(super) fn read_chunk(
    engine: &Engine,
    state: &mut StateDir,
    ledger: &Ledger,
    holds: impl Fn(&RowKey) -> bool,
    refusals_too: bool,
) -> Option<ReplayChunk> {
    if !state.has_unreplayed() {
        return None;
    }
    let aggregator = engine.aggregator();
    let families = engine.families();
    let room = aggregator.room();
    let max_rows = (room.rows / 2).min(MAX_REPLAY_CHUNK_ROWS);
    let max_bytes = room.bytes / 2;
    let max_writes = aggregator.limits().flush_chunk_bytes();
    let mut chunk = ReplayChunk {
        rows: Vec::new(),
        credit: aggregator.no_credit(),
        sums: [[0; Granularity::COUNT]; 2],
        owed: BTreeMap::new(),
        held: Vec::new(),
    };
    let (mut charged, mut planned, mut no_room) = (0_usize, 0_usize, false);
    // Whether the chunk is a run of rows to hold; unknown until its first row.
    let mut holding: Option<bool> = None;
    // Refused records are held until the read ends (for `rejected.jsonl`), and records
    // of a run to hold as read: both count against the chunk's rows and bytes, like
    // rows to send (a spill a configuration change made unmappable would otherwise be
    // read whole in one chunk). Refusals are a chunk of their own (see the module doc).
    let mut refusals = 0_usize;
    let count = replay::read_chunk(state, ledger, |_, own, record| {
        let taken = chunk.rows.len() + chunk.held.len() + refusals;
        if taken >= max_rows || record.total.is_some() {
            // A running total (`writer_totals`) is the totals replay's, which takes it
            // (and what follows it) from here.
            return Taken::Declined;
        }
        match record_conversion::from_record(record, families) {
            Ok(_) if refusals > 0 => {
                // The refusals make a chunk of their own, whose cursor is committed at
                // once; the rows are read from the first one next.
                Taken::Declined
            }
            Ok((key, row)) => {
                let holds = holds(&key);
                if *holding.get_or_insert(holds) != holds {
                    // The other kind of row ends the chunk (see the module doc).
                    return Taken::Declined;
                }
                if holds {
                    // Never in memory as a row: the record is written again, as read.
                    let charge = aggregator.charge_of(&key, &row) + REFUSED_RECORD_BYTES;
                    if taken > 0 && charged.saturating_add(charge) > max_bytes {
                        no_room = true;
                        return Taken::Declined;
                    }
                    charged += charge;
                    let (table, sum) = (owed_table(key.slot()), row.columns.sum());
                    chunk.sums[usize::from(!own)][table.index()] += sum;
                    chunk.held.push(record.clone());
                    return Taken::Row { table, sum };
                }
                // Held as a drained row is: its room in the budget, and its one write
                // within a flush chunk's share of the limit.
                let charge = aggregator.charge_of(&key, &row);
                let writes = aggregator.flush_charge_of(&key, &row);
                if charged.saturating_add(charge) > max_bytes
                    || (!chunk.rows.is_empty() && planned.saturating_add(writes) > max_writes)
                    || !chunk.credit.claim(charge)
                {
                    // Still on disk: the read position stays before it.
                    no_room = true;
                    return Taken::Declined;
                }
                charged += charge;
                planned += writes;
                let (table, sum) = (owed_table(key.slot()), row.columns.sum());
                chunk.sums[usize::from(!own)][table.index()] += sum;
                if let Some(day) = OwedDay::of(families, record) {
                    *chunk.owed.entry(day).or_default() += 1;
                }
                chunk.rows.push((key, row));
                Taken::Row { table, sum }
            }
            Err(_) if holding.is_some() || !refusals_too => {
                // After rows to send (whose cursor is durable only at their group
                // commit) or a run to hold (which may be left where it is and read
                // again): the refusal ends the chunk, to be made (once) by a chunk of
                // refusals after it. (Or the round read its run of refusals already.)
                Taken::Declined
            }
            Err(error) => {
                if taken > 0 && charged.saturating_add(REFUSED_RECORD_BYTES) > max_bytes {
                    no_room = true;
                    return Taken::Declined;
                }
                charged += REFUSED_RECORD_BYTES;
                refusals += 1;
                Taken::Unmappable(error.to_string())
            }
        }
    });
    if no_room {
        tracing::debug!(
            rows = count,
            "The memory budget is full; the rest of the spill waits for a later flush."
        );
    }
    if count == 0 {
        return None;
    }
    tracing::info!(rows = count, "Replaying spilled rows.");
    crash_point("replay_loaded");
    Some(chunk)
}

/// The one table a re-queued or replayed row is owed to.
pub(super) fn owed_table(slot: Slot) -> Granularity {
    // A fresh row is never replayed: it would owe every table; counted as its minute.
    slot.owed_to()
        .map_or(Granularity::Minute, |(table, _)| table)
}
