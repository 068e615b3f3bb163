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
//! | rejected | `rejected.jsonl` |
//! | unknown, or in flight at the shutdown deadline | `unknown.jsonl`, never re-sent |
//! | not started before the shutdown deadline | back into the buffer; at the final flush, the spill |
//! | held back (the group commit failed) | back into the buffer unchanged; at the final flush, the spill |
//!
//! That table is the wrapper column of the one decision table (`crate::stage::decide`),
//! and a flush is one group of the stage runner (`crate::stage::run_stage`, see the
//! `stage` module beside this one).
//!
//! # The intent journal
//!
//! Before anything is sent, the flush's requests (tables, row keys, deltas) and the spill
//! cursor its replayed rows were read up to are one group commit in the state directory's
//! journal (`journal.wal`, [`crate::state::journal`]); outcomes follow as requests settle,
//! then the logs' sizes before this flush appends to them, the appends and its spill
//! segment, the spill cursor, and `End`. A process killed anywhere in between is finished
//! by the next start ([`super::recovery`]): requests in flight are logged as unknown
//! (`in_flight_at_crash`), never re-sent.
//!
//! The spill is the sidecar's: segments of whole flushes, read back in chunks, with one
//! replay cursor ([`crate::state::spill`]), and the flush ends through the same step
//! ([`StateDir::journal_end`]): the cursor is made durable before `End`, and a cursor
//! that cannot be written (a full disk) leaves the group open and stays owed by every
//! later end.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;

use crate::aggregate::Credit;
use crate::config::{FlushConfig, StoreConfig};
use crate::flush::schedule::Attempt;
use crate::flush::shutdown::Deadline;
use crate::sink::WriteError;
use crate::sink::cql::classify::SharedTexts;
use crate::sink::cql::profile::WriteProfile;
use crate::sink::cql::store::StoreKind;
use crate::stage::replay::REFUSED_RECORD_BYTES;
use crate::stage::{Facts, StageCx, run_stage};
use crate::state::spill::MAX_REPLAY_CHUNK_ROWS;
use crate::state::wrapper_files::TableRecordSource;
use crate::state::{Cursor, FlushId, OutcomeLog, StateDir, Took};
use crate::test_hooks::crash_point;

use super::buffer::RowAdd;
use super::buffer::{Buffer, Drained, PendingRow, Unmerged};
use super::recognize::{TableShape, Tables};
use super::records::{ErrorInfo, RecordOutcome, WriteRecord, record, unhex};
use super::recovery::request_id;
use super::statement::{split_key, update_text};
use super::stats::Counters;

mod stage;

use self::stage::{Statements, WrapperStage};

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
    /// recorded in `rejected.jsonl` as `spill_full`).
    pub unsent: usize,
    /// Spilled rows of an earlier process loaded into the buffer before this flush drained.
    pub replayed_rows: u64,
    /// Whether the journal's group commit failed (nothing was sent; rows re-queued).
    pub journal_failed: bool,
}

impl WrapperFlushReport {
    /// Adds the figures of a later group of the same flush, and takes its sequence number.
    fn add(&mut self, group: &WrapperFlushReport) {
        // Destructured, so that a field added later cannot be left out of the sum.
        let WrapperFlushReport {
            seq,
            rows,
            writes,
            applied,
            requeued,
            rejected,
            unknown,
            unsent,
            replayed_rows,
            journal_failed,
        } = group;
        self.seq = self.seq.max(*seq);
        self.rows += rows;
        self.writes += writes;
        self.applied += applied;
        self.requeued += requeued;
        self.rejected += rejected;
        self.unknown += unknown;
        self.unsent += unsent;
        self.replayed_rows += replayed_rows;
        self.journal_failed |= journal_failed;
    }
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
pub(super) struct Request {
    pub(super) table: Arc<TableShape>,
    pub(super) rows: Vec<Row>,
}

impl Request {
    pub(super) fn sum(&self) -> i128 {
        self.rows.iter().map(|(_, row)| row_sum(row)).sum()
    }
}

pub(super) fn row_sum(row: &PendingRow) -> i128 {
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
    statements: HashMap<u32, PreparedStatement>,
    seq: u64,
    /// What the store is: an `Unavailable` answer is classified by it (ScyllaDB's may
    /// come after a replica applied the write).
    store_kind: StoreKind,
    /// What a flush may hold for the rows of one chunk (a quarter of
    /// `limits.max_pending_bytes`; the buffer's rows take the other three).
    chunk_bytes: usize,
    /// Whether the last flush that sent anything found the store answering (something
    /// applied, nothing re-queued): the moment to bring spilled rows back. True at start.
    store_answered: bool,
    /// Error texts shared between failures alike (an outage fails every request alike).
    texts: SharedTexts,
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
        store_kind: StoreKind,
        chunk_bytes: usize,
    ) -> WrapperFlusher {
        let mut state = state;
        // Requests start in windows, each window's bound durable first: a kill turns at
        // most about one window of never-started requests into unknown ones.
        state.set_start_window(crate::stage::start_window(flush.max_in_flight));
        WrapperFlusher {
            session,
            buffer,
            tables,
            counters,
            flush,
            profile: WriteProfile::counter(store.consistency, store.request_timeout),
            state,
            statements: HashMap::new(),
            seq: 0,
            store_kind,
            chunk_bytes: chunk_bytes.max(1),
            store_answered: true,
            texts: SharedTexts::default(),
        }
    }

