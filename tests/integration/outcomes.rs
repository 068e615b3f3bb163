//! `countersink outcomes` on state directories that real faults filled: its sums must
//! equal what the writer's own ledger counted (the `countersink_stage_delta` stages), read
//! while the writer holds the directory and after it stopped, without changing a byte;
//! and on a flush killed after its group commit, its reading of the journal must equal
//! what the next start's recovery records and reports.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use countersink::config::FamilyConfig;
use countersink::telemetry::Accounting;
use cqlsim::{FaultKind, FaultRule};
use serde_json::Value;

use crate::common::{T0, Writer, cli_stdout, config, run_cli, start_cqlsim};
use crate::crash::harness::{Rig, Settings, metric};

/// Runs `countersink outcomes ARGS... --state-dir DIR --format json`.
fn outcomes_json(dir: &Path, args: &[&str]) -> String {
    let mut all: Vec<&str> = vec!["outcomes"];
    all.extend_from_slice(args);
    let dir = dir.display().to_string();
    all.extend_from_slice(&["--state-dir", &dir, "--format", "json"]);
    cli_stdout(all)
}

/// `(outcome, source, granularity)` → (records, delta sum).
type Totals = BTreeMap<(String, String, String), (u64, i128)>;

/// The totals of `outcomes summary`, and its whole answer.
fn totals(dir: &Path, filters: &[&str]) -> (Totals, Value) {
    let mut args = vec!["summary"];
    args.extend_from_slice(filters);
    let summary: Value = serde_json::from_str(&outcomes_json(dir, &args)).expect("JSON");
    let mut out = BTreeMap::new();
    for total in summary["totals"].as_array().expect("totals") {
        let text = |k: &str| total[k].as_str().expect(k).to_owned();
        out.insert(
            (text("outcome"), text("source"), text("granularity")),
            (
                total["records"].as_u64().expect("records"),
                text("delta_sum").parse::<i128>().expect("sum"),
            ),
        );
    }
    (out, summary)
}

/// (outcome, granularity) → delta sum, over the files (log and spill).
fn file_sums(totals: &Totals) -> BTreeMap<(String, String), i128> {
    let mut sums = BTreeMap::new();
    for ((outcome, source, granularity), (_, sum)) in totals {
        assert_ne!(source, "journal", "no unfinished flush: {totals:?}");
        *sums
            .entry((outcome.clone(), granularity.clone()))
            .or_default() += sum;
    }
    sums
}

/// What the ledger holds, in the same shape (zero stages left out).
fn ledger_sums(a: &Accounting) -> BTreeMap<(String, String), i128> {
    let mut sums = BTreeMap::new();
    for (granularity, stages) in [("minute", a.minute), ("day", a.day)] {
        for (outcome, sum) in [
            ("unknown", stages.unknown),
            ("rejected", stages.rejected),
            ("spilled", stages.spilled),
        ] {
            if sum != 0 {
                sums.insert((outcome.to_string(), granularity.to_string()), sum);
            }
        }
    }
    sums
}

fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

