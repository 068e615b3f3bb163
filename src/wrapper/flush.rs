//! The wrapper's flush: drain the buffer, one request per partition (a COUNTER BATCH of
//! its rows, at most `flush.max_batch_rows` each), sent with bounded concurrency through
//! the application's session, each outcome classified and settled.
//!
//! The rules are the sidecar's: the same statement settings (non-idempotent, the
//! fall-through retry policy, `store.consistency`, `store.request_timeout`), the same
//! classifier (`sink::cql::classify`: only an error that proves the request was not
//! applied may lead to a resend), and the same outcome classes. What each class does:
//!
//! | outcome | action |
//! |---|---|
//! | applied | counted |
//! | requeued (definitely not applied) | merged back into the buffer for the next flush; at the final flush, the spill (replayed by the next start) |
//! | rejected | `wrapper_rejected.jsonl` |
//! | unknown, or in flight at the shutdown deadline | `wrapper_unknown.jsonl`, never re-sent |
//! | not started before the shutdown deadline | the spill |
//!
//! # The intent journal
//!
//! Before anything is sent, the flush's requests (tables, row keys, deltas) and the spill
//! offset its replayed rows came from are one group commit in the state directory's
//! journal (`journal.wal`, [`crate::state::journal`]); outcomes follow as requests settle,
//! then the logs' sizes before this flush appends to them, the appends, the spill cursor,
//! and `End`. A process killed anywhere in between is finished by the next start
//! ([`super::recovery`]): requests in flight are logged as unknown (`in_flight_at_crash`),
//! never re-sent.
//!
//! The cursor comes before `End` because `End` starts the journal over: from then on
//! nothing names the offset this flush's replayed rows were consumed up to but the
//! cursor, and a next start that found an older one would replay (and apply) those rows
//! again. When the cursor cannot be written (a full disk), the flush's group is left open
//! instead, so its offset still counts at the next start, and the next flush tries again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use scylla::client::session::Session;
use scylla::statement::batch::BatchType;
use scylla::statement::prepared::PreparedStatement;

use crate::config::{FlushConfig, StoreConfig};
use crate::flush::schedule::Attempt;
use crate::flush::shutdown::Deadline;
use crate::sink::bounded::{Ended, send_bounded};
use crate::sink::cql::classify;
use crate::sink::cql::profile::WriteProfile;
use crate::sink::cql::store::StoreKind;
use crate::sink::{Outcome, OutcomeClass, WriteError};
use crate::stage::{self, Action, Facts, Policy, Sent};
use crate::state::{FlushId, Settled, StateDir, WrapperTable};
use crate::test_hooks::crash_point;

use super::buffer::RowAdd;
use super::buffer::{Buffer, Drained, PendingRow, Unmerged};
use super::recognize::{TableShape, Tables};
use super::records::{Logs, WrapperOutcome, WrapperRecord, record, unhex};
use super::recovery::request_id;
use super::spill::WrapperSpill;
use super::statement::{RowValues, split_key, update_text};
use super::stats::{Counters, Stage};

/// What one flush did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WrapperFlushReport {
    /// Flush sequence number.
    pub seq: u64,
    /// Rows drained.
    pub rows: usize,
    /// Requests sent or meant to be sent.
    pub writes: usize,
    /// Requests applied.
    pub applied: usize,
    /// Requests definitely not applied and re-queued (or, at the final flush, recorded as
    /// unsent).
    pub requeued: usize,
    /// Requests refused for good.
    pub rejected: usize,
    /// Requests whose outcome is unknown (cancelled at the deadline included).
    pub unknown: usize,
    /// Requests whose rows were spilled for the next start (or, past the spill's limit,
    /// recorded in `wrapper_unsent.jsonl`).
    pub unsent: usize,
    /// Spilled rows of an earlier process loaded into the buffer before this flush drained.
    pub replayed_rows: u64,
    /// Whether the journal's group commit failed (nothing was sent; rows re-queued).
    pub journal_failed: bool,
}

