//! What the store received and applied, per table and per fault kind. Tests read it to check
//! write reduction ("how many write requests reached table X") and the accounting identity
//! ("the counters moved by exactly this much").
//!
//! Only wire traffic on user tables is counted: neither [`crate::Handle::execute`] (test setup
//! and assertions) nor reads of the `system*` and `cqlsim` tables.

use std::collections::BTreeMap;

use parking_lot::Mutex;

use crate::exec::Effects;
use crate::faults::FaultKind;

/// Counts for one table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableStats {
    /// Write requests (QUERY/EXECUTE/BATCH frames) that modify this table, whatever their
    /// outcome (errors and injected faults included). A BATCH counts once per table it
    /// touches, however many rows it carries.
    pub write_requests: u64,
    /// Of those, the requests whose changes were applied.
    pub writes_applied: u64,
    /// BATCH requests (frames or `BEGIN BATCH` text) touching this table.
    pub batches: u64,
    /// Row mutations applied (one per statement and primary key).
    pub rows_mutated: u64,
    /// Signed sum of all counter deltas applied to this table.
    pub counter_delta_sum: i128,
    /// SELECT requests on this table.
    pub reads: u64,
    /// Every DELETE mutation applied to this table, in order: what it removed (a whole
    /// partition, rows under a clustering prefix, or cells) and which partition.
    pub deletes: Vec<DeleteRecord>,
}

/// How much one DELETE removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeleteScope {
    /// The whole partition (no clustering restriction, no column list).
    Partition,
    /// The rows under a clustering prefix (one row, or a slice).
    Rows,
    /// Named cells (a column list), of one row or of the rows under a prefix.
    Cells,
}

/// One DELETE mutation as the store applied it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteRecord {
    /// What it removed.
    pub scope: DeleteScope,
    /// The partition key values, as CQL literals (`'home'`, `'2026-11-30'`, `3`).
    pub partition: Vec<String>,
    /// The clustering prefix, as CQL literals (empty for a partition delete).
    pub clustering: Vec<String>,
}

/// Counts for one fault kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Times a rule of this kind fired.
    pub fired: u64,
    /// Of those, the times the request's changes were applied anyway.
    pub applied: u64,
}

/// A copy of all statistics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Per `(keyspace, table)`.
    pub tables: BTreeMap<(String, String), TableStats>,
    /// Per fault kind.
    pub faults: BTreeMap<FaultKind, FaultStats>,
    /// TCP connections accepted (including those refused while the node is down).
    pub connections: u64,
    /// Replies an injected `delay` holds back right now.
    pub delayed_replies: u64,
    /// The most replies a `delay` held back at once: how many requests a client had in
    /// flight together (send 16 reads under `delay,on=reads` concurrently and this is 16;
    /// one after the other, 1).
    pub peak_delayed_replies: u64,
}

impl StatsSnapshot {
    /// The counts of one table (zero if it saw no traffic).
    pub fn table(&self, keyspace: &str, table: &str) -> TableStats {
        self.tables
            .get(&(keyspace.to_owned(), table.to_owned()))
            .cloned()
            .unwrap_or_default()
    }

    /// The counts of one fault kind.
    pub fn fault(&self, kind: FaultKind) -> FaultStats {
        self.faults.get(&kind).copied().unwrap_or_default()
    }
}

/// The live statistics. Lock order: never take the database lock while holding this one.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    inner: Mutex<StatsSnapshot>,
}

impl Stats {
    pub(crate) fn snapshot(&self) -> StatsSnapshot {
        self.inner.lock().clone()
    }

    pub(crate) fn reset(&self) {
        *self.inner.lock() = StatsSnapshot::default();
    }

    pub(crate) fn connection(&self) {
        self.inner.lock().connections += 1;
    }

    /// A request arrived for these tables. The server's own keyspaces are left out: the
    /// drivers' background metadata queries would make the numbers depend on timing.
    pub(crate) fn request(&self, tables: &[(String, String)], write: bool, batch: bool) {
        let mut s = self.inner.lock();
        for t in tables
            .iter()
            .filter(|(ks, _)| !crate::exec::is_system_keyspace(ks))
        {
            let e = s.tables.entry(t.clone()).or_default();
            if write {
                e.write_requests += 1;
                if batch {
                    e.batches += 1;
                }
            } else {
                e.reads += 1;
            }
        }
    }

    /// A request's changes were applied.
    pub(crate) fn applied(&self, fx: &Effects) {
        let mut s = self.inner.lock();
        for t in &fx.tables {
            let e = s
                .tables
                .entry((t.keyspace.clone(), t.table.clone()))
                .or_default();
            e.writes_applied += 1;
            e.rows_mutated += t.rows;
            e.counter_delta_sum += t.counter_delta;
        }
        for d in &fx.deletes {
            s.tables
                .entry((d.keyspace.clone(), d.table.clone()))
                .or_default()
                .deletes
                .push(d.record.clone());
        }
    }

    /// A reply is held back by a `delay`.
    pub(crate) fn delay_started(&self) {
        let mut s = self.inner.lock();
        s.delayed_replies += 1;
        s.peak_delayed_replies = s.peak_delayed_replies.max(s.delayed_replies);
    }

    /// A held-back reply was sent (or its connection is gone).
    pub(crate) fn delay_ended(&self) {
        let mut s = self.inner.lock();
        s.delayed_replies = s.delayed_replies.saturating_sub(1);
    }

    pub(crate) fn fault(&self, kind: FaultKind, applied: bool) {
        let mut s = self.inner.lock();
        let e = s.faults.entry(kind).or_default();
        e.fired += 1;
        if applied {
            e.applied += 1;
        }
    }
}
