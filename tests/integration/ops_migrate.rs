//! Migration by read-and-increment between two stores: resumable after SIGKILL with the
//! target equal to the source exactly, unknown outcomes reported (never re-sent) and then
//! resolved against the target, definite failures sent again, live sources refused.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use countersink::config::{Config, ShardPlacement};

use crate::common::{BIN, Writer, config, run_cli, start_cqlsim};

/// Source: the views family with 4 shards in the partition key. Target: other tables, 2
/// shards in the clustering key.
async fn two_stores(
    dir: &std::path::Path,
) -> (cqlsim::Server, cqlsim::Server, Config, String, String) {
    let mut source = config(&dir.join("source"));
    source.families[0].shards = 4;
    source.generic.enabled = false;
    let source_server = start_cqlsim(&mut source, "needs two stores, a source and a target")
        .await
        .into_sim();
    let mut target = config(&dir.join("target"));
    target.generic.enabled = false;
    target.families[0].minute_table = "metrics.views_by_minute_v2".into();
    target.families[0].day_table = "metrics.views_by_day_v2".into();
    target.families[0].shards = 2;
    target.families[0].shard_placement = ShardPlacement::Clustering;
    let target_server = start_cqlsim(&mut target, "needs two stores, a source and a target")
        .await
        .into_sim();
    let file = |name: &str, contact: &str, minute: &str, day: &str, shards: &str| {
        let path = dir.join(name);
        std::fs::write(
            &path,
            format!(
                "[store]\ncontact_points = [\"{contact}\"]\nrequest_timeout = \"2s\"\n[generic]\nenabled = false\n[[family]]\nname = \"views\"\nminute_table = \"{minute}\"\nday_table = \"{day}\"\nkey = [\"page_id\"]\n{shards}\n[family.columns]\n\"page.views\" = \"views\"\n\"page.bytes\" = \"bytes\"\n"
            ),
        )
        .unwrap();
        path.display().to_string()
    };
    let from = file(
        "from.toml",
        &source.store.contact_points[0],
        "metrics.views_by_minute",
        "metrics.views_by_day",
        "shards = 4",
    );
    let to = file(
        "to.toml",
        &target.store.contact_points[0],
        "metrics.views_by_minute_v2",
        "metrics.views_by_day_v2",
        "shards = 2\nshard_placement = \"clustering\"",
    );
    (source_server, target_server, source, from, to)
}

/// 120 pages over three days (two of them in one month, one in the next), several
/// minutes each, written in several flushes so each key is spread over shards.
async fn fill(source: &Config) {
    let mut writer = Writer::start(source).await;
    for (d, day) in ["2025-03-30", "2025-03-31", "2025-04-01"]
        .iter()
        .enumerate()
    {
        let date = countersink::bucket::parse_date(day).unwrap();
        let noon =
            i64::from(countersink::bucket::Day::from_date(date).unwrap().0) * 86_400 + 43_200;
        for round in 0..3_i64 {
            for page in 0..120_i64 {
                let at = noon + 60 * ((page + round) % 5);
                let tag = format!("p{page:03}");
                writer.incr(
                    "page.views",
                    &[("page_id", tag.as_str())],
                    1 + page + d as i64,
                    at,
                );
                writer.incr(
                    "page.bytes",
                    &[("page_id", tag.as_str())],
                    100 * (round + 1),
                    at,
                );
            }
            let report = writer.flusher.flush_now().await;
            assert_eq!(report.applied, report.writes);
        }
    }
}

/// A table's values summed per (key, partition bucket, clustering bucket), shards merged.
fn contents(
    server: &cqlsim::Server,
    table: &str,
    bucket: &str,
    clustering: &str,
) -> BTreeMap<String, (i64, i64)> {
    let rows = server
        .execute(
            None,
            &format!("SELECT page_id, {bucket}, {clustering}, views, bytes FROM {table}"),
        )
        .unwrap();
    let mut out: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for i in 0..rows.len() {
        let id = format!(
            "{:?}/{:?}/{:?}",
            rows.get(i, "page_id"),
            rows.get(i, bucket),
            rows.get(i, clustering)
        );
        let entry = out.entry(id).or_default();
        entry.0 += rows.get_i64(i, "views").unwrap_or(0);
        entry.1 += rows.get_i64(i, "bytes").unwrap_or(0);
    }
    out.retain(|_, v| *v != (0, 0));
    out
}

