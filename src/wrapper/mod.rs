//! The driver wrapper: [`CounterSession`] pre-aggregates the counter UPDATEs an
//! application already sends through the `scylla` driver.
//!
//! A service that increments its own counter tables with
//! `session.execute_unpaged(&prepared_update, values)` adopts countersink by wrapping its
//! session: its statements, tables and call sites stay as they are. The wrapper shares
//! the application's session (no second connection pool) and offers the methods
//! applications call, with the driver's own argument and result types.
//!
//! - [`parse`], [`recognize`]: which prepared statements are aggregated, decided once per
//!   statement from its text, the driver's metadata of its bind markers and the table's
//!   schema in the driver's cluster metadata; every other request passes through, counted
//!   by [`PassthroughReason`].
//! - [`buffer`]: pending deltas per (table, full primary key, counter column), synchronous,
//!   striped, with a row and byte budget.
//! - [`statement`]: the UPDATE each table's rows are flushed with (CQL built from the
//!   application's names, so not in `cql/`), and its values.
//! - [`flush`]: drain, one request per partition, the intent journal's group commit, the
//!   sidecar's classification and outcome classes; [`records`]: the logs of rows that did
//!   not simply apply (rows to replay go to the sidecar's spill segments,
//!   [`crate::state::spill`]); [`recovery`]: a flush a killed process did not end,
//!   finished at the next start.
//! - [`stats`]: the figures, the accounting identity and the Prometheus collector.
//!
//! A buffered execution returns at once with an empty (void) result: the write is
//! acknowledged by countersink and applied at the next flush.

pub mod buffer;
pub mod flush;
pub mod parse;
pub mod recognize;
pub mod records;
pub mod recovery;
pub mod statement;
pub mod stats;

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;
use scylla::client::session::Session;
use scylla::errors::{ExecutionError, PrepareError};
use scylla::response::query_result::QueryResult;
use scylla::serialize::batch::{BatchValues, BatchValuesIterator};
use scylla::serialize::row::{RowSerializationContext, SerializeRow};
use scylla::serialize::writers::RowWriter;
use scylla::statement::Consistency;
use scylla::statement::Statement;
use scylla::statement::batch::{Batch, BatchStatement, BatchType};
use scylla::statement::prepared::PreparedStatement;
use tokio::sync::Notify;

use crate::config::{Config, FlushConfig};
use crate::flush::schedule::{Schedule, log_backoff};
use crate::flush::shutdown::{Deadline, ShutdownHandle, ShutdownSignal, shutdown_channel};
use crate::state::{StateDir, StateError};

use self::buffer::{Buffer, Refused, RowAdd};
use self::flush::{WrapperFlushReport, WrapperFlusher};
use self::recognize::{CounterPlan, DeltaValue, Tables};
use self::stats::Counters;

pub use self::recognize::PassthroughReason;
pub use self::recovery::WrapperRecovery;
pub use self::stats::{WrapperAccounting, WrapperCollector, WrapperStats};

/// Why a [`CounterSession`] could not start.
#[derive(Debug, thiserror::Error)]
pub enum WrapperError {
    /// The state directory could not be opened (or another process holds it).
    #[error(transparent)]
    State(#[from] StateError),
    /// The wrapper's logs or spill could not be opened, or finishing the previous
    /// process's flush failed.
    #[error("cannot open the wrapper's logs in {dir}: {error}")]
    Logs {
        /// The state directory.
        dir: String,
        /// The error.
        error: std::io::Error,
    },
    /// The store did not answer the empty batch the wrapper's void result is taken from.
    #[error(
        "the store did not answer an empty batch (the wrapper's acknowledgement is a real void result of the store): {0}"
    )]
    VoidResult(Box<ExecutionError>),
}

/// What the wrapper decided for one prepared statement.
type Recognized = Arc<Result<CounterPlan, PassthroughReason>>;

