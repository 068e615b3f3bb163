//! Memory limits for pending rows, and the shared budget that enforces them across
//! stripes without blocking anyone.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::vocabulary::DropReason;

/// Limits on what the buffer accepts. Each one counts when it bites and never blocks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    /// Most distinct rows (key × minute) held for the next flush.
    pub max_pending_rows: usize,
    /// Most estimated bytes held in memory: rows (pending, in flight, re-queued), and the
    /// writes of the chunk a flush is sending (see [`Limits::flush_chunk_bytes`]).
    pub max_pending_bytes: usize,
    /// Longest encoded series key, in bytes (name plus tags, or the key tag values).
    pub max_key_bytes: usize,
    /// How far in the past a client timestamp may be.
    pub timestamp_max_past: Duration,
    /// How far in the future a client timestamp may be (clock skew).
    pub timestamp_max_future: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_pending_rows: 1_000_000,
            max_pending_bytes: 256 << 20,
            max_key_bytes: 1024,
            timestamp_max_past: Duration::from_secs(3600),
            timestamp_max_future: Duration::from_secs(600),
        }
    }
}

/// The part of `max_pending_bytes` kept for the writes of the chunk a flush holds: one
/// quarter. Rows take at most the other three.
const FLUSH_SHARE_DENOMINATOR: usize = 4;

impl Limits {
    /// Estimated bytes of the writes one flush chunk may plan: a flush drains rows in
    /// chunks of this size, so its copy of the rows never grows with the buffer.
    pub fn flush_chunk_bytes(&self) -> usize {
        self.max_pending_bytes / FLUSH_SHARE_DENOMINATOR
    }

    /// Estimated bytes the held rows may take: `max_pending_bytes` less the flush's share.
    pub fn row_bytes(&self) -> usize {
        self.max_pending_bytes - self.flush_chunk_bytes()
    }
}

/// The limits as an aggregator holds them: each on an atomic of its own, so that a live
/// reload changes them while increments read them, without a lock (see
/// [`crate::aggregate::Aggregator::set_limits`]).
pub(crate) struct LiveLimits {
    max_pending_rows: AtomicUsize,
    max_pending_bytes: AtomicUsize,
    max_key_bytes: AtomicUsize,
    timestamp_max_past: AtomicU64,
    timestamp_max_future: AtomicU64,
}

impl LiveLimits {
    pub(crate) fn new(limits: &Limits) -> LiveLimits {
        let live = LiveLimits {
            max_pending_rows: AtomicUsize::new(0),
            max_pending_bytes: AtomicUsize::new(0),
            max_key_bytes: AtomicUsize::new(0),
            timestamp_max_past: AtomicU64::new(0),
            timestamp_max_future: AtomicU64::new(0),
        };
        live.set(limits);
        live
    }

    /// The limits now (whole seconds for the timestamp window, as they are enforced).
    pub(crate) fn get(&self) -> Limits {
        Limits {
            max_pending_rows: self.max_pending_rows.load(Ordering::Relaxed),
            max_pending_bytes: self.max_pending_bytes.load(Ordering::Relaxed),
            max_key_bytes: self.max_key_bytes.load(Ordering::Relaxed),
            timestamp_max_past: Duration::from_secs(
                self.timestamp_max_past.load(Ordering::Relaxed),
            ),
            timestamp_max_future: Duration::from_secs(
                self.timestamp_max_future.load(Ordering::Relaxed),
            ),
        }
    }

    pub(crate) fn set(&self, limits: &Limits) {
        self.max_pending_rows
            .store(limits.max_pending_rows, Ordering::Relaxed);
        self.max_pending_bytes
            .store(limits.max_pending_bytes, Ordering::Relaxed);
        self.max_key_bytes
            .store(limits.max_key_bytes, Ordering::Relaxed);
        self.timestamp_max_past
            .store(limits.timestamp_max_past.as_secs(), Ordering::Relaxed);
        self.timestamp_max_future
            .store(limits.timestamp_max_future.as_secs(), Ordering::Relaxed);
    }
}

/// Fraction of either limit at which the buffer asks for an early flush.
const PRESSURE_NUMERATOR: usize = 3;
const PRESSURE_DENOMINATOR: usize = 4;

