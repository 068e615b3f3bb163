//! Leaderboards: exact rankings from the key index and the counters (shards summed), ties
//! by key; a run killed midway leaves the previous ranking served; `serve` runs the job.

use countersink::vocabulary::Transport;
use std::process::{Command, Stdio};
use std::time::Duration;

use countersink::config::Config;

use crate::common::{BIN, IndexedWriter, T0, cli_stdout, config, day_and_minute, start_cqlsim};

/// The configuration the CLI gets: the views family with 4 shards in the partition key,
/// the key index, and a board of the views column.
fn write_config(dir: &std::path::Path, contact: &str, top: usize) -> std::path::PathBuf {
    let file = dir.join("ops.toml");
    std::fs::write(
        &file,
        format!(
            r#"[store]
contact_points = ["{contact}"]
request_timeout = "2s"

[key_index]
enabled = true

[[family]]
name = "views"
minute_table = "metrics.views_by_minute"
day_table = "metrics.views_by_day"
key = ["page_id"]
shards = 4
[family.columns]
"page.views" = "views"
"page.bytes" = "bytes"

[[leaderboard]]
name = "top_pages"
family = "views"
column = "views"
top = {top}
"#
        ),
    )
    .unwrap();
    file
}

fn test_config(dir: &std::path::Path) -> Config {
    let mut config = config(dir);
    config.families[0].shards = 4;
    config.key_index.enabled = true;
    config
        .leaderboards
        .push(countersink::config::LeaderboardConfig {
            name: "top_pages".into(),
            family: "views".into(),
            column: "views".into(),
            top: 10,
            ..Default::default()
        });
    config
}

/// Adds `value` to each page's views at `now`, in two flushes (two shards).
async fn add(writer: &mut IndexedWriter, values: &[(String, i64)], now: i64) {
    for part in 0..2 {
        for (page, value) in values {
            let share = if part == 0 {
                value / 2
            } else {
                value - value / 2
            };
            if share != 0 {
                writer.incr("page.views", &[("page_id", page.as_str())], share, now);
            }
            writer.incr("page.bytes", &[("page_id", page.as_str())], 1000, now);
        }
        writer.flush().await;
    }
}

/// Page `p0000`..`p0999`, each with a known number of views; many share a value.
fn known_values() -> Vec<(String, i64)> {
    (0..1000_i64)
        .map(|i| (format!("p{i:04}"), (i * 7919) % 400 + 1))
        .collect()
}

/// The expected ranking, computed here: score descending, ties by key.
fn expected_top(values: &[(String, i64)], n: usize) -> Vec<(i64, String)> {
    let mut all: Vec<(i64, String)> = values.iter().map(|(k, v)| (*v, k.clone())).collect();
    all.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    all.truncate(n);
    all
}

fn top_json(file: &std::path::Path, day: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "top",
        "top_pages",
        "--config",
        file.to_str().unwrap(),
        "--day",
        day,
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    serde_json::from_str(&cli_stdout(args)).unwrap()
}

