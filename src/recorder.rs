//! The in-process API: a cheap-to-clone handle that Rust services call directly.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use countersink::{Config, Recorder};
//!
//! let config = Config::from_file("countersink.toml".as_ref())?;
//! let recorder = Recorder::connect(&config).await?; // checks the tables, prepares
//! recorder.incr("page.views", &[("page_id", "home")], 1)?;
//! recorder.shutdown().await; // final flush: never skip it
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::bucket::Day;
use crate::config::Config;
use crate::engine::{self, Engine, RecordError};
use crate::epoch::EpochRegistry;
use crate::family::Target;
use crate::flush::{FlushObserver, FlushReport};
use crate::ops::keyindex::KeyIndex;
use crate::ops::read::{self, ReadError, Reader};
use crate::ops::read_cache::CachedReader;
use crate::pipeline::{Pipeline, StartError};
use crate::sink::Sink;
use crate::telemetry::{Accounting, OperationsMetrics};
use crate::vocabulary::{FamilyId, Granularity};

/// The key index writer's stop signal (the instant its drain ends) and task.
type IndexTask = (
    tokio::sync::watch::Sender<Option<std::time::Instant>>,
    tokio::task::JoinHandle<()>,
);

/// A background task and its stop signal.
type Task = (
    tokio::sync::watch::Sender<bool>,
    tokio::task::JoinHandle<()>,
);

/// Recorders dropped without `shutdown()` in this process.
static DROPPED_WITHOUT_SHUTDOWN: AtomicU64 = AtomicU64::new(0);

/// How many recorders were dropped without calling `shutdown()` (each also logged a
/// warning). Their flush task still ran the final flush, if the runtime lived long
/// enough.
pub fn dropped_without_shutdown() -> u64 {
    DROPPED_WITHOUT_SHUTDOWN.load(Ordering::Relaxed)
}

/// Records counter increments in-process and flushes them in the background.
///
/// Clones share one buffer and one flush task. Call [`Recorder::shutdown`] before the
/// process exits: it runs the final flush. Dropping the last clone without it is
/// counted ([`dropped_without_shutdown`]) and logged, and the flush task is told to do
/// its final flush on its own — but nothing then waits for it.
#[derive(Clone)]
pub struct Recorder {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Arc<Engine>,
    /// The read path, for recorders connected to a store.
    reader: Option<Arc<CachedReader>>,
    /// The epoch registry, when a family has an epoch column (connected recorders).
    epochs: Option<Arc<EpochRegistry>>,
    /// The key index writer's stop signal (the instant its drain ends) and task, when
    /// `key_index.enabled`.
    key_index: Mutex<Option<IndexTask>>,
    /// `flush.shutdown_deadline`: the key index's drain ends within it too.
    shutdown_deadline: std::time::Duration,
    pipeline: tokio::sync::Mutex<Pipeline>,
    /// The epoch registry's refresh task.
    epoch_task: Mutex<Option<Task>>,
    /// Set by `shutdown()`; checked by `Drop`.
    shut_down: AtomicBool,
    /// The pipeline's shutdown trigger, reachable from `Drop` without the async lock.
    stop: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.shut_down.load(Ordering::Acquire) {
            return;
        }
        DROPPED_WITHOUT_SHUTDOWN.fetch_add(1, Ordering::Relaxed);
        let rows = self.engine.aggregator().pending_rows();
        tracing::warn!(
            pending_rows = rows,
            "Recorder dropped without shutdown(); its final flush runs in the background and nothing waits for it. Call `recorder.shutdown().await` before exiting."
        );
        if let Some(stop) = self.stop.lock().take() {
            stop();
        }
    }
}

impl Recorder {
    /// Starts a recorder that flushes into `sink` (opening the state directory and
    /// finishing what a killed run left unfinished; the spill is replayed by the flushes). Must be called inside a tokio runtime.
    pub async fn start<S: Sink>(config: &Config, sink: S) -> Result<Recorder, StartError> {
        Self::start_with(Arc::new(Engine::new(config)?), config, sink).await
    }

    /// Connects to the cluster of `config.store` (checking every configured table), and
    /// starts a recorder that writes to it. The usual way to embed countersink.
    pub async fn connect(config: &Config) -> Result<Recorder, StartError> {
        let engine = Arc::new(Engine::new(config)?);
        let sink = crate::sink::cql::CqlSink::connect(&config.store, engine.families()).await?;
        let reader = CachedReader::new(Reader::new(sink.session().clone()), &config.read);
        let key_index = config.key_index.enabled.then(|| {
            let index = KeyIndex::new(config, engine.families(), OperationsMetrics::default());
            index.set_session(sink.session().clone());
            index
        });
        let epochs = EpochRegistry::new(
            config,
            engine.families(),
            &OperationsMetrics::default(),
            engine::now_unix_secs(),
        );
        let epoch_task = epochs.as_ref().map(|registry| {
            let (stop, stopped) = tokio::sync::watch::channel(false);
            let task = tokio::spawn(registry.clone().run(
                sink.session().clone(),
                engine.clone(),
                stopped,
            ));
            (stop, task)
        });
        Self::assemble(
            engine,
            config,
            sink,
            Some(Arc::new(reader)),
            key_index,
            epochs.map(|e| (e, epoch_task)),
        )
        .await
    }