/// The shared row and byte budget of everything held in memory: rows pending in the
/// stripes, rows drained and in flight, rows merged back after a write that did not
/// apply. A drained row keeps its charge (as a [`Credit`]) until its write settles, so
/// intake cannot refill the room of rows still in flight, and a re-queued row takes the
/// charge of the row it came from before it asks for more.
///
/// Only creating a row touches these atomics; adding to an existing row does not, so the
/// hot path stays free of shared writes.
pub(crate) struct Budget {
    /// The maxima: atomics, because a live reload may change them (see
    /// [`Budget::set_maxima`]).
    max_rows: AtomicUsize,
    max_bytes: AtomicUsize,
    rows: AtomicUsize,
    bytes: AtomicUsize,
    pressure: AtomicBool,
    on_pressure: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

/// The budget as the aggregator and the credits share it: on cache lines of its own, so
/// that its counters, which change whenever a row is created, do not evict what every
/// increment reads.
pub(crate) type SharedBudget = Arc<CachePadded<Budget>>;

/// Room left in the budget, as a row count and estimated bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Room {
    /// Rows that may still be created.
    pub rows: usize,
    /// Estimated bytes that may still be taken.
    pub bytes: usize,
}

impl Budget {
    pub(crate) fn new(limits: &Limits) -> Budget {
        Budget::with_maxima(limits.max_pending_rows, limits.row_bytes())
    }

    /// A budget of at most `max_rows` rows and `max_bytes` estimated bytes (the driver
    /// wrapper's buffer, whose rows take all of `limits.max_pending_bytes`: its flush
    /// holds no copy of them beside the rows themselves).
    pub(crate) fn with_maxima(max_rows: usize, max_bytes: usize) -> Budget {
        Budget {
            max_rows: AtomicUsize::new(max_rows),
            max_bytes: AtomicUsize::new(max_bytes),
            rows: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            pressure: AtomicBool::new(false),
            on_pressure: OnceLock::new(),
        }
    }

    /// Takes new maxima (a live reload of `limits.max_pending_rows` or
    /// `max_pending_bytes`). Rows held stay held: maxima below what is held now refuse
    /// new rows until flushes have made room, and put the budget under pressure at once:
    /// an early flush is asked for now (a refused row never reaches the check that
    /// would ask), so request receivers answer "busy" rather than refusing points.
    pub(crate) fn set_maxima(&self, max_rows: usize, max_bytes: usize) {
        self.max_rows.store(max_rows, Ordering::Relaxed);
        self.max_bytes.store(max_bytes, Ordering::Relaxed);
        let (rows, bytes) = (self.rows(), self.bytes());
        if self.over_mark(rows, bytes) {
            self.check_pressure(rows, bytes);
        } else {
            self.pressure.store(false, Ordering::Relaxed);
        }
    }

    /// Sets what to call, once per crossing, when usage passes the early-flush mark.
    pub(crate) fn set_on_pressure(&self, callback: Box<dyn Fn() + Send + Sync>) {
        let _ = self.on_pressure.set(callback);
    }

    /// Claims room for one new row of fresh increments, or says which limit refuses it.
    /// Crossing the early-flush mark calls the pressure callback.
    pub(crate) fn try_reserve(&self, bytes: usize) -> Result<(), DropReason> {
        self.try_reserve_rows(1, bytes)
    }

    /// Claims room for `rows` new rows of `bytes` in all, all of it or none, as
    /// [`Budget::try_reserve`] does for one.
    pub(crate) fn try_reserve_rows(&self, rows: usize, bytes: usize) -> Result<(), DropReason> {
        let (rows, total) = self.claim(rows, bytes)?;
        self.check_pressure(rows, total);
        Ok(())
    }

    /// Claims room for `rows` rows of `bytes` that were accepted earlier (merged back or
    /// replayed), within the limits, without asking for an early flush: rows coming back
    /// after a failed write must not make the flusher try again at once.
    pub(crate) fn try_reserve_quiet(&self, rows: usize, bytes: usize) -> bool {
        self.claim(rows, bytes).is_ok()
    }

    /// Adds `rows` and `bytes` if both stay within their limits; returns the new totals.
    fn claim(&self, rows: usize, bytes: usize) -> Result<(usize, usize), DropReason> {
        let rows_before = self.rows.fetch_add(rows, Ordering::Relaxed);
        if rows > 0 && rows_before.saturating_add(rows) > self.max_rows.load(Ordering::Relaxed) {
            self.rows.fetch_sub(rows, Ordering::Relaxed);
            return Err(DropReason::MaxRows);
        }
        let bytes_before = self.bytes.fetch_add(bytes, Ordering::Relaxed);
        if bytes > 0 && bytes_before.saturating_add(bytes) > self.max_bytes.load(Ordering::Relaxed)
        {
            self.bytes.fetch_sub(bytes, Ordering::Relaxed);
            self.rows.fetch_sub(rows, Ordering::Relaxed);
            return Err(DropReason::MaxBytes);
        }
        Ok((rows_before + rows, bytes_before + bytes))
    }

