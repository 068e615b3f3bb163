//! The cumulative stream table: the last point of every cumulative stream, bounded.
//!
//! A stream is resource + scope + metric + point attributes (the OpenTelemetry data
//! model's identity), encoded whole and hashed to a 128-bit [`StreamId`]: 40 bytes per
//! stream whatever its attributes, in memory and in the state directory's file (see
//! `persist`). Two of a million streams share an id with a probability below 10^-26.
//!
//! Bounded by two generations: new and refreshed streams go into the young map; when it
//! holds the capacity, the old map is dropped (its streams counted as evicted) and the
//! young one becomes old. A stream seen at least once among any `capacity` streams seen
//! in a row is never evicted, so up to `capacity` streams sending a point per export
//! interval are all kept, however they interleave; the table holds at most twice the
//! capacity (the generation being filled and the one before); every step is O(1) but an
//! eviction, which reads the start times of the generation it drops to move the
//! completeness mark past them (once per `capacity` new streams).
//! (Generations of half the capacity each would hold at most the capacity, but then
//! keep only half of it for sure: more than half active, and some would be evicted
//! every interval, each losing one interval's difference.)

use std::hash::{BuildHasher, Hasher};

use hashbrown::HashMap;

use crate::state::ingest_log::streams::mark_after_forgetting;

/// A cumulative stream's identity: a 128-bit hash of its encoded resource, scope, metric
/// and attributes.
pub type StreamId = u128;

/// The two seeds of [`stream_id`]'s halves.
const SEEDS: [u64; 2] = [0x6f74_6c70_5f73_7472, 0x6561_6d5f_6964_7631];

/// The id of a stream from its encoded identity. Stable for a given build of the hasher
/// (the state file records [`stream_id`] of a probe, so a build that hashes differently
/// does not misread it).
pub fn stream_id(encoded: &[u8]) -> StreamId {
    let half = |seed: u64| {
        let mut h = foldhash::quality::FixedState::with_seed(seed).build_hasher();
        h.write(encoded);
        h.finish()
    };
    (u128::from(half(SEEDS[0])) << 64) | u128::from(half(SEEDS[1]))
}

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

/// The last point per cumulative stream: every stream seen among the last `capacity`
/// distinct ones, at most twice `capacity` streams in all.
#[derive(Debug, Clone)]
pub struct Streams {
    young: HashMap<StreamId, Last>,
    old: HashMap<StreamId, Last>,
    capacity: usize,
    /// Streams whose start time is at or after this (Unix nanoseconds) cannot have been
    /// counted before the table began, nor forgotten by an eviction: their first point is
    /// all new (see [`Streams::is_complete_for`]). Earlier-started streams seen for the
    /// first time only set a baseline. An eviction moves it past now and past the start
    /// of every stream it drops.
    complete_since: u64,
    evicted: u64,
    /// Bumped by every change (a point recorded, an eviction): what was saved is current
    /// while this has not moved.
    generation: u64,
    /// The changes made since [`Streams::track`], while tracking.
    changes: Option<Vec<Change>>,
}

/// A change [`Streams::set`] made while tracking: a durable request writes each one
/// with its increments, and takes it back if they could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    /// The stream.
    pub id: StreamId,
    /// What the table held before (none: the stream was new to it).
    pub before: Option<Last>,
    /// What it holds now.
    pub after: Last,
}

impl Streams {
    /// An empty table keeping `capacity` streams (at least 2; see [`Streams`]),
    /// complete since `now_unix_nanos` (the sidecar's start).
    pub fn new(capacity: usize, now_unix_nanos: u64) -> Streams {
        Streams {
            young: HashMap::new(),
            old: HashMap::new(),
            capacity: capacity.max(2),
            complete_since: now_unix_nanos,
            evicted: 0,
            generation: 0,
            changes: None,
        }
    }

