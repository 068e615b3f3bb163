//! The read path: shards read concurrently and summed, the consistency flag applied, and
//! the in-process read API's short cache.

use std::time::{Duration, Instant};

use countersink::Recorder;
use countersink::bucket::Day;
use countersink::config::{Config, FamilyConfig, ShardPlacement};

use crate::common::{config, run_cli, start_cqlsim};

const DAY: &str = "2026-11-20";

/// A family with 16 shards in the partition key; its config file, written for the CLI.
fn hot_config(dir: &std::path::Path) -> (Config, std::path::PathBuf) {
    let mut config = config(dir);
    config.families.push(FamilyConfig {
        name: "hot".into(),
        minute_table: "metrics.hot_by_minute".into(),
        day_table: "metrics.hot_by_day".into(),
        key: vec!["item".into()],
        columns: [("item.hits".to_string(), "hits".to_string())].into(),
        shards: 16,
        shard_placement: ShardPlacement::Partition,
        ..FamilyConfig::default()
    });
    let file = dir.join("hot.toml");
    std::fs::write(
        &file,
        "[[family]]\nname = \"hot\"\nminute_table = \"metrics.hot_by_minute\"\nday_table = \"metrics.hot_by_day\"\nkey = [\"item\"]\nshards = 16\n[family.columns]\n\"item.hits\" = \"hits\"\n",
    )
    .unwrap();
    (config, file)
}

/// Shard `s` of item `x` holds `s + 1` on DAY: the 16 shards sum to 136.
fn fill_shards(server: &cqlsim::Server) {
    for shard in 0..16 {
        server
            .execute(
                None,
                &format!(
                    "UPDATE metrics.hot_by_day SET hits = hits + {} WHERE item = 'x' AND month = '2026-11' AND shard = {shard} AND day = '{DAY}'",
                    shard + 1
                ),
            )
            .unwrap();
    }
}

/// 16 shards, each read answered 200 ms late: `get` sends the 16 partition reads
/// together. cqlsim counts the replies its delay held at once (16: all in flight
/// together; 1 if they went one after the other), and the whole command takes less than
/// half of the 3.2 s a serial read would need.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_reads_the_shards_of_a_key_concurrently() {
    let dir = tempfile::tempdir().unwrap();
    let (mut config, file) = hot_config(dir.path());
    let server = start_cqlsim(
        &mut config,
        "reads the tables in process and injects faults",
    )
    .await
    .into_sim();
    fill_shards(&server);
    server.set_faults(vec![
        "delay,for=200ms,on=reads,table=metrics.hot_by_day"
            .parse()
            .unwrap(),
    ]);
    let contact = config.store.contact_points[0].clone();
    let args = [
        "get",
        "--config",
        file.to_str().unwrap(),
        "--contact-point",
        &contact,
        "item.hits",
        "--tag",
        "item:x",
        "--day",
        DAY,
    ]
    .map(String::from);
    let started = Instant::now();
    let out = tokio::task::spawn_blocking(move || run_cli(args))
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "136");
    let stats = server.stats();
    assert_eq!(stats.table("metrics", "hot_by_day").reads, 16);
    assert_eq!(
        stats.peak_delayed_replies, 16,
        "the 16 shard reads were in flight together"
    );
    // The proof of concurrency is the peak above; the time is printed, not asserted (a
    // loaded machine stretches it).
    eprintln!("16 shard reads with a 200 ms delay each took {took:?} (serially: 3.2 s)");
    server.shutdown().await.unwrap();
}

/// `--consistency` reaches the store: a read timeout reports the level the read asked
/// for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_reads_at_the_consistency_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let (mut config, file) = hot_config(dir.path());
    let server = start_cqlsim(
        &mut config,
        "reads the tables in process and injects faults",
    )
    .await
    .into_sim();
    server.set_faults(vec![
        "read-timeout,on=reads,table=metrics.hot_by_day"
            .parse()
            .unwrap(),
    ]);
    let contact = config.store.contact_points[0].clone();
    for (flag, shown) in [
        ("one", "One"),
        ("quorum", "Quorum"),
        ("local_quorum", "LocalQuorum"),
    ] {
        let args = [
            "get",
            "--config",
            file.to_str().unwrap(),
            "--contact-point",
            &contact,
            "item.hits",
            "--tag",
            "item:x",
            "--day",
            DAY,
            "--consistency",
            flag,
        ]
        .map(String::from);
        let out = tokio::task::spawn_blocking(move || run_cli(args))
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains(&format!("consistency: {shown}")),
            "{flag}: {stderr}"
        );
    }
    let bad = run_cli(["get", "x", "--consistency", "most"]);
    assert_eq!(bad.status.code(), Some(2));
    server.shutdown().await.unwrap();
}

/// `Recorder::read_day` sums the shards, then serves the sum from memory for
/// `read.cache_ttl`: a change in the store shows only after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recorder_reads_through_a_short_cache() {
    let dir = tempfile::tempdir().unwrap();
    let (mut config, _) = hot_config(dir.path());
    config.read.cache_ttl = Duration::from_millis(600);
    let server = start_cqlsim(
        &mut config,
        "reads the tables in process and injects faults",
    )
    .await
    .into_sim();
    fill_shards(&server);
    let recorder = Recorder::connect(&config).await.unwrap();
    let day = Day::from_date(countersink::bucket::parse_date(DAY).unwrap()).unwrap();
    let reads = || server.stats().table("metrics", "hot_by_day").reads;
    assert_eq!(
        recorder
            .read_day("item.hits", &[("item", "x")], day)
            .await
            .unwrap(),
        136
    );
    assert_eq!(reads(), 16);
    server
        .execute(
            None,
            &format!("UPDATE metrics.hot_by_day SET hits = hits + 4 WHERE item = 'x' AND month = '2026-11' AND shard = 9 AND day = '{DAY}'"),
        )
        .unwrap();
    assert_eq!(
        recorder
            .read_day("item.hits", &[("item", "x")], day)
            .await
            .unwrap(),
        136,
        "served from the cache"
    );
    assert_eq!(reads(), 16, "no read reached the store");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        recorder
            .read_day("item.hits", &[("item", "x")], day)
            .await
            .unwrap(),
        140
    );
    assert_eq!(reads(), 32);
    assert!(matches!(
        recorder.read_day("item.hits", &[], day).await,
        Err(countersink::ops::read::ReadError::Usage(_))
    ));
    recorder.shutdown().await;
    server.shutdown().await.unwrap();
}
