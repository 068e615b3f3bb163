//! Start-up checks of the CQL side: statement settings, schema validation, `schema`.

use std::sync::Arc;
use std::time::Duration;

use countersink::config::FamilyConfig;
use countersink::engine::Engine;
use countersink::sink::cql::{CqlSink, CqlSinkError};
use countersink::vocabulary::{FamilyId, Granularity};

use crate::common::{StoreOptions, cli_stdout, config, launch, start_store};

/// Every prepared counter statement and every batch is non-idempotent, with the
/// fall-through retry policy: the driver can never send a counter write twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_counter_statement_and_batch_is_non_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    let store = start_store(&mut config).await;
    let engine = Engine::new(&config).unwrap();
    let sink = CqlSink::connect(&config.store, engine.families())
        .await
        .unwrap();
    let statements: Vec<_> = sink.statements().collect();
    assert_eq!(statements.len(), 4, "minute and day tables of two families");
    for statement in statements {
        assert!(
            !statement.get_is_idempotent(),
            "{}",
            statement.get_statement()
        );
        assert!(
            statement.get_retry_policy().is_some(),
            "{}",
            statement.get_statement()
        );
        assert!(
            statement.get_statement().contains(" = ")
                && statement.get_statement().starts_with("UPDATE")
        );
    }
    for (family, table) in [
        (FamilyId(0), Granularity::Minute),
        (FamilyId(1), Granularity::Day),
    ] {
        let batch = sink.batch_for(family, table, 3).unwrap();
        assert!(!batch.get_is_idempotent());
        assert!(batch.get_retry_policy().is_some());
        assert_eq!(batch.statements.len(), 3);
    }
    store.shutdown().await;
}

/// A table that does not match the configuration is one clear message at start, naming
/// the table and the column.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_mismatches_are_named_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    let store = start_store(&mut config).await;
    let nope = store.table("metrics.nope");
    let other = store.table("other.views_by_day");
    type Change = Box<dyn Fn(&mut FamilyConfig)>;
    let cases: [(&str, Change, String); 4] = [
        (
            "missing table",
            Box::new(move |f| f.minute_table = nope.clone()),
            format!("{}: does not exist", store.table("metrics.nope")),
        ),
        (
            "missing keyspace",
            Box::new(move |f| f.day_table = other.clone()),
            format!("keyspace `{}` does not exist", store.keyspace("other")),
        ),
        (
            "missing counter",
            Box::new(|f| {
                f.columns.insert("page.clicks".into(), "clicks".into());
            }),
            "counter column `clicks` is missing".into(),
        ),
        (
            "wrong key",
            Box::new(|f| f.key = vec!["page".into()]),
            "key column `page` is missing (the configuration needs it in the partition key)".into(),
        ),
    ];
    for (what, change, expected) in cases {
        let mut broken = config.clone();
        change(&mut broken.families[0]);
        let engine = Engine::new(&broken).unwrap();
        let Err(error) = CqlSink::connect(&broken.store, engine.families()).await else {
            panic!("{what}: connected");
        };
        assert!(matches!(error, CqlSinkError::Schema(_)), "{what}: {error}");
        assert!(error.to_string().contains(&expected), "{what}: {error}");
    }
    // A non-counter column where a counter is configured.
    let plain = store.table("metrics.plain_minute");
    store
        .execute(&format!("CREATE TABLE {plain} (page_id text, day date, minute smallint, views bigint, PRIMARY KEY ((page_id, day), minute))"))
        .await;
    let mut broken = config.clone();
    broken.families[0].minute_table = plain;
    broken.families[0].columns.remove("page.bytes");
    let engine = Engine::new(&broken).unwrap();
    let error = CqlSink::connect(&broken.store, engine.families())
        .await
        .err()
        .unwrap();
    assert!(
        error
            .to_string()
            .contains("column `views` is not a counter column"),
        "{error}"
    );
    store.shutdown().await;
}

/// `countersink schema` prints what `--apply` creates, and the result passes the start-up
/// check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_command_prints_and_applies() {
    let dir = tempfile::tempdir().unwrap();
    let store = launch(StoreOptions::default()).await;
    let file = dir.path().join("c.toml");
    let toml = store.config_file(include_str!("../../examples/countersink.toml"));
    std::fs::write(&file, &toml).unwrap();
    let file = file.display().to_string();
    let text = cli_stdout(["schema", "--config", &file]);
    for needle in [
        format!(
            "CREATE KEYSPACE IF NOT EXISTS {}",
            store.keyspace("countersink")
        ),
        format!(
            "CREATE KEYSPACE IF NOT EXISTS {}",
            store.keyspace("metrics")
        ),
        "PRIMARY KEY ((name, tags, day), minute)".into(),
        format!(
            "CREATE TABLE IF NOT EXISTS {}",
            store.table("metrics.views_by_day")
        ),
    ] {
        assert!(text.contains(&needle), "{needle}:\n{text}");
    }
    cli_stdout([
        "schema",
        "--apply",
        "--config",
        &file,
        "--contact-point",
        &store.contact_point(),
    ]);
    let config = countersink::Config::from_toml(&toml).unwrap();
    let engine = Engine::new(&config).unwrap();
    CqlSink::connect(&config.store, engine.families())
        .await
        .expect("the applied schema passes the check");
    store.shutdown().await;
}

/// When pending rows near the limit, the buffer asks for a flush before the interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_pressure_flushes_early() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.flush.interval = Duration::from_secs(3600);
    config.flush.jitter = Duration::ZERO;
    config.limits.max_pending_rows = 1000;
    let store = start_store(&mut config).await;
    let engine = Arc::new(Engine::new(&config).unwrap());
    let recorder = countersink::Recorder::start_with(
        engine.clone(),
        &config,
        CqlSink::connect(&config.store, engine.families())
            .await
            .unwrap(),
    )
    .await
    .unwrap();
    for i in 0..800 {
        recorder
            .incr("pressure", &[("i", &i.to_string())], 1)
            .unwrap();
    }
    let mut flushed = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if store
            .table_sum("countersink.counts_by_minute", "value")
            .await
            >= 750
        {
            flushed = true;
            break;
        }
    }
    assert!(flushed, "no early flush with the interval at one hour");
    recorder.shutdown().await;
    store.shutdown().await;
}

/// A contact point that accepts TCP and never answers (a stalled proxy, a port that is not
/// CQL) ends the connect with a timeout error after six `connect_timeout`s: the driver
/// bounds only the TCP connect, and `serve`'s connect loop must get the attempt back to
/// retry it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_contact_point_is_a_bounded_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    config.store.contact_points = vec![silent.local_addr().unwrap().to_string()];
    config.store.connect_timeout = Duration::from_millis(200);
    // Accepts and holds every connection, reading nothing, answering nothing.
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            open.push(socket);
        }
    });
    let engine = Engine::new(&config).unwrap();
    let started = std::time::Instant::now();
    let result = tokio::time::timeout(
        Duration::from_secs(30),
        CqlSink::connect(&config.store, engine.families()),
    )
    .await
    .expect("the connect ends on its own bound");
    let Err(error) = result else {
        panic!("a silent peer is not a store")
    };
    assert!(
        matches!(
            error,
            CqlSinkError::Session(countersink::sink::cql::SessionError::Timeout { .. })
        ),
        "{error}"
    );
    assert!(!error.is_permanent(), "serve retries it");
    assert!(
        started.elapsed() >= Duration::from_millis(1200),
        "six connect timeouts"
    );
    held.abort();
}
