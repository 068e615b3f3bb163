//! Retention: `prune` deletes whole partitions older than the cutoff and nothing else;
//! the store sees no other DELETE on a counter table, whatever else runs.

use std::collections::BTreeSet;

use crate::common::{IndexedWriter, cli_stdout, config, run_cli, start_cqlsim};

/// Days written, around a cutoff of 2025-10-01 (its month, October, holds days on both
/// sides of it and must stay whole in the day table).
const DAYS: [&str; 5] = [
    "2025-08-15",
    "2025-09-30",
    "2025-10-01",
    "2025-10-20",
    "2025-11-02",
];
const CUTOFF: &str = "2025-10-01";

fn unix_noon(day: &str) -> i64 {
    let date = countersink::bucket::parse_date(day).unwrap();
    i64::from(countersink::bucket::Day::from_date(date).unwrap().0) * 86_400 + 12 * 3600
}

/// The distinct partition keys of a table, as CQL literals.
fn partitions(server: &cqlsim::Server, table: &str, columns: &str) -> BTreeSet<Vec<String>> {
    let rows = server
        .execute(None, &format!("SELECT {columns} FROM {table}"))
        .unwrap();
    let names: Vec<&str> = columns.split(", ").collect();
    (0..rows.len())
        .map(|i| {
            names
                .iter()
                .map(|c| literal(rows.get(i, c).unwrap()))
                .collect()
        })
        .collect()
}

fn literal(value: &cqlsim::Value) -> String {
    match value {
        cqlsim::Value::Text(s) => format!("'{s}'"),
        cqlsim::Value::Date(_) => format!("'{}'", value_date(value)),
        cqlsim::Value::TinyInt(v) => v.to_string(),
        other => format!("{other:?}"),
    }
}

fn value_date(value: &cqlsim::Value) -> String {
    let cqlsim::Value::Date(days) = value else {
        panic!("not a date")
    };
    let day = countersink::bucket::Day(days.wrapping_sub(1 << 31));
    countersink::bucket::format_date(day.date())
}

