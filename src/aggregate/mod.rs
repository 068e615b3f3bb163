//! The aggregation core and its concurrent front.
//!
//! [`Buffer`] is the plain synchronous core (one map, its counters, no clock).
//! [`Aggregator`] puts several of them behind locks so that receive threads and
//! application threads can add at once while a flush drains them.
//!
//! # Why striped per-thread buffers and not one concurrent map
//!
//! Each thread adds into "its" stripe (assigned round-robin on first use), and a flush
//! swaps every stripe's map for an empty one. The same key may sit in several stripes;
//! the flush plan sums them. Compared with a `DashMap` keyed by row (shard chosen by key
//! hash), this keeps a *hot key* — the very case pre-aggregation exists for — free of
//! contention: two threads counting the same page views take two different locks
//! instead of fighting over one. Each lock is nearly always uncontended, so it costs one
//! atomic swap, and the per-packet ingest path takes it once per datagram, not per line.
//! The `engine` benchmark measures both designs and a `Mutex<HashMap>` baseline in the
//! same run; docs/src/performance.md has the figures. With one thread the plain mutex map is faster:
//! the stripes pay for themselves under contention, the case pre-aggregation exists for.
//!
//! The only state that all threads write is the row budget, and only when a row is
//! created; it sits on cache lines of its own so that those writes do not evict what
//! every increment reads. The cardinality caps ([`cardinality`]) are asked at the same
//! moment, under a lock per capped family, and never when a row takes an increment.
//!
//! A flush swaps maps under each stripe's lock, so an increment racing with it lands
//! either in the drained map or in the fresh one, never in both and never in neither.

mod buffer;
pub mod cardinality;
mod counters;
mod limits;
mod row;
pub mod scale;

#[cfg(test)]
mod tests;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, MutexGuard};

pub use self::buffer::{Buffer, Refused, RefusedReason, Taken, TakenIter, TakenRows};
pub use self::cardinality::Cardinality;
pub use self::counters::Counters;
pub use self::limits::{Credit, Limits, Room};
pub use self::row::{Columns, Row, RowKey, Slot};
use crate::vocabulary::{DropReason, Granularity};

#[cfg(test)]
pub(crate) use self::buffer::FLUSH_BYTES_PER_WRITE;
pub(crate) use self::buffer::RowHasher;
pub(crate) use self::limits::{Budget, LiveLimits, SharedBudget};
pub(crate) use self::row::{RowKeyRef, series_hash};

use crate::bucket::Minute;

/// The concurrent front over striped [`Buffer`]s.
pub struct Aggregator {
    stripes: Box<[CachePadded<Mutex<Buffer>>]>,
    hasher: RowHasher,
    /// On cache lines of its own: its counters change whenever a row is created, and
    /// must not evict the fields every increment reads (`hasher`, `closed`, `stripes`).
    /// Shared with the [`Credit`]s of rows in flight.
    budget: SharedBudget,
    /// What [`Aggregator::limits`] answers; a live reload changes it.
    limits: LiveLimits,
    /// The cardinality caps, asked when a row is created (none by default).
    cardinality: Cardinality,
    /// Set before the final drain of shutdown; read under each stripe's lock, so an
    /// increment either makes the final drain or is counted as dropped.
    closed: AtomicBool,
}

/// Hands out stripe numbers to threads in the order they first add something.
static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's stripe number (taken modulo the stripe count of each aggregator).
    static THREAD_STRIPE: Cell<Option<usize>> = const { Cell::new(None) };
}

fn thread_stripe() -> usize {
    THREAD_STRIPE.with(|cell| match cell.get() {
        Some(index) => index,
        None => {
            let index = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
            cell.set(Some(index));
            index
        }
    })
}

/// The default number of stripes: twice the cores, so that threads rarely share one.
pub fn default_stripes() -> usize {
    let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
    (cores * 2).next_power_of_two().max(4)
}

