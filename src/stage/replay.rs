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
//! Both are reported once per process: a chunk read again after a rewind (its group
//! commit failed, or it was a run to hold left in place) passes over them silently
//! (see [`crate::state::Took`]). Across processes the durable cursor keeps a refusal
//! from being logged again, so each kind makes refusals a chunk of their own (a refusal
//! ends a chunk of rows, a row ends a run of refusals) and commits its cursor at once: a
//! chunk of rows is durable only from its group commit on. A kill between a run's lines
//! and its cursor is the one window left, and the next process looks for those lines in
//! the log before it appends them ([`StateDir::refusals_not_logged`]).
//!
//! A declined record ends the read with the cursor before it: it stays on disk, for a
//! later chunk or the other kind's replay.

use crate::state::{ErrorInfo, OutcomeLog, RecordOutcome, SegmentId, StateDir, Took, WriteRecord};
use crate::telemetry::{Ledger, Settled};
use crate::vocabulary::Granularity;

/// Estimated bytes a record read back holds while its chunk lasts when it is kept as
/// read (refused for `rejected.jsonl`, or part of a run to hold): the record, its key
/// and deltas, its error. Each kind charges it against its chunk's room like a row.
pub const REFUSED_RECORD_BYTES: usize = 512;

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
/// process spilled it (see the module doc); returns how many were taken or refused
/// (refused before a rewind included: the cursor passes them too).
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
        let took = match take(segment, own, &record) {
            Taken::Declined => return Took::Declined,
            Taken::Row { table, sum } => {
                bring_back(table, sum);
                ledger.update(table, |s| s.in_flight += sum);
                Took::Taken
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
                Took::Refused
            }
        };
        count += 1;
        took
    });
    count += read.refused_again;
    let corrupt = read.corrupt.len();
    if corrupt > 0 {
        ledger.count_corrupt_spill_lines(corrupt as u64);
        tracing::error!(
            lines = corrupt,
            "Unreadable lines in a spill segment were set aside in spill.corrupt.jsonl."
        );
    }
    if let Some(error) = read.error {
        tracing::error!(%error, rows = count, "Could not read the spill; the rest of the replay waits for a later flush.");
    }
    let unmappable = state.refusals_not_logged(OutcomeLog::Rejected, unmappable);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StateConfig;

    fn record(family: &str, value: i64) -> WriteRecord {
        serde_json::from_value(serde_json::json!({
            "time": "t", "writer": "w", "incarnation": 1, "flush_seq": 1,
            "request_id": format!("w/1/1/{family}"), "row": 0, "outcome": "spilled",
            "family": family, "table": "ks.t", "granularity": "minute", "key": {},
            "day": "2026-11-30", "minute": 1, "deltas": { "value": value },
        }))
        .unwrap()
    }

    /// A chunk whose group commit fails is read again; a record it refused was logged
    /// and counted by the first read, and the second passes it without doing either again.
    #[test]
    fn a_refusal_read_again_after_a_rewind_is_logged_and_counted_once() {
        let dir = tempfile::tempdir().unwrap();
        let config = StateConfig {
            dir: dir.path().to_owned(),
            ..StateConfig::default()
        };
        let mut state = StateDir::open(&config).unwrap();
        let spilled_by = state.flush_id(1);
        state
            .spill(
                &spilled_by,
                &[vec![record("gone", 5)], vec![record("kept", 7)]],
            )
            .unwrap();
        let ledger = Ledger::default();
        let take = |_: SegmentId, _: bool, record: &WriteRecord| match record.family.as_str() {
            "gone" => Taken::Unmappable("no such family".into()),
            _ => Taken::Row {
                table: Granularity::Minute,
                sum: 7,
            },
        };
        assert_eq!(read_chunk(&mut state, &ledger, take), 2);
        // The group commit failed: the read is undone (as the flush does).
        state.rewind_replay();
        ledger.update(Granularity::Minute, |s| {
            s.in_flight -= 7;
            unread(s, true, 7);
        });
        assert_eq!(
            read_chunk(&mut state, &ledger, take),
            2,
            "the cursor passes the refused record again"
        );
        let logged = std::fs::read_to_string(dir.path().join("rejected.jsonl")).unwrap();
        assert_eq!(logged.lines().count(), 1, "{logged}");
        let minute = ledger.settled(Granularity::Minute);
        assert_eq!((minute.rejected, minute.in_flight), (5, 7));
        assert_eq!(minute.spilled, -12, "each row brought back once");
    }
}
