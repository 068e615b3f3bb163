//! Cardinality caps: how many distinct contexts a family, and how many distinct values
//! a tag, may bring in one window, and what an operator reads when one explodes.
//!
//! # What is counted, and when
//!
//! A *context* is a series of a family (the generic family's metric name and canonical
//! tags, or a configured family's key values). Within one window (`cardinality.window`,
//! tumbling windows aligned on multiples of its length in Unix time: with the default
//! `1m`, the calendar minute an untimestamped line is counted in) a family admits at
//! most `max_contexts` distinct contexts, and a tag at most `max_tag_values` distinct
//! values. The window follows the receive time, not a client timestamp, so a burst of
//! late lines cannot open old windows again; like the DogStatsD aggregator's context
//! limit per aggregation window, a new window starts from zero. Time only moves forward
//! here: a time before the current window (threads racing across a boundary) counts in
//! the current one.
//!
//! The check runs only where a pending row is *created* ([`super::Buffer`]): adding to a
//! row that exists costs nothing more, and a context admitted earlier in the window is
//! admitted again at once (one look-up under the family's lock) when its row is created
//! again after a flush, in another stripe or for another minute. A refused increment is
//! counted as dropped (`cardinality_tag` when a tag cap refused it, checked first, else
//! `cardinality_family`) in the stripe's counters, so the accounting identity keeps it,
//! and per family here; the first refusal of a window logs one warning naming the family
//! and the tag.
//!
//! Plain synchronous code with the time passed in; families without a cap are not
//! tracked and cost one bounds check. A live reload may change the caps (not the window
//! length): see [`Cardinality::replace_caps`].

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::series;
use crate::vocabulary::{DropReason, FamilyId};

/// Sample values kept per tag and window, for the view.
pub const SAMPLES_PER_TAG: usize = 3;

/// Most tag names tracked per family and window (a generic family whose tag *names*
/// explode would otherwise grow this without bound); later names are neither counted nor
/// capped.
pub const MAX_TRACKED_TAGS: usize = 256;

/// Tags listed per window in the view, the most distinct values first.
pub const TAGS_IN_VIEW: usize = 10;

/// How a family's series holds its tags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TagSource {
    /// The generic family: the series is (metric name, canonical tags `k:v,k2:v2`).
    Generic,
    /// A configured family: one series field per key column, named so.
    Keyed(Vec<String>),
}

/// The caps of one family, resolved from the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FamilyCaps {
    /// The family's id.
    pub family: FamilyId,
    /// Its name, for the view, the metrics and the log.
    pub name: String,
    /// Where its tag values are in a series.
    pub source: TagSource,
    /// Most distinct contexts per window; `None`: not capped (still counted).
    pub max_contexts: Option<usize>,
    /// Most distinct values per window of the named tags.
    pub max_tag_values: Vec<(String, usize)>,
}

/// Every family's tracker (those with a cap), and the window length.
pub struct Cardinality {
    window_secs: i64,
    /// Indexed by family id; `None` for families without caps. Replaced whole when a
    /// reload changes the caps (see [`Cardinality::replace_caps`]), read once per row
    /// created.
    families: ArcSwap<Trackers>,
    /// Most entries any set of a tracker holds when no cap bounds it (the buffer's
    /// `max_pending_rows`, which a live reload may change): beyond it counts are lower
    /// bounds and shown as saturated.
    track_max: AtomicUsize,
    hasher: foldhash::fast::RandomState,
}

impl Default for Cardinality {
    fn default() -> Self {
        Cardinality::new(60, usize::MAX, Vec::new())
    }
}

/// The trackers, by family id.
type Trackers = Vec<Option<Arc<Mutex<Tracker>>>>;

