//! An in-memory sink with scripted failures, for tests and benchmarks.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

use super::{Request, Sink};
use crate::sink::{LedgerRow, Outcome, OutcomeRow, PartitionWrite, TotalsWrite, WriteError};
use crate::vocabulary::FamilyId;
use crate::vocabulary::Granularity;

/// A stored row's address: family, table, series, shard, bucket.
pub type MemoryKey = (FamilyId, Granularity, Vec<u8>, Option<u8>, u32);

/// A stored totals row's address: family, table, series, writer, bucket.
pub type TotalsKey = (FamilyId, Granularity, Vec<u8>, String, u32);

/// Decides the fate of each write: `(outcome to report, whether the store applies it)`.
/// `None` means "apply and report success".
pub type Script = Box<dyn Fn(u64, &PartitionWrite) -> Option<(Outcome, bool)> + Send + Sync>;

/// Decides the fate of each ledger request: `(outcome to report, whether the store
/// keeps the rows)`. `None` means "keep them and report success".
pub type LedgerScript = Box<dyn Fn(u64, &[LedgerRow]) -> Option<(Outcome, bool)> + Send + Sync>;

/// The same for totals writes.
pub type TotalsScript = Box<dyn Fn(u64, &TotalsWrite) -> Option<(Outcome, bool)> + Send + Sync>;

/// Keeps every applied delta in a map, summed per row, like a counter table would; every
/// applied total with its write time, the later time winning, like a regular table; and
/// the delta ledger's rows by their primary key.
#[derive(Clone, Default)]
pub struct MemorySink {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    rows: Mutex<BTreeMap<MemoryKey, Vec<i128>>>,
    requests: AtomicU64,
    script: Mutex<Option<Script>>,
    ledger: Mutex<BTreeMap<LedgerKey, LedgerRow>>,
    ledger_requests: AtomicU64,
    ledger_script: Mutex<Option<LedgerScript>>,
    outcomes: Mutex<BTreeMap<(String, u32, String, u16), OutcomeRow>>,
    /// Whether the outcomes table refuses every write (`unavailable`, nothing kept).
    outcomes_down: AtomicBool,
    totals: Mutex<BTreeMap<TotalsKey, (i64, Vec<i64>)>>,
    totals_requests: AtomicU64,
    totals_script: Mutex<Option<TotalsScript>>,
}

/// A ledger row's primary key: family, day, bucket, key, minute of day, writer,
/// incarnation, flush, part.
type LedgerKey = (String, u32, i16, String, i16, String, u64, u64, u16);

impl MemorySink {
    /// An empty store that applies everything.
    pub fn new() -> MemorySink {
        MemorySink::default()
    }

    /// Scripts failures: the closure sees the request number (from 1) and the write.
    pub fn set_script(
        &self,
        script: impl Fn(u64, &PartitionWrite) -> Option<(Outcome, bool)> + Send + Sync + 'static,
    ) {
        *self.inner.script.lock() = Some(Box::new(script));
    }

    /// Back to applying everything.
    pub fn clear_script(&self) {
        *self.inner.script.lock() = None;
    }

    /// Scripts the ledger's failures: the closure sees the ledger request number (from
    /// 1) and its rows.
    pub fn set_ledger_script(
        &self,
        script: impl Fn(u64, &[LedgerRow]) -> Option<(Outcome, bool)> + Send + Sync + 'static,
    ) {
        *self.inner.ledger_script.lock() = Some(Box::new(script));
    }

    /// The ledger back to keeping everything.
    pub fn clear_ledger_script(&self) {
        *self.inner.ledger_script.lock() = None;
    }

    /// Makes the outcomes table refuse every write (`unavailable`) or accept them again.
    pub fn set_outcomes_available(&self, available: bool) {
        self.inner
            .outcomes_down
            .store(!available, Ordering::Relaxed);
    }

    /// Ledger requests received.
    pub fn ledger_requests(&self) -> u64 {
        self.inner.ledger_requests.load(Ordering::Relaxed)
    }

    /// Every ledger row kept, in primary-key order (a row written twice is kept once,
    /// as an INSERT of the same key would).
    pub fn ledger_rows(&self) -> Vec<LedgerRow> {
        self.inner.ledger.lock().values().cloned().collect()
    }

    /// Every outcomes-table row kept, in primary-key order.
    pub fn outcome_rows(&self) -> Vec<OutcomeRow> {
        self.inner.outcomes.lock().values().cloned().collect()
    }

    /// Requests received.
    pub fn requests(&self) -> u64 {
        self.inner.requests.load(Ordering::Relaxed)
    }

    /// Every stored row.
    pub fn rows(&self) -> BTreeMap<MemoryKey, Vec<i128>> {
        self.inner.rows.lock().clone()
    }

    /// Sum of everything stored in one table kind, over all columns.
    pub fn total(&self, table: Granularity) -> i128 {
        self.inner
            .rows
            .lock()
            .iter()
            .filter(|(k, _)| k.1 == table)
            .flat_map(|(_, v)| v.iter())
            .sum()
    }

