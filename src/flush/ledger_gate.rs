//! The delta ledger's gate: the one place where a flush meets the ledger of the exact
//! families (`family[].exact`, `generic.exact`).
//!
//! Given the rows a flush drained, the gate forms the ledger rows of their fresh deltas
//! (rows drained as [`Slot::Both`]: deltas leaving the buffer for the first time;
//! re-queued and replayed rows are owed to one table only and were recorded when they
//! were fresh), writes them, and only then lets the drained rows go on to the plan and
//! the counter writes. A ledger row is formed once — one per (family, key, minute,
//! writer, incarnation, flush, part) — and on any failure, a timeout included, the very
//! same row is sent again (its INSERT is idempotent), with a back-off, until the store
//! acknowledges it. Until then the drained rows it records are held here, out of the
//! buffer: a ledger outage holds the exact families' counter writes, it never lets them
//! go out unrecorded. Other families, and rows that are not fresh, pass straight through.
//!
//! [`form`] is the synchronous core; [`LedgerGate::admit`] the async shell a flush calls.
//! Held rows count as in flight in the accounting identity, and as pending in
//! `status.json` (a kill loses them like any row in memory, and the next start says so).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use crate::aggregate::{Columns, Credit, Row, RowKey, Slot};
use crate::backoff::Backoff;
use crate::bucket::Minute;
use crate::family::{Families, key_bucket};
use crate::series;
use crate::sink::{LedgerRow, Outcome, OutcomeRow, PartitionWrite, Sink};
use crate::stage::{
    Action, CrashPoints, Decision, Facts, Policy, Sender, StageCx, WriteKind, run_stage,
};
use crate::state::StateDir;
use crate::state::{FlushId, WriteRecord};
use crate::telemetry::Ledger;
use crate::vocabulary::{FamilyId, Granularity};

use super::exact_outcomes::OutcomeQueue;
use super::owed::{OwedBook, OwedDay};
use super::shutdown::Deadline;

/// Attempts of one ledger request within one flush before its rows wait for a later
/// flush (the back-off between them doubles from `exact.retry_backoff_min`).
const ATTEMPTS_PER_FLUSH: u32 = 3;

/// Most ledger rows per request (one UNLOGGED BATCH of one ledger partition, applied as
/// one mutation): larger than a counter batch, since a ledger row is a small regular row
/// and the ledger's requests run before the counter writes they gate (about 100 bytes a
/// row: some 13 KB a batch, under Cassandra's 50 KB batch failure threshold).
pub const ROWS_PER_REQUEST: usize = 128;

/// An exact family as the ledger names it.
#[derive(Clone, Debug)]
struct ExactFamily {
    name: Arc<str>,
    columns: Arc<[String]>,
}

/// What the gate needs to know to form ledger rows.
#[derive(Clone, Debug)]
pub struct Formation {
    /// By family id: the exact families' names and columns (None: not exact).
    families: Vec<Option<ExactFamily>>,
    /// Ledger partitions per family and day.
    buckets: u16,
    /// Most ledger rows per request.
    max_rows: usize,
}

impl Formation {
    /// The formation rules for `families`, or None when no family keeps exact totals.
    pub fn of(families: &Families, max_rows: usize) -> Option<Formation> {
        let tables = families.exact_tables()?;
        let families = families
            .iter()
            .map(|f| {
                f.exact.then(|| ExactFamily {
                    name: f.name.as_str().into(),
                    columns: f.columns.clone().into(),
                })
            })
            .collect();
        Some(Formation {
            families,
            buckets: tables.buckets,
            max_rows: max_rows.max(1),
        })
    }

    fn exact(&self, family: FamilyId) -> Option<&ExactFamily> {
        self.families.get(usize::from(family.0))?.as_ref()
    }
}

/// One ledger request waiting to be confirmed: rows of one ledger partition formed by one
/// flush, and the drained rows whose fresh deltas they record.
#[derive(Debug)]
pub struct Held {
    /// The ledger rows, formed once, sent verbatim on every attempt.
    pub rows: Vec<LedgerRow>,
    /// The drained rows they gate.
    pub gated: Vec<(RowKey, Row)>,
    /// The gated rows' room in the memory budget while they wait here past their flush
    /// (None for rows formed by an earlier process: theirs are in the spill).
    credit: Option<Credit>,
    /// On disk: in a held segment's header or in `ledger_pending.jsonl` (see
    /// [`crate::state::ledger_pending`]). The spill replays nothing until every such
    /// request is confirmed.
    stored: bool,
    /// Failed attempts so far.
    failures: u32,
    /// Not to be sent again before this instant (the back-off).
    not_before: Option<Instant>,
    /// Its ledger rows are confirmed (and gone from `rows`): its gated rows wait only for
    /// room in a flush's share of the memory limit (see [`Release`]).
    confirmed: bool,
}

