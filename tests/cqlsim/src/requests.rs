//! The request log: what each write request on a user table carried and what became of
//! it, in arrival order. Off unless asked for (it grows with every request).
//!
//! The CQL protocol carries no request id from a driver, so a test matches requests by
//! content: a client's own journal says what it sent under which id; this log says what
//! the store received and applied. A write the client re-sent shows up here twice.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::faults::{FaultKind, Op};

/// One statement of a logged request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedStatement {
    /// Keyspace of the table it writes.
    pub keyspace: String,
    /// The table.
    pub table: String,
    /// Bound values by the name of the column they bind to (a counter delta by its
    /// counter column), as CQL literals; unset values are left out.
    pub values: BTreeMap<String, String>,
}

/// One write request as the store saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedRequest {
    /// Arrival order, from 1.
    pub seq: u64,
    /// QUERY, EXECUTE or BATCH.
    pub op: Op,
    /// Its statements; empty when it named a prepared id the store did not know (it was
    /// answered UNPREPARED and not executed).
    pub statements: Vec<LoggedStatement>,
    /// The fault that fired on it, and whether that fault let the write apply.
    pub fault: Option<(FaultKind, bool)>,
    /// Whether its changes were applied.
    pub applied: bool,
}

/// The log, shared by the connections.
#[derive(Debug, Default)]
pub(crate) struct RequestLog {
    enabled: AtomicBool,
    next: AtomicU64,
    entries: Mutex<Vec<LoggedRequest>>,
}

impl RequestLog {
    pub(crate) fn enable(&self) {
        self.enabled.store(true, Ordering::Release);
    }

    pub(crate) fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    pub(crate) fn push(
        &self,
        op: Op,
        statements: Vec<LoggedStatement>,
        fault: Option<(FaultKind, bool)>,
        applied: bool,
    ) -> u64 {
        let seq = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        self.entries.lock().push(LoggedRequest {
            seq,
            op,
            statements,
            fault,
            applied,
        });
        seq
    }

    /// Request `seq`, held by a late delay (`delay,execute=late`), applied when the delay
    /// ended.
    pub(crate) fn applied_late(&self, seq: u64) {
        if let Some(entry) = self.entries.lock().iter_mut().find(|e| e.seq == seq) {
            entry.applied = true;
        }
    }

    pub(crate) fn snapshot(&self) -> Vec<LoggedRequest> {
        let mut entries = self.entries.lock().clone();
        entries.sort_by_key(|e| e.seq);
        entries
    }
}
