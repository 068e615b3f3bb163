//! Counting without counters (seed 002): the `writer_totals` counting mode.
//!
//! In a `writer_totals` family each writer keeps, for every row it counts (key x minute,
//! key x day), its running absolute total since its incarnation started, and writes that
//! total into a row of its own: the tables are regular tables with `bigint` columns and a
//! `writer` clustering column. A read sums the writers. Every write is idempotent and
//! carries its write time from the writer's monotonic clock (`USING TIMESTAMP`), so a
//! write may be retried after any error, timeouts included, and an older total arriving
//! late never replaces a newer one: there are no unknown outcomes to log, and a new
//! incarnation starts a new writer column at zero without reading anything back.
//!
//! The flusher drains the buffer as for counters and hands this path the rows of
//! `writer_totals` families ([`Totals::take`]); the rest of a flush is [`Totals::flush`]:
//!
//! - `book`: the running totals per open row, the rows the store may lack, back-off,
//!   and the release of closed rows (memory is charged to the buffer's budget);
//! - `clock`: the writer's monotonic write times;
//! - `decide`: the settle step (outcome → confirm, retry, spill or reject), pure;
//! - `send`: bounded concurrency up to the shutdown deadline;
//! - [`records`], `spill`: spilled totals and their replay, idempotent by construction.
//!
//! Accounting: a drained delta of such a family stays in the flusher's `in_flight` stage
//! (pending) until a write that covers it applies; the newly applied part of a confirmed
//! total moves to `applied`. A crash loses what was not applied yet (bounded by what
//! `status.json` reports after each flush); the rows the crashed incarnation did write stay
//! in its writer column and keep counting.

mod book;
mod clock;
mod decide;
pub mod records;
mod send;
mod spill;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use crate::aggregate::{Columns, Row, RowKey, Slot};
use crate::bucket;
use crate::config::{CountingMode, FlushConfig};
use crate::engine::Engine;
use crate::family::FamilyDef;
use crate::sink::{Outcome, OutcomeClass, Sink, TotalRow, TotalsWrite, WriteError};
use crate::state::{OutcomeLog, StateDir};
use crate::telemetry::Ledger;
use crate::vocabulary::{DropReason, Granularity};

use self::book::{Book, Closing, RowId, RowRef};
use self::clock::WriterClock;
use self::decide::{Ended, RowAction, RowFacts};
use self::records::{Recorder, SpilledRow, TotalRecord};
use self::spill::SpillFiles;

pub use self::send::Cutoff;

/// What the totals part of one flush did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TotalsReport {
    /// Write requests sent (or due and cut off by the deadline).
    pub writes: usize,
    /// Requests applied.
    pub applied: usize,
    /// Requests that did not apply, or may not have (retried later).
    pub failed: usize,
    /// Requests refused permanently.
    pub rejected: usize,
    /// Rows whose newest total went to the spill file.
    pub rows_spilled: usize,
    /// Closed rows released from memory.
    pub rows_released: usize,
    /// Rows replayed from a spill file that applied.
    pub rows_replayed: usize,
}

/// Where replayed rows come from, which decides how they are counted.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// Spilled by an earlier process: accepted anew (`replayed`).
    PreviousRun,
    /// Spilled by this process: back from `spilled` to pending.
    ThisRun,
}

/// A replay file and its records (`None` once applied or set aside).
struct ReplayFile {
    path: PathBuf,
    records: Vec<Option<TotalRecord>>,
}

/// A spilled total waiting to be written again, with its own writer and write time.
struct ReplayRow {
    file: usize,
    index: usize,
    id: RowId,
    writer: Arc<str>,
    timestamp: i64,
    total: Columns,
    unconfirmed: Columns,
    failures: u32,
    not_before: u64,
}

/// What each planned write stands for.
enum Planned {
    /// Rows of the book.
    Book,
    /// One replayed row (index into the replay rows).
    Replay(usize),
}