impl Held {
    fn new(rows: Vec<LedgerRow>, stored: bool) -> Held {
        Held {
            rows,
            gated: Vec::new(),
            credit: None,
            stored,
            failures: 0,
            not_before: None,
            confirmed: false,
        }
    }

    /// The estimated writes of the rows it gates.
    fn cost(&self, flush_cost: &dyn Fn(&RowKey, &Row) -> usize) -> usize {
        self.gated.iter().map(|(k, r)| flush_cost(k, r)).sum()
    }

    fn owed_sums(&self) -> [i128; Granularity::COUNT] {
        owed_sums(self.gated.iter())
    }
}

/// Signed delta sums (minute, day) that `rows` owe the counter tables.
pub fn owed_sums<'a>(rows: impl Iterator<Item = &'a (RowKey, Row)>) -> [i128; Granularity::COUNT] {
    let mut sums = [0_i128; Granularity::COUNT];
    for (key, row) in rows {
        for g in Granularity::ALL {
            if key.slot().owes(g) {
                sums[g.index()] += row.columns.sum();
            }
        }
    }
    sums
}

/// Splits drained rows into those that pass straight to the plan and the ledger requests
/// that must be confirmed before the rest may follow. Pure: the same rows and flush give
/// the same ledger rows.
pub fn form(
    formation: &Formation,
    flush: &FlushId,
    drained: impl IntoIterator<Item = (RowKey, Row)>,
) -> (Vec<(RowKey, Row)>, Vec<Held>) {
    let (mut fresh, mut pass): (Vec<_>, Vec<_>) = drained.into_iter().partition(|(key, row)| {
        matches!(key.slot(), Slot::Both(_))
            && formation.exact(key.family()).is_some()
            && !row.columns.is_zero()
    });
    // Sorted by (family, series, minute), the rows of one minute row (one per stripe that
    // held it) are neighbours, and so are the minutes of one series: its key is formed
    // once, not once per minute.
    fresh.sort_unstable_by(|(a, _), (b, _)| group_of(a).cmp(&group_of(b)));
    let writer: Arc<str> = flush.ledger_writer().into();
    // (family, day, bucket) → ledger rows and gated rows, in chunks of `max_rows`.
    let mut partitions: BTreeMap<(FamilyId, u32, i16), Vec<Held>> = BTreeMap::new();
    let mut last_series: Option<SeriesKey> = None;
    let mut fresh = fresh.into_iter().peekable();
    while let Some(first) = fresh.next() {
        let mut rows = vec![first];
        while let Some(next) = fresh.next_if(|(key, _)| group_of(key) == group_of(&rows[0].0)) {
            rows.push(next);
        }
        let (family, series, minute) = group_of(&rows[0].0);
        let Some(exact) = formation.exact(family) else {
            pass.extend(rows);
            continue;
        };
        let (key, bucket) = match &last_series {
            Some((f, s, key, bucket)) if *f == family && **s == *series => (key.clone(), *bucket),
            _ => {
                let key: Arc<str> = series::key_json(series).into();
                let bucket = key_bucket(&key, formation.buckets);
                last_series = Some((family, series.into(), key.clone(), bucket));
                (key, bucket)
            }
        };
        let minute = Minute(minute);
        let parts = summed_parts(&rows);
        let ledger_rows = parts
            .into_iter()
            .enumerate()
            .map(|(part, deltas)| LedgerRow {
                family: exact.name.clone(),
                key: key.clone(),
                bucket,
                minute,
                writer: writer.clone(),
                incarnation: flush.incarnation,
                flush_seq: flush.flush_seq,
                part: u16::try_from(part).unwrap_or(u16::MAX),
                columns: exact.columns.clone(),
                deltas: deltas.as_slice().into(),
            });
        let chunks = partitions
            .entry((family, minute.day().0, bucket))
            .or_default();
        let fits = chunks
            .last()
            .is_some_and(|c| c.rows.len() < formation.max_rows);
        if !fits {
            chunks.push(Held::new(Vec::new(), false));
        }
        if let Some(chunk) = chunks.last_mut() {
            chunk.rows.extend(ledger_rows);
            chunk.gated.extend(rows);
        }
    }
    (pass, partitions.into_values().flatten().collect())
}

