//! The one replay loop: spilled records read back through the state directory's one
//! cursor, for every kind of write that replays in the sidecar (counter deltas, running
//! totals). Each kind says, record by record, whether the record is its own and fits
//! its chunk ([`Taken`]); what follows is the same for all of them and lives here:
//!
//! - counting: a row counts from when it is read: one spilled by an earlier process is
//!   accepted anew (`replayed`), one this process spilled moves from `spilled`; either
//!   goes `in_flight`;
//! - a record today's configuration cannot map is refused: `rejected.jsonl`, error
//!   `replay_unmappable`, counted `rejected`;
//! - unreadable lines are set aside (`spill.corrupt.jsonl`) and counted.
//!
//! A declined record ends the read with the cursor before it: it stays on disk, for a
//! later chunk or the other kind's replay.

use crate::state::{ErrorInfo, OutcomeLog, RecordOutcome, SegmentId, StateDir, WriteRecord};
use crate::telemetry::{Ledger, Settled};
use crate::vocabulary::Granularity;

/// What a kind of write did with one record read back.
pub enum Taken {
    /// Taken for the chunk: its row is owed to `table`, `sum` its delta sum.
    Row {
        /// The table its row is owed to.
        table: Granularity,
        /// Its delta sum (for a running total, the part not known applied).
        sum: i128,
    },
    /// It cannot be written under today's configuration (why): refused.
    Unmappable(String),
    /// Not this kind's, or no room left: the read ends before it.
    Declined,
}

/// Reads records from the replay cursor on, handing each to `take` with whether this
/// process spilled it (see the module doc); returns how many were taken or refused.
pub fn read_chunk(
    state: &mut StateDir,
    ledger: &Ledger,
    mut take: impl FnMut(SegmentId, bool, &WriteRecord) -> Taken,
) -> usize {
    let incarnation = state.incarnation();
    let mut unmappable: Vec<WriteRecord> = Vec::new();
    let mut count = 0_usize;
    let read = state.read_spill(|segment, mut record| {
        let own = segment.incarnation == incarnation;
        let bring_back = |table: Granularity, sum: i128| {
            ledger.update(table, |s| {
                if own {
                    s.spilled -= sum;
                } else {
                    s.replayed += sum;
                }
            });
        };
        // (`unread` below is its inverse.)
        match take(segment, own, &record) {
            Taken::Declined => return false,
            Taken::Row { table, sum } => {
                bring_back(table, sum);
                ledger.update(table, |s| s.in_flight += sum);
            }
            Taken::Unmappable(why) => {
                let sum: i128 = record.deltas.values().map(|d| i128::from(*d)).sum();
                // Minute unless it names another granularity (as records always did).
                let table =
                    Granularity::parse(&record.granularity).unwrap_or(Granularity::Minute);
                bring_back(table, sum);
                ledger.update(table, |s| s.rejected += sum);
                tracing::warn!(%why, family = record.family, "A spilled row cannot be replayed; recorded in rejected.jsonl.");
                record.outcome = RecordOutcome::Rejected;
                record.error = Some(ErrorInfo {
                    kind: "replay_unmappable".into(),
                    text: why,
                });
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
            tracing::error!(%error, rows = count, "Could not read the spill; the rest of the replay waits for a later flush.");
        }
    }
    if !unmappable.is_empty() {
        let appended = state.append_now(OutcomeLog::Rejected, &unmappable);
        ledger.count_appended(OutcomeLog::Rejected, &appended);
    }
    count
}

/// Puts the count of a row read back with `sum` where it was before the read (the
/// inverse of what the read did): spilled again (this process's, `own`), or not yet
/// accepted (an earlier one's). The row's `in_flight` part is the caller's, in the same
/// ledger update.
pub fn unread(stages: &mut Settled, own: bool, sum: i128) {
    if own {
        stages.spilled += sum;
    } else {
        stages.replayed -= sum;
    }
}