/// Unknown (write timeouts, applied or not), rejected (a key value the int column cannot
/// hold) and spilled (the day table unavailable in the final flush) records: the summary
/// equals the ledger per outcome and granularity, while the writer runs and after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summary_sums_equal_what_faults_left_and_the_ledger_counted() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.store.request_timeout = Duration::from_millis(300);
    let store = start_cqlsim(
        &mut config,
        "injects faults and creates a table with an int key",
    )
    .await;
    let server = store.sim();
    for cql in [
        "CREATE TABLE metrics.scores_by_minute (player int, day date, minute smallint, points counter, wins counter, PRIMARY KEY ((player, day), minute))",
        "CREATE TABLE metrics.scores_by_day (player int, month text, day date, points counter, wins counter, PRIMARY KEY ((player, month), day))",
    ] {
        server.execute(None, cql).expect("table");
    }
    config.families.push(FamilyConfig {
        name: "scores".into(),
        minute_table: "metrics.scores_by_minute".into(),
        day_table: "metrics.scores_by_day".into(),
        key: vec!["player".into()],
        columns: [
            ("game.points".to_string(), "points".to_string()),
            ("game.wins".to_string(), "wins".to_string()),
        ]
        .into(),
        ..FamilyConfig::default()
    });
    let mut writer = Writer::start(&config).await;
    server.add_fault(
        FaultRule::new(FaultKind::WriteTimeout)
            .table("metrics.views_by_minute")
            .applied(true)
            .probability(0.3),
    );
    server.add_fault(
        FaultRule::new(FaultKind::WriteTimeout)
            .table("metrics.views_by_minute")
            .probability(0.2),
    );
    for flush in 0..4_i64 {
        let now = T0 - 1800 + flush * 60;
        for i in 0..200_i64 {
            let page = format!("p{}", i % 40);
            writer.incr("page.views", &[("page_id", &page)], i % 5 + 1, now);
            let region = if i % 2 == 0 { "eu" } else { "us" };
            writer.incr("hits", &[("region", region)], 1, now);
        }
        // Player `7` fits the int column; `bad-N` is rejected by the driver, both tables.
        writer.incr("game.points", &[("player", "7")], 10, now);
        writer.incr(
            "game.points",
            &[("player", &format!("bad-{flush}"))],
            3,
            now,
        );
        writer.incr("game.wins", &[("player", &format!("bad-{flush}"))], 1, now);
        writer.flusher.flush_now().await;
    }

    // Read while the writer holds the directory: nothing changes, and the sums are the
    // ledger's.
    let before = snapshot(dir.path());
    let (running, _) = tokio::task::block_in_place(|| totals(dir.path(), &[]));
    assert_eq!(
        snapshot(dir.path()),
        before,
        "outcomes changed the state directory"
    );
    let a = writer.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert!(
        a.minute.unknown > 0 && a.minute.rejected > 0 && a.day.rejected > 0,
        "{a:?}"
    );
    assert_eq!(file_sums(&running), ledger_sums(&a));
    // Records: one per write here (one minute per flush, one row per write), so the
    // counts are the store writes by outcome too.
    let writes = writer.ledger.writes();
    let count = |class: &str| -> u64 {
        writes
            .iter()
            .filter(|((_, o), _)| o.label() == class)
            .map(|(_, n)| n)
            .sum()
    };
    let records = |outcome: &str| -> u64 {
        running
            .iter()
            .filter(|((o, _, _), _)| o == outcome)
            .map(|(_, (n, _))| n)
            .sum()
    };
    assert_eq!(records("unknown"), count("unknown"));
    assert_eq!(records("rejected"), count("rejected"));
    assert_eq!(records("rejected"), 8, "4 players × 2 tables");

    // The final flush with the generic day table unavailable: its writes are spilled.
    server.clear_faults();
    server.add_fault(FaultRule::new(FaultKind::Unavailable).table("countersink.counts_by_day"));
    for i in 0..50_i64 {
        writer.incr("hits", &[("region", "eu")], i + 1, T0 - 60);
    }
    let (engine, ledger) = (Arc::clone(&writer.engine), Arc::clone(&writer.ledger));
    writer.flusher.finish().await;
    let a = Accounting::read(&engine, &ledger);
    assert!(a.is_balanced(), "{a:?}");
    assert!(a.day.spilled > 0, "{a:?}");
    let (stopped, summary) = tokio::task::block_in_place(|| totals(dir.path(), &[]));
    assert_eq!(file_sums(&stopped), ledger_sums(&a));
    assert!(summary["locked_by_pid"].is_null(), "{summary}");
    assert_eq!(summary["journal"]["unfinished_flushes"], 0);

    // Filters: the rejected rows of one family; a tag of the generic family; and `list`
    // gives the records the summary counted.
    tokio::task::block_in_place(|| {
        let (rejected, _) = totals(dir.path(), &["--outcome", "rejected", "--family", "scores"]);
        assert_eq!(
            rejected
                .keys()
                .map(|(o, _, _)| o.as_str())
                .collect::<Vec<_>>(),
            ["rejected", "rejected"]
        );
        assert_eq!(
            rejected.values().map(|(_, s)| s).sum::<i128>(),
            2 * 4 * (3 + 1),
            "points 3 and wins 1, 4 players, both tables"
        );
        let (eu, _) = totals(dir.path(), &["--outcome", "spilled", "--tag", "region:eu"]);
        assert_eq!(
            eu.values().map(|(_, s)| s).sum::<i128>(),
            a.day.spilled,
            "every spilled row is region:eu"
        );
        let (none, _) = totals(dir.path(), &["--tag", "region:mars"]);
        assert!(none.is_empty());
        let listed = outcomes_json(dir.path(), &["list", "--outcome", "unknown"]);
        let listed: Vec<Value> = listed
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        assert_eq!(listed.len() as u64, records("unknown"));
        assert!(
            listed
                .iter()
                .all(|r| r["outcome"] == "unknown" && r["source"] == "log")
        );
        let text = cli_stdout([
            "outcomes",
            "summary",
            "--state-dir",
            &dir.path().display().to_string(),
        ]);
        assert!(text.contains("metrics.views_by_minute"), "{text}");
        assert!(text.contains("countersink.counts_by_day"), "{text}");
    });
    store.shutdown().await;
}

