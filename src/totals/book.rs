//! The running totals of one writer: for every open row (family, table, key, bucket), the
//! total since this incarnation started, the total last known applied, and whether the
//! store may still lack the newest one.
//!
//! Pure and synchronous: time comes in as arguments. Rows are charged to the aggregator's
//! memory budget while held, and released once they are closed (no increment can reach
//! them any more) and their newest total was applied.
//!
//! # When a row closes
//!
//! An increment may carry a client timestamp up to `limits.timestamp_max_past` old, so a
//! minute can still receive increments that long after it ended (a day likewise). A row
//! is closed once its bucket ended more than that plus a margin ago: the margin covers the
//! engine's coarse clock and an increment recorded just before a drain. Releasing an open
//! row would be a loss: a later increment would start it again from zero and overwrite the
//! stored total with a smaller one. So the book remembers up to when it released rows, and
//! an increment that still arrives for a released row is dropped and counted
//! (`timestamp_window`) instead.

use hashbrown::{Equivalent, HashMap, HashSet};

use crate::aggregate::{Aggregator, Columns, Room};
use crate::backoff::Backoff;
use crate::bucket::MINUTES_PER_DAY;
use crate::vocabulary::{DropReason, FamilyId, Granularity};

/// Seconds past the timestamp window before a row counts as closed.
pub(crate) const CLOSE_MARGIN_SECS: i64 = 120;

/// Most flushes a failing row waits before it is sent again.
pub(crate) const MAX_BACKOFF_FLUSHES: u64 = 11;

/// One open row of one table.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct RowId {
    /// The family.
    pub(crate) family: FamilyId,
    /// Minute or day table.
    pub(crate) table: Granularity,
    /// The encoded series (key values).
    pub(crate) series: Box<[u8]>,
    /// The minute (minute table) or the day (day table), counted from the epoch.
    pub(crate) bucket: u32,
}

/// A row's id borrowed from a write or a drained row, to look rows up without copying
/// the series. Hashes as the [`RowId`] it stands for (same fields, same order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct RowRef<'a> {
    /// The family.
    pub(crate) family: FamilyId,
    /// Minute or day table.
    pub(crate) table: Granularity,
    /// The encoded series.
    pub(crate) series: &'a [u8],
    /// The bucket.
    pub(crate) bucket: u32,
}

impl RowRef<'_> {
    /// The owned id.
    pub(crate) fn to_id(self) -> RowId {
        RowId {
            family: self.family,
            table: self.table,
            series: self.series.into(),
            bucket: self.bucket,
        }
    }
}

impl Equivalent<RowId> for RowRef<'_> {
    fn equivalent(&self, key: &RowId) -> bool {
        self.family == key.family
            && self.table == key.table
            && self.bucket == key.bucket
            && *self.series == *key.series
    }
}

impl RowId {
    /// The borrowed form.
    pub(crate) fn as_ref(&self) -> RowRef<'_> {
        RowRef {
            family: self.family,
            table: self.table,
            series: &self.series,
            bucket: self.bucket,
        }
    }

    /// The time bucket of the row's partition: its day (minute table) or its month as
    /// `year * 12 + month - 1` (day table).
    pub(crate) fn partition_bucket(&self) -> u32 {
        // Writer totals families have a minute and a day table only (the configuration
        // refuses others); the other arms follow the partitions of those tables.
        match self.table {
            Granularity::Minute | Granularity::Hour => {
                crate::bucket::day_of(self.table, self.bucket).0
            }
            Granularity::Day => {
                let date = crate::bucket::Day(self.bucket).date();
                (date.year().max(0) as u32) * 12 + u32::from(u8::from(date.month())) - 1
            }
            Granularity::Total => 0,
        }
    }

    /// Unix seconds at which the row's bucket ends.
    fn bucket_end(&self) -> i64 {
        let minutes = match self.table {
            Granularity::Minute => i64::from(self.bucket) + 1,
            Granularity::Hour => (i64::from(self.bucket) + 1) * 60,
            Granularity::Day => (i64::from(self.bucket) + 1) * i64::from(MINUTES_PER_DAY),
            // Never closes.
            Granularity::Total => i64::MAX / 60,
        };
        minutes * 60
    }
}