/// The previous group's family and series, with its key (JSON) and ledger bucket.
type SeriesKey = (FamilyId, Box<[u8]>, Arc<str>, i16);

/// What a drained row's ledger row is formed for: (family, series, minute). Only fresh
/// rows ([`Slot::Both`]) are grouped; others have no minute here.
fn group_of(key: &RowKey) -> (FamilyId, &[u8], u32) {
    let minute = match key.slot() {
        Slot::Both(minute) => minute.0,
        _ => 0,
    };
    (key.family(), key.series(), minute)
}

/// The fresh deltas of one (family, key, minute), summed; a second part (and more) only
/// when a sum would not fit a bigint.
fn summed_parts(rows: &[(RowKey, Row)]) -> Vec<Columns> {
    let mut parts: Vec<Columns> = Vec::with_capacity(1);
    for (_, row) in rows {
        if !parts.iter_mut().any(|p| p.checked_add(&row.columns)) {
            parts.push(row.columns.clone());
        }
    }
    parts
}

/// What the gate charges a drained row: its room in the memory budget while it is held
/// (`charge`), and the estimated writes a flush plans for it (`flush`), released within
/// `share`, the flush's share of the memory limit.
pub struct Costs<'a> {
    /// A held row's room in the budget.
    pub charge: &'a (dyn Fn(&RowKey, &Row) -> usize + Sync),
    /// The writes planned for a released row.
    pub flush: &'a (dyn Fn(&RowKey, &Row) -> usize + Sync),
    /// The flush's share of the memory limit.
    pub share: usize,
}

/// How much one flush may still release (see [`LedgerGate::admit`]).
struct Release {
    /// Estimated writes of the rows passing so far.
    spent: usize,
    share: usize,
    /// Whether a held request was released (one always may be: progress).
    any: bool,
}

impl Release {
    /// Whether a request whose rows' writes cost `cost` may be released now; if so, it
    /// is counted.
    fn fits(&mut self, cost: usize) -> bool {
        let fits = !self.any || self.spent.saturating_add(cost) <= self.share;
        if fits {
            self.spent = self.spent.saturating_add(cost);
            self.any = true;
        }
        fits
    }
}

/// The gate a flush passes its drained rows through (see the module docs).
pub struct LedgerGate {
    formation: Formation,
    /// The wait before a failed request is sent again (within a flush and across them).
    backoff: Backoff,
    /// Requests formed and not confirmed yet, oldest first.
    held: Vec<Held>,
    /// Sums (minute, day) the held rows owe the counter tables.
    held_sums: [i128; Granularity::COUNT],
    /// Rows of the outcomes table waiting to be written.
    outcomes: OutcomeQueue,
    /// What the state directory's spill still owes (see [`super::owed`]), once set.
    owed: Option<OwedBook>,
    /// The owed marks waiting to be written (never dropped; the latest of each
    /// family-day only).
    marks: OutcomeQueue,
    /// Where the ledger's write counts and backlog are kept for the metrics.
    counts: Arc<Ledger>,
}

impl LedgerGate {
    /// The gate for `families`, or None when no family keeps exact totals; its queue of
    /// outcome rows holds at most `outcome_bytes` (see [`OutcomeQueue::bounded`]).
    pub fn new(
        families: &Families,
        max_rows: usize,
        outcome_bytes: usize,
        counts: Arc<Ledger>,
    ) -> Option<LedgerGate> {
        let backoff = families.exact_tables()?.retry_backoff;
        Some(LedgerGate {
            formation: Formation::of(families, max_rows)?,
            backoff,
            held: Vec::new(),
            held_sums: [0; Granularity::COUNT],
            outcomes: OutcomeQueue::bounded(outcome_bytes),
            owed: None,
            marks: OutcomeQueue::marks(),
            counts,
        })
    }

    /// Drained rows held for their ledger rows, and their sums (minute, day).
    pub fn held(&self) -> (usize, [i128; Granularity::COUNT]) {
        (
            self.held.iter().map(|h| h.gated.len()).sum(),
            self.held_sums,
        )
    }

