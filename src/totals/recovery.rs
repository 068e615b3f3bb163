//! Finishing the totals group of a flush a killed process did not finish: [`Recovery`],
//! which [`crate::state::recovery`] calls while the state directory opens.
//!
//! The group's intents are writes of running totals, each idempotent by its write time:
//! writing one again, in its own writer column with its own write time, leaves the cell
//! as it is if it had applied, and no newer write of its row can exist (its process
//! ended). So recovery needs no outcome but `applied` (nothing to do) and `rejected`
//! (its rows' records for `rejected.jsonl`, which state recovery appends unless the log
//! holds them: the refusal is journaled as it arrives, before its record is appended);
//! every other intent, sent or not, is written to a totals replay file that the next
//! start loads like a spill, except rows the flush had already spilled to
//! `totals.spill.jsonl` (the spill owns them: written twice they would leave the same
//! cell, but be counted twice). What the killed flush had not yet
//! planned (rows backing off, increments after its drain) is lost with its memory and
//! counted in the unclean-stop figure.

use std::collections::{BTreeMap, HashSet};
use std::io;

use crate::bucket::{self, Day, Minute};
use crate::series;
use crate::state::recovery::TotalsFinished;
use crate::state::{
    ErrorInfo, FamilyEntry, FlushGroup, RecordOutcome, Settled, TotalsIntent, WriteRecord,
};
use crate::vocabulary::Granularity;

use super::records::TotalRecord;
use super::spill::SpillFiles;

/// The counting mode's recovery, handed to [`crate::state::StateDir::open_with`].
pub struct Recovery;

impl crate::state::recovery::FinishTotals for Recovery {
    fn finish_totals(
        &self,
        dir: &std::path::Path,
        group: &FlushGroup,
        time: &str,
    ) -> io::Result<TotalsFinished> {
        let (rows, sums) = replay_intents(&SpillFiles::new(dir), group, time)?;
        Ok(TotalsFinished {
            rows,
            sums,
            rejected: rejected_records(group, time),
        })
    }
}

/// The `rejected.jsonl` records of the group's refused requests, row for row as the
/// flush writes them: the part of each total not known applied when it was planned.
pub(crate) fn rejected_records(group: &FlushGroup, time: &str) -> Vec<WriteRecord> {
    let mut out = Vec::new();
    for intent in &group.totals {
        let Some(Settled::Rejected { kind, text }) = group.outcomes.get(&intent.request) else {
            continue;
        };
        let Some(family) = group.family(intent.family) else {
            continue;
        };
        let request_id = group.flush.request_id(intent.request);
        for (row, total) in records_of(family, intent, time).into_iter().enumerate() {
            out.push(WriteRecord {
                key_hex: None,
                time: time.to_owned(),
                writer: group.flush.writer.clone(),
                incarnation: group.flush.incarnation,
                flush_seq: group.flush.flush_seq,
                request_id: request_id.clone(),
                row: u16::try_from(row).unwrap_or(u16::MAX),
                outcome: RecordOutcome::Rejected,
                family: total.family,
                table: total.table,
                granularity: total.granularity,
                key: total.key,
                shard: None,
                epoch: None,
                day: total.day,
                minute: total.minute,
                month: total.month,
                deltas: total
                    .unconfirmed
                    .into_iter()
                    .filter(|(_, v)| *v != 0)
                    .collect(),
                error: Some(ErrorInfo {
                    kind: kind.clone(),
                    text: text.clone(),
                }),
            });
        }
    }
    out
}

