//! A writer whose flushes feed the key index, as the sidecar's do, with time passed in.

use std::sync::Arc;
use std::time::Duration;

use countersink::config::Config;
use countersink::engine::Engine;
use countersink::flush::{FlushReport, Flusher};
use countersink::ops::keyindex::KeyIndex;
use countersink::sink::cql::CqlSink;
use countersink::telemetry::OperationsMetrics;

/// Engine + CQL sink + flusher + key index.
pub(crate) struct IndexedWriter {
    pub(crate) engine: Arc<Engine>,
    pub(crate) flusher: Flusher<CqlSink>,
    index: KeyIndex,
    _stop: tokio::sync::watch::Sender<Option<std::time::Instant>>,
}

impl IndexedWriter {
    pub(crate) async fn start(config: &Config) -> IndexedWriter {
        let engine = Arc::new(Engine::with_seed(config, Some(5)).unwrap());
        let sink = CqlSink::connect(&config.store, engine.families())
            .await
            .unwrap();
        let index = KeyIndex::new(config, engine.families(), OperationsMetrics::default());
        index.set_session(sink.session().clone());
        let mut flusher = Flusher::open(engine.clone(), Arc::new(sink), config).unwrap();
        flusher.observe(Arc::new(index.clone()));
        let (stop, stopped) = tokio::sync::watch::channel(None);
        tokio::spawn(index.clone().run(stopped));
        IndexedWriter {
            engine,
            flusher,
            index,
            _stop: stop,
        }
    }

    pub(crate) fn incr(&self, name: &str, tags: &[(&str, &str)], delta: i64, now: i64) {
        self.engine.record(name, tags, delta, now, None).unwrap();
    }

    /// One flush, every write applied; then waits until the key index holds its keys.
    pub(crate) async fn flush(&mut self) -> FlushReport {
        let report = self.flusher.flush_now().await;
        assert_eq!(report.applied, report.writes, "{report:?}");
        for _ in 0..400 {
            if self.index.pending() == 0 {
                return report;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the key index never caught up");
    }
}
