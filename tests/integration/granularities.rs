//! Granularities: a family with any non-empty subset of minute, hour, day and all-time
//! total tables, all fed by one flush from the same rows. Tables created from the DDL
//! `countersink schema` prints, written and read back through the real driver on
//! whichever store the run chose (cqlsim, or the real node under `.ci/run`).

use std::sync::Arc;
use std::time::Duration;

use countersink::bucket::Day;
use countersink::config::{Config, ConfigError, ConsistencyLevel, FamilyConfig};
use countersink::ops::read::{self, Reader};
use countersink::vocabulary::Granularity;

use crate::common::{Store, StoreOptions, Writer, cli_get, config, launch};

/// 2026-10-15T13:07:30Z.
const AT: i64 = 1_792_069_650;
const HOUR: i64 = 3600;
const DAY: i64 = 86_400;

/// The increments fed: (receive time, delta), over two hours of one day and one hour of
/// the next.
const FED: [(i64, i64); 4] = [(AT, 5), (AT + 60, 2), (AT + HOUR, 7), (AT + DAY, 11)];

/// A family `hits` keyed by `site`, with the tables given (empty: none).
fn hits(minute: &str, hour: &str, day: &str, total: &str) -> FamilyConfig {
    FamilyConfig {
        name: "hits".into(),
        minute_table: minute.into(),
        hour_table: hour.into(),
        day_table: day.into(),
        total_table: total.into(),
        key: vec!["site".into()],
        columns: [("site.hits".to_string(), "hits".to_string())].into(),
        ..FamilyConfig::default()
    }
}

/// A store with this configuration's schema, created from the generated DDL (the generic
/// family off: only the family's tables exist).
async fn store_with(config: &mut Config) -> Store {
    let store = launch(StoreOptions::default()).await;
    config.generic.enabled = false;
    store.localize(config);
    store.create_schema(config).await;
    store
}

async fn feed_and_flush(writer: &mut Writer) {
    for (at, delta) in FED {
        writer.incr("site.hits", &[("site", "a")], delta, at);
    }
    writer.flusher.flush_now().await;
}

fn day(offset: i64) -> Day {
    Day(((AT + offset) / DAY) as u32)
}

