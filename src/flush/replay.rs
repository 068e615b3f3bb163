//! Streamed replay: spilled rows come back into the buffer one chunk at a time, each
//! chunk sized to the room the memory budget has left, never the whole spill at once.
//!
//! A chunk is loaded just before a flush drains the buffer, so every row of it is in
//! that flush's intents, and the flush's group commit names the replay cursor past it
//! (see [`crate::state::spill`]).

use crate::aggregate::{self, Slot};
use crate::engine::Engine;
use crate::state::{ErrorInfo, OutcomeLog, RecordOutcome, StateDir};
use crate::test_hooks::crash_point;
use crate::vocabulary::{DropReason, Granularity};

use super::record_conversion;
use crate::telemetry::Ledger;

/// Most rows one chunk brings back, whatever the budget allows: a flush carrying a chunk
/// should take seconds, not minutes.
pub(super) const MAX_CHUNK_ROWS: usize = 100_000;

/// Loads the next chunk of spilled rows into the buffer: at most half the rows and
/// bytes the budget has left (the rest stays for fresh increments). Rows spilled by an
/// earlier process are accepted anew (`replayed`); rows this process spilled move from
/// `spilled` back to pending. Returns the rows loaded.
pub(super) fn load_chunk(engine: &Engine, state: &mut StateDir, ledger: &Ledger) -> usize {
    if !state.has_unreplayed() {
        return 0;
    }
    let aggregator = engine.aggregator();
    let limits = aggregator.limits();
    let room_rows = limits
        .max_pending_rows
        .saturating_sub(aggregator.pending_rows_estimate())
        / 2;
    let room_bytes = limits
        .max_pending_bytes
        .saturating_sub(aggregator.pending_bytes())
        / 2;
    let max_rows = room_rows.min(MAX_CHUNK_ROWS);
    let mut bytes = 0_usize;
    let loaded = state.load_spill(|rows, record| {
        let key: usize = record.key.values().map(|v| v.len() + 1).sum();
        let cost = aggregate::estimated_row_bytes(
            key,
            &aggregate::Columns::zeroed(record.deltas.len().max(1)),
        );
        if rows >= max_rows || bytes + cost > room_bytes {
            return false;
        }
        bytes += cost;
        true
    });
    let chunk = match loaded {
        Ok(chunk) => chunk,
        Err(error) => {
            tracing::error!(%error, "Could not read the spill; replay waits for the next flush.");
            return 0;
        }
    };
    if !chunk.corrupt.is_empty() {
        ledger.count_corrupt_spill_lines(chunk.corrupt.len() as u64);
        tracing::error!(
            lines = chunk.corrupt.len(),
            "Unreadable lines in a spill segment were set aside in spill.corrupt.jsonl."
        );
    }
    let incarnation = state.incarnation();
    let count = chunk.records.len();
    for (segment, record) in chunk.records {
        let this_run = segment.incarnation == incarnation;
        // Rows spilled by an earlier process are accepted anew by this one; rows this
        // process spilled move from the spilled stage back to pending.
        let bring_back = |table: Granularity, sum: i128| {
            ledger.update(table, |s| {
                if this_run {
                    s.spilled -= sum;
                } else {
                    s.replayed += sum;
                }
            });
        };
        match record_conversion::from_record(&record, engine.families()) {
            Ok((key, row)) => {
                let table = owed_table(key.slot());
                let sum = row.columns.sum();
                bring_back(table, sum);
                if !aggregator.merge_back([(key, row)]).is_empty() {
                    // Two spilled parts of one row whose sum would overflow.
                    ledger.update(table, |s| s.dropped += sum);
                    ledger.count_late_drop(DropReason::Overflow, 1);
                    tracing::error!(
                        "A replayed row would overflow its pending row when merged; dropped."
                    );
                }
            }
            Err(error) => {
                let mut record = record;
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
                let appended =
                    state.append_now(OutcomeLog::Rejected, std::slice::from_ref(&record));
                ledger.count_appended(OutcomeLog::Rejected, &appended);
                bring_back(table, delta);
                ledger.update(table, |s| s.rejected += delta);
            }
        }
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