/// The `writer_totals` path of one writer: its running totals, its clock, its spill.
pub struct Totals {
    engine: Arc<Engine>,
    book: Book,
    clock: WriterClock,
    /// This incarnation's writer column: writer id, incarnation, start nonce.
    writer: Arc<str>,
    writer_id: String,
    incarnation: u64,
    files: Vec<ReplayFile>,
    replays: Vec<ReplayRow>,
    spill: SpillFiles,
    max_batch_rows: usize,
    max_in_flight: usize,
    requeue_max_age_secs: u32,
    /// Whether some family counts with writer totals.
    enabled: bool,
    /// Whether the last flush saw the store apply and nothing fail: the moment to bring
    /// rows spilled during an outage back.
    store_answered: bool,
}

impl Totals {
    /// The totals path of the writer owning `state`; replays what earlier runs spilled.
    pub fn open(
        engine: Arc<Engine>,
        state: &mut StateDir,
        flush: &FlushConfig,
        ledger: &Ledger,
    ) -> Totals {
        let writer: Arc<str> = format!(
            "{}/{}/{:08x}",
            state.writer_id(),
            state.incarnation(),
            fastrand::u32(..)
        )
        .into();
        let enabled = engine.families().any_in(CountingMode::WriterTotals);
        let max_past = engine.aggregator().limits().timestamp_max_past;
        let max_past_secs = i64::try_from(max_past.as_secs()).unwrap_or(i64::MAX);
        let mut totals = Totals {
            book: Book::new(Closing { max_past_secs }),
            clock: WriterClock::default(),
            writer,
            writer_id: state.writer_id().to_owned(),
            incarnation: state.incarnation(),
            files: Vec::new(),
            replays: Vec::new(),
            spill: SpillFiles::new(state.dir()),
            max_batch_rows: flush.max_batch_rows.max(1),
            max_in_flight: flush.max_in_flight.max(1),
            requeue_max_age_secs: u32::try_from(flush.requeue_max_age.as_secs())
                .unwrap_or(u32::MAX),
            enabled,
            store_answered: false,
            engine,
        };
        let tag = format!("{}-0", totals.incarnation);
        if let Err(error) = totals.spill.take_spill(&tag) {
            tracing::error!(%error, "Could not take totals.spill.jsonl for replay; it waits for the next start.");
        }
        match totals.spill.replay_files() {
            Ok(paths) => {
                for path in paths {
                    totals.load(path, Origin::PreviousRun, ledger, state, 0);
                }
            }
            Err(error) => tracing::error!(%error, "Could not list the totals replay files."),
        }
        if !totals.replays.is_empty() {
            tracing::info!(
                rows = totals.replays.len(),
                "Replaying spilled writer totals."
            );
        }
        totals
    }

    /// This incarnation's writer column value.
    pub fn writer(&self) -> &str {
        &self.writer
    }

    /// Whether the totals path has anything to do: a `writer_totals` family, or spilled
    /// totals to replay.
    pub fn is_active(&self) -> bool {
        self.enabled || !self.replays.is_empty() || self.book.held() > 0
    }

    /// Rows whose newest total the store may lack (held or replayed), and the signed sum
    /// of their minute-table part not known applied: what a crash now would lose (the
    /// replayed ones excepted: their files stay until they apply).
    pub fn pending(&self) -> (usize, i128) {
        (
            self.book.unwritten(),
            self.book.unconfirmed_sum(Granularity::Minute),
        )
    }

    /// Rows held in memory, and of those the ones the store may lack.
    pub fn rows(&self) -> (usize, usize) {
        (self.book.held(), self.book.unwritten())
    }

    /// The one point where the flush path splits by counting mode: the drained rows of
    /// `writer_totals` families are added to their running totals; the others are
    /// returned for the counter path. A delta that cannot be added (the budget is full,
    /// its row was released, a total would overflow) is dropped and counted.
    pub fn take(
        &mut self,
        rows: impl Iterator<Item = (RowKey, Row)>,
        ledger: &Ledger,
    ) -> Vec<(RowKey, Row)> {
        let families = self.engine.families();
        if !self.enabled {
            return rows.collect();
        }
        let mut counters = Vec::new();
        let mut absorbed = [0_i128; 2];
        for (key, row) in rows {
            if families.mode(key.family()) != CountingMode::WriterTotals {
                counters.push((key, row));
                continue;
            }
            let family = key.family();
            let slot = key.slot();
            let series = key.into_series();
            let targets: [Option<(Granularity, u32)>; 2] = match slot {
                Slot::Both(m) => [
                    Some((Granularity::Minute, m.0)),
                    Some((Granularity::Day, m.day().0)),
                ],
                Slot::MinuteOnly(m) => [Some((Granularity::Minute, m.0)), None],
                Slot::DayOnly(d) => [Some((Granularity::Day, d.0)), None],
            };
            let sum = row.columns.sum();
            for (table, bucket) in targets.into_iter().flatten() {
                let row_ref = RowRef {
                    family,
                    table,
                    series: &series,
                    bucket,
                };
                match self
                    .book
                    .absorb(row_ref, &row.columns, self.engine.aggregator())
                {
                    Ok(()) => absorbed[table.index()] += sum,
                    Err(reason) => {
                        ledger.update(table, |s| s.dropped += sum);
                        ledger.count_late_drop(reason, 1);
                    }
                }
            }
        }
        for table in Granularity::ALL {
            ledger.update(table, |s| s.in_flight += absorbed[table.index()]);
        }
        counters
    }

