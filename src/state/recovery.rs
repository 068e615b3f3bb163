//! Finishing a flush the previous process did not finish.
//!
//! A committed group without `End` in the journal is a flush that was killed after its
//! group commit. Each of its requests gets exactly one home, decided from what is
//! durable and nothing else:
//!
//! | what the journal and the files say | what recovery does |
//! |---|---|
//! | outcome `applied`, or `dropped` (counted by that process) | nothing |
//! | its rows are in the flush's spill segment | nothing (the segment owns them) |
//! | outcome "definitely not applied" or "not started" | spilled, in `spill.<inc>.<seq>.recovered.jsonl` |
//! | no outcome, at or past the group's last start bound (never started) | spilled, as "not started" |
//! | outcome `rejected` | `rejected.jsonl`, unless already there |
//! | outcome `unknown`, or no outcome (in flight) | `unknown.jsonl` (`in_flight_at_crash` when no outcome), unless already there |
//!
//! Rows are spilled only from the journal's last group: in an earlier one, rows that
//! went back to memory may have been sent again by a later group, so each of its
//! requests not known applied or rejected is logged as unknown. [`home_of`] is this
//! table, and `countersink outcomes` reads the journal through it too.
//!
//! "Already there" is read from the outcome logs from the offsets the flush recorded
//! (`LogsAt`) before appending, by request id and row; when it recorded none (killed
//! before it appended, or its journal refused the record), from its requests' records in
//! the whole current files. So recovery can itself be killed at any step and
//! run again: the recovered segment is written atomically and skipped when present, and
//! records already appended are not appended twice. It ends by marking the flush settled
//! (`End`). A group whose commit did not complete sent nothing: its rows were only in
//! memory and are counted by the lost-at-crash figure.
//!
//! A totals group (writes of running totals, `writer_totals`) needs little of this: each
//! of its writes is idempotent by its write time, so every intent not known applied or
//! rejected is spilled, in any group, to `spill.<inc>.<seq>.recovered.totals.jsonl`
//! (its header naming the cursor the group consumed), unless the flush's own totals
//! segment holds it, and written again by the next start in its own writer column with
//! its own write time. Rows a replay read back from the spill move there whatever room
//! `state.max_spill_bytes` leaves (the cursor the group consumed has passed them); rows
//! the flush planned from memory get the room left, beyond it dropped and counted, as the
//! killed process would have. Reading an intent as records is the counting mode's: the opener
//! hands recovery a [`FinishKinds`] (`crate::totals` implements it), which recovery
//! calls for each such group, in journal order, before it ends the group. Nothing of it
//! is logged as unknown; the records of its `rejected` intents go to `rejected.jsonl`
//! here, unless already there, as above (the flush journals a refusal as it arrives and
//! logs it after: a kill can fall in between).

use std::collections::HashSet;
use std::path::Path;

use crate::test_hooks::crash_point;
use crate::vocabulary::Granularity;

use super::journal::{FlushGroup, KindIntent, Settled};
use super::record::{ErrorInfo, RecordOutcome, RecordSource, WriteRecord, records_of};
use super::spill::SegmentId;
use super::{OutcomeLog, StateDir};

/// What recovery did for the previous process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Flushes found unsettled and finished.
    pub flushes: u64,
    /// Rows logged as unknown (in flight when the process stopped, or unknown and not yet
    /// logged), and their delta sums (minute, day).
    pub unknown_rows: u64,
    /// Delta sums of those rows, per granularity.
    pub unknown_sums: [i128; Granularity::COUNT],
    /// Rows logged as rejected.
    pub rejected_rows: u64,
    /// Rows definitely not applied, spilled for replay.
    pub spilled_rows: u64,
    /// Rows that did not fit in the spill (`state.max_spill_bytes`): dropped.
    pub dropped_rows: u64,
    /// Delta sums of the dropped rows, per granularity.
    pub dropped_sums: [i128; Granularity::COUNT],
    /// Rows of a group commit that did not complete (never sent; lost with memory). An
    /// opener without the kinds' finisher ([`NoKinds`]) counts none of a kind's intents.
    pub uncommitted_rows: u64,
    /// Running totals (`writer_totals`) the killed flush sent or was sending, not known
    /// applied: spilled to its recovered totals segment, written again by this start.
    pub totals_rows: u64,
    /// The parts of those totals not known applied, summed per granularity (minute,
    /// day): what this start writes again beyond what the store may already hold.
    pub totals_sums: [i128; Granularity::COUNT],
    /// Bytes of a torn journal tail cut off.
    pub torn_journal_bytes: u64,
    /// The records this recovery logged (unknown, rejected), for the exact families'
    /// outcomes table.
    pub records: Vec<WriteRecord>,
}