/// Writes the intents of `group` not known applied or rejected to the group's replay
/// file (atomically; skipped when an earlier run of recovery wrote it). Returns their
/// rows, and the parts of their totals not known applied summed per granularity.
pub(crate) fn replay_intents(
    spill: &SpillFiles,
    group: &FlushGroup,
    time: &str,
) -> io::Result<(u64, [i128; 2])> {
    let records = unsettled_records(spill, group, time)?;
    let path = spill.recovered_path(group.flush.incarnation, group.flush.flush_seq);
    if !records.is_empty() && !path.exists() {
        spill.rewrite(&path, &records)?;
    }
    let mut sums = [0_i128; 2];
    for record in &records {
        sums[super::records::granularity_of(record).index()] += record
            .unconfirmed
            .values()
            .map(|v| i128::from(*v))
            .sum::<i128>();
    }
    Ok((records.len() as u64, sums))
}

/// The records recovery writes to the group's replay file: one per row of every intent
/// not known applied or rejected, but rows the flush already spilled to
/// `totals.spill.jsonl` (also what `countersink outcomes` shows of such a group).
pub(crate) fn unsettled_records(
    spill: &SpillFiles,
    group: &FlushGroup,
    time: &str,
) -> io::Result<Vec<TotalRecord>> {
    // Streamed: the spill may be large, and only the group's own rows are kept.
    let prefix = writer_prefix(group);
    let mut spilled: HashSet<Place> = HashSet::new();
    spill.for_each_spilled(|record| {
        if record.writer.starts_with(&prefix) {
            spilled.insert(place(&record));
        }
    })?;
    let records: Vec<TotalRecord> = group
        .totals
        .iter()
        .filter(|intent| {
            !matches!(
                group.outcomes.get(&intent.request),
                Some(Settled::Applied | Settled::Rejected { .. })
            )
        })
        .filter_map(|intent| {
            let family = group.family(intent.family);
            if family.is_none() {
                tracing::error!(
                    family = intent.family,
                    "A journal's totals intent names a family its group does not describe; it is not replayed."
                );
            }
            Some(records_of(family?, intent, time))
        })
        .flatten()
        .filter(|record| !spilled.contains(&place(record)))
        .collect();
    Ok(records)
}

/// Where a record's total goes: writer column, family, table, key, bucket.
type Place = (
    String,
    String,
    String,
    BTreeMap<String, String>,
    String,
    Option<i16>,
);

fn place(record: &TotalRecord) -> Place {
    (
        record.writer.clone(),
        record.family.clone(),
        record.granularity.clone(),
        record.key.clone(),
        record.day.clone(),
        record.minute,
    )
}

/// The start of the writer column of the group's process: `writer id/incarnation/`.
fn writer_prefix(group: &FlushGroup) -> String {
    format!("{}/{}/", group.flush.writer, group.flush.incarnation)
}

