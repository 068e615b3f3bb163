use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use time::macros::datetime;

use super::*;
use crate::aggregate::Columns;
use crate::config::StateConfig;
use crate::sink::{PartitionWrite, RowDelta};
use crate::state::{FamilyEntry, FlushId, Settled, StateDir};
use crate::vocabulary::{FamilyId, Granularity};

fn record(outcome: RecordOutcome, family: &str, day: &str, deltas: &[(&str, i64)]) -> WriteRecord {
    WriteRecord {
        total: None,
        key_hex: None,
        time: format!("{day}T12:00:00Z"),
        writer: "w".into(),
        incarnation: 1,
        flush_seq: 1,
        request_id: "w/1/1/0".into(),
        row: 0,
        outcome,
        family: family.into(),
        table: format!("ks.{family}_by_minute"),
        granularity: "minute".into(),
        key: [("page_id".to_string(), "home".to_string())].into(),
        shard: None,
        epoch: None,
        day: day.into(),
        minute: Some(1),
        month: None,
        hour: None,
        deltas: deltas.iter().map(|(c, d)| (c.to_string(), *d)).collect(),
        error: None,
    }
}

fn generic(tags: &str) -> WriteRecord {
    let mut r = record(
        RecordOutcome::Unknown,
        "generic",
        "2026-11-30",
        &[("value", 1)],
    );
    r.key = [
        ("name".to_string(), "hits".to_string()),
        ("tags".to_string(), tags.to_string()),
    ]
    .into();
    r
}

#[test]
fn filters_combine_outcome_family_tags_and_time() {
    let unknown = record(
        RecordOutcome::Unknown,
        "views",
        "2026-11-30",
        &[("views", 1)],
    );
    let rejected = record(
        RecordOutcome::Rejected,
        "views",
        "2026-11-29",
        &[("views", 1)],
    );
    assert!(Filter::default().matches(&unknown));
    let only = |outcomes: Vec<RecordOutcome>| Filter {
        outcomes,
        ..Filter::default()
    };
    assert!(only(vec![RecordOutcome::Unknown]).matches(&unknown));
    assert!(!only(vec![RecordOutcome::Unknown]).matches(&rejected));
    assert!(only(vec![RecordOutcome::Spilled, RecordOutcome::Rejected]).matches(&rejected));

    let family = |name: &str| Filter {
        families: vec![name.into()],
        ..Filter::default()
    };
    assert!(family("views").matches(&unknown));
    assert!(!family("generic").matches(&unknown));

    let tags = |pairs: &[(&str, &str)]| Filter {
        tags: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Filter::default()
    };
    // A configured family's key column, and the generic family's tag string.
    assert!(tags(&[("page_id", "home")]).matches(&unknown));
    assert!(!tags(&[("page_id", "about")]).matches(&unknown));
    let hits = generic("env:prod,region:eu");
    assert!(tags(&[("region", "eu")]).matches(&hits));
    assert!(tags(&[("region", "eu"), ("env", "prod")]).matches(&hits));
    assert!(
        !tags(&[("region", "e")]).matches(&hits),
        "whole values only"
    );
    assert!(!tags(&[("region", "eu"), ("env", "dev")]).matches(&hits));
    assert!(tags(&[("name", "hits")]).matches(&hits));

    let since = Filter {
        since: Some(datetime!(2026-11-30 00:00 UTC)),
        ..Filter::default()
    };
    assert!(since.matches(&unknown));
    assert!(!since.matches(&rejected));
    let mut untimed = unknown.clone();
    untimed.time = "yesterday".into();
    assert!(!since.matches(&untimed), "an unreadable time never matches");
}

#[test]
fn since_takes_a_time_a_day_or_a_duration_back() {
    let now = datetime!(2026-11-30 12:00 UTC);
    assert_eq!(
        parse_since("2026-11-30T10:30:00Z", now),
        Ok(datetime!(2026-11-30 10:30 UTC))
    );
    assert_eq!(
        parse_since("2026-11-29", now),
        Ok(datetime!(2026-11-29 00:00 UTC))
    );
    assert_eq!(parse_since("90m", now), Ok(datetime!(2026-11-30 10:30 UTC)));
    assert!(parse_since("soon", now).is_err());
    assert_eq!(
        parse_tag("page_id:home"),
        Ok(("page_id".into(), "home".into()))
    );
    assert_eq!(
        parse_tag("url:http://x"),
        Ok(("url".into(), "http://x".into()))
    );
    assert!(parse_tag("nocolon").is_err());
    assert!(parse_outcome("applied").is_err());
}

