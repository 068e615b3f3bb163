//! The wrapper's buffer: pending deltas per (table, full primary key), one slot per counter
//! column, synchronous, with time passed in.
//!
//! The sidecar's aggregation core is keyed by (family, series, minute) and owns the
//! minute/day derivation; the wrapper's rows are the application's own primary keys of
//! any CQL types, so they get this small buffer instead, built the same way: stripes
//! chosen per thread (a hot row counted by two threads takes two locks, not one), a row
//! and byte budget shared by all stripes, a drain that swaps each stripe's map under its
//! lock (an add racing with it lands in the drained map or the fresh one, never both,
//! never neither), and a closed flag read under the same lock for the final drain.
//!
//! The budget is the sidecar's ([`crate::aggregate::Credit`] and the budget behind it):
//! it covers every row held, pending or drained by the flush running now. A drained row
//! keeps its room until its write settles, and a row re-queued after a write that did not
//! apply takes that room back, so a store that applies nothing cannot make the buffer
//! grow past its limits: new rows are refused (sent unchanged) instead. Crossing three
//! quarters of either limit asks for an early flush ([`Buffer::set_on_pressure`]).
//!
//! A row key is the table's number (4 bytes) followed by each key column's serialized
//! value, length-prefixed: exactly the bytes the application's driver serialized, so two
//! executions address the same row exactly when the store would think so.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

use crate::aggregate::{Budget, Credit, SharedBudget};

/// A buffered row's deltas, in its table's counter column order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingRow {
    /// One delta per counter column of the table (0: nothing pending for that column).
    pub deltas: Box<[i64]>,
    /// Unix seconds of its first failed attempt, 0 when never attempted.
    pub requeued_since: u32,
}

/// Why an add was refused (nothing of it was added).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The row or byte budget is used up.
    Full,
    /// A row's pending sum would leave the i64 range.
    Overflow,
    /// The buffer was closed for the final drain.
    Closed,
}

/// One row's share of an add: the row's key, its table's column count, and (column,
/// delta) pairs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowAdd {
    /// The row key (see the module doc).
    pub key: Box<[u8]>,
    /// How many counter columns its table has.
    pub columns: usize,
    /// The deltas, by column position.
    pub deltas: Vec<(usize, i64)>,
}

/// Rough memory of one buffered row besides its key and deltas: map slot, boxes, hash.
const ROW_OVERHEAD_BYTES: usize = 64;

/// Memory a flush holds for one drained row while its request is in flight, on top of the
/// row's own: the drained list, the plan's partition and request, the journal's intent
/// and answer, the decision, the re-queue (measured with `cargo bench --bench
/// wrapper_outage`, as the sidecar's flush was).
const FLUSH_BYTES_PER_ROW: usize = 320;

/// The room one buffered row takes in the budget.
pub(super) fn row_bytes(key: &[u8], columns: usize) -> usize {
    key.len() + columns * 8 + ROW_OVERHEAD_BYTES
}

/// What a flush holds for one drained row besides its room (see [`FLUSH_BYTES_PER_ROW`]).
pub(super) fn flush_bytes(key: &[u8], columns: usize) -> usize {
    2 * key.len() + columns * 16 + FLUSH_BYTES_PER_ROW
}

#[derive(Default)]
struct Stripe {
    rows: HashMap<Box<[u8]>, PendingRow, foldhash::fast::RandomState>,
    /// Adds accepted (executions, or statements of a batch).
    adds: u64,
    /// Signed sum of every delta accepted.
    delta_sum: i128,
}

/// The striped buffer.
pub struct Buffer {
    stripes: Box<[CachePadded<Mutex<Stripe>>]>,
    /// Room for every row held: pending here, or drained and not settled yet.
    budget: SharedBudget,
    closed: AtomicBool,
}

static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static THREAD_STRIPE: Cell<Option<usize>> = const { Cell::new(None) };
}

fn thread_stripe() -> usize {
    THREAD_STRIPE.with(|cell| {
        cell.get().unwrap_or_else(|| {
            let index = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
            cell.set(Some(index));
            index
        })
    })
}

/// The rows of one drain (a row whose stripes' sums could not be added without leaving
/// the i64 range appears more than once), and the room they still hold in the budget.
#[derive(Debug)]
pub struct Drained {
    /// The rows.
    pub rows: Vec<(Box<[u8]>, PendingRow)>,
    /// Their room: re-queued rows take theirs from it ([`Buffer::requeue`]); what is left
    /// returns to the budget when it is dropped (the flush settled the rest).
    pub room: Credit,
}