    /// See `CounterSession::disable_journal_for_benchmark`.
    #[cfg(feature = "dev")]
    pub fn disable_journal_for_benchmark(&mut self) {
        self.state.disable_journal_for_benchmark();
    }

    /// The current file of one of the outcome logs.
    pub fn log_path(&self, log: OutcomeLog) -> &std::path::Path {
        self.state.log_path(log)
    }

    /// Drains and sends what is pending, until `deadline` (shutdown's: every flush
    /// running when shutdown is requested stops sending at the same instant, the final
    /// flush too), in groups of the stage runner: first a chunk of the spill, unless the
    /// last flush found the store failing, then the buffer in chunks whose copies fit
    /// the flush's share of the memory limit. The round ends once it drained as many rows
    /// as were pending when it began, when a group applied nothing, or at the deadline;
    /// the final flush drains until nothing is left. Requests still running at the
    /// deadline are given up as unknown, those not started are spilled at the final flush.
    pub async fn flush(
        &mut self,
        deadline: &mut Deadline,
        final_flush: bool,
    ) -> WrapperFlushReport {
        self.counters.flushed();
        let mut round = WrapperFlushReport::default();
        if !final_flush && deadline.at().is_none() && self.store_answered {
            let replayed = self.flush_replay(deadline).await;
            round.add(&replayed);
        }
        let mut owed = self.buffer.pending_rows();
        loop {
            let before = self.buffer.pending_rows();
            let Drained { rows, room } = self.buffer.drain_chunk(self.chunk_bytes);
            if rows.is_empty() {
                break;
            }
            let (chunk, _) = self
                .flush_group(rows, room, None, deadline, final_flush)
                .await;
            round.add(&chunk);
            owed = owed.saturating_sub(chunk.rows);
            let progressed = self.buffer.pending_rows() < before;
            let done = if final_flush {
                !progressed
            } else {
                owed == 0 || chunk.writes > 0 && chunk.applied == 0 || deadline.at().is_some()
            };
            if done {
                break;
            }
        }
        // A round that sent nothing says nothing of the store: the next may try a chunk
        // of the spill (as the sidecar's flusher does). Otherwise an unanswered replay
        // chunk, with no new calls to show the store answering again, would keep the
        // rest of the spill waiting for a restart.
        self.store_answered = round.writes == 0 || round.applied > 0 && round.requeued == 0;
        round
    }

    /// One chunk of the spill, sent as a group of its own whose commit consumes the spill
    /// cursor past exactly its rows: never merged into the buffer first (a chunked drain
    /// could carry part of it while the offset passed all of it). Rows that no longer map
    /// to their table go to `rejected.jsonl` (`not_replayable`) as they are read, and
    /// only the durable cursor passing them keeps the next start from logging them
    /// again: so they are never in a chunk with rows to send (whose cursor is durable
    /// only from their group commit on), but a chunk of their own, consumed at once,
    /// after which the rows behind them are read (a second run of them is not: a round
    /// reads one run of refusals).
    async fn flush_replay(&mut self, deadline: &mut Deadline) -> WrapperFlushReport {
        match self.flush_replay_chunk(deadline, true).await {
            Some(report) => report,
            None => self
                .flush_replay_chunk(deadline, false)
                .await
                .unwrap_or_default(),
        }
    }

