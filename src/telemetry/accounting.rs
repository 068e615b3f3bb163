//! The accounting identity ("Nothing vanishes silently" in docs/src/guarantees.md), as signed sums
//! of deltas.
//!
//! Every accepted increment ends in exactly one stage, so at any quiet moment
//! `accepted = applied + unknown + rejected + dropped + spilled + ledgered + no_table +
//! pending`. Each accepted delta is owed to one row of each table its family has (minute,
//! hour, day, all-time total), whose writes can end differently, so the identity is kept
//! **per table granularity**: once for the minute tables, once for the hour tables, and so
//! on. A delta of a family without a table of some granularity settles as `no_table` in
//! that granularity's identity when a flush drains it. The stages are counted in different places (the
//! buffer's stripes, the flusher's ledger) and read without a global lock: while a flush
//! is running the sums may be off by what is moving between stages, and they balance
//! whenever nothing is in motion.

use super::ledger::Ledger;
use crate::engine::Engine;
use crate::vocabulary::Granularity;

/// Signed delta sums per stage, for one table granularity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stages {
    /// Accepted (valid increments, plus rows replayed from the spill).
    pub accepted: i128,
    /// Acknowledged by the store.
    pub applied: i128,
    /// Outcome unknown, logged.
    pub unknown: i128,
    /// Rejected permanently, logged.
    pub rejected: i128,
    /// Dropped by a limit, counted by reason.
    pub dropped: i128,
    /// On disk in the spill.
    pub spilled: i128,
    /// In memory, drained for an exact family and held until the delta ledger confirms
    /// their ledger rows (no counter write carries them before).
    pub ledgered: i128,
    /// Of families without a table of this granularity: owed nothing, settled.
    pub no_table: i128,
    /// In memory: buffered or in flight.
    pub pending: i128,
}

impl Stages {
    /// The sum of every stage after acceptance.
    pub fn settled_total(&self) -> i128 {
        self.applied
            + self.unknown
            + self.rejected
            + self.dropped
            + self.spilled
            + self.ledgered
            + self.no_table
            + self.pending
    }

    /// Whether `accepted` equals the sum of the other stages.
    pub fn is_balanced(&self) -> bool {
        self.accepted == self.settled_total()
    }

    /// `(stage, sum)` pairs in label order, for metrics.
    pub fn labelled(&self) -> [(&'static str, i128); 9] {
        [
            ("accepted", self.accepted),
            ("applied", self.applied),
            ("unknown", self.unknown),
            ("rejected", self.rejected),
            ("dropped", self.dropped),
            ("spilled", self.spilled),
            ("ledgered", self.ledgered),
            ("no_table", self.no_table),
            ("pending", self.pending),
        ]
    }
}

/// The stages per table granularity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Accounting {
    /// Minute tables.
    pub minute: Stages,
    /// Day tables.
    pub day: Stages,
    /// Hour tables.
    pub hour: Stages,
    /// All-time total tables.
    pub total: Stages,
}

impl Accounting {
    /// Reads the stages now.
    pub fn read(engine: &Engine, ledger: &Ledger) -> Accounting {
        let counters = engine.aggregator().counters();
        let held_sums = ledger.exact_ledger().held_sums;
        let stages = |table: Granularity| {
            let settled = ledger.settled(table);
            // Held rows stay in the flusher's in-flight sum; shown as their own stage.
            let ledgered = held_sums[table.index()];
            Stages {
                accepted: counters.accepted_sum + settled.replayed,
                applied: settled.applied,
                unknown: settled.unknown,
                rejected: settled.rejected,
                dropped: counters.dropped_sum_total() + settled.dropped,
                spilled: settled.spilled,
                ledgered,
                no_table: settled.no_table,
                pending: engine.aggregator().pending_sum(table) + settled.in_flight - ledgered,
            }
        };
        Accounting {
            minute: stages(Granularity::Minute),
            day: stages(Granularity::Day),
            hour: stages(Granularity::Hour),
            total: stages(Granularity::Total),
        }
    }

    /// The stages of one granularity.
    pub fn of(&self, table: Granularity) -> &Stages {
        match table {
            Granularity::Minute => &self.minute,
            Granularity::Day => &self.day,
            Granularity::Hour => &self.hour,
            Granularity::Total => &self.total,
        }
    }

    /// Whether the identity holds for every granularity.
    pub fn is_balanced(&self) -> bool {
        Granularity::ALL.iter().all(|&g| self.of(g).is_balanced())
    }
}
