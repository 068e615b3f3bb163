//! Rows a flush drained and does not send: held back for the epoch registry, or for the
//! delta ledger at the shutdown deadline (see [`crate::state::ledger_pending`]); and the
//! exact families' files beside the flush (`ledger_pending.jsonl`, `outcomes.mark`).

use std::time::SystemTime;

use crate::aggregate::{Credit, Refused, RefusedReason, Row, RowKey};
use crate::bucket;
use crate::sink::Sink;
use crate::state::{FlushId, RecordSource, WriteRecord, ledger_pending, outcomes_mark};
use crate::test_hooks::crash_point;
use crate::vocabulary::{DropReason, Granularity};

use super::super::record_conversion;
use super::super::replay::{self, ReplayChunk};
use super::{Flusher, Spilled, spill};

impl<S: Sink> Flusher<S> {
    /// Puts rows the epoch view does not cover yet back into the buffer, whole (they were
    /// never planned), and counts them. Returns their delta sums per table (they are not
    /// in flight). A row whose sum would overflow there is dropped and counted
    /// (`overflow`).
    pub(super) fn hold(
        &self,
        held: Vec<(RowKey, Row)>,
        credit: &mut Credit,
    ) -> [i128; Granularity::COUNT] {
        let mut sums = [0_i128; Granularity::COUNT];
        if held.is_empty() {
            return sums;
        }
        for (key, row) in &held {
            for g in Granularity::ALL {
                if key.slot().owes(g) {
                    sums[g.index()] += row.columns.sum();
                }
            }
        }
        if let Some(epochs) = &self.epochs {
            epochs.count_held(held.len());
        }
        tracing::debug!(
            rows = held.len(),
            "Rows held: the epoch registry's last read does not cover their minute yet."
        );
        // Their room is the drained rows' credit, so only an overflowing sum is refused.
        for Refused { key, row, reason } in self.engine.aggregator().merge_back(held, credit) {
            for g in Granularity::ALL {
                if key.slot().owes(g) {
                    let sum = row.columns.sum();
                    self.ledger.update(g, |s| s.dropped += sum);
                }
            }
            let reason = match reason {
                RefusedReason::Overflow => DropReason::Overflow,
                RefusedReason::NoRoom => DropReason::MaxRows,
            };
            self.ledger.count_late_drop(reason, 1);
            tracing::error!(
                ?key,
                reason = reason.as_str(),
                "A held row could not go back to the buffer; dropped (counted in countersink_rows_dropped_total)."
            );
        }
        sums
    }

    /// A replay chunk that is a run of rows the epoch view does not cover (see
    /// [`super::super::replay`]). When rows follow it, the run is carried whole into a
    /// segment of its own at the end of the spill, whose header names the cursor past
    /// the run, and the rows behind it can be sent; returns whether it was carried.
    /// Otherwise (nothing follows it, or the segment cannot be written) the read is
    /// undone and the rows stay where they are. Either way they stay on disk: in memory
    /// a kill would lose them, acknowledged increments of the ingest log among them.
    pub(super) fn carry_held(&mut self, chunk: ReplayChunk) -> bool {
        if let Some(epochs) = &self.epochs {
            epochs.count_held(chunk.held.len());
        }
        let carried = self.state.has_unreplayed() && self.write_carried(&chunk.held);
        if carried {
            // This process's spill now, whichever process spilled them first.
            let sums = chunk.in_flight();
            for g in Granularity::ALL {
                self.ledger.update(g, |s| {
                    s.in_flight -= sums[g.index()];
                    s.spilled += sums[g.index()];
                });
            }
            tracing::debug!(
                rows = chunk.held.len(),
                "Spilled rows the epoch registry's last read does not cover were carried to the end of the spill."
            );
        } else {
            self.leave_held(&chunk);
        }
        self.ledger.set_spill_bytes(self.state.spill_bytes().0);
        carried
    }

    /// Undoes the read of a run of rows to hold: they stay where they are on disk, read
    /// again by a later round, and the accounting is as before the read.
    pub(super) fn leave_held(&mut self, chunk: &ReplayChunk) {
        let sums = chunk.in_flight();
        for g in Granularity::ALL {
            self.ledger.update(g, |s| s.in_flight -= sums[g.index()]);
        }
        self.state.rewind_replay();
        replay::unread(chunk.sums, &self.ledger);
    }

    /// Writes `records` (read by the replay up to its loaded cursor) to a segment of a
    /// new flush number, naming that cursor, then consumes it: whether they were written.
    fn write_carried(&mut self, records: &[WriteRecord]) -> bool {
        let mut lines = Vec::new();
        for record in records {
            if serde_json::to_writer(&mut lines, record).is_err() {
                return false;
            }
            lines.push(b'\n');
        }
        self.seq += 1;
        let flush = self.state.flush_id(self.seq);
        let consumes = self.state.replay_loaded();
        if let Err(error) = self.state.spill_carried(&flush, consumes, &lines) {
            tracing::error!(%error, "Could not carry rows the epoch registry cannot place; they wait where they are.");
            return false;
        }
        if let Err(error) = self.state.commit_replay(consumes) {
            tracing::warn!(%error, "Could not record the replay cursor past carried rows (the carrying segment names it; retried at the next commit).");
        }
        true
    }