    /// One chunk of [`Self::flush_replay`], refusing rows that no longer map only if
    /// `refusals_too` (otherwise the first of them ends it): `None` when it was a run of
    /// them, consumed at once (the caller may read the next chunk).
    async fn flush_replay_chunk(
        &mut self,
        deadline: &mut Deadline,
        refusals_too: bool,
    ) -> Option<WrapperFlushReport> {
        if !self.state.has_unreplayed() {
            return Some(WrapperFlushReport::default());
        }
        let cluster = self.session.get_cluster_state();
        let tables = Arc::clone(&self.tables);
        let mut room = self.buffer.credit();
        let mut rows: Vec<Row> = Vec::new();
        let mut unreplayable = Vec::new();
        let (mut allowance, chunk_bytes) = (self.chunk_bytes, self.chunk_bytes);
        let loaded = self.state.read_spill(|_, record| {
            let Some(add) = row_add(&record, &cluster, &tables) else {
                if !rows.is_empty() || !refusals_too {
                    // After rows to send: the refusal starts a chunk of its own.
                    return Took::Declined;
                }
                // A run of them is held until the read ends: within the chunk's room,
                // as the other replays charge it (a spill a schema change made
                // unreplayable is not read whole); the rest is the next round's.
                if !unreplayable.is_empty()
                    && (unreplayable.len() >= MAX_REPLAY_CHUNK_ROWS
                        || REFUSED_RECORD_BYTES > allowance)
                {
                    return Took::Declined;
                }
                allowance = allowance.saturating_sub(REFUSED_RECORD_BYTES);
                let mut record = record;
                record.outcome = RecordOutcome::Rejected;
                record.error = Some(ErrorInfo {
                    kind: "not_replayable".into(),
                    text: "the table's schema in the driver's metadata no longer takes this row"
                        .into(),
                });
                unreplayable.push(record);
                return Took::Refused;
            };
            if !unreplayable.is_empty() {
                // The refusals are a chunk of their own; the rows are read from here next.
                return Took::Declined;
            }
            let cost = super::buffer::flush_bytes(&add.key, add.columns);
            if (!rows.is_empty() && cost > allowance)
                || !room.claim(super::buffer::row_bytes(&add.key, add.columns))
            {
                // Still in the file: the next chunk starts with it.
                return Took::Declined;
            }
            allowance = allowance.saturating_sub(cost).min(chunk_bytes);
            let mut deltas = vec![0; add.columns];
            for (column, delta) in add.deltas {
                if let Some(slot) = deltas.get_mut(column) {
                    *slot = delta;
                }
            }
            rows.push((
                add.key,
                PendingRow {
                    deltas: deltas.into_boxed_slice(),
                    requeued_since: 0,
                },
            ));
            Took::Taken
        });
        let corrupt = loaded.corrupt.len();
        if corrupt > 0 {
            self.counters.records_lost(corrupt as u64);
            tracing::error!(
                lines = corrupt,
                "Unreadable lines in the spill were set aside in spill.corrupt.jsonl."
            );
        }
        if let Some(error) = loaded.error {
            tracing::error!(%error, "Could not read the spill; its rows wait for the next flush.");
        }
        let unreplayable_read = !unreplayable.is_empty();
        if unreplayable_read {
            // Outside any flush's group: a crash before the cursor passes these rows has
            // the next start read them again, never send them (nor log them again).
            let unreplayable = self
                .state
                .refusals_not_logged(OutcomeLog::Rejected, unreplayable);
            let appended = self
                .state
                .append_recorded(OutcomeLog::Rejected, &unreplayable);
            self.count_lost(&appended);
            crash_point("wrapper_refusals_logged");
        }
        let consumes = self.state.replay_loaded();
        if rows.is_empty() {
            // Whatever was read went to `rejected.jsonl`: consumed without a flush.
            if let Err(error) = self.state.commit_replay(consumes) {
                tracing::error!(%error, "Could not write the spill's cursor.");
            }
            return if unreplayable_read {
                None
            } else {
                Some(WrapperFlushReport::default())
            };
        }
        crash_point("wrapper_replay_loaded");
        // Rows of an earlier process: accepted anew by this one.
        let count = rows.len();
        let sum: i128 = rows.iter().map(|(_, row)| row_sum(row)).sum();
        self.buffer.count_replayed(count as i64, sum);
        let (mut report, committed) = self
            .flush_group(rows, room, consumes, deadline, false)
            .await;
        report.replayed_rows = count as u64;
        if !committed {
            // Nothing was sent and nothing consumed: the rows stay in the file, read again.
            self.state.rewind_replay();
            self.buffer.count_replayed(-(count as i64), -sum);
        }
        Some(report)
    }

