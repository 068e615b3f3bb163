//! The user's own tables: seed 000's two tables created from their own CQL text, a table
//! with other time column names and types, and the start-up check's message when a table
//! does not match. Written and read through the real driver, on whichever store the run
//! chose (none of these needs cqlsim's powers).

use std::sync::Arc;

use countersink::bucket::Day;
use countersink::config::tables::TimeColumnConfig;
use countersink::config::{Config, ConsistencyLevel, CountingMode, FamilyConfig};
use countersink::ddl::DEV_REPLICATION;
use countersink::engine::Engine;
use countersink::ops::read::{self, Reader};
use countersink::sink::cql::{CqlSink, CqlSinkError};
use countersink::vocabulary::Granularity;
use scylla::value::{CqlDate, CqlTimestamp, CqlValue};

use crate::common::{Store, StoreOptions, Writer, cli_get, config, launch, start_store};

/// 2026-10-15T13:07:30Z, inside seed 000's month `'2026-10'`.
const AT: i64 = 1_792_069_650;
/// The start of that minute, in ms.
const MINUTE_MS: i64 = 1_792_069_620_000;
/// 2026-10-01T00:00Z, in ms.
const MONTH_MS: i64 = 1_790_812_800_000;

/// A store with no schema, and `config` pointed at it with the generic family off (only
/// the tables a test creates itself exist).
async fn bare_store(config: &mut Config) -> Store {
    let store = launch(StoreOptions::default()).await;
    config.generic.enabled = false;
    store.localize(config);
    let metrics = store.keyspace("metrics");
    store
        .execute(&format!(
            "CREATE KEYSPACE IF NOT EXISTS {metrics} WITH replication = {DEV_REPLICATION}"
        ))
        .await;
    store
}

/// The statements of `cql/example_views.cql`, the keyspace renamed for this test.
fn seed_statements(store: &Store) -> Vec<String> {
    let metrics = store.keyspace("metrics");
    include_str!("../../cql/example_views.cql")
        .split(';')
        .map(|s| {
            s.lines()
                .filter(|l| !l.trim_start().starts_with("--"))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.replace("metrics.", &format!("{metrics}.")))
        .collect()
}

/// Reads one counter through the read path `countersink get` and `Recorder::read_*` use:
/// its minute series on the day of [`AT`], and its day total.
async fn read_back(writer: &Writer, name: &str, tags: &[(&str, &str)]) -> (Vec<(i64, i64)>, i64) {
    let families = writer.engine.families();
    let counter = read::resolve(families, name, tags).unwrap();
    let reader = Reader::new(Arc::clone(&writer.session));
    let day = Day((AT / 86_400) as u32);
    let minutes = reader
        .series(
            families,
            &counter,
            Granularity::Minute,
            day,
            ConsistencyLevel::One,
        )
        .await
        .unwrap();
    let total = reader
        .day_total(families, &counter, day, ConsistencyLevel::One)
        .await
        .unwrap();
    (minutes.into_iter().collect(), total)
}

/// Seed 000's `views_by_minute` and `views_by_day`, created from the seed's own CQL text,
/// pass the start-up check with the example configuration unchanged, take a flush, and
/// read back: the cells a seed-000 client reads, and the read path's sums.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_000_tables_work_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    let store = bare_store(&mut config).await;
    for statement in seed_statements(&store) {
        store.execute(&statement).await;
    }
    let mut writer = Writer::start(&config).await;
    for (offset, views) in [(0, 3_i64), (60, 4)] {
        for _ in 0..views {
            writer.incr("page.views", &[("page_id", "home")], 1, AT + offset);
        }
        writer.incr("page.bytes", &[("page_id", "home")], 500, AT + offset);
    }
    writer.flusher.flush_now().await;
    let row = "page_id = 'home' AND day = '2026-10-15'";
    assert_eq!(
        store
            .cell(
                "metrics.views_by_minute",
                "views",
                &format!("{row} AND minute = 787")
            )
            .await,
        Some(3)
    );
    assert_eq!(
        store
            .cell(
                "metrics.views_by_minute",
                "views",
                &format!("{row} AND minute = 788")
            )
            .await,
        Some(4)
    );
    assert_eq!(
        store
            .cell(
                "metrics.views_by_day",
                "bytes",
                "page_id = 'home' AND month = '2026-10' AND day = '2026-10-15'"
            )
            .await,
        Some(1000)
    );
    let (minutes, total) = read_back(&writer, "page.views", &[("page_id", "home")]).await;
    assert_eq!(minutes, [(787, 3), (788, 4)]);
    assert_eq!(total, 7);
    store.shutdown().await;
}

