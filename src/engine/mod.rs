//! The engine: families plus the aggregator. Turns one increment (from a line or an
//! in-process call) into a pending delta, counting every outcome.
//!
//! # The two hot paths
//!
//! **Lines** ([`Engine::ingest_packet`]). The calling thread's stripe is locked once per
//! packet and the packet's minute resolved once. Each line is cut into name, values and
//! rest; a line whose name and rest were placed before is found in a per-thread cache
//! (`src/engine/cache.rs`, which explains why that is exact) and only its values are
//! parsed. Any other line is parsed in full: the parser records where each tag starts
//! and ends, so the canonical tag string is written from those offsets without splitting
//! the tag field again, and the series is hashed once and remembered with the placement.
//!
//! **In-process calls** ([`Engine::record`], behind `Recorder::incr`). Tag pairs are
//! canonicalised directly (two pairs take one comparison), the series key is built in a
//! per-thread buffer, and the clock is the coarse one of [`now_unix_secs`].
//!
//! **Requests of a non-line source** ([`Engine::batch`], an OTLP request's points): as
//! in-process calls, but the stripe and the routing are taken once per request (see
//! [`Batch`]).
//!
//! `tests/bench/engine.rs` measures both paths (time, and instructions under callgrind,
//! which repeat on a shared machine); docs/src/performance.md has the figures.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::aggregate::scale;
use crate::aggregate::{self, Aggregator, Limits, RowKeyRef, Slot, Stripe};
use crate::bucket::Minute;
use crate::config::{Config, ConfigError};
use crate::family::{Families, IndexedLine, TagSet, Target, Unplaced};
use crate::line::{self, InvalidReason, LineLimits, LineResult, TagSpans};
use crate::vocabulary::{DropReason, Transport};

use self::cache::{LineCache, Placement};

pub use self::batch::Batch;
pub use self::clock::now_unix_secs;

mod batch;
mod cache;
mod clock;

thread_local! {
    /// Per-thread scratch space of the hot paths, reused from call to call.
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// What the hot paths reuse instead of allocating.
#[derive(Default)]
struct Scratch {
    /// The series key being encoded: allocation happens only when a new row is kept.
    series: Vec<u8>,
    /// The tag index of the line being parsed (see [`line::TagSpans`]).
    spans: TagSpans,
    /// Where recently seen lines went (see [`cache`]).
    cache: LineCache,
}

/// Why an in-process increment was not kept. It is counted either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The increment cannot be placed (missing key tag, key too long).
    #[error("invalid increment: {}", .0.as_str())]
    Invalid(InvalidReason),
    /// A limit dropped it.
    #[error("increment dropped: {}", .0.as_str())]
    Dropped(DropReason),
}

/// An increment of a durable request that [`Engine::check_from`] refused: why, and its
/// delta (for the drop's sum), counted once its request is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// Why it was refused.
    pub error: RecordError,
    /// Its delta.
    pub delta: i64,
}

/// Families and the aggregator, shared by receivers, the in-process API and the flusher.
pub struct Engine {
    families: Families,
    aggregator: Aggregator,
    /// `limits.max_line_bytes` and `limits.max_tags`: atomics, so that a live reload
    /// changes them (see [`Engine::set_limits`]) while each line reads them.
    max_line_bytes: AtomicUsize,
    max_tags: AtomicUsize,
    /// This engine's identity in the per-thread line caches: a new one each time the
    /// families' routing is replaced, so no thread places a line by the old routing
    /// from its cache afterwards.
    cache_owner: AtomicU64,
    /// Seed of the line caches' hash.
    cache_seed: u64,
}

impl Engine {
    /// An engine for a validated configuration.
    pub fn new(config: &Config) -> Result<Engine, ConfigError> {
        Self::with_seed(config, None)
    }

    /// The same, with a fixed seed for the rounding of sampled values (tests).
    pub fn with_seed(config: &Config, seed: Option<u64>) -> Result<Engine, ConfigError> {
        let families = Families::from_config(config)?;
        let limits = Limits {
            max_pending_rows: config.limits.max_pending_rows,
            max_pending_bytes: config.limits.max_pending_bytes,
            max_key_bytes: config.limits.max_key_bytes,
            timestamp_max_past: config.limits.timestamp_max_past,
            timestamp_max_future: config.limits.timestamp_max_future,
        };
        Ok(Engine {
            families,
            aggregator: Aggregator::new(limits, aggregate::default_stripes(), seed)
                .with_cardinality(config.cardinality_caps()),
            max_line_bytes: AtomicUsize::new(config.limits.max_line_bytes),
            max_tags: AtomicUsize::new(config.limits.max_tags),
            cache_owner: AtomicU64::new(cache::new_owner()),
            cache_seed: fastrand::u64(..),
        })
    }