/// The spill records of one intent, one per row.
fn records_of(family: &FamilyEntry, intent: &TotalsIntent, time: &str) -> Vec<TotalRecord> {
    let key: BTreeMap<String, String> = family
        .key_columns
        .iter()
        .cloned()
        .zip(series::fields(&intent.series).map(str::to_owned))
        .collect();
    let by_column = |values: &[i64]| -> BTreeMap<String, i64> {
        family
            .columns
            .iter()
            .cloned()
            .zip(values.iter().copied())
            .collect()
    };
    intent
        .rows
        .iter()
        .map(|row| {
            let day = match intent.table {
                Granularity::Minute => Minute(row.bucket).day(),
                Granularity::Day => Day(row.bucket),
            };
            TotalRecord {
                time: time.to_owned(),
                writer: intent.writer.clone(),
                family: family.name.clone(),
                table: family.table(intent.table).to_owned(),
                granularity: intent.table.as_str().to_owned(),
                key: key.clone(),
                day: bucket::format_date(day.date()),
                minute: (intent.table == Granularity::Minute)
                    .then(|| Minute(row.bucket).minute_of_day()),
                month: (intent.table == Granularity::Day).then(|| day.month()),
                totals: by_column(&row.totals),
                unconfirmed: by_column(&row.unconfirmed),
                timestamp: intent.timestamp,
                error: Some(ErrorInfo {
                    kind: "in_flight_at_crash".into(),
                    text: "sent or about to be sent when the process stopped; written again with its write time".into(),
                }),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StateConfig;
    use crate::state::{FlushId, StateDir, TotalsIntentRow};

    fn family() -> FamilyEntry {
        FamilyEntry {
            id: 1,
            name: "views".into(),
            minute_table: "m.views_by_minute".into(),
            day_table: "m.views_by_day".into(),
            key_columns: vec!["page_id".into()],
            columns: vec!["views".into()],
        }
    }

    fn intent(
        request: u32,
        writer: &str,
        page: &str,
        total: i64,
        unconfirmed: i64,
    ) -> TotalsIntent {
        TotalsIntent {
            request,
            family: 1,
            table: Granularity::Minute,
            writer: writer.into(),
            timestamp: 1_000 + i64::from(request),
            series: series::encode([page]),
            rows: vec![TotalsIntentRow {
                bucket: 29_000_000,
                totals: vec![total],
                unconfirmed: vec![unconfirmed],
            }],
        }
    }

    /// A flush killed in its totals stage: the intents not known applied or rejected, and
    /// not already spilled, are written to one replay file with their writer and write
    /// time; running recovery again adds nothing.
    #[test]
    fn a_killed_totals_stage_is_replayed_once_without_what_it_spilled_or_applied() {
        let tmp = tempfile::tempdir().unwrap();
        let config = StateConfig {
            dir: tmp.path().to_owned(),
            ..StateConfig::default()
        };
        let mut state = StateDir::open_with(&config, &Recovery).unwrap();
        let flush = FlushId {
            writer: state.writer_id().to_owned(),
            incarnation: state.incarnation(),
            flush_seq: 7,
            nonce: None,
        };
        let writer = format!("{}/{}/0000abcd", flush.writer, flush.incarnation);
        let intents = [
            intent(3, &writer, "applied", 10, 4),
            intent(4, &writer, "in_flight", 20, 5),
            intent(5, &writer, "spilled", 30, 6),
            intent(6, &writer, "rejected", 40, 7),
            intent(7, &writer, "failed", 50, 8),
        ];
        state
            .journal_begin_totals(&flush, "t", &[family()], &intents)
            .unwrap();
        state.journal_outcome(3, &Settled::Applied);
        let refused = |kind: &str| (kind.to_owned(), "x".to_owned());
        let (kind, text) = refused("invalid");
        state.journal_outcome(6, &Settled::Rejected { kind, text });
        let (kind, text) = refused("unavailable");
        state.journal_outcome(7, &Settled::NotApplied { kind, text });
        state.journal_flush();
        // The settle step had spilled one row before the kill.
        let spill = SpillFiles::new(tmp.path());
        spill
            .append(&records_of(&family(), &intents[2], "t"), u64::MAX)
            .unwrap();
        let journal = std::fs::read(state.journal_path()).unwrap();
        drop(state); // killed

        let state = StateDir::open_with(&config, &Recovery).unwrap();
        let report = state.recovery().clone();
        assert_eq!((report.flushes, report.totals_rows), (1, 2));
        assert_eq!(report.totals_sums, [5 + 8, 0]);
        assert_eq!(report.unknown_rows, 0, "a totals write is never unknown");
        assert_eq!(
            report.rejected_rows, 1,
            "the refusal had not been logged yet"
        );
        let path = spill.recovered_path(flush.incarnation, 7);
        let replayed = spill.load(&path).unwrap().records;
        let got: Vec<(String, &str, i64, i64, i64)> = replayed
            .iter()
            .map(|r| {
                (
                    r.key["page_id"].clone(),
                    r.writer.as_str(),
                    r.totals["views"],
                    r.unconfirmed["views"],
                    r.timestamp,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("in_flight".to_owned(), writer.as_str(), 20, 5, 1_004),
                ("failed".to_owned(), writer.as_str(), 50, 8, 1_007),
            ]
        );
        drop(state);
        // Killed again before recovery's end: the file is kept as it is, nothing added.
        std::fs::write(tmp.path().join("journal.wal"), &journal).unwrap();
        let _state = StateDir::open_with(&config, &Recovery).unwrap();
        assert_eq!(spill.load(&path).unwrap().records, replayed);
        assert_eq!(spill.replay_files().unwrap(), [path]);
    }

    fn rejected_log(dir: &std::path::Path) -> Vec<WriteRecord> {
        std::fs::read_to_string(dir.join("rejected.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// A state directory whose totals group (flush 4) sent one write, refused
    /// (`invalid`), its refusal journaled and not logged yet.
    fn refused_in_flight() -> (
        tempfile::TempDir,
        StateConfig,
        StateDir,
        FlushId,
        [TotalsIntent; 1],
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let config = StateConfig {
            dir: tmp.path().to_owned(),
            ..StateConfig::default()
        };
        let mut state = StateDir::open_with(&config, &Recovery).unwrap();
        let flush = state.flush_id(4);
        let writer = format!("{}/{}/0000abcd", flush.writer, flush.incarnation);
        let intents = [intent(0, &writer, "refused", 40, 7)];
        state
            .journal_begin_totals(&flush, "t", &[family()], &intents)
            .unwrap();
        let (kind, text) = ("invalid".to_owned(), "no such column".to_owned());
        state.journal_outcome(0, &Settled::Rejected { kind, text });
        (tmp, config, state, flush, intents)
    }

    /// A refusal is journaled as its answer arrives and its record appended after: a kill
    /// in between left the request settled `rejected` with no record anywhere (recovery
    /// took the journal's word that the log had it). Recovery now logs it, with the part
    /// of the total not known applied and the store's error.
    #[test]
    fn a_refusal_journaled_before_its_record_was_logged_is_logged_by_recovery() {
        let (tmp, config, mut state, flush, _) = refused_in_flight();
        state.journal_flush();
        drop(state); // killed before the record was appended

        let state = StateDir::open_with(&config, &Recovery).unwrap();
        assert_eq!(state.recovery().rejected_rows, 1);
        let logged = rejected_log(tmp.path());
        assert_eq!(logged.len(), 1, "{logged:?}");
        let record = &logged[0];
        assert_eq!(record.request_id, flush.request_id(0));
        assert_eq!((record.row, record.outcome), (0, RecordOutcome::Rejected));
        assert_eq!(record.key["page_id"], "refused");
        assert_eq!(record.deltas, BTreeMap::from([("views".to_owned(), 7)]));
        assert_eq!(record.error.as_ref().unwrap().kind, "invalid");
        drop(state);
        // Opened again: nothing more to log.
        let state = StateDir::open_with(&config, &Recovery).unwrap();
        assert_eq!(state.recovery().rejected_rows, 0);
        assert_eq!(rejected_log(tmp.path()).len(), 1);
    }

    /// The same refusal logged before the kill (its log's size noted in the journal
    /// first, as a flush does) is not logged a second time.
    #[test]
    fn a_refusal_already_logged_is_not_logged_again() {
        let (tmp, config, mut state, flush, intents) = refused_in_flight();
        let group = FlushGroup {
            flush: flush.clone(),
            time: "t".into(),
            consumes: None,
            families: vec![family()],
            intents: Vec::new(),
            totals: intents.to_vec(),
            committed: true,
            outcomes: [(
                0,
                Settled::Rejected {
                    kind: "invalid".into(),
                    text: "no such column".into(),
                },
            )]
            .into(),
            logs_at: None,
            ended: false,
            wrapper: None,
            starts_below: None,
        };
        let records = rejected_records(&group, "t");
        assert_eq!(records.len(), 1);
        state.append_now(crate::state::OutcomeLog::Rejected, &records);
        drop(state); // killed before the group's end

        let state = StateDir::open_with(&config, &Recovery).unwrap();
        assert_eq!(state.recovery().flushes, 1);
        assert_eq!(state.recovery().rejected_rows, 0);
        assert_eq!(rejected_log(tmp.path()), records);
    }
}