fn assert_target_equals_source(source: &cqlsim::Server, target: &cqlsim::Server) {
    for (from, to, bucket, clustering) in [
        (
            "metrics.views_by_minute",
            "metrics.views_by_minute_v2",
            "day",
            "minute",
        ),
        (
            "metrics.views_by_day",
            "metrics.views_by_day_v2",
            "month",
            "day",
        ),
    ] {
        let a = contents(source, from, bucket, clustering);
        let b = contents(target, to, bucket, clustering);
        assert!(!a.is_empty());
        assert_eq!(a.len(), b.len(), "{to}");
        assert_eq!(a, b, "{to}");
    }
}

fn no_counter_deletes(servers: [&cqlsim::Server; 2]) {
    for server in servers {
        for ((ks, table), stats) in server.stats().tables {
            if table.starts_with("views_by") {
                assert!(
                    stats.deletes.is_empty(),
                    "{ks}.{table}: {:?}",
                    stats.deletes
                );
            }
        }
    }
}

fn migrate<S: AsRef<str>>(args: &[S]) -> Output {
    run_cli(std::iter::once("migrate").chain(args.iter().map(AsRef::as_ref)))
}

/// [`migrate`] on a blocking thread, so that the test's runtime (its stores, a live
/// writer) goes on meanwhile.
async fn migrate_off_runtime(args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || migrate(&args))
        .await
        .unwrap()
}

/// The arguments of a migration of the `views` family from `from` to `to`, then `rest`.
fn views<'a>(from: &'a str, to: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--from", from, "--to", to, "--family", "views"];
    args.extend_from_slice(rest);
    args
}

/// The copy is exact: the target's tables equal the source's, `--verify-only` (with the
/// run's arguments `args`) finds no difference, and no counter was deleted in either.
fn assert_copied_exactly(source: &cqlsim::Server, target: &cqlsim::Server, args: &[&str]) {
    assert_target_equals_source(source, target);
    let verify = migrate(&[args, &["--verify-only"]].concat());
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
    no_counter_deletes([source, target]);
}