    /// The families.
    pub fn families(&self) -> &Families {
        &self.families
    }

    /// The aggregator.
    pub fn aggregator(&self) -> &Aggregator {
        &self.aggregator
    }

    /// Routes increments by the names, `[[mapping]]` rules and tag rules of `next` from
    /// now on, when its families are the same as this engine's (see
    /// [`Families::replace_routing`]); rows already pending keep the family they were
    /// placed in. Says what differs otherwise, and changes nothing.
    pub fn replace_routing(&self, next: Families) -> Result<(), String> {
        self.families.replace_routing(next)?;
        // After the routing: a thread that claims its cache with the new owner reads the
        // new routing on every miss.
        self.cache_owner
            .store(cache::new_owner(), Ordering::Release);
        Ok(())
    }

    /// The per-line limits now.
    fn line_limits(&self) -> LineLimits {
        LineLimits {
            max_line_bytes: self.max_line_bytes.load(Ordering::Relaxed),
            max_tags: self.max_tags.load(Ordering::Relaxed),
        }
    }

    /// Enforces the `[limits]` of `config` from now on (a live reload; see
    /// [`crate::config::reload`] for which of them may change). The per-line limits
    /// apply from the next line: the line cache is cleared, since it holds lines placed
    /// under the old ones (a cached line skips the parse that checks its tags). The
    /// series-key limit travels with the routing ([`Engine::replace_routing`]); the
    /// buffer's limits are the aggregator's ([`Aggregator::set_limits`]).
    pub fn set_limits(&self, config: &Config) {
        self.aggregator.set_limits(&Limits {
            max_pending_rows: config.limits.max_pending_rows,
            max_pending_bytes: config.limits.max_pending_bytes,
            max_key_bytes: config.limits.max_key_bytes,
            timestamp_max_past: config.limits.timestamp_max_past,
            timestamp_max_future: config.limits.timestamp_max_future,
        });
        self.max_line_bytes
            .store(config.limits.max_line_bytes, Ordering::Relaxed);
        self.max_tags
            .store(config.limits.max_tags, Ordering::Relaxed);
        self.cache_owner
            .store(cache::new_owner(), Ordering::Release);
    }

    /// Takes a live reload's families (see [`Families::reshape`]): appends the families it
    /// adds, then routes by its routing; rows already pending keep the family, and so the
    /// tables, they were placed in. Changes nothing when refused.
    pub fn reshape_families(&self, reshape: crate::family::Reshape) -> Result<(), String> {
        self.families.apply(reshape)?;
        self.cache_owner
            .store(cache::new_owner(), Ordering::Release);
        Ok(())
    }

    /// Parses and aggregates every line of one datagram (or stream message) received
    /// at `now_unix_secs`. Takes the calling thread's stripe once for the whole packet;
    /// each line is counted as received and then as invalid, ignored, accepted or
    /// dropped. Never fails: bad lines are counted and skipped.
    pub fn ingest_packet(&self, packet: &[u8], transport: Transport, now_unix_secs: i64) {
        let mut stripe = self.aggregator.stripe();
        // Lines without a client timestamp (nearly all) share the packet's minute.
        let now = Now {
            unix_secs: now_unix_secs,
            minute: aggregate::minute_for(now_unix_secs, None, &self.aggregator.limits()),
        };
        SCRATCH.with_borrow_mut(|scratch| {
            scratch
                .cache
                .claim(self.cache_owner.load(Ordering::Acquire));
            for raw in line::split_lines(packet) {
                stripe.counters().count_line(transport);
                let result = if raw.len() <= self.max_line_bytes.load(Ordering::Relaxed) {
                    self.ingest_cached(&mut stripe, scratch, raw, &now)
                } else {
                    self.ingest_line(&mut stripe, scratch, raw, &now)
                        .map(|_| ())
                };
                if let Err(reason) = result {
                    stripe.counters().count_invalid(reason);
                }
            }
        });
    }