/// What a kind's finisher found of one group of its own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KindFinished {
    /// The records of the group's writes not known applied or rejected, one per row,
    /// each with its [`super::record::TotalOf`], of rows a replay read back from the
    /// spill (or of writes the kind cannot tell apart): recovery spills those the
    /// flush's own totals segment does not hold, for this start to write again; when
    /// the group consumed a cursor, whatever room `state.max_spill_bytes` leaves (the
    /// cursor has passed them: refused, they would be lost).
    pub unsettled: Vec<WriteRecord>,
    /// The same of the group's writes of rows planned from memory, never on disk (a
    /// `writer_totals` flush's book): spilled after [`KindFinished::unsettled`], while
    /// `state.max_spill_bytes` has room; beyond it dropped and counted, as the killed
    /// process would have.
    pub unsettled_fresh: Vec<WriteRecord>,
    /// The `rejected.jsonl` records of the group's requests the journal says were
    /// refused, every one: recovery appends those the log does not hold yet (a kill can
    /// fall between the refusal's journal record and its log line).
    pub rejected: Vec<WriteRecord>,
}

/// How the kinds of write that journal their own intents ([`KindIntent`]: running
/// totals, `writer_totals`) read a group of a killed flush (see the module doc): the
/// records of what its writes still owe, and of its refused requests. Where they go is
/// this module's to decide, as for every other write. The bodies of the intents are the
/// kinds' own: this module reads none of them.
pub trait FinishKinds {
    /// The records of `group`, a committed, unended group of kind intents of the
    /// directory `dir`; an error for a kind it does not know or a body it cannot read
    /// (the directory then does not open: nothing is dropped unseen).
    fn finish(&self, dir: &Path, group: &FlushGroup, time: &str) -> std::io::Result<KindFinished>;

    /// How many rows `intent` held: an intent of a group whose commit did not
    /// complete (nothing of it was sent; its rows are counted lost with memory).
    fn rows(&self, intent: &KindIntent) -> u64;
}

/// For an opener that writes no kind's intents: such a group left in its directory is
/// an error, not something to skip (the sidecar or `Recorder` finishes it).
pub struct NoKinds;

impl FinishKinds for NoKinds {
    fn finish(&self, dir: &Path, group: &FlushGroup, _: &str) -> std::io::Result<KindFinished> {
        Err(std::io::Error::other(format!(
            "{} holds an unfinished flush of a kind of write this opener does not finish ({:?}; running totals, writer_totals, are one): open it once with the sidecar or a Recorder to finish it",
            dir.display(),
            group.flush
        )))
    }

    /// Unknown here: 0 (the figure of rows lost with memory misses them).
    fn rows(&self, _: &KindIntent) -> u64 {
        0
    }
}