impl Cardinality {
    /// Trackers for `caps` (families without any cap may be left out), windows of
    /// `window_secs` (at least 1), sets bounded by `track_max` where no cap bounds them.
    pub fn new(window_secs: u64, track_max: usize, caps: Vec<FamilyCaps>) -> Cardinality {
        let mut families: Trackers = Vec::new();
        for caps in caps {
            if caps.max_contexts.is_none() && caps.max_tag_values.is_empty() {
                continue;
            }
            let index = usize::from(caps.family.0);
            if families.len() <= index {
                families.resize_with(index + 1, || None);
            }
            families[index] = Some(Arc::new(Mutex::new(Tracker::new(caps))));
        }
        Cardinality {
            window_secs: i64::try_from(window_secs.max(1)).unwrap_or(i64::MAX),
            families: ArcSwap::from_pointee(families),
            track_max: AtomicUsize::new(track_max.max(1)),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    /// Bounds uncapped sets by `track_max` from now on (a live reload of
    /// `limits.max_pending_rows`); sets already larger stay as they are, saturated.
    pub fn set_track_max(&self, track_max: usize) {
        self.track_max.store(track_max.max(1), Ordering::Relaxed);
    }

    /// Takes new caps (a live reload): a family keeps its tracker, with what its window
    /// counted and its drop totals, and is held to the new caps from its next new
    /// context on; a family capped for the first time gets a tracker; a family whose
    /// caps are all gone stays tracked, uncapped (its drop totals stay exported). The
    /// window length does not change.
    pub fn replace_caps(&self, caps: Vec<FamilyCaps>) {
        let mut families: Trackers = (*self.families.load_full()).clone();
        for caps in caps {
            let index = usize::from(caps.family.0);
            match families.get(index).cloned().flatten() {
                Some(tracker) => tracker.lock().set_caps(caps),
                None if caps.max_contexts.is_none() && caps.max_tag_values.is_empty() => {}
                None => {
                    if families.len() <= index {
                        families.resize_with(index + 1, || None);
                    }
                    families[index] = Some(Arc::new(Mutex::new(Tracker::new(caps))));
                }
            }
        }
        self.families.store(Arc::new(families));
    }

    /// Whether any family is tracked.
    pub fn is_active(&self) -> bool {
        self.families.load().iter().any(Option::is_some)
    }

    /// The window length, in seconds.
    pub fn window_secs(&self) -> u64 {
        self.window_secs.unsigned_abs()
    }

    /// Decides whether a *new row* of `family` with `series` may be created at
    /// `now_unix_secs`: `Ok` (and the context and its tag values are counted in the
    /// window), or the reason it is refused (and its `count` increments are counted as
    /// dropped for the family). The caller counts the drop, and its deltas, in its own
    /// counters too.
    pub fn admit(
        &self,
        family: FamilyId,
        series: &[u8],
        now_unix_secs: i64,
        count: u64,
    ) -> Result<(), DropReason> {
        let families = self.families.load();
        let Some(Some(tracker)) = families.get(usize::from(family.0)) else {
            return Ok(());
        };
        let window = now_unix_secs.div_euclid(self.window_secs);
        let mut tracker = tracker.lock();
        tracker.roll(window, self.window_secs);
        let context = self.hasher.hash_one(series);
        if tracker.contexts.contains(&context) {
            return Ok(());
        }
        tracker.check_and_count(
            series,
            context,
            &self.hasher,
            self.track_max.load(Ordering::Relaxed),
            count,
        )
    }

    /// Per family and reason, the increments dropped since start (for the metrics).
    pub fn dropped(&self) -> Vec<(String, DropReason, u64)> {
        let mut out = Vec::new();
        for tracker in self.families.load().iter().flatten() {
            let tracker = tracker.lock();
            out.push((
                tracker.caps.name.clone(),
                DropReason::CardinalityFamily,
                tracker.dropped_family,
            ));
            out.push((
                tracker.caps.name.clone(),
                DropReason::CardinalityTag,
                tracker.dropped_tag,
            ));
        }
        out
    }

    /// Per tracked family, the distinct contexts of the window that holds `now_unix_secs`.
    pub fn contexts(&self, now_unix_secs: i64) -> Vec<(String, u64)> {
        let window = now_unix_secs.div_euclid(self.window_secs);
        self.families
            .load()
            .iter()
            .flatten()
            .map(|tracker| {
                let mut tracker = tracker.lock();
                tracker.roll(window, self.window_secs);
                (tracker.caps.name.clone(), tracker.contexts.len() as u64)
            })
            .collect()
    }

    /// What `/debug/contexts` shows at `now_unix_secs`: per tracked family, the window
    /// now and the one before, each with its tags of the most distinct values.
    pub fn report(&self, now_unix_secs: i64) -> ContextsReport {
        let window = now_unix_secs.div_euclid(self.window_secs);
        let families = self
            .families
            .load()
            .iter()
            .flatten()
            .map(|tracker| {
                let mut tracker = tracker.lock();
                tracker.roll(window, self.window_secs);
                FamilyContexts {
                    family: tracker.caps.name.clone(),
                    max_contexts: tracker.caps.max_contexts.map(|n| n as u64),
                    dropped_family_total: tracker.dropped_family,
                    dropped_tag_total: tracker.dropped_tag,
                    current: tracker.view(self.window_secs, self.track_max.load(Ordering::Relaxed)),
                    previous: tracker.previous.clone(),
                }
            })
            .collect();
        ContextsReport {
            window_secs: self.window_secs(),
            families,
        }
    }
}

/// The answer of `/debug/contexts`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ContextsReport {
    /// The window length, in seconds.
    pub window_secs: u64,
    /// Every family with a cap, in configuration order (generic first).
    pub families: Vec<FamilyContexts>,
}

/// One family in [`ContextsReport`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FamilyContexts {
    /// The family's name.
    pub family: String,
    /// Its `max_contexts`, if set.
    pub max_contexts: Option<u64>,
    /// Increments dropped since start because the family was full.
    pub dropped_family_total: u64,
    /// Increments dropped since start because a tag was full.
    pub dropped_tag_total: u64,
    /// The window now.
    pub current: WindowView,
    /// The window before, as it ended (`None` before the first window ended).
    pub previous: Option<WindowView>,
}