    /// A line within the length limit: from the line cache when its name and rest were
    /// placed before (see [`cache`] for why that is exact), else parsed in full and, once
    /// placed, cached.
    fn ingest_cached(
        &self,
        stripe: &mut Stripe<'_>,
        scratch: &mut Scratch,
        raw: &[u8],
        now: &Now,
    ) -> Result<(), InvalidReason> {
        let Some(cut) = line::cut(raw) else {
            return self.ingest_line(stripe, scratch, raw, now).map(|_| ());
        };
        let hash = LineCache::hash(self.cache_seed, cut.name, cut.rest);
        if let Some((placement, series)) = scratch.cache.get(hash, cut.name, cut.rest) {
            let values = line::parse_values(cut.values)?;
            let sum = scale(
                stripe,
                values.single_int(),
                || values.values(),
                placement.sample_rate,
            )?;
            self.place(
                stripe,
                sum,
                values.count() as u64,
                placement.target,
                series,
                placement.series_hash,
                placement.timestamp,
                now,
            );
            return Ok(());
        }
        if let Some(placement) = self.ingest_line(stripe, scratch, raw, now)? {
            scratch
                .cache
                .insert(hash, cut.name, cut.rest, &scratch.series, placement);
        }
        Ok(())
    }

    /// Parses one line in full and aggregates it. Returns where it went when it was
    /// placed in a family (left in `scratch.series`), for the line cache. Ignored lines
    /// are counted here; errors are invalid-line reasons for the caller to count.
    fn ingest_line(
        &self,
        stripe: &mut Stripe<'_>,
        scratch: &mut Scratch,
        raw: &[u8],
        now: &Now,
    ) -> Result<Option<Placement>, InvalidReason> {
        let spans = &mut scratch.spans;
        let counter = match line::parse_line_indexed(raw, &self.line_limits(), spans) {
            LineResult::Counter(counter) => counter,
            LineResult::Ignored(kind) => {
                stripe.counters().count_ignored(kind);
                return Ok(None);
            }
            LineResult::Invalid(reason) => return Err(reason),
        };
        // Every value of a multi-value line is one increment; they share the row, so they
        // are summed first and added once. A line whose values cannot be scaled into an
        // integer is invalid as a whole, so a line is never half counted.
        let sum = scale(
            stripe,
            counter.single_int(),
            || counter.values(),
            counter.sample_rate(),
        )?;
        let count = counter.value_count() as u64;
        let line = IndexedLine {
            line: &counter,
            spans,
        };
        let series = &mut scratch.series;
        let target = match self.families.resolve(counter.name(), &line, series) {
            Ok(target) => target,
            Err(unplaced) => {
                return match unplaced.invalid_reason() {
                    Some(reason) => Err(reason),
                    None => {
                        stripe.record_dropped(DropReason::Unconfigured, count, sum);
                        Ok(None)
                    }
                };
            }
        };
        let series_hash = aggregate::series_hash(self.aggregator.hasher(), series);
        self.place(
            stripe,
            sum,
            count,
            target,
            series,
            series_hash,
            counter.timestamp(),
            now,
        );
        Ok(Some(Placement {
            target,
            sample_rate: counter.sample_rate(),
            timestamp: counter.timestamp(),
            series_hash,
        }))
    }

    /// Adds a placed line's increments to its row; drops are counted inside.
    #[allow(clippy::too_many_arguments)]
    fn place(
        &self,
        stripe: &mut Stripe<'_>,
        sum: i128,
        count: u64,
        target: Target,
        series: &[u8],
        series_hash: u64,
        timestamp: Option<i64>,
        now: &Now,
    ) {
        let Ok(delta) = i64::try_from(sum) else {
            stripe.record_dropped(DropReason::Overflow, count, sum);
            return;
        };
        let minute = match timestamp {
            None => now.minute,
            at => aggregate::minute_for(now.unix_secs, at, &self.aggregator.limits()),
        };
        let _ = self.add(
            stripe,
            target,
            series,
            Some(series_hash),
            delta,
            count,
            (minute, now.unix_secs),
        );
    }