/// Finishes every unsettled group of the journal; groups of kind intents through
/// `kinds`.
///
/// The kinds read their groups first: a group its finisher refuses keeps the directory
/// closed before recovery has written anything. The journal is ended once, after the
/// last group is finished: ending it starts it over, so an end after the first of two
/// open groups (a counter group whose end failed, then its flush's kind group) would
/// lose the second to a kill before it is finished, and an `End` record ends the last
/// group read, not the one it names. Each step before is safe to run again.
///
/// `stopped`: the incarnation of a previous process whose shutdown finished (see
/// [`super::Status::stopped`]); its groups left open are ended, nothing more.
pub(super) fn recover(
    state: &mut StateDir,
    groups: Vec<FlushGroup>,
    kinds: &dyn FinishKinds,
    stopped: Option<u64>,
) -> std::io::Result<RecoveryReport> {
    let mut report = RecoveryReport::default();
    let time = crate::bucket::rfc3339(std::time::SystemTime::now());
    let last = groups.len().saturating_sub(1);
    // A driver wrapper's flush is the wrapper's to finish (`StateDir::take_wrapper_groups`).
    let unsettled = |group: &FlushGroup| !group.ended && group.wrapper.is_none();
    let finished_by_its_process = |group: &FlushGroup| stopped == Some(group.flush.incarnation);
    let mut finished: Vec<Option<KindFinished>> = Vec::with_capacity(groups.len());
    for group in &groups {
        finished.push(
            if unsettled(group)
                && group.committed
                && !group.kind_intents.is_empty()
                && !finished_by_its_process(group)
            {
                Some(kinds.finish(state.dir(), group, &time)?)
            } else {
                None
            },
        );
    }
    let mut end = None;
    for ((index, group), finished) in groups.iter().enumerate().zip(finished) {
        if !unsettled(group) {
            continue;
        }
        end = Some(group.flush.flush_seq);
        if finished_by_its_process(group) {
            tracing::info!(
                flush = group.flush.flush_seq,
                "A flush of the previous process was left open (its end could not be written), but that process's shutdown finished: every request of it has its home, and the flush is only ended."
            );
            continue;
        }
        if !group.committed {
            report.uncommitted_rows += group
                .intents
                .iter()
                .map(|i| i.rows.len() as u64)
                .chain(group.kind_intents.iter().map(|i| kinds.rows(i)))
                .sum::<u64>();
            continue;
        }
        report.flushes += 1;
        if let Some(finished) = finished {
            spill_totals(
                state,
                group,
                finished.unsettled,
                finished.unsettled_fresh,
                &mut report,
            )?;
            if !finished.rejected.is_empty() {
                log_missing(
                    state,
                    group,
                    OutcomeLog::Rejected,
                    finished.rejected,
                    &mut report,
                )?;
            }
        }
        if !group.intents.is_empty() {
            finish(state, group, index == last, &time, &mut report)?;
        }
        crash_point("recovery_logged");
    }
    // Open groups of the driver wrapper are its recovery's, which ends the journal once
    // after them: ended here, they would be gone from it before they are finished.
    let wrapper_open = groups.iter().any(|g| !g.ended && g.wrapper.is_some());
    if let Some(seq) = end
        && !wrapper_open
    {
        state.journal.end(seq)?;
    }
    Ok(report)
}

/// Spills the records of a totals group's unsettled writes into the group's recovered
/// totals segment (its header naming the cursor the group consumed), but those its
/// flush's own totals segment holds (it owns them: written twice they would leave the
/// same cell, but be counted twice). Skipped when an earlier run of recovery wrote it.
///
/// `replayed` are records of rows a replay read back from the spill: in a group that
/// consumed a cursor they move, whatever room is left, as the counter rows of such a
/// group do (the cursor has passed them; refused room, they would be lost). `fresh`,
/// rows the flush planned from memory (in a replay's group too: its totals stage writes
/// the book's due rows beside the replayed ones), get the room `state.max_spill_bytes`
/// leaves after them, as the killed process would have given them: beyond it they are
/// dropped and counted (`dropped_rows`, `dropped_sums`).
fn spill_totals(
    state: &mut StateDir,
    group: &FlushGroup,
    replayed: Vec<WriteRecord>,
    fresh: Vec<WriteRecord>,
    report: &mut RecoveryReport,
) -> std::io::Result<()> {
    let (incarnation, seq) = (group.flush.incarnation, group.flush.flush_seq);
    let recovered = SegmentId::totals(incarnation, seq, true);
    if (replayed.is_empty() && fresh.is_empty()) || state.spill.has_segment(recovered) {
        return Ok(());
    }
    let live = SegmentId::totals(incarnation, seq, false);
    let in_live = state.spill.segment_keys(live)?.unwrap_or_default();
    // The replayed rows first: `write_segment_moving` moves the leading batches.
    let mut batches: Vec<Vec<WriteRecord>> = missing(replayed, &in_live).map(|r| vec![r]).collect();
    let moved = if group.consumes.is_some() {
        batches.len()
    } else {
        0
    };
    batches.extend(missing(fresh, &in_live).map(|r| vec![r]));
    if batches.is_empty() {
        return Ok(());
    }
    let kept = state
        .spill
        .write_segment_moving(recovered, group.consumes, &batches, moved)?;
    for (batch, kept) in batches.iter().zip(kept) {
        for record in batch {
            let table = table_of(record);
            let sum: i128 = record.deltas.values().map(|d| i128::from(*d)).sum();
            if kept {
                report.totals_rows += 1;
                report.totals_sums[table.index()] += sum;
            } else {
                report.dropped_rows += 1;
                report.dropped_sums[table.index()] += sum;
            }
        }
    }
    Ok(())
}

