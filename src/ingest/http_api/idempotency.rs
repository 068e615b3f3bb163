//! The `Idempotency-Key` table: which keys this process answered, with the answer, for
//! `ingest.http.idempotency_window`.
//!
//! The semantics of the IETF httpapi draft "The Idempotency-Key HTTP Header Field":
//!
//! | the key is | and the body | answer |
//! |---|---|---|
//! | new (or its window passed) | any | the request is applied; a 200 answer is kept with the key |
//! | answered | the same | the kept answer again, nothing applied (`Idempotent-Replayed: true`) |
//! | answered | another | 422, nothing applied |
//! | in flight (another request with it is being applied) | any | 409, nothing applied |
//!
//! Only an answer that applied something is kept: a refusal (400, 413, 429) applied
//! nothing, so the key is forgotten and the client's retry is applied as new. The table
//! holds at most `ingest.http.max_idempotency_keys` answered keys; past it the oldest is
//! forgotten early (counted as evicted), and a key seen again after that counts again:
//! size the bound to the keys a client may retry within the window.
//!
//! Plain synchronous code, time passed in.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::time::{Duration, Instant};

use foldhash::quality::FixedState;

/// An answer kept for its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    /// The HTTP status.
    pub status: u16,
    /// The JSON body.
    pub body: Vec<u8>,
}

/// What to do with a request that carries a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Begin {
    /// Apply it; then [`Idempotency::finish`] the key.
    Apply,
    /// Answer this again, applying nothing.
    Replay(Kept),
    /// 409: a request with this key is being applied.
    InFlight,
    /// 422: this key was answered for another body.
    OtherBody,
}

/// How a key's entry stands.
#[derive(Debug)]
enum State {
    InFlight,
    Answered { at: Instant, answer: Kept },
}

#[derive(Debug)]
struct Entry {
    body_hash: u64,
    state: State,
}

/// The keys seen, bounded by age and count.
#[derive(Debug)]
pub struct Idempotency {
    entries: HashMap<String, Entry>,
    /// Answered keys, oldest first, with the time they were answered (the entry's own
    /// time decides: a key answered again after eviction is further back in the queue).
    answered: VecDeque<(Instant, String)>,
    window: Duration,
    max_keys: usize,
    /// Seeded with a secret (random per process, or the ingest log's, kept in the state
    /// directory, when keys outlive a restart): a client cannot make two bodies collide
    /// on purpose.
    hasher: FixedState,
    /// Answered keys forgotten before their window passed, to stay within `max_keys`.
    evicted: u64,
}

impl Idempotency {
    /// A table keeping answers for `window`, at most `max_keys` of them.
    pub fn new(window: Duration, max_keys: usize) -> Idempotency {
        Idempotency::with_seed(window, max_keys, fastrand::u64(..))
    }

    /// The same, hashing bodies with `seed` (the ingest log's, so that hashes written
    /// before a restart compare with those made after it).
    pub fn with_seed(window: Duration, max_keys: usize, seed: u64) -> Idempotency {
        Idempotency {
            entries: HashMap::new(),
            answered: VecDeque::new(),
            window,
            max_keys: max_keys.max(1),
            hasher: FixedState::with_seed(seed),
            evicted: 0,
        }
    }

    /// The hash a body is compared by.
    pub fn body_hash(&self, body: &[u8]) -> u64 {
        self.hasher.hash_one(body)
    }

    /// Puts back a key answered `age` before `now` (by an earlier process, read from the
    /// ingest log): nothing when its window has passed. Restored oldest first, a later
    /// answer of a key replaces an earlier one.
    pub fn restore(
        &mut self,
        key: &str,
        body_hash: u64,
        answer: Kept,
        age: Duration,
        now: Instant,
    ) {
        if age >= self.window {
            return;
        }
        let at = now.checked_sub(age).unwrap_or(now);
        self.entries.insert(
            key.to_owned(),
            Entry {
                body_hash,
                state: State::Answered { at, answer },
            },
        );
        self.answered.push_back((at, key.to_owned()));
        while self.answered_len() > self.max_keys {
            if self.forget_oldest().is_some() {
                self.evicted += 1;
            }
        }
    }

    /// A request with `key` and `body` arrives at `now`.
    pub fn begin(&mut self, key: &str, body: &[u8], now: Instant) -> Begin {
        self.expire(now);
        let body_hash = self.body_hash(body);
        if let Some(entry) = self.entries.get(key) {
            return match (&entry.state, entry.body_hash == body_hash) {
                (State::InFlight, _) => Begin::InFlight,
                (State::Answered { .. }, false) => Begin::OtherBody,
                (State::Answered { answer, .. }, true) => Begin::Replay(answer.clone()),
            };
        }
        self.entries.insert(
            key.to_owned(),
            Entry {
                body_hash,
                state: State::InFlight,
            },
        );
        Begin::Apply
    }