/// A family whose tables use other names and types: the minute table keyed by
/// `ts_day date` and clustered by a `bucket timestamp`, the day table partitioned by a
/// `month_start timestamp` and clustered by a `day text`. The values written are the
/// documented ones (the bucket's start in ms, the month's first instant, `YYYY-MM-DD`),
/// `countersink schema` creates the same tables, and the read path reads them back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_with_other_time_columns_works_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    let mut hits = FamilyConfig {
        name: "hits".into(),
        minute_table: "metrics.hits_by_bucket".into(),
        day_table: "metrics.hits_by_day".into(),
        key: vec!["site".into()],
        columns: [("site.hits".to_string(), "hits".to_string())].into(),
        ..FamilyConfig::default()
    };
    hits.minute_time.day = TimeColumnConfig::new("ts_day", "date");
    hits.minute_time.minute = TimeColumnConfig::new("bucket", "timestamp");
    hits.day_time.month = TimeColumnConfig::new("month_start", "timestamp");
    hits.day_time.day = TimeColumnConfig::new("day", "text");
    config.families = vec![hits];
    let store = bare_store(&mut config).await;
    let minute_table = store.table("metrics.hits_by_bucket");
    let day_table = store.table("metrics.hits_by_day");
    store
        .execute(&format!(
            "CREATE TABLE {minute_table} (site text, ts_day date, bucket timestamp, hits counter, PRIMARY KEY ((site, ts_day), bucket))"
        ))
        .await;
    // As `countersink schema` would create it: the generated DDL is what the check accepts.
    let generated = countersink::ddl::statements(&config, DEV_REPLICATION).unwrap();
    let day_ddl = generated
        .iter()
        .find(|s| s.contains(&day_table))
        .expect("the day table's DDL");
    assert!(
        day_ddl.contains("month_start timestamp") && day_ddl.contains("day         text"),
        "{day_ddl}"
    );
    store.execute(day_ddl).await;

    let mut writer = Writer::start(&config).await;
    writer.incr("site.hits", &[("site", "a")], 5, AT);
    writer.incr("site.hits", &[("site", "a")], 2, AT + 60);
    writer.flusher.flush_now().await;

    let rows = store
        .select(&format!("SELECT ts_day, bucket, hits FROM {minute_table}"))
        .await;
    assert_eq!(rows.len(), 2);
    assert_eq!(
        rows.get(0, "ts_day"),
        Some(&CqlValue::Date(CqlDate((1 << 31) + (AT / 86_400) as u32)))
    );
    assert_eq!(
        rows.get(0, "bucket"),
        Some(&CqlValue::Timestamp(CqlTimestamp(MINUTE_MS)))
    );
    assert_eq!(rows.get_i64(0, "hits"), Some(5));
    assert_eq!(
        rows.get(1, "bucket"),
        Some(&CqlValue::Timestamp(CqlTimestamp(MINUTE_MS + 60_000)))
    );
    let days = store
        .select(&format!("SELECT month_start, day, hits FROM {day_table}"))
        .await;
    assert_eq!(days.len(), 1);
    assert_eq!(
        days.get(0, "month_start"),
        Some(&CqlValue::Timestamp(CqlTimestamp(MONTH_MS)))
    );
    assert_eq!(days.text(0, "day"), Some("2026-10-15"));
    assert_eq!(days.get_i64(0, "hits"), Some(7));

    let (minutes, total) = read_back(&writer, "site.hits", &[("site", "a")]).await;
    assert_eq!(minutes, [(787, 5), (788, 2)]);
    assert_eq!(total, 7);

    // `countersink get`, configured by a file with the same sections.
    let file = dir.path().join("hits.toml");
    std::fs::write(&file, store.config_file(HITS_TOML)).unwrap();
    let file = file.display().to_string();
    let get = |extra: &[&str]| {
        let mut flags = vec!["--consistency", "one"];
        flags.extend(extra);
        cli_get(&file, None, ("site.hits", "site:a", "2026-10-15"), &flags)
    };
    let (series, total) = tokio::task::block_in_place(|| (get(&["--minutes"]), get(&[])));
    assert_eq!(
        series.lines().collect::<Vec<_>>(),
        ["2026-10-15T13:07Z 5", "2026-10-15T13:08Z 2"]
    );
    assert_eq!(total.trim(), "7");
    store.shutdown().await;
}