/// When rows close: the timestamp window's past edge plus [`CLOSE_MARGIN_SECS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Closing {
    /// `limits.timestamp_max_past`, in seconds.
    pub(crate) max_past_secs: i64,
}

impl Closing {
    /// Unix seconds from which `id` receives no increment any more.
    pub(crate) fn closes_at(&self, id: &RowId) -> i64 {
        id.bucket_end()
            .saturating_add(self.max_past_secs)
            .saturating_add(CLOSE_MARGIN_SECS)
    }
}

/// What the book knows of one row.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    /// The running total since the incarnation started.
    total: Columns,
    /// The total last known applied (the store holds at least this write of ours).
    confirmed: Columns,
    /// Whether the store may lack the newest total: it changed, or its last write did
    /// not apply (an unknown outcome may even have left an older total there).
    unwritten: bool,
    /// Whether a write of a total past `confirmed` ended unknown since the last one that
    /// applied: the store may hold that total, not `confirmed`.
    maybe_ahead: bool,
    /// Failed writes in a row.
    failures: u32,
    /// The first flush at which the row may be sent again (back-off).
    not_before: u64,
    /// Unix seconds of the first failure of the current streak (0: none).
    failing_since: u32,
    /// Bytes charged to the memory budget.
    bytes: usize,
}

/// A row the next write carries: its id and its newest total.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Due {
    /// The row.
    pub(crate) id: RowId,
    /// Its total when the write was planned.
    pub(crate) total: Columns,
    /// The part of it not known applied (the journal's intent carries it).
    pub(crate) unconfirmed: Columns,
}

/// What a flush holds for one due row until its write settles: the row taken, its
/// write (one a row at worst) and planned part, and its journal intent, each copying
/// the series and the totals.
pub(crate) fn due_cost(id: &RowId, total: &Columns) -> usize {
    size_of::<Due>()
        + size_of::<crate::sink::TotalsWrite>()
        + size_of::<crate::sink::TotalRow>()
        + 3 * id.series.len()
        + 4 * total.heap_bytes()
}

/// A row leaving for the spill: its newest total, and the part of it not known
/// applied (what the spill stage counts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Spilled {
    /// The newest total.
    pub(crate) total: Columns,
    /// The total minus the confirmed total.
    pub(crate) unconfirmed: Columns,
}

/// The running totals, the rows to write, and the memory they hold.
pub(crate) struct Book {
    rows: HashMap<RowId, Entry>,
    unwritten: HashSet<RowId>,
    closing: Closing,
    /// Rows closing at or before this Unix second may have been released.
    released_through: i64,
    /// The minute of the last release pass (one pass per minute is enough).
    last_release_minute: i64,
    /// The last row a flush took when it could not take every due row: the next one
    /// starts after it (see [`Book::take_due`]).
    resume_after: Option<RowId>,
}

/// `a - b` per column (totals and confirmed totals differ by what one writer counted in
/// one incarnation, so this cannot overflow in practice; it saturates if it would).
pub(crate) fn difference(a: &Columns, b: &Columns) -> Columns {
    let mut out = Columns::zeroed(a.as_slice().len());
    for (i, (x, y)) in a.as_slice().iter().zip(b.as_slice()).enumerate() {
        out.checked_add_at(i, x.saturating_sub(*y));
    }
    out
}

impl Book {
    /// An empty book.
    pub(crate) fn new(closing: Closing) -> Book {
        Book {
            rows: HashMap::default(),
            unwritten: HashSet::default(),
            closing,
            released_through: i64::MIN,
            last_release_minute: i64::MIN,
            resume_after: None,
        }
    }

    /// Adds deltas to a row's running total. A row new to the book takes room in the
    /// aggregator's budget. Refused (nothing changes) when the budget is full, when a total
    /// would leave the `i64` range, or when the row was released already.
    #[cfg(test)]
    pub(crate) fn absorb(
        &mut self,
        row: RowRef<'_>,
        deltas: &Columns,
        aggregator: &Aggregator,
    ) -> Result<(), DropReason> {
        self.absorb_all(&[row], deltas, Room::default(), aggregator)
    }

