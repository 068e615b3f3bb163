//! Reading the totals group of a flush a killed process did not finish: [`Recovery`],
//! which [`crate::state::recovery`] calls while the state directory opens.
//!
//! The group's intents are writes of running totals, each idempotent by its write time:
//! writing one again, in its own writer column with its own write time, leaves the cell
//! as it is if it had applied, and no newer write of its row can exist (its process
//! ended). So recovery needs no outcome but `applied` (nothing to do) and `rejected`
//! (its rows' records for `rejected.jsonl`, which state recovery appends unless the log
//! holds them: the refusal is journaled as it arrives, before its record is appended);
//! every other intent, sent or not, becomes a spilled record that state recovery writes
//! to the group's recovered totals segment, which the next start replays like any
//! spill, except rows the flush had already spilled to its own totals segment (the
//! segment owns them: written twice they would leave the same cell, but be counted
//! twice). Those of intents of replayed rows ([`TotalsIntent::replay`]) are handed over
//! apart from those of the book's: they move whatever room the spill has left, the
//! book's only while it has room. What the killed flush had not yet planned (rows backing off, increments
//! after its drain) is lost with its memory and counted in the unclean-stop figure.

use std::collections::BTreeMap;
use std::io;

use crate::bucket::{self, Minute};
use crate::series;
use crate::state::recovery::KindFinished;
use crate::state::{
    ErrorInfo, FamilyEntry, FlushGroup, KindIntent, RecordOutcome, Settled, TotalOf, WriteRecord,
};
use crate::vocabulary::Granularity;

use super::intent::TotalsIntent;

/// The counting mode's recovery, handed to [`crate::state::StateDir::open_with`].
pub struct Recovery;

impl crate::state::recovery::FinishKinds for Recovery {
    fn finish(
        &self,
        dir: &std::path::Path,
        group: &FlushGroup,
        time: &str,
    ) -> io::Result<KindFinished> {
        let intents = TotalsIntent::of_group(group).map_err(|request| {
            io::Error::other(format!(
                "{}: request {request} of the unfinished flush {:?} is not a write of running totals this version can read; it is left in the journal",
                dir.display(),
                group.flush
            ))
        })?;
        let rejected = rejected_records(group, &intents, time);
        // A replay's rows move whatever room is left; the book's need room (see
        // `TotalsIntent::replay`).
        let (replayed, book): (Vec<TotalsIntent>, Vec<TotalsIntent>) =
            intents.into_iter().partition(|intent| intent.replay);
        Ok(KindFinished {
            unsettled: unsettled_records(group, &replayed, time),
            unsettled_fresh: unsettled_records(group, &book, time),
            rejected,
        })
    }

    fn rows(&self, intent: &KindIntent) -> u64 {
        TotalsIntent::decode(intent).map_or(0, |intent| intent.rows.len() as u64)
    }
}

/// The totals intents of `group` that read; those that do not are logged and left out
/// (a tool's view: the sidecar's recovery refuses to open on them instead).
pub(crate) fn readable_intents(group: &FlushGroup) -> Vec<TotalsIntent> {
    group
        .kind_intents
        .iter()
        .filter_map(|intent| {
            let decoded = TotalsIntent::decode(intent);
            if decoded.is_none() {
                tracing::error!(
                    request = intent.request,
                    "A journal's intent is not a write of running totals this version can read; it is left out."
                );
            }
            decoded
        })
        .collect()
}

/// The `rejected.jsonl` records of the group's refused requests, row for row as the
/// flush writes them: the part of each total not known applied when it was planned.
pub(crate) fn rejected_records(
    group: &FlushGroup,
    intents: &[TotalsIntent],
    time: &str,
) -> Vec<WriteRecord> {
    let mut out = Vec::new();
    for intent in intents {
        let Some(Settled::Rejected { kind, text }) = group.outcomes.get(&intent.request) else {
            continue;
        };
        let Some(family) = group.family(intent.family) else {
            continue;
        };
        for mut record in records_of(group, family, intent, time) {
            record.outcome = RecordOutcome::Rejected;
            record.total = None;
            record.error = Some(ErrorInfo {
                kind: kind.clone(),
                text: text.clone(),
            });
            out.push(record);
        }
    }
    out
}