/// SIGKILL while chunks are in flight (the target answers 300 ms late, the writes already
/// applied), then a rerun: chunks applied are skipped, chunks the killed run left without
/// an outcome are resolved against the target (not re-sent blindly), the rest is sent,
/// and the target equals the source exactly. A third run sends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_killed_midway_and_rerun_copies_the_source_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (source, target, source_config, from, to) = two_stores(dir.path()).await;
    fill(&source_config).await;
    target.set_faults(vec![
        "delay,for=300ms,table=metrics.views_by_minute_v2"
            .parse()
            .unwrap(),
    ]);
    let common = views(
        &from,
        &to,
        &[
            "--quiet-period",
            "1s",
            "--settle",
            "1s",
            "--concurrency",
            "4",
            "--format",
            "json",
        ],
    );
    let mut child = Command::new(BIN)
        .arg("migrate")
        .args(&common)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let minute_writes = || {
        target
            .stats()
            .table("metrics", "views_by_minute_v2")
            .writes_applied
    };
    for _ in 0..1000 {
        if minute_writes() >= 40 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let at_kill = minute_writes();
    assert!(
        (40..360).contains(&at_kill),
        "killed midway: {at_kill} minute partitions written"
    );
    target.clear_faults();
    tokio::time::sleep(Duration::from_millis(400)).await;

    let rerun = migrate_off_runtime(&common).await;
    let stdout = String::from_utf8_lossy(&rerun.stdout);
    assert!(
        rerun.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&rerun.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert!(report["skipped"].as_u64().unwrap() >= 30, "{report}");
    assert!(
        report["resolved_applied"].as_u64().unwrap() + report["resolved_resent"].as_u64().unwrap()
            >= 1,
        "the killed run's in-flight chunks were resolved: {report}"
    );
    assert_eq!(report["unknown"], serde_json::json!([]));
    assert_target_equals_source(&source, &target);

    let third = migrate(&common);
    assert!(third.status.success());
    let report: serde_json::Value = serde_json::from_slice(&third.stdout).unwrap();
    assert_eq!(report["applied"], 0, "{report}");
    assert_copied_exactly(&source, &target, &common);
    source.shutdown().await.unwrap();
    target.shutdown().await.unwrap();
}

/// Every fifth write to the target times out after applying (unknown) and every third
/// is refused as unavailable (definitely not applied). The run reports both and exits 3;
/// `--verify-only` names exactly the partitions holding unknown chunks (their target
/// equals the source: the writes did apply), and the refused ones as not equal. A rerun
/// sends the refused chunks again, resolves the unknown ones by reading the target, and
/// the copy is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_outcomes_are_reported_never_resent_and_resolved_later() {
    let dir = tempfile::tempdir().unwrap();
    let (source, target, source_config, from, to) = two_stores(dir.path()).await;
    fill(&source_config).await;
    target.set_faults(vec![
        "write-timeout,applied=yes,table=metrics.views_by_minute_v2,every=5"
            .parse()
            .unwrap(),
        "unavailable,table=metrics.views_by_day_v2,every=3"
            .parse()
            .unwrap(),
    ]);
    let common = views(
        &from,
        &to,
        &[
            "--day-from",
            "2025-03-01",
            "--day-to",
            "2025-04-30",
            "--settle",
            "1s",
            "--format",
            "json",
        ],
    );
    let first = migrate(&common);
    assert_eq!(
        first.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    let part_partition = |part: &serde_json::Value| {
        let v: (String, Vec<String>, String, u32) =
            serde_json::from_str(part.as_str().unwrap()).unwrap();
        (v.0, v.1, v.2)
    };
    let unknown: BTreeSet<_> = report["unknown"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| part_partition(&u[0]))
        .collect();
    let refused: BTreeSet<_> = report["not_applied"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| part_partition(&u[0]))
        .collect();
    let stats = target.stats();
    assert_eq!(
        unknown.len() as u64,
        stats.fault(cqlsim::FaultKind::WriteTimeout).fired,
        "one chunk per minute partition: each timed-out write is one unknown partition"
    );
    assert!(!refused.is_empty() && unknown.iter().all(|p| p.0 == "minute"));

    target.clear_faults();
    let requests_before = target
        .stats()
        .table("metrics", "views_by_minute_v2")
        .write_requests;
    let verify = migrate(&[&common[..], &["--verify-only"]].concat());
    assert_eq!(verify.status.code(), Some(3));
    assert_eq!(
        target
            .stats()
            .table("metrics", "views_by_minute_v2")
            .write_requests,
        requests_before,
        "verify writes nothing"
    );
    let found: serde_json::Value = serde_json::from_slice(&verify.stdout).unwrap();
    let mut reported_unknown = BTreeSet::new();
    let mut reported_other = BTreeSet::new();
    for d in found["differences"].as_array().unwrap() {
        let p = &d["partition"];
        let id = (
            p["table"].as_str().unwrap().to_owned(),
            vec![p["key"][0].as_str().unwrap().to_owned()],
            p["bucket"].as_str().unwrap().to_owned(),
        );
        if d["status"] == "unknown" {
            assert_eq!(d["target_equals_source"], true, "applied=yes: {d}");
            reported_unknown.insert(id);
        } else {
            assert_eq!(d["target_equals_source"], false, "{d}");
            reported_other.insert(id);
        }
    }
    assert_eq!(reported_unknown, unknown, "exactly the unknown partitions");
    assert_eq!(reported_other, refused);

    tokio::time::sleep(Duration::from_millis(1100)).await;
    let rerun = migrate(&common);
    assert!(
        rerun.status.success(),
        "{}",
        String::from_utf8_lossy(&rerun.stdout)
    );
    let report: serde_json::Value = serde_json::from_slice(&rerun.stdout).unwrap();
    assert_eq!(
        report["resolved_applied"].as_u64().unwrap(),
        unknown.len() as u64
    );
    assert_eq!(report["applied"].as_u64().unwrap(), refused.len() as u64);
    assert_copied_exactly(&source, &target, &common);
    source.shutdown().await.unwrap();
    target.shutdown().await.unwrap();
}

/// While a writer keeps flushing into the source, a migration whose range reaches today
/// is refused after its quiet period, and nothing reaches the target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_source_is_refused_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let (source, target, source_config, from, to) = two_stores(dir.path()).await;
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let writer_config = source_config.clone();
    let live = tokio::spawn(async move {
        let mut writer = Writer::start(&writer_config).await;
        while !*stopped.borrow() {
            let now = countersink::bucket::unix_secs(std::time::SystemTime::now());
            writer.incr("page.views", &[("page_id", "live")], 1, now);
            writer.flusher.flush_now().await;
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                _ = stopped.changed() => {}
            }
        }
    });
    let out = migrate_off_runtime(&views(&from, &to, &["--quiet-period", "1s"])).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("changed during the quiet period"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        target
            .stats()
            .table("metrics", "views_by_minute_v2")
            .write_requests,
        0
    );
    let allowed = migrate_off_runtime(&views(&from, &to, &["--allow-live"])).await;
    assert!(
        allowed.status.success(),
        "{}",
        String::from_utf8_lossy(&allowed.stderr)
    );
    assert!(
        target
            .stats()
            .table("metrics", "views_by_minute_v2")
            .writes_applied
            > 0
    );
    stop.send(true).unwrap();
    live.await.unwrap();
    source.shutdown().await.unwrap();
    target.shutdown().await.unwrap();
}