impl From<&WrapperFlushReport> for Attempt {
    fn from(report: &WrapperFlushReport) -> Attempt {
        Attempt {
            writes: report.writes,
            applied: report.applied,
            requeued: report.requeued,
            unknown: report.unknown,
        }
    }
}

/// A drained row: its key and its deltas.
type Row = (Box<[u8]>, PendingRow);

/// One planned request: rows of one partition of one table.
struct Request {
    table: Arc<TableShape>,
    rows: Vec<Row>,
}

impl Request {
    fn sum(&self) -> i128 {
        self.rows.iter().map(|(_, row)| row_sum(row)).sum()
    }
}

fn row_sum(row: &PendingRow) -> i128 {
    row.deltas.iter().map(|d| i128::from(*d)).sum()
}

/// Drains a buffer into the store.
pub struct WrapperFlusher {
    session: Arc<Session>,
    buffer: Arc<Buffer>,
    tables: Arc<Tables>,
    counters: Arc<Counters>,
    flush: FlushConfig,
    /// How its writes are sent: counter deltas, never idempotent, with the store's
    /// consistency and timeout (the same profile as the sidecar's counter writes).
    profile: WriteProfile,
    state: StateDir,
    logs: Logs,
    spill: WrapperSpill,
    statements: HashMap<u32, PreparedStatement>,
    seq: u64,
    /// What the store is: an `Unavailable` answer is classified by it (ScyllaDB's may
    /// come after a replica applied the write).
    store_kind: StoreKind,
    /// A flush whose journal group is left open because the spill cursor it consumed is
    /// not durable yet (see the module doc).
    unended: Option<Unended>,
}

/// A settled flush not ended in the journal yet: its group keeps `consumes` for the next
/// start until the cursor is durable.
#[derive(Clone, Copy, Debug)]
struct Unended {
    seq: u64,
    consumes: Option<u64>,
}