#[test]
fn groups_sum_per_outcome_source_family_table_and_day_and_per_column() {
    let mut summary = Summary::default();
    let views = |day, v, b| {
        record(
            RecordOutcome::Unknown,
            "views",
            day,
            &[("views", v), ("bytes", b)],
        )
    };
    summary.add(Source::Log, &views("2026-11-30", 2, 100));
    summary.add(Source::Log, &views("2026-11-30", -1, 50));
    summary.add(Source::Log, &views("2026-11-29", i64::MAX, 0));
    summary.add(Source::Log, &views("2026-11-29", i64::MAX, 0));
    summary.add(Source::Journal, &views("2026-11-30", 7, 0));
    let mut day = record(
        RecordOutcome::Rejected,
        "views",
        "2026-11-30",
        &[("views", 3)],
    );
    day.table = "ks.views_by_day".into();
    day.granularity = "day".into();
    summary.add(Source::Log, &day);

    let groups: Vec<(String, String, String, u64, i128)> = summary
        .groups()
        .into_iter()
        .map(|(k, s)| {
            (
                format!("{}/{}", k.outcome, k.source.as_str()),
                k.table.clone(),
                k.day.clone(),
                s.records,
                s.delta_sum,
            )
        })
        .collect();
    let big = 2 * i128::from(i64::MAX);
    assert_eq!(
        groups,
        [
            (
                "unknown/log".into(),
                "ks.views_by_minute".into(),
                "2026-11-29".into(),
                2,
                big
            ),
            (
                "unknown/log".into(),
                "ks.views_by_minute".into(),
                "2026-11-30".into(),
                2,
                151
            ),
            (
                "unknown/journal".into(),
                "ks.views_by_minute".into(),
                "2026-11-30".into(),
                1,
                7
            ),
            (
                "rejected/log".into(),
                "ks.views_by_day".into(),
                "2026-11-30".into(),
                1,
                3
            ),
        ]
    );
    let totals = summary.totals();
    let minute_log = &totals[&(
        Outcome::of(RecordOutcome::Unknown),
        Source::Log,
        "minute".to_string(),
    )];
    assert_eq!(minute_log.records, 4);
    assert_eq!(minute_log.delta_sum, big + 151, "beyond i64, exact");
    assert_eq!(
        minute_log.columns,
        BTreeMap::from([("bytes".to_string(), 150), ("views".to_string(), big + 1)])
    );
    assert_eq!(totals.len(), 3);
}

fn state_config(dir: &Path) -> StateConfig {
    StateConfig {
        dir: dir.to_owned(),
        ..StateConfig::default()
    }
}

fn families() -> Vec<FamilyEntry> {
    vec![FamilyEntry {
        id: 0,
        name: "views".into(),
        minute_table: "metrics.views_by_minute".into(),
        day_table: "metrics.views_by_day".into(),
        hour_table: String::new(),
        total_table: String::new(),
        key_columns: vec!["page_id".into()],
        columns: vec!["views".into(), "bytes".into()],
    }]
}

fn write(page: &str, table: Granularity, views: i64) -> PartitionWrite {
    let mut columns = Columns::zeroed(2);
    columns.checked_add_at(0, views);
    columns.checked_add_at(1, views * 10);
    PartitionWrite {
        family: FamilyId(0),
        table,
        series: crate::series::encode([page]).into_boxed_slice(),
        shard: None,
        epoch: None,
        rows: vec![RowDelta {
            bucket: match table {
                Granularity::Minute => 20_000 * 1440 + 5,
                Granularity::Hour => 20_000 * 24,
                Granularity::Day => 20_000,
                Granularity::Total => 0,
            },
            columns,
            requeued_since: 0,
        }],
    }
}