    /// Ledger rows formed and not confirmed yet.
    pub fn backlog(&self) -> usize {
        self.held.iter().map(|h| h.rows.len()).sum()
    }

    /// Forms the ledger rows of `drained`, sends every request that is due (in the final
    /// flush, every one not stored on disk yet), and returns the rows the counter writes may carry now: those
    /// that need no ledger row and those whose ledger rows are confirmed (this flush's or
    /// an earlier one's). The rest stay held for a later flush, and take their room in
    /// the memory budget (`charge` of each row) out of the flush's `credit` with them;
    /// rows released here bring theirs back into it.
    ///
    /// What is released into one flush is bounded as a chunk is: the writes planned for
    /// the rows passing (`costs.flush` of each) fit `costs.share`, the flush's share of the
    /// memory limit, once at least one request is released; a confirmed request beyond
    /// it keeps its rows held, their room with them, for the next flush (which drains
    /// that much less of the buffer: [`LedgerGate::confirmed_cost`]). After a ledger
    /// outage every held request is confirmed at once: released together, their writes
    /// would take several times the share. The final flush too: it goes on while
    /// confirmed rows wait ([`LedgerGate::has_confirmed`]).
    #[allow(clippy::too_many_arguments)]
    pub async fn admit<S: Sink>(
        &mut self,
        sink: &S,
        flush: &FlushId,
        drained: impl IntoIterator<Item = (RowKey, Row)>,
        credit: &mut Credit,
        costs: &Costs<'_>,
        max_in_flight: usize,
        deadline: &mut Deadline,
        last: bool,
    ) -> Vec<(RowKey, Row)> {
        let (mut pass, formed) = form(&self.formation, flush, drained);
        let mut release = Release {
            spent: pass.iter().map(|(k, r)| (costs.flush)(k, r)).sum(),
            share: costs.share,
            any: false,
        };
        // Confirmed in an earlier flush, oldest first: released before anything new.
        let (confirmed, unconfirmed): (Vec<Held>, Vec<Held>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| h.confirmed);
        self.held = unconfirmed;
        for held in confirmed {
            if release.fits(held.cost(costs.flush)) {
                self.release(held, &mut pass, credit);
            } else {
                self.held.push(held);
            }
        }
        let charge = costs.charge;
        for mut held in formed {
            let sums = held.owed_sums();
            for (held_sum, sum) in self.held_sums.iter_mut().zip(sums) {
                *held_sum += sum;
            }
            let bytes = held.gated.iter().map(|(k, r)| charge(k, r)).sum();
            held.credit = Some(credit.split_off(held.gated.len(), bytes));
            self.held.push(held);
        }
        let now = Instant::now();
        // The final flush sends what is not on disk yet, at once; a stored request (given
        // up by an earlier chunk, or an earlier process's) waits for the next start,
        // which confirms it before any replay: sent again in every chunk, its attempts
        // and back-off would take the deadline's time from the fresh chunks.
        let due_now = |h: &Held| {
            if last {
                !h.stored
            } else {
                h.not_before.is_none_or(|t| t <= now)
            }
        };
        let (due, waiting): (Vec<Held>, Vec<Held>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| !h.confirmed && due_now(h));
        self.held = waiting;
        let counts = Arc::clone(&self.counts);
        let writes = LedgerWrites {
            sink,
            counts: &counts,
            backoff: self.backoff,
        };
        let mut stage = LedgerStage {
            gate: self,
            pass,
            credit,
            failed: 0,
            release,
            flush_cost: costs.flush,
        };
        run_stage(
            &mut stage,
            &writes,
            due,
            StageCx {
                cutoff: deadline,
                max_in_flight,
                // The ledger's column has no age rule and keeps what fails, the final
                // flush too (its rows are given up together once the flush is over).
                facts: Facts::fresh(last, 0, u32::MAX),
                first_request: 0,
            },
        )
        .await;
        stage.pass
    }

    /// The estimated writes (`flush_cost` of each row) of the rows held past their
    /// confirmation for want of room: what the next flush releases first, and drains
    /// that much less of the buffer for (at most the flush's share).
    pub fn confirmed_cost(&self, flush_cost: &dyn Fn(&RowKey, &Row) -> usize) -> usize {
        self.held
            .iter()
            .filter(|h| h.confirmed)
            .map(|h| h.cost(flush_cost))
            .sum()
    }

