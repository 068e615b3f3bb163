//! One read of the epoch registry: the epoch starts of each family, for the whole family
//! and per key, and when the read was sent.

use std::collections::{BTreeSet, HashMap};

use crate::bucket::{Day, MINUTES_PER_DAY, Minute};
use crate::vocabulary::FamilyId;

/// The epochs a writer knows of. Immutable once built; a newer read replaces it whole.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EpochView {
    /// Unix seconds at which the read that produced this view was sent: every epoch
    /// written before then is in it.
    fetched_at: i64,
    families: HashMap<FamilyId, FamilyEpochs>,
}

/// The epoch starts of one family.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct FamilyEpochs {
    /// Starts that apply to every key of the family.
    whole: BTreeSet<i32>,
    /// Starts that apply to one key (by encoded series).
    by_key: HashMap<Box<[u8]>, BTreeSet<i32>>,
}

impl EpochView {
    /// An empty view of a read sent at `fetched_at` (Unix seconds).
    pub fn new(fetched_at: i64) -> EpochView {
        EpochView {
            fetched_at,
            families: HashMap::new(),
        }
    }

    /// Adds an epoch of `family` starting at `start` (a Unix minute), for the whole family
    /// (`key` None) or one key (its encoded series).
    pub fn add(&mut self, family: FamilyId, key: Option<&[u8]>, start: i32) {
        let epochs = self.families.entry(family).or_default();
        match key {
            None => epochs.whole.insert(start),
            Some(key) => epochs.by_key.entry(key.into()).or_default().insert(start),
        };
    }

    /// When the read was sent (Unix seconds).
    pub fn fetched_at(&self) -> i64 {
        self.fetched_at
    }

    /// The epoch a row of `family`, key `series`, minute `minute` belongs to: the latest
    /// start at or before the minute, among the family's and the key's; 0 when none.
    /// Only meaningful for minutes the view covers (see [`super::choose()`]).
    pub fn epoch_at(&self, family: FamilyId, series: &[u8], minute: Minute) -> i32 {
        let Some(epochs) = self.families.get(&family) else {
            return 0;
        };
        let at = i32::try_from(minute.0).unwrap_or(i32::MAX);
        let latest = |starts: &BTreeSet<i32>| starts.range(..=at).next_back().copied();
        let whole = latest(&epochs.whole);
        let key = epochs.by_key.get(series).and_then(latest);
        whole.max(key).unwrap_or(0)
    }

    /// The epoch a read of `day` shows when none is asked: the one in force at the
    /// day's last minute, or at the current minute while the day lasts.
    pub fn read_epoch(&self, family: FamilyId, series: &[u8], day: Day, now_unix_secs: i64) -> i32 {
        let last = Minute(day.0 * MINUTES_PER_DAY + MINUTES_PER_DAY - 1);
        let now = Minute::from_unix_secs(now_unix_secs).unwrap_or(last);
        self.epoch_at(family, series, last.min(now))
    }

    /// Every epoch start of `family` that applies to key `series`, oldest first (0, the
    /// epoch before the first reset, included).
    pub fn epochs_of(&self, family: FamilyId, series: &[u8]) -> Vec<i32> {
        let mut all = BTreeSet::from([0]);
        if let Some(epochs) = self.families.get(&family) {
            all.extend(&epochs.whole);
            if let Some(key) = epochs.by_key.get(series) {
                all.extend(key);
            }
        }
        all.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_shows_the_epoch_in_force_at_the_end_of_the_day_or_now() {
        let day = Day(20_000);
        let first = day.0 * MINUTES_PER_DAY;
        let key = crate::series::encode(["home"]);
        let mut view = EpochView::new(0);
        view.add(FamilyId(1), None, (first + 600) as i32);
        view.add(FamilyId(1), Some(&key), (first + 900) as i32);
        let at = |minute: u32| i64::from(minute) * 60;
        assert_eq!(
            view.read_epoch(FamilyId(1), &key, day, at(first + 700)),
            (first + 600) as i32
        );
        assert_eq!(
            view.read_epoch(FamilyId(1), &key, day, at(first + 5000)),
            (first + 900) as i32
        );
        assert_eq!(
            view.read_epoch(FamilyId(1), b"other", day, at(first + 5000)),
            (first + 600) as i32,
            "another key sees only the family's reset"
        );
        assert_eq!(view.read_epoch(FamilyId(1), &key, day, at(first + 10)), 0);
        assert_eq!(
            view.epochs_of(FamilyId(1), &key),
            [0, (first + 600) as i32, (first + 900) as i32]
        );
    }
}
