//! An in-memory sink with scripted failures, for tests and benchmarks.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::Sink;
use crate::sink::{Outcome, PartitionWrite};
use crate::vocabulary::FamilyId;
use crate::vocabulary::Granularity;

/// A stored row's address: family, table, series, shard, bucket.
pub type MemoryKey = (FamilyId, Granularity, Vec<u8>, Option<u8>, u32);

/// Decides the fate of each write: `(outcome to report, whether the store applies it)`.
/// `None` means "apply and report success".
pub type Script = Box<dyn Fn(u64, &PartitionWrite) -> Option<(Outcome, bool)> + Send + Sync>;

/// Keeps every applied delta in a map, summed per row, like a counter table would.
#[derive(Clone, Default)]
pub struct MemorySink {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    rows: Mutex<BTreeMap<MemoryKey, Vec<i128>>>,
    requests: AtomicU64,
    script: Mutex<Option<Script>>,
}

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

impl Sink for MemorySink {
    async fn write(&self, write: &PartitionWrite) -> Outcome {
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
}