/// The state every call reads.
struct Core {
    /// This session's number, naming it in the threads' plan caches.
    id: u64,
    /// Bumped whenever `prepare` records a decision: a thread's cache older than this is
    /// read again from `plans`.
    generation: AtomicU64,
    session: Arc<Session>,
    plans: RwLock<Plans>,
    tables: Arc<Tables>,
    buffer: Arc<Buffer>,
    counters: Arc<Counters>,
    /// The result of a buffered call: a void result the store returned (see
    /// [`CounterSession::new`]).
    void: QueryResult,
    /// `store.consistency`: a statement asking for another passes through.
    consistency: Consistency,
}

/// The decisions by prepared statement id.
type Plans = HashMap<Box<[u8]>, Recognized, foldhash::fast::RandomState>;

/// Numbers the sessions (see [`Core::id`]).
static NEXT_CORE: AtomicU64 = AtomicU64::new(0);

/// One thread's copy of the decisions of the session it last served: the hot path reads
/// it without touching a lock or a reference count shared with other threads.
#[derive(Default)]
struct PlanCache {
    core: u64,
    generation: u64,
    plans: Plans,
}

/// Reused buffers of the call being buffered.
#[derive(Default)]
struct Scratch {
    /// The serialized values.
    values: Vec<u8>,
    /// The row key.
    key: Vec<u8>,
    /// (column, delta) pairs.
    deltas: Vec<(usize, i64)>,
}

thread_local! {
    static PLAN_CACHE: RefCell<PlanCache> = RefCell::default();
    static SCRATCH: RefCell<Scratch> = RefCell::default();
}

/// A `scylla` session whose counter UPDATEs are pre-aggregated.
///
/// ```no_run
/// # async fn demo(session: scylla::client::session::Session, config: countersink::Config) -> Result<(), Box<dyn std::error::Error>> {
/// let session = countersink::CounterSession::new(session, &config).await?;
/// let update = session
///     .prepare("UPDATE ks.page_views SET views = views + ? WHERE page_id = ? AND day = ?")
///     .await?;
/// let day = scylla::value::CqlDate((1 << 31) + 20_787);
/// // Buffered: answered at once, applied at the next flush.
/// session.execute_unpaged(&update, (scylla::value::Counter(1), "home", day)).await?;
/// session.shutdown().await; // the final flush: never skip it
/// # Ok(()) }
/// ```
pub struct CounterSession {
    core: Arc<Core>,
    flusher: Arc<tokio::sync::Mutex<WrapperFlusher>>,
    /// Requests shutdown: its instant fixes the one deadline of every flush still running
    /// then and of the final flush.
    shutdown: ShutdownHandle,
    signal: ShutdownSignal,
    task: Option<tokio::task::JoinHandle<()>>,
    shutdown_deadline: std::time::Duration,
    recovery: WrapperRecovery,
}

