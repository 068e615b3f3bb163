//! Last write wins on a real Apache Cassandra node, beside cqlsim: the write-time rules the
//! `writer_totals` mode relies on, run through the `scylla` driver against both stores, and
//! the mode end to end against the real node.
//!
//! Run by hand against a node (for example one started with the `cassandra` branch's
//! `tests/cassandra/cluster.sh up 1`):
//!
//! ```sh
//! cargo run --example totals_real_cassandra -- 127.0.0.1:9042
//! ```
//!
//! Each case prints the value both stores hold after it; the program exits non-zero if
//! they differ or if a case's expectation (Cassandra's documented rule) does not hold.

use std::sync::Arc;
use std::time::Duration;

use countersink::bucket::Minute;
use countersink::config::ConsistencyLevel;
use countersink::config::{Config, CountingMode, FamilyConfig};
use countersink::ddl;
use countersink::engine::Engine;
use countersink::family::Families;
use countersink::flush::Flusher;
use countersink::ops::read::{Reader, resolve};
use countersink::sink::cql::CqlSink;
use countersink::vocabulary::Granularity;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;

const KEYSPACE: &str = "lww_check";

/// A case: statements run in order, then the `v` of row (k = 'a', minute = `minute`).
struct Case {
    name: &'static str,
    minute: i16,
    statements: Vec<String>,
    expected: Option<i64>,
}

fn insert(minute: i16, v: i64, at: i64) -> String {
    format!(
        "INSERT INTO {KEYSPACE}.t (k, minute, writer, v) VALUES ('a', {minute}, 'w', {v}) USING TIMESTAMP {at}"
    )
}

fn cases() -> Vec<Case> {
    let row = |m: i16| format!("k = 'a' AND minute = {m} AND writer = 'w'");
    vec![
        Case {
            name: "an older write arriving after a newer one loses",
            minute: 1,
            statements: vec![insert(1, 20, 2_000), insert(1, 10, 1_000)],
            expected: Some(20),
        },
        Case {
            name: "equal times: the greater value wins (7 over 5)",
            minute: 2,
            statements: vec![insert(2, 7, 100), insert(2, 5, 100)],
            expected: Some(7),
        },
        Case {
            name: "equal times: bytes compare unsigned (-1 over 5)",
            minute: 3,
            statements: vec![insert(3, 5, 100), insert(3, -1, 100)],
            expected: Some(-1),
        },
        Case {
            name: "equal times: a tombstone beats a value",
            minute: 4,
            statements: vec![
                insert(4, 5, 100),
                format!(
                    "UPDATE {KEYSPACE}.t USING TIMESTAMP 100 SET v = null WHERE {}",
                    row(4)
                ),
            ],
            expected: None,
        },
        Case {
            name: "a row deleted at 15 stays deleted for writes at 12 and 15",
            minute: 5,
            statements: vec![
                insert(5, 1, 10),
                format!(
                    "DELETE FROM {KEYSPACE}.t USING TIMESTAMP 15 WHERE {}",
                    row(5)
                ),
                insert(5, 2, 12),
                insert(5, 3, 15),
            ],
            expected: None,
        },
        Case {
            name: "and comes back for a write at 16",
            minute: 6,
            statements: vec![
                format!(
                    "DELETE FROM {KEYSPACE}.t USING TIMESTAMP 15 WHERE {}",
                    row(6)
                ),
                insert(6, 4, 16),
            ],
            expected: Some(4),
        },
        Case {
            name: "a deleted clustering prefix shadows an older write",
            minute: 7,
            statements: vec![
                format!(
                    "DELETE FROM {KEYSPACE}.t USING TIMESTAMP 100 WHERE k = 'a' AND minute = 7"
                ),
                insert(7, 1, 50),
            ],
            expected: None,
        },
        Case {
            name: "a server-time write after a far-future one loses",
            minute: 8,
            statements: vec![
                insert(8, 99, i64::MAX / 2),
                format!(
                    "INSERT INTO {KEYSPACE}.t (k, minute, writer, v) VALUES ('a', 8, 'w', 100)"
                ),
            ],
            expected: Some(99),
        },
    ]
}

async fn connect(address: &str) -> Session {
    SessionBuilder::new()
        .known_node(address)
        .build()
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {address}: {e}"))
}

