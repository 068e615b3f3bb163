//! Bringing spilled rows back into the buffer, at start and after an outage.

use crate::aggregate::Slot;
use crate::engine::Engine;
use crate::state::{ErrorInfo, OutcomeLog, RecordOutcome, Recovered, StateDir};
use crate::vocabulary::{DropReason, Granularity};

use super::record_conversion;
use crate::telemetry::Ledger;

/// Where replayed rows come from, which decides how they are counted.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    /// Spilled by an earlier process: counted as accepted again (`replayed`).
    PreviousRun,
    /// Spilled by this process: moved from `spilled` back to `pending`.
    ThisRun,
}

/// Merges spilled rows back into the buffer, counting them by where they come from.
pub(super) fn replay(
    engine: &Engine,
    state: &mut StateDir,
    ledger: &Ledger,
    recovered: Recovered,
    origin: Origin,
) {
    if recovered.interrupted > 0 {
        tracing::warn!(
            rows = recovered.interrupted,
            "The previous run stopped while sending replayed rows; they were moved to unknown.jsonl."
        );
    }
    if recovered.corrupt_lines > 0 {
        tracing::error!(
            lines = recovered.corrupt_lines,
            "Unreadable lines in the spill file were set aside in spill.corrupt.jsonl."
        );
    }
    // Rows spilled by an earlier process are accepted anew by this one; rows this
    // process spilled move from the spilled stage back to pending.
    let bring_back = |ledger: &Ledger, table: Granularity, sum: i128| {
        ledger.update(table, |s| match origin {
            Origin::PreviousRun => s.replayed += sum,
            Origin::ThisRun => s.spilled -= sum,
        });
    };
    let mut rows = Vec::new();
    for record in recovered.replay {
        match record_conversion::from_record(&record, engine.families()) {
            Ok((key, row)) => {
                bring_back(ledger, owed_table(key.slot()), row.columns.sum());
                rows.push((key, row));
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
                let appended = state.append(OutcomeLog::Rejected, std::slice::from_ref(&record));
                ledger.count_appended(OutcomeLog::Rejected, &appended);
                bring_back(ledger, table, delta);
                ledger.update(table, |s| s.rejected += delta);
            }
        }
    }
    if !rows.is_empty() {
        tracing::info!(rows = rows.len(), "Replaying spilled rows.");
    }
    // The replay reads the spill whole, so it is charged to the budget past its limits.
    let refused = engine.aggregator().merge_back_unbounded(rows);
    if !refused.is_empty() {
        // Two spilled parts of one row whose sum overflows: count and say so.
        for r in &refused {
            ledger.update(owed_table(r.key.slot()), |s| {
                s.dropped += r.row.columns.sum()
            });
        }
        ledger.count_late_drop(DropReason::Overflow, refused.len() as u64);
        tracing::error!(
            rows = refused.len(),
            "Replayed rows would overflow when merged; dropped."
        );
    }
}

/// The one table a re-queued or replayed row is owed to.
pub(super) fn owed_table(slot: Slot) -> Granularity {
    if slot.owes(Granularity::Minute) {
        Granularity::Minute
    } else {
        Granularity::Day
    }
}