    /// At the final flush, rows the epoch view does not cover go to the flush's spill
    /// segment (request id `…/held`) instead of back to memory: the next start replays
    /// them into the epoch of their minute. Returns their delta sums per table.
    pub(super) fn spill_held(
        &mut self,
        flush: &FlushId,
        held: Vec<(RowKey, Row)>,
    ) -> [i128; Granularity::COUNT] {
        if let Some(epochs) = &self.epochs {
            epochs.count_held(held.len());
        }
        if !held.is_empty() {
            tracing::warn!(
                rows = held.len(),
                "At shutdown, rows whose epoch the last read of the registry does not cover were spilled; the next start places them."
            );
        }
        let (items, sums) = self.spill_items(flush, &held, "held");
        self.held_spill.extend(items);
        sums
    }

    /// Drained rows that were never planned, as spill items of request
    /// `…/<request>` (one record per row and table), and their delta sums per table
    /// (including what fresh rows owe no table of their family, settled as `no_table`).
    fn spill_items(
        &self,
        flush: &FlushId,
        held: &[(RowKey, Row)],
        request: &str,
    ) -> (Vec<Spilled>, [i128; Granularity::COUNT]) {
        let mut sums = [0_i128; Granularity::COUNT];
        let mut items = Vec::new();
        let time = bucket::rfc3339(SystemTime::now());
        let held_id = flush.named_request(request);
        let mut index = 0_usize;
        for (key, row) in held {
            let family = &self.families[usize::from(key.family().0)];
            let source = RecordSource {
                flush,
                request: u32::MAX,
                time: &time,
            };
            // A fresh row owes nothing to the tables its family lacks: settled here, as
            // the plan settles them for the rows it plans.
            if key.slot().owed_to().is_none() {
                let sum = row.columns.sum();
                for g in Granularity::ALL
                    .into_iter()
                    .filter(|&g| family.table(g).is_empty())
                {
                    sums[g.index()] += sum;
                    self.ledger.update(g, |s| s.no_table += sum);
                }
            }
            for (table, mut record) in record_conversion::held_records(key, row, family, source) {
                (record.request_id, record.row) = held_record_id(&held_id, index);
                index += 1;
                let sum = row.columns.sum();
                sums[table.index()] += sum;
                items.push(Spilled {
                    request: None,
                    table,
                    sum,
                    records: vec![record],
                });
            }
        }
        (items, sums)
    }

    /// At the final flush, the rows still held for the delta ledger go to this flush's
    /// held segment (`spill.<inc>.<seq>.held.jsonl`, request id `…/ledger-held`), whose
    /// header carries the ledger rows this chunk gave up, verbatim, in one atomic write,
    /// before the flush sends anything more: a kill at any point finds the rows and their
    /// ledger rows on disk together, or neither (see [`crate::state::ledger_pending`]).
    /// The next start confirms the ledger rows, then replays the rows once (recovery of
    /// the flush leaves the segment alone: it holds none of the flush's intents).
    ///
    /// When no segment is written (the spill is full or failing), the rows are dropped,
    /// counted, and their outcome rows queued, and their ledger rows (they may be applied
    /// already) go to `ledger_pending.jsonl`. If that file cannot be written either, the
    /// ledger rows are forgotten (no later chunk sends them or writes them to the file)
    /// and the stop is recorded as unclean with the rows. Returns the spilled and dropped
    /// writes.
    ///
    /// Rows whose ledger rows are confirmed, waiting for room in a later chunk, are left
    /// to it unless `confirmed_too` (the final flush ended with some left).
    pub(super) fn spill_ledger_held(
        &mut self,
        flush: &FlushId,
        confirmed_too: bool,
    ) -> (usize, usize) {
        let Some(gate) = &mut self.ledger_gate else {
            return (0, 0);
        };
        if gate.held().0 == 0 {
            return (0, 0);
        }
        let (rows, sums, ledger_rows) = gate.give_up_held(confirmed_too);
        if rows.is_empty() {
            return (0, 0);
        }
        let given_up = gate.unstored_rows();
        for g in Granularity::ALL {
            self.ledger.update(g, |s| s.in_flight -= sums[g.index()]);
        }
        let (items, _) = self.spill_items(flush, &rows, "ledger-held");
        let written = self
            .state
            .spill_held(flush, &spill::batches(&items), &given_up);
        if matches!(&written, Ok(kept) if kept.contains(&true)) {
            if let Some(gate) = &mut self.ledger_gate {
                gate.mark_stored();
            }
            tracing::warn!(
                rows = rows.len(),
                ledger_rows = given_up.len(),
                "At the shutdown deadline the delta ledger had not confirmed these rows' ledger rows: the rows were spilled with their ledger rows; the next start confirms them before it replays the rows."
            );
            let counts = self.account_spill(&items, written);
            crash_point("ledger_held_spilled");
            return counts;
        }
        let Some(gate) = &mut self.ledger_gate else {
            return (0, 0);
        };
        match ledger_pending::store(self.state.dir(), &ledger_rows) {
            Ok(()) => {
                gate.mark_stored();
                self.ledger_file = true;
                // The rows are dropped (counted; the outcomes table says so), their
                // ledger rows kept: the ledger records them, reconcile explains the drop.
                self.account_spill(&items, written)
            }
            Err(error) => {
                tracing::error!(
                    %error,
                    rows = rows.len(),
                    "Could not write the held segment nor ledger_pending.jsonl: rows held for the delta ledger at the shutdown deadline are lost, and their ledger rows are not sent again; the stop is recorded as unclean."
                );
                // Dropped: counted (the accounting and the drop counters; `lost` for
                // `status.json`), without outcome rows: their ledger rows are forgotten.
                let counts = self.account_spill_with(&items, written, false);
                let Some(gate) = &mut self.ledger_gate else {
                    return counts;
                };
                // A write that failed after its rename may have left the lost rows' ledger
                // rows in the file: it is put back to what the stored requests hold.
                let stored = gate.forget_unstored();
                match ledger_pending::store(self.state.dir(), &stored) {
                    Ok(()) => self.ledger_file = !stored.is_empty(),
                    Err(error) => {
                        tracing::error!(%error, "Could not rewrite ledger_pending.jsonl either.")
                    }
                }
                counts
            }
        }
    }