impl Aggregator {
    /// An empty aggregator. `seed` fixes the random source of sampled-value rounding
    /// (for reproducible tests); `None` seeds from the process's randomness.
    pub fn new(limits: Limits, stripes: usize, seed: Option<u64>) -> Aggregator {
        let base = seed.unwrap_or_else(|| fastrand::u64(..));
        let stripes = (0..stripes.max(1))
            .map(|i| CachePadded::new(Mutex::new(Buffer::new(base.wrapping_add(i as u64)))))
            .collect();
        Aggregator {
            stripes,
            hasher: RowHasher::default(),
            budget: Arc::new(CachePadded::new(Budget::new(&limits))),
            limits: LiveLimits::new(&limits),
            cardinality: Cardinality::default(),
            closed: AtomicBool::new(false),
        }
    }

    /// The same aggregator with cardinality caps (before any increment).
    pub fn with_cardinality(mut self, cardinality: Cardinality) -> Aggregator {
        self.cardinality = cardinality;
        self
    }

    /// The cardinality caps and what they have seen (`/debug/contexts`, the metrics).
    pub fn cardinality(&self) -> &Cardinality {
        &self.cardinality
    }

    /// Refuses every later increment (counted as `after_shutdown`). Called before the
    /// final drain: a racing increment either lands before the drain takes its stripe,
    /// or sees the flag, because both happen under the stripe's lock.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Whether [`Aggregator::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The hasher of row keys, for callers that hash a series ahead of time (see
    /// [`Stripe::record_many`]).
    pub(crate) fn hasher(&self) -> &RowHasher {
        &self.hasher
    }

    /// The limits this aggregator enforces now.
    pub fn limits(&self) -> Limits {
        self.limits.get()
    }

    /// Enforces `limits` from now on (a live reload). Rows held stay held: a lower row or
    /// byte limit refuses new rows until flushes have made room; the timestamp window
    /// applies to the next increment with a client timestamp; the flush's share of the
    /// byte limit to the next chunk a flush takes.
    pub fn set_limits(&self, limits: &Limits) {
        self.limits.set(limits);
        self.budget
            .set_maxima(limits.max_pending_rows, limits.row_bytes());
        self.cardinality.set_track_max(limits.max_pending_rows);
    }

    /// Calls `callback` (from whichever thread crosses the mark) when pending rows or
    /// bytes pass three quarters of their limit, so the flusher can start early.
    pub fn on_pressure(&self, callback: impl Fn() + Send + Sync + 'static) {
        self.budget.set_on_pressure(Box::new(callback));
    }

    /// Whether pending rows or bytes are past three quarters of their limit now (an early
    /// flush asked for earlier may have been made moot by a flush since).
    pub fn under_pressure(&self) -> bool {
        self.budget.under_pressure()
    }