    /// Writes the rows the store may lack (their newest totals) and the spilled totals
    /// to replay, then settles every write: confirmed, retried later, spilled (at
    /// shutdown, with `last`), or rejected.
    pub async fn flush<S: Sink>(
        &mut self,
        sink: &S,
        cutoff: &mut impl Cutoff,
        ledger: &Ledger,
        state: &mut StateDir,
        seq: u64,
        last: bool,
    ) -> TotalsReport {
        let now = SystemTime::now();
        let now_secs = bucket::unix_secs(now);
        let mut report = TotalsReport::default();
        if !last {
            report.rows_released = self.book.release_closed(now_secs, self.engine.aggregator());
            if self.store_answered && self.spill.has_spill() {
                let tag = format!("{}-{seq}", self.incarnation);
                match self.spill.take_spill(&tag) {
                    Ok(Some(path)) => self.load(path, Origin::ThisRun, ledger, state, seq),
                    Ok(None) => {}
                    Err(error) => {
                        tracing::error!(%error, "Could not take totals.spill.jsonl for replay.")
                    }
                }
            }
        }
        let (writes, planned) = self.plan(seq, last);
        report.writes = writes.len();
        let results = send::send_all(sink, writes, self.max_in_flight, cutoff).await;
        let time = bucket::rfc3339(SystemTime::now());
        let now_unix_secs = u32::try_from(now_secs).unwrap_or(u32::MAX);
        let mut to_spill: Vec<(TotalRecord, Granularity, i128)> = Vec::new();
        let mut rejected_any = false;
        for ((write, ended), planned) in results.into_iter().zip(planned) {
            if let Some(class) = decide::counted(&ended) {
                ledger.count_write(&self.table_name(&write), class);
                match class {
                    OutcomeClass::Applied => report.applied += 1,
                    OutcomeClass::Rejected => report.rejected += 1,
                    OutcomeClass::Requeued | OutcomeClass::Unknown => report.failed += 1,
                }
            } else {
                report.failed += 1;
            }
            let by = Recorder {
                writer: &self.writer_id,
                incarnation: self.incarnation,
                flush_seq: seq,
                time: &time,
            };
            match planned {
                Planned::Book if matches!(ended, Ended::Done(Outcome::Applied)) => {
                    let mut applied = 0;
                    for row in &write.rows {
                        let row_ref = RowRef {
                            family: write.family,
                            table: write.table,
                            series: &write.series,
                            bucket: row.bucket,
                        };
                        applied += self.book.confirm(row_ref, &row.totals);
                    }
                    ledger.update(write.table, |s| {
                        s.applied += applied;
                        s.in_flight -= applied;
                    });
                }
                Planned::Book => {
                    for row in &write.rows {
                        let id = RowId {
                            family: write.family,
                            table: write.table,
                            series: write.series.clone(),
                            bucket: row.bucket,
                        };
                        let facts = RowFacts {
                            final_flush: last,
                            closed: self.book.is_closed(&id, now_secs),
                            failing_since: self.book.failing_since(&id),
                            now_unix_secs,
                            requeue_max_age_secs: self.requeue_max_age_secs,
                        };
                        match decide::decide(&ended, &facts) {
                            RowAction::Confirm => {
                                let applied = self.book.confirm(id.as_ref(), &row.totals);
                                ledger.update(id.table, |s| {
                                    s.applied += applied;
                                    s.in_flight -= applied;
                                });
                            }
                            RowAction::Retry => self.book.failed(&id, seq, now_unix_secs),
                            RowAction::Spill { release } => {
                                let spilled =
                                    self.book.spill(&id, release, self.engine.aggregator());
                                let timestamp = self.clock.tick(clock::now_micros());
                                let record = records::total_record(
                                    &SpilledRow {
                                        id: &id,
                                        writer: &self.writer,
                                        total: &spilled.total,
                                        unconfirmed: &spilled.unconfirmed,
                                        timestamp,
                                        error: error_of(&ended).as_ref(),
                                    },
                                    self.family(&id),
                                    &time,
                                );
                                to_spill.push((record, id.table, spilled.unconfirmed.sum()));
                            }
                            RowAction::Reject(error) => {
                                let refused = self.book.reject(&id);
                                let record = records::rejected_record(
                                    &id,
                                    self.family(&id),
                                    &refused,
                                    &error,
                                    &by,
                                );
                                let appended = state.append(OutcomeLog::Rejected, &[record]);
                                ledger.count_appended(OutcomeLog::Rejected, &appended);
                                rejected_any = true;
                                let sum = refused.sum();
                                ledger.update(id.table, |s| {
                                    s.rejected += sum;
                                    s.in_flight -= sum;
                                });
                                tracing::warn!(table = %self.table_name(&write), kind = error.kind, error = %error.text, "Writer totals rejected; the unapplied part is recorded in rejected.jsonl.");
                            }
                        }
                    }
                }
                Planned::Replay(index) => {
                    let facts = RowFacts {
                        final_flush: last,
                        closed: false,
                        failing_since: None,
                        now_unix_secs,
                        requeue_max_age_secs: self.requeue_max_age_secs,
                    };
                    match decide::decide(&ended, &facts) {
                        RowAction::Confirm => {
                            self.replay_done(index, ledger, |s, u| s.applied += u);
                            report.rows_replayed += 1;
                        }
                        RowAction::Reject(error) => {
                            let row = &self.replays[index];
                            let record = records::rejected_record(
                                &row.id,
                                self.family(&row.id),
                                &row.unconfirmed,
                                &error,
                                &by,
                            );
                            let appended = state.append(OutcomeLog::Rejected, &[record]);
                            ledger.count_appended(OutcomeLog::Rejected, &appended);
                            rejected_any = true;
                            self.replay_done(index, ledger, |s, u| s.rejected += u);
                        }
                        // At shutdown the row stays in its file (counted below).
                        RowAction::Spill { .. } => {}
                        RowAction::Retry => {
                            let row = &mut self.replays[index];
                            row.failures = row.failures.saturating_add(1);
                            row.not_before = book::next_attempt(row.failures, seq);
                        }
                    }
                }
            }
        }
        report.rows_spilled = to_spill.len();
        self.write_spill(to_spill, ledger);
        if rejected_any {
            for (log, error) in state.sync_logs() {
                tracing::error!(%error, file = log.file_name(), "Could not sync an outcome log.");
            }
        }
        self.finish_replays(last, ledger);
        self.store_answered = report.applied > 0 && report.failed == 0;
        ledger.set_totals_rows(self.book.held() as u64, self.book.unwritten() as u64);
        report
    }

