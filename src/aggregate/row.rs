//! What one pending row is: its key (family, series, time slot) and its column deltas.

use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};

use crate::bucket::{Day, Minute};
use crate::series;
use crate::vocabulary::{FamilyId, Granularity};

/// Which tables a pending row still owes its deltas to.
///
/// Fresh increments owe every table of their family (minute, hour, day, total: those it
/// has), derived at flush time from the minute. A write that definitely did not apply is
/// merged back for the one table it was meant for only: re-deriving a day row from a
/// re-queued minute row would count the day twice when the day write had succeeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Slot {
    /// Fresh deltas for this minute, owed to every table of the family.
    Both(Minute),
    /// Re-queued deltas owed to the minute table only.
    MinuteOnly(Minute),
    /// Re-queued deltas owed to the day table only.
    DayOnly(Day),
    /// Re-queued deltas owed to the day table only, of a family with an epoch column:
    /// the day row of this minute's day, in the epoch this minute falls in. The minute is
    /// one the epoch covers on that day (see [`crate::epoch`]), so choosing the epoch
    /// again gives the same one.
    DayOnlyAt(Minute),
    /// Re-queued deltas owed to the hour table only: the hour counted from
    /// 1970-01-01T00Z.
    HourOnly(u32),
    /// Re-queued deltas owed to the all-time total table only.
    TotalOnly,
}

/// How many kinds [`Slot::kind_index`] tells apart: fresh, then one per granularity.
pub(crate) const SLOT_KINDS: usize = 1 + Granularity::COUNT;

impl Slot {
    /// Whether this slot's deltas are owed to `table`.
    pub fn owes(self, table: Granularity) -> bool {
        match self.owed_to() {
            None => true,
            Some((only, _)) => only == table,
        }
    }

    /// The one table a re-queued slot is owed to, and its bucket there (see
    /// [`crate::bucket::bucket_of`]); `None` for fresh deltas, owed to every table.
    pub fn owed_to(self) -> Option<(Granularity, u32)> {
        match self {
            Slot::Both(_) => None,
            Slot::MinuteOnly(m) => Some((Granularity::Minute, m.0)),
            Slot::DayOnly(d) => Some((Granularity::Day, d.0)),
            Slot::DayOnlyAt(m) => Some((Granularity::Day, m.day().0)),
            Slot::HourOnly(h) => Some((Granularity::Hour, h)),
            Slot::TotalOnly => Some((Granularity::Total, 0)),
        }
    }

    /// A minute inside this slot's period (its first), for choosing an epoch or a day.
    pub fn minute(self) -> Minute {
        match self {
            Slot::Both(m) | Slot::MinuteOnly(m) | Slot::DayOnlyAt(m) => m,
            Slot::DayOnly(d) => crate::bucket::first_minute_of(Granularity::Day, d.0),
            Slot::HourOnly(h) => crate::bucket::first_minute_of(Granularity::Hour, h),
            Slot::TotalOnly => Minute(0),
        }
    }

    /// Index of the slot kind: 0 for fresh deltas, else 1 + the index of the one
    /// granularity owed, for per-kind sums.
    pub(crate) fn kind_index(self) -> usize {
        self.owed_to().map_or(0, |(g, _)| 1 + g.index())
    }

    fn tag_and_bucket(self) -> (u8, u32) {
        match self {
            Slot::Both(m) => (0, m.0),
            Slot::MinuteOnly(m) => (1, m.0),
            Slot::DayOnly(d) => (2, d.0),
            Slot::DayOnlyAt(m) => (3, m.0),
            Slot::HourOnly(h) => (4, h),
            Slot::TotalOnly => (5, 0),
        }
    }

    fn from_tag_and_bucket(tag: u8, bucket: u32) -> Slot {
        match tag {
            0 => Slot::Both(Minute(bucket)),
            1 => Slot::MinuteOnly(Minute(bucket)),
            2 => Slot::DayOnly(Day(bucket)),
            3 => Slot::DayOnlyAt(Minute(bucket)),
            4 => Slot::HourOnly(bucket),
            _ => Slot::TotalOnly,
        }
    }
}

/// The key of a pending row.
///
/// Laid out by hand (series, bucket, family, slot tag) so that it packs into 24 bytes:
/// the per-row overhead is what limits how many distinct rows fit in memory.
#[derive(Clone, PartialEq, Eq)]
pub struct RowKey {
    series: Box<[u8]>,
    bucket: u32,
    family: FamilyId,
    slot_tag: u8,
}