    /// One increment from a receiver that does not carry StatsD lines (a decoded OTLP
    /// point, say): counted as received on `source`, like a line in
    /// [`Engine::ingest_packet`], then kept as by [`Engine::record`]. The entry of every
    /// non-line transport, so each keeps its own `lines_received` count.
    pub fn record_from<T: TagSet + ?Sized>(
        &self,
        source: Transport,
        name: &str,
        tags: &T,
        delta: i64,
        now_unix_secs: i64,
        at: Option<i64>,
    ) -> Result<(), RecordError> {
        self.aggregator.stripe().counters().count_line(source);
        self.record(name, tags, delta, now_unix_secs, at)
    }

    /// Checks one increment of a durable request (see [`crate::state::ingest_log`])
    /// without keeping it, and without counting it: refused as [`Engine::record_from`]
    /// would refuse it (a name or tags that cannot be placed, a client time outside the
    /// window, a buffer closed for shutdown), so that the answer can say which items
    /// were refused before the rest goes to the ingest log. Returns the minute it counts
    /// in. The request's items are counted once it is answered
    /// ([`Engine::count_checked`]): a request refused whole (the ingest log full or
    /// failing) counts nothing, and its retries count once. The row's memory and
    /// cardinality limits are met later, when the ingest log is replayed.
    pub fn check_from<T: TagSet + ?Sized>(
        &self,
        name: &str,
        tags: &T,
        delta: i64,
        now_unix_secs: i64,
        at: Option<i64>,
    ) -> Result<Minute, Refusal> {
        let minute = aggregate::minute_for(now_unix_secs, at, &self.aggregator.limits());
        let placed = SCRATCH.with_borrow_mut(|scratch| {
            self.families
                .resolve(name, tags, &mut scratch.series)
                .map(|_| ())
        });
        let error = match (placed, minute) {
            (Err(unplaced), _) => match unplaced.invalid_reason() {
                Some(reason) => RecordError::Invalid(reason),
                None => RecordError::Dropped(DropReason::Unconfigured),
            },
            (Ok(()), Ok(_)) if self.aggregator.is_closed() => {
                RecordError::Dropped(DropReason::AfterShutdown)
            }
            (Ok(()), Ok(minute)) => return Ok(minute),
            (Ok(()), Err(reason)) => RecordError::Dropped(reason),
        };
        Err(Refusal { error, delta })
    }

    /// Counts the items of an answered durable request, checked by
    /// [`Engine::check_from`]: `accepted` and the `refused` ones received on `source`,
    /// each refusal as [`Engine::record_from`] counts it.
    pub fn count_checked(&self, source: Transport, accepted: u64, refused: &[Refusal]) {
        let mut stripe = self.aggregator.stripe();
        for _ in 0..accepted + refused.len() as u64 {
            stripe.counters().count_line(source);
        }
        for refusal in refused {
            match refusal.error {
                RecordError::Invalid(reason) => stripe.counters().count_invalid(reason),
                RecordError::Dropped(reason) => {
                    stripe.record_dropped(reason, 1, i128::from(refusal.delta))
                }
            }
        }
    }

    /// The row an increment of the ingest log adds to under today's families: its key
    /// (both tables, in `minute`) and its columns, `delta` in its column.
    pub fn row_of<T: TagSet + ?Sized>(
        &self,
        name: &str,
        tags: &T,
        delta: i64,
        minute: Minute,
    ) -> Result<(crate::aggregate::RowKey, crate::aggregate::Columns), Unplaced> {
        let mut series = Vec::new();
        let target = self.families.resolve(name, tags, &mut series)?;
        let key = crate::aggregate::RowKey::new(
            target.family,
            Slot::Both(minute),
            series.into_boxed_slice(),
        );
        let columns = crate::aggregate::Columns::single(target.width, target.column, delta);
        Ok((key, columns))
    }

    /// Adds `delta` to metric `name` with `tags`, at `now` (Unix seconds) or at the
    /// client timestamp `at` when given and inside the window.
    pub fn record<T: TagSet + ?Sized>(
        &self,
        name: &str,
        tags: &T,
        delta: i64,
        now_unix_secs: i64,
        at: Option<i64>,
    ) -> Result<(), RecordError> {
        let minute = aggregate::minute_for(now_unix_secs, at, &self.aggregator.limits());
        SCRATCH.with_borrow_mut(|scratch| {
            let series = &mut scratch.series;
            let target = match self.families.resolve(name, tags, series) {
                Ok(target) => target,
                Err(unplaced) => return Err(self.unplaced(unplaced, delta)),
            };
            self.record_at(target, series, None, delta, (minute, now_unix_secs))
        })
    }