    /// Records in `outcomes.mark` that everything logged so far is in the outcomes table
    /// (called when its queue is empty), if the logs grew since the last mark.
    pub(super) fn advance_outcomes_mark(&mut self) {
        let sizes = self.state.outcome_log_sizes();
        if self.outcomes_mark == Some(sizes) {
            return;
        }
        match outcomes_mark::store(self.state.dir(), sizes) {
            Ok(()) => self.outcomes_mark = Some(sizes),
            Err(error) => {
                tracing::warn!(%error, "Could not record outcomes.mark (the next start offers the outcomes table more records again; harmless).")
            }
        }
    }

    /// Deletes `ledger_pending.jsonl` once the gate confirmed every stored ledger row
    /// (spilled rows may be replayed from then on; a held segment's header goes with its
    /// segment, once replay consumed it).
    pub(super) fn forget_confirmed_ledger_file(&mut self) {
        let confirmed = self
            .ledger_gate
            .as_ref()
            .is_some_and(|gate| !gate.has_stored());
        if !self.ledger_file || !confirmed {
            return;
        }
        match ledger_pending::remove(self.state.dir()) {
            Ok(()) => {
                self.ledger_file = false;
                tracing::info!(
                    "The ledger rows stored at a shutdown deadline are confirmed; spilled rows are replayed again."
                );
            }
            Err(error) => {
                tracing::error!(%error, "Could not delete ledger_pending.jsonl (its rows are confirmed; it is tried again).")
            }
        }
    }
}

/// Rows of one part of a held request: its records' row numbers fit the outcomes
/// table's `row smallint`.
const HELD_PART_ROWS: usize = 16_384;

/// The request id and row of the `index`th held record of `base` (`…/held`,
/// `…/ledger-held`): one id for the first [`HELD_PART_ROWS`] records, then `base.1`,
/// `base.2`, … A final-flush chunk can hold far more rows than a request has, and two
/// records under one (request id, row) would overwrite each other's outcome row.
fn held_record_id(base: &str, index: usize) -> (String, u16) {
    let (part, row) = (index / HELD_PART_ROWS, index % HELD_PART_ROWS);
    let id = match part {
        0 => base.to_owned(),
        part => format!("{base}.{part}"),
    };
    (id, u16::try_from(row).expect("a part's rows fit a u16"))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::{HELD_PART_ROWS, held_record_id};

    /// Every held record of a large final-flush chunk has its own (request id, row),
    /// and every row number fits the outcomes table's `smallint`.
    #[test]
    fn held_records_past_a_request_s_rows_keep_distinct_ids() {
        let mut seen = HashSet::new();
        for index in 0..5 * HELD_PART_ROWS + 7 {
            let (id, row) = held_record_id("w/1/3/ledger-held", index);
            assert!(i16::try_from(row).is_ok(), "row {row} of record {index}");
            assert!(seen.insert((id, row)), "record {index} shares its id");
        }
        assert_eq!(held_record_id("w/1/3/held", 0).0, "w/1/3/held");
        assert_eq!(
            held_record_id("w/1/3/held", HELD_PART_ROWS).0,
            "w/1/3/held.1"
        );
    }
}