    /// Whether usage is past the early-flush mark now.
    pub(crate) fn under_pressure(&self) -> bool {
        self.over_mark(self.rows(), self.bytes())
    }

    /// Returns room taken by rows that left memory.
    pub(crate) fn release(&self, rows: usize, bytes: usize) {
        self.rows.fetch_sub(rows, Ordering::Relaxed);
        self.bytes.fetch_sub(bytes, Ordering::Relaxed);
        if self.pressure.load(Ordering::Relaxed)
            && !self.over_mark(
                self.rows.load(Ordering::Relaxed),
                self.bytes.load(Ordering::Relaxed),
            )
        {
            self.pressure.store(false, Ordering::Relaxed);
        }
    }

    /// Rows currently held, across stripes and flushes.
    pub(crate) fn rows(&self) -> usize {
        self.rows.load(Ordering::Relaxed)
    }

    /// Estimated bytes currently held, across stripes and flushes.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// What is left below the limits now.
    pub(crate) fn room(&self) -> Room {
        Room {
            rows: self
                .max_rows
                .load(Ordering::Relaxed)
                .saturating_sub(self.rows()),
            bytes: self
                .max_bytes
                .load(Ordering::Relaxed)
                .saturating_sub(self.bytes()),
        }
    }

    fn over_mark(&self, rows: usize, bytes: usize) -> bool {
        rows.saturating_mul(PRESSURE_DENOMINATOR)
            >= self
                .max_rows
                .load(Ordering::Relaxed)
                .saturating_mul(PRESSURE_NUMERATOR)
            || bytes.saturating_mul(PRESSURE_DENOMINATOR)
                >= self
                    .max_bytes
                    .load(Ordering::Relaxed)
                    .saturating_mul(PRESSURE_NUMERATOR)
    }

    fn check_pressure(&self, rows: usize, bytes: usize) {
        if self.over_mark(rows, bytes)
            && !self.pressure.swap(true, Ordering::Relaxed)
            && let Some(callback) = self.on_pressure.get()
        {
            callback();
        }
    }
}

/// Budget charged for rows held outside the stripes: the rows a flush drained, while
/// their writes are in flight. Rows merged back take their room from it first (so intake
/// cannot take the room of rows that are still owed); what is left returns to the shared
/// budget when the credit is dropped.
pub struct Credit {
    budget: SharedBudget,
    rows: usize,
    bytes: usize,
}

impl Credit {
    pub(crate) fn new(budget: SharedBudget, rows: usize, bytes: usize) -> Credit {
        Credit {
            budget,
            rows,
            bytes,
        }
    }

    /// Rows still charged.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Estimated bytes still charged.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Moves room for one row of `bytes` from this credit to whoever holds the row next,
    /// asking the shared budget (within its limits) for what the credit lacks. False,
    /// with nothing changed, when the budget has no room either.
    pub(crate) fn spend(&mut self, bytes: usize) -> bool {
        let rows_short = 1_usize.saturating_sub(self.rows);
        let bytes_short = bytes.saturating_sub(self.bytes);
        if (rows_short > 0 || bytes_short > 0)
            && !self.budget.try_reserve_quiet(rows_short, bytes_short)
        {
            return false;
        }
        self.rows = self.rows.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(bytes);
        true
    }
}

impl Credit {
    /// Claims room for one more row of `bytes` from the shared budget into this credit,
    /// within the limits and without asking for an early flush (rows read back from the
    /// spill): false, with nothing changed, when the budget has no room.
    pub(crate) fn claim(&mut self, bytes: usize) -> bool {
        if !self.budget.try_reserve_quiet(1, bytes) {
            return false;
        }
        self.rows += 1;
        self.bytes += bytes;
        true
    }

    /// Moves the room of `rows` rows of `bytes` (as much of it as this credit has) into a
    /// credit of its own, for rows that leave this one's custody but stay in memory (rows
    /// held for the delta ledger past their flush).
    pub fn split_off(&mut self, rows: usize, bytes: usize) -> Credit {
        let (rows, bytes) = (rows.min(self.rows), bytes.min(self.bytes));
        self.rows -= rows;
        self.bytes -= bytes;
        Credit {
            budget: self.budget.clone(),
            rows,
            bytes,
        }
    }

    /// Takes over `other`'s room (rows coming back into this credit's custody).
    pub fn absorb(&mut self, mut other: Credit) {
        self.rows += std::mem::take(&mut other.rows);
        self.bytes += std::mem::take(&mut other.bytes);
    }