/// How an add claims room for its new rows.
#[derive(Clone, Copy)]
enum Reserve {
    /// Increments the application just made: crossing the pressure mark asks for an
    /// early flush.
    Fresh,
    /// Rows coming back from the spill: no early flush.
    Quiet,
}

/// Why a re-queued row could not go back into the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unmerged {
    /// Its sum with what arrived since would leave the i64 range.
    Overflow,
    /// The budget has no room for it (its own was given up).
    NoRoom,
}

impl Buffer {
    /// An empty buffer with `stripes` stripes and the given budget.
    pub fn new(stripes: usize, max_rows: usize, max_bytes: usize) -> Buffer {
        Buffer {
            stripes: (0..stripes.max(1))
                .map(|_| CachePadded::new(Mutex::new(Stripe::default())))
                .collect(),
            budget: Arc::new(CachePadded::new(Budget::with_maxima(max_rows, max_bytes))),
            closed: AtomicBool::new(false),
        }
    }

    /// Sets what to call, once per crossing, when the rows held pass three quarters of
    /// either limit (the flush loop flushes early, unless it is backing off).
    pub fn set_on_pressure(&self, callback: Box<dyn Fn() + Send + Sync>) {
        self.budget.set_on_pressure(callback);
    }

    /// Whether the rows held are past three quarters of either limit now.
    pub fn under_pressure(&self) -> bool {
        self.budget.under_pressure()
    }

    /// Adds one execution's deltas to the row `key` of a table with `columns` counter
    /// columns, or nothing (each column at most once in `deltas`). Allocates only for a
    /// new row.
    pub fn add_one(
        &self,
        key: &[u8],
        columns: usize,
        deltas: &[(usize, i64)],
    ) -> Result<(), Refused> {
        let stripe = &self.stripes[thread_stripe() % self.stripes.len()];
        let mut guard = stripe.lock();
        if self.closed.load(Ordering::Acquire) {
            return Err(Refused::Closed);
        }
        let stripe = &mut *guard;
        let row = match stripe.rows.get_mut(key) {
            Some(row) => {
                for &(column, delta) in deltas {
                    let now = row.deltas.get(column).copied().unwrap_or(0);
                    now.checked_add(delta).ok_or(Refused::Overflow)?;
                }
                row
            }
            None => {
                self.reserve(1, row_bytes(key, columns))?;
                stripe.rows.entry(key.into()).or_insert_with(|| PendingRow {
                    deltas: vec![0; columns].into_boxed_slice(),
                    requeued_since: 0,
                })
            }
        };
        let mut sum = 0_i128;
        for &(column, delta) in deltas {
            if let Some(slot) = row.deltas.get_mut(column) {
                // Checked above.
                *slot = slot.saturating_add(delta);
                sum += i128::from(delta);
            }
        }
        stripe.adds += 1;
        stripe.delta_sum += sum;
        Ok(())
    }

    /// Adds every row of `adds`, or none of them.
    pub fn add(&self, adds: &[RowAdd]) -> Result<(), Refused> {
        self.add_rows(adds, Reserve::Fresh)
    }

    /// Adds a row an earlier process spilled, as [`Buffer::add`] does, without asking for
    /// an early flush: the flush replaying it drains it at once anyway.
    pub fn add_replayed(&self, add: &RowAdd) -> Result<(), Refused> {
        self.add_rows(std::slice::from_ref(add), Reserve::Quiet)
    }

