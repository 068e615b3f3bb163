//! The cumulative stream table: the last point of every cumulative stream, bounded.
//!
//! A stream is resource + scope + metric + point attributes (the OpenTelemetry data
//! model's identity), encoded whole as the key: two streams never share an entry.
//!
//! Bounded by two generations: new and refreshed streams go into the young map; when it
//! holds half the capacity, the old map is dropped (its streams counted as evicted) and
//! the young one becomes old. A stream seen at least once per half-capacity of new
//! streams is never evicted; the total stays at most the capacity; every step is O(1).

use hashbrown::HashMap;

/// What the table remembers of one cumulative stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Last {
    /// `start_time_unix_nano` of the stream's last point.
    pub start: u64,
    /// `time_unix_nano` of the stream's last point.
    pub time: u64,
    /// The value of the stream's last point.
    pub value: i64,
}

/// The last point per cumulative stream, at most `capacity` streams.
#[derive(Debug)]
pub struct Streams {
    young: HashMap<Box<[u8]>, Last>,
    old: HashMap<Box<[u8]>, Last>,
    capacity: usize,
    /// Streams whose start time is at or after this (Unix nanoseconds) cannot have been
    /// seen before the table began or before its last eviction: their first point is all
    /// new. Earlier-started streams seen for the first time only set a baseline.
    complete_since: u64,
    evicted: u64,
}

impl Streams {
    /// An empty table for at most `capacity` streams (at least 2), complete since
    /// `now_unix_nanos` (the sidecar's start).
    pub fn new(capacity: usize, now_unix_nanos: u64) -> Streams {
        Streams {
            young: HashMap::new(),
            old: HashMap::new(),
            capacity: capacity.max(2),
            complete_since: now_unix_nanos,
            evicted: 0,
        }
    }

    /// The stream's last point, if the table still holds it.
    pub fn get(&self, key: &[u8]) -> Option<Last> {
        self.young.get(key).or_else(|| self.old.get(key)).copied()
    }

    /// Records `last` as the stream's last point. `now_unix_nanos` is when, for the
    /// completeness mark an eviction moves.
    pub fn set(&mut self, key: &[u8], last: Last, now_unix_nanos: u64) {
        if let Some(slot) = self.young.get_mut(key) {
            *slot = last;
            return;
        }
        let owned: Box<[u8]> = match self.old.remove_entry(key) {
            Some((owned, _)) => owned,
            None => key.into(),
        };
        if self.young.len() >= self.capacity / 2 {
            let dropped = std::mem::take(&mut self.old);
            if !dropped.is_empty() {
                self.evicted += dropped.len() as u64;
                self.complete_since = self.complete_since.max(now_unix_nanos);
            }
            self.old = std::mem::take(&mut self.young);
        }
        self.young.insert(owned, last);
    }

    /// Whether a stream first seen now with this start time started after everything the
    /// table may have forgotten (so its whole value is new).
    pub fn is_complete_for(&self, start_unix_nanos: u64) -> bool {
        start_unix_nanos != 0 && start_unix_nanos >= self.complete_since
    }

    /// Streams held.
    pub fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }

    /// Whether no stream is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Streams evicted so far.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last(value: i64) -> Last {
        Last {
            start: 1,
            time: 2,
            value,
        }
    }

    #[test]
    fn bounded_with_counted_evictions_and_recent_streams_kept() {
        let mut t = Streams::new(4, 100);
        t.set(b"a", last(1), 100);
        t.set(b"b", last(2), 100);
        // Young is full (2): the next new stream ages it; nothing is evicted yet.
        t.set(b"c", last(3), 100);
        assert_eq!(t.evicted(), 0);
        assert_eq!(t.len(), 3);
        // `a` is refreshed: it moves back to young.
        t.set(b"a", last(4), 100);
        assert_eq!(t.get(b"a"), Some(last(4)));
        // The next new stream drops the old generation: `b` only.
        t.set(b"d", last(5), 200);
        assert_eq!(t.evicted(), 1);
        assert_eq!(t.get(b"b"), None);
        assert_eq!(t.get(b"a"), Some(last(4)));
        assert!(t.len() <= 4);
        // After an eviction only streams started since it are complete.
        assert!(!t.is_complete_for(150));
        assert!(t.is_complete_for(200));
        assert!(!t.is_complete_for(0));
    }

    #[test]
    fn never_more_than_capacity() {
        let mut t = Streams::new(10, 0);
        for i in 0u32..1000 {
            t.set(&i.to_le_bytes(), last(1), u64::from(i));
            assert!(t.len() <= 10);
        }
        assert!(t.evicted() >= 990);
    }
}