/// Every table holds the exact sums of its rows, read cell by cell and through the read
/// path (`countersink get`, `Recorder::read_*`); the accounting identity holds for each
/// granularity, with nothing owed to a table the family lacks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_four_granularities_hold_the_exact_sums() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.families = vec![hits(
        "metrics.hits_by_minute",
        "metrics.hits_by_hour",
        "metrics.hits_by_day",
        "metrics.hits_total",
    )];
    let store = store_with(&mut config).await;
    let mut writer = Writer::start(&config).await;
    feed_and_flush(&mut writer).await;

    // As configured: the store localizes them.
    let (minute, hour) = ("metrics.hits_by_minute", "metrics.hits_by_hour");
    let (day_table, total) = ("metrics.hits_by_day", "metrics.hits_total");
    let cell = |table: &str, condition: &str| {
        let (table, condition) = (table.to_owned(), condition.to_owned());
        let store = &store;
        async move { store.cell(&table, "hits", &condition).await }
    };
    let on = |date: &str| format!("site = 'a' AND day = '{date}'");
    assert_eq!(
        cell(minute, &format!("{} AND minute = 787", on("2026-10-15"))).await,
        Some(5)
    );
    assert_eq!(
        cell(minute, &format!("{} AND minute = 788", on("2026-10-15"))).await,
        Some(2)
    );
    assert_eq!(
        cell(minute, &format!("{} AND minute = 847", on("2026-10-15"))).await,
        Some(7)
    );
    assert_eq!(
        cell(minute, &format!("{} AND minute = 787", on("2026-10-16"))).await,
        Some(11)
    );
    assert_eq!(
        cell(hour, &format!("{} AND hour = 13", on("2026-10-15"))).await,
        Some(7)
    );
    assert_eq!(
        cell(hour, &format!("{} AND hour = 14", on("2026-10-15"))).await,
        Some(7)
    );
    assert_eq!(
        cell(hour, &format!("{} AND hour = 13", on("2026-10-16"))).await,
        Some(11)
    );
    assert_eq!(
        cell(hour, &format!("{} AND hour = 12", on("2026-10-15"))).await,
        None
    );
    let month = "site = 'a' AND month = '2026-10'";
    assert_eq!(
        cell(day_table, &format!("{month} AND day = '2026-10-15'")).await,
        Some(14)
    );
    assert_eq!(
        cell(day_table, &format!("{month} AND day = '2026-10-16'")).await,
        Some(11)
    );
    assert_eq!(cell(total, "site = 'a'").await, Some(25));

    let families = writer.engine.families();
    let counter = read::resolve(families, "site.hits", &[("site", "a")]).unwrap();
    let reader = Reader::new(Arc::clone(&writer.session));
    let one = ConsistencyLevel::One;
    let hours = reader
        .series(families, &counter, Granularity::Hour, day(0), one)
        .await
        .unwrap();
    assert_eq!(hours.into_iter().collect::<Vec<_>>(), [(13, 7), (14, 7)]);
    let hours = reader
        .series(families, &counter, Granularity::Hour, day(DAY), one)
        .await
        .unwrap();
    assert_eq!(hours.into_iter().collect::<Vec<_>>(), [(13, 11)]);
    assert_eq!(
        reader
            .all_time_total(families, &counter, one)
            .await
            .unwrap(),
        25
    );
    assert_eq!(
        reader
            .day_total(families, &counter, day(0), one)
            .await
            .unwrap(),
        14
    );

    // The same through `countersink get`, which reads with the configuration file.
    let file = dir.path().join("c.toml");
    std::fs::write(
        &file,
        store.config_file(
            "[generic]\nenabled = false\n[[family]]\nname = \"hits\"\nminute_table = \"metrics.hits_by_minute\"\nhour_table = \"metrics.hits_by_hour\"\nday_table = \"metrics.hits_by_day\"\ntotal_table = \"metrics.hits_total\"\nkey = [\"site\"]\n[family.columns]\n\"site.hits\" = \"hits\"\n",
        ),
    )
    .unwrap();
    let file = file.display().to_string();
    let contact = config.store.contact_points[0].clone();
    let counter = ("site.hits", "site:a", "2026-10-15");
    let get = |extra: &[&str]| cli_get(&file, Some(&contact), counter, extra);
    let (plain, hours, minutes, total) = tokio::task::block_in_place(|| {
        (
            get(&[]),
            get(&["--hours"]),
            get(&["--minutes"]),
            get(&["--total"]),
        )
    });
    assert_eq!(plain.trim(), "14", "the day");
    assert_eq!(
        hours.lines().collect::<Vec<_>>(),
        ["2026-10-15T13:00Z 7", "2026-10-15T14:00Z 7"]
    );
    assert_eq!(
        minutes.lines().collect::<Vec<_>>(),
        [
            "2026-10-15T13:07Z 5",
            "2026-10-15T13:08Z 2",
            "2026-10-15T14:07Z 7"
        ]
    );
    assert_eq!(total.trim(), "25", "all time");

    let a = writer.accounting();
    assert!(a.is_balanced(), "{a:?}");
    for g in Granularity::ALL {
        let stages = a.of(g);
        assert_eq!((stages.accepted, stages.applied), (25, 25), "{g:?}: {a:?}");
        assert_eq!(stages.no_table, 0, "{g:?}");
    }
}

/// A family with only an hour and a total table: the schema has those two tables, the
/// flush writes them, and the minute and day identities settle its deltas as owing them
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hour_and_total_family_writes_only_those() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.families = vec![hits("", "metrics.hits_by_hour", "", "metrics.hits_total")];
    let generated = countersink::ddl::statements(
        &{
            let mut c = config.clone();
            c.generic.enabled = false;
            c
        },
        countersink::ddl::DEV_REPLICATION,
    )
    .unwrap();
    let tables: Vec<&String> = generated.iter().filter(|s| s.contains("TABLE")).collect();
    assert_eq!(tables.len(), 2, "{generated:#?}");
    assert!(
        tables[0].contains("hour smallint")
            && tables[0].contains("PRIMARY KEY ((site, day), hour)"),
        "{}",
        tables[0]
    );
    assert!(
        tables[1].contains("PRIMARY KEY ((site))") && !tables[1].contains("day"),
        "{}",
        tables[1]
    );
    let store = store_with(&mut config).await;
    let mut writer = Writer::start(&config).await;
    feed_and_flush(&mut writer).await;

    let (hour, total) = ("metrics.hits_by_hour", "metrics.hits_total");
    assert_eq!(store.table_sum(hour, "hits").await, 25);
    assert_eq!(
        store
            .cell(
                hour,
                "hits",
                "site = 'a' AND day = '2026-10-15' AND hour = 14"
            )
            .await,
        Some(7)
    );
    assert_eq!(store.cell(total, "hits", "site = 'a'").await, Some(25));
    let a = writer.accounting();
    assert!(a.is_balanced(), "{a:?}");
    for g in [Granularity::Minute, Granularity::Day] {
        assert_eq!((a.of(g).no_table, a.of(g).applied), (25, 0), "{g:?}: {a:?}");
    }
    for g in [Granularity::Hour, Granularity::Total] {
        assert_eq!((a.of(g).no_table, a.of(g).applied), (0, 25), "{g:?}: {a:?}");
    }
    // The read path refuses a table the family does not have, by name.
    let families = writer.engine.families();
    let counter = read::resolve(families, "site.hits", &[("site", "a")]).unwrap();
    let reader = Reader::new(Arc::clone(&writer.session));
    let refused = reader
        .series(
            families,
            &counter,
            Granularity::Minute,
            day(0),
            ConsistencyLevel::One,
        )
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("no minute table"), "{refused}");
}

