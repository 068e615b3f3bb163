//! A small per-thread cache from what a counter line says besides its values to where
//! it goes, so that a line seen before skips tag parsing, canonicalisation, family
//! routing and series hashing.
//!
//! # Why it is exact
//!
//! A counter line is `name ":" values "|" rest`. Given the engine's limits and families
//! (fixed for its life), everything the parser and the resolver decide about a line
//! except its values is a function of `name` and `rest` alone: the type, the sample rate,
//! the timestamp, the tags (validated, counted, canonicalised), the family, column and
//! series key. The one cross-part input, "does the line hold a control character", only
//! decides whether the name and the tags are checked for them; a cached name and rest
//! have passed that check (or had none to fail), and a control character in the values
//! makes them invalid either way. So a line whose `name` and `rest` equal those of a line
//! that was placed gets the same verdict as that line, decided by its values alone.
//!
//! Only lines that parsed as counters and were placed in a family are cached, and only
//! when the packet was valid UTF-8 and the line within the length limit (both checked
//! before the cache). Everything that depends on the values or on the time (scaling,
//! overflow, the timestamp window, limits of the buffer) is still decided per line.
//!
//! # Bounds
//!
//! Two-way set associative with [`SETS`] sets: at most `2 * SETS` entries per thread
//! that ingests packets, each holding its line key and series (entries longer than
//! [`MAX_ENTRY_BYTES`] are not cached). A slot's buffers are reused when it is replaced,
//! so a miss costs a key copy, not an allocation. When fewer than one look-up in
//! [`MIN_HIT_SHARE`] hits (far more distinct keys than slots), only one miss in
//! [`THROTTLED_INSERTS`] is cached, so a workload the cache cannot help is not slowed by
//! churning it; keys that do recur still get in and turn full caching back on. The cache
//! belongs to one engine at a time: a thread that feeds another engine starts afresh.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::family::Target;
use crate::series::{same_bytes, short_word, word};

/// Sets of the cache (two entries each).
pub(super) const SETS: usize = 512;

/// Below one hit in this many look-ups (over a window of [`WINDOW`]), inserts are
/// throttled.
pub(super) const MIN_HIT_SHARE: u32 = 8;

/// While throttled, one miss in this many is cached.
pub(super) const THROTTLED_INSERTS: u32 = 16;

/// Look-ups over which the hit share is measured.
pub(super) const WINDOW: u32 = 4096;

/// Longest line key plus series kept in one entry, in bytes.
pub(super) const MAX_ENTRY_BYTES: usize = 512;

/// Hands out engine identities, so that a thread's cache is never read by another engine.
static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);

/// A fresh identity for an engine (never 0, never reused).
pub(super) fn new_owner() -> u64 {
    NEXT_OWNER.fetch_add(1, Ordering::Relaxed)
}

/// What a cached line resolved to.
#[derive(Clone, Copy, Debug)]
pub(super) struct Placement {
    /// Family and column.
    pub(super) target: Target,
    /// The line's sample rate.
    pub(super) sample_rate: f64,
    /// The line's client timestamp.
    pub(super) timestamp: Option<i64>,
    /// Hash of the series, as the aggregator computes it.
    pub(super) series_hash: u64,
}

#[derive(Default)]
struct Slot {
    /// Length of the name at the start of `key`.
    name_len: usize,
    /// The name, then the rest of the line after the values.
    key: Vec<u8>,
    /// The encoded series key.
    series: Vec<u8>,
    placement: Option<Placement>,
}

/// The cache; see the module documentation.
#[derive(Default)]
pub(super) struct LineCache {
    owner: u64,
    /// The key hash of each slot (0: empty), apart from the slots so that a miss reads
    /// one cache line, not the entries.
    hashes: Vec<u64>,
    slots: Vec<Slot>,
    /// Per set, the way to replace next (the one not hit last).
    victim: Vec<u8>,
    /// Look-ups and hits in the current window.
    lookups: u32,
    hits: u32,
    /// Whether the last window hit too rarely, and misses since the last insert then.
    throttled: bool,
    skipped: u32,
}