impl RowKey {
    /// A key from its parts; `series` is an encoded series (see [`crate::series`]).
    pub fn new(family: FamilyId, slot: Slot, series: Box<[u8]>) -> RowKey {
        let (slot_tag, bucket) = slot.tag_and_bucket();
        RowKey {
            series,
            bucket,
            family,
            slot_tag,
        }
    }

    /// The family this row belongs to.
    pub fn family(&self) -> FamilyId {
        self.family
    }

    /// The time slot of this row.
    pub fn slot(&self) -> Slot {
        Slot::from_tag_and_bucket(self.slot_tag, self.bucket)
    }

    /// The encoded series.
    pub fn series(&self) -> &[u8] {
        &self.series
    }

    /// Gives up the key, keeping the series bytes.
    pub fn into_series(self) -> Box<[u8]> {
        self.series
    }

    /// The borrowed form used for look-ups.
    pub(crate) fn as_ref(&self) -> RowKeyRef<'_> {
        RowKeyRef {
            family: self.family,
            slot: self.slot(),
            series: &self.series,
        }
    }
}

impl fmt::Debug for RowKey {
    /// `family/slot/field|field|…`, stable and readable in test snapshots.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{:?}/", self.family.0, self.slot())?;
        for (i, field) in series::fields(&self.series).enumerate() {
            if i > 0 {
                f.write_str("|")?;
            }
            f.write_str(field)?;
        }
        Ok(())
    }
}

/// The seeded hash of a series' bytes: the first level of [`RowKeyRef::hash_with`].
pub(crate) fn series_hash(state: &impl BuildHasher, series: &[u8]) -> u64 {
    // The bytes alone, without `Hash for [u8]`'s length prefix: the hasher mixes the
    // length in itself.
    let mut hasher = state.build_hasher();
    hasher.write(series);
    hasher.finish()
}

/// A row key borrowed from the hot path, so that looking up an existing row allocates
/// nothing.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowKeyRef<'a> {
    pub(crate) family: FamilyId,
    pub(crate) slot: Slot,
    pub(crate) series: &'a [u8],
}

impl RowKeyRef<'_> {
    /// The hash a row with this key is stored under.
    ///
    /// Two levels: the series is hashed on its own ([`series_hash`]), then mixed with the
    /// family and the slot, so a caller that already knows the series hash (the same
    /// series recurs every minute) skips hashing its bytes again.
    pub(crate) fn hash_with(&self, state: &impl BuildHasher) -> u64 {
        self.hash_from(series_hash(state, self.series))
    }

    /// The hash of this key, given [`series_hash`] of its series.
    pub(crate) fn hash_from(&self, series_hash: u64) -> u64 {
        let (tag, bucket) = self.slot.tag_and_bucket();
        let rest = (u64::from(self.family.0) << 40) | (u64::from(tag) << 32) | u64::from(bucket);
        // A folded multiply: every input bit reaches the low bits (the table index) and the
        // top seven (the control tag). The series hash is seeded, so this stays keyed.
        let product = u128::from(series_hash ^ rest) * u128::from(0x9e37_79b9_7f4a_7c15_u64);
        (product as u64) ^ ((product >> 64) as u64)
    }

    #[inline]
    pub(crate) fn matches(&self, key: &RowKey) -> bool {
        let (slot_tag, bucket) = self.slot.tag_and_bucket();
        key.bucket == bucket
            && key.slot_tag == slot_tag
            && key.family == self.family
            && series::same_bytes(&key.series, self.series)
    }

    pub(crate) fn to_owned_key(self) -> RowKey {
        RowKey::new(self.family, self.slot, self.series.into())
    }
}

/// The counter deltas of one row, one per column of the family.
///
/// Most rows have a single column (every generic row does), so that case is stored
/// inline; wider rows pay one extra allocation. A zero delta means "no change": it is
/// bound as an unset value and never written.
#[derive(Clone, PartialEq, Eq)]
pub enum Columns {
    /// A single-column row.
    One(i64),
    /// A row with several columns, in the family's column order.
    Many(Box<Vec<i64>>),
}

impl Columns {
    /// All-zero deltas for a row of `width` columns.
    pub fn zeroed(width: usize) -> Columns {
        if width <= 1 {
            Columns::One(0)
        } else {
            Columns::Many(Box::new(vec![0; width]))
        }
    }