    /// Locks the calling thread's stripe, to add many increments under one lock.
    pub fn stripe(&self) -> Stripe<'_> {
        let (thread, stripes) = (thread_stripe(), self.stripes.len());
        // A mask rather than a division when the count is a power of two (the default).
        let index = if stripes.is_power_of_two() {
            thread & (stripes - 1)
        } else {
            thread % stripes
        };
        Stripe {
            buffer: self.stripes[index].lock(),
            aggregator: self,
        }
    }

    /// Takes every pending row from every stripe. The rows keep their charge of the
    /// budget until the [`Drained`] (or the [`Credit`] taken from it) is dropped.
    pub fn take_all(&self) -> Drained {
        let stripes: Vec<Taken> = self
            .stripes
            .iter()
            .map(|stripe| stripe.lock().take_all())
            .collect();
        let rows = stripes.iter().map(|t| t.rows.len()).sum();
        let bytes = stripes.iter().map(|t| t.bytes).sum();
        Drained {
            stripes,
            credit: Credit::new(self.budget.clone(), rows, bytes),
        }
    }

    /// Takes the next chunk of pending rows for a flush: as many as fit the flush's share
    /// of the memory limit ([`Limits::flush_chunk_bytes`], estimated for the writes it
    /// plans for them), at least one, whole stripes when they fit. The rows keep their
    /// charge of the budget as with [`Aggregator::take_all`].
    pub fn take_chunk(&self) -> Drained {
        self.take_chunk_within(self.limits.get().flush_chunk_bytes())
    }

    /// [`Aggregator::take_chunk`] within `flush_bytes` of estimated writes: less than the
    /// flush's share when part of it goes to rows held elsewhere (the delta ledger's
    /// gate releases confirmed rows into the same flush). At least one row.
    pub fn take_chunk_within(&self, flush_bytes: usize) -> Drained {
        let mut allowance = buffer::ChunkAllowance {
            flush_bytes,
            empty: true,
        };
        let stripes: Vec<Taken> = self
            .stripes
            .iter()
            .map(|stripe| stripe.lock().take_chunk(&mut allowance))
            .collect();
        let rows = stripes.iter().map(|t| t.rows.len()).sum();
        let bytes = stripes.iter().map(|t| t.bytes).sum();
        Drained {
            stripes,
            credit: Credit::new(self.budget.clone(), rows, bytes),
        }
    }

    /// Puts back rows whose writes definitely did not apply (see [`Buffer`]'s rules).
    /// A row new to the buffer takes its room from `credit` first (the charge of the
    /// rows a flush drained), then from the budget within its limits. Returns the rows
    /// that could not be merged (a sum would overflow, or there is no room), with why.
    pub fn merge_back(
        &self,
        rows: impl IntoIterator<Item = (RowKey, Row)>,
        credit: &mut Credit,
    ) -> Vec<Refused> {
        let mut stripe = self.stripe();
        rows.into_iter()
            .filter_map(|(key, row)| {
                stripe
                    .buffer
                    .merge_back(key, row, &self.hasher, credit)
                    .err()
            })
            .collect()
    }

    /// Room left below the memory limits now, counting every row held (pending, in
    /// flight, re-queued): what a replay of spilled rows may bring back at most before
    /// its rows are refused.
    pub fn room(&self) -> Room {
        self.budget.room()
    }

    /// What the budget charges for `row` under `key` while it is held (pending or in
    /// flight): how a replay sizes chunks against [`Aggregator::room`].
    pub fn charge_of(&self, key: &RowKey, row: &Row) -> usize {
        buffer::estimated_row_bytes(key.series().len(), &row.columns)
    }

    /// What the budget charges for the writes a flush plans for `row` under `key`, on
    /// top of [`Aggregator::charge_of`], while they are in flight.
    pub fn flush_charge_of(&self, key: &RowKey, row: &Row) -> usize {
        buffer::estimated_flush_bytes(key.slot(), key.series().len(), &row.columns)
    }

    /// A credit of nothing: merging back with it takes all room from the budget, within
    /// its limits (a replay of spilled rows, chunk by chunk).
    pub fn no_credit(&self) -> Credit {
        Credit::new(self.budget.clone(), 0, 0)
    }

    /// Turns `given` (room handed over by [`Credit::hand_over_row`], still charged) into
    /// `needed`, the room of rows held outside the stripes, in one step: what `given`
    /// lacks is claimed from the budget, what it has over goes back (one budget covers
    /// pending rows and held totals). Refused when the budget cannot cover the lack: then
    /// `given` goes back as well, nothing stays charged.
    pub(crate) fn take_over_held(&self, given: Room, needed: Room) -> Result<(), DropReason> {
        let short = (
            needed.rows.saturating_sub(given.rows),
            needed.bytes.saturating_sub(given.bytes),
        );
        if let Err(reason) = self.budget.try_reserve_rows(short.0, short.1) {
            self.release_held(given.rows, given.bytes);
            return Err(reason);
        }
        self.release_held(
            given.rows.saturating_sub(needed.rows),
            given.bytes.saturating_sub(needed.bytes),
        );
        Ok(())
    }

    /// Claims room for one row of `bytes` brought back from disk (a replayed running
    /// total, see `crate::totals`), within the limits and without asking for an early
    /// flush, as rows merged back do; false when the budget has no room for it.
    pub(crate) fn reserve_replayed(&self, bytes: usize) -> bool {
        self.budget.try_reserve_quiet(1, bytes)
    }

    /// Returns room taken with `Aggregator::take_over_held` or
    /// `Aggregator::reserve_replayed` (both crate-private: the `writer_totals` path).
    pub fn release_held(&self, rows: usize, bytes: usize) {
        self.budget.release(rows, bytes);
    }

    /// Counters summed over all stripes.
    pub fn counters(&self) -> Counters {
        let mut total = Counters::default();
        for stripe in self.stripes.iter() {
            total.merge(stripe.lock().counters());
        }
        total
    }

    /// Pending rows (across stripes; a key held by two stripes counts twice).
    pub fn pending_rows(&self) -> usize {
        self.stripes.iter().map(|s| s.lock().len()).sum()
    }

    /// Signed sum of the pending deltas owed to `table`.
    pub fn pending_sum(&self, table: Granularity) -> i128 {
        self.stripes
            .iter()
            .map(|s| s.lock().pending_sum(table))
            .sum()
    }

    /// Estimated bytes of every row held: pending, in flight and re-queued (what
    /// `limits.max_pending_bytes` caps).
    pub fn pending_bytes(&self) -> usize {
        self.budget.bytes()
    }

    /// Rows held as the shared budget counts them, in flight included (cheap: no locks).
    pub fn pending_rows_estimate(&self) -> usize {
        self.budget.rows()
    }

    /// A deterministic view of everything pending, for tests: rows merged across
    /// stripes and sorted by key.
    pub fn snapshot(&self) -> Snapshot {
        let mut rows: BTreeMap<String, (Vec<i128>, bool)> = BTreeMap::new();
        for stripe in self.stripes.iter() {
            for (key, row) in stripe.lock().iter() {
                let entry = rows
                    .entry(format!("{key:?}"))
                    .or_insert_with(|| (vec![0; row.columns.as_slice().len()], false));
                for (sum, v) in entry.0.iter_mut().zip(row.columns.as_slice()) {
                    *sum += i128::from(*v);
                }
                entry.1 |= row.requeued_since != 0;
            }
        }
        Snapshot { rows }
    }
}