    fn add_rows(&self, adds: &[RowAdd], reserve: Reserve) -> Result<(), Refused> {
        let stripe = &self.stripes[thread_stripe() % self.stripes.len()];
        let mut stripe = stripe.lock();
        if self.closed.load(Ordering::Acquire) {
            return Err(Refused::Closed);
        }
        // Check everything first: the sums, and the budget for the new rows.
        let (mut new_rows, mut new_bytes) = (0, 0);
        for (i, add) in adds.iter().enumerate() {
            let earlier = adds[..i].iter().filter(|a| a.key == add.key);
            let existing = stripe.rows.get(&add.key);
            if existing.is_none() && adds[..i].iter().all(|a| a.key != add.key) {
                new_rows += 1;
                new_bytes += row_bytes(&add.key, add.columns);
            }
            for &(column, delta) in &add.deltas {
                let mut sum =
                    existing.map_or(0, |row| row.deltas.get(column).copied().unwrap_or(0));
                for a in earlier.clone() {
                    for &(c, d) in &a.deltas {
                        if c == column {
                            sum = sum.checked_add(d).ok_or(Refused::Overflow)?;
                        }
                    }
                }
                sum.checked_add(delta).ok_or(Refused::Overflow)?;
            }
        }
        if new_rows > 0 {
            match reserve {
                Reserve::Fresh => self.reserve(new_rows, new_bytes)?,
                Reserve::Quiet if self.budget.try_reserve_quiet(new_rows, new_bytes) => {}
                Reserve::Quiet => return Err(Refused::Full),
            }
        }
        for add in adds {
            if !stripe.rows.contains_key(&add.key) {
                let row = PendingRow {
                    deltas: vec![0; add.columns].into_boxed_slice(),
                    requeued_since: 0,
                };
                stripe.rows.insert(add.key.clone(), row);
            }
            let Some(row) = stripe.rows.get_mut(&add.key) else {
                continue;
            };
            let mut sum = 0_i128;
            for &(column, delta) in &add.deltas {
                if let Some(slot) = row.deltas.get_mut(column) {
                    // Checked above.
                    *slot = slot.saturating_add(delta);
                    sum += i128::from(delta);
                }
            }
            stripe.adds += 1;
            stripe.delta_sum += sum;
        }
        Ok(())
    }

    fn reserve(&self, rows: usize, bytes: usize) -> Result<(), Refused> {
        self.budget
            .try_reserve_rows(rows, bytes)
            .map_err(|_| Refused::Full)
    }

    /// Takes every buffered row, summing a row held by several stripes. The rows keep
    /// their room until the returned [`Drained::room`] is dropped.
    pub fn drain(&self) -> Drained {
        self.drain_chunk(usize::MAX)
    }

    /// Takes buffered rows while what a flush holds for them (`flush_bytes`) stays
    /// within `flush_bytes` (at least one row), summing a row held by several stripes in
    /// one chunk (a row of two stripes may also go out in two chunks: two requests, each
    /// its own part). The rows keep their room until the returned [`Drained::room`] is
    /// dropped. So a flush holds one chunk's copies at a time, never a second copy of
    /// every pending row.
    pub fn drain_chunk(&self, flush_bytes: usize) -> Drained {
        let mut rows: Vec<(Box<[u8]>, PendingRow)> = Vec::new();
        let mut at: HashMap<Box<[u8]>, usize, foldhash::fast::RandomState> = HashMap::default();
        let (mut held_rows, mut held_bytes) = (0, 0);
        let (mut allowance, mut taken_any) = (flush_bytes, false);
        for stripe in self.stripes.iter() {
            let mut stripe = stripe.lock();
            let taken: Vec<(Box<[u8]>, PendingRow)> = if allowance == usize::MAX {
                std::mem::take(&mut stripe.rows).into_iter().collect()
            } else {
                stripe
                    .rows
                    .extract_if(|key, row| {
                        let cost = self::flush_bytes(key, row.deltas.len());
                        if taken_any && cost > allowance {
                            return false;
                        }
                        allowance = allowance.saturating_sub(cost);
                        taken_any = true;
                        true
                    })
                    .collect()
            };
            drop(stripe);
            for (key, row) in taken {
                held_rows += 1;
                held_bytes += row_bytes(&key, row.deltas.len());
                // Two stripes' sums of one row can only leave the i64 range together if
                // the row's total does: then they stay two entries (two requests), never
                // a wrapped sum.
                match at.get(&key) {
                    Some(&i) if add_row(&mut rows[i].1, &row).is_ok() => {}
                    _ => {
                        at.insert(key.clone(), rows.len());
                        rows.push((key, row));
                    }
                }
            }
        }
        Drained {
            rows,
            room: Credit::new(Arc::clone(&self.budget), held_rows, held_bytes),
        }
    }

    /// A credit of nothing on the buffer's budget: rows read back from the spill claim
    /// their room into it (`Credit::claim`), as they would in the buffer.
    pub fn credit(&self) -> Credit {
        Credit::new(Arc::clone(&self.budget), 0, 0)
    }

    /// Counts `adds` rows summing to `sum` read back from the spill as accepted (they go
    /// out in a flush of their own, not through the buffer); negative to take back rows
    /// whose flush could not be committed (they stay in the spill).
    pub fn count_replayed(&self, adds: i64, sum: i128) {
        let mut stripe = self.stripes[0].lock();
        stripe.adds = stripe.adds.saturating_add_signed(adds);
        stripe.delta_sum += sum;
    }

