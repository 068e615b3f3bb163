//! Real faults on a real three-node Apache Cassandra, through countersink's own flush path
//! (engine, CQL sink, flusher), with RF=3 and QUORUM counter writes:
//!
//! - (a) two nodes killed (SIGKILL) just before a flush;
//! - (b) two replicas paused (SIGSTOP) with a short `counter_write_request_timeout`, so the
//!   coordinator's leader applies an increment and then times out waiting for the others;
//! - (c) one node restarted (SIGTERM, start) while a flush is in flight;
//! - (d) node 1, a coordinator of a third of the requests and the driver's first contact
//!   point, killed while a flush is in flight.
//!
//! For each: the driver errors seen, the class countersink chose, and what the store holds
//! afterwards, per row, read back at consistency ALL once every node is up again. A row may
//! hold anything between what was acknowledged and that plus what was unknown, and never more
//! than was accepted for it. Exits non-zero when a row breaks that or the accounting identity
//! does not balance.
//!
//! Run by `tests/cassandra/faults.sh`, which starts the cluster (the program drives the
//! faults through `tests/cassandra/cluster.sh`).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use countersink::bucket::{Day, Minute};
use countersink::config::{Config, ConsistencyLevel, FamilyConfig};
use countersink::ddl;
use countersink::engine::Engine;
use countersink::flush::Flusher;
use countersink::sink::cql::CqlSink;
use countersink::sink::{Outcome, Request, Sink};
use countersink::telemetry::{Accounting, Ledger};
use countersink::vocabulary::Granularity;
use futures_util::TryStreamExt;
use scylla::client::session::Session;
use scylla::statement::{Consistency, Statement};
use scylla::value::{Counter, CqlDate};

/// Page ids per scenario: each flush writes one minute row and one day row per page.
const PAGES: usize = 1500;
const REPLICATION: &str = "{'class': 'SimpleStrategy', 'replication_factor': 3}";

/// A row of the views family: table, page id, CQL date, minute of the day (-1 for the day
/// table).
type RowId = (Granularity, String, u32, i16);

/// What the flusher sent for one row, by outcome class.
#[derive(Default, Clone, Copy)]
struct Sent {
    applied: i128,
    unknown: i128,
}

/// One write as the sink saw it.
struct Seen {
    rows: Vec<(RowId, i128)>,
    outcome: Outcome,
}

/// The CQL sink, with every outcome recorded for the report.
struct Observed {
    inner: CqlSink,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Sink for Observed {
    /// This run's families count with counters: only counter writes are recorded, the
    /// rest forwarded.
    async fn send(&self, request: Request<'_>) -> Outcome {
        let outcome = self.inner.send(request).await;
        let Request::Counter(write) = request else {
            return outcome;
        };
        let page = countersink::series::fields(&write.series)
            .next()
            .unwrap_or_default()
            .to_owned();
        let rows = write
            .rows
            .iter()
            .map(|row| {
                let id = match write.table {
                    Granularity::Minute => {
                        let minute = Minute(row.bucket);
                        (
                            Granularity::Minute,
                            page.clone(),
                            minute.day().cql_date(),
                            minute.minute_of_day(),
                        )
                    }
                    Granularity::Day => (
                        Granularity::Day,
                        page.clone(),
                        Day(row.bucket).cql_date(),
                        -1,
                    ),
                    // This harness's family has a minute and a day table only.
                    other @ (Granularity::Hour | Granularity::Total) => (
                        other,
                        page.clone(),
                        countersink::bucket::day_of(other, row.bucket).cql_date(),
                        -1,
                    ),
                };
                (id, row.columns.sum())
            })
            .collect();
        self.seen.lock().expect("seen").push(Seen {
            rows,
            outcome: outcome.clone(),
        });
        outcome
    }
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    KillTwo,
    PauseTwo,
    RestartMidFlush,
    KillCoordinatorMidFlush,
}

impl Fault {
    fn title(self) -> &'static str {
        match self {
            Fault::KillTwo => "(a) nodes 2 and 3 killed (SIGKILL) before a flush",
            Fault::PauseTwo => "(b) nodes 2 and 3 paused (SIGSTOP) before a flush",
            Fault::RestartMidFlush => "(c) node 2 restarted (SIGTERM, start) mid-flush",
            Fault::KillCoordinatorMidFlush => "(d) node 1 (a coordinator) killed mid-flush",
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            Fault::KillTwo => "a",
            Fault::PauseTwo => "b",
            Fault::RestartMidFlush => "c",
            Fault::KillCoordinatorMidFlush => "d",
        }
    }
}