    /// The writes of flush `seq`: the book's due rows grouped by partition (at most
    /// `max_batch_rows` a write, each with the next write time), and one write per due
    /// replayed row, with its own writer and write time.
    fn plan(&mut self, seq: u64, last: bool) -> (Vec<TotalsWrite>, Vec<Planned>) {
        let mut writes: Vec<TotalsWrite> = Vec::new();
        let mut planned = Vec::new();
        // Sorted by row id: rows of one partition are adjacent.
        let due = self.book.take_due(seq, last);
        let mut current: Option<(RowId, Vec<TotalRow>)> = None;
        let flush_group =
            |group: Option<(RowId, Vec<TotalRow>)>, clock: &mut WriterClock, writer: &Arc<str>| {
                group.map(|(first, rows)| TotalsWrite {
                    family: first.family,
                    table: first.table,
                    series: first.series,
                    writer: writer.clone(),
                    timestamp: clock.tick(clock::now_micros()),
                    rows,
                })
            };
        for due in due {
            let same = current.as_ref().is_some_and(|(first, rows)| {
                first.family == due.id.family
                    && first.table == due.id.table
                    && first.series == due.id.series
                    && first.partition_bucket() == due.id.partition_bucket()
                    && rows.len() < self.max_batch_rows
            });
            if !same {
                if let Some(write) = flush_group(current.take(), &mut self.clock, &self.writer) {
                    writes.push(write);
                    planned.push(Planned::Book);
                }
                current = Some((due.id.clone(), Vec::new()));
            }
            if let Some((_, rows)) = current.as_mut() {
                rows.push(TotalRow {
                    bucket: due.id.bucket,
                    totals: due.total,
                });
            }
        }
        if let Some(write) = flush_group(current.take(), &mut self.clock, &self.writer) {
            writes.push(write);
            planned.push(Planned::Book);
        }
        for (index, row) in self.replays.iter().enumerate() {
            if !last && row.not_before > seq {
                continue;
            }
            writes.push(TotalsWrite {
                family: row.id.family,
                table: row.id.table,
                series: row.id.series.clone(),
                writer: row.writer.clone(),
                timestamp: row.timestamp,
                rows: vec![TotalRow {
                    bucket: row.id.bucket,
                    totals: row.total.clone(),
                }],
            });
            planned.push(Planned::Replay(index));
        }
        (writes, planned)
    }

