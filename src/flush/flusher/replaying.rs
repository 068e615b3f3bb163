//! A flush's replay round: a chunk of spilled rows read back through the one replay
//! loop, planned, sent and settled like drained rows, its cursor consumed by its group.

use std::sync::Arc;

use crate::aggregate::RowKey;
use crate::epoch;
use crate::sink::Sink;
use crate::vocabulary::Granularity;

use super::*;
use crate::flush::ledger_gate::owed_sums;
use crate::flush::replay::{self, ReplayChunk};
use crate::flush::report::FlushReport;
use crate::flush::shutdown::Deadline;

impl<S: Sink> Flusher<S> {
    /// One chunk of the spill, sent as a group of its own whose commit consumes the
    /// replay cursor past exactly its rows (see [`crate::flush::replay`]). Not while shutdown
    /// is under way: a group past the deadline is not committed, and its rows must stay
    /// on disk rather than go to memory.
    pub(super) async fn flush_replay(&mut self, deadline: &mut Deadline) -> FlushReport {
        if deadline.at().is_some() {
            return FlushReport::default();
        }
        // One view for the read and the plan: a row the read takes to send is placed.
        let view = self.epoch_view();
        let (mut carried, mut refusals) = (false, false);
        let chunk = loop {
            let engine = Arc::clone(&self.engine);
            let holds = |key: &RowKey| {
                let minute = key.slot().minute();
                place(engine.families(), &view, key.family(), key.series(), minute)
                    == epoch::Placement::Hold
            };
            let Some(chunk) = replay::read_chunk(
                &self.engine,
                &mut self.state,
                &self.ledger,
                holds,
                !refusals,
            ) else {
                return FlushReport::default();
            };
            if chunk.rows.is_empty() && chunk.held.is_empty() {
                // Refused records alone (logged as read): consumed at once, so that no
                // kill before a later group commit has the next process log them again
                // (see `replay`). The rows behind them are read in the same round; a
                // second run of refusals is not (a round reads one chunk's room of them).
                if let Err(error) = self.state.commit_replay(self.state.replay_loaded()) {
                    tracing::error!(%error, "Could not record the replay cursor.");
                }
                refusals = true;
                continue;
            }
            if chunk.held.is_empty() {
                break chunk;
            }
            // A run of rows to hold: carried once per round past the rows behind it. A
            // second run read in the same round (the rest of a run longer than a chunk,
            // or another) is left where it is, for the next round: its read is undone,
            // or the cursor would pass rows neither sent nor on disk any more.
            if carried {
                self.leave_held(&chunk);
                return FlushReport::default();
            }
            if !self.carry_held(chunk) {
                return FlushReport::default();
            }
            carried = true;
        };
        let consumes = self.state.replay_loaded();
        self.seq += 1;
        let flush = self.state.flush_id(self.seq);
        let mut in_flight = chunk.in_flight();
        let ReplayChunk {
            rows,
            mut credit,
            sums,
            owed,
            ..
        } = chunk;
        let count = rows.len();
        let planned = self.plan_in(rows, &view);
        // The read took no row the view cannot place (see `replay`), so none is held
        // here; were one, it would go to the buffer once the group is committed.
        let held = planned.held;
        let held_sums = owed_sums(held.iter());
        for g in Granularity::ALL {
            in_flight[g.index()] -= held_sums[g.index()];
        }
        let writes = planned.writes;
        crate::flush::observe::tell(&self.observers, &writes);
        let sent = Counters {
            flush,
            writes,
            in_flight,
            consumes,
            last: false,
        };
        let (mut report, journaled) = self.send_counters(sent, &mut credit, deadline).await;
        report.rows = count;
        for g in Granularity::ALL {
            self.ledger
                .update(g, |s| s.in_flight -= held_sums[g.index()]);
        }
        if report.writes == 0 || journaled {
            // The group consumed the cursor (or there was none to send): held rows
            // become pending rows (still owed, see `owed`), and the spill holds these
            // rows no more.
            if let Some(gate) = &mut self.ledger_gate {
                gate.replayed(owed);
                gate.buffered_rows(self.engine.families(), held.iter().map(|(key, _)| key));
            }
            if report.writes == 0
                && let Err(error) = self.state.commit_replay(consumes)
            {
                tracing::error!(%error, "Could not record the replay cursor.");
            }
            self.hold(held, &mut credit);
        } else {
            // Nothing was sent and nothing consumed: the rows stay on disk, read again.
            self.state.rewind_replay();
            replay::unread(sums, &self.ledger);
        }
        report
    }
}