    /// Puts rows that definitely were not applied back, first failure at `now_unix_secs`
    /// unless they failed before. A row some stripe holds now (an add since the drain)
    /// joins it there, whichever thread's stripe that is, so whether a re-queued row
    /// can go back never depends on which thread the application called from. A row new
    /// to the buffer goes to the first stripe and takes its room from `room` (the
    /// drain's), then from the budget within its limits. Returns the rows that could not
    /// go back, with why.
    pub fn requeue(
        &self,
        rows: Vec<(Box<[u8]>, PendingRow)>,
        now_unix_secs: u32,
        room: &mut Credit,
    ) -> Vec<(Box<[u8]>, PendingRow, Unmerged)> {
        let mut refused = Vec::new();
        let mut left: Vec<(Box<[u8]>, PendingRow)> = rows
            .into_iter()
            .map(|(key, mut row)| {
                if row.requeued_since == 0 {
                    row.requeued_since = now_unix_secs.max(1);
                }
                (key, row)
            })
            .collect();
        // One lock of each stripe at a time (adds on other stripes go on): the rows a
        // stripe holds a key of join it. A key added to a stripe after it was looked at
        // goes to the first stripe as well: the next drain sums the two, as it sums a key
        // that several threads added to their own stripes.
        for stripe in self.stripes.iter().skip(1) {
            if left.is_empty() {
                break;
            }
            let mut stripe = stripe.lock();
            left.retain_mut(|(key, row)| match stripe.rows.get_mut(&**key) {
                Some(into) => {
                    merge_requeued(into, key, row, &mut refused);
                    false
                }
                None => true,
            });
        }
        let mut stripe = self.stripes[0].lock();
        for (key, mut row) in left {
            match stripe.rows.get_mut(&key) {
                Some(into) => merge_requeued(into, &key, &mut row, &mut refused),
                None if room.spend(row_bytes(&key, row.deltas.len())) => {
                    stripe.rows.insert(key, row);
                }
                None => refused.push((key, row, Unmerged::NoRoom)),
            }
        }
        refused
    }

    /// Refuses every later add; the next drain is the last one with anything in it.
    pub fn close(&self) {
        // Under each lock, so an add either finished before or sees the flag.
        for stripe in self.stripes.iter() {
            let _held = stripe.lock();
            self.closed.store(true, Ordering::Release);
        }
    }

    /// Rows held: pending, or drained by the flush running now and not settled yet.
    pub fn pending_rows(&self) -> usize {
        self.budget.rows()
    }

    /// The signed sum of every pending delta.
    pub fn pending_sum(&self) -> i128 {
        self.stripes
            .iter()
            .map(|stripe| {
                let stripe = stripe.lock();
                stripe
                    .rows
                    .values()
                    .flat_map(|row| row.deltas.iter())
                    .map(|d| i128::from(*d))
                    .sum::<i128>()
            })
            .sum()
    }

    /// Adds accepted so far, and the signed sum of their deltas.
    pub fn accepted(&self) -> (u64, i128) {
        self.stripes.iter().fold((0, 0), |(adds, sum), stripe| {
            let stripe = stripe.lock();
            (adds + stripe.adds, sum + stripe.delta_sum)
        })
    }
}

/// Adds `row`'s deltas into `into`, all or nothing.
/// Adds a re-queued `row` into the row a stripe holds, keeping the earlier first failure;
/// a sum that would leave the i64 range leaves `into` as it was and refuses `row`.
fn merge_requeued(
    into: &mut PendingRow,
    key: &[u8],
    row: &mut PendingRow,
    refused: &mut Vec<(Box<[u8]>, PendingRow, Unmerged)>,
) {
    if add_row(into, row).is_err() {
        refused.push((
            key.into(),
            std::mem::replace(row, empty_row()),
            Unmerged::Overflow,
        ));
    } else if into.requeued_since == 0 || into.requeued_since > row.requeued_since {
        into.requeued_since = row.requeued_since;
    }
}

/// A row of no columns: what a refused row's place holds once the row moved out.
fn empty_row() -> PendingRow {
    PendingRow {
        deltas: Box::default(),
        requeued_since: 0,
    }
}