fn to_records(
    w: &PartitionWrite,
    flush: &FlushId,
    request: u32,
    outcome: RecordOutcome,
) -> Vec<WriteRecord> {
    crate::flush::record_conversion::to_records(
        w,
        &families()[0],
        RecordSource {
            flush,
            request,
            time: "2026-11-30T12:00:00Z",
        },
        outcome,
        None,
    )
}

/// Every file's name, size and bytes: what must not change under a read.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

fn summarize(dir: &Path) -> (Summary, ScanReport) {
    let mut summary = Summary::default();
    let report = scan(dir, |source, r| summary.add(source, r)).unwrap();
    (summary, report)
}

/// Outcome, granularity → (records, delta sum), whatever the source.
fn by_outcome(summary: &Summary) -> BTreeMap<(String, String), (u64, i128)> {
    let mut out: BTreeMap<(String, String), (u64, i128)> = BTreeMap::new();
    for ((outcome, _, granularity), sums) in summary.totals() {
        let entry = out.entry((outcome.to_string(), granularity)).or_default();
        entry.0 += sums.records;
        entry.1 += sums.delta_sum;
    }
    out
}

/// Records a running state directory wrote: read while it is open (locked), with a torn
/// last line and an unreadable one counted, not failed on, and nothing changed.
#[test]
fn scans_logs_and_spill_while_the_directory_is_open_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let mut state = StateDir::open(&state_config(tmp.path())).unwrap();
    let flush = FlushId {
        writer: state.writer_id().to_owned(),
        incarnation: state.incarnation(),
        flush_seq: 1,
        nonce: None,
    };
    let unknown: Vec<WriteRecord> = [("a", 1), ("b", 2)]
        .iter()
        .enumerate()
        .flat_map(|(i, (p, v))| {
            to_records(
                &write(p, Granularity::Minute, *v),
                &flush,
                i as u32,
                RecordOutcome::Unknown,
            )
        })
        .collect();
    let rejected = to_records(
        &write("c", Granularity::Day, 4),
        &flush,
        2,
        RecordOutcome::Rejected,
    );
    state.log_batch(&unknown, &rejected);
    let spilled = to_records(
        &write("d", Granularity::Minute, 8),
        &flush,
        3,
        RecordOutcome::Spilled,
    );
    state.spill(&flush, &[spilled]).unwrap();
    // A crash mid-append (the next open sets it aside) and a line that is no record.
    let mut log = fs::OpenOptions::new()
        .append(true)
        .open(tmp.path().join("unknown.jsonl"))
        .unwrap();
    log.write_all(b"not json\n{\"time\":\"2026-").unwrap();
    drop(log);
    let before = snapshot(tmp.path());

    let (summary, report) = summarize(tmp.path());
    assert_eq!(snapshot(tmp.path()), before, "a read changes nothing");
    assert_eq!(
        by_outcome(&summary),
        BTreeMap::from([
            (("rejected".into(), "day".into()), (1, 44)),
            (("spilled".into(), "minute".into()), (1, 88)),
            (("unknown".into(), "minute".into()), (2, 33)),
        ])
    );
    let unknown_file = report
        .files
        .iter()
        .find(|f| f.file == "unknown.jsonl")
        .unwrap();
    assert_eq!(
        (
            unknown_file.records,
            unknown_file.unreadable,
            unknown_file.torn
        ),
        (2, 1, 1)
    );
    assert_eq!(report.journal.unfinished_flushes, 0);
    assert_eq!(
        report.locked_by,
        Some(std::process::id()),
        "this process holds the lock"
    );

    // A rotated file is read too, oldest first.
    fs::write(
        tmp.path().join("unknown.1.jsonl"),
        format!("{}\n", serde_json::to_string(&unknown[0]).unwrap()),
    )
    .unwrap();
    let mut files = Vec::new();
    scan(tmp.path(), |source, r| {
        files.push((source, r.key["page_id"].clone()))
    })
    .unwrap();
    assert_eq!(
        files[..3],
        [
            (Source::Log, "a".into()),
            (Source::Log, "a".into()),
            (Source::Log, "b".into())
        ]
    );
    drop(state);
}