/// One window of one family.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WindowView {
    /// When it starts, Unix seconds.
    pub start_unix_secs: i64,
    /// Distinct contexts admitted in it.
    pub contexts: u64,
    /// Whether a count reached the tracking bound (`limits.max_pending_rows`) and is a
    /// lower bound.
    pub saturated: bool,
    /// Increments dropped in it because the family was full.
    pub dropped_family: u64,
    /// Increments dropped in it because a tag was full.
    pub dropped_tag: u64,
    /// The tags of the most distinct values, most first.
    pub tags: Vec<TagView>,
}

/// One tag of one family's window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TagView {
    /// The tag (a key column for a configured family).
    pub tag: String,
    /// Distinct values admitted.
    pub values: u64,
    /// Its `max_tag_values`, if set.
    pub max_values: Option<u64>,
    /// Increments dropped because this tag was full.
    pub dropped: u64,
    /// The first values admitted (at most [`SAMPLES_PER_TAG`]).
    pub samples: Vec<String>,
}

/// One family's window state, under its lock.
struct Tracker {
    caps: FamilyCaps,
    window: i64,
    contexts: HashSet<u64, foldhash::fast::RandomState>,
    tags: HashMap<Box<str>, TagStats, foldhash::fast::RandomState>,
    dropped_family: u64,
    dropped_tag: u64,
    window_dropped_family: u64,
    window_dropped_tag: u64,
    /// Whether this window's refusal was logged.
    warned: bool,
    previous: Option<WindowView>,
    /// The tag a cap refused last (reused: refusals come in floods).
    refused_tag: String,
}

/// One tag's values in the window.
struct TagStats {
    cap: Option<usize>,
    values: HashSet<u64, foldhash::fast::RandomState>,
    samples: Vec<String>,
    dropped: u64,
}

impl TagStats {
    fn new(cap: Option<usize>) -> TagStats {
        TagStats {
            cap,
            values: HashSet::default(),
            samples: Vec::new(),
            dropped: 0,
        }
    }
}

impl Tracker {
    fn new(caps: FamilyCaps) -> Tracker {
        let mut tracker = Tracker {
            caps,
            window: i64::MIN,
            contexts: HashSet::default(),
            tags: HashMap::default(),
            dropped_family: 0,
            dropped_tag: 0,
            window_dropped_family: 0,
            window_dropped_tag: 0,
            warned: false,
            previous: None,
            refused_tag: String::new(),
        };
        tracker.reset_tags();
        tracker
    }

    /// Holds the family to `caps` from now on; the window's counts stay (a tag capped
    /// anew starts counting at its next new context).
    fn set_caps(&mut self, caps: FamilyCaps) {
        for (tag, stats) in self.tags.iter_mut() {
            stats.cap = caps
                .max_tag_values
                .iter()
                .find(|(t, _)| **t == **tag)
                .map(|(_, cap)| *cap);
        }
        for (tag, cap) in &caps.max_tag_values {
            if !self.tags.contains_key(tag.as_str()) {
                self.tags
                    .insert(tag.as_str().into(), TagStats::new(Some(*cap)));
            }
        }
        self.caps = caps;
    }

