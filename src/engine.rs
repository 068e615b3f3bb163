//! The engine: families plus the aggregator. Turns one increment (from a line or an
//! in-process call) into a pending delta, counting every outcome.

use std::cell::RefCell;

use crate::aggregate::{self, Aggregator, DropReason, Limits, RowKeyRef, Slot};
use crate::config::{Config, ConfigError};
use crate::family::{Families, TagSet, Target, Unplaced};

thread_local! {
    /// Reused series-key buffer: encoding a key allocates only when a new row is kept.
    static SERIES: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Why an in-process increment was not kept. It is counted either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The increment cannot be placed (missing key tag, key too long).
    #[error("invalid increment: {0:?}")]
    Invalid(Unplaced),
    /// A limit dropped it.
    #[error("increment dropped: {}", .0.as_str())]
    Dropped(DropReason),
}

/// Families and the aggregator, shared by receivers, the in-process API and the flusher.
pub struct Engine {
    families: Families,
    aggregator: Aggregator,
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
                Err(Unplaced::Unconfigured) => {
                    self.aggregator
                        .stripe()
                        .record_dropped(DropReason::Unconfigured, delta);
                    return Err(RecordError::Dropped(DropReason::Unconfigured));
                }
                Err(other) => return Err(RecordError::Invalid(other)),
            };
            self.record_resolved(target, series, delta, now_unix_secs, at)
        })
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
        let mut stripe = self.aggregator.stripe();
        let minute = match aggregate::minute_for(now_unix_secs, at, self.aggregator.limits()) {
            Ok(minute) => minute,
            Err(reason) => {
                stripe.record_dropped(reason, delta);
                return Err(RecordError::Dropped(reason));
            }
        };
        let key = RowKeyRef {
            family: target.family,
            slot: Slot::Both(minute),
            series,
        };
        stripe
            .record(key, target.width, target.column, delta)
            .map_err(RecordError::Dropped)
    }
}