    /// One non-zero delta in column `index` of a row of `width` columns.
    pub fn single(width: usize, index: usize, delta: i64) -> Columns {
        let mut columns = Columns::zeroed(width);
        columns.as_mut_slice()[index.min(width.max(1) - 1)] = delta;
        columns
    }

    /// The deltas in column order.
    pub fn as_slice(&self) -> &[i64] {
        match self {
            Columns::One(v) => std::slice::from_ref(v),
            Columns::Many(vs) => vs,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [i64] {
        match self {
            Columns::One(v) => std::slice::from_mut(v),
            Columns::Many(vs) => vs,
        }
    }

    /// Adds `delta` to column `index`. Refuses (leaving the row unchanged) when the sum
    /// would not fit in an `i64`: counters must never wrap silently.
    pub fn checked_add_at(&mut self, index: usize, delta: i64) -> bool {
        let Some(slot) = self.as_mut_slice().get_mut(index) else {
            return false;
        };
        match slot.checked_add(delta) {
            Some(sum) => {
                *slot = sum;
                true
            }
            None => false,
        }
    }

    /// Adds every column of `other`. Refuses (leaving the row unchanged) if any column
    /// would overflow or the widths differ.
    pub fn checked_add(&mut self, other: &Columns) -> bool {
        if !self.can_add(other) {
            return false;
        }
        for (a, b) in self.as_mut_slice().iter_mut().zip(other.as_slice()) {
            *a += *b;
        }
        true
    }

    /// Whether [`Columns::checked_add`] would take `other`: same width, no column
    /// overflowing.
    pub(crate) fn can_add(&self, other: &Columns) -> bool {
        let mine = self.as_slice();
        let theirs = other.as_slice();
        mine.len() == theirs.len()
            && mine
                .iter()
                .zip(theirs)
                .all(|(a, b)| a.checked_add(*b).is_some())
    }

    /// The signed sum of all columns, for delta accounting (i128 cannot overflow here).
    pub fn sum(&self) -> i128 {
        self.as_slice().iter().map(|&v| i128::from(v)).sum()
    }

    /// Whether every delta is zero, so the row needs no write.
    pub fn is_zero(&self) -> bool {
        self.as_slice().iter().all(|&v| v == 0)
    }

    /// Heap bytes owned beyond the inline size, for memory estimates.
    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            Columns::One(_) => 0,
            Columns::Many(vs) => size_of::<Vec<i64>>() + vs.capacity() * size_of::<i64>(),
        }
    }
}

impl fmt::Debug for Columns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// A pending row: its deltas, and when it was first re-queued (for the maximum age of a
/// write that keeps failing transiently).
#[derive(Clone, PartialEq, Eq)]
pub struct Row {
    /// The column deltas.
    pub columns: Columns,
    /// Unix seconds of the first failed attempt, for re-queued rows; 0 for fresh rows.
    pub requeued_since: u32,
}

impl fmt::Debug for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.requeued_since == 0 {
            write!(f, "{:?}", self.columns)
        } else {
            write!(f, "{:?} requeued@{}", self.columns, self.requeued_since)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_stays_small() {
        assert_eq!(size_of::<RowKey>(), 24);
        assert!(size_of::<Row>() <= 24);
    }

    #[test]
    fn slot_round_trips_through_its_packed_form() {
        for slot in [
            Slot::Both(Minute(7)),
            Slot::MinuteOnly(Minute(u32::MAX)),
            Slot::DayOnly(Day(20_000)),
        ] {
            let key = RowKey::new(FamilyId(3), slot, Box::new([]));
            assert_eq!(key.slot(), slot);
        }
    }

    #[test]
    fn overflowing_add_is_refused_and_leaves_the_row_unchanged() {
        let mut c = Columns::single(2, 1, i64::MAX - 1);
        assert!(c.checked_add_at(1, 1));
        assert!(!c.checked_add_at(1, 1));
        assert_eq!(c.as_slice(), &[0, i64::MAX]);
        let mut low = Columns::single(2, 0, i64::MIN);
        assert!(!low.checked_add(&Columns::single(2, 0, -1)));
        assert_eq!(low.as_slice(), &[i64::MIN, 0]);
        assert!(!low.checked_add_at(5, 1), "out-of-range column is refused");
    }
}