    /// Empties the tags, keeping an entry for each capped one, whose sets keep their
    /// room (a busy family fills them again every window).
    fn reset_tags(&mut self) {
        self.tags.retain(|_, stats| stats.cap.is_some());
        for stats in self.tags.values_mut() {
            stats.values.clear();
            stats.samples.clear();
            stats.dropped = 0;
        }
        for (tag, cap) in &self.caps.max_tag_values {
            if !self.tags.contains_key(tag.as_str()) {
                self.tags
                    .insert(tag.as_str().into(), TagStats::new(Some(*cap)));
            }
        }
    }

    /// Moves to `window` when it is a later one, keeping the ending window's view.
    fn roll(&mut self, window: i64, window_secs: i64) {
        if window <= self.window {
            return;
        }
        if self.window != i64::MIN {
            let view = self.view(window_secs, usize::MAX);
            // Only the window just before is "previous"; an idle gap leaves none.
            self.previous = (window == self.window + 1).then_some(view);
        }
        self.window = window;
        self.contexts.clear();
        self.reset_tags();
        self.window_dropped_family = 0;
        self.window_dropped_tag = 0;
        self.warned = false;
    }

    fn view(&self, window_secs: i64, track_max: usize) -> WindowView {
        let mut tags: Vec<TagView> = self
            .tags
            .iter()
            .filter(|(_, s)| !s.values.is_empty() || s.dropped > 0)
            .map(|(tag, s)| TagView {
                tag: tag.to_string(),
                values: s.values.len() as u64,
                max_values: s.cap.map(|n| n as u64),
                dropped: s.dropped,
                samples: s.samples.clone(),
            })
            .collect();
        tags.sort_by(|a, b| (b.values, b.dropped, &a.tag).cmp(&(a.values, a.dropped, &b.tag)));
        tags.truncate(TAGS_IN_VIEW);
        let bound = self.caps.max_contexts.unwrap_or(track_max);
        WindowView {
            start_unix_secs: self.window.saturating_mul(window_secs),
            contexts: self.contexts.len() as u64,
            saturated: self.caps.max_contexts.is_none() && self.contexts.len() >= bound,
            dropped_family: self.window_dropped_family,
            dropped_tag: self.window_dropped_tag,
            tags,
        }
    }

    /// The caps for a context not seen in this window: counts it, or the drop. The
    /// series is read twice (check, then count) rather than copied: no allocation but a
    /// tag name new to the window.
    fn check_and_count(
        &mut self,
        series: &[u8],
        context: u64,
        hasher: &foldhash::fast::RandomState,
        track_max: usize,
        count: u64,
    ) -> Result<(), DropReason> {
        // First every capped tag, then the family: nothing is counted unless all pass.
        let Tracker {
            caps,
            tags,
            refused_tag,
            ..
        } = self;
        let mut full = false;
        each_tag(&caps.source, series, |tag, value| {
            if full {
                return;
            }
            if let Some(stats) = tags.get(tag)
                && stats.cap.is_some_and(|cap| stats.values.len() >= cap)
                && !stats.values.contains(&hasher.hash_one(value))
            {
                refused_tag.clear();
                refused_tag.push_str(tag);
                full = true;
            }
        });
        if full {
            let tag = std::mem::take(&mut self.refused_tag);
            self.count_drop(DropReason::CardinalityTag, Some(&tag), series, count);
            self.refused_tag = tag;
            return Err(DropReason::CardinalityTag);
        }
        if let Some(max) = self.caps.max_contexts
            && self.contexts.len() >= max
        {
            self.count_drop(DropReason::CardinalityFamily, None, series, count);
            return Err(DropReason::CardinalityFamily);
        }
        if self.contexts.len() < self.caps.max_contexts.unwrap_or(track_max) {
            self.contexts.insert(context);
        }
        let Tracker { caps, tags, .. } = self;
        each_tag(&caps.source, series, |tag, value| {
            count_value(tags, tag, value, hasher.hash_one(value), track_max);
        });
        Ok(())
    }