    /// Adds one delta to every row it counts in (its minute and its day), or to none, so
    /// that a minute and its day never disagree. The rows new to the book take `given`
    /// (the room of the drained row the delta came from, handed over still charged)
    /// and what they need beyond it from the aggregator's budget, in one step; room left
    /// over goes back. Refused, nothing changed and `given` back in the budget, when the
    /// budget cannot hold them all, a total would leave the `i64` range, or a row was
    /// released already.
    pub(crate) fn absorb_all(
        &mut self,
        rows: &[RowRef<'_>],
        deltas: &Columns,
        given: Room,
        aggregator: &Aggregator,
    ) -> Result<(), DropReason> {
        let new_rows = match self.new_rows_for(rows, deltas) {
            Ok(new_rows) => new_rows,
            Err(reason) => {
                aggregator.release_held(given.rows, given.bytes);
                return Err(reason);
            }
        };
        let width = deltas.as_slice().len();
        let needed = Room {
            rows: new_rows.len(),
            bytes: new_rows.iter().map(|id| row_bytes(id, width)).sum(),
        };
        aggregator.take_over_held(given, needed)?;
        for row in rows {
            if let Some(entry) = self.rows.get_mut(row) {
                entry.total.checked_add(deltas);
                if !entry.unwritten {
                    entry.unwritten = true;
                    self.unwritten.insert(row.to_id());
                }
            }
        }
        for id in new_rows {
            let bytes = row_bytes(&id, width);
            self.rows.insert(
                id.clone(),
                Entry {
                    total: deltas.clone(),
                    confirmed: Columns::zeroed(width),
                    unwritten: true,
                    maybe_ahead: false,
                    failures: 0,
                    not_before: 0,
                    failing_since: 0,
                    bytes,
                },
            );
            self.unwritten.insert(id);
        }
        Ok(())
    }

    /// The rows of `rows` new to the book, if the delta may go to all of them: no held
    /// total would overflow, no row was released.
    fn new_rows_for(
        &self,
        rows: &[RowRef<'_>],
        deltas: &Columns,
    ) -> Result<Vec<RowId>, DropReason> {
        let mut new_rows = Vec::new();
        for row in rows {
            match self.rows.get(row) {
                Some(entry) if !entry.total.can_add(deltas) => return Err(DropReason::Overflow),
                Some(_) => {}
                None => {
                    let id = row.to_id();
                    if self.closing.closes_at(&id) <= self.released_through {
                        return Err(DropReason::TimestampWindow);
                    }
                    new_rows.push(id);
                }
            }
        }
        Ok(new_rows)
    }

    /// Takes the rows to write at flush `flush`, with their newest totals, sorted by id
    /// (a partition's rows together): the rows the store may lack, but those still
    /// backing off (none when `all`, at shutdown), while what the flush holds for them
    /// ([`due_cost`]) fits `max_bytes` (at least one row): after an outage every row of
    /// the book comes due at once, and planned whole its copies would double the memory
    /// the budget allows. The rest stay unwritten for the next flush. Each row taken goes
    /// back to the unwritten set unless [`Book::confirm`] finds its newest total applied.
    ///
    /// Rows take turns when they do not all fit: in id order, from the row after the last
    /// one the previous such flush took, wrapping around, so a row changing every flush
    /// cannot keep another from ever being written.
    pub(crate) fn take_due(&mut self, flush: u64, all: bool, max_bytes: usize) -> Vec<Due> {
        let mut candidates: Vec<(RowId, usize)> = Vec::new();
        let mut waiting = Vec::new();
        for id in self.unwritten.drain() {
            match self.rows.get(&id) {
                Some(entry) if all || entry.not_before <= flush => {
                    let cost = due_cost(&id, &entry.total);
                    candidates.push((id, cost));
                }
                Some(_) => waiting.push(id),
                None => {}
            }
        }
        candidates.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let bounded = candidates.iter().map(|(_, cost)| cost).sum::<usize>() > max_bytes;
        if bounded && let Some(after) = &self.resume_after {
            let start = candidates.partition_point(|(id, _)| id <= after);
            candidates.rotate_left(start);
        }
        let mut due = Vec::new();
        let mut allowance = max_bytes;
        let mut candidates = candidates.into_iter();
        for (id, cost) in candidates.by_ref() {
            if !due.is_empty() && cost > allowance {
                waiting.push(id);
                break;
            }
            allowance = allowance.saturating_sub(cost);
            if let Some(entry) = self.rows.get(&id) {
                due.push(Due {
                    total: entry.total.clone(),
                    unconfirmed: difference(&entry.total, &entry.confirmed),
                    id,
                });
            }
        }
        waiting.extend(candidates.map(|(id, _)| id));
        self.resume_after = if bounded {
            due.last().map(|d| d.id.clone())
        } else {
            None
        };
        self.unwritten.extend(waiting);
        due.sort_by(|a, b| a.id.cmp(&b.id));
        due
    }

    /// Whether a row is due at flush `flush` (any unwritten row when `all`): what a
    /// final flush goes on for once [`Book::take_due`] left some for want of room.
    pub(crate) fn has_due(&self, flush: u64, all: bool) -> bool {
        self.unwritten.iter().any(|id| {
            self.rows
                .get(id)
                .is_some_and(|entry| all || entry.not_before <= flush)
        })
    }

    /// The rows [`Book::take_due`] would take, without taking them.
    #[cfg(test)]
    pub(crate) fn due(&self, flush: u64, all: bool) -> Vec<Due> {
        let mut due: Vec<Due> = self
            .unwritten
            .iter()
            .filter_map(|id| {
                let entry = self.rows.get(id)?;
                (all || entry.not_before <= flush).then(|| Due {
                    id: id.clone(),
                    total: entry.total.clone(),
                    unconfirmed: difference(&entry.total, &entry.confirmed),
                })
            })
            .collect();
        due.sort_by(|a, b| a.id.cmp(&b.id));
        due
    }

    /// A write of `sent` for `id` applied: returns the newly applied part (`sent` minus
    /// the previous confirmed total).
    pub(crate) fn confirm(&mut self, row: RowRef<'_>, sent: &Columns) -> i128 {
        let Some(entry) = self.rows.get_mut(&row) else {
            return 0;
        };
        let applied = sent.sum() - entry.confirmed.sum();
        entry.confirmed.clone_from(sent);
        // Written later, this total replaced whatever an unknown write left.
        entry.maybe_ahead = false;
        if entry.total == *sent {
            entry.unwritten = false;
            entry.failures = 0;
            entry.not_before = 0;
            entry.failing_since = 0;
            self.unwritten.remove(&row);
        } else {
            self.unwritten.insert(row.to_id());
        }
        applied
    }

    /// A write of `id` did not apply (or, `may_have_applied`, its outcome is unknown):
    /// the row stays unwritten and backs off (see [`next_attempt`]).
    pub(crate) fn failed(
        &mut self,
        id: &RowId,
        flush: u64,
        now_unix_secs: u32,
        may_have_applied: bool,
    ) {
        if let Some(entry) = self.rows.get_mut(id) {
            if may_have_applied && entry.total != entry.confirmed {
                entry.maybe_ahead = true;
            }
            entry.failures = entry.failures.saturating_add(1);
            entry.not_before = next_attempt(entry.failures, flush);
            if entry.failing_since == 0 {
                entry.failing_since = now_unix_secs.max(1);
            }
            if !self.unwritten.contains(id) {
                self.unwritten.insert(id.clone());
            }
        }
    }

    /// A write of `id` was held back before anything was sent (its group commit
    /// failed): the row stays unwritten, due again with the next flush, without a
    /// failure counted against it.
    pub(crate) fn hold(&mut self, id: &RowId) {
        if self.rows.contains_key(id) && !self.unwritten.contains(id) {
            self.unwritten.insert(id.clone());
        }
    }

    /// Unix seconds of the first failure of the row's current streak, if it is failing.
    pub(crate) fn failing_since(&self, id: &RowId) -> Option<u32> {
        self.rows
            .get(id)
            .map(|e| e.failing_since)
            .filter(|&since| since != 0)
    }

    /// The store refused the row for good: its total goes back to the confirmed one, and
    /// the part that was not applied is returned (to be logged as rejected). When an
    /// earlier write of a larger total ended unknown, the store may hold that one: the
    /// row stays unwritten, so that one more write (the confirmed total, a later write
    /// time) brings the cell back to what the rejected record leaves out. Without it the
    /// cell would keep a part the record also holds: counted twice.
    pub(crate) fn reject(&mut self, id: &RowId) -> Columns {
        let Some(entry) = self.rows.get_mut(id) else {
            return Columns::zeroed(0);
        };
        let refused = difference(&entry.total, &entry.confirmed);
        entry.total = entry.confirmed.clone();
        entry.failures = 0;
        entry.failing_since = 0;
        // Only a write that applies clears `maybe_ahead` (`confirm`): the rewrite may end
        // unknown too, and a later refusal must then rewrite again. A refused rewrite
        // (nothing refused: the total is the confirmed one) ends it.
        if entry.maybe_ahead && !refused.is_zero() {
            entry.unwritten = true;
            entry.not_before = 0;
            self.unwritten.insert(id.clone());
        } else {
            entry.maybe_ahead = false;
            entry.unwritten = false;
            self.unwritten.remove(id);
        }
        refused
    }

    /// The row's newest total goes to the spill: returns it with the part not known
    /// applied. The book then treats it as written; `release` also frees the row (it must
    /// be closed: an open row would start again from zero).
    pub(crate) fn spill(&mut self, id: &RowId, release: bool, aggregator: &Aggregator) -> Spilled {
        let spilled = match self.rows.get_mut(id) {
            Some(entry) => {
                let unconfirmed = difference(&entry.total, &entry.confirmed);
                entry.confirmed = entry.total.clone();
                entry.unwritten = false;
                entry.failures = 0;
                entry.failing_since = 0;
                Spilled {
                    total: entry.total.clone(),
                    unconfirmed,
                }
            }
            None => Spilled {
                total: Columns::zeroed(0),
                unconfirmed: Columns::zeroed(0),
            },
        };
        self.unwritten.remove(id);
        if release && let Some(entry) = self.rows.remove(id) {
            aggregator.release_held(1, entry.bytes);
            self.released_through = self.released_through.max(self.closing.closes_at(id));
        }
        spilled
    }

    /// Whether `id` is closed at `now_unix_secs`.
    pub(crate) fn is_closed(&self, id: &RowId, now_unix_secs: i64) -> bool {
        self.closing.closes_at(id) <= now_unix_secs
    }

    /// Frees closed rows whose newest total was applied (at most once per minute);
    /// returns how many.
    pub(crate) fn release_closed(&mut self, now_unix_secs: i64, aggregator: &Aggregator) -> usize {
        let minute = now_unix_secs.div_euclid(60);
        if minute == self.last_release_minute {
            return 0;
        }
        self.last_release_minute = minute;
        let closing = self.closing;
        let (mut rows, mut bytes) = (0, 0);
        self.rows.retain(|id, entry| {
            let release = !entry.unwritten && closing.closes_at(id) <= now_unix_secs;
            if release {
                rows += 1;
                bytes += entry.bytes;
            }
            !release
        });
        self.released_through = self.released_through.max(now_unix_secs);
        if rows > 0 {
            aggregator.release_held(rows, bytes);
        }
        rows
    }

    /// Rows held in memory.
    pub(crate) fn held(&self) -> usize {
        self.rows.len()
    }

    /// Rows whose newest total the store may lack.
    pub(crate) fn unwritten(&self) -> usize {
        self.unwritten.len()
    }

    /// The signed sum of what is not known applied, in one table granularity.
    pub(crate) fn unconfirmed_sum(&self, table: Granularity) -> i128 {
        self.unwritten
            .iter()
            .filter(|id| id.table == table)
            .filter_map(|id| self.rows.get(id))
            .map(|e| e.total.sum() - e.confirmed.sum())
            .sum()
    }

    /// Gives every held row's room back (the book is going away).
    pub(crate) fn release_all(&mut self, aggregator: &Aggregator) {
        let bytes = self.rows.values().map(|e| e.bytes).sum();
        aggregator.release_held(self.rows.len(), bytes);
        self.rows.clear();
        self.unwritten.clear();
    }
}

/// How far ahead, in flushes, a failing row's next attempt is: the next flush after its
/// first failure, twice as far per further failure, and at most one past
/// [`MAX_BACKOFF_FLUSHES`] skipped flushes. Counted in flushes, not time, so the unit of
/// this back-off is a flush.
const ROW_BACKOFF: Backoff<u64> = Backoff::new(1, MAX_BACKOFF_FLUSHES + 1);

/// The first flush at which a row that failed `failures` times in a row, the last time
/// at flush `flush`, is sent again: it skips `2^(failures - 1) - 1` flushes, at most
/// [`MAX_BACKOFF_FLUSHES`] (about a minute at the default interval).
pub(crate) fn next_attempt(failures: u32, flush: u64) -> u64 {
    flush + ROW_BACKOFF.delay(failures)
}

/// The memory estimate of one held row: its key, its two totals, the map's slot.
fn row_bytes(id: &RowId, width: usize) -> usize {
    let heap_columns = if width > 1 {
        2 * (size_of::<Vec<i64>>() + width * size_of::<i64>())
    } else {
        0
    };
    size_of::<RowId>() + size_of::<Entry>() + id.series.len() + heap_columns + 16
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::Limits;
    use crate::bucket::Minute;

    const NOW: i64 = 1_800_000_000;
    const HOUR: i64 = 3600;

    fn aggregator(max_rows: usize) -> Aggregator {
        Aggregator::new(
            Limits {
                max_pending_rows: max_rows,
                ..Limits::default()
            },
            1,
            Some(1),
        )
    }

    fn minute_row(key: &str, unix: i64) -> RowId {
        RowId {
            family: FamilyId(1),
            table: Granularity::Minute,
            series: crate::series::encode([key]).into_boxed_slice(),
            bucket: Minute::from_unix_secs(unix).unwrap().0,
        }
    }

    fn book() -> Book {
        Book::new(Closing {
            max_past_secs: HOUR,
        })
    }

    fn one(v: i64) -> Columns {
        Columns::One(v)
    }

    #[test]
    fn totals_run_and_confirm_the_newly_applied_part() {
        let agg = aggregator(100);
        let mut b = book();
        let id = minute_row("a", NOW);
        b.absorb(id.as_ref(), &one(3), &agg).unwrap();
        b.absorb(id.as_ref(), &one(4), &agg).unwrap();
        let due = b.due(1, false);
        assert_eq!(
            due,
            [Due {
                id: id.clone(),
                total: one(7),
                unconfirmed: one(7),
            }]
        );
        assert_eq!(b.confirm(id.as_ref(), &one(7)), 7);
        assert!(b.due(2, false).is_empty(), "nothing new");
        b.absorb(id.as_ref(), &one(-2), &agg).unwrap();
        assert_eq!(
            b.due(2, false)[0].total,
            one(5),
            "the absolute total, not the delta"
        );
        assert_eq!(
            b.due(2, false)[0].unconfirmed,
            one(-2),
            "what the store lacks: the total minus the confirmed 7"
        );
        assert_eq!(b.confirm(id.as_ref(), &one(5)), -2);
        assert_eq!((b.held(), b.unwritten()), (1, 0));
        assert_eq!(agg.pending_rows_estimate(), 1, "the row holds its room");
    }

    /// The flush of the next attempt at the edges of the failure count: no failure and the
    /// first one both mean the next flush, and no count runs past the maximum or panics.
    #[test]
    fn the_next_attempt_at_the_edges_of_the_failure_count() {
        let cases: [(u32, u64); 7] = [
            (0, 101),
            (1, 101),
            (2, 102),
            (4, 108),
            (5, 100 + 1 + MAX_BACKOFF_FLUSHES),
            (64, 100 + 1 + MAX_BACKOFF_FLUSHES),
            (u32::MAX, 100 + 1 + MAX_BACKOFF_FLUSHES),
        ];
        for (failures, expected) in cases {
            assert_eq!(
                next_attempt(failures, 100),
                expected,
                "after {failures} failures"
            );
        }
    }

    /// A failed write backs off 0, 1, 3, 7 flushes ... up to the maximum; the newest total
    /// goes with the next attempt; an applied write ends the streak.
    #[test]
    fn failures_back_off_and_the_newest_total_is_resent() {
        let agg = aggregator(100);
        let mut b = book();
        let id = minute_row("a", NOW);
        b.absorb(id.as_ref(), &one(1), &agg).unwrap();
        let mut flush = 1;
        let mut waits = Vec::new();
        for _ in 0..6 {
            assert_eq!(b.due(flush, false).len(), 1);
            b.failed(&id, flush, 100, false);
            let next = (flush + 1..flush + 100)
                .find(|f| !b.due(*f, false).is_empty())
                .unwrap();
            waits.push(next - flush - 1);
            flush = next;
        }
        assert_eq!(waits, [0, 1, 3, 7, 11, 11]);
        assert_eq!(b.failing_since(&id), Some(100));
        b.absorb(id.as_ref(), &one(1), &agg).unwrap();
        assert_eq!(b.due(flush, false)[0].total, one(2));
        assert_eq!(b.due(0, true).len(), 1, "shutdown ignores the back-off");
        b.confirm(id.as_ref(), &one(2));
        assert_eq!(b.failing_since(&id), None);
    }

    /// A refusal after an unknown write schedules a rewrite of the confirmed total; a
    /// rewrite that ends unknown too keeps that owed, so the next refusal rewrites
    /// again; a refused rewrite (nothing refused) ends it; an applied write clears it.
    #[test]
    fn a_refusal_after_an_unknown_write_rewrites_until_a_write_applies() {
        let agg = aggregator(100);
        let mut b = book();
        let id = minute_row("a", NOW);
        b.absorb(id.as_ref(), &one(10), &agg).unwrap();
        b.failed(&id, 1, 100, true);
        assert_eq!(b.reject(&id), one(10));
        assert_eq!(b.unwritten(), 1, "the confirmed total is written again");
        b.failed(&id, 2, 100, true);
        b.absorb(id.as_ref(), &one(2), &agg).unwrap();
        assert_eq!(b.reject(&id), one(2));
        assert_eq!(b.unwritten(), 1, "still owed: the rewrite ended unknown");
        assert_eq!(b.reject(&id), one(0), "the rewrite refused");
        assert_eq!(b.unwritten(), 0);
        b.absorb(id.as_ref(), &one(3), &agg).unwrap();
        b.failed(&id, 3, 100, true);
        b.confirm(id.as_ref(), &one(3));
        b.absorb(id.as_ref(), &one(1), &agg).unwrap();
        assert_eq!(b.reject(&id), one(1));
        assert_eq!(
            b.unwritten(),
            0,
            "applied since: nothing ahead of the confirmed total"
        );
    }

    /// More rows due than a flush's allowance takes, every one of them changing every
    /// flush: the rows take turns, so each is written within a few flushes (not the
    /// same ones first every time).
    #[test]
    fn rows_that_do_not_all_fit_take_turns() {
        let agg = aggregator(1_000);
        let mut b = book();
        let ids: Vec<RowId> = (0..100)
            .map(|i| minute_row(&format!("r{i:03}"), NOW))
            .collect();
        let allowance = 30 * due_cost(&ids[0], &one(1));
        let mut taken = std::collections::BTreeSet::new();
        for flush in 1..=5 {
            for id in &ids {
                b.absorb(id.as_ref(), &one(1), &agg).unwrap();
            }
            let due = b.take_due(flush, false, allowance);
            assert!(!due.is_empty() && due.len() <= 30, "{}", due.len());
            for row in due {
                b.confirm(row.id.as_ref(), &row.total);
                taken.insert(row.id);
            }
        }
        assert_eq!(taken.len(), 100, "every row written within five flushes");
    }

    /// An applied total confirmed while a newer one arrived keeps the row unwritten.
    #[test]
    fn a_confirmation_of_an_older_total_keeps_the_row_unwritten() {
        let agg = aggregator(100);
        let mut b = book();
        let id = minute_row("a", NOW);
        b.absorb(id.as_ref(), &one(1), &agg).unwrap();
        b.absorb(id.as_ref(), &one(1), &agg).unwrap();
        assert_eq!(b.confirm(id.as_ref(), &one(1)), 1);
        assert_eq!(b.unwritten(), 1);
        assert_eq!(b.unconfirmed_sum(Granularity::Minute), 1);
    }

    #[test]
    fn closed_confirmed_rows_are_released_and_late_increments_refused() {
        let agg = aggregator(100);
        let mut b = book();
        let old = minute_row("a", NOW - 2 * HOUR);
        let open = minute_row("b", NOW - 60);
        let failing = minute_row("c", NOW - 2 * HOUR);
        for id in [&old, &open, &failing] {
            b.absorb(id.as_ref(), &one(1), &agg).unwrap();
        }
        b.confirm(old.as_ref(), &one(1));
        b.confirm(open.as_ref(), &one(1));
        assert!(b.is_closed(&old, NOW) && !b.is_closed(&open, NOW));
        assert_eq!(
            b.release_closed(NOW, &agg),
            1,
            "only the closed, confirmed row"
        );
        assert_eq!(b.release_closed(NOW + 1, &agg), 0, "once per minute");
        assert_eq!((b.held(), agg.pending_rows_estimate()), (2, 2));
        assert_eq!(
            b.absorb(old.as_ref(), &one(1), &agg),
            Err(DropReason::TimestampWindow),
            "restarting a released row from zero would overwrite its total"
        );
        b.absorb(open.as_ref(), &one(1), &agg).unwrap();
        let spilled = b.spill(&failing, true, &agg);
        assert_eq!((spilled.total, spilled.unconfirmed), (one(1), one(1)));
        assert_eq!((b.held(), agg.pending_rows_estimate()), (1, 1));
    }

    #[test]
    fn the_budget_and_the_i64_range_bound_what_is_held() {
        let agg = aggregator(1);
        let mut b = book();
        b.absorb(minute_row("a", NOW).as_ref(), &one(i64::MAX), &agg)
            .unwrap();
        assert_eq!(
            b.absorb(minute_row("b", NOW).as_ref(), &one(1), &agg),
            Err(DropReason::MaxRows)
        );
        assert_eq!(
            b.absorb(minute_row("a", NOW).as_ref(), &one(1), &agg),
            Err(DropReason::Overflow)
        );
        assert_eq!(b.due(1, false)[0].total, one(i64::MAX), "unchanged");
        b.release_all(&agg);
        assert_eq!(agg.pending_rows_estimate(), 0);
    }

    /// The book's estimate (docs/src/concepts/counting-modes.md): about 100 bytes plus the key, per held row.
    #[test]
    fn a_held_row_is_charged_about_a_hundred_bytes_plus_its_key() {
        let id = minute_row("k-0123456789abcdef0123456789", NOW);
        let overhead = row_bytes(&id, 1) - id.series.len();
        assert!((90..=120).contains(&overhead), "{overhead}");
    }

    #[test]
    fn a_rejected_row_falls_back_to_its_confirmed_total() {
        let agg = aggregator(10);
        let mut b = book();
        let id = minute_row("a", NOW);
        b.absorb(id.as_ref(), &one(5), &agg).unwrap();
        b.confirm(id.as_ref(), &one(5));
        b.absorb(id.as_ref(), &one(3), &agg).unwrap();
        assert_eq!(b.reject(&id), one(3));
        assert_eq!(b.unwritten(), 0);
        b.absorb(id.as_ref(), &one(1), &agg).unwrap();
        assert_eq!(
            b.due(1, false)[0].total,
            one(6),
            "5 confirmed + 1; the 3 were rejected"
        );
    }
}