/// A `writer_totals` family with a `bucket timestamp` minute and a `date` month: the
/// generated tables pass the check, each writer's total lands in its `timestamp` row, and
/// the read path sums the writers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_totals_tables_take_other_time_columns_too() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.generic.enabled = false;
    let mut totals = FamilyConfig {
        name: "hits".into(),
        minute_table: "metrics.hit_totals_by_bucket".into(),
        day_table: "metrics.hit_totals_by_day".into(),
        key: vec!["site".into()],
        columns: [("site.hits".to_string(), "hits".to_string())].into(),
        mode: CountingMode::WriterTotals,
        ..FamilyConfig::default()
    };
    totals.minute_time.minute = TimeColumnConfig::new("bucket", "timestamp");
    totals.day_time.month = TimeColumnConfig::new("month", "date");
    config.families = vec![totals];
    let store = start_store(&mut config).await;
    for delta in [4, 6] {
        let mut writer = Writer::start(&config).await;
        writer.incr("site.hits", &[("site", "b")], delta, AT);
        writer.flusher.flush_now().await;
        writer.flusher.finish().await;
    }
    let rows = store
        .select(&format!(
            "SELECT bucket, hits FROM {}",
            store.table("metrics.hit_totals_by_bucket")
        ))
        .await;
    assert_eq!(rows.len(), 2, "one row per writer");
    for row in 0..2 {
        assert_eq!(
            rows.get(row, "bucket"),
            Some(&CqlValue::Timestamp(CqlTimestamp(MINUTE_MS)))
        );
    }
    let writer = Writer::start(&config).await;
    let (minutes, total) = read_back(&writer, "site.hits", &[("site", "b")]).await;
    assert_eq!(minutes, [(787, 10)]);
    assert_eq!(total, 10);
    store.shutdown().await;
}

/// The family of [`a_table_with_other_time_columns_works_end_to_end`], as a file.
const HITS_TOML: &str = r#"
[generic]
enabled = false

[[family]]
name = "hits"
minute_table = "metrics.hits_by_bucket"
day_table = "metrics.hits_by_day"
key = ["site"]
minute_time = { day = { column = "ts_day" }, minute = { column = "bucket", type = "timestamp" } }

[family.day_time]
month = { column = "month_start", type = "timestamp" }
day = { column = "day", type = "text" }

[family.columns]
"site.hits" = "hits"
"#;

/// The start-up check names the table, the column and what is wrong: a `tinyint` minute
/// (it cannot hold 0..1439), a time column of another type than configured (and the
/// setting that would accept it), a key column in the clustering key, and a key column
/// that is not in the primary key at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_mismatches_name_the_column() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    let store = bare_store(&mut config).await;
    for statement in seed_statements(&store) {
        store.execute(&statement).await;
    }
    let cases = [
        (
            "tiny",
            "page_id text, day date, minute tinyint, views counter, bytes counter, PRIMARY KEY ((page_id, day), minute)",
            "column `minute` has type tinyint, the configuration says smallint (`minute_time.minute.type`): a `tinyint` column cannot hold a minute",
        ),
        (
            "int_minute",
            "page_id text, day date, minute int, views counter, bytes counter, PRIMARY KEY ((page_id, day), minute)",
            "column `minute` has type int, the configuration says smallint (`minute_time.minute.type`); set `minute_time.minute.type = \"int\"`",
        ),
        (
            "clustered_key",
            "page_id text, day date, minute smallint, views counter, bytes counter, PRIMARY KEY ((day), page_id, minute)",
            "key column `page_id` is a clustering column; the configuration needs it in the partition key",
        ),
        (
            "regular_key",
            "page_id counter, day date, minute smallint, views counter, bytes counter, PRIMARY KEY ((day), minute)",
            "key column `page_id` is not in the primary key; the configuration needs it in the partition key",
        ),
        (
            "no_bucket",
            "page_id text, day date, at smallint, views counter, bytes counter, PRIMARY KEY ((page_id, day), at)",
            "time column `minute` is missing",
        ),
    ];
    for (name, columns, expected) in cases {
        let table = store.table(&format!("metrics.{name}"));
        store
            .execute(&format!("CREATE TABLE {table} ({columns})"))
            .await;
        let mut broken = config.clone();
        broken.families[0].minute_table = table.clone();
        let engine = Engine::new(&broken).unwrap();
        let Err(error) = CqlSink::connect(&broken.store, engine.families()).await else {
            panic!("{name}: the check passed");
        };
        assert!(matches!(error, CqlSinkError::Schema(_)), "{name}: {error}");
        let text = error.to_string();
        assert!(text.contains(&table), "{name}: {text}");
        assert!(text.contains(expected), "{name}: {text}");
    }
    // The configuration that says `int` accepts the `int` table.
    let mut fixed = config.clone();
    fixed.families[0].minute_table = store.table("metrics.int_minute");
    fixed.families[0].minute_time.minute = TimeColumnConfig::new("minute", "int");
    let engine = Engine::new(&fixed).unwrap();
    CqlSink::connect(&fixed.store, engine.families())
        .await
        .expect("a minute configured as int matches an int column");
    store.shutdown().await;
}
