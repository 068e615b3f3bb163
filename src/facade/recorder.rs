//! The `metrics::Recorder` implementation and its registry of placed counters.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ::metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, SharedString, Unit};
use parking_lot::RwLock;

use super::handles::{Ignored, Placed};
use crate::engine::Engine;
use crate::line::IgnoredKind;

/// Counters by key, each placed once. `Key`'s hash is computed when the key is built
/// (at compile time for literal keys) and `Hash` writes only that, so a look-up hashes
/// one `u64`.
#[allow(clippy::mutable_key_type)] // `Key`'s hash ignores its interior atomics.
type Counters = hashbrown::HashMap<Key, Arc<Placed>, foldhash::fast::RandomState>;

/// A [`metrics::Recorder`](::metrics::Recorder) over a countersink engine: counters
/// become increments, gauges and histograms are counted as ignored.
///
/// Build it with [`Builder::build`](super::Builder::build) (then install it globally with
/// `metrics::set_global_recorder`, or for a scope with `metrics::with_local_recorder`),
/// or let [`install`](super::install) do both. Clones share one registry.
#[derive(Clone)]
pub struct FacadeRecorder {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Arc<Engine>,
    counters: RwLock<Counters>,
    max_keys: usize,
    /// Set once the registry is full, so that the warning is logged once.
    full: AtomicBool,
    gauges: Arc<Ignored>,
    histograms: Arc<Ignored>,
}

impl FacadeRecorder {
    pub(crate) fn new(engine: Arc<Engine>, max_keys: usize) -> FacadeRecorder {
        FacadeRecorder {
            inner: Arc::new(Inner {
                counters: RwLock::new(Counters::default()),
                max_keys,
                full: AtomicBool::new(false),
                gauges: Arc::new(Ignored::new(engine.clone(), IgnoredKind::Gauge)),
                histograms: Arc::new(Ignored::new(engine.clone(), IgnoredKind::Histogram)),
                engine,
            }),
        }
    }

    /// The engine increments go to.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.inner.engine
    }

    /// Counter keys registered and kept (at most the builder's `max_keys`).
    pub fn registered_keys(&self) -> usize {
        self.inner.counters.read().len()
    }

    /// The counter of `key`: from the registry, or placed now and kept while there is
    /// room. Placing happens outside the lock; two threads racing to register one key
    /// both place it, and the first one kept wins.
    fn counter(&self, key: &Key) -> Arc<Placed> {
        let inner = &*self.inner;
        if let Some(placed) = inner.counters.read().get(key) {
            return placed.clone();
        }
        let placed = Arc::new(Placed::new(inner.engine.clone(), key));
        let mut counters = inner.counters.write();
        if let Some(kept) = counters.get(key) {
            return kept.clone();
        }
        if counters.len() >= inner.max_keys {
            drop(counters);
            if !inner.full.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    max_keys = inner.max_keys,
                    "metrics facade: the counter registry is full; counters with new keys still count, but each registration places its key again"
                );
            }
            return placed;
        }
        counters.insert(key.to_retained(), placed.clone());
        placed
    }
}

impl ::metrics::Recorder for FacadeRecorder {
    /// Nothing to keep: countersink's tables have no place for units or descriptions.
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    /// Nothing to keep (gauges are not counted).
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    /// Nothing to keep (histograms are not counted).
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.counter(key))
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.inner.gauges.clone())
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.inner.histograms.clone())
    }
}
