//! Writing a flush's spill segments, and what becomes of writes that do not fit.

use crate::sink::Sink;
use crate::state::{FlushId, Settled, WriteRecord};
use crate::test_hooks::crash_point;
use crate::vocabulary::DropReason;
use crate::vocabulary::Granularity;

use super::{Flusher, Spilled};

impl<S: Sink> Flusher<S> {
    /// Writes the flush's spill segment. Writes that do not fit (`state.max_spill_bytes`)
    /// or cannot be written are dropped and counted; the first `moved` are rows the
    /// flush's replay read back, which need no room (see `StateDir::spill_moving`).
    /// Returns (spilled, dropped) writes.
    pub(super) fn spill(
        &mut self,
        flush: &FlushId,
        spilled: Vec<Spilled>,
        moved: usize,
    ) -> (usize, usize) {
        if spilled.is_empty() {
            return (0, 0);
        }
        let written = self.state.spill_moving(flush, &batches(&spilled), moved);
        self.account_spill(&spilled, written)
    }

    /// Counts what a segment write (`written`: per item, whether it was kept) did with
    /// `spilled`: kept writes are spilled, the others dropped (counted, logged, their
    /// journal outcome and their exact families' outcome rows recorded). Returns
    /// (spilled, dropped) writes.
    pub(super) fn account_spill(
        &mut self,
        spilled: &[Spilled],
        written: std::io::Result<Vec<bool>>,
    ) -> (usize, usize) {
        self.account_spill_with(spilled, written, true)
    }

    /// [`Flusher::account_spill`]; without the outcome rows when `outcome_rows` is
    /// false (rows whose ledger rows were never kept: nothing in the ledger for an
    /// outcome row to explain).
    pub(super) fn account_spill_with(
        &mut self,
        spilled: &[Spilled],
        written: std::io::Result<Vec<bool>>,
        outcome_rows: bool,
    ) -> (usize, usize) {
        let (kept, reason, failure) = match written {
            Ok(kept) => (kept, DropReason::SpillFull, None),
            Err(error) => (
                vec![false; spilled.len()],
                DropReason::SpillFailed,
                Some(error),
            ),
        };
        crash_point("spill_written");
        let (mut kept_count, mut dropped) = (0, (0_usize, 0_u64, [0_i128; Granularity::COUNT]));
        for (item, kept) in spilled.iter().zip(&kept) {
            let rows = item.records.len() as u64;
            if *kept {
                kept_count += 1;
                self.ledger.update(item.table, |s| s.spilled += item.sum);
                // Owed until replayed: reconcile must not repair these keys meanwhile.
                if let Some(gate) = &mut self.ledger_gate {
                    gate.spilled(self.engine.families(), &item.records);
                }
            } else {
                dropped.0 += 1;
                dropped.1 += rows;
                dropped.2[item.table.index()] += item.sum;
                self.ledger.update(item.table, |s| s.dropped += item.sum);
                self.ledger.count_late_drop(reason, rows);
                if let Some(request) = item.request {
                    self.state.journal_outcome(request, &Settled::Dropped);
                }
                // The ledger records these deltas (a row reaches the counters only once its
                // ledger row is confirmed; a held row's ledger row is in its segment's
                // header, or in ledger_pending.jsonl when no segment was written): the
                // outcomes table says they were dropped, so reconcile counts them as known
                // missing.
                if let Some(gate) = &mut self.ledger_gate
                    && outcome_rows
                {
                    gate.record_outcomes(self.engine.families(), &item.records);
                }
            }
        }
        self.state.journal_flush();
        if kept_count > 0 {
            tracing::warn!(
                writes = kept_count,
                "Writes spilled to disk; they are replayed once the store answers (or at the next start)."
            );
        }
        if dropped.0 > 0 {
            let (spill_bytes, max_spill_bytes) = self.state.spill_bytes();
            match failure {
                Some(error) => {
                    tracing::error!(%error, rows = dropped.1, minute_delta_sum = %dropped.2[0], day_delta_sum = %dropped.2[1], "Could not write the spill; these rows are lost (counted in countersink_rows_dropped_total{{reason=\"spill_failed\"}}).")
                }
                None => {
                    tracing::error!(rows = dropped.1, minute_delta_sum = %dropped.2[0], day_delta_sum = %dropped.2[1], spill_bytes, max_spill_bytes, "The spill is full (state.max_spill_bytes); these rows are lost (counted in countersink_rows_dropped_total{{reason=\"spill_full\"}}).")
                }
            }
            self.lost.0 += dropped.1;
            for (lost, dropped) in self.lost.1.iter_mut().zip(dropped.2) {
                *lost += dropped;
            }
        }
        (kept_count, dropped.0)
    }
}

/// The records of each spilled write: one batch each, kept or dropped whole.
pub(super) fn batches(spilled: &[Spilled]) -> Vec<Vec<WriteRecord>> {
    spilled.iter().map(|s| s.records.clone()).collect()
}