    /// A table keeping `capacity` streams holding `entries` (oldest first), complete
    /// since `complete_since`: the table a previous run saved. Entries beyond the
    /// capacity evict the oldest as usual (counted; the mark moves as at any eviction).
    pub fn restore(
        capacity: usize,
        complete_since: u64,
        entries: impl IntoIterator<Item = (StreamId, Last)>,
        now_unix_nanos: u64,
    ) -> Streams {
        let mut table = Streams::new(capacity, complete_since);
        for (id, last) in entries {
            table.set(id, last, now_unix_nanos);
        }
        table.generation = 0;
        table
    }

    /// The stream's last point, if the table still holds it.
    pub fn get(&self, id: StreamId) -> Option<Last> {
        self.young.get(&id).or_else(|| self.old.get(&id)).copied()
    }

    /// Records `last` as the stream's last point. `now_unix_nanos` is when, for the
    /// completeness mark an eviction moves.
    pub fn set(&mut self, id: StreamId, last: Last, now_unix_nanos: u64) {
        self.generation += 1;
        if self.changes.is_some() {
            let before = self.get(id);
            if let Some(changes) = &mut self.changes {
                changes.push(Change {
                    id,
                    before,
                    after: last,
                });
            }
        }
        if let Some(slot) = self.young.get_mut(&id) {
            *slot = last;
            return;
        }
        self.old.remove(&id);
        if self.young.len() >= self.capacity {
            let dropped = std::mem::take(&mut self.old);
            // Past the dropped streams' starts, not only now: an exporter whose clock runs
            // ahead sends starts later than this moment (see `mark_after_forgetting`).
            if let Some(latest_start) = dropped.values().map(|l| l.start).max() {
                self.evicted += dropped.len() as u64;
                self.complete_since =
                    mark_after_forgetting(self.complete_since, latest_start, now_unix_nanos);
            }
            self.old = std::mem::take(&mut self.young);
        }
        self.young.insert(id, last);
    }

    /// Records `last` unless the table holds a later point of the stream (a later start,
    /// then a later time, as [`mod@super::convert`] orders them): the order in which points
    /// arrive from several files does not matter.
    pub fn set_latest(&mut self, id: StreamId, last: Last, now_unix_nanos: u64) {
        if self
            .get(id)
            .is_some_and(|held| (held.start, held.time) > (last.start, last.time))
        {
            return;
        }
        self.set(id, last, now_unix_nanos);
    }

    /// Moves the completeness mark to `mark` if later (a table merged from two sources
    /// is complete only since the later of their marks).
    pub fn raise_complete_since(&mut self, mark: u64) {
        self.complete_since = self.complete_since.max(mark);
    }

    /// Sets the completeness mark (a table read back from the ingest log's file takes
    /// that file's mark).
    pub fn set_complete_since(&mut self, mark: u64) {
        self.complete_since = mark;
    }

    /// Starts keeping every change [`Streams::set`] makes, until
    /// [`Streams::take_changes`].
    pub fn track(&mut self) {
        self.changes = Some(Vec::new());
    }

    /// The changes made since [`Streams::track`], in order; stops keeping them.
    pub fn take_changes(&mut self) -> Vec<Change> {
        self.changes.take().unwrap_or_default()
    }

    /// Takes `changes` back, last first: each stream holds what it held before them (a
    /// stream an eviction dropped meanwhile stays dropped; the eviction moved the mark).
    pub fn undo(&mut self, changes: &[Change]) {
        self.generation += 1;
        for change in changes.iter().rev() {
            match change.before {
                Some(before) => {
                    if let Some(slot) = self.young.get_mut(&change.id) {
                        *slot = before;
                    } else if let Some(slot) = self.old.get_mut(&change.id) {
                        *slot = before;
                    }
                }
                None => {
                    self.young.remove(&change.id);
                    self.old.remove(&change.id);
                }
            }
        }
    }

