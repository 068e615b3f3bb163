//! The `metrics::Recorder` implementation: a thread's own handles first, then the shared
//! registry, then placing the key.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ::metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, SharedString, Unit};

use super::handles::{Ignored, Placed};
use super::local;
use super::registry::Registry;
use crate::engine::Engine;
use crate::line::IgnoredKind;

/// Identities of recorders in the per-thread handle tables (0 is none).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

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
    id: u64,
    engine: Arc<Engine>,
    registry: Registry,
    gauges: Arc<Ignored>,
    histograms: Arc<Ignored>,
}

impl FacadeRecorder {
    pub(crate) fn new(engine: Arc<Engine>, max_keys: usize) -> FacadeRecorder {
        FacadeRecorder {
            inner: Arc::new(Inner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                registry: Registry::new(max_keys),
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

    /// Counter keys placed and kept (at most the builder's `max_keys`).
    pub fn registered_keys(&self) -> usize {
        self.inner.registry.len()
    }
}

impl ::metrics::Recorder for FacadeRecorder {
    /// Nothing to keep: countersink's tables have no place for units or descriptions.
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    /// Nothing to keep (gauges are not counted).
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    /// Nothing to keep (histograms are not counted).
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    #[inline]
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let inner = &*self.inner;
        let max_keys = inner.registry.max_keys();
        if let Some(counter) = local::get(inner.id, key, max_keys) {
            return counter;
        }
        let placed = inner
            .registry
            .get_or_place(key, || Placed::new(inner.engine.clone(), key));
        local::keep(inner.id, placed, max_keys)
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.inner.gauges.clone())
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.inner.histograms.clone())
    }
}