    /// The same, with an engine built by the caller (e.g. with a fixed rounding seed).
    pub async fn start_with<S: Sink>(
        engine: Arc<Engine>,
        config: &Config,
        sink: S,
    ) -> Result<Recorder, StartError> {
        Self::assemble(engine, config, sink, None, None, None).await
    }

    async fn assemble<S: Sink>(
        engine: Arc<Engine>,
        config: &Config,
        sink: S,
        reader: Option<Arc<CachedReader>>,
        key_index: Option<KeyIndex>,
        epochs: Option<(Arc<EpochRegistry>, Option<Task>)>,
    ) -> Result<Recorder, StartError> {
        let observers: Vec<Arc<dyn FlushObserver>> = key_index
            .iter()
            .map(|index| Arc::new(index.clone()) as Arc<dyn FlushObserver>)
            .collect();
        let (epochs, epoch_task) = match epochs {
            Some((registry, task)) => (Some(registry), task),
            None => (None, None),
        };
        let pipeline =
            Pipeline::start_placed(engine.clone(), config, sink, observers, epochs.clone()).await?;
        let key_index = key_index.map(|index| {
            let (stop, stopped) = tokio::sync::watch::channel(None);
            (stop, tokio::spawn(index.run(stopped)))
        });
        let stop_handle = pipeline_stopper(&pipeline);
        Ok(Recorder {
            inner: Arc::new(Inner {
                engine,
                epochs,
                epoch_task: Mutex::new(epoch_task),
                reader,
                key_index: Mutex::new(key_index),
                shutdown_deadline: config.flush.shutdown_deadline,
                pipeline: tokio::sync::Mutex::new(pipeline),
                shut_down: AtomicBool::new(false),
                stop: Mutex::new(Some(stop_handle)),
            }),
        })
    }

    /// Adds `delta` to counter `name` with `tags`, now. Counters whose name belongs to a
    /// configured family take their key from the tags; the others go to the generic
    /// tables keyed by name and canonical tags. Errors are also counted in metrics.
    ///
    /// "Now" is read from a coarse clock ([`engine::now_unix_secs`]): an increment made
    /// in the first few milliseconds of a minute may be counted in the minute before.
    ///
    /// A name or tag a counter line could not carry (an empty name, a `:` or `|` in it, a
    /// tag key with `:`, `,` or `|`, a value with `,` or `|`, a control character) is
    /// refused as [`RecordError::Invalid`] and counted: the generic family's canonical tag
    /// string could not tell such tag sets apart.
    pub fn incr(&self, name: &str, tags: &[(&str, &str)], delta: i64) -> Result<(), RecordError> {
        self.check(name, tags)?;
        self.inner
            .engine
            .record(name, tags, delta, engine::now_unix_secs(), None)
    }

    /// Like [`Recorder::incr`], for an event that happened at `unix_secs` (inside the
    /// configured timestamp window).
    pub fn incr_at(
        &self,
        name: &str,
        tags: &[(&str, &str)],
        delta: i64,
        unix_secs: i64,
    ) -> Result<(), RecordError> {
        self.check(name, tags)?;
        self.inner
            .engine
            .record(name, tags, delta, engine::now_unix_secs(), Some(unix_secs))
    }

    /// Refuses (and counts) a name or tags a counter line could not carry.
    fn check(&self, name: &str, tags: &[(&str, &str)]) -> Result<(), RecordError> {
        crate::line::check_counter(name, tags).map_err(|reason| self.inner.engine.refuse(reason))
    }

    /// A typed handle on one counter column of a configured family: no name look-up and
    /// no tag parsing per call.
    pub fn column(&self, family: &str, column: &str) -> Option<ColumnHandle> {
        let def = self.inner.engine.families().by_name(family)?;
        let index = def.columns.iter().position(|c| c == column)?;
        Some(ColumnHandle {
            recorder: self.clone(),
            target: Target {
                family: def.id,
                column: index,
                width: def.width(),
            },
        })
    }

    /// The day total of counter `name` with `tags` (resolved as an increment with them
    /// lands), every shard summed, at `read.consistency` (ONE by default: a display
    /// read), served from a cache for `read.cache_ttl` (5 s). Only a recorder from
    /// [`Recorder::connect`] can read.
    pub async fn read_day(
        &self,
        name: &str,
        tags: &[(&str, &str)],
        day: Day,
    ) -> Result<i64, ReadError> {
        self.read_day_in_epoch(name, tags, day, None).await
    }

    /// [`Recorder::read_day`] in one epoch of a family with an epoch column; `None` reads
    /// the epoch in force at the end of the day (now, for today).
    pub async fn read_day_in_epoch(
        &self,
        name: &str,
        tags: &[(&str, &str)],
        day: Day,
        epoch: Option<i32>,
    ) -> Result<i64, ReadError> {
        let reader = self.inner.reader.as_ref().ok_or(ReadError::NoStore)?;
        let families = self.inner.engine.families();
        let counter = self.in_epoch(read::resolve(families, name, tags)?, day, epoch)?;
        reader.day_total(families, &counter, day).await
    }