    /// Whether a stream first seen at `now_unix_nanos` with this start time started after
    /// everything the table may have forgotten (so its whole value is new): at or after
    /// the mark, and not after now. A start after now says the exporter's clock runs
    /// ahead of the sidecar's. The mark of a table that began without the previous run's
    /// (lost, damaged, never saved) is only this run's start, which says nothing of such
    /// a stream: the previous run may have counted it.
    pub fn is_complete_for(&self, start_unix_nanos: u64, now_unix_nanos: u64) -> bool {
        start_unix_nanos != 0
            && start_unix_nanos >= self.complete_since
            && start_unix_nanos <= now_unix_nanos
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

    /// Unix nanoseconds since which a stream's first point is all new (see
    /// [`Streams::is_complete_for`]).
    pub fn complete_since(&self) -> u64 {
        self.complete_since
    }

    /// Changes so far (only compared for equality: has anything changed since then).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Every stream held, the older generation first (the order [`Streams::restore`]
    /// takes them in, so a restored table evicts the same generation next).
    pub fn entries(&self) -> impl Iterator<Item = (StreamId, Last)> + '_ {
        self.old
            .iter()
            .chain(self.young.iter())
            .map(|(id, last)| (*id, *last))
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
        let [a, b, c, d] = [1, 2, 3, 4];
        let mut t = Streams::new(2, 100);
        t.set(a, last(1), 100);
        t.set(b, last(2), 100);
        // Young is full (2): the next new stream ages it; nothing is evicted yet.
        t.set(c, last(3), 100);
        assert_eq!(t.evicted(), 0);
        assert_eq!(t.len(), 3);
        // `a` is refreshed: it moves back to young.
        t.set(a, last(4), 100);
        assert_eq!(t.get(a), Some(last(4)));
        // The next new stream drops the old generation: `b` only.
        t.set(d, last(5), 200);
        assert_eq!(t.evicted(), 1);
        assert_eq!(t.get(b), None);
        assert_eq!(t.get(a), Some(last(4)));
        assert!(t.len() <= 4);
        // After an eviction only streams started since it are complete.
        assert!(!t.is_complete_for(150, 300));
        assert!(t.is_complete_for(200, 300));
        assert!(!t.is_complete_for(0, 300));
    }

    /// An exporter whose clock runs ahead: stream `x` starts at 1 500 by its clock while
    /// the sidecar's reads 1 000. Evicted at 1 200, `x` must stay incomplete once the
    /// sidecar's clock passes its start, or its next point would count its whole value
    /// a second time.
    #[test]
    fn an_eviction_moves_the_mark_past_the_dropped_start_times() {
        let ahead = Last {
            start: 1_500,
            time: 1_550,
            value: 100,
        };
        let mut t = Streams::new(2, 1_000);
        t.set(9, ahead, 1_000);
        for id in 1..=4 {
            t.set(id, last(1), 1_200);
        }
        assert_eq!(t.get(9), None, "evicted");
        assert_eq!(t.complete_since(), 1_501);
        assert!(!t.is_complete_for(1_500, 1_600));
        assert!(
            t.is_complete_for(1_501, 1_600),
            "a stream started later is new"
        );
    }

    /// A start after now is not complete whatever the mark (a table that began without
    /// a file cannot know what a previous run counted of a stream whose exporter's clock
    /// runs ahead), and once now passes it the mark decides again.
    #[test]
    fn a_start_after_now_is_not_complete() {
        let t = Streams::new(8, 1_000);
        assert!(!t.is_complete_for(1_500, 1_100));
        assert!(t.is_complete_for(1_500, 1_500));
        assert!(!t.is_complete_for(900, 1_100), "before the mark");
    }

    /// A start absurdly far ahead (an exporter's clock years off) moves the mark at most
    /// an hour past the eviction: not every new stream's first point a baseline for years.
    #[test]
    fn an_absurd_start_moves_the_mark_at_most_an_hour_ahead() {
        use crate::state::ingest_log::streams::MAX_START_AHEAD_NANOS;
        let mut t = Streams::new(2, 1_000);
        let absurd = Last {
            start: u64::MAX - 1,
            time: u64::MAX,
            value: 1,
        };
        t.set(9, absurd, 1_000);
        for id in 1..=4 {
            t.set(id, last(1), 1_200);
        }
        assert_eq!(t.get(9), None, "evicted");
        assert_eq!(t.complete_since(), 1_200 + MAX_START_AHEAD_NANOS);
    }