impl CounterSession {
    /// Wraps `session` with `config`'s flush, store, limits and state sections (families
    /// are not used: the application's statements name the tables). Opens the state
    /// directory, sends one empty UNLOGGED BATCH (it writes nothing; its void result is
    /// what buffered calls return), and starts the flush task on the current runtime.
    pub async fn new(
        session: impl Into<Arc<Session>>,
        config: &Config,
    ) -> Result<CounterSession, WrapperError> {
        let session: Arc<Session> = session.into();
        let mut state = StateDir::open_with(&config.state, &crate::totals::Recovery)?;
        let logs_error = |state: &StateDir| {
            let dir = state.dir().display().to_string();
            move |error| WrapperError::Logs { dir, error }
        };
        // A flush the previous process did not end (the state directory made the replay
        // cursor its group consumed durable when it opened): each of its requests to one
        // home.
        let (groups, last_in_journal) = state.take_wrapper_groups();
        let recovery = recovery::recover(
            &mut state,
            &session.get_cluster_state(),
            groups,
            last_in_journal,
        )
        .map_err(logs_error(&state))?;
        if recovery != WrapperRecovery::default() {
            tracing::warn!(
                flushes = recovery.flushes,
                unknown_rows = recovery.unknown_rows,
                rejected_rows = recovery.rejected_rows,
                spilled_rows = recovery.spilled_rows,
                uncommitted_rows = recovery.uncommitted_rows,
                "Finished a flush the previous process did not end (rows in flight are logged as unknown, never re-sent)."
            );
        }
        let void = session
            .batch(&Batch::new(BatchType::Unlogged), Vec::<()>::new())
            .await
            .map_err(|error| WrapperError::VoidResult(Box::new(error)))?;
        // As the sidecar's: the rows held take three quarters of the byte limit, the
        // chunk a flush holds the last quarter.
        let chunk_bytes = config.limits.max_pending_bytes / 4;
        let buffer = Arc::new(Buffer::new(
            crate::aggregate::default_stripes(),
            config.limits.max_pending_rows,
            config.limits.max_pending_bytes - chunk_bytes,
        ));
        let tables = Arc::new(Tables::default());
        let counters = Arc::new(Counters::default());
        let flusher = WrapperFlusher::new(
            Arc::clone(&session),
            Arc::clone(&buffer),
            Arc::clone(&tables),
            Arc::clone(&counters),
            config.flush.clone(),
            config.store.clone(),
            state,
            crate::sink::cql::store::detect(&session).await.kind,
            chunk_bytes,
        );
        let flusher = Arc::new(tokio::sync::Mutex::new(flusher));
        let (shutdown, signal) = shutdown_channel();
        let early = Arc::new(Notify::new());
        buffer.set_on_pressure(Box::new({
            let early = Arc::clone(&early);
            move || early.notify_one()
        }));
        let task = tokio::spawn(flush_loop(
            Arc::clone(&flusher),
            Arc::clone(&buffer),
            signal.clone(),
            early,
            config.flush.clone(),
        ));
        Ok(CounterSession {
            core: Arc::new(Core {
                id: NEXT_CORE.fetch_add(1, Ordering::Relaxed),
                generation: AtomicU64::new(0),
                session,
                plans: RwLock::new(Plans::default()),
                tables,
                buffer,
                counters,
                void,
                consistency: crate::sink::cql::session::consistency(config.store.consistency),
            }),
            flusher,
            shutdown,
            signal,
            task: Some(task),
            shutdown_deadline: config.flush.shutdown_deadline,
            recovery,
        })
    }

    /// What starting had to finish for the previous process on this state directory (a
    /// flush it did not end).
    pub fn recovery(&self) -> &WrapperRecovery {
        &self.recovery
    }

    /// The application's session, shared.
    pub fn inner(&self) -> &Arc<Session> {
        &self.core.session
    }

    /// Prepares `statement` with the inner session and decides whether its executions
    /// are aggregated.
    pub async fn prepare(
        &self,
        statement: impl Into<Statement>,
    ) -> Result<PreparedStatement, PrepareError> {
        let prepared = self.core.session.prepare(statement).await?;
        let mut recognized = self.core.recognize(&prepared);
        if matches!(*recognized, Err(PassthroughReason::UnknownTable)) {
            // A table created after the session read the schema: read it again, once.
            if self.core.session.refresh_metadata().await.is_ok() {
                recognized = Arc::new(recognize::recognize(
                    &prepared,
                    &self.core.session.get_cluster_state(),
                    &self.core.tables,
                ));
            }
        }
        if is_final(&recognized) {
            self.core
                .plans
                .write()
                .insert(prepared.get_id().as_ref().into(), recognized);
            self.core.generation.fetch_add(1, Ordering::Release);
        }
        Ok(prepared)
    }

    /// `Session::execute_unpaged`: a recognised counter UPDATE is buffered and answered
    /// at once with an empty result; anything else goes to the store unchanged.
    pub async fn execute_unpaged(
        &self,
        prepared: &PreparedStatement,
        values: impl SerializeRow,
    ) -> Result<QueryResult, ExecutionError> {
        match self.core.buffer_execution(prepared, &values) {
            Ok(()) => Ok(self.core.void.clone()),
            Err(reason) => {
                self.core.counters.passthrough(reason);
                // Boxed: the driver's future is large, and held inline it would make every
                // buffered call's future as large (and as costly to move).
                Box::pin(self.core.session.execute_unpaged(prepared, values)).await
            }
        }
    }