/// `to`'s configuration with `flush.max_batch_rows = rows` (a chunk's size), as a new
/// file `name` beside it.
fn with_batch_rows(to: &str, name: &str, rows: usize) -> String {
    let text = std::fs::read_to_string(to).unwrap();
    let path = std::path::Path::new(to).with_file_name(name);
    std::fs::write(&path, format!("{text}\n[flush]\nmax_batch_rows = {rows}\n")).unwrap();
    path.display().to_string()
}

/// Issue item 1: one page with 20 minute rows, cut into chunks of 16; the target refuses
/// the second chunk (unavailable: definitely not applied). A rerun with chunks of 10
/// sends the 4 rows that are missing, not rows 10..19 (6 of them a second time): the
/// target equals the source, and cqlsim's request log shows each minute row applied
/// exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerun_with_other_chunk_sizes_sends_each_row_once() {
    let dir = tempfile::tempdir().unwrap();
    let (source, target, source_config, from, to) = two_stores(dir.path()).await;
    let mut writer = Writer::start(&source_config).await;
    let date = countersink::bucket::parse_date("2025-03-30").unwrap();
    let noon = i64::from(countersink::bucket::Day::from_date(date).unwrap().0) * 86_400 + 43_200;
    for minute in 0..20_i64 {
        writer.incr(
            "page.views",
            &[("page_id", "p")],
            1 + minute,
            noon + 60 * minute,
        );
        writer.incr("page.bytes", &[("page_id", "p")], 1_000, noon + 60 * minute);
    }
    let report = writer.flusher.flush_now().await;
    assert_eq!(report.applied, report.writes);
    drop(writer);
    target.enable_request_log();
    target.set_faults(vec![
        "unavailable,table=metrics.views_by_minute_v2,after=1,max=1"
            .parse()
            .unwrap(),
    ]);
    let by_16 = with_batch_rows(&to, "to-16.toml", 16);
    let first = migrate(&views(
        &from,
        &by_16,
        &["--day-to", "2025-03-31", "--format", "json"],
    ));
    assert_eq!(
        first.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    assert_eq!(
        report["not_applied"].as_array().unwrap().len(),
        1,
        "{report}"
    );
    target.clear_faults();

    let by_10 = with_batch_rows(&to, "to-10.toml", 10);
    let rerun = migrate(&views(
        &from,
        &by_10,
        &["--day-to", "2025-03-31", "--format", "json"],
    ));
    assert!(
        rerun.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&rerun.stdout),
        String::from_utf8_lossy(&rerun.stderr)
    );
    assert_target_equals_source(&source, &target);
    let mut applied_minutes: BTreeMap<String, u32> = BTreeMap::new();
    for request in target.request_log().iter().filter(|r| r.applied) {
        for statement in &request.statements {
            if statement.table == "views_by_minute_v2" {
                *applied_minutes
                    .entry(statement.values["minute"].clone())
                    .or_default() += 1;
            }
        }
    }
    assert_eq!(applied_minutes.len(), 20, "{applied_minutes:?}");
    assert!(
        applied_minutes.values().all(|n| *n == 1),
        "a minute row applied twice: {applied_minutes:?}"
    );
    let third = migrate(&views(
        &from,
        &by_10,
        &["--day-to", "2025-03-31", "--format", "json"],
    ));
    let report: serde_json::Value = serde_json::from_slice(&third.stdout).unwrap();
    assert_eq!(report["applied"], 0, "{report}");
    assert_copied_exactly(
        &source,
        &target,
        &views(&from, &by_10, &["--day-to", "2025-03-31"]),
    );
    source.shutdown().await.unwrap();
    target.shutdown().await.unwrap();
}