    /// Scripts the fate of totals writes, as [`MemorySink::set_script`] does for deltas.
    pub fn set_totals_script(
        &self,
        script: impl Fn(u64, &TotalsWrite) -> Option<(Outcome, bool)> + Send + Sync + 'static,
    ) {
        *self.inner.totals_script.lock() = Some(Box::new(script));
    }

    /// Back to applying every totals write.
    pub fn clear_totals_script(&self) {
        *self.inner.totals_script.lock() = None;
    }

    /// Totals requests received.
    pub fn totals_requests(&self) -> u64 {
        self.inner.totals_requests.load(Ordering::Relaxed)
    }

    /// Every stored totals row (each writer's row apart), without its write time.
    pub fn totals(&self) -> BTreeMap<TotalsKey, Vec<i64>> {
        self.inner
            .totals
            .lock()
            .iter()
            .map(|(k, (_, v))| (k.clone(), v.clone()))
            .collect()
    }

    /// Sum of every stored total of one table kind, over all writers and columns: what
    /// a read of everything would add up.
    pub fn totals_sum(&self, table: Granularity) -> i128 {
        self.inner
            .totals
            .lock()
            .iter()
            .filter(|(k, _)| k.1 == table)
            .flat_map(|(_, (_, v))| v.iter().map(|x| i128::from(*x)))
            .sum()
    }

    fn apply_totals(&self, write: &TotalsWrite) {
        let mut rows = self.inner.totals.lock();
        for row in &write.rows {
            let key = (
                write.family,
                write.table,
                write.series.to_vec(),
                write.writer.to_string(),
                row.bucket,
            );
            let new = (write.timestamp, row.totals.as_slice().to_vec());
            match rows.get(&key) {
                // The later write time wins; at equal times the greater values (a
                // deterministic choice, as a store's tie-break is).
                Some(old) if old.0 > new.0 || (old.0 == new.0 && old.1 >= new.1) => {}
                _ => {
                    rows.insert(key, new);
                }
            }
        }
    }

    fn apply(&self, write: &PartitionWrite) {
        let mut rows = self.inner.rows.lock();
        for row in &write.rows {
            let key = (
                write.family,
                write.table,
                write.series.to_vec(),
                write.shard,
                row.bucket,
            );
            let stored = rows
                .entry(key)
                .or_insert_with(|| vec![0; row.columns.as_slice().len()]);
            for (s, d) in stored.iter_mut().zip(row.columns.as_slice()) {
                *s += i128::from(*d);
            }
        }
    }
}

fn ledger_key(row: &LedgerRow) -> LedgerKey {
    (
        row.family.to_string(),
        row.day().0,
        row.bucket,
        row.key.to_string(),
        row.minute.minute_of_day(),
        row.writer.to_string(),
        row.incarnation,
        row.flush_seq,
        row.part,
    )
}

impl MemorySink {
    fn ledger_write(&self, rows: &[LedgerRow]) -> Outcome {
        let n = self.inner.ledger_requests.fetch_add(1, Ordering::Relaxed) + 1;
        let decision = self
            .inner
            .ledger_script
            .lock()
            .as_ref()
            .and_then(|script| script(n, rows));
        let (outcome, keep) = decision.unwrap_or((Outcome::Applied, true));
        if keep {
            let mut ledger = self.inner.ledger.lock();
            for row in rows {
                ledger.insert(ledger_key(row), row.clone());
            }
        }
        outcome
    }

    fn outcomes_write(&self, rows: &[OutcomeRow]) -> Outcome {
        if self.inner.outcomes_down.load(Ordering::Relaxed) {
            return Outcome::NotAppliedTransient(WriteError::new(
                "unavailable",
                "the outcomes table is down (scripted)",
            ));
        }
        let mut outcomes = self.inner.outcomes.lock();
        for row in rows {
            let key = (
                row.family.clone(),
                row.day.0,
                row.request_id.clone(),
                row.row,
            );
            outcomes.insert(key, row.clone());
        }
        Outcome::Applied
    }

    fn counter_write(&self, write: &PartitionWrite) -> Outcome {
        let n = self.inner.requests.fetch_add(1, Ordering::Relaxed) + 1;
        let decision = self
            .inner
            .script
            .lock()
            .as_ref()
            .and_then(|script| script(n, write));
        match decision {
            None => {
                self.apply(write);
                Outcome::Applied
            }
            Some((outcome, applied)) => {
                if applied {
                    self.apply(write);
                }
                outcome
            }
        }
    }

    fn totals_write(&self, write: &TotalsWrite) -> Outcome {
        let n = self.inner.totals_requests.fetch_add(1, Ordering::Relaxed) + 1;
        let decision = self
            .inner
            .totals_script
            .lock()
            .as_ref()
            .and_then(|script| script(n, write));
        match decision {
            None => {
                self.apply_totals(write);
                Outcome::Applied
            }
            Some((outcome, applied)) => {
                if applied {
                    self.apply_totals(write);
                }
                outcome
            }
        }
    }
}

impl Sink for MemorySink {
    async fn send(&self, request: Request<'_>) -> Outcome {
        match request {
            Request::Counter(write) => self.counter_write(write),
            Request::Totals(write) => self.totals_write(write),
            Request::Ledger(rows) => self.ledger_write(rows),
            Request::Outcomes(rows) => self.outcomes_write(rows),
        }
    }
}