    fn count_drop(&mut self, reason: DropReason, tag: Option<&str>, series: &[u8], count: u64) {
        match reason {
            DropReason::CardinalityTag => {
                self.dropped_tag += count;
                self.window_dropped_tag += count;
            }
            _ => {
                self.dropped_family += count;
                self.window_dropped_family += count;
            }
        }
        if let Some(stats) = tag.and_then(|t| self.tags.get_mut(t)) {
            stats.dropped += count;
        }
        if !self.warned {
            self.warned = true;
            let context: Vec<&str> = series::fields(series).collect();
            match tag {
                Some(tag) => tracing::warn!(
                    family = %self.caps.name,
                    tag,
                    max_tag_values = self.tags.get(tag).and_then(|s| s.cap),
                    context = ?context,
                    "A tag reached its cap of distinct values in this cardinality window: increments of new values are dropped (reason cardinality_tag) until the window ends. See /debug/contexts."
                ),
                None => tracing::warn!(
                    family = %self.caps.name,
                    max_contexts = self.caps.max_contexts,
                    context = ?context,
                    "A family reached its cap of distinct contexts in this cardinality window: increments of new contexts are dropped (reason cardinality_family) until the window ends. See /debug/contexts."
                ),
            }
        }
    }
}

/// Adds a value to a tag's set (the tag is tracked from here on if there is room), and
/// keeps it as a sample while there are few.
fn count_value(
    tags: &mut HashMap<Box<str>, TagStats, foldhash::fast::RandomState>,
    tag: &str,
    value: &str,
    hash: u64,
    track_max: usize,
) {
    if !tags.contains_key(tag) {
        if tags.len() >= MAX_TRACKED_TAGS {
            return;
        }
        tags.insert(tag.into(), TagStats::new(None));
    }
    let Some(stats) = tags.get_mut(tag) else {
        return;
    };
    if stats.values.len() >= stats.cap.unwrap_or(track_max) {
        return;
    }
    if stats.values.insert(hash) && stats.samples.len() < SAMPLES_PER_TAG {
        stats.samples.push(value.to_owned());
    }
}

/// The canonical tag text of a generic series (its second field), read without
/// checking the name before it.
fn generic_tags(series: &[u8]) -> Option<&str> {
    let (name_len, rest) = series.split_first_chunk::<2>()?;
    let rest = rest.get(usize::from(u16::from_le_bytes(*name_len))..)?;
    let (tags_len, rest) = rest.split_first_chunk::<2>()?;
    let tags = rest.get(..usize::from(u16::from_le_bytes(*tags_len)))?;
    std::str::from_utf8(tags).ok()
}