    /// Reads a replay file and queues its rows, counting them by where they come from.
    fn load(
        &mut self,
        path: PathBuf,
        origin: Origin,
        ledger: &Ledger,
        state: &mut StateDir,
        seq: u64,
    ) {
        let loaded = match self.spill.load(&path) {
            Ok(loaded) => loaded,
            Err(error) => {
                tracing::error!(%error, file = %path.display(), "Could not read a totals replay file; it waits for the next start.");
                return;
            }
        };
        if loaded.corrupt_lines > 0 {
            tracing::error!(
                lines = loaded.corrupt_lines,
                "Unreadable lines of a totals spill file were set aside in totals.spill.corrupt.jsonl."
            );
        }
        let file = self.files.len();
        let time = bucket::rfc3339(SystemTime::now());
        let mut records = Vec::with_capacity(loaded.records.len());
        for (index, record) in loaded.records.into_iter().enumerate() {
            let unconfirmed: i128 = record.unconfirmed.values().map(|v| i128::from(*v)).sum();
            let table = records::granularity_of(&record);
            ledger.update(table, |s| match origin {
                Origin::PreviousRun => s.replayed += unconfirmed,
                Origin::ThisRun => s.spilled -= unconfirmed,
            });
            match records::from_record(&record, self.engine.families()) {
                Ok(replayed) => {
                    ledger.update(table, |s| s.in_flight += unconfirmed);
                    self.replays.push(ReplayRow {
                        file,
                        index,
                        id: replayed.id,
                        writer: record.writer.as_str().into(),
                        timestamp: record.timestamp,
                        total: replayed.total,
                        unconfirmed: replayed.unconfirmed,
                        failures: 0,
                        not_before: 0,
                    });
                    records.push(Some(record));
                }
                Err(why) => {
                    let by = Recorder {
                        writer: &self.writer_id,
                        incarnation: self.incarnation,
                        flush_seq: seq,
                        time: &time,
                    };
                    let rejected = records::unmappable_record(&record, &why, &by);
                    let appended = state.append(OutcomeLog::Rejected, &[rejected]);
                    ledger.count_appended(OutcomeLog::Rejected, &appended);
                    ledger.update(table, |s| s.rejected += unconfirmed);
                    tracing::warn!(%why, family = record.family, "A spilled writer total cannot be replayed; recorded in rejected.jsonl.");
                    records.push(None);
                }
            }
        }
        self.files.push(ReplayFile { path, records });
    }

    /// A replayed row is settled: its unconfirmed part leaves the pending stage for the
    /// stage `settle` adds it to.
    fn replay_done(
        &mut self,
        index: usize,
        ledger: &Ledger,
        settle: impl Fn(&mut crate::telemetry::Settled, i128),
    ) {
        let row = &self.replays[index];
        let unconfirmed = row.unconfirmed.sum();
        ledger.update(row.id.table, |s| {
            settle(s, unconfirmed);
            s.in_flight -= unconfirmed;
        });
        self.files[row.file].records[row.index] = None;
    }