impl fmt::Debug for Aggregator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.snapshot(), f)
    }
}

/// The calling thread's stripe, locked.
pub struct Stripe<'a> {
    buffer: MutexGuard<'a, Buffer>,
    aggregator: &'a Aggregator,
}

impl Stripe<'_> {
    /// Adds an accepted delta to column `column` of the row `key` (`width` columns wide).
    #[cfg(test)]
    pub(crate) fn record(
        &mut self,
        key: RowKeyRef<'_>,
        width: usize,
        column: usize,
        delta: i64,
    ) -> Result<(), DropReason> {
        self.record_many(key, None, width, column, delta, 1, 0)
    }

    /// Adds `count` accepted increments summing to `delta` (a multi-value line), received
    /// at `now_unix_secs` (the time the cardinality windows follow).
    /// `series_hash`, when given, must be [`series_hash`] of the key's series with this
    /// aggregator's [`hasher`](Aggregator::hasher): it spares hashing the series again.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record_many(
        &mut self,
        key: RowKeyRef<'_>,
        series_hash: Option<u64>,
        width: usize,
        column: usize,
        delta: i64,
        count: u64,
        now_unix_secs: i64,
    ) -> Result<(), DropReason> {
        if self.aggregator.closed.load(Ordering::Relaxed) {
            self.buffer
                .record_dropped(DropReason::AfterShutdown, count, i128::from(delta));
            return Err(DropReason::AfterShutdown);
        }
        let hash = match series_hash {
            Some(series_hash) => key.hash_from(series_hash),
            None => key.hash_with(&self.aggregator.hasher),
        };
        debug_assert_eq!(hash, key.hash_with(&self.aggregator.hasher));
        self.buffer.record(
            key,
            hash,
            width,
            column,
            delta,
            count,
            &self.aggregator.hasher,
            buffer::NewRows {
                budget: &self.aggregator.budget,
                cardinality: &self.aggregator.cardinality,
                now_unix_secs,
            },
        )
    }

    /// Counts `count` accepted increments (summing to `sum`) dropped before reaching a row.
    pub(crate) fn record_dropped(&mut self, reason: DropReason, count: u64, sum: i128) {
        self.buffer.record_dropped(reason, count, sum);
    }

    /// The stripe's counters, for the line path.
    pub(crate) fn counters(&mut self) -> &mut Counters {
        self.buffer.counters_mut()
    }

    /// The stripe's random source, for rounding sampled values.
    pub(crate) fn rng(&mut self) -> &mut fastrand::Rng {
        &mut self.buffer.rng
    }
}

