//! The families' definitions as a running process holds them: appended to, never changed
//! or removed, so that a live reload can add families while every thread keeps reading
//! them by reference, without a lock.
//!
//! A family's id is its position here, and pending rows, journal groups, spill records
//! in memory and the sink's prepared statements name families by id. A reload that adds a
//! family, or changes one's tables or columns, appends a definition with a new id; the
//! old one stays for the rows placed under it (see `Families::reshape`).
//!
//! Positions are kept in buckets of doubling size (1, 2, 4, … entries), each allocated
//! once when the first of its positions is taken; a slot once set never moves, which is
//! what lets [`Defs::get`] hand out references while [`Defs::push`] appends.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use super::FamilyDef;

/// Buckets enough for every id a `u16` can name (2^17 - 1 positions).
const BUCKETS: usize = 17;

/// One bucket: its slots, each set at most once.
type Bucket = Box<[OnceLock<FamilyDef>]>;

/// Every position is taken: no id is left.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Full;

/// The definitions, by id (see the module doc).
pub(super) struct Defs {
    buckets: [OnceLock<Bucket>; BUCKETS],
    /// Positions set, published after the slot is: a reader that sees `len` sees the
    /// slots below it.
    len: AtomicUsize,
    /// One appender at a time.
    append: Mutex<()>,
}

/// The bucket and the slot in it of position `index`.
fn place(index: usize) -> (usize, usize) {
    let n = index + 1;
    let bucket = (usize::BITS - 1 - n.leading_zeros()) as usize;
    (bucket, n - (1 << bucket))
}

impl Defs {
    /// The definitions of `defs`, in order.
    pub(super) fn new(defs: Vec<FamilyDef>) -> Defs {
        let all = Defs {
            buckets: std::array::from_fn(|_| OnceLock::new()),
            len: AtomicUsize::new(0),
            append: Mutex::new(()),
        };
        for def in defs {
            // Ids are `u16`, so a configuration never holds more than fit.
            let _ = all.push(def);
        }
        all
    }

    /// How many definitions there are (the next id).
    pub(super) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// The definition at `index`, if there is one.
    pub(super) fn get(&self, index: usize) -> Option<&FamilyDef> {
        if index >= self.len() {
            return None;
        }
        let (bucket, slot) = place(index);
        self.buckets.get(bucket)?.get()?.get(slot)?.get()
    }

    /// Every definition, by id.
    pub(super) fn iter(&self) -> impl Iterator<Item = &FamilyDef> {
        (0..self.len()).filter_map(|index| self.get(index))
    }

    /// Appends `def` at the next position; `Err(Full)` when every position is taken.
    pub(super) fn push(&self, def: FamilyDef) -> Result<usize, Full> {
        let _one = self.append.lock();
        let index = self.len.load(Ordering::Relaxed);
        let (bucket, slot) = place(index);
        let cell = self.buckets.get(bucket).ok_or(Full)?;
        let slots = cell.get_or_init(|| (0..1usize << bucket).map(|_| OnceLock::new()).collect());
        // Appends are serialised and `len` only grows, so the slot is free.
        slots[slot].set(def).map_err(|_| Full)?;
        self.len.store(index + 1, Ordering::Release);
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(id: u16) -> FamilyDef {
        let mut config = crate::config::Config::default();
        config
            .families
            .push(crate::config::FamilyConfig::seed_views());
        let families = crate::family::Families::from_config(&config).unwrap();
        let mut def = families.get(crate::vocabulary::FamilyId(1)).clone();
        def.id = crate::vocabulary::FamilyId(id);
        def
    }

    #[test]
    fn positions_fill_doubling_buckets() {
        assert_eq!(place(0), (0, 0));
        assert_eq!(place(1), (1, 0));
        assert_eq!(place(2), (1, 1));
        assert_eq!(place(3), (2, 0));
        assert_eq!(place(6), (2, 3));
        assert_eq!(place(7), (3, 0));
        assert_eq!(place(65_535), (16, 0));
    }

    #[test]
    fn appended_definitions_are_read_by_reference_in_order() {
        let defs = Defs::new(vec![def(0), def(1)]);
        let first = defs.get(1).unwrap();
        for id in 2..40 {
            assert_eq!(defs.push(def(id)), Ok(usize::from(id)));
        }
        // Still the same slot after 38 appends.
        assert_eq!(first.id.0, 1);
        assert_eq!(defs.len(), 40);
        assert!(defs.get(40).is_none());
        let ids: Vec<u16> = defs.iter().map(|d| d.id.0).collect();
        assert_eq!(ids, (0..40).collect::<Vec<_>>());
    }
}