impl WrapperFlusher {
    /// A flusher of `buffer` through `session`, recording in `state`'s directory.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        session: Arc<Session>,
        buffer: Arc<Buffer>,
        tables: Arc<Tables>,
        counters: Arc<Counters>,
        flush: FlushConfig,
        store: StoreConfig,
        state: StateDir,
        logs: Logs,
        spill: WrapperSpill,
        store_kind: StoreKind,
    ) -> WrapperFlusher {
        WrapperFlusher {
            session,
            buffer,
            tables,
            counters,
            flush,
            profile: WriteProfile::counter(store.consistency, store.request_timeout),
            state,
            logs,
            spill,
            statements: HashMap::new(),
            seq: 0,
            store_kind,
            unended: None,
        }
    }

    /// See `CounterSession::disable_journal_for_benchmark`.
    #[cfg(feature = "dev")]
    pub fn disable_journal_for_benchmark(&mut self) {
        self.state.disable_journal_for_benchmark();
    }

    /// The path of one of the logs.
    pub fn log_path(&self, outcome: WrapperOutcome) -> &std::path::Path {
        self.logs.path(outcome)
    }

    /// Drains and sends everything pending, until `deadline` (shutdown's: every flush
    /// running when shutdown is requested stops sending at the same instant, the final
    /// flush too). Requests still running at the deadline are given up as unknown, those
    /// not started are spilled. At the final flush, nothing is re-queued.
    pub async fn flush(
        &mut self,
        deadline: &mut Deadline,
        final_flush: bool,
    ) -> WrapperFlushReport {
        if let Some(unended) = self.unended.take() {
            self.end(unended);
        }
        self.seq += 1;
        let mut report = WrapperFlushReport {
            seq: self.seq,
            ..WrapperFlushReport::default()
        };
        report.replayed_rows = self.replay();
        if report.replayed_rows > 0 {
            crash_point("wrapper_replay_loaded");
        }
        let consumes = self.spill.loaded();
        // The drained rows keep their room in the budget until they settle (`room`).
        let Drained {
            rows: drained,
            mut room,
        } = self.buffer.drain();
        self.counters.flushed();
        if drained.is_empty() {
            // Whatever replay read went to `wrapper_unsent.jsonl` (nothing reached the
            // buffer): consumed without a flush.
            if let Err(error) = self.spill.commit(consumes) {
                tracing::error!(%error, "Could not write the wrapper spill's cursor.");
            }
            return report;
        }
        report.rows = drained.len();
        let requests = self.plan(drained);
        report.writes = requests.len();
        for request in &requests {
            self.counters.drained(request.sum());
        }
        self.prepare(&requests, deadline).await;
        let journaled = self.journal_begin(consumes, &requests);
        crash_point("wrapper_journal_committed");
        // How each request ended; all held back when the group commit failed.
        let (sent, held_error): (Vec<Sent>, _) = match &journaled {
            Ok(()) => (
                self.send(&requests, deadline)
                    .await
                    .into_iter()
                    .map(Sent::from)
                    .collect(),
                None,
            ),
            Err(error) => {
                tracing::error!(%error, "Could not write the flush's intents to the journal; nothing of it is sent.");
                report.journal_failed = true;
                let error = WriteError::new(
                    "journal_failed",
                    format!("the intent journal could not be written: {error}"),
                );
                (requests.iter().map(|_| Sent::Held).collect(), Some(error))
            }
        };
        crash_point("wrapper_sent");
        let now = crate::bucket::unix_secs(SystemTime::now());
        let now = u32::try_from(now).unwrap_or(u32::MAX);
        // The wrapper's column has no age rule: the maximum age is not read.
        let facts = Facts::fresh(final_flush, now, u32::MAX);
        let mut requeue = Vec::new();
        // Where each re-queued row was in this flush (a drained key is in one request
        // once): a row that cannot go back is spilled under that identity, the one its
        // intent has, so a recovery of this flush finds it in the spill.
        let mut requeued_at: HashMap<Box<[u8]>, (usize, u16)> = HashMap::new();
        let mut records: HashMap<WrapperOutcome, Vec<WrapperRecord>> = HashMap::new();
        for (index, (request, sent)) in requests.into_iter().zip(sent).enumerate() {
            let sum = request.sum();
            let decision = stage::decide(&Policy::WRAPPER, sent, &facts);
            let (class, stage, error) = (
                decision.counted,
                stage_of(&decision.action),
                decision.action.error().or(held_error.as_ref()).cloned(),
            );
            if journaled.is_ok() {
                self.state
                    .journal_outcome(index as u32, &journal_outcome(class, stage, &error));
            }
            if let Some(class) = class {
                self.counters.write(class);
                match class {
                    OutcomeClass::Applied => report.applied += 1,
                    OutcomeClass::Requeued => report.requeued += 1,
                    OutcomeClass::Rejected => report.rejected += 1,
                    OutcomeClass::Unknown => report.unknown += 1,
                }
            }
            let outcome = match stage {
                Stage::Applied => None,
                Stage::Requeued => {
                    for (position, (key, _)) in request.rows.iter().enumerate() {
                        let position = u16::try_from(position).unwrap_or(u16::MAX);
                        requeued_at.insert(key.clone(), (index, position));
                    }
                    requeue.extend(request.rows);
                    self.counters.settled(sum, Stage::Requeued);
                    continue;
                }
                Stage::Unknown => Some(WrapperOutcome::Unknown),
                Stage::Rejected => Some(WrapperOutcome::Rejected),
                Stage::Unsent => {
                    report.unsent += 1;
                    Some(WrapperOutcome::Unsent)
                }
            };
            if let Some(outcome) = outcome {
                let id = self.request_id(index);
                records.entry(outcome).or_default().extend(self.records(
                    &request,
                    &id,
                    outcome,
                    error.as_ref(),
                ));
            }
            self.counters.settled(sum, stage);
        }
        // Definitely not applied: back for the next flush, in the room the rows had. A row
        // that cannot go back (its sum with what arrived since would leave the i64 range,
        // or no room is left for it) is spilled, under the identity its intent has.
        let refused = self.buffer.requeue(requeue, now, &mut room);
        drop(room);
        if !refused.is_empty() {
            for (key, row, why) in refused {
                let error = unmerged_error(why);
                let sum = row_sum(&row);
                self.counters.settled(-sum, Stage::Requeued);
                self.counters.settled(sum, Stage::Unsent);
                let (index, position) = requeued_at.get(&key).copied().unwrap_or((usize::MAX, 0));
                let id = self.request_id(index);
                if let Some(table) = split_key(&key).and_then(|(t, _)| self.tables.get(t)) {
                    let request = Request {
                        table,
                        rows: vec![(key, row)],
                    };
                    let mut spilled =
                        self.records(&request, &id, WrapperOutcome::Unsent, Some(&error));
                    for record in &mut spilled {
                        record.row = position;
                    }
                    records
                        .entry(WrapperOutcome::Unsent)
                        .or_default()
                        .extend(spilled);
                }
            }
        }
        self.state.journal_flush();
        self.logs.rotate_full();
        let [unknown_at, rejected_at] = self.logs.sizes();
        // Only a flush with records to write needs the logs' sizes (one more fdatasync).
        let has_records = records.values().any(|r| !r.is_empty());
        if journaled.is_ok()
            && has_records
            && let Err(error) =
                self.state
                    .wrapper_journal_logs_at([unknown_at, rejected_at, self.spill.size()])
        {
            tracing::error!(%error, "Could not record the wrapper logs' sizes in the journal; a crash before this flush ends could log some records twice.");
        }
        crash_point("wrapper_logs_at");
        if let Some(unsent) = records.remove(&WrapperOutcome::Unsent) {
            let count = unsent.len();
            match self.spill.append(unsent) {
                Ok(over) if over.is_empty() => {}
                Ok(over) => {
                    records.insert(WrapperOutcome::Unsent, over);
                }
                Err(error) => {
                    // Records past the failure may or may not be in the file: counted lost.
                    self.counters.records_lost(count as u64);
                    tracing::error!(%error, records = count, "Could not spill rows that did not apply; they are counted but their details are lost.");
                }
            }
        }
        for outcome in WrapperOutcome::ALL {
            let Some(records) = records.get(&outcome) else {
                continue;
            };
            if let Err(error) = self.logs.append(outcome, records) {
                self.counters.records_lost(records.len() as u64);
                tracing::error!(
                    file = outcome.file_name(),
                    records = records.len(),
                    %error,
                    "Could not record flushed rows that did not apply; they are counted but their details are lost."
                );
            }
        }
        crash_point("wrapper_logged");
        if journaled.is_ok() {
            self.end(Unended {
                seq: self.seq,
                consumes,
            });
        }
        report
    }

    /// Ends a settled flush: makes the spill cursor it consumed durable, then writes
    /// `End` (in that order: see the module doc). When the cursor cannot be written, the
    /// group stays open and is kept in `self.unended` for the next flush to end.
    fn end(&mut self, flush: Unended) {
        if let Err(error) = self.spill.commit(flush.consumes) {
            tracing::error!(%error, "Could not write the wrapper spill's cursor; the flush stays open in the journal, whose group keeps the offset its replayed rows were consumed up to, and the next flush tries again.");
            self.unended = Some(flush);
            return;
        }
        crash_point("wrapper_cursor_committed");
        match self.state.wrapper_journal_end(flush.seq) {
            // `End` starts the journal over: a group left open before this one is gone
            // with it (its cursor is durable: this one's is at least as far).
            Ok(()) => self.unended = None,
            Err(error) => {
                tracing::error!(%error, "Could not end the flush in the journal; the next start finishes it again (records are not duplicated).");
            }
        }
    }

    fn request_id(&self, index: usize) -> String {
        request_id(
            self.state.writer_id(),
            self.state.incarnation(),
            self.seq,
            u32::try_from(index).unwrap_or(u32::MAX),
        )
    }

    /// The group commit of this flush's requests (see the module doc).
    fn journal_begin(
        &mut self,
        consumes: Option<u64>,
        requests: &[Request],
    ) -> std::io::Result<()> {
        let flush = FlushId {
            writer: self.state.writer_id().to_owned(),
            incarnation: self.state.incarnation(),
            flush_seq: self.seq,
        };
        let mut tables: Vec<WrapperTable> = Vec::new();
        for request in requests {
            let table = &request.table;
            if tables.iter().all(|t| t.id != table.id) {
                tables.push(WrapperTable {
                    id: table.id,
                    keyspace: table.keyspace.clone(),
                    name: table.name.clone(),
                    key_columns: table.key_columns().map(str::to_owned).collect(),
                    counters: table.counters.clone(),
                });
            }
        }
        let intents: Vec<_> = requests
            .iter()
            .map(|r| {
                let rows = r
                    .rows
                    .iter()
                    .map(|(k, row)| (&k[..], &row.deltas[..]))
                    .collect();
                (r.table.id, rows)
            })
            .collect();
        let time = crate::bucket::rfc3339(SystemTime::now());
        self.state
            .wrapper_journal_begin(&flush, &time, consumes, &tables, &intents)
    }

    /// Loads spilled rows of an earlier process into the buffer, as far as its budget
    /// allows; rows that no longer map to their table go to `wrapper_unsent.jsonl`.
    /// Returns the rows loaded into the buffer.
    fn replay(&mut self) -> u64 {
        if !self.spill.has_unloaded() {
            return 0;
        }
        let cluster = self.session.get_cluster_state();
        let (buffer, tables) = (&self.buffer, &self.tables);
        let mut unreplayable = Vec::new();
        let loaded = self.spill.load(|record| {
            let Some(add) = row_add(record, &cluster, tables) else {
                let mut record = record.clone();
                record.error_kind = Some("not_replayable".into());
                record.error = Some(
                    "the table's schema in the driver's metadata no longer takes this row".into(),
                );
                unreplayable.push(record);
                return true;
            };
            match buffer.add_replayed(&add) {
                Ok(()) => true,
                Err(super::buffer::Refused::Overflow) => {
                    // Alone it fits an i64; with what is pending it does not: next flush.
                    false
                }
                Err(_) => false,
            }
        });
        match loaded {
            Ok(loaded) => {
                if loaded.corrupt > 0 {
                    self.counters.records_lost(loaded.corrupt);
                    tracing::error!(lines = loaded.corrupt, file = %self.spill.path().display(), "Unreadable lines in the wrapper spill were passed over.");
                }
                if !unreplayable.is_empty()
                    && let Err(error) = self.logs.append(WrapperOutcome::Unsent, &unreplayable)
                {
                    self.counters.records_lost(unreplayable.len() as u64);
                    tracing::error!(%error, "Could not record spilled rows that cannot be replayed.");
                }
                loaded.rows - unreplayable.len() as u64
            }
            Err(error) => {
                tracing::error!(%error, "Could not read the wrapper spill; its rows wait for the next flush.");
                0
            }
        }
    }

    fn records(
        &self,
        request: &Request,
        id: &str,
        outcome: WrapperOutcome,
        error: Option<&WriteError>,
    ) -> Vec<WrapperRecord> {
        let time = crate::bucket::rfc3339(SystemTime::now());
        request
            .rows
            .iter()
            .enumerate()
            .filter_map(|(i, (key, row))| {
                let (_, values) = split_key(key)?;
                Some(record(
                    &request.table,
                    &values,
                    row,
                    u16::try_from(i).unwrap_or(u16::MAX),
                    id,
                    outcome,
                    error,
                    &time,
                ))
            })
            .collect()
    }

    /// One request per partition, at most `max_batch_rows` rows, a row key at most once.
    fn plan(&self, rows: Vec<Row>) -> Vec<Request> {
        let mut groups: HashMap<(u32, Vec<u8>), Vec<Row>> = HashMap::new();
        for (key, row) in rows {
            if row.deltas.iter().all(|d| *d == 0) {
                // Nothing to send: increments that cancelled out.
                continue;
            }
            let Some((id, values)) = split_key(&key) else {
                continue;
            };
            let Some(table) = self.tables.get(id) else {
                continue;
            };
            let mut partition = Vec::new();
            for value in values.iter().take(table.partition_key.len()) {
                super::statement::push_key_value(&mut partition, value);
            }
            groups.entry((id, partition)).or_default().push((key, row));
        }
        let max = self.flush.max_batch_rows.max(1);
        let mut requests = Vec::new();
        for ((id, _), rows) in groups {
            let Some(table) = self.tables.get(id) else {
                continue;
            };
            let mut current: Vec<Row> = Vec::new();
            for (key, row) in rows {
                if current.len() >= max || current.iter().any(|(k, _)| *k == key) {
                    requests.push(Request {
                        table: Arc::clone(&table),
                        rows: std::mem::take(&mut current),
                    });
                }
                current.push((key, row));
            }
            if !current.is_empty() {
                requests.push(Request {
                    table,
                    rows: current,
                });
            }
        }
        requests
    }

    /// Prepares the UPDATE of every table the requests write and this flusher has not
    /// prepared yet, within the shutdown `deadline`: a store that takes PREPARE and never
    /// answers must not hold the shutdown past it. A failure leaves the table without a
    /// statement: its requests are then not sent (not applied: re-queued, or spilled at
    /// the final flush), and the next flush tries again.
    async fn prepare(&mut self, requests: &[Request], deadline: &mut Deadline) {
        for request in requests {
            let id = request.table.id;
            if self.statements.contains_key(&id) || deadline.passed() {
                continue;
            }
            let prepare = self.session.prepare(update_text(&request.table));
            let prepared = tokio::select! {
                result = prepare => result.map_err(|error| error.to_string()),
                () = deadline.wait() => Err("no answer before the shutdown deadline".to_owned()),
            };
            match prepared {
                Ok(mut statement) => {
                    self.profile.apply(&mut statement);
                    self.statements.insert(id, statement);
                }
                Err(error) => tracing::warn!(
                    table = %request.table.qualified_name(),
                    %error,
                    "Could not prepare the wrapper's UPDATE; its rows stay pending."
                ),
            }
        }
    }

    /// Sends every request, at most `flush.max_in_flight` at once, until done or the
    /// shutdown deadline.
    async fn send(&self, requests: &[Request], deadline: &mut Deadline) -> Vec<Ended> {
        send_bounded(
            requests,
            self.flush.max_in_flight,
            deadline,
            |request| self.send_one(request),
            |_, _, _| {},
        )
        .await
    }

    async fn send_one(&self, request: &Request) -> Outcome {
        let Some(statement) = self.statements.get(&request.table.id) else {
            return Outcome::NotAppliedTransient(WriteError::new(
                "prepare_failed",
                format!(
                    "the UPDATE of {} could not be prepared",
                    request.table.qualified_name()
                ),
            ));
        };
        let mut values = Vec::with_capacity(request.rows.len());
        for (key, row) in &request.rows {
            let Some((_, key)) = split_key(key) else {
                return Outcome::NotAppliedPermanent(WriteError::new(
                    "bad_key",
                    "a buffered row key does not decode",
                ));
            };
            values.push(RowValues {
                deltas: &row.deltas,
                key,
            });
        }
        let result = if let [row] = values.as_slice() {
            self.session.execute_unpaged(statement, row).await.map(drop)
        } else {
            let batch = self
                .profile
                .batch(BatchType::Counter, statement, values.len());
            self.session.batch(&batch, &values).await.map(drop)
        };
        match result {
            Ok(()) => Outcome::Applied,
            Err(error) => classify::classify(&error, self.store_kind),
        }
    }
}

