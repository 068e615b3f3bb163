//! Hot-key sharding: each flush writes a row to one shard; `get` sums them, for both
//! placements of the shard column.

use countersink::config::{FamilyConfig, ShardPlacement};

use crate::common::{T0, Writer, cli_get, config, day_and_minute, start_store};

async fn sharded(placement: ShardPlacement) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.families.push(FamilyConfig {
        name: "hot".into(),
        minute_table: "metrics.hot_by_minute".into(),
        day_table: "metrics.hot_by_day".into(),
        key: vec!["item".into()],
        columns: [("item.hits".to_string(), "hits".to_string())].into(),
        shards: 4,
        shard_placement: placement,
        ..FamilyConfig::default()
    });
    let store = start_store(&mut config).await;
    let mut writers = Vec::new();
    for w in 0..3 {
        let mut c = config.clone();
        c.state.dir = dir.path().join(format!("w{w}"));
        c.state.writer_id = Some(format!("writer-{w}"));
        writers.push(Writer::start(&c).await);
    }
    let now = T0 - 3600;
    for round in 0..4 {
        for writer in &mut writers {
            for _ in 0..10 {
                writer.incr("item.hits", &[("item", "x")], 1, now + round);
            }
            writer.flusher.flush_now().await;
        }
    }
    assert_eq!(store.table_sum("metrics.hot_by_minute", "hits").await, 120);
    let rows = store
        .select(&format!(
            "SELECT shard FROM {}",
            store.table("metrics.hot_by_minute")
        ))
        .await;
    let shards: std::collections::BTreeSet<String> = (0..rows.len())
        .map(|i| format!("{:?}", rows.get(i, "shard")))
        .collect();
    assert!(shards.len() > 1, "writes spread over shards: {shards:?}");

    let file = dir.path().join("c.toml");
    let placement_name = match placement {
        ShardPlacement::Partition => "partition",
        ShardPlacement::Clustering => "clustering",
    };
    std::fs::write(
        &file,
        store.config_file(&format!(
            "[[family]]\nname = \"hot\"\nminute_table = \"metrics.hot_by_minute\"\nday_table = \"metrics.hot_by_day\"\nkey = [\"item\"]\nshards = 4\nshard_placement = \"{placement_name}\"\n[family.columns]\n\"item.hits\" = \"hits\"\n"
        )),
    )
    .unwrap();
    let (day, minute) = day_and_minute(now);
    let file = file.display().to_string();
    let contact = &config.store.contact_points[0];
    let get = |extra: &[&str]| cli_get(&file, Some(contact), ("item.hits", "item:x", &day), extra);
    assert_eq!(get(&[]).trim(), "120");
    let minutes = get(&["--minutes"]);
    assert_eq!(
        minutes.trim(),
        format!("{day}T{:02}:{:02}Z 120", minute / 60, minute % 60)
    );
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_in_the_partition_key_are_summed_by_get() {
    sharded(ShardPlacement::Partition).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_in_the_clustering_key_are_summed_by_get() {
    sharded(ShardPlacement::Clustering).await;
}