    /// Adds one increment to a resolved target in a minute, received at a time.
    fn record_at(
        &self,
        target: Target,
        series: &[u8],
        series_hash: Option<u64>,
        delta: i64,
        at: (Result<Minute, DropReason>, i64),
    ) -> Result<(), RecordError> {
        let mut stripe = self.aggregator.stripe();
        self.add(&mut stripe, target, series, series_hash, delta, 1, at)
            .map_err(RecordError::Dropped)
    }

    /// Counts an increment refused before it was placed (a name or tags its line could
    /// not carry), and says why.
    pub(crate) fn refuse(&self, reason: InvalidReason) -> RecordError {
        self.aggregator.stripe().counters().count_invalid(reason);
        RecordError::Invalid(reason)
    }

    /// Counts an increment that could not be placed, and says why.
    pub(crate) fn unplaced(&self, unplaced: Unplaced, delta: i64) -> RecordError {
        Self::unplaced_in(&mut self.aggregator.stripe(), unplaced, delta)
    }

    /// [`Engine::unplaced`], counted in a stripe the caller holds.
    fn unplaced_in(stripe: &mut Stripe<'_>, unplaced: Unplaced, delta: i64) -> RecordError {
        match unplaced.invalid_reason() {
            Some(reason) => {
                stripe.counters().count_invalid(reason);
                RecordError::Invalid(reason)
            }
            None => {
                stripe.record_dropped(DropReason::Unconfigured, 1, i128::from(delta));
                RecordError::Dropped(DropReason::Unconfigured)
            }
        }
    }

    /// Adds `delta` to a configured family's column, keyed by its key values in key order
    /// (the typed path of `Recorder::column`): no name look-up, no tag canonicalisation,
    /// and the key is encoded in the per-thread buffer, so a call allocates only when it
    /// creates a row.
    pub(crate) fn record_key(
        &self,
        target: Target,
        key: &[&str],
        delta: i64,
        now_unix_secs: i64,
        at: Option<i64>,
    ) -> Result<(), RecordError> {
        let minute = aggregate::minute_for(now_unix_secs, at, &self.aggregator.limits());
        SCRATCH.with_borrow_mut(|scratch| {
            let series = &mut scratch.series;
            if let Err(unplaced) = self.families.encode_key(target.family, key, series) {
                return Err(self.unplaced(unplaced, delta));
            }
            self.record_at(target, series, None, delta, (minute, now_unix_secs))
        })
    }

    /// Adds to the row of `target` and `series` (whose hash is `series_hash` when known)
    /// in `minute`, received at `now_unix_secs` (the clock of the cardinality windows),
    /// or counts the drop when the minute could not be had (a client timestamp outside
    /// the window).
    #[allow(clippy::too_many_arguments)]
    fn add(
        &self,
        stripe: &mut Stripe<'_>,
        target: Target,
        series: &[u8],
        series_hash: Option<u64>,
        delta: i64,
        count: u64,
        (minute, now_unix_secs): (Result<Minute, DropReason>, i64),
    ) -> Result<(), DropReason> {
        let minute = match minute {
            Ok(minute) => minute,
            Err(reason) => {
                stripe.record_dropped(reason, count, i128::from(delta));
                return Err(reason);
            }
        };
        let key = RowKeyRef {
            family: target.family,
            slot: Slot::Both(minute),
            series,
        };
        stripe.record_many(
            key,
            series_hash,
            target.width,
            target.column,
            delta,
            count,
            now_unix_secs,
        )
    }
}

/// The delta of a line's values: the lone integer as is at full rate (the usual case),
/// else every value scaled by the rate and summed (see [`scale`](aggregate::scale)).
fn scale<'a>(
    stripe: &mut Stripe<'_>,
    single_int: Option<i64>,
    values: impl FnOnce() -> line::Values<'a>,
    rate: f64,
) -> Result<i128, InvalidReason> {
    match single_int {
        Some(value) if rate == 1.0 => Ok(i128::from(value)),
        _ => scale::scale_values(values(), rate, stripe.rng()).ok_or(InvalidReason::BadValue),
    }
}

/// The receive time of a packet, and the minute its lines without a client timestamp
/// belong to (resolved once per packet).
struct Now {
    unix_secs: i64,
    minute: Result<Minute, DropReason>,
}

#[cfg(test)]
mod tests;
