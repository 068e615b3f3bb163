//! The partition sizing check at start: yesterday's ledger and key index partitions of
//! each family are counted by the store, bucket 0 standing for all (whether a count warns
//! is the unit tests' matter: `ops::sizing`, at 100 MB a partition).

use countersink::bucket::{Day, format_date};
use countersink::ops::sizing::{self, Partition};

use crate::common::{config, start_store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yesterdays_partitions_are_counted_per_family_and_table() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.families[0].exact = true;
    config.key_index.enabled = true;
    let store = start_store(&mut config).await;
    let today = Day((countersink::engine::now_unix_secs() / 86_400) as u32);
    let yesterday = format_date(Day(today.0 - 1).date());
    let before = format_date(Day(today.0 - 2).date());
    let ledger = format!("{}.delta_ledger", config.exact_keyspace());
    let index = countersink::ops::keyindex::index_table(&config);
    for i in 0..37 {
        // Bucket 0 of yesterday is what is counted; other buckets and days are not.
        for (day, bucket) in [(&yesterday, 0), (&yesterday, 1), (&before, 0)] {
            store
                .execute(&format!(
                    "INSERT INTO {ledger} (family, day, bucket, key, minute, writer, incarnation, flush_seq, part, deltas) VALUES ('views', '{day}', {bucket}, '[\"p{i}\"]', 7, 'w', 1, 1, 0, {{'views': 1}})"
                ))
                .await;
        }
        if i < 5 {
            store
                .execute(&format!(
                    "INSERT INTO {index} (family, day, bucket, key) VALUES ('views', '{yesterday}', 0, '[\"p{i}\"]')"
                ))
                .await;
        }
    }
    let families = countersink::family::Families::from_config(&config).unwrap();
    let session = countersink::sink::cql::session::connect(&config.store)
        .await
        .unwrap();
    let measured = sizing::measure(&session, &config, &families, Day(today.0 - 1))
        .await
        .unwrap();
    let views: Vec<&Partition> = measured.iter().filter(|p| p.family == "views").collect();
    assert_eq!(
        views
            .iter()
            .map(|p| (p.table, p.rows, p.buckets))
            .collect::<Vec<_>>(),
        [("delta_ledger", 37, 64), ("key_index", 5, 16)],
        "{measured:?}"
    );
    assert!(views.iter().all(|p| p.warning().is_none()));
    // The generic family keeps no exact totals: only its index partition is measured.
    let generic: Vec<_> = measured.iter().filter(|p| p.family == "generic").collect();
    assert_eq!(generic.len(), 1);
    assert_eq!((generic[0].table, generic[0].rows), ("key_index", 0));
    store.shutdown().await;
}
