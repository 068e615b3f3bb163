//! A short cache in front of the read path (seed 001: a sharded counter costs one read
//! per shard, "so cache the sum for a few seconds on the read side").
//!
//! [`TtlCache`] is the synchronous core, with time passed in; [`CachedReader`] is the
//! async shell the in-process API uses. Two callers missing the same key at once both
//! read (no request coalescing): the cache bounds the read rate per key to one per TTL
//! per caller, which is what a dashboard refresh needs.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::bucket::Day;
use crate::config::{ConsistencyLevel, ReadConfig};
use crate::family::Families;
use crate::vocabulary::Granularity;

use super::read::{CounterRef, ReadError, Reader, value_at};

/// Values kept for `ttl`, at most `max_entries` of them.
pub struct TtlCache<K, V> {
    ttl: Duration,
    max_entries: usize,
    entries: HashMap<K, (Instant, V)>,
}

impl<K: Hash + Eq + Clone, V: Clone> TtlCache<K, V> {
    /// An empty cache; a zero `ttl` keeps nothing.
    pub fn new(ttl: Duration, max_entries: usize) -> TtlCache<K, V> {
        TtlCache {
            ttl,
            max_entries: max_entries.max(1),
            entries: HashMap::new(),
        }
    }

    /// The value stored for `key` less than `ttl` before `now`.
    pub fn get(&self, key: &K, now: Instant) -> Option<V> {
        let (at, value) = self.entries.get(key)?;
        (now.saturating_duration_since(*at) < self.ttl).then(|| value.clone())
    }

    /// Stores `value` as read at `now`. When full, expired entries go first, then the
    /// oldest one.
    pub fn insert(&mut self, key: K, value: V, now: Instant) {
        if self.ttl.is_zero() {
            return;
        }
        if self.entries.len() >= self.max_entries && !self.entries.contains_key(&key) {
            let ttl = self.ttl;
            self.entries
                .retain(|_, (at, _)| now.saturating_duration_since(*at) < ttl);
            if self.entries.len() >= self.max_entries
                && let Some(oldest) = self
                    .entries
                    .iter()
                    .min_by_key(|(_, (at, _))| *at)
                    .map(|(k, _)| k.clone())
            {
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(key, (now, value));
    }

    /// Number of entries held (expired ones included until they are pushed out).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

type Key = (CounterRef, Granularity, Day);

/// The read path with the cache of `[read]` in front.
pub struct CachedReader {
    reader: Reader,
    consistency: ConsistencyLevel,
    cache: Mutex<TtlCache<Key, Arc<BTreeMap<i64, i64>>>>,
}

impl CachedReader {
    /// Reads through `reader` with the consistency and cache of `config`.
    pub fn new(reader: Reader, config: &ReadConfig) -> CachedReader {
        CachedReader {
            reader,
            consistency: config.consistency,
            cache: Mutex::new(TtlCache::new(config.cache_ttl, config.cache_max_entries)),
        }
    }

    /// The uncached reader underneath.
    pub fn reader(&self) -> &Reader {
        &self.reader
    }

    /// The series of `counter` in its `kind` table for `day` (see [`Reader::series`]),
    /// from the cache when fresh.
    pub async fn series(
        &self,
        families: &Families,
        counter: &CounterRef,
        kind: Granularity,
        day: Day,
    ) -> Result<Arc<BTreeMap<i64, i64>>, ReadError> {
        // The total's read does not depend on the day: one entry for it.
        let day = if kind == Granularity::Total {
            Day(0)
        } else {
            day
        };
        let key = (counter.clone(), kind, day);
        if let Some(hit) = self.cache.lock().get(&key, Instant::now()) {
            return Ok(hit);
        }
        let series = Arc::new(
            self.reader
                .series(families, counter, kind, day, self.consistency)
                .await?,
        );
        self.cache
            .lock()
            .insert(key, series.clone(), Instant::now());
        Ok(series)
    }

    /// The day total of `counter`, from the cache when fresh.
    pub async fn day_total(
        &self,
        families: &Families,
        counter: &CounterRef,
        day: Day,
    ) -> Result<i64, ReadError> {
        let series = self
            .series(families, counter, Granularity::Day, day)
            .await?;
        Ok(value_at(&series, Granularity::Day, day))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_expire_after_the_ttl() {
        let start = Instant::now();
        let mut cache = TtlCache::new(Duration::from_secs(5), 10);
        cache.insert("a", 1, start);
        assert_eq!(cache.get(&"a", start + Duration::from_secs(4)), Some(1));
        assert_eq!(cache.get(&"a", start + Duration::from_secs(5)), None);
        assert_eq!(cache.get(&"b", start), None);
    }

    #[test]
    fn a_full_cache_drops_expired_entries_then_the_oldest() {
        let start = Instant::now();
        let mut cache = TtlCache::new(Duration::from_secs(5), 2);
        cache.insert("a", 1, start);
        cache.insert("b", 2, start + Duration::from_secs(1));
        cache.insert("c", 3, start + Duration::from_secs(2));
        assert_eq!(cache.len(), 2);
        let now = start + Duration::from_secs(2);
        assert_eq!(cache.get(&"a", now), None, "the oldest went");
        assert_eq!(
            (cache.get(&"b", now), cache.get(&"c", now)),
            (Some(2), Some(3))
        );
        cache.insert(
            "d",
            4,
            start + Duration::from_secs(6) + Duration::from_millis(1),
        );
        let later = start + Duration::from_millis(6_500);
        assert_eq!(cache.get(&"b", later), None, "expired, pushed out first");
        assert_eq!(
            (cache.get(&"c", later), cache.get(&"d", later)),
            (Some(3), Some(4))
        );
    }

    #[test]
    fn a_zero_ttl_keeps_nothing() {
        let mut cache = TtlCache::new(Duration::ZERO, 2);
        cache.insert("a", 1, Instant::now());
        assert!(cache.is_empty());
    }
}