/// The minute an increment belongs to: the client's timestamp if it is inside the
/// window around `now`, else `now`'s minute when it has none.
pub fn minute_for(
    now_unix_secs: i64,
    client_unix_secs: Option<i64>,
    limits: &Limits,
) -> Result<Minute, DropReason> {
    let at = match client_unix_secs {
        None => now_unix_secs,
        Some(ts) => {
            let past = i64::try_from(limits.timestamp_max_past.as_secs()).unwrap_or(i64::MAX);
            let future = i64::try_from(limits.timestamp_max_future.as_secs()).unwrap_or(i64::MAX);
            if ts < now_unix_secs.saturating_sub(past) || ts > now_unix_secs.saturating_add(future)
            {
                return Err(DropReason::TimestampWindow);
            }
            ts
        }
    };
    Minute::from_unix_secs(at).ok_or(DropReason::TimestampWindow)
}

/// Everything drained from all stripes by one flush, with its charge of the budget.
pub struct Drained {
    stripes: Vec<Taken>,
    credit: Credit,
}

impl Drained {
    /// Number of rows drained (a key held by several stripes counts once per stripe).
    pub fn len(&self) -> usize {
        self.stripes.iter().map(|t| t.rows.len()).sum()
    }

    /// Whether nothing was pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Signed sum of the drained deltas owed to `table`.
    pub fn sum(&self, table: Granularity) -> i128 {
        self.stripes
            .iter()
            .map(|t| buffer::owed(&t.sums, table))
            .sum()
    }

    /// The drained rows; the same key may appear once per stripe. Their charge of the
    /// budget is returned now.
    pub fn into_rows(self) -> DrainedRows {
        self.into_parts().0
    }

    /// The drained rows and their charge of the budget, which the caller holds until
    /// the rows have left memory (their writes settled) and spends on rows it merges
    /// back.
    pub fn into_parts(self) -> (DrainedRows, Credit) {
        let remaining = self.len();
        let tables: Vec<_> = self.stripes.into_iter().map(|t| t.rows).collect();
        (
            DrainedRows {
                rows: tables.into_iter().flatten(),
                remaining,
            },
            self.credit,
        )
    }
}

/// The rows of a [`Drained`], stripe after stripe (each stripe's table is freed once
/// read), with an exact length.
pub struct DrainedRows {
    rows: std::iter::Flatten<std::vec::IntoIter<TakenRows>>,
    remaining: usize,
}

impl Iterator for DrainedRows {
    type Item = (RowKey, Row);

    fn next(&mut self) -> Option<(RowKey, Row)> {
        let next = self.rows.next()?;
        self.remaining -= 1;
        Some(next)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for DrainedRows {}

/// A sorted, merged picture of the pending rows; its `Display` is stable across runs.
#[derive(Clone, PartialEq, Eq)]
pub struct Snapshot {
    rows: BTreeMap<String, (Vec<i128>, bool)>,
}

impl Snapshot {
    /// Number of distinct pending rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

impl fmt::Display for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (key, (columns, requeued)) in &self.rows {
            write!(f, "{key} = {columns:?}")?;
            if *requeued {
                f.write_str(" (requeued)")?;
            }
            f.write_str("\n")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