    /// One group of the stage runner: `rows` planned into requests and sent; `consumes`,
    /// for replayed rows, the spill cursor the group's commit consumes. Returns what it
    /// did, and whether its group commit was made.
    async fn flush_group(
        &mut self,
        rows: Vec<Row>,
        room: Credit,
        consumes: Option<Cursor>,
        deadline: &mut Deadline,
        final_flush: bool,
    ) -> (WrapperFlushReport, bool) {
        self.seq += 1;
        let mut report = WrapperFlushReport {
            seq: self.seq,
            rows: rows.len(),
            ..WrapperFlushReport::default()
        };
        let requests = self.plan(rows);
        report.writes = requests.len();
        for request in &requests {
            self.counters.drained(request.sum());
        }
        self.prepare(&requests, deadline).await;
        let sender = Statements {
            session: Arc::clone(&self.session),
            statements: std::mem::take(&mut self.statements),
            profile: self.profile,
            store_kind: self.store_kind,
            texts: std::mem::take(&mut self.texts),
        };
        let now = u32::try_from(crate::bucket::unix_secs(SystemTime::now())).unwrap_or(u32::MAX);
        let max_in_flight = self.flush.max_in_flight;
        let mut stage = WrapperStage::new(self, consumes, now, room, report);
        let done = run_stage(
            &mut stage,
            &sender,
            requests,
            StageCx {
                cutoff: deadline,
                max_in_flight,
                // The wrapper's column has no age rule: the maximum age is not read.
                facts: Facts::fresh(final_flush, now, u32::MAX),
                first_request: 0,
            },
        )
        .await;
        let (mut report, committed) = stage.into_report();
        report.applied = done.applied;
        report.requeued = done.requeued;
        report.rejected = done.rejected;
        report.unknown = done.unknown;
        self.statements = sender.statements;
        self.texts = sender.texts;
        (report, committed)
    }

    /// Who sent the current flush: the wrapper names its requests itself
    /// (`writer/incarnation/wSEQ/request`), without the start nonce.
    pub(super) fn flush_id(&self) -> FlushId {
        FlushId {
            nonce: None,
            ..self.state.flush_id(self.seq)
        }
    }

    /// Ends a settled flush: makes the spill cursor it consumed durable, then writes
    /// `End` (see the module doc). When the cursor cannot be written, the group stays
    /// open and the cursor owed: the next flush's end writes it first.
    pub(super) fn end(&mut self, consumes: Option<Cursor>) {
        let flush = self.flush_id();
        if let Err(error) = self.state.journal_end(&flush, consumes) {
            tracing::error!(%error, "Could not end the flush in the journal (its spill cursor, or its End); its group stays open, the next flush's end tries again, and a next start finishes it (records are not duplicated).");
        }
    }

    /// Counts the records an append to an outcome log lost (not written, or deleted by
    /// the rotation before it).
    pub(super) fn count_lost(&self, appended: &crate::state::Appended) {
        let lost: u64 = appended.lost().map(|(_, n)| n).sum();
        if lost > 0 {
            self.counters.records_lost(lost);
        }
    }

    pub(super) fn request_id(&self, index: u32) -> String {
        request_id(
            self.state.writer_id(),
            self.state.incarnation(),
            self.seq,
            index,
        )
    }

    pub(super) fn records(
        &self,
        request: &Request,
        index: u32,
        outcome: RecordOutcome,
        error: Option<&WriteError>,
    ) -> Vec<WriteRecord> {
        let time = crate::bucket::rfc3339(SystemTime::now());
        let id = self.request_id(index);
        let source = TableRecordSource {
            writer: self.state.writer_id(),
            incarnation: self.state.incarnation(),
            flush_seq: self.seq,
            request_id: &id,
            time: &time,
        };
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
                    source,
                    outcome,
                    error,
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
}

/// The error recorded for a re-queued row that could not go back into the buffer.
pub(super) fn unmerged_error(why: Unmerged) -> WriteError {
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

/// A spilled record as an add to the buffer, on its table's current schema: `None` when
/// the row no longer maps to it.
fn row_add(
    record: &WriteRecord,
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