impl LineCache {
    /// Makes the cache belong to engine `owner`, emptying it if it held another's lines.
    pub(super) fn claim(&mut self, owner: u64) {
        if self.owner != owner {
            self.owner = owner;
            self.hashes.clear();
            self.hashes.resize(2 * SETS, 0);
            self.slots.clear();
            self.slots.resize_with(2 * SETS, Slot::default);
            self.victim.clear();
            self.victim.resize(SETS, 0);
            (self.lookups, self.hits, self.throttled, self.skipped) = (0, 0, false, 0);
        }
    }

    /// The hash that [`LineCache::get`] and [`LineCache::insert`] take for a line key,
    /// from a per-engine `seed`.
    ///
    /// Word-at-a-time and not collision resistant, on purpose: entries are compared byte
    /// for byte, so a collision (even a crafted one) costs a miss, never a wrong answer,
    /// and a miss costs no more than having no cache.
    #[inline]
    pub(super) fn hash(seed: u64, name: &[u8], rest: &[u8]) -> u64 {
        let hash = hash_bytes(hash_bytes(seed, name), rest);
        // Fold the high bits down: the set index is taken from the low ones.
        let product = u128::from(hash) * u128::from(MULTIPLIER);
        // Never 0, which marks an empty slot.
        ((product as u64) ^ ((product >> 64) as u64)) | 1
    }

    /// The placement and series of the line key (`name`, `rest`), if cached.
    #[inline]
    pub(super) fn get(
        &mut self,
        hash: u64,
        name: &[u8],
        rest: &[u8],
    ) -> Option<(Placement, &[u8])> {
        self.lookups += 1;
        let set = (hash as usize) % SETS;
        for way in 0..2 {
            if self.hashes.get(2 * set + way) != Some(&hash) {
                continue;
            }
            let slot = &self.slots[2 * set + way];
            if slot.name_len == name.len()
                && same_bytes(&slot.key[..slot.name_len], name)
                && same_bytes(&slot.key[slot.name_len..], rest)
                && let Some(placement) = slot.placement
            {
                self.hits += 1;
                self.victim[set] = 1 - way as u8;
                return Some((placement, &self.slots[2 * set + way].series));
            }
        }
        None
    }

    /// Remembers where the line key (`name`, `rest`) goes, replacing the older entry of
    /// its set.
    pub(super) fn insert(
        &mut self,
        hash: u64,
        name: &[u8],
        rest: &[u8],
        series: &[u8],
        placement: Placement,
    ) {
        if name.len() + rest.len() + series.len() > MAX_ENTRY_BYTES || self.slots.is_empty() {
            return;
        }
        if self.lookups >= WINDOW {
            self.throttled = self.hits * MIN_HIT_SHARE < self.lookups;
            (self.lookups, self.hits) = (0, 0);
        }
        if self.throttled {
            self.skipped += 1;
            if self.skipped < THROTTLED_INSERTS {
                return;
            }
            self.skipped = 0;
        }
        let set = (hash as usize) % SETS;
        let way = usize::from(self.victim[set] & 1);
        self.victim[set] = 1 - way as u8;
        let slot = &mut self.slots[2 * set + way];
        self.hashes[2 * set + way] = hash;
        slot.name_len = name.len();
        slot.key.clear();
        slot.key.extend_from_slice(name);
        slot.key.extend_from_slice(rest);
        slot.series.clear();
        slot.series.extend_from_slice(series);
        slot.placement = Some(placement);
    }
}

/// An odd 64-bit constant with well-spread bits (the golden ratio's fraction).
const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

