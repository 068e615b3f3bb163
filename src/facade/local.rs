//! Each thread's own handles on the counters it registered, so that `counter!` on a
//! registered key touches only this thread's memory: no lock, and no reference count
//! shared with other threads (every `counter!` clones its handle and drops it again).
//!
//! Entries are found by the key's precomputed hash, then by pointer (see
//! [`same_parts`]): one key registered from several call sites gets one entry per site,
//! all sharing one handle, so that each site is found without comparing bytes. Keys built
//! at run time are compared in full.
//!
//! A thread keeps the handles of one recorder at a time (the one it used last; the
//! others' are released when it switches) and at most as many entries as the recorder
//! keeps keys (`max_keys`); beyond that it gets the shared handle of the registry, which
//! counts the same.

use std::cell::RefCell;
use std::sync::Arc;

use ::metrics::{Counter, Key};
use hashbrown::HashTable;

use super::handles::{Placed, ThreadCounter, same_parts};

thread_local! {
    static LOCAL: RefCell<Local> = const {
        RefCell::new(Local {
            owner: 0,
            entries: HashTable::new(),
        })
    };
}

/// One thread's handles, for the recorder `owner` (0: none yet).
struct Local {
    owner: u64,
    entries: HashTable<Entry>,
}

struct Entry {
    /// A retained key: it keeps the memory its pointers point at alive.
    key: Key,
    counter: Counter,
    /// Call sites this entry may still try to add an entry for (see [`get`]).
    alias_tries: u8,
}

/// How often an entry tries to add an entry for a call site whose key it matched only by
/// comparing bytes. Each try retains the key, which allocates when it was built at run
/// time and then yields no entry; so keys built at run time stop paying for it quickly,
/// and a static call site seen after them is still found, by bytes.
const ALIAS_TRIES: u8 = 4;

impl Local {
    fn insert(&mut self, key: Key, counter: Counter) {
        let hash = key.get_hash();
        let entry = Entry {
            key,
            counter,
            alias_tries: ALIAS_TRIES,
        };
        self.entries
            .insert_unique(hash, entry, |e| e.key.get_hash());
    }
}

/// This thread's handle on `key` for the recorder `owner`, if it keeps one.
///
/// Never fails: while the thread is exiting, or when a registration runs inside another
/// (a drop that records a metric), there is no local handle and the caller goes to the
/// registry.
#[inline]
pub(crate) fn get(owner: u64, key: &Key, max_entries: usize) -> Option<Counter> {
    LOCAL
        .try_with(|local| {
            let mut local = local.try_borrow_mut().ok()?;
            if local.owner != owner {
                return None;
            }
            let hash = key.get_hash();
            if let Some(entry) = local.entries.find(hash, |e| same_parts(&e.key, key)) {
                return Some(entry.counter.clone());
            }
            let room = local.entries.len() < max_entries;
            let entry = local.entries.find_mut(hash, |e| e.key == *key)?;
            let counter = entry.counter.clone();
            // The same key from another call site: an entry for this site too, when its
            // retained copy points where it does (a static or shared key; a key built at
            // run time would need a new entry at every call).
            if room && entry.alias_tries > 0 {
                entry.alias_tries -= 1;
                let retained = key.to_retained();
                if same_parts(&retained, key) {
                    local.insert(retained, counter.clone());
                }
            }
            Some(counter)
        })
        .ok()
        .flatten()
}

/// The handle this thread uses for `placed`: one of its own, kept while it has fewer
/// than `max_entries`, else the shared one.
pub(crate) fn keep(owner: u64, placed: Arc<Placed>, max_entries: usize) -> Counter {
    let kept = LOCAL.try_with(|local| {
        let Ok(mut local) = local.try_borrow_mut() else {
            return (None, None);
        };
        // Another recorder's handles are released after the borrow ends.
        let released = (local.owner != owner).then(|| {
            local.owner = owner;
            std::mem::take(&mut local.entries)
        });
        if local.entries.len() >= max_entries {
            return (None, released);
        }
        let counter = Counter::from_arc(Arc::new(ThreadCounter(placed.clone())));
        local.insert(placed.key().clone(), counter.clone());
        (Some(counter), released)
    });
    match kept {
        Ok((Some(counter), _)) => counter,
        _ => Counter::from_arc(placed),
    }
}
