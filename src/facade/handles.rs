//! What a registered metric does when it is updated: a counter adds to the row its key
//! was placed in at registration; everything else is counted as ignored.

use std::sync::Arc;

use ::metrics::{CounterFn, GaugeFn, HistogramFn, Key};

use crate::aggregate::{self, RowKeyRef, Slot};
use crate::engine::{self, Engine};
use crate::family::Target;
use crate::line::{self, IgnoredKind, InvalidReason};
use crate::vocabulary::DropReason;

/// Where a counter's increments go, decided once when its key is registered.
#[derive(Debug)]
pub(crate) enum Place {
    /// A row of a family: its column, its series key and the series' hash, so that an
    /// increment neither resolves the family, nor canonicalises tags, nor hashes bytes.
    Row {
        target: Target,
        series: Box<[u8]>,
        series_hash: u64,
    },
    /// A key no row can take: every increment is counted invalid with this reason, as
    /// `Recorder::incr` counts an invalid call.
    Invalid(InvalidReason),
    /// No configured family takes the name and the generic family is disabled: every
    /// increment is accepted and dropped as `unconfigured`.
    Unconfigured,
}

impl Place {
    /// Places the counter `key`: exactly where its DogStatsD line
    /// (`name:1|c|#label:value,...`) lands, and refused for the reasons that line would
    /// be refused for (an empty or unrepresentable name or label, a missing key label, a
    /// key over `limits.max_key_bytes`).
    ///
    /// A label with an empty value is a tag without value (`("canary", "")` is `#canary`),
    /// as in `Recorder::incr`.
    pub(crate) fn of(engine: &Engine, key: &Key) -> Place {
        let pairs: Vec<(&str, &str)> = key.labels().map(|l| (l.key(), l.value())).collect();
        if let Err(reason) = line::check_counter(key.name(), &pairs) {
            return Place::Invalid(reason);
        }
        let mut series = Vec::new();
        match engine
            .families()
            .resolve(key.name(), pairs.as_slice(), &mut series)
        {
            Ok(target) => Place::Row {
                target,
                series_hash: aggregate::series_hash(engine.aggregator().hasher(), &series),
                series: series.into_boxed_slice(),
            },
            Err(unplaced) => match unplaced.invalid_reason() {
                Some(reason) => Place::Invalid(reason),
                None => Place::Unconfigured,
            },
        }
    }
}

/// A registered counter: its key, the engine and where its increments go.
pub(crate) struct Placed {
    /// The key, retained (cheap to clone, and compared by pointer when it was built
    /// from static parts: see [`same_key`]).
    key: Key,
    engine: Arc<Engine>,
    place: Place,
}

impl Placed {
    pub(crate) fn new(engine: Arc<Engine>, key: &Key) -> Placed {
        Placed {
            place: Place::of(&engine, key),
            key: key.to_retained(),
            engine,
        }
    }

    /// The key this counter was registered under.
    pub(crate) fn key(&self) -> &Key {
        &self.key
    }
}

/// Whether two keys are equal: by [`same_parts`] when it can tell, else by comparing
/// the name and every label (`Key`'s own equality: about 170 instructions for a name and
/// two labels).
#[inline]
pub(crate) fn same_key(kept: &Key, probe: &Key) -> bool {
    kept.get_hash() == probe.get_hash() && (same_parts(kept, probe) || kept == probe)
}

/// Whether two keys point at the same name and the same label slice, so are equal
/// without comparing a byte. `counter!` with literal labels passes the same static key
/// at every call, and a retained copy of a static or shared key points where it does.
/// (A pointer is compared only with a key that is alive, so it cannot be a reused
/// address.)
#[inline]
pub(crate) fn same_parts(a: &Key, b: &Key) -> bool {
    std::ptr::eq(a.name(), b.name()) && std::ptr::eq(a.labels().as_slice(), b.labels().as_slice())
}

impl CounterFn for Placed {
    /// What `Recorder::incr` does after its look-ups: read the coarse clock, lock this
    /// thread's stripe, add to the row (counting the outcome).
    #[inline]
    fn increment(&self, value: u64) {
        let aggregator = self.engine.aggregator();
        // A line's integer must fit an i64 too; a line checks it after the name and
        // before the tags and the placement, so this reason comes in that order.
        let Ok(delta) = i64::try_from(value) else {
            let reason = match self.place {
                Place::Invalid(reason @ (InvalidReason::NoName | InvalidReason::BadName)) => reason,
                _ => InvalidReason::BadValue,
            };
            aggregator.stripe().counters().count_invalid(reason);
            return;
        };
        match &self.place {
            Place::Row {
                target,
                series,
                series_hash,
            } => {
                let now = engine::now_unix_secs();
                let minute = aggregate::minute_for(now, None, &aggregator.limits());
                let mut stripe = aggregator.stripe();
                match minute {
                    Ok(minute) => {
                        let key = RowKeyRef {
                            family: target.family,
                            slot: Slot::Both(minute),
                            series,
                        };
                        // A drop (a limit, an overflow, after shutdown) is counted inside.
                        let _ = stripe.record_many(
                            key,
                            Some(*series_hash),
                            target.width,
                            target.column,
                            delta,
                            1,
                            now,
                        );
                    }
                    Err(reason) => stripe.record_dropped(reason, 1, i128::from(delta)),
                }
            }
            Place::Invalid(reason) => aggregator.stripe().counters().count_invalid(*reason),
            Place::Unconfigured => {
                aggregator
                    .stripe()
                    .record_dropped(DropReason::Unconfigured, 1, i128::from(delta))
            }
        }
    }

    /// A value to set, not a delta: nothing to add to a counter column. Counted.
    fn absolute(&self, _value: u64) {
        count_ignored(&self.engine, IgnoredKind::CounterAbsolute, 1);
    }
}

/// One thread's handle on a placed counter: the same increments, behind an `Arc` of its
/// own, so that threads cloning and dropping the handles of one key (every `counter!`
/// does both) do not contend on one reference count.
pub(crate) struct ThreadCounter(pub(crate) Arc<Placed>);

impl CounterFn for ThreadCounter {
    #[inline]
    fn increment(&self, value: u64) {
        self.0.increment(value);
    }

    fn absolute(&self, value: u64) {
        self.0.absolute(value);
    }
}

/// The handle of every gauge or every histogram: each update is counted as ignored, by
/// kind, and written nowhere.
pub(crate) struct Ignored {
    engine: Arc<Engine>,
    kind: IgnoredKind,
}

impl Ignored {
    pub(crate) fn new(engine: Arc<Engine>, kind: IgnoredKind) -> Ignored {
        Ignored { engine, kind }
    }
}

impl GaugeFn for Ignored {
    fn increment(&self, _value: f64) {
        count_ignored(&self.engine, self.kind, 1);
    }

    fn decrement(&self, _value: f64) {
        count_ignored(&self.engine, self.kind, 1);
    }

    fn set(&self, _value: f64) {
        count_ignored(&self.engine, self.kind, 1);
    }
}

impl HistogramFn for Ignored {
    fn record(&self, _value: f64) {
        count_ignored(&self.engine, self.kind, 1);
    }

    /// Each of the `count` values is one update, as if recorded one by one.
    fn record_many(&self, _value: f64, count: usize) {
        count_ignored(&self.engine, self.kind, count as u64);
    }
}

/// Adds `count` to `countersink_lines_ignored_total{type=kind}`, in this thread's stripe.
fn count_ignored(engine: &Engine, kind: IgnoredKind, count: u64) {
    let mut stripe = engine.aggregator().stripe();
    stripe.counters().lines_ignored[kind as usize] += count;
}