/// A spill segment partly replayed: rows before the committed cursor are not counted.
#[test]
fn spill_rows_before_the_replay_cursor_are_consumed_not_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let mut state = StateDir::open(&state_config(tmp.path())).unwrap();
    let flush = FlushId {
        writer: state.writer_id().to_owned(),
        incarnation: state.incarnation(),
        flush_seq: 1,
        nonce: None,
    };
    let batches: Vec<Vec<WriteRecord>> = (0..3)
        .map(|i| {
            to_records(
                &write(&format!("p{i}"), Granularity::Minute, 1 << i),
                &flush,
                i,
                RecordOutcome::Spilled,
            )
        })
        .collect();
    state.spill(&flush, &batches).unwrap();
    state.load_spill(|n, _| n < 1).unwrap();
    state.commit_replay(state.replay_loaded()).unwrap();
    let (summary, report) = summarize(tmp.path());
    assert_eq!(
        by_outcome(&summary),
        BTreeMap::from([(("spilled".into(), "minute".into()), (2, 2 * 11 + 4 * 11))])
    );
    let segment = report
        .files
        .iter()
        .find(|f| f.file.starts_with("spill."))
        .unwrap();
    assert_eq!((segment.consumed, segment.records), (1, 2));
}

/// A flush killed mid-way: what the journal predicts is exactly what recovery then
/// writes; and after a recovery killed before its end (records written, flush not
/// ended), nothing is counted twice.
#[test]
fn journal_rows_are_classified_as_recovery_then_records_them_and_never_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let mut state = StateDir::open(&state_config(tmp.path())).unwrap();
    let flush = FlushId {
        writer: state.writer_id().to_owned(),
        incarnation: state.incarnation(),
        flush_seq: 1,
        nonce: None,
    };
    let writes = [
        write("applied", Granularity::Minute, 1),
        write("in_flight", Granularity::Minute, 2),
        write("not_applied", Granularity::Day, 4),
        write("unknown", Granularity::Minute, 8),
        write("rejected", Granularity::Day, 16),
        write("not_started", Granularity::Minute, 32),
        write("logged", Granularity::Minute, 64),
    ];
    state
        .journal_begin(&flush, "2026-11-30T12:00:00Z", None, &families(), &writes)
        .unwrap();
    let error = |kind: &str| (kind.to_string(), "text".to_string());
    state.journal_outcome(0, &Settled::Applied);
    let (kind, text) = error("unavailable");
    state.journal_outcome(2, &Settled::NotApplied { kind, text });
    let (kind, text) = error("write_timeout");
    state.journal_outcome(3, &Settled::Unknown { kind, text });
    let (kind, text) = error("invalid");
    state.journal_outcome(4, &Settled::Rejected { kind, text });
    state.journal_outcome(5, &Settled::NotStarted);
    let (kind, text) = error("overloaded");
    state.journal_outcome(6, &Settled::Unknown { kind, text });
    state.journal_flush();
    // The flush had written one of its records before it was killed.
    state.log_batch(
        &to_records(&writes[6], &flush, 6, RecordOutcome::Unknown),
        &[],
    );
    drop(state); // killed

    let (predicted, report) = summarize(tmp.path());
    assert_eq!(report.journal.unfinished_flushes, 1);
    assert_eq!(
        (report.journal.records, report.journal.already_recorded),
        (5, 1)
    );
    let expected = BTreeMap::from([
        (("rejected".into(), "day".into()), (1, 16 * 11)),
        (("spilled".into(), "day".into()), (1, 4 * 11)),
        (("spilled".into(), "minute".into()), (1, 32 * 11)),
        (("unknown".into(), "minute".into()), (3, (2 + 8 + 64) * 11)),
    ]);
    assert_eq!(by_outcome(&predicted), expected);
    let mut in_flight = Vec::new();
    scan(tmp.path(), |source, r| {
        if source == Source::Journal
            && r.error
                .as_ref()
                .is_some_and(|e| e.kind == "in_flight_at_crash")
        {
            in_flight.push(r.key["page_id"].clone());
        }
    })
    .unwrap();
    assert_eq!(in_flight, ["in_flight"]);

    // Recovery writes the records; the journal then holds nothing unfinished.
    let journal = fs::read(tmp.path().join("journal.wal")).unwrap();
    let state = StateDir::open(&state_config(tmp.path())).unwrap();
    drop(state);
    let (recovered, report) = summarize(tmp.path());
    assert_eq!(report.journal.unfinished_flushes, 0);
    assert_eq!(by_outcome(&recovered), expected, "the prediction was exact");
    assert!(
        recovered
            .groups()
            .keys()
            .all(|k| k.source != Source::Journal)
    );

    // Recovery killed after its records, before it ended the flush: the same journal
    // beside the records it wrote. Every row is counted once, from the files.
    fs::write(tmp.path().join("journal.wal"), &journal).unwrap();
    let (again, report) = summarize(tmp.path());
    assert_eq!(report.journal.unfinished_flushes, 1);
    assert_eq!(
        (report.journal.records, report.journal.already_recorded),
        (0, 6)
    );
    assert_eq!(by_outcome(&again), expected);
}