    /// The request [`Begin::Apply`] let through ended at `now`: `Some` keeps its answer
    /// for the window, `None` (nothing was applied) forgets the key.
    pub fn finish(&mut self, key: &str, answer: Option<Kept>, now: Instant) {
        let Some(answer) = answer else {
            self.entries.remove(key);
            return;
        };
        if let Some(entry) = self.entries.get_mut(key) {
            entry.state = State::Answered { at: now, answer };
            self.answered.push_back((now, key.to_owned()));
        }
        while self.answered_len() > self.max_keys {
            if self.forget_oldest().is_some() {
                self.evicted += 1;
            }
        }
    }

    /// Keys answered and kept now.
    pub fn answered_len(&self) -> usize {
        self.answered.len()
    }

    /// Answered keys forgotten early, to stay within the bound.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Forgets the answers whose window has passed at `now`.
    fn expire(&mut self, now: Instant) {
        while let Some((at, _)) = self.answered.front() {
            if now.saturating_duration_since(*at) < self.window {
                break;
            }
            self.forget_oldest();
        }
    }

    /// Forgets the oldest answered key; its name.
    fn forget_oldest(&mut self) -> Option<String> {
        let (at, key) = self.answered.pop_front()?;
        // Only if the entry is still the one this queue slot recorded.
        if let Some(Entry {
            state: State::Answered { at: answered, .. },
            ..
        }) = self.entries.get(&key)
            && *answered == at
        {
            self.entries.remove(&key);
        }
        Some(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(body: &str) -> Option<Kept> {
        Some(Kept {
            status: 200,
            body: body.as_bytes().to_vec(),
        })
    }

    #[test]
    fn the_four_cases_of_the_draft() {
        let t0 = Instant::now();
        let mut keys = Idempotency::new(Duration::from_secs(600), 100);
        assert_eq!(keys.begin("k", b"body", t0), Begin::Apply);
        assert_eq!(keys.begin("k", b"body", t0), Begin::InFlight);
        assert_eq!(keys.begin("k", b"other", t0), Begin::InFlight);
        keys.finish("k", ok("{\"accepted\":1}"), t0);
        assert_eq!(
            keys.begin("k", b"body", t0 + Duration::from_secs(1)),
            Begin::Replay(ok("{\"accepted\":1}").unwrap())
        );
        assert_eq!(keys.begin("k", b"other", t0), Begin::OtherBody);
        assert_eq!(keys.begin("j", b"body", t0), Begin::Apply, "keys are apart");
    }

    #[test]
    fn a_restored_key_replays_within_its_window_only() {
        let now = Instant::now();
        let window = Duration::from_secs(600);
        let earlier = Idempotency::with_seed(window, 100, 7);
        let mut keys = Idempotency::with_seed(window, 100, 7);
        let hash = earlier.body_hash(b"body");
        keys.restore("k", hash, ok("a").unwrap(), Duration::from_secs(30), now);
        keys.restore("old", hash, ok("b").unwrap(), window, now);
        assert_eq!(
            keys.begin("k", b"body", now),
            Begin::Replay(ok("a").unwrap())
        );
        assert_eq!(keys.begin("k", b"other", now), Begin::OtherBody);
        assert_eq!(
            keys.begin("old", b"body", now),
            Begin::Apply,
            "its window passed"
        );
        // Another seed hashes the same body otherwise: the seed must be the log's.
        let other = Idempotency::with_seed(window, 100, 8);
        assert_ne!(other.body_hash(b"body"), hash);
    }

    #[test]
    fn a_refused_request_forgets_its_key() {
        let t0 = Instant::now();
        let mut keys = Idempotency::new(Duration::from_secs(600), 100);
        assert_eq!(keys.begin("k", b"body", t0), Begin::Apply);
        keys.finish("k", None, t0);
        assert_eq!(
            keys.begin("k", b"body", t0),
            Begin::Apply,
            "the retry applies"
        );
        assert_eq!(keys.answered_len(), 0);
    }

    #[test]
    fn answers_are_kept_for_the_window_and_within_the_bound() {
        let t0 = Instant::now();
        let window = Duration::from_secs(600);
        let mut keys = Idempotency::new(window, 2);
        for (i, key) in ["a", "b", "c"].iter().enumerate() {
            assert_eq!(keys.begin(key, b"x", t0), Begin::Apply);
            keys.finish(key, ok(key), t0 + Duration::from_secs(i as u64));
        }
        assert_eq!((keys.answered_len(), keys.evicted()), (2, 1));
        assert_eq!(
            keys.begin("a", b"x", t0),
            Begin::Apply,
            "evicted: new again"
        );
        keys.finish("a", None, t0);
        assert!(matches!(keys.begin("b", b"x", t0), Begin::Replay(_)));
        // b was answered at t0 + 1 s, c at t0 + 2 s.
        let later = t0 + Duration::from_secs(1) + window;
        assert_eq!(
            keys.begin("b", b"x", later),
            Begin::Apply,
            "its window passed"
        );
        assert!(matches!(keys.begin("c", b"x", later), Begin::Replay(_)));
        assert_eq!(keys.evicted(), 1, "expiry is not eviction");
    }
}
