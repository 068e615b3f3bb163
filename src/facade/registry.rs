//! The counters placed so far, shared by every thread: each key is placed once, and at
//! most `max_keys` of them are kept.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ::metrics::Key;
use hashbrown::HashTable;
use parking_lot::RwLock;

use super::handles::{Placed, same_key};

/// Placed counters by key, found by the hash `Key` computed when it was built (at compile
/// time for the literal keys of `counter!`): a look-up hashes nothing.
pub(crate) struct Registry {
    table: RwLock<HashTable<Arc<Placed>>>,
    max_keys: usize,
    /// Set once the registry is full, so that the warning is logged once.
    full: AtomicBool,
}

impl Registry {
    pub(crate) fn new(max_keys: usize) -> Registry {
        Registry {
            table: RwLock::new(HashTable::new()),
            max_keys,
            full: AtomicBool::new(false),
        }
    }

    /// The most keys it keeps.
    pub(crate) fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// Keys kept.
    pub(crate) fn len(&self) -> usize {
        self.table.read().len()
    }

    /// The counter of `key`: kept, or placed now by `place` and kept while there is room.
    /// Placing happens outside the lock; two threads racing to register one key both
    /// place it, and the first one kept wins.
    pub(crate) fn get_or_place(&self, key: &Key, place: impl FnOnce() -> Placed) -> Arc<Placed> {
        let hash = key.get_hash();
        let find = |placed: &Arc<Placed>| same_key(placed.key(), key);
        if let Some(kept) = self.table.read().find(hash, find) {
            return kept.clone();
        }
        let placed = Arc::new(place());
        let mut table = self.table.write();
        if let Some(kept) = table.find(hash, find) {
            return kept.clone();
        }
        if table.len() >= self.max_keys {
            drop(table);
            if !self.full.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    max_keys = self.max_keys,
                    "metrics facade: the counter registry is full; counters of new keys still count, but each registration places its key again"
                );
            }
            return placed;
        }
        table.insert_unique(hash, placed.clone(), |p| p.key().get_hash());
        placed
    }
}