fn cluster_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cassandra/cluster.sh")
}

async fn cluster(args: &[&str]) {
    let started = Instant::now();
    let status = tokio::process::Command::new(cluster_script())
        .args(args)
        .status()
        .await
        .expect("cluster.sh runs");
    assert!(status.success(), "cluster.sh {args:?} failed");
    println!(
        "    cluster.sh {} ({} ms)",
        args.join(" "),
        started.elapsed().as_millis()
    );
}

fn config(state: &Path, contact_points: Vec<String>) -> Config {
    let mut config = Config::default();
    config.state.dir = state.to_owned();
    config.generic.enabled = false;
    config.families.push(FamilyConfig {
        name: "views".into(),
        minute_table: "metrics.views_by_minute".into(),
        day_table: "metrics.views_by_day".into(),
        key: vec!["page_id".into()],
        columns: [("page.views".to_string(), "views".to_string())].into(),
        ..FamilyConfig::default()
    });
    config.store.contact_points = contact_points;
    config.store.consistency = ConsistencyLevel::Quorum;
    // Longer than the servers' counter write timeout, so a slow write surfaces as the
    // server's WriteTimeout where a coordinator is alive to send it.
    config.store.request_timeout = Duration::from_secs(4);
    config.flush.max_in_flight = 32;
    config
}

struct Writer {
    engine: Arc<Engine>,
    ledger: Arc<Ledger>,
    flusher: Flusher<Observed>,
    seen: Arc<Mutex<Vec<Seen>>>,
    expected: HashMap<RowId, i128>,
}

impl Writer {
    async fn start(config: &Config) -> Writer {
        let engine = Arc::new(Engine::with_seed(config, Some(3)).expect("engine"));
        let inner = CqlSink::connect(&config.store, engine.families())
            .await
            .expect("CQL sink");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let flusher = Flusher::open(
            engine.clone(),
            Arc::new(Observed {
                inner,
                seen: seen.clone(),
            }),
            config,
        )
        .expect("state dir");
        let ledger = flusher.ledger().clone();
        Writer {
            engine,
            ledger,
            flusher,
            seen,
            expected: HashMap::new(),
        }
    }

    /// One increment per page, in the minute of `now`.
    fn record(&mut self, prefix: &str, now: i64) {
        let minute = Minute::from_unix_secs(now).expect("minute");
        for i in 0..PAGES {
            let page = format!("{prefix}-p{i}");
            let delta = (i % 5) as i64 + 1;
            self.engine
                .record(
                    "page.views",
                    &[("page_id", page.as_str())][..],
                    delta,
                    now,
                    None,
                )
                .expect("recorded");
            for id in [
                (
                    Granularity::Minute,
                    page.clone(),
                    minute.day().cql_date(),
                    minute.minute_of_day(),
                ),
                (Granularity::Day, page.clone(), minute.day().cql_date(), -1),
            ] {
                *self.expected.entry(id).or_default() += i128::from(delta);
            }
        }
    }