/// A missing directory is a usage error that names it; a bad filter names the value.
#[test]
fn a_missing_directory_or_a_bad_filter_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("state");
    let out = run_cli([
        "outcomes",
        "summary",
        "--state-dir",
        &missing.display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("does not exist") && stderr.contains("state"),
        "{stderr}"
    );
    let out = run_cli(["outcomes", "list", "--outcome", "applied"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("applied"));
}

/// A flush killed after its group commit: `outcomes` reads its requests from the
/// journal as in flight (unknown, `in_flight_at_crash`); the next start's recovery logs
/// exactly those rows (`countersink_previous_stop_unknown_rows`), and `outcomes` then
/// finds them in the log, same sums, counted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journal_reading_of_a_killed_flush_equals_what_recovery_logs() {
    let mut rig = Rig::new(Settings::default()).await;
    tokio::task::block_in_place(|| {
        let mut serve = rig.start(Some("journal_committed"));
        let increments: Vec<(u32, i64, i64)> = (0..40)
            .map(|i| ((i % 8) as u32, rig.base + (i % 3) * 60, 1 + i % 4))
            .collect();
        rig.feed(&mut serve, &increments);
        serve.wait_for(
            "crash point journal_committed reached",
            Duration::from_secs(20),
        );
        rig.kill(serve);

        let (predicted, summary) = totals(rig.state(), &[]);
        assert_eq!(summary["journal"]["unfinished_flushes"], 1, "{summary}");
        assert!(
            !predicted.is_empty()
                && predicted
                    .keys()
                    .all(|(o, s, _)| o == "unknown" && s == "journal"),
            "{predicted:?}"
        );
        let listed = outcomes_json(rig.state(), &["list"]);
        assert!(
            listed
                .lines()
                .all(|l| l.contains("\"kind\":\"in_flight_at_crash\"")),
            "{listed}"
        );
        let rows: u64 = predicted.values().map(|(n, _)| n).sum();

        let mut serve = rig.start(None);
        serve.wait_metric(|t| {
            metric(t, "countersink_previous_stop_unknown_rows") == Some(rows as f64)
        });
        let (recovered, _) = totals(rig.state(), &["--outcome", "unknown"]);
        let as_log: BTreeMap<_, _> = predicted
            .iter()
            .map(|((o, _, g), v)| ((o.clone(), "log".to_string(), g.clone()), *v))
            .collect();
        assert_eq!(
            recovered, as_log,
            "recovery logged what outcomes read from the journal"
        );
        rig.settle_and_stop(serve);
    });
}