/// The error recorded for a re-queued row that could not go back into the buffer.
fn unmerged_error(why: Unmerged) -> WriteError {
    match why {
        Unmerged::Overflow => WriteError::new(
            "sum_overflow",
            "re-queued row's sum with newer increments would leave the i64 range",
        ),
        Unmerged::NoRoom => WriteError::new(
            "no_room",
            "no room was left within limits.max_pending_rows/max_pending_bytes for the re-queued row",
        ),
    }
}

/// How the journal records a settled request.
fn journal_outcome(
    class: Option<OutcomeClass>,
    stage: Stage,
    error: &Option<WriteError>,
) -> Settled {
    let (kind, text) = error.as_ref().map_or((String::new(), String::new()), |e| {
        (e.kind.to_owned(), e.text.to_string())
    });
    match (class, stage) {
        (_, Stage::Applied) => Settled::Applied,
        (None, _) => Settled::NotStarted,
        (_, Stage::Requeued | Stage::Unsent) => Settled::NotApplied { kind, text },
        (_, Stage::Rejected) => Settled::Rejected { kind, text },
        (_, Stage::Unknown) => Settled::Unknown { kind, text },
    }
}

/// A spilled record as an add to the buffer, on its table's current schema: `None` when
/// the row no longer maps to it.
fn row_add(
    record: &WrapperRecord,
    cluster: &scylla::cluster::ClusterState,
    tables: &Tables,
) -> Option<RowAdd> {
    let (keyspace, name) = record.table.split_once('.')?;
    let shape = tables.named(cluster, keyspace, name)?;
    let values = record.key_hex.as_ref()?;
    let columns: Vec<&str> = shape.key_columns().collect();
    if values.len() != columns.len()
        || record.key.len() != columns.len()
        || columns.iter().any(|c| !record.key.contains_key(*c))
    {
        return None;
    }
    let mut key = shape.id.to_le_bytes().to_vec();
    for value in values {
        super::statement::push_key_value(&mut key, &unhex(value)?);
    }
    let mut deltas = Vec::with_capacity(record.deltas.len());
    for (column, delta) in &record.deltas {
        deltas.push((shape.counters.iter().position(|c| c == column)?, *delta));
    }
    Some(RowAdd {
        key: key.into_boxed_slice(),
        columns: shape.counters.len(),
        deltas,
    })
}

