//! The delta ledger's metrics (exact families): its write requests by outcome, and the
//! rows waiting for it. Read from the flusher's [`Ledger`] at scrape time; every series
//! exists from the first scrape, at 0.

use std::sync::Arc;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounter, IntCounterVec, IntGauge};

use crate::sink::OutcomeClass;

use super::catalogue;
use super::ledger::Ledger;

/// Reads the delta ledger's counts at scrape time.
pub struct ExactLedgerCollector {
    ledger: Arc<Ledger>,
    writes: IntCounterVec,
    held_rows: IntGauge,
    backlog_rows: IntGauge,
    owed_days: IntGauge,
    owed_marks_queued: IntGauge,
    outcome_rows_queued: IntGauge,
    outcome_rows_dropped: IntCounter,
    descs: Vec<Desc>,
}

impl ExactLedgerCollector {
    /// A collector of `ledger`'s delta-ledger counts.
    pub fn new(ledger: Arc<Ledger>) -> ExactLedgerCollector {
        let writes = catalogue::EXACT_LEDGER_WRITES.int_counter_vec();
        let held_rows = catalogue::EXACT_LEDGER_HELD_ROWS.int_gauge();
        let backlog_rows = catalogue::EXACT_LEDGER_BACKLOG_ROWS.int_gauge();
        let owed_days = catalogue::EXACT_OWED_DAYS.int_gauge();
        let owed_marks_queued = catalogue::EXACT_OWED_MARKS_QUEUED.int_gauge();
        let outcome_rows_queued = catalogue::EXACT_OUTCOME_ROWS_QUEUED.int_gauge();
        let outcome_rows_dropped = catalogue::EXACT_OUTCOME_ROWS_DROPPED.int_counter();
        let descs = [
            writes.desc(),
            held_rows.desc(),
            backlog_rows.desc(),
            owed_days.desc(),
            owed_marks_queued.desc(),
            outcome_rows_queued.desc(),
            outcome_rows_dropped.desc(),
        ]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
        ExactLedgerCollector {
            ledger,
            writes,
            held_rows,
            backlog_rows,
            owed_days,
            owed_marks_queued,
            outcome_rows_queued,
            outcome_rows_dropped,
            descs,
        }
    }
}

impl Collector for ExactLedgerCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let counts = self.ledger.exact_ledger();
        self.writes.reset();
        for class in OutcomeClass::ALL {
            let n = counts.writes.get(&class).copied().unwrap_or(0);
            self.writes.with_label_values(&[class.label()]).inc_by(n);
        }
        self.held_rows
            .set(i64::try_from(counts.held_rows).unwrap_or(i64::MAX));
        self.backlog_rows
            .set(i64::try_from(counts.backlog_rows).unwrap_or(i64::MAX));
        let gauge = |g: &IntGauge, v: u64| g.set(i64::try_from(v).unwrap_or(i64::MAX));
        gauge(&self.owed_days, counts.owed_days);
        gauge(&self.owed_marks_queued, counts.owed_marks_queued);
        gauge(&self.outcome_rows_queued, counts.outcome_rows_queued);
        // A counter read from the flusher's running total: moved up to it.
        let seen = self.outcome_rows_dropped.get();
        self.outcome_rows_dropped
            .inc_by(counts.outcome_rows_dropped.saturating_sub(seen));
        let mut out = self.writes.collect();
        out.extend(self.outcome_rows_dropped.collect());
        for g in [
            &self.held_rows,
            &self.backlog_rows,
            &self.owed_days,
            &self.owed_marks_queued,
            &self.outcome_rows_queued,
        ] {
            out.extend(g.collect());
        }
        out
    }
}