    /// Lets a confirmed request's rows go on to the plan: their sums leave the held
    /// ones, their room returns to the flush's credit.
    fn release(&mut self, mut held: Held, pass: &mut Vec<(RowKey, Row)>, credit: &mut Credit) {
        let sums = held.owed_sums();
        for (held_sum, sum) in self.held_sums.iter_mut().zip(sums) {
            *held_sum -= sum;
        }
        pass.append(&mut held.gated);
        if let Some(room) = held.credit.take() {
            credit.absorb(room);
        }
    }

    /// Takes in ledger rows an earlier process formed and could not confirm (from held
    /// segments' headers and `ledger_pending.jsonl`): they are sent again, verbatim,
    /// before anything else.
    pub fn load_stored(&mut self, rows: Vec<LedgerRow>) {
        let mut partitions: BTreeMap<(Arc<str>, u32, i16), Vec<LedgerRow>> = BTreeMap::new();
        for row in rows {
            partitions
                .entry((row.family.clone(), row.day().0, row.bucket))
                .or_default()
                .push(row);
        }
        for rows in partitions.into_values() {
            for chunk in rows.chunks(self.formation.max_rows) {
                self.held.push(Held::new(chunk.to_vec(), true));
            }
        }
        self.publish();
    }

    /// The ledger rows of increments the ingest log answered (`rows`, fresh: both
    /// tables), formed once, as `flush` names the spill segment they become (see
    /// `flusher/ingest.rs`): that segment's header carries them, and they are confirmed
    /// before any spilled row is replayed ([`LedgerGate::load_stored`]). Rows of other
    /// families form none.
    pub fn form_logged(&self, flush: &FlushId, rows: Vec<(RowKey, Row)>) -> Vec<LedgerRow> {
        let (_, requests) = form(&self.formation, flush, rows);
        requests.into_iter().flat_map(|held| held.rows).collect()
    }

    /// Whether ledger rows stored on disk wait to be confirmed: until none
    /// does, no spilled row may be replayed (it may carry their deltas).
    pub fn has_stored(&self) -> bool {
        self.held.iter().any(|h| h.stored)
    }

    /// At the end of the final flush: every unconfirmed request gives up its drained
    /// rows (for the spill) and its room in the budget; returns the rows, their sums
    /// (minute, day), and every unconfirmed ledger row (for `ledger_pending.jsonl`, when
    /// no held segment can carry them). The requests stay, to be marked stored once
    /// their ledger rows are on disk ([`LedgerGate::mark_stored`]), or forgotten if they
    /// could not be written ([`LedgerGate::forget_unstored`]).
    ///
    /// Requests confirmed and waiting for room are given up only with `confirmed_too`
    /// (once the final flush ends with some left): until then later chunks release them.
    pub fn give_up_held(
        &mut self,
        confirmed_too: bool,
    ) -> (
        Vec<(RowKey, Row)>,
        [i128; Granularity::COUNT],
        Vec<LedgerRow>,
    ) {
        let mut gated = Vec::new();
        let mut ledger_rows = Vec::new();
        let mut sums = [0_i128; Granularity::COUNT];
        for held in self
            .held
            .iter_mut()
            .filter(|h| confirmed_too || !h.confirmed)
        {
            for (sum, owed) in sums.iter_mut().zip(held.owed_sums()) {
                *sum += owed;
            }
            gated.append(&mut held.gated);
            held.credit = None;
            ledger_rows.extend(held.rows.iter().cloned());
        }
        for (held_sum, sum) in self.held_sums.iter_mut().zip(sums) {
            *held_sum -= sum;
        }
        self.publish();
        (gated, sums, ledger_rows)
    }

    /// Whether confirmed requests wait for room to release their rows.
    pub fn has_confirmed(&self) -> bool {
        self.held.iter().any(|h| h.confirmed && !h.gated.is_empty())
    }

    /// The ledger rows of the requests not on disk yet: those of the rows
    /// [`LedgerGate::give_up_held`] just gave up, for their held segment's header.
    pub fn unstored_rows(&self) -> Vec<LedgerRow> {
        self.held
            .iter()
            .filter(|held| !held.stored)
            .flat_map(|held| held.rows.iter().cloned())
            .collect()
    }

    /// Every unconfirmed ledger row is on disk (a held segment's header or
    /// `ledger_pending.jsonl`): each request is a stored one (no spilled row is replayed
    /// before it is confirmed).
    pub fn mark_stored(&mut self) {
        for held in self.held.iter_mut().filter(|h| !h.confirmed) {
            held.stored = true;
        }
    }