fn add_row(into: &mut PendingRow, row: &PendingRow) -> Result<(), ()> {
    if into.deltas.len() != row.deltas.len() {
        return Err(());
    }
    let sums: Option<Vec<i64>> = into
        .deltas
        .iter()
        .zip(row.deltas.iter())
        .map(|(a, b)| a.checked_add(*b))
        .collect();
    into.deltas = sums.ok_or(())?.into_boxed_slice();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(key: &[u8], deltas: &[(usize, i64)]) -> RowAdd {
        RowAdd {
            key: key.into(),
            columns: 2,
            deltas: deltas.to_vec(),
        }
    }

    #[test]
    fn adds_sum_per_row_and_column_and_a_drain_takes_them_all() {
        let buffer = Buffer::new(4, 100, 1 << 20);
        buffer.add(&[add(b"a", &[(0, 1)])]).unwrap();
        buffer.add(&[add(b"a", &[(0, 2), (1, -5)])]).unwrap();
        buffer.add(&[add(b"b", &[(1, 7)])]).unwrap();
        assert_eq!(buffer.pending_rows(), 2);
        assert_eq!(buffer.accepted(), (3, 5));
        let mut rows = buffer.drain().rows;
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(rows[0].1.deltas.as_ref(), [3, -5]);
        assert_eq!(rows[1].1.deltas.as_ref(), [0, 7]);
        assert_eq!(buffer.pending_rows(), 0);
        assert!(buffer.drain().rows.is_empty());
    }

    #[test]
    fn a_full_budget_or_an_overflow_refuses_the_whole_add() {
        let buffer = Buffer::new(1, 2, 1 << 20);
        buffer.add(&[add(b"a", &[(0, 1)])]).unwrap();
        assert_eq!(
            buffer.add(&[add(b"b", &[(0, 1)]), add(b"c", &[(0, 1)])]),
            Err(Refused::Full)
        );
        assert_eq!(buffer.pending_rows(), 1);
        assert_eq!(
            buffer.add(&[add(b"b", &[(0, 1)]), add(b"a", &[(0, i64::MAX)])]),
            Err(Refused::Overflow)
        );
        // Two statements of one batch on the same row overflow together.
        assert_eq!(
            buffer.add(&[add(b"b", &[(0, i64::MAX)]), add(b"b", &[(0, 1)])]),
            Err(Refused::Overflow)
        );
        assert_eq!(buffer.accepted(), (1, 1));
        buffer
            .add(&[add(b"b", &[(0, 1)]), add(b"b", &[(0, 1)])])
            .unwrap();
        assert_eq!(buffer.pending_rows(), 2);
    }

    #[test]
    fn requeued_rows_merge_with_new_adds_and_keep_their_first_failure() {
        let buffer = Buffer::new(2, 10, 1 << 20);
        buffer.add(&[add(b"a", &[(0, 1)])]).unwrap();
        let Drained { rows, mut room } = buffer.drain();
        buffer.add(&[add(b"a", &[(0, 10)])]).unwrap();
        assert!(buffer.requeue(rows, 1000, &mut room).is_empty());
        drop(room);
        let Drained { rows, mut room } = buffer.drain();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].1.deltas.as_ref(), [11, 0]);
        assert_eq!(rows[0].1.requeued_since, 1000);
        assert!(buffer.requeue(rows, 2000, &mut room).is_empty());
        assert_eq!(buffer.drain().rows[0].1.requeued_since, 1000);
    }

    /// A re-queued row meets the row an add made since on whichever thread's stripe it
    /// is: a sum past the i64 range is refused there, not held as a second entry of the
    /// same row (which would turn the answer into a matter of which thread the
    /// application called from).
    #[test]
    fn a_requeued_row_joins_the_stripe_that_holds_its_key() {
        let buffer = Arc::new(Buffer::new(4, 10, 1 << 20));
        buffer.add(&[add(b"a", &[(0, i64::MAX - 1)])]).unwrap();
        let Drained { rows, mut room } = buffer.drain();
        // Adds from threads until one lands on a stripe other than the first.
        let on_other_stripe = (0..64).any(|_| {
            let buffer = Arc::clone(&buffer);
            std::thread::spawn(move || {
                if thread_stripe().is_multiple_of(4) {
                    return false;
                }
                buffer.add(&[add(b"a", &[(0, 5)])]).unwrap();
                true
            })
            .join()
            .unwrap()
        });
        assert!(on_other_stripe);
        let refused = buffer.requeue(rows, 1000, &mut room);
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].1.deltas.as_ref(), [i64::MAX - 1, 0]);
        assert_eq!(refused[0].2, Unmerged::Overflow);
        drop(room);
        let pending = buffer.drain().rows;
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].1.deltas.as_ref(), [5, 0]);
    }

    /// A chunk takes rows while what a flush holds for them fits its allowance (at least
    /// one row); the rest stay pending, and every row comes out once over the chunks.
    #[test]
    fn a_chunk_takes_what_its_allowance_fits_and_the_chunks_take_every_row_once() {
        let buffer = Buffer::new(3, 100, 1 << 20);
        let keys: Vec<Vec<u8>> = (0..10_u8).map(|i| vec![b'k', i]).collect();
        for key in &keys {
            buffer.add(&[add(key, &[(0, 1)])]).unwrap();
        }
        let one = flush_bytes(&keys[0], 2);
        let Drained { rows, room } = buffer.drain_chunk(3 * one);
        assert_eq!(rows.len(), 3, "three rows' worth");
        assert_eq!(room.rows(), 3);
        assert_eq!(buffer.pending_rows(), 10, "drained rows hold their room");
        drop(room);
        assert_eq!(buffer.pending_rows(), 7);
        let mut seen: Vec<Box<[u8]>> = rows.into_iter().map(|(k, _)| k).collect();
        loop {
            let Drained { rows, .. } = buffer.drain_chunk(0);
            if rows.is_empty() {
                break;
            }
            assert_eq!(rows.len(), 1, "an allowance too small still takes one row");
            seen.extend(rows.into_iter().map(|(k, _)| k));
        }
        seen.sort();
        let mut all: Vec<Box<[u8]>> = keys.into_iter().map(Vec::into_boxed_slice).collect();
        all.sort();
        assert_eq!(seen, all);
    }

    #[test]
    fn drained_rows_keep_their_room_until_they_settle_and_requeued_ones_take_it_back() {
        let buffer = Buffer::new(2, 2, 1 << 20);
        buffer
            .add(&[add(b"a", &[(0, 1)]), add(b"b", &[(0, 1)])])
            .unwrap();
        let Drained { rows, mut room } = buffer.drain();
        assert_eq!(buffer.pending_rows(), 2, "in flight, still held");
        assert_eq!(
            buffer.add(&[add(b"c", &[(0, 1)])]),
            Err(Refused::Full),
            "no room while the drained rows are in flight"
        );
        // Both re-queued: each takes the room it had.
        assert!(buffer.requeue(rows, 1000, &mut room).is_empty());
        drop(room);
        assert_eq!(buffer.pending_rows(), 2);
        assert_eq!(buffer.add(&[add(b"c", &[(0, 1)])]), Err(Refused::Full));
        // One applied, one re-queued: the applied row's room returns with the credit.
        let Drained { mut rows, mut room } = buffer.drain();
        rows.truncate(1);
        assert!(buffer.requeue(rows, 2000, &mut room).is_empty());
        drop(room);
        assert_eq!(buffer.pending_rows(), 1);
        buffer.add(&[add(b"c", &[(0, 1)])]).unwrap();
        // A row given up by its credit finds no room in a full budget: handed back.
        let Drained { rows, room } = buffer.drain();
        drop(room);
        buffer
            .add(&[add(b"x", &[(0, 1)]), add(b"y", &[(0, 1)])])
            .unwrap();
        let mut none = Credit::new(Arc::clone(&buffer.budget), 0, 0);
        let refused = buffer.requeue(rows, 3000, &mut none);
        assert!(
            refused.iter().all(|(_, _, why)| *why == Unmerged::NoRoom) && refused.len() == 2,
            "{refused:?}"
        );
    }

    #[test]
    fn a_single_add_sums_into_its_row_or_refuses_whole() {
        let buffer = Buffer::new(2, 1, 1 << 20);
        buffer.add_one(b"a", 2, &[(0, 1), (1, 2)]).unwrap();
        buffer.add_one(b"a", 2, &[(0, 1)]).unwrap();
        assert_eq!(buffer.add_one(b"b", 2, &[(0, 1)]), Err(Refused::Full));
        assert_eq!(
            buffer.add_one(b"a", 2, &[(1, 1), (0, i64::MAX)]),
            Err(Refused::Overflow)
        );
        assert_eq!(buffer.accepted(), (2, 4));
        assert_eq!(buffer.drain().rows[0].1.deltas.as_ref(), [2, 2]);
        buffer.close();
        assert_eq!(buffer.add_one(b"a", 2, &[(0, 1)]), Err(Refused::Closed));
    }

    #[test]
    fn after_close_every_add_is_refused() {
        let buffer = Buffer::new(2, 10, 1 << 20);
        buffer.close();
        assert_eq!(buffer.add(&[add(b"a", &[(0, 1)])]), Err(Refused::Closed));
    }
}
