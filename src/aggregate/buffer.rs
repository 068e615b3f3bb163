//! The synchronous aggregation core: one stripe's map from row key to pending deltas.
//!
//! Plain data-structure code: no clock, no threads, no I/O. Callers pass the time
//! (already resolved into a [`Slot`]) and the shared budget; tests drive it directly.

use hashbrown::HashTable;

use super::cardinality::Cardinality;
use super::counters::Counters;
use super::limits::{Budget, Credit};
use super::row::{Columns, Row, RowKey, RowKeyRef, SLOT_KINDS, Slot};
use crate::vocabulary::DropReason;
use crate::vocabulary::Granularity;

/// The hasher shared by all stripes. Seeded per process, so crafted keys cannot be
/// aimed at one bucket chain across restarts.
pub(crate) type RowHasher = foldhash::fast::RandomState;

/// Estimated bytes of one pending row beyond its key bytes and wide-column heap.
///
/// An upper bound rather than an average, because `limits.max_pending_bytes` relies on
/// it: the table grows by doubling when 7/8 full, so right after a growth each entry
/// costs up to about twice its size; plus one control byte per slot, and the allocator's
/// header and rounding for the boxed key. The `memory` benchmark measured 142 heap bytes
/// (151 resident) per row at 1M rows with 30-byte keys (39 bytes encoded), against 153
/// estimated.
pub(crate) const ROW_OVERHEAD_BYTES: usize = size_of::<(RowKey, Row)>() * 2 + 2 + 16;

/// Estimated bytes a row takes beyond its pending form for each write a flush plans for
/// it, while the flush holds that write: the write itself (in the plan and among the
/// results), its row and outcome slot, its share of the planning table. Plus the write's
/// own copy of the series and of wide columns (see [`estimated_flush_bytes`]). An upper
/// bound checked by the `memory` benchmark ("while planning").
pub(crate) const FLUSH_BYTES_PER_WRITE: usize = 208;

/// Estimated bytes of a row with this series and columns while it is held: pending in a
/// stripe, or drained and in flight (what the budget charges it).
pub(crate) fn estimated_row_bytes(series_len: usize, columns: &Columns) -> usize {
    ROW_OVERHEAD_BYTES + series_len + columns.heap_bytes()
}

/// Estimated bytes of the writes a flush plans for a drained row, held while that flush
/// lasts, on top of [`estimated_row_bytes`]: a fresh row is written to the minute and
/// the day table, a re-queued row to one of them. A flush drains rows in chunks whose
/// writes fit the flush's share of the memory limit (see [`super::Aggregator::take_chunk`]),
/// so only one chunk's writes exist at a time, never a second copy of every pending row.
pub(crate) fn estimated_flush_bytes(slot: Slot, series_len: usize, columns: &Columns) -> usize {
    let writes = if matches!(slot, Slot::Both(_)) { 2 } else { 1 };
    writes * (FLUSH_BYTES_PER_WRITE + series_len + columns.heap_bytes())
}

/// What one chunk may still take, shared by the stripes it is drained from.
#[derive(Debug)]
pub(crate) struct ChunkAllowance {
    /// Estimated bytes of the chunk's writes ([`estimated_flush_bytes`]) still allowed.
    pub(crate) flush_bytes: usize,
    /// Whether the chunk holds no row yet: its first row is taken whatever its size, so
    /// a flush always makes progress.
    pub(crate) empty: bool,
}

impl ChunkAllowance {
    /// Takes room for a row whose writes are estimated at `bytes`, if it fits.
    fn take(&mut self, bytes: usize) -> bool {
        if bytes > self.flush_bytes && !self.empty {
            return false;
        }
        self.flush_bytes = self.flush_bytes.saturating_sub(bytes);
        self.empty = false;
        true
    }
}

/// What decides whether a new row may be created: the shared memory budget, the
/// cardinality caps, and the time their windows follow.
#[derive(Clone, Copy)]
pub(crate) struct NewRows<'a> {
    pub(crate) budget: &'a Budget,
    pub(crate) cardinality: &'a Cardinality,
    pub(crate) now_unix_secs: i64,
}

/// One stripe of pending rows.
pub struct Buffer {
    rows: HashTable<(RowKey, Row)>,
    /// Estimated bytes of `rows`, as charged to the budget.
    bytes: usize,
    /// Estimated bytes of the writes a flush would plan for `rows`.
    flush_bytes: usize,
    /// Signed sum of the deltas in `rows`, per slot kind (both, minute only, day only).
    pending_sum: [i128; SLOT_KINDS],
    counters: Counters,
    /// Random source for unbiased rounding of sampled values; seeded, so tests replay.
    pub(crate) rng: fastrand::Rng,
}

/// What a stripe gave a drain: every row it held, or some of them.
pub enum TakenRows {
    /// The stripe's whole table.
    All(HashTable<(RowKey, Row)>),
    /// Some of its rows.
    Some(Vec<(RowKey, Row)>),
}