/// The spilled records of the group's intents not known applied, rejected or dropped
/// (counted by the process that dropped them), one per
/// row (what state recovery spills, but the rows the flush's own totals segment holds;
/// also what `countersink outcomes` shows of such a group).
pub(crate) fn unsettled_records(
    group: &FlushGroup,
    intents: &[TotalsIntent],
    time: &str,
) -> Vec<WriteRecord> {
    intents
        .iter()
        .filter(|intent| {
            !matches!(
                group.outcomes.get(&intent.request),
                Some(Settled::Applied | Settled::Rejected { .. } | Settled::Dropped)
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
            Some(records_of(group, family?, intent, time))
        })
        .flatten()
        .collect()
}

/// The spill records of one intent, one per row, under its request's id.
fn records_of(
    group: &FlushGroup,
    family: &FamilyEntry,
    intent: &TotalsIntent,
    time: &str,
) -> Vec<WriteRecord> {
    let key: BTreeMap<String, String> = family
        .key_columns
        .iter()
        .cloned()
        .zip(series::fields(&intent.series).map(str::to_owned))
        .collect();
    let by_column = |values: &[i64], skip_zero: bool| -> BTreeMap<String, i64> {
        family
            .columns
            .iter()
            .cloned()
            .zip(values.iter().copied())
            .filter(|(_, v)| !skip_zero || *v != 0)
            .collect()
    };
    let request_id = group.flush.request_id(intent.request);
    intent
        .rows
        .iter()
        .enumerate()
        .map(|(index, row)| {
            let day = crate::bucket::day_of(intent.table, row.bucket);
            WriteRecord {
                time: time.to_owned(),
                writer: group.flush.writer.clone(),
                incarnation: group.flush.incarnation,
                flush_seq: group.flush.flush_seq,
                request_id: request_id.clone(),
                row: u16::try_from(index).unwrap_or(u16::MAX),
                outcome: RecordOutcome::Spilled,
                family: family.name.clone(),
                table: family.table(intent.table).to_owned(),
                granularity: intent.table.as_str().to_owned(),
                key: key.clone(),
                key_hex: None,
                shard: None,
                epoch: None,
                day: bucket::format_date(day.date()),
                minute: (intent.table == Granularity::Minute)
                    .then(|| Minute(row.bucket).minute_of_day()),
                month: (intent.table == Granularity::Day).then(|| day.month()),
                hour: None,
                deltas: by_column(&row.unconfirmed, true),
                error: Some(ErrorInfo {
                    kind: "in_flight_at_crash".into(),
                    text: "sent or about to be sent when the process stopped; written again with its write time".into(),
                }),
                total: Some(TotalOf {
                    column: intent.writer.clone(),
                    totals: by_column(&row.totals, false),
                    timestamp: intent.timestamp,
                }),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StateConfig;
    use crate::state::{FlushId, SegmentId, StateDir};
    use crate::totals::TotalsIntentRow;

    fn family() -> FamilyEntry {
        FamilyEntry {
            id: 1,
            name: "views".into(),
            minute_table: "m.views_by_minute".into(),
            day_table: "m.views_by_day".into(),
            hour_table: String::new(),
            total_table: String::new(),
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
            replay: false,
        }
    }

    /// A fresh state directory, opened with this mode's recovery.
    fn opened() -> (tempfile::TempDir, StateConfig, StateDir) {
        let tmp = tempfile::tempdir().unwrap();
        let config = StateConfig {
            dir: tmp.path().to_owned(),
            ..StateConfig::default()
        };
        let state = StateDir::open_with(&config, &Recovery).unwrap();
        (tmp, config, state)
    }

    fn encoded(intents: &[TotalsIntent]) -> Vec<KindIntent> {
        intents.iter().map(TotalsIntent::encode).collect()
    }

    /// A flush killed in its totals stage: the intents not known applied, rejected or
    /// dropped, and not already spilled, are spilled to one recovered segment with their writer and
    /// write time; running recovery again adds nothing.
    #[test]
    fn a_killed_totals_stage_is_replayed_once_without_what_it_spilled_or_applied() {
        let (tmp, config, mut state) = opened();
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
            intent(8, &writer, "dropped", 60, 9),
        ];
        state
            .journal_begin_kind(&flush, "t", None, &[family()], &encoded(&intents))
            .unwrap();
        state.journal_outcome(3, &Settled::Applied);
        let refused = |kind: &str| (kind.to_owned(), "x".to_owned());
        let (kind, text) = refused("invalid");
        state.journal_outcome(6, &Settled::Rejected { kind, text });
        let (kind, text) = refused("unavailable");
        state.journal_outcome(7, &Settled::NotApplied { kind, text });
        // Dropped for want of spill room: counted by the killed process, not homed again.
        state.journal_outcome(8, &Settled::Dropped);
        state.journal_flush();
        // The settle step had spilled one row before the kill, to the flush's own
        // totals segment.
        let group = FlushGroup {
            flush: flush.clone(),
            time: "t".into(),
            consumes: None,
            families: vec![family()],
            intents: Vec::new(),
            kind_intents: encoded(&intents),
            committed: true,
            outcomes: Default::default(),
            logs_at: None,
            ended: false,
            wrapper: None,
            starts_below: None,
        };
        let spilled: Vec<WriteRecord> = unsettled_records(&group, &intents, "t")
            .into_iter()
            .filter(|r| r.key["page_id"] == "spilled")
            .collect();
        state.spill_totals(&flush, None, &[], &[spilled]).unwrap();
        let journal = std::fs::read(state.journal_path()).unwrap();
        drop(state); // killed

        let state = StateDir::open_with(&config, &Recovery).unwrap();
        let report = state.recovery().clone();
        assert_eq!((report.flushes, report.totals_rows), (1, 2));
        assert_eq!(report.totals_sums, [5 + 8, 0, 0, 0]);
        assert_eq!(report.unknown_rows, 0, "a totals write is never unknown");
        assert_eq!(
            report.rejected_rows, 1,
            "the refusal had not been logged yet"
        );
        let path = tmp
            .path()
            .join(SegmentId::totals(flush.incarnation, 7, true).file_name());
        let segment = || -> Vec<WriteRecord> {
            std::fs::read_to_string(&path)
                .unwrap()
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect()
        };
        let replayed = segment();
        let got: Vec<(String, &str, i64, i64, i64)> = replayed
            .iter()
            .map(|r| {
                let total = r.total.as_ref().unwrap();
                (
                    r.key["page_id"].clone(),
                    total.column.as_str(),
                    total.totals["views"],
                    r.deltas["views"],
                    total.timestamp,
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
        // Killed again before recovery's end: the segment is kept as it is, nothing added.
        std::fs::write(tmp.path().join("journal.wal"), &journal).unwrap();
        let _state = StateDir::open_with(&config, &Recovery).unwrap();
        assert_eq!(segment(), replayed);
    }

    /// The records of `intents` as a totals group of `flush` reads them.
    fn records(flush: &FlushId, intents: &[TotalsIntent]) -> Vec<WriteRecord> {
        let group = FlushGroup {
            flush: flush.clone(),
            time: "t".into(),
            consumes: None,
            families: vec![family()],
            intents: Vec::new(),
            kind_intents: encoded(intents),
            committed: true,
            outcomes: Default::default(),
            logs_at: None,
            ended: false,
            wrapper: None,
            starts_below: None,
        };
        unsettled_records(&group, intents, "t")
    }

    /// A replay's totals group killed with nothing settled: flush 2 read back a row
    /// flush 1 had spilled (its group names the cursor past it) and wrote it beside a
    /// row of its book, both in flight. `bodies` turns the group's intents into the
    /// journal's. Reopened with no room in the spill: the report and the records of the
    /// recovered segment.
    fn killed_replay_with_a_book_row(
        bodies: impl Fn(&[TotalsIntent]) -> Vec<KindIntent>,
    ) -> (crate::state::RecoveryReport, Vec<WriteRecord>) {
        let (tmp, mut config, mut state) = opened();
        let spilled_by = state.flush_id(1);
        let flush = state.flush_id(2);
        let writer = format!("{}/{}/0000abcd", flush.writer, flush.incarnation);
        let mut replayed = intent(1, &writer, "replayed", 30, 6);
        replayed.replay = true;
        state
            .spill_totals(
                &spilled_by,
                None,
                &[],
                &[records(&spilled_by, std::slice::from_ref(&replayed))],
            )
            .unwrap();
        assert_eq!(state.load_spill(|_, _| true).unwrap().records.len(), 1);
        let consumes = state.replay_loaded();
        assert!(consumes.is_some());
        let intents = [intent(0, &writer, "book", 20, 5), replayed];
        state
            .journal_begin_kind(&flush, "t", consumes, &[family()], &bodies(&intents))
            .unwrap();
        state.journal_flush();
        drop(state); // killed

        config.max_spill_bytes = 1;
        let state = StateDir::open_with(&config, &Recovery).unwrap();
        let report = state.recovery().clone();
        drop(state);
        let path = tmp
            .path()
            .join(SegmentId::totals(flush.incarnation, 2, true).file_name());
        let segment = std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        (report, segment)
    }

    /// The replayed row moves into the recovered segment whatever room is left (the
    /// cursor has passed it: refused, it would be lost), but the book's row, never on
    /// disk, needs room as the killed process's would have: with none, it is dropped
    /// and counted, not spilled past `state.max_spill_bytes`.
    #[test]
    fn a_killed_replay_moves_its_replayed_totals_and_drops_its_book_rows_without_room() {
        let (report, segment) = killed_replay_with_a_book_row(encoded);
        assert_eq!(
            (report.totals_rows, report.dropped_rows),
            (1, 1),
            "{report:?}"
        );
        assert_eq!(report.totals_sums, [6, 0, 0, 0]);
        assert_eq!(report.dropped_sums, [5, 0, 0, 0]);
        let keys: Vec<&str> = segment.iter().map(|r| r.key["page_id"].as_str()).collect();
        assert_eq!(keys, ["replayed"]);
    }

    /// An earlier version's journal does not say which intents are a replay's: every
    /// one is read as a replay's and moves, as that version's recovery moved them.
    #[test]
    fn an_earlier_journal_s_replay_moves_all_its_totals() {
        let earlier = |intents: &[TotalsIntent]| -> Vec<KindIntent> {
            let mut bodies = encoded(intents);
            for body in &mut bodies {
                body.body.pop(); // the replay byte
            }
            bodies
        };
        let (report, segment) = killed_replay_with_a_book_row(earlier);
        assert_eq!(
            (report.totals_rows, report.dropped_rows),
            (2, 0),
            "{report:?}"
        );
        assert_eq!(report.totals_sums, [5 + 6, 0, 0, 0]);
        let mut keys: Vec<&str> = segment.iter().map(|r| r.key["page_id"].as_str()).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["book", "replayed"]);
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
        let (tmp, config, mut state) = opened();
        let flush = state.flush_id(4);
        let writer = format!("{}/{}/0000abcd", flush.writer, flush.incarnation);
        let intents = [intent(0, &writer, "refused", 40, 7)];
        state
            .journal_begin_kind(&flush, "t", None, &[family()], &encoded(&intents))
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
            kind_intents: encoded(&intents),
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
        let records = rejected_records(&group, &intents, "t");
        assert_eq!(records.len(), 1);
        state.append_now(crate::state::OutcomeLog::Rejected, &records);
        drop(state); // killed before the group's end

        let state = StateDir::open_with(&config, &Recovery).unwrap();
        assert_eq!(state.recovery().flushes, 1);
        assert_eq!(state.recovery().rejected_rows, 0);
        assert_eq!(rejected_log(tmp.path()), records);
    }

    /// An intent of a kind this version does not know, or whose body does not read, in
    /// an unfinished group: the directory does not open (and the group stays in the
    /// journal), rather than its rows being passed over unseen.
    #[test]
    fn an_intent_recovery_cannot_read_keeps_the_directory_closed() {
        for unreadable in [
            KindIntent {
                kind: crate::state::KindId::new(64).unwrap(),
                request: 0,
                body: Vec::new(),
            },
            KindIntent {
                kind: crate::totals::intent::KIND,
                request: 0,
                body: vec![1, 2, 3],
            },
        ] {
            let (_tmp, config, mut state) = opened();
            let flush = state.flush_id(4);
            state
                .journal_begin_kind(&flush, "t", None, &[family()], &[unreadable])
                .unwrap();
            drop(state); // killed
            for _ in 0..2 {
                let error = StateDir::open_with(&config, &Recovery)
                    .err()
                    .expect("refused");
                assert!(error.to_string().contains("recover"), "{error}");
            }
        }
    }
}
