//! Where flushed writes go.
//!
//! A [`Sink`] sends one [`Request`] (a counter write: an UPDATE, or a COUNTER BATCH of
//! rows in one partition; a write of running totals; rows of an exact family's ledger
//! or outcomes table) and says how it ended. Everything around it — planning,
//! bounded concurrency, re-queueing, the outcome logs, the spill, accounting — is
//! the flusher's job and the same for every sink. The CQL sink is the product; the
//! in-memory sink serves tests and benchmarks, and the logging sink a dry run.
//!
//! The contract's types live here, with the trait: [`write`](mod@write) (what is sent),
//! [`totals`] (what is sent for `writer_totals` families) and [`outcome`] (how it ended,
//! and the closed set of outcome classes); [`exact`] holds the rows of the exact
//! families' regular tables (the delta ledger, the outcomes table). [`bounded`] is the
//! sending loop every path shares: at most N requests in flight, until a cut-off.

pub mod bounded;
pub mod cql;
pub mod exact;
pub mod memory;
pub mod outcome;
pub mod totals;
pub mod write;

use std::future::Future;

use crate::vocabulary::{FamilyId, Granularity};

pub use self::exact::{LedgerRow, OutcomeRow};
pub use self::memory::MemorySink;
pub use self::outcome::{Outcome, OutcomeClass, WriteError};
pub use self::totals::{TotalRow, TotalsWrite};
pub use self::write::{PartitionWrite, PlannedWrite, RowDelta, planned};

/// One request a sink is asked to send: the kind of write, and what it carries. A sink
/// implements one method, [`Sink::send`], over every kind, so a sink that wraps another
/// (connecting lazily, measuring) forwards a new kind of write without a change.
#[derive(Clone, Copy, Debug)]
pub enum Request<'a> {
    /// Counter deltas of one partition: never idempotent.
    Counter(&'a PartitionWrite),
    /// One writer's running totals of rows of one partition (`writer_totals` families):
    /// idempotent, sent again after any outcome but applied.
    Totals(&'a TotalsWrite),
    /// Rows of the delta ledger, all of one ledger partition (family, day, bucket), with
    /// idempotent INSERTs. Only [`Outcome::Applied`] confirms them; any other outcome (a
    /// timeout included) means "send the same rows again later".
    Ledger(&'a [LedgerRow]),
    /// Rows of the outcomes table, with idempotent INSERTs; outcomes as for the ledger.
    Outcomes(&'a [OutcomeRow]),
}

impl Request<'_> {
    /// The family table the request writes (its minute or day table), for a counter or
    /// totals write; `None` for the exact families' side tables.
    pub fn family_table(&self) -> Option<(FamilyId, Granularity)> {
        match self {
            Request::Counter(write) => Some((write.family, write.table)),
            Request::Totals(write) => Some((write.family, write.table)),
            Request::Ledger(_) | Request::Outcomes(_) => None,
        }
    }

    /// The answer of a sink that does not keep this kind's table: refused for good, so
    /// that, for example, an exact family's counter writes wait for a ledger rather than
    /// go unrecorded.
    pub fn unsupported(&self) -> Outcome {
        let (kind, text) = match self {
            Request::Counter(_) => ("no_counter_tables", "this sink writes no counter deltas"),
            Request::Totals(_) => ("no_totals_tables", "this sink writes no running totals"),
            Request::Ledger(_) => ("no_ledger", "this sink keeps no delta ledger"),
            Request::Outcomes(_) => ("no_outcomes_table", "this sink keeps no outcomes table"),
        };
        Outcome::NotAppliedPermanent(WriteError::new(kind, text))
    }
}

/// A destination for flushed writes.
pub trait Sink: Send + Sync + 'static {
    /// Sends one request and classifies its outcome. It must not retry a request whose
    /// outcome is unknown: the flusher decides what happens next (see each
    /// [`Request`] kind for what its outcomes mean). A sink without a kind's table
    /// answers [`Request::unsupported`].
    fn send(&self, request: Request<'_>) -> impl Future<Output = Outcome> + Send;

    /// Sends one counter write ([`Request::Counter`]).
    fn write(&self, write: &PartitionWrite) -> impl Future<Output = Outcome> + Send {
        self.send(Request::Counter(write))
    }

    /// Writes rows of the delta ledger ([`Request::Ledger`]).
    fn write_ledger(&self, rows: &[LedgerRow]) -> impl Future<Output = Outcome> + Send {
        self.send(Request::Ledger(rows))
    }

    /// Writes rows of the outcomes table ([`Request::Outcomes`]).
    fn write_outcomes(&self, rows: &[OutcomeRow]) -> impl Future<Output = Outcome> + Send {
        self.send(Request::Outcomes(rows))
    }

    /// Sends one write of running totals ([`Request::Totals`]).
    fn write_totals(&self, write: &TotalsWrite) -> impl Future<Output = Outcome> + Send {
        self.send(Request::Totals(write))
    }
}

/// A sink that only logs each write (at `info`) and reports it applied: a dry run that
/// shows what would be sent.
#[derive(Clone, Debug, Default)]
pub struct LogSink;

impl Sink for LogSink {
    async fn send(&self, request: Request<'_>) -> Outcome {
        match request {
            Request::Counter(write) => {
                let key: Vec<&str> = crate::series::fields(&write.series).collect();
                tracing::info!(
                    family = write.family.0,
                    table = write.table.as_str(),
                    key = ?key,
                    shard = ?write.shard,
                    rows = write.rows.len(),
                    delta_sum = %write.sum(),
                    "Would write."
                );
            }
            Request::Totals(write) => {
                let key: Vec<&str> = crate::series::fields(&write.series).collect();
                tracing::info!(
                    family = write.family.0,
                    table = write.table.as_str(),
                    key = ?key,
                    writer = %write.writer,
                    timestamp = write.timestamp,
                    rows = write.rows.len(),
                    "Would write totals."
                );
            }
            Request::Ledger(rows) => {
                for row in rows {
                    tracing::info!(family = %row.family, key = %row.key, minute = row.minute.0, deltas = ?row.delta_map(), "Would write a ledger row.");
                }
            }
            Request::Outcomes(rows) => {
                for row in rows {
                    tracing::info!(family = %row.family, request_id = %row.request_id, outcome = %row.outcome, "Would write an outcome row.");
                }
            }
        }
        Outcome::Applied
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::Columns;
    use crate::vocabulary::{FamilyId, Granularity};

    #[tokio::test]
    async fn the_logging_sink_reports_every_write_applied() {
        let write = PartitionWrite {
            epoch: None,
            family: FamilyId(0),
            table: Granularity::Minute,
            series: crate::series::encode(["a", "b:c"]).into_boxed_slice(),
            shard: None,
            rows: vec![RowDelta {
                bucket: 1,
                columns: Columns::One(5),
                requeued_since: 0,
            }],
        };
        assert_eq!(LogSink.write(&write).await, Outcome::Applied);
    }
}