/// Mixes `bytes` (and their length) into `hash`, eight bytes per step.
#[inline(always)]
fn hash_bytes(mut hash: u64, bytes: &[u8]) -> u64 {
    let step = |hash: u64, word: u64| (hash.rotate_left(26) ^ word).wrapping_mul(MULTIPLIER);
    let len = bytes.len();
    if len < 8 {
        return step(step(hash, short_word(bytes)), len as u64);
    }
    let mut at = 0;
    while at + 8 < len {
        hash = step(hash, word(bytes, at));
        at += 8;
    }
    // The last word, overlapping the one before when the length is not a multiple of 8.
    step(step(hash, word(bytes, len - 8)), len as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocabulary::FamilyId;

    fn placement(column: usize) -> Placement {
        Placement {
            target: Target {
                family: FamilyId(0),
                column,
                width: 1,
            },
            sample_rate: 1.0,
            timestamp: None,
            series_hash: 7,
        }
    }

    #[test]
    fn hits_need_the_same_name_and_rest_and_owner() {
        let mut cache = LineCache::default();
        cache.claim(1);
        let h = LineCache::hash(1, b"ab", b"c|#x");
        cache.insert(h, b"ab", b"c|#x", b"series", placement(0));
        assert_eq!(
            cache.get(h, b"ab", b"c|#x").map(|(_, s)| s),
            Some(&b"series"[..])
        );
        // Same concatenation, different cut: not the same line key.
        let h2 = LineCache::hash(1, b"a", b"bc|#x");
        assert_ne!(h, h2);
        assert!(cache.get(h2, b"a", b"bc|#x").is_none());
        assert!(
            cache.get(h, b"a", b"bc|#x").is_none(),
            "even with a colliding hash"
        );
        cache.claim(2);
        assert!(
            cache.get(h, b"ab", b"c|#x").is_none(),
            "another engine starts empty"
        );
    }

    #[test]
    fn a_cache_that_never_hits_stops_churning_and_recovers() {
        let mut cache = LineCache::default();
        cache.claim(1);
        // A window of look-ups that all miss, each followed by an insert.
        for i in 0..WINDOW {
            let key = format!("k{i}");
            let h = LineCache::hash(1, key.as_bytes(), b"c");
            assert!(cache.get(h, key.as_bytes(), b"c").is_none());
            cache.insert(h, key.as_bytes(), b"c", b"S", placement(0));
        }
        // The next insert closes the window: no hits, so misses are no longer all cached.
        let h = LineCache::hash(1, b"once", b"c");
        assert!(cache.get(h, b"once", b"c").is_none());
        cache.insert(h, b"once", b"c", b"S", placement(0));
        assert!(cache.throttled);
        assert!(
            cache.get(h, b"once", b"c").is_none(),
            "skipped while throttled"
        );
        // A key that recurs still gets in, within THROTTLED_INSERTS misses, and hits.
        let h = LineCache::hash(1, b"hot", b"c");
        let mut misses = 0;
        while cache.get(h, b"hot", b"c").is_none() {
            misses += 1;
            assert!(misses <= THROTTLED_INSERTS, "never cached");
            cache.insert(h, b"hot", b"c", b"S", placement(0));
        }
    }

    #[test]
    fn the_hash_sees_every_byte() {
        for len in 0..40_usize {
            let a: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            for i in 0..len {
                let mut b = a.clone();
                b[i] ^= 0x20;
                assert_ne!(
                    LineCache::hash(5, &a, b""),
                    LineCache::hash(5, &b, b""),
                    "len {len}, byte {i}"
                );
            }
        }
    }

    #[test]
    fn a_set_keeps_the_entry_hit_last() {
        let mut cache = LineCache::default();
        cache.claim(1);
        // Three keys in one set (same hash, told apart by their bytes).
        let h = 42;
        cache.insert(h, b"a", b"c", b"A", placement(0));
        cache.insert(h, b"b", b"c", b"B", placement(1));
        assert!(cache.get(h, b"a", b"c").is_some());
        cache.insert(h, b"d", b"c", b"D", placement(2));
        assert!(cache.get(h, b"a", b"c").is_some(), "hit last, kept");
        assert!(cache.get(h, b"b", b"c").is_none(), "replaced");
        assert!(cache.get(h, b"d", b"c").is_some());
        // Too long to keep: not cached, and nothing evicted.
        let long = vec![b'x'; MAX_ENTRY_BYTES];
        cache.insert(h, &long, b"c", b"L", placement(3));
        assert!(cache.get(h, &long, b"c").is_none());
        assert!(cache.get(h, b"a", b"c").is_some() && cache.get(h, b"d", b"c").is_some());
    }
}