/// A shutdown whose deadline leaves the hour and total writes unsent spills them; the
/// next start replays them into the same tables, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spilled_hour_and_total_rows_are_replayed_by_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.families = vec![hits("", "metrics.hits_by_hour", "", "metrics.hits_total")];
    config.flush.shutdown_deadline = Duration::from_millis(1);
    let store = store_with(&mut config).await;
    let writer = Writer::start(&config).await;
    let mut fed = 0_i128;
    for site in 0..2000 {
        for hour in 0..3 {
            writer.incr(
                "site.hits",
                &[("site", &format!("s{site}"))],
                1,
                AT + hour * HOUR,
            );
            fed += 1;
        }
    }
    let (engine, ledger) = (writer.engine.clone(), writer.ledger.clone());
    writer.flusher.finish().await;
    let a = countersink::telemetry::Accounting::read(&engine, &ledger);
    assert!(a.is_balanced(), "{a:?}");
    for g in [Granularity::Hour, Granularity::Total] {
        let s = a.of(g);
        assert_eq!(s.pending, 0, "{g:?}: {a:?}");
        assert_eq!(s.applied + s.unknown + s.spilled, fed, "{g:?}: {a:?}");
    }
    assert!(
        a.hour.spilled > 0 && a.total.spilled > 0,
        "the 1 ms deadline spilled rows of both tables: {a:?}"
    );
    drop(engine);

    config.flush.shutdown_deadline = Duration::from_secs(30);
    let mut writer = Writer::start(&config).await;
    for _ in 0..10 {
        writer.flusher.flush_now().await;
        if [Granularity::Hour, Granularity::Total].map(|g| writer.ledger.settled(g).replayed)
            == [a.hour.spilled, a.total.spilled]
        {
            break;
        }
    }
    let b = writer.accounting();
    assert!(b.is_balanced(), "{b:?}");
    for (g, table) in [
        (Granularity::Hour, "metrics.hits_by_hour"),
        (Granularity::Total, "metrics.hits_total"),
    ] {
        let (before, after) = (a.of(g), b.of(g));
        assert_eq!(
            (after.applied, after.pending),
            (before.spilled, 0),
            "{g:?}: {b:?}"
        );
        let stored = store.table_sum(table, "hits").await;
        let sent = before.applied + before.spilled;
        assert!(
            sent <= stored && stored <= sent + before.unknown,
            "{g:?}: stored {stored}, {a:?}"
        );
    }
}

/// Bad granularity settings are refused at load, naming the field.
#[test]
fn bad_granularity_settings_are_refused_by_name() {
    let field_of = |family: FamilyConfig| {
        let config = Config {
            families: vec![family],
            ..Config::default()
        };
        match config.validate() {
            Err(ConfigError::Invalid { field, problem }) => (field, problem),
            other => panic!("expected an invalid field, got {other:?}"),
        }
    };
    let (field, message) = field_of(hits("", "", "", ""));
    assert_eq!(field, "family[0].minute_table");
    assert!(
        message.contains("`hits` needs at least one table"),
        "{message}"
    );
    let (field, message) = field_of(hits("", "h", "", "h"));
    assert_eq!(
        (field.as_str(), message.as_str()),
        ("family[0].total_table", "must differ from hour_table")
    );
    let (field, _) = field_of(FamilyConfig {
        exact: true,
        ..hits("m", "h", "d", "")
    });
    assert_eq!(field, "family[0].exact");
    let (field, _) = field_of(FamilyConfig {
        epoch_column: Some("epoch".into()),
        ..hits("", "", "", "t")
    });
    assert_eq!(field, "family[0].epoch_column");
    let (field, _) = field_of(FamilyConfig {
        mode: countersink::config::CountingMode::WriterTotals,
        ..hits("m", "", "d", "t")
    });
    assert_eq!(field, "family[0].mode");
    let (field, message) = field_of(FamilyConfig {
        key: vec!["hour".into()],
        ..hits("", "h", "", "")
    });
    assert_eq!(field, "family[0].key[0]");
    assert!(message.contains("reserved"), "{message}");
}
