//! The engine: families plus the aggregator. Turns one increment (from a line or an
//! in-process call) into a pending delta, counting every outcome.

use std::cell::RefCell;

use crate::aggregate::scale;
use crate::aggregate::{self, Aggregator, DropReason, Limits, RowKeyRef, Slot, Stripe, Transport};
use crate::bucket::Minute;
use crate::config::{Config, ConfigError};
use crate::family::{Families, IndexedLine, TagSet, Target, Unplaced};
use crate::line::{self, CounterLine, InvalidReason, LineLimits, LineResult, TagSpans};

thread_local! {
    /// Reused series-key buffer: encoding a key allocates only when a new row is kept.
    static SERIES: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// Reused tag index of the line being ingested (see [`line::TagSpans`]).
    static SPANS: RefCell<TagSpans> = RefCell::new(TagSpans::default());
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

/// Families and the aggregator, shared by receivers, the in-process API and the flusher.
pub struct Engine {
    families: Families,
    aggregator: Aggregator,
    line_limits: LineLimits,
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
            aggregator: Aggregator::new(limits, aggregate::default_stripes(), seed),
            line_limits: LineLimits {
                max_line_bytes: config.limits.max_line_bytes,
                max_tags: config.limits.max_tags,
            },
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

    /// Parses and aggregates every line of one datagram (or stream message) received
    /// at `now_unix_secs`. Takes the calling thread's stripe once for the whole packet;
    /// each line is counted as received and then as invalid, ignored, accepted or
    /// dropped. Never fails: bad lines are counted and skipped.
    pub fn ingest_packet(&self, packet: &[u8], transport: Transport, now_unix_secs: i64) {
        let mut stripe = self.aggregator.stripe();
        // Lines without a client timestamp (nearly all) share the packet's minute.
        let now = Now {
            unix_secs: now_unix_secs,
            minute: aggregate::minute_for(now_unix_secs, None, self.aggregator.limits()),
        };
        // Validating the whole packet as UTF-8 at once costs a fraction of doing it line by
        // line; a packet that is not valid as a whole is validated line by line, so one bad
        // line does not spoil its neighbours.
        let text = std::str::from_utf8(packet).ok();
        SERIES.with_borrow_mut(|series| {
            SPANS.with_borrow_mut(|spans| {
                for raw in line::split_lines(packet) {
                    stripe.counters().count_line(transport);
                    // Lines end at ASCII bytes, so each is valid UTF-8 if the packet is.
                    let line_text = text.and_then(|text| {
                        let start = raw.as_ptr() as usize - packet.as_ptr() as usize;
                        text.get(start..start + raw.len())
                    });
                    match line::parse_line_indexed(raw, line_text, &self.line_limits, spans) {
                        LineResult::Counter(counter) => {
                            let line = IndexedLine {
                                line: &counter,
                                spans,
                            };
                            if let Err(reason) =
                                self.ingest_counter(&mut stripe, &line, series, &now)
                            {
                                stripe.counters().count_invalid(reason);
                            }
                        }
                        LineResult::Ignored(kind) => stripe.counters().count_ignored(kind),
                        LineResult::Invalid(reason) => stripe.counters().count_invalid(reason),
                    }
                }
            })
        });
    }

    /// One counter line: scale its values, find its row, add. Errors are invalid-line
    /// reasons; drops are counted inside.
    fn ingest_counter(
        &self,
        stripe: &mut Stripe<'_>,
        line: &IndexedLine<'_, '_>,
        series: &mut Vec<u8>,
        now: &Now,
    ) -> Result<(), InvalidReason> {
        let counter: &CounterLine<'_> = line.line;
        // Every value of a multi-value line is one increment; they share the row, so they
        // are summed first and added once. A line whose values cannot be scaled into an
        // integer is invalid as a whole, so a line is never half counted.
        let sum = match counter.single_int() {
            Some(value) if counter.sample_rate() == 1.0 => i128::from(value),
            _ => scale::scale_values(counter.values(), counter.sample_rate(), stripe.rng())
                .ok_or(InvalidReason::BadValue)?,
        };
        let count = counter.value_count() as u64;
        let target = match self.families.resolve(counter.name(), line, series) {
            Ok(target) => target,
            Err(unplaced) => {
                return match unplaced.invalid_reason() {
                    Some(reason) => Err(reason),
                    None => {
                        stripe.record_dropped(DropReason::Unconfigured, count, sum);
                        Ok(())
                    }
                };
            }
        };
        let Ok(delta) = i64::try_from(sum) else {
            stripe.record_dropped(DropReason::Overflow, count, sum);
            return Ok(());
        };
        let minute = match counter.timestamp() {
            None => now.minute,
            at => aggregate::minute_for(now.unix_secs, at, self.aggregator.limits()),
        };
        let _ = self.add(stripe, target, series, delta, count, minute);
        Ok(())
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
        SERIES.with_borrow_mut(|series| {
            let target = match self.families.resolve(name, tags, series) {
                Ok(target) => target,
                Err(unplaced) => return Err(self.unplaced(unplaced, delta)),
            };
            self.record_resolved(target, series, delta, now_unix_secs, at)
        })
    }

    /// Counts an increment that could not be placed, and says why.
    pub(crate) fn unplaced(&self, unplaced: Unplaced, delta: i64) -> RecordError {
        let mut stripe = self.aggregator.stripe();
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

    /// Adds `delta` to a target whose series key is already encoded.
    pub(crate) fn record_resolved(
        &self,
        target: Target,
        series: &[u8],
        delta: i64,
        now_unix_secs: i64,
        at: Option<i64>,
    ) -> Result<(), RecordError> {
        let minute = aggregate::minute_for(now_unix_secs, at, self.aggregator.limits());
        let mut stripe = self.aggregator.stripe();
        self.add(&mut stripe, target, series, delta, 1, minute)
            .map_err(RecordError::Dropped)
    }

    /// Adds to the row of `target` and `series` in `minute`, or counts the drop when the
    /// minute could not be had (a client timestamp outside the window).
    fn add(
        &self,
        stripe: &mut Stripe<'_>,
        target: Target,
        series: &[u8],
        delta: i64,
        count: u64,
        minute: Result<Minute, DropReason>,
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
        stripe.record_many(key, target.width, target.column, delta, count)
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