    #[test]
    fn never_more_than_twice_the_capacity() {
        let mut t = Streams::new(10, 0);
        for i in 0u32..1000 {
            t.set(u128::from(i), last(1), u64::from(i));
            assert!(t.len() <= 20);
        }
        assert!(t.evicted() >= 980);
    }

    /// As many streams as the capacity, each sending a point per interval in any order:
    /// none is ever evicted (with generations of half the capacity, some were, every
    /// interval, each losing one interval's difference).
    #[test]
    fn streams_up_to_the_capacity_are_all_kept() {
        let mut t = Streams::new(100, 0);
        let mut rng = fastrand::Rng::with_seed(7);
        let mut ids: Vec<u128> = (0..100).collect();
        for round in 0..20 {
            rng.shuffle(&mut ids);
            for &id in &ids {
                t.set(id, last(round), 1);
            }
        }
        assert_eq!(t.evicted(), 0);
        assert_eq!(t.len(), 100);
    }

    /// A restored table holds what was saved, in the same recency order (so the same
    /// streams are evicted next), complete since the saved mark, and unchanged.
    #[test]
    fn restore_keeps_entries_recency_and_the_completeness_mark() {
        let mut t = Streams::new(8, 100);
        for id in 1..=6 {
            t.set(id, last(id as i64), 150);
        }
        t.set(1, last(10), 150);
        assert_eq!(t.evicted(), 0);
        let saved: Vec<_> = t.entries().collect();
        let r = Streams::restore(8, t.complete_since(), saved.clone(), 900);
        assert_eq!(r.entries().collect::<Vec<_>>().len(), saved.len());
        for (id, l) in &saved {
            assert_eq!(r.get(*id), Some(*l));
        }
        assert_eq!(r.complete_since(), 100);
        assert_eq!(r.evicted(), 0);
        assert_eq!(r.generation(), 0);
        // Restored into a smaller table: the oldest go, counted, and the mark moves.
        let small = Streams::restore(2, 100, saved.clone(), 900);
        assert!(small.len() <= 4);
        assert!(small.evicted() > 0);
        assert_eq!(small.evicted() as usize + small.len(), saved.len());
        assert_eq!(small.complete_since(), 900);
        for (id, l) in small.entries() {
            assert!(saved.contains(&(id, l)));
        }
    }

    #[test]
    fn stream_ids_differ_and_are_stable() {
        assert_ne!(stream_id(b"a"), stream_id(b"b"));
        assert_eq!(stream_id(b"a"), stream_id(b"a"));
        assert_ne!(stream_id(b""), stream_id(b"\0"));
    }

    /// A tracked request's changes, undone, leave the table as before it: values back,
    /// new streams gone; an untracked change is not kept.
    #[test]
    fn tracked_changes_are_undone_last_first() {
        let mut t = Streams::new(8, 100);
        t.set(1, last(5), 100);
        t.track();
        t.set(1, last(7), 100);
        t.set(1, last(9), 100);
        t.set(2, last(3), 100);
        let changes = t.take_changes();
        assert_eq!(changes.len(), 3);
        assert_eq!(changes[0].before, Some(last(5)));
        t.set(3, last(1), 100);
        assert!(t.take_changes().is_empty(), "not tracking any more");
        t.undo(&changes);
        assert_eq!(t.get(1), Some(last(5)));
        assert_eq!(t.get(2), None);
        assert_eq!(t.get(3), Some(last(1)));
    }

    /// `set_latest` keeps the later point whatever the order.
    #[test]
    fn set_latest_keeps_the_later_point() {
        let at = |time, value| Last {
            start: 1,
            time,
            value,
        };
        let mut t = Streams::new(8, 0);
        t.set_latest(1, at(20, 9), 0);
        t.set_latest(1, at(10, 5), 0);
        assert_eq!(t.get(1), Some(at(20, 9)));
        t.set_latest(1, at(20, 9), 0);
        t.set_latest(1, at(30, 11), 0);
        assert_eq!(t.get(1), Some(at(30, 11)));
    }
}