    /// `Session::query_unpaged`: always to the store (only prepared statements are
    /// aggregated).
    pub async fn query_unpaged(
        &self,
        statement: impl Into<Statement>,
        values: impl SerializeRow,
    ) -> Result<QueryResult, ExecutionError> {
        let statement: Statement = statement.into();
        let reason = match parse::parse_update(&statement.contents) {
            Err(parse::Rejection::NotUpdate) => PassthroughReason::NotCounterUpdate,
            _ => PassthroughReason::Unprepared,
        };
        self.core.counters.passthrough(reason);
        self.core.session.query_unpaged(statement, values).await
    }

    /// `Session::batch`: a COUNTER BATCH of recognised prepared UPDATEs is split into its
    /// updates and buffered (all of them or none); any other batch goes to the store
    /// unchanged.
    pub async fn batch(
        &self,
        batch: &Batch,
        values: impl BatchValues,
    ) -> Result<QueryResult, ExecutionError> {
        match self.core.buffer_batch(batch, &values) {
            Ok(()) => Ok(self.core.void.clone()),
            Err(reason) => {
                self.core.counters.passthrough(reason);
                Box::pin(self.core.session.batch(batch, values)).await
            }
        }
    }

    /// Turns the intent journal off for this session's flushes: no intents, no crash
    /// recovery of them. Only for the flush benchmark's baseline (what the journal costs
    /// is measured against it); never in a product build.
    #[cfg(feature = "dev")]
    pub async fn disable_journal_for_benchmark(&self) {
        self.flusher.lock().await.disable_journal_for_benchmark();
    }

    /// Flushes now (also runs every `flush.interval` on its own). Bounded by the
    /// shutdown deadline once `shutdown()` is called, like the periodic flushes.
    ///
    /// Cancellation-safe: the flush runs on a task of its own, so dropping this future
    /// (a `select!`, a timeout) leaves it to finish and settle every row it drained.
    pub async fn flush_now(&self) -> WrapperFlushReport {
        let flusher = Arc::clone(&self.flusher);
        let mut deadline = self.deadline();
        run_to_completion(async move { flusher.lock().await.flush(&mut deadline, false).await })
            .await
    }

    /// The shutdown deadline: none until shutdown is requested, then its instant plus
    /// `flush.shutdown_deadline`, the same for every flush.
    fn deadline(&self) -> Deadline {
        Deadline::new(self.signal.clone(), self.shutdown_deadline)
    }

    /// Every figure: passthroughs by reason, buffered executions, flushed writes by
    /// outcome, pending rows, and the accounting identity.
    pub fn stats(&self) -> WrapperStats {
        self.core.counters.snapshot(&self.core.buffer)
    }

    /// The same figures for a Prometheus registry:
    /// `registry.register(Box::new(session.collector()))`.
    pub fn collector(&self) -> WrapperCollector {
        WrapperCollector::new(
            Arc::clone(&self.core.counters),
            Arc::clone(&self.core.buffer),
        )
    }

    /// The current file of one of the outcome logs the wrapper records in
    /// (`unknown.jsonl`, `rejected.jsonl`).
    pub async fn log_path(&self, log: crate::state::OutcomeLog) -> std::path::PathBuf {
        self.flusher.lock().await.log_path(log).to_path_buf()
    }