    /// Flushes until nothing is pending (re-queued writes go out again), for up to 90 s.
    async fn settle(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(90);
        while self.engine.aggregator().pending_rows() > 0 && Instant::now() < deadline {
            self.flusher.flush_now().await;
            if self.engine.aggregator().pending_rows() > 0 {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// Every row of the scenario, read at consistency ALL.
async fn stored(session: &Session, prefix: &str) -> HashMap<RowId, i128> {
    let mut out = HashMap::new();
    let want = format!("{prefix}-");
    for (table, cql) in [
        (
            Granularity::Minute,
            "SELECT page_id, day, minute, views FROM metrics.views_by_minute",
        ),
        (
            Granularity::Day,
            "SELECT page_id, day, views FROM metrics.views_by_day",
        ),
    ] {
        let mut statement = Statement::new(cql);
        statement.set_consistency(Consistency::All);
        statement.set_page_size(5000);
        let pager = session.query_iter(statement, ()).await.expect("read back");
        if table == Granularity::Minute {
            let mut rows = pager
                .rows_stream::<(String, CqlDate, i16, Counter)>()
                .expect("row type");
            while let Some((page, day, minute, views)) = rows.try_next().await.expect("row") {
                if page.starts_with(&want) {
                    out.insert((table, page, day.0, minute), i128::from(views.0));
                }
            }
        } else {
            let mut rows = pager
                .rows_stream::<(String, CqlDate, Counter)>()
                .expect("row type");
            while let Some((page, day, views)) = rows.try_next().await.expect("row") {
                if page.starts_with(&want) {
                    out.insert((table, page, day.0, -1), i128::from(views.0));
                }
            }
        }
    }
    out
}

/// Runs one scenario; returns whether every check held.
async fn scenario(fault: Fault, contact_points: &[String], base: i64) -> bool {
    println!("\n== {}", fault.title());
    let dir = tempfile::tempdir().expect("state dir");
    let config = config(dir.path(), contact_points.to_vec());
    let mut w = Writer::start(&config).await;
    let prefix = fault.prefix();

    // A healthy flush first: the baseline, all applied.
    w.record(prefix, base);
    let report = w.flusher.flush_now().await;
    println!(
        "    healthy flush: {} writes, {} applied",
        report.writes, report.applied
    );

    w.record(prefix, base + 60);
    let faulted = match fault {
        Fault::KillTwo | Fault::PauseTwo => {
            let signal = if matches!(fault, Fault::KillTwo) {
                "kill"
            } else {
                "pause"
            };
            cluster(&[signal, "2"]).await;
            cluster(&[signal, "3"]).await;
            let first = w.flusher.flush_now().await;
            // Once the failure detector has convicted them, writes fail before any replica
            // applies them.
            tokio::time::sleep(Duration::from_secs(12)).await;
            w.record(prefix, base + 120);
            let second = w.flusher.flush_now().await;
            println!("    flush right after: {first:?}\n    flush 12 s later:  {second:?}");
            if matches!(fault, Fault::KillTwo) {
                cluster(&["start", "2"]).await;
                cluster(&["start", "3"]).await;
            } else {
                cluster(&["resume", "2"]).await;
                cluster(&["resume", "3"]).await;
            }
            true
        }
        Fault::RestartMidFlush | Fault::KillCoordinatorMidFlush => {
            let (node, action) = match fault {
                Fault::RestartMidFlush => ("2", "stop"),
                _ => ("1", "kill"),
            };
            let flush = w.flusher.flush_now();
            let fault_action = async {
                tokio::time::sleep(Duration::from_millis(150)).await;
                cluster(&[action, node]).await;
            };
            let (report, ()) = tokio::join!(flush, fault_action);
            println!("    flush with the fault: {report:?}");
            cluster(&["start", node]).await;
            true
        }
    };
    assert!(faulted);
    w.settle().await;
    let report = w.flusher.flush_now().await;
    println!(
        "    settled: {} rows still pending, last flush {report:?}",
        w.engine.aggregator().pending_rows()
    );

    // What the driver said, and what countersink made of it.
    let mut classes: BTreeMap<(String, String), (usize, String)> = BTreeMap::new();
    let mut sent: HashMap<RowId, Sent> = HashMap::new();
    for seen in w.seen.lock().expect("seen").iter() {
        let (kind, text) = match &seen.outcome {
            Outcome::Applied => ("-".to_owned(), String::new()),
            Outcome::NotAppliedTransient(f)
            | Outcome::NotAppliedPermanent(f)
            | Outcome::Unknown(f) => (f.kind.to_owned(), f.text.to_string()),
        };
        let entry = classes
            .entry((seen.outcome.label().to_owned(), kind))
            .or_insert((0, text));
        entry.0 += 1;
        for (id, delta) in &seen.rows {
            let s = sent.entry(id.clone()).or_default();
            match seen.outcome {
                Outcome::Applied => s.applied += delta,
                Outcome::Unknown(_) => s.unknown += delta,
                _ => {}
            }
        }
    }
    for ((class, kind), (count, text)) in &classes {
        println!("    {count:>6} writes {class:<8} {kind:<18} {text}");
    }

    let session = w.flusher_session(&config).await;
    let store = stored(&session, prefix).await;
    // Above applied + unknown or above the accepted delta: a double count (countersink's
    // promise). Below applied: the store lost an acknowledged increment (its durability).
    let (mut over, mut above_accepted, mut lost) = (0, 0, 0);
    let (mut unknown_rows, mut unknown_applied, mut unknown_not_applied) = (0, 0, 0);
    for (id, accepted) in &w.expected {
        let s = sent.get(id).copied().unwrap_or_default();
        let value = store.get(id).copied().unwrap_or(0);
        if value > *accepted {
            above_accepted += 1;
        }
        if value > s.applied + s.unknown {
            over += 1;
        }
        if value < s.applied {
            lost += 1;
        }
        if value > s.applied + s.unknown || value < s.applied {
            println!(
                "    {} {id:?}: applied {} <= stored {value} <= applied + unknown {}",
                if value < s.applied {
                    "STORE LOST AN ACKNOWLEDGED WRITE"
                } else {
                    "DOUBLE COUNT"
                },
                s.applied,
                s.applied + s.unknown
            );
        }
        if s.unknown > 0 {
            unknown_rows += 1;
            if value == s.applied + s.unknown {
                unknown_applied += 1;
            } else if value == s.applied {
                unknown_not_applied += 1;
            }
        }
    }
    let accounting = Accounting::read(&w.engine, &w.ledger);
    for table in [Granularity::Minute, Granularity::Day] {
        let stages = accounting.of(table);
        let sum: i128 = store
            .iter()
            .filter(|(id, _)| id.0 == table)
            .map(|(_, v)| *v)
            .sum();
        println!(
            "    {:<6} table: accepted {}, applied {}, unknown {}, pending {}; stored {}",
            table.as_str(),
            stages.accepted,
            stages.applied,
            stages.unknown,
            stages.pending,
            sum
        );
    }
    println!(
        "    rows: {} checked; {above_accepted} above their accepted delta, {over} above applied + unknown, \
         {lost} below applied (lost by the store); {unknown_rows} rows had an unknown write: \
         {unknown_applied} hold it (applied), {unknown_not_applied} do not",
        w.expected.len()
    );
    let balanced = accounting.is_balanced();
    if !balanced {
        println!("    ACCOUNTING DOES NOT BALANCE: {accounting:?}");
    }
    if lost > 0 {
        println!(
            "    note: with commitlog_sync {}, a killed node forgets up to 10 s of its own counter \
             shard; its next increment as leader then overwrites the lost one",
            std::env::var("CASSANDRA_COMMITLOG_SYNC").unwrap_or_else(|_| "periodic".into())
        );
    }
    over == 0 && above_accepted == 0 && balanced
}

impl Writer {
    /// A separate session for reading back (the sink's own may still be reconnecting).
    async fn flusher_session(&self, config: &Config) -> Session {
        scylla::client::session_builder::SessionBuilder::new()
            .known_nodes(&config.store.contact_points)
            .build()
            .await
            .expect("read-back session")
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let contact_points: Vec<String> = std::env::var("CASSANDRA_CONTACT_POINTS")
        .unwrap_or_else(|_| "127.0.0.1:9042,127.0.0.2:9042,127.0.0.3:9042".into())
        .split(',')
        .map(str::to_owned)
        .collect();
    let setup = scylla::client::session_builder::SessionBuilder::new()
        .known_nodes(&contact_points)
        .build()
        .await
        .expect("connect to the cluster");
    let mut config = config(Path::new("/nonexistent"), contact_points.clone());
    config.generic.enabled = false;
    for statement in ddl::statements(&config, REPLICATION).expect("schema") {
        setup
            .query_unpaged(statement, ())
            .await
            .expect("schema statement");
    }
    setup
        .query_unpaged("TRUNCATE metrics.views_by_minute", ())
        .await
        .expect("truncate");
    setup
        .query_unpaged("TRUNCATE metrics.views_by_day", ())
        .await
        .expect("truncate");
    drop(setup);

    // Distinct minutes per scenario, an hour in the past (inside the accepted window).
    let base = countersink::bucket::unix_secs(std::time::SystemTime::now()) / 60 * 60 - 3600;
    println!(
        "commitlog_sync: {}",
        std::env::var("CASSANDRA_COMMITLOG_SYNC").unwrap_or_else(|_| "periodic".into())
    );
    let mut ok = true;
    for (i, fault) in [
        Fault::KillTwo,
        Fault::PauseTwo,
        Fault::RestartMidFlush,
        Fault::KillCoordinatorMidFlush,
    ]
    .into_iter()
    .enumerate()
    {
        ok &= scenario(fault, &contact_points, base + i as i64 * 600).await;
    }
    println!(
        "\n{}",
        if ok {
            "every check held"
        } else {
            "SOME CHECK FAILED"
        }
    );
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