impl TakenRows {
    /// Number of rows.
    pub fn len(&self) -> usize {
        match self {
            TakenRows::All(table) => table.len(),
            TakenRows::Some(rows) => rows.len(),
        }
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl IntoIterator for TakenRows {
    type Item = (RowKey, Row);
    type IntoIter = TakenIter;

    fn into_iter(self) -> TakenIter {
        match self {
            TakenRows::All(table) => TakenIter::All(table.into_iter()),
            TakenRows::Some(rows) => TakenIter::Some(rows.into_iter()),
        }
    }
}

/// The rows of a [`TakenRows`], by value.
pub enum TakenIter {
    /// From a whole table.
    All(hashbrown::hash_table::IntoIter<(RowKey, Row)>),
    /// From a list.
    Some(std::vec::IntoIter<(RowKey, Row)>),
}

impl Iterator for TakenIter {
    type Item = (RowKey, Row);

    fn next(&mut self) -> Option<(RowKey, Row)> {
        match self {
            TakenIter::All(rows) => rows.next(),
            TakenIter::Some(rows) => rows.next(),
        }
    }
}

/// Everything a stripe held when it was drained.
pub struct Taken {
    /// The rows, each key at most once per stripe.
    pub rows: TakenRows,
    /// Signed sum of their deltas, per slot kind.
    pub sums: [i128; SLOT_KINDS],
    /// Their estimated bytes, still charged to the budget.
    pub bytes: usize,
}

/// A row that could not be merged back, handed back to the caller.
#[derive(Debug)]
pub struct Refused {
    /// Its key.
    pub key: RowKey,
    /// Its deltas.
    pub row: Row,
    /// Why.
    pub reason: RefusedReason,
}

/// Why a row could not be merged back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefusedReason {
    /// Summing it into the row held would leave the i64 range.
    Overflow,
    /// The memory budget has no room for another row.
    NoRoom,
}

/// The part of per-slot-kind sums owed to `table`.
pub(crate) fn owed(sums: &[i128; SLOT_KINDS], table: Granularity) -> i128 {
    sums[0] + sums[1 + table.index()]
}

impl Buffer {
    /// An empty stripe whose random source starts from `seed`.
    pub fn new(seed: u64) -> Buffer {
        Buffer {
            rows: HashTable::new(),
            bytes: 0,
            flush_bytes: 0,
            pending_sum: [0; SLOT_KINDS],
            counters: Counters::default(),
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    /// Adds `count` accepted increments summing to `delta` to column `column` of a row
    /// `width` columns wide, creating the row if the cardinality caps and then the budget
    /// allow (both are asked only for a new row: adding to a row held costs neither).
    /// Counts them as accepted either way, and as dropped (with the reason returned) when
    /// they could not be kept. `hash` is the key's [`RowKeyRef::hash_with`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record(
        &mut self,
        key: RowKeyRef<'_>,
        hash: u64,
        width: usize,
        column: usize,
        delta: i64,
        count: u64,
        hasher: &RowHasher,
        new_rows: NewRows<'_>,
    ) -> Result<(), DropReason> {
        self.counters.accept(count, i128::from(delta));
        if let Some((_, row)) = self.rows.find_mut(hash, |(k, _)| key.matches(k)) {
            if !row.columns.checked_add_at(column, delta) {
                self.counters
                    .drop_accepted(DropReason::Overflow, count, i128::from(delta));
                return Err(DropReason::Overflow);
            }
            self.pending_sum[key.slot.kind_index()] += i128::from(delta);
            return Ok(());
        }
        if let Err(reason) =
            new_rows
                .cardinality
                .admit(key.family, key.series, new_rows.now_unix_secs, count)
        {
            self.counters
                .drop_accepted(reason, count, i128::from(delta));
            return Err(reason);
        }
        let columns = Columns::single(width, column, delta);
        let bytes = estimated_row_bytes(key.series.len(), &columns);
        if let Err(reason) = new_rows.budget.try_reserve(bytes) {
            self.counters
                .drop_accepted(reason, count, i128::from(delta));
            return Err(reason);
        }
        self.bytes += bytes;
        self.flush_bytes += estimated_flush_bytes(key.slot, key.series.len(), &columns);
        self.pending_sum[key.slot.kind_index()] += i128::from(delta);
        let row = Row {
            columns,
            requeued_since: 0,
        };
        self.rows
            .insert_unique(hash, (key.to_owned_key(), row), |(k, _)| {
                k.as_ref().hash_with(hasher)
            });
        Ok(())
    }

    /// Counts increments that were accepted but dropped before reaching a row (for
    /// example, a client timestamp outside the window).
    pub(crate) fn record_dropped(&mut self, reason: DropReason, count: u64, sum: i128) {
        self.counters.accept(count, sum);
        self.counters.drop_accepted(reason, count, sum);
    }

    /// The counters, for the line path to count what it sees.
    pub(crate) fn counters_mut(&mut self) -> &mut Counters {
        &mut self.counters
    }

    /// Puts back deltas that definitely were not applied. They were counted as accepted
    /// when they first arrived; a row that is new to this stripe takes its room from
    /// `credit` (the charge of the rows they were drained as) and, for what the credit
    /// lacks, from the budget within its limits. Handed back, with the reason, when a
    /// sum would overflow or there is no room: the caller keeps them elsewhere (the spill
    /// file), never drops them silently.
    pub(crate) fn merge_back(
        &mut self,
        key: RowKey,
        row: Row,
        hasher: &RowHasher,
        credit: &mut Credit,
    ) -> Result<(), Refused> {
        let key_ref = key.as_ref();
        let kind = key_ref.slot.kind_index();
        let hash = key_ref.hash_with(hasher);
        if let Some((_, held)) = self.rows.find_mut(hash, |(k, _)| key_ref.matches(k)) {
            if !held.columns.checked_add(&row.columns) {
                return Err(Refused {
                    key,
                    row,
                    reason: RefusedReason::Overflow,
                });
            }
            held.requeued_since = oldest(held.requeued_since, row.requeued_since);
            self.pending_sum[kind] += row.columns.sum();
            return Ok(());
        }
        let bytes = estimated_row_bytes(key.series().len(), &row.columns);
        if !credit.spend(bytes) {
            return Err(Refused {
                key,
                row,
                reason: RefusedReason::NoRoom,
            });
        }
        self.bytes += bytes;
        self.flush_bytes += estimated_flush_bytes(key_ref.slot, key.series().len(), &row.columns);
        self.pending_sum[kind] += row.columns.sum();
        self.rows
            .insert_unique(hash, (key, row), |(k, _)| k.as_ref().hash_with(hasher));
        Ok(())
    }

    /// Takes every pending row, leaving the stripe empty. Their budget stays charged:
    /// it goes with them (see [`Taken::bytes`]).
    pub(crate) fn take_all(&mut self) -> Taken {
        // Keep roughly the previous size so the next interval does not regrow from zero.
        let capacity = self.rows.len() / 2;
        let rows = std::mem::replace(&mut self.rows, HashTable::with_capacity(capacity));
        let bytes = std::mem::take(&mut self.bytes);
        self.flush_bytes = 0;
        let sums = std::mem::take(&mut self.pending_sum);
        Taken {
            rows: TakenRows::All(rows),
            sums,
            bytes,
        }
    }

    /// Takes the rows whose writes fit `allowance` (all of them when they all fit),
    /// leaving the others pending. Their budget stays charged, as with
    /// [`Buffer::take_all`].
    pub(crate) fn take_chunk(&mut self, allowance: &mut ChunkAllowance) -> Taken {
        if self.rows.is_empty() {
            return Taken {
                rows: TakenRows::Some(Vec::new()),
                sums: [0; SLOT_KINDS],
                bytes: 0,
            };
        }
        if self.flush_bytes <= allowance.flush_bytes {
            allowance.flush_bytes -= self.flush_bytes;
            allowance.empty = false;
            return self.take_all();
        }
        let mut rows = Vec::new();
        let (mut bytes, mut flush_bytes, mut sums) = (0, 0, [0_i128; SLOT_KINDS]);
        let taken = self.rows.extract_if(|(key, row)| {
            let key = key.as_ref();
            allowance.take(estimated_flush_bytes(
                key.slot,
                key.series.len(),
                &row.columns,
            ))
        });
        for (key, row) in taken {
            let key_ref = key.as_ref();
            bytes += estimated_row_bytes(key_ref.series.len(), &row.columns);
            flush_bytes += estimated_flush_bytes(key_ref.slot, key_ref.series.len(), &row.columns);
            sums[key_ref.slot.kind_index()] += row.columns.sum();
            rows.push((key, row));
        }
        self.bytes -= bytes;
        self.flush_bytes -= flush_bytes;
        for (pending, taken) in self.pending_sum.iter_mut().zip(sums) {
            *pending -= taken;
        }
        Taken {
            rows: TakenRows::Some(rows),
            sums,
            bytes,
        }
    }

    /// Number of pending rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether no row is pending.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Signed sum of the pending deltas owed to `table`.
    pub fn pending_sum(&self, table: Granularity) -> i128 {
        owed(&self.pending_sum, table)
    }

    /// What this stripe has counted since start.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Iterates the pending rows, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&RowKey, &Row)> {
        self.rows.iter().map(|(k, r)| (k, r))
    }
}

/// The older of two re-queue times, where 0 means "never re-queued".
fn oldest(a: u32, b: u32) -> u32 {
    match (a, b) {
        (0, x) | (x, 0) => x,
        (x, y) => x.min(y),
    }
}