/// Calls `each` with every (tag, value) of a series of a family whose tags are in
/// `source`: the generic family's canonical tags (a tag without value has value `""`),
/// or a configured family's key columns.
fn each_tag<'s>(source: &TagSource, series: &'s [u8], mut each: impl FnMut(&str, &'s str)) {
    match source {
        TagSource::Generic => {
            let Some(tags) = generic_tags(series) else {
                return;
            };
            // Byte scans: `,` and `:` are ASCII, so every cut is a char boundary.
            let bytes = tags.as_bytes();
            let mut start = 0;
            while start < bytes.len() {
                let end = bytes[start..]
                    .iter()
                    .position(|&b| b == b',')
                    .map_or(bytes.len(), |at| start + at);
                let tag = &tags[start..end];
                match tag.bytes().position(|b| b == b':') {
                    Some(at) => each(&tag[..at], &tag[at + 1..]),
                    None => each(tag, ""),
                }
                start = end + 1;
            }
        }
        TagSource::Keyed(columns) => {
            for (column, value) in columns.iter().zip(series::fields(series)) {
                each(column, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_796_042_040; // a minute boundary

    fn generic(series: (&str, &str)) -> Vec<u8> {
        series::encode([series.0, series.1])
    }

    fn caps(max_contexts: Option<usize>, tags: &[(&str, usize)]) -> FamilyCaps {
        FamilyCaps {
            family: FamilyId(0),
            name: "generic".into(),
            source: TagSource::Generic,
            max_contexts,
            max_tag_values: tags.iter().map(|(t, n)| (t.to_string(), *n)).collect(),
        }
    }

    #[test]
    fn a_family_admits_its_cap_of_contexts_per_window_and_seen_ones_again() {
        let c = Cardinality::new(60, 1000, vec![caps(Some(2), &[])]);
        let a = generic(("a", ""));
        let b = generic(("b", "env:prod"));
        let x = generic(("x", ""));
        assert_eq!(c.admit(FamilyId(0), &a, T0, 1), Ok(()));
        assert_eq!(c.admit(FamilyId(0), &b, T0 + 1, 1), Ok(()));
        assert_eq!(
            c.admit(FamilyId(0), &x, T0 + 2, 3),
            Err(DropReason::CardinalityFamily)
        );
        // A context admitted in the window is admitted again (a new row after a flush).
        assert_eq!(c.admit(FamilyId(0), &a, T0 + 59, 1), Ok(()));
        // The next window starts from zero.
        assert_eq!(c.admit(FamilyId(0), &x, T0 + 60, 1), Ok(()));
        assert_eq!(
            c.dropped(),
            vec![
                ("generic".into(), DropReason::CardinalityFamily, 3),
                ("generic".into(), DropReason::CardinalityTag, 0),
            ]
        );
        let report = c.report(T0 + 61);
        let family = &report.families[0];
        assert_eq!(family.current.contexts, 1);
        let previous = family.previous.as_ref().unwrap();
        assert_eq!((previous.contexts, previous.dropped_family), (2, 3));
        assert_eq!(previous.start_unix_secs, T0);
    }

    #[test]
    fn a_tag_admits_its_cap_of_values_and_names_the_tag() {
        let c = Cardinality::new(60, 1000, vec![caps(None, &[("user", 2)])]);
        let s = |user: &str, env: &str| generic(("req", &format!("env:{env},user:{user}")));
        assert_eq!(c.admit(FamilyId(0), &s("u1", "prod"), T0, 1), Ok(()));
        assert_eq!(c.admit(FamilyId(0), &s("u2", "prod"), T0, 1), Ok(()));
        // A new context whose user value is known passes.
        assert_eq!(c.admit(FamilyId(0), &s("u1", "dev"), T0, 1), Ok(()));
        assert_eq!(
            c.admit(FamilyId(0), &s("u3", "prod"), T0, 2),
            Err(DropReason::CardinalityTag)
        );
        let report = c.report(T0 + 1);
        let window = &report.families[0].current;
        assert_eq!((window.contexts, window.dropped_tag), (3, 2));
        let user = window.tags.iter().find(|t| t.tag == "user").unwrap();
        assert_eq!(
            (user.values, user.max_values, user.dropped),
            (2, Some(2), 2)
        );
        assert_eq!(user.samples, ["u1", "u2"]);
        let env = window.tags.iter().find(|t| t.tag == "env").unwrap();
        assert_eq!((env.values, env.max_values), (2, None));
        assert_eq!(
            window.tags[0].tag, "user",
            "ties by values: more drops first"
        );
    }

    #[test]
    fn a_refused_context_leaves_no_value_counted() {
        let c = Cardinality::new(60, 1000, vec![caps(Some(1), &[("a", 5), ("b", 5)])]);
        assert_eq!(
            c.admit(FamilyId(0), &generic(("m", "a:1,b:1")), T0, 1),
            Ok(())
        );
        assert_eq!(
            c.admit(FamilyId(0), &generic(("m", "a:2,b:2")), T0, 1),
            Err(DropReason::CardinalityFamily)
        );
        let window = c.report(T0).families[0].current.clone();
        assert!(window.tags.iter().all(|t| t.values == 1), "{window:?}");
    }

    #[test]
    fn configured_families_cap_their_key_columns_and_others_pass() {
        let keyed = FamilyCaps {
            family: FamilyId(2),
            name: "views".into(),
            source: TagSource::Keyed(vec!["page".into(), "user".into()]),
            max_contexts: None,
            max_tag_values: vec![("user".into(), 1)],
        };
        let c = Cardinality::new(10, 1000, vec![keyed]);
        let k = |p: &str, u: &str| series::encode([p, u]);
        assert_eq!(c.admit(FamilyId(2), &k("p1", "u1"), T0, 1), Ok(()));
        assert_eq!(c.admit(FamilyId(2), &k("p2", "u1"), T0, 1), Ok(()));
        assert_eq!(
            c.admit(FamilyId(2), &k("p1", "u2"), T0 + 9, 1),
            Err(DropReason::CardinalityTag)
        );
        assert_eq!(c.admit(FamilyId(2), &k("p1", "u2"), T0 + 10, 1), Ok(()));
        // Untracked families (no caps) are admitted without a look.
        assert_eq!(c.admit(FamilyId(0), &k("x", "y"), T0, 1), Ok(()));
        assert_eq!(c.admit(FamilyId(9), &k("x", "y"), T0, 1), Ok(()));
    }

    #[test]
    fn uncapped_counts_stop_at_the_tracking_bound() {
        let c = Cardinality::new(60, 3, vec![caps(None, &[("env", 100)])]);
        for i in 0..10 {
            let tags = format!("env:e,id:{i}");
            assert_eq!(c.admit(FamilyId(0), &generic(("m", &tags)), T0, 1), Ok(()));
        }
        let window = c.report(T0).families[0].current.clone();
        assert_eq!(window.contexts, 3);
        assert!(window.saturated);
        assert_eq!(window.tags[0].values, 3);
    }

    #[test]
    fn generic_tags_are_cut_at_the_first_colon_and_may_have_no_value() {
        let mut seen = Vec::new();
        let series = generic(("m", "canary,url:http://x/a,é:ü"));
        each_tag(&TagSource::Generic, &series, |t, v| {
            seen.push((t.to_owned(), v))
        });
        assert_eq!(
            seen,
            [
                ("canary".to_owned(), ""),
                ("url".to_owned(), "http://x/a"),
                ("é".to_owned(), "ü")
            ]
        );
        let mut none = 0;
        each_tag(&TagSource::Generic, &generic(("m", "")), |_, _| none += 1);
        each_tag(&TagSource::Generic, &series[..3], |_, _| none += 1);
        assert_eq!(none, 0, "no tags, and a truncated series, give none");
    }

    #[test]
    fn an_idle_gap_leaves_no_previous_window() {
        let c = Cardinality::new(60, 100, vec![caps(Some(5), &[])]);
        c.admit(FamilyId(0), &generic(("a", "")), T0, 1).unwrap();
        let report = c.report(T0 + 180);
        assert!(report.families[0].previous.is_none());
        assert_eq!(report.families[0].current.contexts, 0);
        assert_eq!(report.families[0].current.start_unix_secs, T0 + 180);
    }

    #[test]
    fn replaced_caps_bind_from_the_next_new_context_and_keep_the_window() {
        let c = Cardinality::new(60, 1000, vec![caps(Some(1), &[])]);
        let (a, b, x) = (generic(("a", "")), generic(("b", "")), generic(("x", "")));
        assert_eq!(c.admit(FamilyId(0), &a, T0, 1), Ok(()));
        assert_eq!(
            c.admit(FamilyId(0), &b, T0, 2),
            Err(DropReason::CardinalityFamily)
        );
        // Raised to 2: the window's context stays counted, one more fits.
        c.replace_caps(vec![caps(Some(2), &[])]);
        assert_eq!(c.admit(FamilyId(0), &b, T0 + 1, 1), Ok(()));
        assert_eq!(
            c.admit(FamilyId(0), &x, T0 + 1, 1),
            Err(DropReason::CardinalityFamily)
        );
        // Every cap gone: still tracked (its drop totals stay), nothing refused.
        c.replace_caps(vec![caps(None, &[])]);
        assert_eq!(c.admit(FamilyId(0), &x, T0 + 2, 1), Ok(()));
        assert_eq!(
            c.dropped()[0],
            ("generic".into(), DropReason::CardinalityFamily, 3)
        );
        // A family capped for the first time is tracked from then on.
        let mut views = caps(None, &[("page", 1)]);
        views.family = FamilyId(1);
        views.name = "views".into();
        views.source = TagSource::Keyed(vec!["page".into()]);
        c.replace_caps(vec![views]);
        let (p1, p2) = (series::encode(["p1"]), series::encode(["p2"]));
        assert_eq!(c.admit(FamilyId(1), &p1, T0, 1), Ok(()));
        assert_eq!(
            c.admit(FamilyId(1), &p2, T0, 1),
            Err(DropReason::CardinalityTag)
        );
        let names: Vec<_> = c
            .report(T0)
            .families
            .into_iter()
            .map(|f| f.family)
            .collect();
        assert_eq!(names, ["generic", "views"]);
    }
}