/// Three pages (four shards) and a generic counter written on five days; a dry run, a
/// refused run (no `--yes`, not a terminal), a cutoff too young; then prune of both
/// families. Every DELETE cqlsim saw on a counter table is a whole partition whose day
/// (or month) is before the cutoff, they are exactly the old partitions, and everything
/// from the cutoff on reads back unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_deletes_only_whole_partitions_older_than_the_cutoff() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.families[0].shards = 4;
    config.key_index.enabled = true;
    let server = start_cqlsim(&mut config, "checks the deletes the store received")
        .await
        .into_sim();
    let contact = config.store.contact_points[0].clone();
    let file = dir.path().join("prune.toml");
    std::fs::write(
        &file,
        format!(
            "[store]\ncontact_points = [\"{contact}\"]\n[key_index]\nenabled = true\n[[family]]\nname = \"views\"\nminute_table = \"metrics.views_by_minute\"\nday_table = \"metrics.views_by_day\"\nkey = [\"page_id\"]\nshards = 4\n[family.columns]\n\"page.views\" = \"views\"\n\"page.bytes\" = \"bytes\"\n"
        ),
    )
    .unwrap();
    let file = file.to_str().unwrap().to_owned();

    let mut writer = IndexedWriter::start(&config).await;
    for (i, day) in DAYS.iter().enumerate() {
        for round in 0..2 {
            let at = unix_noon(day) + round * 90;
            for page in ["a", "b", "c"] {
                writer.incr("page.views", &[("page_id", page)], 10 + i as i64, at);
            }
            writer.incr("jobs.done", &[("queue", "q1")], 1, at);
            writer.flush().await;
        }
    }
    let minute_key = "page_id, day, shard";
    let day_key = "page_id, month, shard";
    let before_minute = partitions(&server, "metrics.views_by_minute", minute_key);
    let before_day = partitions(&server, "metrics.views_by_day", day_key);
    let before_generic = partitions(&server, "countersink.counts_by_minute", "name, tags, day");

    // A dry run deletes nothing; without --yes and without a terminal nothing either; a
    // cutoff inside the minimum age is refused.
    let dry = cli_stdout([
        "prune",
        "--config",
        &file,
        "--family",
        "views",
        "--before",
        CUTOFF,
        "--dry-run",
    ]);
    assert!(
        dry.contains("metrics.views_by_minute: would delete 12 of 30 partitions"),
        "{dry}"
    );
    assert!(
        dry.contains("metrics.views_by_day: would delete 12 of 30 partitions"),
        "{dry}"
    );
    let refused = run_cli([
        "prune", "--config", &file, "--family", "views", "--before", CUTOFF,
    ]);
    assert_eq!(refused.status.code(), Some(2));
    let (yesterday, _) = crate::common::day_and_minute(
        countersink::bucket::unix_secs(std::time::SystemTime::now()) - 86_400,
    );
    let young = run_cli([
        "prune", "--config", &file, "--family", "views", "--before", &yesterday, "--yes",
    ]);
    assert_eq!(young.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&young.stderr).contains("at least 7 days"));
    assert!(server.stats().tables.values().all(|t| t.deletes.is_empty()));

    let out = cli_stdout([
        "prune", "--config", &file, "--family", "views", "--before", CUTOFF, "--yes",
    ]);
    assert!(
        out.contains("deleted 12 of 30 partitions before 2025-10-01 (2025-08-15 .. 2025-09-30)"),
        "{out}"
    );
    assert!(
        out.contains("key index: deleted 32 partitions (2 days of `views`)"),
        "{out}"
    );
    cli_stdout([
        "prune", "--config", &file, "--family", "generic", "--before", CUTOFF, "--yes", "--table",
        "minute",
    ]);

    // What the store saw.
    let stats = server.stats();
    let counter_tables = [
        ("metrics", "views_by_minute"),
        ("metrics", "views_by_day"),
        ("countersink", "counts_by_minute"),
        ("countersink", "counts_by_day"),
    ];
    let mut deleted: Vec<BTreeSet<Vec<String>>> = Vec::new();
    for (ks, table) in counter_tables {
        let deletes = stats.table(ks, table).deletes;
        let mut set = BTreeSet::new();
        for delete in deletes {
            assert_eq!(
                delete.scope,
                cqlsim::DeleteScope::Partition,
                "{ks}.{table}: {delete:?}"
            );
            assert!(delete.clustering.is_empty());
            let bucket = delete
                .partition
                .iter()
                .find(|v| v.starts_with("'20"))
                .unwrap()
                .trim_matches('\'')
                .to_owned();
            let old = if bucket.len() == 10 {
                bucket.as_str() < CUTOFF
            } else {
                bucket.as_str() < &CUTOFF[..7]
            };
            assert!(old, "{ks}.{table}: a partition of {bucket} was deleted");
            set.insert(delete.partition);
        }
        deleted.push(set);
    }
    let old_of = |all: &BTreeSet<Vec<String>>, bucket: usize, cut: &str| -> BTreeSet<Vec<String>> {
        all.iter()
            .filter(|p| p[bucket].trim_matches('\'') < cut)
            .cloned()
            .collect()
    };
    assert_eq!(deleted[0], old_of(&before_minute, 1, CUTOFF));
    assert_eq!(deleted[1], old_of(&before_day, 1, &CUTOFF[..7]));
    assert_eq!(deleted[2], old_of(&before_generic, 2, CUTOFF));
    assert!(deleted[3].is_empty(), "--table minute");
    assert_eq!(deleted[0].len(), 12);

    // What is left reads back whole.
    let after_minute = partitions(&server, "metrics.views_by_minute", minute_key);
    assert_eq!(
        after_minute,
        before_minute.difference(&deleted[0]).cloned().collect()
    );
    for (i, day) in DAYS.iter().enumerate() {
        let got = cli_stdout([
            "get",
            "--config",
            &file,
            "page.views",
            "--tag",
            "page_id:b",
            "--day",
            day,
        ]);
        let expected = if *day < CUTOFF {
            0
        } else {
            2 * (10 + i as i64)
        };
        assert_eq!(got.trim(), expected.to_string(), "{day}");
    }
    let index = server
        .execute(None, "SELECT day FROM countersink.key_index")
        .unwrap();
    let indexed: BTreeSet<String> = (0..index.len())
        .map(|i| value_date(index.get(i, "day").unwrap()))
        .collect();
    assert_eq!(
        indexed,
        ["2025-10-01", "2025-10-20", "2025-11-02"]
            .map(String::from)
            .into(),
        "the key index rows of the pruned days are gone"
    );
    server.shutdown().await.unwrap();
}