    /// Stops buffering (later calls pass through, counted as `after_shutdown`) and runs
    /// the final flush. One `flush.shutdown_deadline`, from this call, covers a flush
    /// still running and the final flush: requests in flight at it are logged unknown,
    /// those not started are spilled. Returns the final flush's report.
    ///
    /// Cancellation-safe like [`flush_now`](Self::flush_now): once called, the final
    /// flush runs to its end (within the deadline) even if this future is dropped.
    pub async fn shutdown(mut self) -> WrapperFlushReport {
        self.shutdown.request();
        let mut deadline = self.deadline();
        let periodic = self.task.take();
        let buffer = Arc::clone(&self.core.buffer);
        let flusher = Arc::clone(&self.flusher);
        run_to_completion(async move {
            if let Some(task) = periodic {
                let _ = task.await;
            }
            buffer.close();
            flusher.lock().await.flush(&mut deadline, true).await
        })
        .await
    }
}

/// Runs a flush on a task of its own and waits for its report: a flush cut off between
/// its drain and its outcomes would leave rows neither pending nor settled (lost from
/// the accounting, their requests possibly applied and never logged), so the caller's
/// cancellation must not reach it. A panic in the flush is the caller's panic.
async fn run_to_completion(
    flush: impl std::future::Future<Output = WrapperFlushReport> + Send + 'static,
) -> WrapperFlushReport {
    match tokio::spawn(flush).await {
        Ok(report) => report,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        // Aborted only when the runtime shuts down under it.
        Err(_) => WrapperFlushReport::default(),
    }
}

impl Drop for CounterSession {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let pending = self.core.buffer.pending_rows();
            if pending > 0 {
                tracing::error!(
                    pending_rows = pending,
                    "A CounterSession was dropped without shutdown(): its pending rows are lost."
                );
            }
        }
    }
}

/// Flushes on the sidecar's [`Schedule`] until shutdown is requested: every interval ±
/// jitter, backing off while the store applies nothing (a store that refuses every write
/// is not sent the whole backlog every interval), and early when the buffer crosses its
/// pressure mark (never while backing off: against a failing store it frees nothing).
/// A flush running at the request stops at the shutdown deadline.
async fn flush_loop(
    flusher: Arc<tokio::sync::Mutex<WrapperFlusher>>,
    buffer: Arc<Buffer>,
    mut signal: ShutdownSignal,
    early: Arc<Notify>,
    config: FlushConfig,
) {
    let mut deadline = Deadline::new(signal.clone(), config.shutdown_deadline);
    let mut schedule = Schedule::new(&config);
    loop {
        let next = tokio::time::sleep(schedule.next_wait(fastrand::f64()));
        tokio::pin!(next);
        loop {
            tokio::select! {
                () = &mut next => break,
                () = early.notified(), if !schedule.backing_off() => {
                    // A notification stored while backing off, or made stale by a flush
                    // since, is no reason to flush now.
                    if buffer.under_pressure() {
                        break;
                    }
                }
                _ = signal.requested() => return,
            }
        }
        let report = flusher.lock().await.flush(&mut deadline, false).await;
        let was_backing_off = schedule.backing_off();
        schedule.record(&report);
        log_backoff(&schedule, was_backing_off, &report);
        if signal.requested_at().is_some() {
            return;
        }
    }
}

impl Core {
    fn recognize(&self, prepared: &PreparedStatement) -> Recognized {
        Arc::new(recognize::recognize(
            prepared,
            &self.session.get_cluster_state(),
            &self.tables,
        ))
    }

    /// The decision for `prepared`, made on first sight if it was prepared elsewhere.
    fn plan(&self, prepared: &PreparedStatement) -> Recognized {
        if let Some(known) = self.plans.read().get(prepared.get_id().as_ref()) {
            return Arc::clone(known);
        }
        let recognized = self.recognize(prepared);
        if is_final(&recognized) {
            self.plans
                .write()
                .insert(prepared.get_id().as_ref().into(), Arc::clone(&recognized));
        }
        recognized
    }