/// The table a record's row is owed to (minute unless it names another granularity).
fn table_of(record: &WriteRecord) -> Granularity {
    Granularity::parse(&record.granularity).unwrap_or(Granularity::Minute)
}

/// Appends to `log` the records of `group` it does not hold (see [`logged`]), so that
/// recovery run again after a kill adds nothing.
fn log_missing(
    state: &mut StateDir,
    group: &FlushGroup,
    log: OutcomeLog,
    records: Vec<WriteRecord>,
    report: &mut RecoveryReport,
) -> std::io::Result<()> {
    let logged = logged(state, group, log)?;
    let missing: Vec<WriteRecord> = missing(records, &logged).collect();
    if missing.is_empty() {
        return Ok(());
    }
    match log {
        OutcomeLog::Unknown => report.unknown_rows += missing.len() as u64,
        OutcomeLog::Rejected => report.rejected_rows += missing.len() as u64,
    }
    report.records.extend(missing.iter().cloned());
    if let Some((_, error)) = state.append(log, &missing).failed {
        return Err(error);
    }
    match state.sync_logs().into_iter().next() {
        Some((_, error)) => Err(error),
        None => Ok(()),
    }
}

/// The records of `group` that `log` already holds: from the log's size the group
/// recorded before it first appended to it; without such a record, those of the group's
/// flush anywhere in the log's current file. A group without one may have appended all
/// the same: the journal refused the record and the flush logged its outcomes anyway
/// (losing them would be worse), or its flush failed to end and another group came after
/// it. The current file is enough: a log does not rotate while a group is left open (see
/// [`StateDir::note_logs_at`]), and recovery never rotates. Nothing is recorded for the
/// next run: sizes taken now would hide what the flush appended before them from a
/// recovery run again after a kill, which would log it twice.
fn logged(
    state: &StateDir,
    group: &FlushGroup,
    log: OutcomeLog,
) -> std::io::Result<std::collections::HashSet<(String, u16)>> {
    match (group.logs_at, log) {
        (Some((unknown, _)), OutcomeLog::Unknown) => state.unknown.keys_from(unknown),
        (Some((_, rejected)), OutcomeLog::Rejected) => state.rejected.keys_from(rejected),
        (None, log) => state.log_keys_of_requests(log, &group.flush.named_request("")),
    }
}