    /// The counter, in `epoch` or in the one a read of `day` shows by default.
    fn in_epoch(
        &self,
        mut counter: read::CounterRef,
        day: Day,
        epoch: Option<i32>,
    ) -> Result<read::CounterRef, ReadError> {
        let families = self.inner.engine.families();
        let Some(family) = families.by_name(&counter.family) else {
            return Ok(counter);
        };
        if family.epoch_column.is_none() {
            return Ok(counter);
        }
        counter.epoch = match (epoch, &self.inner.epochs) {
            (Some(epoch), _) => Some(epoch),
            (None, Some(registry)) => {
                let series = crate::series::encode(counter.keys.iter().map(String::as_str));
                Some(
                    registry
                        .read_epoch(family.id, &series, day, engine::now_unix_secs())
                        .ok_or_else(|| ReadError::Store {
                            statement: "the epoch registry".into(),
                            error: "not read yet: the current epoch is unknown".into(),
                        })?,
                )
            }
            (None, None) => None,
        };
        Ok(counter)
    }

    /// The minute series (minute of the day → value) of counter `name` with `tags` on
    /// `day`, as [`Recorder::read_day`] reads.
    pub async fn read_minutes(
        &self,
        name: &str,
        tags: &[(&str, &str)],
        day: Day,
    ) -> Result<Arc<BTreeMap<i64, i64>>, ReadError> {
        self.read_series(name, tags, Granularity::Minute, day).await
    }

    /// The hour series (hour of the day → value) of counter `name` with `tags` on `day`,
    /// from its family's hour table, as [`Recorder::read_day`] reads.
    pub async fn read_hours(
        &self,
        name: &str,
        tags: &[(&str, &str)],
        day: Day,
    ) -> Result<Arc<BTreeMap<i64, i64>>, ReadError> {
        self.read_series(name, tags, Granularity::Hour, day).await
    }

    /// The all-time total of counter `name` with `tags`, from its family's total table,
    /// as [`Recorder::read_day`] reads.
    pub async fn read_total(&self, name: &str, tags: &[(&str, &str)]) -> Result<i64, ReadError> {
        let series = self
            .read_series(name, tags, Granularity::Total, Day(0))
            .await?;
        Ok(read::value_at(&series, Granularity::Total, Day(0)))
    }

    /// Counter `name` with `tags` in its family's `kind` table on `day` (in the epoch a
    /// read of `day` shows, for a family with an epoch column), through the cache.
    async fn read_series(
        &self,
        name: &str,
        tags: &[(&str, &str)],
        kind: Granularity,
        day: Day,
    ) -> Result<Arc<BTreeMap<i64, i64>>, ReadError> {
        let reader = self.inner.reader.as_ref().ok_or(ReadError::NoStore)?;
        let families = self.inner.engine.families();
        let counter = self.in_epoch(read::resolve(families, name, tags)?, day, None)?;
        reader.series(families, &counter, kind, day).await
    }

    /// The engine behind this recorder.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.inner.engine
    }

    /// The accounting identity's stages now.
    pub async fn accounting(&self) -> Accounting {
        self.inner.pipeline.lock().await.accounting()
    }

    /// Stops recording and runs the final flush (with `flush.shutdown_deadline`); what
    /// cannot be sent is spilled for the next start. Later increments are refused and
    /// counted (`after_shutdown`). Returns the final flush's report, or `None` if another
    /// clone already shut down.
    pub async fn shutdown(&self) -> Option<FlushReport> {
        self.inner.shut_down.store(true, Ordering::Release);
        self.inner.stop.lock().take();
        let requested = std::time::Instant::now();
        let report = self.inner.pipeline.lock().await.shutdown().await;
        // The key index writes what the final flush queued, within the same deadline.
        let key_index = self.inner.key_index.lock().take();
        if let Some((stop, task)) = key_index {
            let _ = stop.send(Some(crate::ops::keyindex::drain_end(
                requested,
                self.inner.shutdown_deadline,
            )));
            let _ = task.await;
        }
        let epoch_task = self.inner.epoch_task.lock().take();
        if let Some((stop, task)) = epoch_task {
            let _ = stop.send(true);
            let _ = task.await;
        }
        report
    }
}

fn pipeline_stopper(pipeline: &Pipeline) -> Box<dyn FnOnce() + Send> {
    let trigger = pipeline.shutdown_trigger();
    Box::new(trigger)
}

/// A typed handle on one counter column of a configured family.
#[derive(Clone)]
pub struct ColumnHandle {
    recorder: Recorder,
    target: Target,
}

impl ColumnHandle {
    /// Adds `delta` to the row keyed by `key` (the family's key column values, in order).
    pub fn incr(&self, key: &[&str], delta: i64) -> Result<(), RecordError> {
        self.recorder.inner.engine.record_key(
            self.target,
            key,
            delta,
            engine::now_unix_secs(),
            None,
        )
    }

    /// The family this handle writes to.
    pub fn family(&self) -> FamilyId {
        self.target.family
    }
}