    /// Neither a held segment nor `ledger_pending.jsonl` could be written, so the rows
    /// just given up are lost (not spilled): their requests are forgotten, never sent
    /// again nor written to the file by a later chunk of the final flush (the ledger would
    /// record deltas that reach no counter). Returns the ledger rows of the requests still
    /// stored (those of rows spilled earlier), what the file must hold.
    pub fn forget_unstored(&mut self) -> Vec<LedgerRow> {
        self.held.retain(|held| held.stored || held.confirmed);
        self.publish();
        self.held
            .iter()
            .flat_map(|held| held.rows.iter().cloned())
            .collect()
    }

    /// Publishes the held rows and the backlog to the metrics.
    fn publish(&self) {
        let (rows, sums) = self.held();
        self.counts
            .set_exact_ledger_backlog(rows as u64, self.backlog() as u64, sums);
    }

    /// Queues the outcomes-table rows of the exact families' records among `records`
    /// (unknown, rejected: see [`super::exact_outcomes`]).
    pub fn record_outcomes<'a>(
        &mut self,
        families: &Families,
        records: impl IntoIterator<Item = &'a WriteRecord>,
    ) {
        self.outcomes.offer(families, records);
        self.publish_owed();
    }

    /// Sends the queued outcome rows (all that are due; every one when `force`), then the
    /// owed marks (see [`super::owed`]).
    pub async fn send_outcomes<S: Sink>(&mut self, sink: &S, deadline: &mut Deadline, force: bool) {
        self.outcomes
            .send(sink, self.backoff, deadline, force)
            .await;
        if let Some(book) = &mut self.owed {
            self.marks.push_rows(book.sweep());
        }
        if self.marks.is_empty() {
            self.publish_owed();
            return;
        }
        self.marks.send(sink, self.backoff, deadline, force).await;
        if self.marks.is_empty()
            && let Some(book) = &mut self.owed
            && let Err(error) = book.marks_applied()
        {
            tracing::warn!(%error, file = super::owed::FILE_NAME, "Could not record that owed days were cleared; the next start clears them again.");
        }
        self.publish_owed();
    }

    /// Publishes the owed days, the marks and the outcome rows waiting (and those
    /// dropped) to the metrics.
    fn publish_owed(&self) {
        let days = self.owed.as_ref().map_or(0, OwedBook::owed_days);
        self.counts
            .set_exact_owed(days as u64, self.marks.len() as u64);
        self.counts
            .set_exact_outcome_rows(self.outcomes.len() as u64, self.outcomes.dropped);
    }

    /// Makes what the state directory owes visible in the outcomes table (see
    /// [`super::owed`]): `book`, and the marks a start sends.
    pub fn set_owed(&mut self, book: OwedBook, marks: Vec<OutcomeRow>) {
        self.owed = Some(book);
        self.marks.push_rows(marks);
        self.publish_owed();
    }

    /// Records kept in a spill segment: the days of exact families among them are owed.
    pub fn spilled<'a>(
        &mut self,
        families: &Families,
        records: impl IntoIterator<Item = &'a WriteRecord>,
    ) {
        let Some(book) = &mut self.owed else {
            return;
        };
        match book.spilled(families, records) {
            Ok(marks) => self.marks.push_rows(marks),
            Err(error) => {
                tracing::error!(%error, file = super::owed::FILE_NAME, "Could not record owed days; their marks are not sent (a repair before the replay could count those rows twice). The next start sends them.")
            }
        }
    }

    /// The records a committed replay group carried, counted per owed day.
    pub fn replayed(&mut self, days: BTreeMap<OwedDay, u64>) {
        if let Some(book) = &mut self.owed {
            book.replayed(days);
        }
    }

    /// A counter write's decision, as the owed days see it: a write of a replay group
    /// that goes back into the buffer stays owed; any write that leaves the buffer for
    /// good carries the replayed rows it merged with.
    pub fn track(
        &mut self,
        families: &Families,
        write: &PartitionWrite,
        action: &Action,
        replay: bool,
    ) {
        let Some(book) = &mut self.owed else {
            return;
        };
        match action {
            Action::Retry(_) | Action::Hold if replay => book.buffered_write(families, write),
            Action::Retry(_) | Action::Hold => {}
            _ => book.settled(families, write),
        }
    }

    /// Rows of a committed replay group the epoch registry holds in the buffer.
    pub fn buffered_rows<'a>(
        &mut self,
        families: &Families,
        keys: impl Iterator<Item = &'a RowKey>,
    ) {
        if let Some(book) = &mut self.owed {
            book.buffered_rows(families, keys);
        }
    }

    /// Owed marks waiting to be written.
    pub fn marks_queued(&self) -> usize {
        self.marks.len()
    }

    /// The owed marks waiting to be written, oldest first.
    #[cfg(test)]
    pub fn queued_marks(&self) -> Vec<OutcomeRow> {
        self.marks.rows().cloned().collect()
    }

    /// Outcome rows waiting to be written.
    pub fn outcomes_queued(&self) -> usize {
        self.outcomes.len()
    }

    /// Queues at most `rows` outcome rows (a test's stand-in for a full queue).
    #[cfg(test)]
    pub fn limit_outcome_queue(&mut self, rows: usize) {
        self.outcomes.limit(rows);
    }

    /// Outcome rows dropped from the full queue since the start (still in the logs).
    pub fn outcomes_dropped(&self) -> u64 {
        self.outcomes.dropped
    }
}