fn entries(ranking: &serde_json::Value) -> Vec<(i64, String)> {
    ranking["entries"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, e)| {
            assert_eq!(e["rank"], i + 1);
            (
                e["score"].as_i64().unwrap(),
                e["key"][0].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn run_once(file: &std::path::Path, day: &str) -> String {
    cli_stdout([
        "leaderboard",
        "run",
        "--once",
        "--config",
        file.to_str().unwrap(),
        "--day",
        day,
    ])
}

/// 1,000 keys with known values (ties included), each written in two flushes to two
/// shards: the board holds exactly the top 10 by value, ties in key order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_keys_give_the_exact_top_ten_with_ties_by_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    let server = start_cqlsim(
        &mut config,
        "counts the store's requests and injects faults",
    )
    .await
    .into_sim();
    let file = write_config(dir.path(), &config.store.contact_points[0], 10);
    let now = T0 - 6 * 3600;
    let (day, _) = day_and_minute(now);
    let values = known_values();
    let expected = expected_top(&values, 10);
    assert!(
        expected.windows(2).any(|w| w[0].0 == w[1].0),
        "the top 10 holds ties: {expected:?}"
    );
    let mut writer = IndexedWriter::start(&config).await;
    add(&mut writer, &values, now).await;

    let none = top_json(&file, &day, &[]);
    assert!(none.is_null(), "no ranking before the first run: {none}");
    let out = run_once(&file, &day);
    assert!(out.contains("10 of 1000 keys"), "{out}");
    let ranking = top_json(&file, &day, &[]);
    assert_eq!(entries(&ranking), expected);
    assert_eq!(ranking["size"], 10);
    assert_eq!(
        entries(&top_json(&file, &day, &["--limit", "3"])),
        expected[..3]
    );
    let rows = server
        .execute(None, "SELECT score FROM countersink.leaderboard_rankings")
        .unwrap();
    assert_eq!(rows.len(), 10);
    server.shutdown().await.unwrap();
}

/// A run killed after writing part of its ranking (the store answers its inserts 2 s
/// late) leaves the pointer on the previous version: `top` serves it unchanged, and the
/// partial rows are never read. The next run serves the new ranking; the one after deletes
/// the first version's partition, and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_midway_leaves_the_previous_ranking_served() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    let server = start_cqlsim(
        &mut config,
        "counts the store's requests and injects faults",
    )
    .await
    .into_sim();
    let file = write_config(dir.path(), &config.store.contact_points[0], 100);
    let now = T0 - 6 * 3600;
    let (day, _) = day_and_minute(now);
    let mut values = known_values();
    let mut writer = IndexedWriter::start(&config).await;
    add(&mut writer, &values, now).await;
    run_once(&file, &day);
    let first = top_json(&file, &day, &[]);
    assert_eq!(entries(&first), expected_top(&values, 100));

    // New increments reorder the board.
    let bumps: Vec<(String, i64)> = (0..1000)
        .step_by(7)
        .map(|i| (format!("p{i:04}"), 1000 + i as i64))
        .collect();
    add(&mut writer, &bumps, now).await;
    for (page, bump) in &bumps {
        values.iter_mut().find(|(p, _)| p == page).unwrap().1 += bump;
    }
    let stats = |table: &str| server.stats().table("countersink", table);
    let rows_before = stats("leaderboard_rankings").rows_mutated;
    let flips_before = stats("leaderboard_current").write_requests;
    server.set_faults(vec![
        "delay,for=2s,table=countersink.leaderboard_rankings"
            .parse()
            .unwrap(),
    ]);
    let mut child = Command::new(BIN)
        .args(["leaderboard", "run", "--once", "--config"])
        .arg(&file)
        .args(["--day", &day])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut partial = 0;
    for _ in 0..400 {
        partial = stats("leaderboard_rankings").rows_mutated - rows_before;
        if partial > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        (1..100).contains(&partial),
        "killed with part of the ranking written: {partial} rows"
    );
    server.clear_faults();
    assert_eq!(
        stats("leaderboard_current").write_requests,
        flips_before,
        "the pointer was never written"
    );
    assert_eq!(
        top_json(&file, &day, &[]),
        first,
        "the previous version is served"
    );

    run_once(&file, &day);
    let second = top_json(&file, &day, &[]);
    assert_eq!(entries(&second), expected_top(&values, 100));
    assert_ne!(second["version"], first["version"]);
    run_once(&file, &day);
    let deletes = stats("leaderboard_rankings").deletes;
    assert_eq!(deletes.len(), 1, "{deletes:?}");
    assert_eq!(deletes[0].scope, cqlsim::DeleteScope::Partition);
    assert_eq!(
        deletes[0].partition[2],
        first["version"].as_i64().unwrap().to_string(),
        "the version before the previous one"
    );
    let first_rows = server
        .execute(
            None,
            &format!(
                "SELECT score FROM countersink.leaderboard_rankings WHERE board = 'top_pages' AND period = '{day}' AND version = {}",
                first["version"]
            ),
        )
        .unwrap();
    assert!(first_rows.is_empty());
    server.shutdown().await.unwrap();
}

/// `serve` with `run_in_serve`: the sidecar indexes the keys it flushes and ranks them
/// every interval; `top` shows what arrived over UDP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_runs_the_job_on_the_keys_it_indexed() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::common::sidecar_config(dir.path());
    config.flush.interval = Duration::from_millis(200);
    config.flush.jitter = Duration::from_millis(10);
    config.key_index.enabled = true;
    config
        .leaderboards
        .push(countersink::config::LeaderboardConfig {
            name: "top_pages".into(),
            family: "views".into(),
            column: "views".into(),
            top: 2,
            interval: Duration::from_secs(1),
            run_in_serve: true,
            ..Default::default()
        });
    let server = start_cqlsim(
        &mut config,
        "counts the store's requests and injects faults",
    )
    .await
    .into_sim();
    let file = write_config(dir.path(), &config.store.contact_points[0], 2);
    let sidecar = crate::common::start_sidecar(&config).await;
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .send_to(
            b"page.views:5|c|#page_id:a\npage.views:9|c|#page_id:b\npage.views:7|c|#page_id:c",
            sidecar.bound().inet(Transport::Udp).unwrap(),
        )
        .unwrap();
    let (today, _) = day_and_minute(countersink::bucket::unix_secs(std::time::SystemTime::now()));
    let mut ranking = serde_json::Value::Null;
    for _ in 0..100 {
        ranking = top_json(&file, &today, &[]);
        if !ranking.is_null() && ranking["size"] == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        entries(&ranking),
        [(9, "b".to_string()), (7, "c".to_string())]
    );
    let metrics = crate::common::http_get(sidecar.bound().metrics.unwrap(), "/metrics").1;
    assert!(
        !metrics
            .contains("countersink_leaderboard_runs_total{board=\"top_pages\",result=\"ok\"} 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("countersink_key_index_writes_total{outcome=\"applied\"} 3"),
        "{metrics}"
    );
    sidecar.shutdown().await.unwrap();
    server.shutdown().await.unwrap();
}