    /// Runs `f` with the decision for `prepared`, from this thread's cache.
    fn with_plan<R>(
        &self,
        prepared: &PreparedStatement,
        f: impl FnOnce(&Result<CounterPlan, PassthroughReason>) -> R,
    ) -> R {
        PLAN_CACHE.with(|cache| {
            let mut cache = cache.borrow_mut();
            let generation = self.generation.load(Ordering::Acquire);
            if cache.core != self.id || cache.generation != generation {
                cache.plans.clear();
                cache.core = self.id;
                cache.generation = generation;
            }
            let id = prepared.get_id().as_ref();
            if !cache.plans.contains_key(id) {
                let recognized = self.plan(prepared);
                if !is_final(&recognized) {
                    return f(&recognized);
                }
                cache.plans.insert(id.into(), recognized);
            }
            match cache.plans.get(id) {
                Some(recognized) => f(recognized),
                None => f(&self.plan(prepared)),
            }
        })
    }

    fn options_allow(
        &self,
        consistency: Option<Consistency>,
        timestamp: Option<i64>,
    ) -> Result<(), PassthroughReason> {
        if timestamp.is_some() || consistency.is_some_and(|c| c != self.consistency) {
            return Err(PassthroughReason::StatementOptions);
        }
        Ok(())
    }

    fn buffer_execution(
        &self,
        prepared: &PreparedStatement,
        values: &impl SerializeRow,
    ) -> Result<(), PassthroughReason> {
        self.with_plan(prepared, |recognized| {
            let plan = recognized.as_ref().map_err(|r| *r)?;
            self.options_allow(prepared.get_consistency(), prepared.get_timestamp())?;
            SCRATCH.with(|scratch| {
                let scratch = &mut *scratch.borrow_mut();
                scratch.values.clear();
                let specs = prepared.get_variable_col_specs();
                let ctx = RowSerializationContext::from_specs(specs.as_slice());
                let mut writer = RowWriter::new(&mut scratch.values);
                values
                    .serialize(&ctx, &mut writer)
                    .map_err(|_| PassthroughReason::InvalidValues)?;
                row_of(plan, &scratch.values, &mut scratch.key, &mut scratch.deltas)?;
                self.buffer
                    .add_one(&scratch.key, plan.table.counters.len(), &scratch.deltas)
                    .map_err(refused)
            })
        })
    }

    fn buffer_batch(
        &self,
        batch: &Batch,
        values: &impl BatchValues,
    ) -> Result<(), PassthroughReason> {
        if batch.get_type() != BatchType::Counter {
            return Err(PassthroughReason::NotCounterUpdate);
        }
        self.options_allow(batch.get_consistency(), batch.get_timestamp())?;
        let mut adds = Vec::with_capacity(batch.statements.len());
        let mut iter = values.batch_values_iter();
        let mut buf = Vec::new();
        for statement in &batch.statements {
            let BatchStatement::PreparedStatement(prepared) = statement else {
                return Err(PassthroughReason::BatchUnsupported);
            };
            if prepared.get_timestamp().is_some() {
                return Err(PassthroughReason::StatementOptions);
            }
            let add = self.with_plan(prepared, |recognized| {
                let Ok(plan) = recognized.as_ref() else {
                    return Err(PassthroughReason::BatchUnsupported);
                };
                buf.clear();
                let specs = prepared.get_variable_col_specs();
                let ctx = RowSerializationContext::from_specs(specs.as_slice());
                let mut writer = RowWriter::new(&mut buf);
                match iter.serialize_next(&ctx, &mut writer) {
                    Some(Ok(())) => {}
                    Some(Err(_)) | None => return Err(PassthroughReason::InvalidValues),
                }
                let (mut key, mut deltas) = (Vec::new(), Vec::new());
                row_of(plan, &buf, &mut key, &mut deltas)?;
                Ok(RowAdd {
                    key: key.into_boxed_slice(),
                    columns: plan.table.counters.len(),
                    deltas,
                })
            })?;
            adds.push(add);
        }
        if iter.skip_next().is_some() {
            // More value rows than statements: the driver reports it.
            return Err(PassthroughReason::InvalidValues);
        }
        self.add(&adds)
    }

    fn add(&self, adds: &[RowAdd]) -> Result<(), PassthroughReason> {
        self.buffer.add(adds).map_err(refused)
    }
}