    /// Deletes the replay files whose rows all applied; at shutdown, rewrites the others
    /// with the rows left, which count as spilled again. Forgets settled rows and files.
    fn finish_replays(&mut self, last: bool, ledger: &Ledger) {
        let mut keep = vec![false; self.files.len()];
        for (i, file) in self.files.iter().enumerate() {
            let left: Vec<TotalRecord> = file.records.iter().flatten().cloned().collect();
            if left.is_empty() {
                if let Err(error) = self.spill.remove(&file.path) {
                    tracing::warn!(%error, file = %file.path.display(), "Could not delete a replayed totals file; the next start replays it again (harmlessly).");
                }
            } else if last {
                for record in &left {
                    let unconfirmed: i128 =
                        record.unconfirmed.values().map(|v| i128::from(*v)).sum();
                    ledger.update(records::granularity_of(record), |s| {
                        s.spilled += unconfirmed;
                        s.in_flight -= unconfirmed;
                    });
                }
                if let Err(error) = self.spill.rewrite(&file.path, &left) {
                    tracing::warn!(%error, file = %file.path.display(), "Could not rewrite a totals replay file; the next start replays all of it again (harmlessly).");
                }
            } else {
                keep[i] = true;
            }
        }
        let mut renumber = vec![None; self.files.len()];
        let mut kept = Vec::new();
        for (i, file) in std::mem::take(&mut self.files).into_iter().enumerate() {
            if keep[i] {
                renumber[i] = Some(kept.len());
                kept.push(file);
            }
        }
        self.files = kept;
        let files = &self.files;
        self.replays.retain_mut(|row| match renumber[row.file] {
            Some(file) if files[file].records[row.index].is_some() => {
                row.file = file;
                true
            }
            _ => false,
        });
    }

    /// Appends spilled totals; a failed write drops them, counted.
    fn write_spill(&mut self, spilled: Vec<(TotalRecord, Granularity, i128)>, ledger: &Ledger) {
        if spilled.is_empty() {
            return;
        }
        let records: Vec<TotalRecord> = spilled.iter().map(|(r, _, _)| r.clone()).collect();
        match self.spill.append(&records) {
            Ok(()) => {
                for (_, table, sum) in &spilled {
                    ledger.update(*table, |s| {
                        s.spilled += sum;
                        s.in_flight -= sum;
                    });
                }
                tracing::warn!(
                    rows = records.len(),
                    "Writer totals spilled to disk; they are written again once the store answers, or at the next start."
                );
            }
            Err(error) => {
                for (_, table, sum) in &spilled {
                    ledger.update(*table, |s| {
                        s.dropped += sum;
                        s.in_flight -= sum;
                    });
                }
                ledger.count_late_drop(DropReason::SpillFailed, records.len() as u64);
                tracing::error!(%error, rows = records.len(), "Could not write totals.spill.jsonl; these totals are lost.");
            }
        }
    }

    fn family(&self, id: &RowId) -> &FamilyDef {
        self.engine.families().get(id.family)
    }

    /// `keyspace.table` of a write.
    fn table_name(&self, write: &TotalsWrite) -> String {
        let family = self.engine.families().get(write.family);
        match write.table {
            Granularity::Minute => family.minute_table.to_string(),
            Granularity::Day => family.day_table.to_string(),
        }
    }
}

impl Drop for Totals {
    fn drop(&mut self) {
        self.book.release_all(self.engine.aggregator());
    }
}

/// The error a spilled row carries: the store's, or the deadline's.
fn error_of(ended: &Ended) -> Option<WriteError> {
    match ended {
        Ended::Done(outcome) => match outcome {
            Outcome::Applied => None,
            Outcome::NotAppliedTransient(e)
            | Outcome::NotAppliedPermanent(e)
            | Outcome::Unknown(e) => Some(e.clone()),
        },
        Ended::Cancelled => Some(WriteError::new(
            "cancelled_at_deadline",
            "the shutdown deadline passed while the request was in flight",
        )),
        Ended::NotStarted => None,
    }
}