async fn prepare(session: &Session) {
    for statement in [
        format!("DROP KEYSPACE IF EXISTS {KEYSPACE}"),
        format!(
            "CREATE KEYSPACE {KEYSPACE} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
        ),
        format!(
            "CREATE TABLE {KEYSPACE}.t (k text, minute smallint, writer text, v bigint, PRIMARY KEY (k, minute, writer))"
        ),
    ] {
        session
            .query_unpaged(statement.as_str(), ())
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
    session
        .await_schema_agreement()
        .await
        .expect("schema agreement");
}

async fn value(session: &Session, minute: i16) -> Option<i64> {
    let rows = session
        .query_unpaged(
            format!(
                "SELECT v FROM {KEYSPACE}.t WHERE k = 'a' AND minute = {minute} AND writer = 'w'"
            ),
            (),
        )
        .await
        .expect("select")
        .into_rows_result()
        .expect("rows");
    rows.maybe_first_row::<(Option<i64>,)>()
        .expect("typed row")
        .and_then(|(v,)| v)
}

async fn batch_error(session: &Session) -> String {
    match session
        .query_unpaged(
            format!(
                "BEGIN UNLOGGED BATCH USING TIMESTAMP 10 {} APPLY BATCH",
                insert(9, 1, 20)
            ),
            (),
        )
        .await
    {
        Ok(_) => "accepted".into(),
        Err(e) => e.to_string(),
    }
}

/// The mode end to end against `address`: two incarnations of one writer count into two
/// writer columns; the reader sums them.
async fn writer_totals_end_to_end(address: &str) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut config = Config::default();
    config.store.contact_points = vec![address.to_owned()];
    config.store.consistency = countersink::config::ConsistencyLevel::One;
    config.state.dir = dir.path().to_owned();
    config.generic.enabled = false;
    config.families.push(FamilyConfig {
        name: "views".into(),
        minute_table: format!("{KEYSPACE}.views_by_minute"),
        day_table: format!("{KEYSPACE}.views_by_day"),
        key: vec!["page_id".into()],
        columns: [("page.views".to_string(), "views".to_string())].into(),
        mode: CountingMode::WriterTotals,
        ..FamilyConfig::default()
    });
    let session = connect(address).await;
    for statement in ddl::statements(&config, ddl::DEV_REPLICATION).map_err(|e| e.to_string())? {
        session
            .query_unpaged(statement.as_str(), ())
            .await
            .map_err(|e| format!("{statement}: {e}"))?;
    }
    session
        .await_schema_agreement()
        .await
        .map_err(|e| e.to_string())?;
    let now = countersink::bucket::unix_secs(std::time::SystemTime::now());
    for delta in [5, 3] {
        let engine = Arc::new(Engine::new(&config).map_err(|e| e.to_string())?);
        let sink = CqlSink::connect(&config.store, engine.families())
            .await
            .map_err(|e| e.to_string())?;
        let mut flusher =
            Flusher::open(engine.clone(), Arc::new(sink), &config).map_err(|e| e.to_string())?;
        engine
            .record("page.views", &[("page_id", "home")][..], delta, now, None)
            .map_err(|e| format!("{e:?}"))?;
        let report = flusher.flush_now().await;
        if report.totals.applied != 2 {
            return Err(format!("writes did not apply: {report:?}"));
        }
        flusher.finish().await;
    }
    let families = Families::from_config(&config).map_err(|e| e.to_string())?;
    let session = Arc::new(session);
    let reader = Reader::new(session.clone());
    let day = Minute::from_unix_secs(now).ok_or("now")?.day();
    let counter =
        resolve(&families, "page.views", &[("page_id", "home")]).map_err(|e| e.to_string())?;
    let reading = reader
        .counter_partition(
            &families,
            &counter,
            Granularity::Day,
            day,
            ConsistencyLevel::One,
        )
        .await
        .map_err(|e| e.to_string())?;
    let total = reading.sums.get(&i64::from(day.0)).map_or(0, |v| v[0]);
    println!(
        "writer_totals end to end on the real node: two incarnations wrote 5 and 3; the day total reads {total} from {} rows",
        reading.rows_read
    );
    if total == 8 && reading.rows_read == 2 {
        Ok(())
    } else {
        Err(format!(
            "expected 8 from 2 rows, read {total} from {}",
            reading.rows_read
        ))
    }
}

#[tokio::main]
async fn main() {
    let address = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9042".into());
    let cassandra = connect(&address).await;
    let sim = cqlsim::Server::start(cqlsim::Config {
        listen: "127.0.0.1:0".parse().expect("address"),
        ..Default::default()
    })
    .await
    .expect("cqlsim");
    let sim_session = connect(&sim.local_addr().to_string()).await;
    prepare(&cassandra).await;
    prepare(&sim_session).await;
    let mut failures = 0;
    println!("| case | expected | Cassandra | cqlsim |");
    println!("|---|---|---|---|");
    for case in cases() {
        for statement in &case.statements {
            for session in [&cassandra, &sim_session] {
                session
                    .query_unpaged(statement.as_str(), ())
                    .await
                    .unwrap_or_else(|e| panic!("{statement}: {e}"));
            }
        }
        let (real, simulated) = (
            value(&cassandra, case.minute).await,
            value(&sim_session, case.minute).await,
        );
        let ok = real == case.expected && simulated == case.expected;
        failures += usize::from(!ok);
        println!(
            "| {} | {:?} | {real:?} | {simulated:?} |{}",
            case.name,
            case.expected,
            if ok { "" } else { " DIFFERS" }
        );
    }
    let (real, simulated) = (
        batch_error(&cassandra).await,
        batch_error(&sim_session).await,
    );
    let agree = real.contains("Timestamp must be set either on BATCH or individual statements")
        && simulated.contains("Timestamp must be set either on BATCH or individual statements");
    failures += usize::from(!agree);
    println!(
        "| batch and statement timestamps | refused | {} | {} |{}",
        if real.contains("Timestamp must") {
            "refused"
        } else {
            &real
        },
        if simulated.contains("Timestamp must") {
            "refused"
        } else {
            &simulated
        },
        if agree { "" } else { " DIFFERS" }
    );
    if let Err(error) = writer_totals_end_to_end(&address).await {
        println!("writer_totals end to end failed: {error}");
        failures += 1;
    }
    let _ = cassandra
        .query_unpaged(format!("DROP KEYSPACE IF EXISTS {KEYSPACE}"), ())
        .await;
    sim.shutdown().await.expect("cqlsim shutdown");
    tokio::time::sleep(Duration::from_millis(10)).await;
    if failures > 0 {
        eprintln!("{failures} case(s) failed");
        std::process::exit(1);
    }
    println!("every case holds on both stores");
}
