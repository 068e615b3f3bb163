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
//! | requeued (definitely not applied) | merged back into the buffer for the next flush; at the final flush, `wrapper_unsent.jsonl` |
//! | rejected | `wrapper_rejected.jsonl` |
//! | unknown, or in flight at the shutdown deadline | `wrapper_unknown.jsonl`, never re-sent |
//! | not started before the shutdown deadline | `wrapper_unsent.jsonl` |

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use scylla::client::session::Session;
use scylla::policies::retry::FallthroughRetryPolicy;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;
use tokio::time::Instant;

use crate::config::{FlushConfig, StoreConfig};
use crate::flush::settle::cancelled_at_deadline;
use crate::sink::cql::{classify, session::consistency};
use crate::sink::{Outcome, OutcomeClass, WriteError};
use crate::state::StateDir;

use super::buffer::{Buffer, PendingRow};
use super::recognize::{TableShape, Tables};
use super::records::{Logs, WrapperOutcome, WrapperRecord, record};
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
    /// Requests recorded in `wrapper_unsent.jsonl`.
    pub unsent: usize,
}

/// How a request ended.
enum Sent {
    Done(Outcome),
    NotStarted,
    Cancelled,
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
    store: StoreConfig,
    state: StateDir,
    logs: Logs,
    statements: HashMap<u32, PreparedStatement>,
    seq: u64,
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
    ) -> WrapperFlusher {
        WrapperFlusher {
            session,
            buffer,
            tables,
            counters,
            flush,
            store,
            state,
            logs,
            statements: HashMap::new(),
            seq: 0,
        }
    }

    /// The path of one of the logs.
    pub fn log_path(&self, outcome: WrapperOutcome) -> &std::path::Path {
        self.logs.path(outcome)
    }

    /// Drains and sends everything pending. At the final flush (`deadline` given), nothing
    /// is re-queued, and requests still running at the deadline are given up as unknown.
    pub async fn flush(&mut self, deadline: Option<Instant>) -> WrapperFlushReport {
        self.seq += 1;
        let mut report = WrapperFlushReport {
            seq: self.seq,
            ..WrapperFlushReport::default()
        };
        let drained = self.buffer.drain().rows;
        self.counters.flushed();
        if drained.is_empty() {
            return report;
        }
        report.rows = drained.len();
        let requests = self.plan(drained);
        report.writes = requests.len();
        for request in &requests {
            self.counters.drained(request.sum());
        }
        self.prepare(&requests).await;
        let sent = self.send(&requests, deadline).await;
        let now = crate::bucket::unix_secs(SystemTime::now());
        let now = u32::try_from(now).unwrap_or(u32::MAX);
        let mut requeue = Vec::new();
        let mut records: HashMap<WrapperOutcome, Vec<WrapperRecord>> = HashMap::new();
        for (index, (request, sent)) in requests.into_iter().zip(sent).enumerate() {
            let sum = request.sum();
            let (class, stage, error) = settle(sent, deadline.is_some());
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
        // Definitely not applied: back for the next flush. A row whose sum with what
        // arrived since would leave the i64 range cannot go back: it is recorded unsent.
        let refused = self.buffer.requeue(requeue, now);
        if !refused.is_empty() {
            let error = WriteError::new(
                "sum_overflow",
                "re-queued row's sum with newer increments would leave the i64 range",
            );
            let id = self.request_id(usize::MAX);
            for (key, row) in refused {
                let sum = row_sum(&row);
                self.counters.settled(-sum, Stage::Requeued);
                self.counters.settled(sum, Stage::Unsent);
                if let Some(table) = split_key(&key).and_then(|(t, _)| self.tables.get(t)) {
                    let request = Request {
                        table,
                        rows: vec![(key, row)],
                    };
                    records
                        .entry(WrapperOutcome::Unsent)
                        .or_default()
                        .extend(self.records(&request, &id, WrapperOutcome::Unsent, Some(&error)));
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
        report
    }

    fn request_id(&self, index: usize) -> String {
        format!(
            "{}/{}/w{}/{}",
            self.state.writer_id(),
            self.state.incarnation(),
            self.seq,
            index
        )
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
    /// prepared yet. A failure leaves the table without a statement: its requests are
    /// then not sent (not applied, re-queued), and the next flush tries again.
    async fn prepare(&mut self, requests: &[Request]) {
        for request in requests {
            let id = request.table.id;
            if self.statements.contains_key(&id) {
                continue;
            }
            match self.session.prepare(update_text(&request.table)).await {
                Ok(mut statement) => {
                    statement.set_is_idempotent(false);
                    statement.set_retry_policy(Some(Arc::new(FallthroughRetryPolicy::new())));
                    statement.set_consistency(consistency(self.store.consistency));
                    statement.set_request_timeout(Some(self.store.request_timeout));
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

    /// Sends every request, at most `flush.max_in_flight` at once.
    async fn send(&self, requests: &[Request], deadline: Option<Instant>) -> Vec<Sent> {
        let mut sent: Vec<Option<Sent>> = requests.iter().map(|_| None).collect();
        let mut running = FuturesUnordered::new();
        let mut started = 0;
        loop {
            while running.len() < self.flush.max_in_flight.max(1) && started < requests.len() {
                let index = started;
                let send = self.send_one(&requests[index], deadline);
                running.push(async move { (index, send.await) });
                started += 1;
            }
            match running.next().await {
                Some((index, outcome)) => sent[index] = Some(outcome),
                None => break,
            }
        }
        sent.into_iter()
            .map(|s| s.unwrap_or(Sent::NotStarted))
            .collect()
    }

    async fn send_one(&self, request: &Request, deadline: Option<Instant>) -> Sent {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Sent::NotStarted;
        }
        let Some(statement) = self.statements.get(&request.table.id) else {
            return Sent::Done(Outcome::NotAppliedTransient(WriteError::new(
                "prepare_failed",
                format!(
                    "the UPDATE of {} could not be prepared",
                    request.table.qualified_name()
                ),
            )));
        };
        let mut values = Vec::with_capacity(request.rows.len());
        for (key, row) in &request.rows {
            let Some((_, key)) = split_key(key) else {
                return Sent::Done(Outcome::NotAppliedPermanent(WriteError::new(
                    "bad_key",
                    "a buffered row key does not decode",
                )));
            };
            values.push(RowValues {
                deltas: &row.deltas,
                key,
            });
        }
        let write = async {
            let result = if let [row] = values.as_slice() {
                self.session.execute_unpaged(statement, row).await.map(drop)
            } else {
                let batch = self.counter_batch(statement, values.len());
                self.session.batch(&batch, &values).await.map(drop)
            };
            match result {
                Ok(()) => Outcome::Applied,
                Err(error) => classify::classify(&error),
            }
        };
        match deadline {
            None => Sent::Done(write.await),
            Some(deadline) => match tokio::time::timeout_at(deadline, write).await {
                Ok(outcome) => Sent::Done(outcome),
                Err(_) => Sent::Cancelled,
            },
        }
    }

    fn counter_batch(&self, statement: &PreparedStatement, rows: usize) -> Batch {
        let mut batch = Batch::new(BatchType::Counter);
        for _ in 0..rows {
            batch.append_statement(statement.clone());
        }
        batch.set_is_idempotent(false);
        batch.set_retry_policy(Some(Arc::new(FallthroughRetryPolicy::new())));
        batch.set_consistency(consistency(self.store.consistency));
        batch.set_request_timeout(Some(self.store.request_timeout));
        batch
    }
}

/// The settle step: the class a request is counted under (none if never sent), where its
/// deltas go, and the error to record.
fn settle(sent: Sent, final_flush: bool) -> (Option<OutcomeClass>, Stage, Option<WriteError>) {
    match sent {
        Sent::Done(Outcome::Applied) => (Some(OutcomeClass::Applied), Stage::Applied, None),
        Sent::Done(Outcome::NotAppliedTransient(error)) => {
            let stage = if final_flush {
                Stage::Unsent
            } else {
                Stage::Requeued
            };
            (Some(OutcomeClass::Requeued), stage, Some(error))
        }
        Sent::Done(Outcome::NotAppliedPermanent(error)) => {
            (Some(OutcomeClass::Rejected), Stage::Rejected, Some(error))
        }
        Sent::Done(Outcome::Unknown(error)) => {
            (Some(OutcomeClass::Unknown), Stage::Unknown, Some(error))
        }
        Sent::Cancelled => (
            Some(OutcomeClass::Unknown),
            Stage::Unknown,
            Some(cancelled_at_deadline()),
        ),
        Sent::NotStarted => (None, Stage::Unsent, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error() -> WriteError {
        WriteError::new("k", "t")
    }

    #[test]
    fn only_a_write_that_definitely_did_not_apply_is_sent_again() {
        let cases = [
            (
                Sent::Done(Outcome::Applied),
                false,
                Some(OutcomeClass::Applied),
                Stage::Applied,
            ),
            (
                Sent::Done(Outcome::NotAppliedTransient(error())),
                false,
                Some(OutcomeClass::Requeued),
                Stage::Requeued,
            ),
            (
                Sent::Done(Outcome::NotAppliedTransient(error())),
                true,
                Some(OutcomeClass::Requeued),
                Stage::Unsent,
            ),
            (
                Sent::Done(Outcome::NotAppliedPermanent(error())),
                false,
                Some(OutcomeClass::Rejected),
                Stage::Rejected,
            ),
            (
                Sent::Done(Outcome::Unknown(error())),
                false,
                Some(OutcomeClass::Unknown),
                Stage::Unknown,
            ),
            (
                Sent::Cancelled,
                true,
                Some(OutcomeClass::Unknown),
                Stage::Unknown,
            ),
            (Sent::NotStarted, true, None, Stage::Unsent),
        ];
        for (sent, final_flush, class, stage) in cases {
            let (c, s, _) = settle(sent, final_flush);
            assert_eq!((c, s), (class, stage));
        }
    }
}