/// Whether a decision holds for good. `unknown_table` does not: the driver learns of a new
/// table from the cluster's schema events, and the statement is decided again at each
/// execution until its table is known (each of those executions is sent anyway, so the
/// look-up costs nothing that matters).
fn is_final(recognized: &Recognized) -> bool {
    !matches!(**recognized, Err(PassthroughReason::UnknownTable))
}

fn refused(refused: Refused) -> PassthroughReason {
    match refused {
        Refused::Full => PassthroughReason::BufferFull,
        Refused::Overflow => PassthroughReason::DeltaOverflow,
        Refused::Closed => PassthroughReason::AfterShutdown,
    }
}

/// A cell of serialized values: its bytes, or null (-1) or unset (-2).
fn cells(mut buf: &[u8]) -> impl Iterator<Item = Option<&[u8]>> {
    std::iter::from_fn(move || {
        let (len, rest) = buf.split_first_chunk::<4>()?;
        let len = i32::from_be_bytes(*len);
        match usize::try_from(len) {
            Ok(len) if rest.len() >= len => {
                let (value, tail) = rest.split_at(len);
                buf = tail;
                Some(Some(value))
            }
            Ok(_) => {
                buf = &[];
                None
            }
            Err(_) => {
                buf = rest;
                Some(None)
            }
        }
    })
}

/// The row key and (column, delta) pairs of one execution of `plan` with the serialized
/// values `buf`, into `key` and `deltas`.
fn row_of(
    plan: &CounterPlan,
    buf: &[u8],
    key: &mut Vec<u8>,
    deltas: &mut Vec<(usize, i64)>,
) -> Result<(), PassthroughReason> {
    let mut values: [Option<&[u8]>; 16] = [None; 16];
    let mut many: Vec<Option<&[u8]>> = Vec::new();
    let mut count = 0;
    for cell in cells(buf) {
        if count < values.len() {
            values[count] = cell;
        } else {
            if many.is_empty() {
                many.extend_from_slice(&values);
            }
            many.push(cell);
        }
        count += 1;
    }
    if count != plan.markers {
        return Err(PassthroughReason::InvalidValues);
    }
    let values: &[Option<&[u8]>] = if many.is_empty() {
        &values[..count]
    } else {
        &many
    };
    key.clear();
    key.extend_from_slice(&plan.table.id.to_le_bytes());
    for &marker in plan.key_markers.iter() {
        let value = values[marker].ok_or(PassthroughReason::NullOrUnsetValue)?;
        statement::push_key_value(key, value);
    }
    deltas.clear();
    for source in plan.deltas.iter() {
        let delta = match source.value {
            DeltaValue::Literal(n) => n,
            DeltaValue::Marker(m) => {
                let bytes = values[m].ok_or(PassthroughReason::NullOrUnsetValue)?;
                let bytes: [u8; 8] = bytes
                    .try_into()
                    .map_err(|_| PassthroughReason::InvalidValues)?;
                let n = i64::from_be_bytes(bytes);
                if source.negated {
                    n.checked_neg().ok_or(PassthroughReason::DeltaOverflow)?
                } else {
                    n
                }
            }
        };
        deltas.push((source.column, delta));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_read_values_nulls_and_unsets() {
        let mut buf = Vec::new();
        buf.extend_from_slice(&3_i32.to_be_bytes());
        buf.extend_from_slice(b"abc");
        buf.extend_from_slice(&(-1_i32).to_be_bytes());
        buf.extend_from_slice(&(-2_i32).to_be_bytes());
        buf.extend_from_slice(&0_i32.to_be_bytes());
        let read: Vec<Option<&[u8]>> = cells(&buf).collect();
        assert_eq!(read, [Some(b"abc".as_slice()), None, None, Some(b"")]);
        // A cell cut short ends the iteration: the count check refuses the row.
        assert_eq!(cells(&buf[..5]).count(), 0);
    }
}
