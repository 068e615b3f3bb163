//! Streamed replay: spilled rows come back into the buffer one chunk at a time, each
//! chunk within the room the memory budget has left, never the whole spill at once.
//!
//! A chunk is loaded just before a flush drains the buffer, so every row of it is in
//! that flush's intents, and the flush's group commit names the replay cursor past it
//! (see [`crate::state::spill`]). Records are read one at a time and merged straight into
//! the buffer through the budget ([`crate::aggregate::Aggregator::merge_back`]): a row
//! the budget has no room for ends the chunk with the replay cursor before it (it is
//! still on disk, and comes back with a later chunk); only a row whose sum would leave
//! the i64 range when merged is dropped, and counted.

use crate::aggregate::{Refused, RefusedReason, Slot};
use crate::engine::Engine;
use crate::state::spill::MAX_REPLAY_CHUNK_ROWS;
use crate::state::{ErrorInfo, OutcomeLog, RecordOutcome, StateDir, WriteRecord};
use crate::test_hooks::crash_point;
use crate::vocabulary::{DropReason, Granularity};

use super::record_conversion;
use crate::telemetry::Ledger;

/// Loads the next chunk of spilled rows into the buffer: at most half the rows and
/// bytes the budget has left (the rest stays for fresh increments), and never a row the
/// budget refuses. Rows spilled by an earlier process are accepted anew (`replayed`);
/// rows this process spilled move from `spilled` back to pending. Returns the records
/// consumed.
pub(super) fn load_chunk(engine: &Engine, state: &mut StateDir, ledger: &Ledger) -> usize {
    if !state.has_unreplayed() {
        return 0;
    }
    let aggregator = engine.aggregator();
    let families = engine.families();
    let room = aggregator.room();
    let (max_rows, max_bytes) = ((room.rows / 2).min(MAX_REPLAY_CHUNK_ROWS), room.bytes / 2);
    let incarnation = state.incarnation();
    let mut credit = aggregator.no_credit();
    let (mut count, mut charged, mut overflowed, mut no_room) = (0_usize, 0_usize, 0_u64, false);
    let mut unmappable: Vec<WriteRecord> = Vec::new();
    let read = state.read_spill(|segment, mut record| {
        if count >= max_rows {
            return false;
        }
        // Rows spilled by an earlier process are accepted anew by this one; rows this
        // process spilled move from the spilled stage back to pending.
        let bring_back = |table: Granularity, sum: i128| {
            ledger.update(table, |s| {
                if segment.incarnation == incarnation {
                    s.spilled -= sum;
                } else {
                    s.replayed += sum;
                }
            });
        };
        match record_conversion::from_record(&record, families) {
            Ok((key, row)) => {
                let charge = aggregator.charge_of(&key, &row);
                if charged.saturating_add(charge) > max_bytes {
                    return false;
                }
                let (table, sum) = (owed_table(key.slot()), row.columns.sum());
                match aggregator.merge_back([(key, row)], &mut credit).pop() {
                    None => charged += charge,
                    Some(Refused {
                        reason: RefusedReason::NoRoom,
                        ..
                    }) => {
                        // Still on disk: the cursor stays before it.
                        no_room = true;
                        return false;
                    }
                    Some(Refused {
                        reason: RefusedReason::Overflow,
                        ..
                    }) => {
                        // Two spilled parts of one row whose sum would overflow.
                        bring_back(table, sum);
                        ledger.update(table, |s| s.dropped += sum);
                        ledger.count_late_drop(DropReason::Overflow, 1);
                        overflowed += 1;
                        count += 1;
                        return true;
                    }
                }
                bring_back(table, sum);
            }
            Err(error) => {
                record.outcome = RecordOutcome::Rejected;
                record.error = Some(ErrorInfo {
                    kind: "replay_unmappable".into(),
                    text: error.to_string(),
                });
                let delta: i128 = record.deltas.values().map(|d| i128::from(*d)).sum();
                let table = if record.granularity == "day" {
                    Granularity::Day
                } else {
                    Granularity::Minute
                };
                bring_back(table, delta);
                ledger.update(table, |s| s.rejected += delta);
                unmappable.push(record);
            }
        }
        count += 1;
        true
    });
    match read {
        Ok(0) => {}
        Ok(corrupt) => {
            ledger.count_corrupt_spill_lines(corrupt as u64);
            tracing::error!(
                lines = corrupt,
                "Unreadable lines in a spill segment were set aside in spill.corrupt.jsonl."
            );
        }
        Err(error) => {
            tracing::error!(%error, rows = count, "Could not read the spill; the rest of the replay waits for the next flush.");
        }
    }
    if !unmappable.is_empty() {
        let appended = state.append_now(OutcomeLog::Rejected, &unmappable);
        ledger.count_appended(OutcomeLog::Rejected, &appended);
    }
    if overflowed > 0 {
        tracing::error!(
            rows = overflowed,
            "Replayed rows would overflow their pending rows when merged; dropped."
        );
    }
    if no_room {
        tracing::debug!(
            rows = count,
            "The memory budget is full; the rest of the spill waits for a later flush."
        );
    }
    if count > 0 {
        tracing::info!(rows = count, "Replaying spilled rows.");
        crash_point("replay_loaded");
    }
    count
}

/// The one table a re-queued or replayed row is owed to.
pub(super) fn owed_table(slot: Slot) -> Granularity {
    if slot.owes(Granularity::Minute) {
        Granularity::Minute
    } else {
        Granularity::Day
    }
}