/// How ledger requests are sent: each up to [`ATTEMPTS_PER_FLUSH`] times, with the
/// back-off between attempts; every attempt counted. Its answer is the last attempt's.
struct LedgerWrites<'a, S> {
    sink: &'a S,
    counts: &'a Ledger,
    backoff: Backoff,
}

impl<S: Sink> Sender<Held> for LedgerWrites<'_, S> {
    async fn send(&self, held: &Held) -> Outcome {
        let mut attempt = 1;
        loop {
            let outcome = self.sink.write_ledger(&held.rows).await;
            self.counts.count_exact_ledger_write(outcome.class());
            if outcome == Outcome::Applied || attempt >= ATTEMPTS_PER_FLUSH {
                return outcome;
            }
            tokio::time::sleep(self.backoff.delay(attempt)).await;
            attempt += 1;
        }
    }
}

/// The delta ledger's kind of write: the due ledger requests of one flush. Nothing is
/// journaled (a ledger row is formed once and sent verbatim until it applies; at a
/// shutdown deadline the rows go to a held segment's header or `ledger_pending.jsonl`).
struct LedgerStage<'a> {
    gate: &'a mut LedgerGate,
    /// The rows the counter writes may carry now.
    pass: Vec<(RowKey, Row)>,
    /// The flush's credit: rows released here bring their room back into it.
    credit: &'a mut Credit,
    /// Requests that did not apply.
    failed: usize,
    /// What the flush may still release.
    release: Release,
    flush_cost: &'a (dyn Fn(&RowKey, &Row) -> usize + Sync),
}

impl WriteKind for LedgerStage<'_> {
    type Request = Held;

    const POLICY: Policy = Policy::LEDGER;

    const CRASH_POINTS: CrashPoints = CrashPoints::NONE;

    fn journal(&mut self) -> Option<&mut StateDir> {
        None
    }

    fn begin(&mut self, _: &[Held], _: u32) -> std::io::Result<()> {
        Ok(())
    }

    fn apply(&mut self, _: u32, mut held: Held, decision: Decision) {
        let gate = &mut *self.gate;
        if decision.action == Action::Applied {
            if self.release.fits(held.cost(self.flush_cost)) {
                gate.release(held, &mut self.pass, self.credit);
            } else {
                // Confirmed: never sent again; its rows wait for room.
                held.rows = Vec::new();
                held.stored = false;
                held.confirmed = true;
                gate.held.push(held);
            }
        } else {
            self.failed += 1;
            held.failures = held.failures.saturating_add(1);
            held.not_before = Some(Instant::now() + gate.backoff.delay(held.failures));
            gate.held.push(held);
        }
    }

    fn finish(&mut self) {
        self.gate.publish();
        if self.failed > 0 {
            let (rows, _) = self.gate.held();
            tracing::warn!(
                requests = self.failed,
                held_rows = rows,
                ledger_rows = self.gate.backlog(),
                "Delta ledger writes failed: the exact families' rows they record are held (no counter write carries them) and the same ledger rows are sent again."
            );
        }
    }

    fn end(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
#[path = "ledger_gate_tests.rs"]
mod tests;