/// Where the deltas of a request go, by the action the decision table chose.
fn stage_of(action: &Action) -> Stage {
    match action {
        Action::Applied => Stage::Applied,
        // Back in the buffer: re-queued, or kept unchanged after a failed group commit.
        Action::Retry(_) | Action::Hold => Stage::Requeued,
        Action::Spill(_) => Stage::Unsent,
        Action::LogUnknown(_) => Stage::Unknown,
        Action::LogRejected(_) => Stage::Rejected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error() -> WriteError {
        WriteError::new("k", "t")
    }

    /// A request a failed group commit held back is counted under no outcome class
    /// (`countersink_wrapper_writes_total` counts requests sent), and its rows stay in
    /// the buffer for the next flush, or go to the spill at the final flush.
    #[test]
    fn a_request_a_failed_group_commit_kept_back_is_counted_under_no_outcome() {
        for final_flush in [false, true] {
            let facts = Facts::fresh(final_flush, 1, u32::MAX);
            let decision = stage::decide(&Policy::WRAPPER, Sent::Held, &facts);
            assert_eq!(decision.counted, None, "final flush: {final_flush}");
            let kept = if final_flush {
                Stage::Unsent
            } else {
                Stage::Requeued
            };
            assert_eq!(
                stage_of(&decision.action),
                kept,
                "final flush: {final_flush}"
            );
        }
    }

    #[test]
    fn every_action_has_one_stage_and_keeps_its_error() {
        let cases = [
            (Action::Applied, Stage::Applied, None),
            (Action::Retry(Some(error())), Stage::Requeued, Some(error())),
            (Action::Hold, Stage::Requeued, None),
            (Action::Spill(None), Stage::Unsent, None),
            (Action::LogUnknown(error()), Stage::Unknown, Some(error())),
            (Action::LogRejected(error()), Stage::Rejected, Some(error())),
        ];
        for (action, stage, kept) in cases {
            assert_eq!(stage_of(&action), stage, "{action:?}");
            assert_eq!(action.error(), kept.as_ref());
        }
    }
}