#[test]
fn a_missing_or_unreadable_directory_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    let error = scan(&missing, |_, _| {}).unwrap_err();
    assert!(matches!(error, ScanError::Missing(_)));
    assert!(error.to_string().contains("does not exist"), "{error}");
    let file = tmp.path().join("file");
    fs::write(&file, "").unwrap();
    assert!(matches!(
        scan(&file, |_, _| {}).unwrap_err(),
        ScanError::NotADirectory(_)
    ));
    // An empty directory is no error: nothing to report.
    let (summary, report) = summarize(tmp.path());
    assert!(summary.groups().is_empty() && report.files.is_empty());
}

/// The `writer_totals` families' spill and replay files of an earlier version (until a
/// start moves them into a segment) are read as `spilled` rows of source `spill`, their
/// deltas the parts of the totals not known applied; a torn last line is counted, not
/// read.
#[test]
fn totals_spill_and_replay_files_are_spilled_rows() {
    use crate::state::totals_files::LegacyTotalRecord;
    let tmp = tempfile::tempdir().unwrap();
    let total = |page: &str, granularity: &str, unconfirmed: i64| LegacyTotalRecord {
        time: "2026-11-30T10:00:00Z".into(),
        writer: "w1/3/abcd".into(),
        family: "views".into(),
        table: format!("metrics.views_by_{granularity}"),
        granularity: granularity.into(),
        key: BTreeMap::from([("page_id".to_owned(), page.to_owned())]),
        day: "2026-11-30".into(),
        minute: (granularity == "minute").then_some(600),
        month: (granularity == "day").then(|| "2026-11".to_owned()),
        totals: BTreeMap::from([("views".to_owned(), 100)]),
        unconfirmed: BTreeMap::from([("views".to_owned(), unconfirmed)]),
        timestamp: 1,
        error: None,
    };
    let lines = |records: &[LegacyTotalRecord]| -> String {
        records
            .iter()
            .map(|r| serde_json::to_string(r).unwrap() + "\n")
            .collect()
    };
    fs::write(
        tmp.path().join("totals.replay.1-5.jsonl"),
        lines(&[total("a", "minute", 7), total("a", "day", 7)]),
    )
    .unwrap();
    fs::write(
        tmp.path().join("totals.spill.jsonl"),
        lines(&[total("b", "minute", 2)]) + "{\"time\":",
    )
    .unwrap();
    let (summary, report) = summarize(tmp.path());
    assert_eq!(
        by_outcome(&summary),
        BTreeMap::from([
            (("spilled".into(), "day".into()), (1, 7)),
            (("spilled".into(), "minute".into()), (2, 9)),
        ])
    );
    assert!(
        summary
            .totals()
            .keys()
            .all(|(_, source, _)| *source == Source::Spill)
    );
    let files: BTreeMap<&str, (u64, u64)> = report
        .files
        .iter()
        .map(|f| (f.file.as_str(), (f.records, f.torn)))
        .collect();
    assert_eq!(files["totals.spill.jsonl"], (1, 1));
    assert_eq!(files["totals.replay.1-5.jsonl"], (2, 0));
    let mut writers = Vec::new();
    scan(tmp.path(), |_, r| {
        writers.push((r.writer.clone(), r.incarnation))
    })
    .unwrap();
    assert!(
        writers.iter().all(|(w, i)| w == "w1" && *i == 3),
        "the writer column names writer and incarnation: {writers:?}"
    );
}
