//! Where flushed writes go.
//!
//! A [`Sink`] sends one [`PartitionWrite`] (one request: an UPDATE, or a COUNTER BATCH
//! of rows in one partition) and says how it ended. Everything around it — planning,
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

pub use self::exact::{LedgerRow, OutcomeRow};
pub use self::memory::MemorySink;
pub use self::outcome::{Outcome, OutcomeClass, WriteError};
pub use self::totals::{TotalRow, TotalsWrite};
pub use self::write::{PartitionWrite, RowDelta};

/// A destination for flushed writes.
pub trait Sink: Send + Sync + 'static {
    /// Sends one write request and classifies its outcome. It must not retry a request
    /// whose outcome is unknown; the flusher decides what happens next.
    fn write(&self, write: &PartitionWrite) -> impl Future<Output = Outcome> + Send;

    /// Writes rows of the delta ledger, all of one ledger partition (family, day,
    /// bucket), with idempotent INSERTs. Only [`Outcome::Applied`] confirms them; any
    /// other outcome (a timeout included) means "send the same rows again later". A sink
    /// without a ledger refuses, so an exact family's counter writes wait rather than go
    /// unrecorded.
    fn write_ledger(&self, rows: &[LedgerRow]) -> impl Future<Output = Outcome> + Send {
        let _ = rows;
        async {
            Outcome::NotAppliedPermanent(WriteError::new(
                "no_ledger",
                "this sink keeps no delta ledger",
            ))
        }
    }

    /// Writes rows of the outcomes table with idempotent INSERTs; outcomes as for
    /// [`Sink::write_ledger`].
    fn write_outcomes(&self, rows: &[OutcomeRow]) -> impl Future<Output = Outcome> + Send {
        let _ = rows;
        async {
            Outcome::NotAppliedPermanent(WriteError::new(
                "no_outcomes_table",
                "this sink keeps no outcomes table",
            ))
        }
    }
    /// Sends one write of running totals (`writer_totals` families) and classifies its
    /// outcome. The write is idempotent: the totals path sends it again after any outcome
    /// but applied. Required, so that a sink wrapping another forwards it.
    fn write_totals(&self, write: &TotalsWrite) -> impl Future<Output = Outcome> + Send;
}

/// A sink that only logs each write (at `info`) and reports it applied: a dry run that
/// shows what would be sent.
#[derive(Clone, Debug, Default)]
pub struct LogSink;

impl Sink for LogSink {
    async fn write(&self, write: &PartitionWrite) -> Outcome {
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
        Outcome::Applied
    }

    async fn write_totals(&self, write: &TotalsWrite) -> Outcome {
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
        Outcome::Applied
    }

    async fn write_ledger(&self, rows: &[LedgerRow]) -> Outcome {
        for row in rows {
            tracing::info!(family = %row.family, key = %row.key, minute = row.minute.0, deltas = ?row.delta_map(), "Would write a ledger row.");
        }
        Outcome::Applied
    }

    async fn write_outcomes(&self, rows: &[OutcomeRow]) -> Outcome {
        for row in rows {
            tracing::info!(family = %row.family, request_id = %row.request_id, outcome = %row.outcome, "Would write an outcome row.");
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