fn finish(
    state: &mut StateDir,
    group: &FlushGroup,
    is_last: bool,
    time: &str,
    report: &mut RecoveryReport,
) -> std::io::Result<()> {
    let logged_unknown = logged(state, group, OutcomeLog::Unknown)?;
    let logged_rejected = logged(state, group, OutcomeLog::Rejected)?;
    // The flush's held segment (rows held for the delta ledger) is not looked at: it
    // holds no intent of the flush, and is replayed like any segment.
    let live = SegmentId::live(group.flush.incarnation, group.flush.flush_seq);
    let recovered = SegmentId::recovered(group.flush.incarnation, group.flush.flush_seq);
    let in_live = state.spill.segment_keys(live)?.unwrap_or_default();
    let recovered_exists = state.spill.has_segment(recovered);
    let source = |request| RecordSource {
        flush: &group.flush,
        request,
        time,
    };

    let mut to_spill: Vec<(Granularity, Vec<WriteRecord>)> = Vec::new();
    let mut to_unknown: Vec<WriteRecord> = Vec::new();
    let mut to_rejected: Vec<WriteRecord> = Vec::new();
    for intent in &group.intents {
        let Some(family) = group.family(intent.family) else {
            continue;
        };
        let records = |outcome, error: Option<&ErrorInfo>| {
            records_of(
                family,
                intent.table,
                &intent.series,
                (intent.shard, intent.epoch),
                intent.rows.iter().map(|r| (r.bucket, r.deltas.as_slice())),
                source(intent.request),
                outcome,
                error,
            )
        };
        // Rows the flush's own segment holds are owned by it, whatever else is known.
        let not_spilled = |records: Vec<WriteRecord>| -> Vec<WriteRecord> {
            missing(records, &in_live).collect()
        };
        let (outcome, error) = home_of(group, intent.request, is_last);
        let Some(outcome) = outcome else {
            continue;
        };
        let rows = not_spilled(records(outcome, error.as_ref()));
        match outcome {
            RecordOutcome::Spilled => {
                if !recovered_exists && !rows.is_empty() {
                    to_spill.push((intent.table, rows));
                }
            }
            RecordOutcome::Rejected => to_rejected.extend(missing(rows, &logged_rejected)),
            RecordOutcome::Unknown => to_unknown.extend(missing(rows, &logged_unknown)),
        }
    }

    crash_point("recovery_before_spill");
    if !to_spill.is_empty() {
        let batches: Vec<Vec<WriteRecord>> = to_spill.iter().map(|(_, r)| r.clone()).collect();
        // A replay's group (it consumed a cursor) wrote rows read back from the spill:
        // they move, whatever room is left (see `Spill::write_segment_carrying`).
        let moved = if group.consumes.is_some() {
            batches.len()
        } else {
            0
        };
        let kept = state
            .spill
            .write_segment_moving(recovered, group.consumes, &batches, moved)?;
        for ((table, records), kept) in to_spill.iter().zip(kept) {
            let sum: i128 = records
                .iter()
                .flat_map(|r| r.deltas.values())
                .map(|d| i128::from(*d))
                .sum();
            if kept {
                report.spilled_rows += records.len() as u64;
            } else {
                report.dropped_rows += records.len() as u64;
                report.dropped_sums[table.index()] += sum;
            }
        }
    }
    crash_point("recovery_spilled");
    for record in &to_unknown {
        let sum: i128 = record.deltas.values().map(|d| i128::from(*d)).sum();
        report.unknown_sums[table_of(record).index()] += sum;
    }
    report.unknown_rows += to_unknown.len() as u64;
    report.rejected_rows += to_rejected.len() as u64;
    report.records.extend(to_unknown.iter().cloned());
    report.records.extend(to_rejected.iter().cloned());
    for (log, records) in [
        (OutcomeLog::Unknown, &to_unknown),
        (OutcomeLog::Rejected, &to_rejected),
    ] {
        if records.is_empty() {
            continue;
        }
        let appended = state.append(log, records);
        if let Some((_, error)) = appended.failed {
            return Err(error);
        }
    }
    match state.sync_logs().into_iter().next() {
        Some((_, error)) => Err(error),
        None => Ok(()),
    }
}

/// Where recovery puts request `request` of the unended `group` (`is_last`: the
/// journal's last group): the log or spill its rows go to, with their error, or `None`
/// when they need no home (applied, or dropped and counted by the process that dropped
/// them). The module's table, row for row.
pub fn home_of(
    group: &FlushGroup,
    request: u32,
    is_last: bool,
) -> (Option<RecordOutcome>, Option<ErrorInfo>) {
    let error = |kind: &str, text: &str| {
        Some(ErrorInfo {
            kind: kind.to_owned(),
            text: text.to_owned(),
        })
    };
    match group.outcomes.get(&request) {
        Some(Settled::Applied | Settled::Dropped) => (None, None),
        Some(Settled::NotApplied { kind, text }) if is_last => {
            (Some(RecordOutcome::Spilled), error(kind, text))
        }
        Some(Settled::NotStarted) if is_last => (Some(RecordOutcome::Spilled), None),
        None if is_last && group.never_started(request) => (Some(RecordOutcome::Spilled), None),
        Some(Settled::Rejected { kind, text }) => {
            (Some(RecordOutcome::Rejected), error(kind, text))
        }
        Some(Settled::Unknown { kind, text }) => (Some(RecordOutcome::Unknown), error(kind, text)),
        // In flight (or, in a group that is not the last, anything else): unknown.
        _ => (Some(RecordOutcome::Unknown), Some(in_flight_at_crash())),
    }
}

/// The error of a request that was in flight when its process stopped.
pub fn in_flight_at_crash() -> ErrorInfo {
    ErrorInfo {
        kind: "in_flight_at_crash".into(),
        text: "the process stopped while this request was in flight; it may or may not have been applied".into(),
    }
}

/// The records whose (request id, row) is not in `present`.
fn missing(
    records: Vec<WriteRecord>,
    present: &HashSet<(String, u16)>,
) -> impl Iterator<Item = WriteRecord> + '_ {
    records
        .into_iter()
        .filter(move |r| !present.contains(&(r.request_id.clone(), r.row)))
}