    /// Hands the room of one row of `bytes` (as much of it as this credit has) over to a
    /// holder that keeps the row's deltas and claims its own room (a running total of a
    /// `writer_totals` family): the room stays charged, so no one else can take it in
    /// between (see [`crate::aggregate::Aggregator::take_over_held`]).
    pub(crate) fn hand_over_row(&mut self, bytes: usize) -> Room {
        let room = Room {
            rows: self.rows.min(1),
            bytes: self.bytes.min(bytes),
        };
        self.rows -= room.rows;
        self.bytes -= room.bytes;
        room
    }
}

impl Drop for Credit {
    fn drop(&mut self) {
        if self.rows > 0 || self.bytes > 0 {
            self.budget.release(self.rows, self.bytes);
        }
    }
}

impl std::fmt::Debug for Credit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credit")
            .field("rows", &self.rows)
            .field("bytes", &self.bytes)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A budget whose rows may take `bytes` (`max_pending_bytes` less the flush's share).
    fn budget(rows: usize, bytes: usize) -> Budget {
        let mut limits = Limits {
            max_pending_rows: rows,
            max_pending_bytes: bytes * 4 / 3,
            ..Limits::default()
        };
        while limits.row_bytes() < bytes {
            limits.max_pending_bytes += 1;
        }
        assert_eq!(limits.row_bytes(), bytes);
        Budget::new(&limits)
    }

    #[test]
    fn the_flush_keeps_a_quarter_of_the_byte_limit() {
        let limits = Limits {
            max_pending_bytes: 64 << 20,
            ..Limits::default()
        };
        assert_eq!(limits.flush_chunk_bytes(), 16 << 20);
        assert_eq!(limits.row_bytes(), 48 << 20);
        assert_eq!(Budget::new(&limits).room().bytes, 48 << 20);
    }

    #[test]
    fn rows_limit_refuses_and_gives_the_slot_back() {
        let b = budget(2, 1000);
        assert_eq!(b.try_reserve(10), Ok(()));
        assert_eq!(b.try_reserve(10), Ok(()));
        assert_eq!(b.try_reserve(10), Err(DropReason::MaxRows));
        assert_eq!((b.rows(), b.bytes()), (2, 20));
        b.release(1, 10);
        assert_eq!(b.try_reserve(10), Ok(()));
    }

    #[test]
    fn bytes_limit_refuses_without_leaking_a_row() {
        let b = budget(100, 25);
        assert_eq!(b.try_reserve(20), Ok(()));
        assert_eq!(b.try_reserve(20), Err(DropReason::MaxBytes));
        assert_eq!((b.rows(), b.bytes()), (1, 20));
    }

    #[test]
    fn pressure_fires_once_per_crossing() {
        let b = budget(8, 1 << 20);
        let fired = Arc::new(AtomicUsize::new(0));
        let seen = fired.clone();
        b.set_on_pressure(Box::new(move || {
            seen.fetch_add(1, Ordering::Relaxed);
        }));
        for _ in 0..7 {
            b.try_reserve(1).unwrap();
        }
        assert_eq!(fired.load(Ordering::Relaxed), 1, "fires at 6 of 8, once");
        b.release(7, 7);
        for _ in 0..6 {
            b.try_reserve(1).unwrap();
        }
        assert_eq!(fired.load(Ordering::Relaxed), 2, "fires again after relief");
    }

    #[test]
    fn new_maxima_bind_the_next_row_and_the_pressure_mark() {
        let b = budget(4, 1000);
        for _ in 0..3 {
            b.try_reserve(10).unwrap();
        }
        assert!(b.under_pressure(), "3 of 4");
        b.set_maxima(8, 1000);
        assert!(!b.under_pressure(), "3 of 8");
        let fired = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&fired);
        b.set_on_pressure(Box::new(move || {
            counter.fetch_add(1, Ordering::Relaxed);
        }));
        b.set_maxima(2, 1000);
        // Under the new maximum already: the early flush is asked for at once (no new
        // row would reach the check), and receivers see the budget as busy.
        assert!(b.under_pressure(), "3 of 2");
        assert_eq!(fired.load(Ordering::Relaxed), 1);
        assert_eq!(b.try_reserve(10), Err(DropReason::MaxRows));
        assert_eq!(
            b.room(),
            Room {
                rows: 0,
                bytes: 970
            }
        );
        b.set_maxima(8, 35);
        assert_eq!(b.try_reserve(10), Err(DropReason::MaxBytes));
        assert_eq!((b.rows(), b.bytes()), (3, 30));
    }
}
