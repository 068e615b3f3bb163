//! Write reduction on a real Cassandra node: the seed scenario (10 writers x 200 increments/s
//! on one key for 60 s) sent (a) directly, one prepared non-idempotent UPDATE per increment and
//! table, as a team without countersink would, and (b) through countersink's in-process
//! `Recorder` (one per writer, default 5 s flushes). Then the saturation comparison.
//!
//! Measured from Cassandra itself: counter mutations (`system_views.thread_pools`,
//! CounterMutationStage) and local writes per table (`system_views.local_write_latency`);
//! CPU seconds of the Cassandra process (`/proc/PID/stat`). From the client: p50/p99/max of
//! the call the application makes, unknown outcomes (classified as countersink does), the
//! final stored total against what was sent.
//!
//! Every phase starts once Cassandra's thread pools show no memtable flush or compaction
//! left, after a 15 s measurement of its idle CPU, which is subtracted; countersink runs before the direct phase, whose memtable flushes and
//! compactions go on for a while. A 60 s run with the clients connected and no increments
//! measures the sessions' own fixed cost.
//!
//! Not a test: run by `tests/cassandra/reduction.sh`. Environment: `BENCH_SECS` (60),
//! `BENCH_WRITERS` (10), `BENCH_RATE` (200 per writer per second), `BENCH_SATURATION_SECS`
//! (15, 0 skips the saturation part), `CASSANDRA_PID` (the node's process id),
//! `CASSANDRA_CONTACT_POINTS` (127.0.0.1:9042).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use countersink::config::{Config, FamilyConfig};
use countersink::sink::Outcome;
use countersink::sink::cql::classify::classify;
use countersink::sink::cql::store::StoreKind;
use countersink::{Recorder, ddl};
use parking_lot::Mutex;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::statement::Statement;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::{Counter, CqlDate};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// CPU seconds (user + system) of a process so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("process stat");
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 =
        fields[11].parse::<f64>().expect("utime") + fields[12].parse::<f64>().expect("stime");
    // USER_HZ, the unit of these fields, is 100 on every Linux this runs on.
    ticks / 100.0
}

/// What Cassandra says it did, read over CQL from its virtual tables.
#[derive(Clone, Copy, Debug, Default)]
struct ServerCounts {
    /// Requests of every kind the node answered (Native-Transport-Requests).
    requests: i64,
    counter_mutations: i64,
    minute_writes: i64,
    day_writes: i64,
}

async fn server_counts(session: &Session) -> ServerCounts {
    let mut out = ServerCounts::default();
    let rows = session
        .query_unpaged(
            "SELECT name, completed_tasks FROM system_views.thread_pools",
            (),
        )
        .await
        .expect("thread_pools")
        .into_rows_result()
        .expect("rows");
    for (name, completed) in rows
        .rows::<(String, i64)>()
        .expect("row type")
        .filter_map(Result::ok)
    {
        match name.as_str() {
            "CounterMutationStage" => out.counter_mutations = completed,
            "Native-Transport-Requests" => out.requests = completed,
            _ => {}
        }
    }
    for (table, slot) in [
        ("views_by_minute", &mut out.minute_writes),
        ("views_by_day", &mut out.day_writes),
    ] {
        let rows = session
            .query_unpaged(
                "SELECT count FROM system_views.local_write_latency WHERE keyspace_name = 'metrics' AND table_name = ?",
                (table,),
            )
            .await
            .expect("local_write_latency")
            .into_rows_result()
            .expect("rows");
        if let Ok((count,)) = rows.single_row::<(i64,)>() {
            *slot = count;
        }
    }
    out
}

/// Sum of every minute row and every day row of one page.
async fn stored(session: &Session, page: &str) -> (i64, i64) {
    let mut minute = 0;
    let mut day = 0;
    let mut statement = Statement::new("SELECT page_id, views FROM metrics.views_by_minute");
    statement.set_page_size(10_000);
    let rows = session
        .query_unpaged(statement, ())
        .await
        .expect("read")
        .into_rows_result()
        .expect("rows");
    for row in rows.rows::<(String, Option<Counter>)>().expect("type") {
        let (p, v) = row.expect("row");
        if p == page {
            minute += v.map_or(0, |c| c.0);
        }
    }
    let rows = session
        .query_unpaged("SELECT page_id, views FROM metrics.views_by_day", ())
        .await
        .expect("read")
        .into_rows_result()
        .expect("rows");
    for row in rows.rows::<(String, Option<Counter>)>().expect("type") {
        let (p, v) = row.expect("row");
        if p == page {
            day += v.map_or(0, |c| c.0);
        }
    }
    (minute, day)
}

/// Latencies in microseconds, for percentiles.
#[derive(Default)]
struct Latencies(Mutex<Vec<u32>>);

impl Latencies {
    fn add(&self, d: Duration) {
        self.0
            .lock()
            .push(u32::try_from(d.as_micros()).unwrap_or(u32::MAX));
    }

    fn summary(&self) -> String {
        let mut v = self.0.lock().clone();
        if v.is_empty() {
            return "-".into();
        }
        v.sort_unstable();
        let at = |q: f64| v[((v.len() - 1) as f64 * q) as usize];
        format!(
            "p50 {} us, p99 {} us, max {} us",
            at(0.5),
            at(0.99),
            v[v.len() - 1]
        )
    }
}

struct Phase {
    name: String,
    offered: u64,
    counted: u64,
    unknown: u64,
    not_applied: u64,
    secs: f64,
    cpu: f64,
    server: ServerCounts,
    stored: (i64, i64),
    latency: String,
    /// Cassandra's CPU rate (cores) just before the phase, subtracted from its CPU.
    idle: f64,
}

impl Phase {
    /// Cassandra CPU seconds above its idle rate.
    fn busy(&self) -> f64 {
        (self.cpu - self.idle * self.secs).max(1e-9)
    }

    fn print(&self) {
        let busy = self.busy();
        println!(
            "{}: offered {} increments in {:.1} s ({:.0}/s); counted {} ({:.0}/s), unknown {}, not applied {}\n  \
             Cassandra: {} requests, {} counter mutations, local writes minute {} + day {}; CPU {:.2} s ({:.2} s above its idle {:.3} cores, {:.3} cores), {:.3} us CPU per counted increment\n  \
             stored: minute table {}, day table {} (sent {})\n  client call latency: {}",
            self.name,
            self.offered,
            self.secs,
            self.offered as f64 / self.secs,
            self.counted,
            self.counted as f64 / self.secs,
            self.unknown,
            self.not_applied,
            self.server.requests,
            self.server.counter_mutations,
            self.server.minute_writes,
            self.server.day_writes,
            self.cpu,
            busy,
            self.idle,
            busy / self.secs,
            busy * 1e6 / self.counted.max(1) as f64,
            self.stored.0,
            self.stored.1,
            self.offered,
            self.latency
        );
    }
}

fn delta(after: ServerCounts, before: ServerCounts) -> ServerCounts {
    ServerCounts {
        requests: after.requests - before.requests,
        counter_mutations: after.counter_mutations - before.counter_mutations,
        minute_writes: after.minute_writes - before.minute_writes,
        day_writes: after.day_writes - before.day_writes,
    }
}

struct Bench {
    session: Arc<Session>,
    pid: u32,
    contact_points: Vec<String>,
    minute: PreparedStatement,
    day: PreparedStatement,
}

/// The UTC day and minute of the day of now.
fn now_keys() -> (CqlDate, i16, String) {
    let now = countersink::bucket::unix_secs(std::time::SystemTime::now());
    let minute = countersink::bucket::Minute::from_unix_secs(now).expect("minute");
    let day = minute.day();
    (CqlDate(day.cql_date()), minute.minute_of_day(), day.month())
}

impl Bench {
    /// Direct increments: every writer sends one UPDATE per increment and table at `rate`
    /// per second for `secs`, each request on its own task so a slow answer does not lower
    /// the offered rate.
    async fn direct(&self, name: &str, writers: u64, rate: u64, secs: u64) -> Phase {
        let page = format!("direct-{name}-{}", std::process::id());
        // One session per writer, as ten application instances would have.
        let mut sessions = Vec::new();
        for _ in 0..writers {
            sessions.push(Arc::new(
                SessionBuilder::new()
                    .known_nodes(&self.contact_points)
                    .build()
                    .await
                    .expect("connect"),
            ));
        }
        let idle = self.settle().await;
        let before = server_counts(&self.session).await;
        let cpu_before = cpu_seconds(self.pid);
        let latencies = Arc::new(Latencies::default());
        let counted = Arc::new(AtomicU64::new(0));
        let unknown = Arc::new(AtomicU64::new(0));
        let not_applied = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let mut tasks = Vec::new();
        for session in &sessions {
            let session = session.clone();
            let (minute, day) = (self.minute.clone(), self.day.clone());
            let page = page.clone();
            let (latencies, counted, unknown, not_applied) = (
                latencies.clone(),
                counted.clone(),
                unknown.clone(),
                not_applied.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
                let mut inflight = tokio::task::JoinSet::new();
                for _ in 0..rate * secs {
                    tick.tick().await;
                    let (session, minute, day, page) =
                        (session.clone(), minute.clone(), day.clone(), page.clone());
                    let (latencies, counted, unknown, not_applied) = (
                        latencies.clone(),
                        counted.clone(),
                        unknown.clone(),
                        not_applied.clone(),
                    );
                    inflight.spawn(async move {
                        let (date, minute_of_day, month) = now_keys();
                        let t = Instant::now();
                        let (m, d) = tokio::join!(
                            session
                                .execute_unpaged(&minute, (Counter(1), &page, date, minute_of_day)),
                            session.execute_unpaged(&day, (Counter(1), &page, &month, date)),
                        );
                        latencies.add(t.elapsed());
                        // The increment counts when its minute row was applied.
                        for (r, is_minute) in [(m, true), (d, false)] {
                            match r {
                                Ok(_) => {
                                    if is_minute {
                                        counted.fetch_add(1, Ordering::Relaxed);
                                    }
                                }
                                Err(e) => match classify(&e, StoreKind::Cassandra) {
                                    Outcome::Unknown(_) => {
                                        unknown.fetch_add(1, Ordering::Relaxed);
                                    }
                                    _ => {
                                        not_applied.fetch_add(1, Ordering::Relaxed);
                                    }
                                },
                            }
                        }
                    });
                    while inflight.try_join_next().is_some() {}
                }
                while inflight.join_next().await.is_some() {}
            }));
        }
        for task in tasks {
            task.await.expect("writer");
        }
        let secs_taken = started.elapsed().as_secs_f64();
        let cpu = cpu_seconds(self.pid) - cpu_before;
        let server = delta(server_counts(&self.session).await, before);
        Phase {
            name: format!("direct ({name})"),
            offered: writers * rate * secs,
            counted: counted.load(Ordering::Relaxed),
            unknown: unknown.load(Ordering::Relaxed),
            not_applied: not_applied.load(Ordering::Relaxed),
            secs: secs_taken,
            cpu,
            server,
            stored: stored(&self.session, &page).await,
            latency: latencies.summary(),
            idle,
        }
    }

    /// Waits for the node to finish what earlier phases left (memtable flushes and
    /// compactions, as its thread pools report them; new sessions' metadata queries), then
    /// measures its idle CPU rate for 15 s.
    async fn settle(&self) -> f64 {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline && self.background_tasks().await > 0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let before = cpu_seconds(self.pid);
        tokio::time::sleep(Duration::from_secs(15)).await;
        (cpu_seconds(self.pid) - before) / 15.0
    }

    /// Active and pending memtable flushes and compactions.
    async fn background_tasks(&self) -> i64 {
        let rows = self
            .session
            .query_unpaged(
                "SELECT name, active_tasks, pending_tasks FROM system_views.thread_pools",
                (),
            )
            .await
            .expect("thread_pools")
            .into_rows_result()
            .expect("rows");
        rows.rows::<(String, i32, i32)>()
            .expect("row type")
            .filter_map(Result::ok)
            .filter(|(name, _, _)| {
                matches!(
                    name.as_str(),
                    "CompactionExecutor" | "MemtableFlushWriter" | "MemtablePostFlush"
                )
            })
            .map(|(_, active, pending)| i64::from(active) + i64::from(pending))
            .sum()
    }

    /// The same increments through countersink: one `Recorder` per writer (what ten
    /// application instances embedding it run), default flush settings, final flush at
    /// the end. `rate` 0 means as fast as the writer can call `incr`.
    async fn countersink(&self, name: &str, writers: u64, rate: u64, secs: u64) -> Phase {
        let page = format!("countersink-{name}-{}", std::process::id());
        let mut recorders = Vec::new();
        let mut dirs = Vec::new();
        for _ in 0..writers {
            let dir = tempfile::tempdir().expect("state dir");
            let config = config(dir.path(), self.contact_points.clone());
            recorders.push(Recorder::connect(&config).await.expect("recorder"));
            dirs.push(dir);
        }
        let idle = self.settle().await;
        let before = server_counts(&self.session).await;
        let cpu_before = cpu_seconds(self.pid);
        let latencies = Arc::new(Latencies::default());
        let offered = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let mut tasks = Vec::new();
        for recorder in &recorders {
            let views = recorder.column("views", "views").expect("configured");
            let (page, latencies, offered) = (page.clone(), latencies.clone(), offered.clone());
            tasks.push(tokio::spawn(async move {
                let end = Instant::now() + Duration::from_secs(secs);
                if rate == 0 {
                    // Saturation: call incr in a loop, yielding now and then.
                    let mut n = 0u64;
                    while Instant::now() < end {
                        for _ in 0..1000 {
                            views.incr(&[&page], 1).expect("incr");
                        }
                        n += 1000;
                        tokio::task::yield_now().await;
                    }
                    offered.fetch_add(n, Ordering::Relaxed);
                } else {
                    let mut tick =
                        tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
                    for _ in 0..rate * secs {
                        tick.tick().await;
                        let t = Instant::now();
                        views.incr(&[&page], 1).expect("incr");
                        latencies.add(t.elapsed());
                    }
                    offered.fetch_add(rate * secs, Ordering::Relaxed);
                }
            }));
        }
        for task in tasks {
            task.await.expect("writer");
        }
        let (mut applied, mut unknown, mut not_applied) = (0i128, 0i128, 0i128);
        for recorder in &recorders {
            recorder.shutdown().await;
            let a = recorder.accounting().await;
            let minute = a.of(countersink::vocabulary::Granularity::Minute);
            applied += minute.applied;
            unknown += minute.unknown;
            not_applied += minute.rejected + minute.spilled + minute.dropped + minute.pending;
        }
        let secs_taken = started.elapsed().as_secs_f64();
        let cpu = cpu_seconds(self.pid) - cpu_before;
        let server = delta(server_counts(&self.session).await, before);
        drop(dirs);
        Phase {
            name: format!("countersink ({name})"),
            offered: offered.load(Ordering::Relaxed),
            counted: u64::try_from(applied).unwrap_or(0),
            unknown: u64::try_from(unknown).unwrap_or(0),
            not_applied: u64::try_from(not_applied).unwrap_or(0),
            secs: secs_taken,
            cpu,
            server,
            stored: stored(&self.session, &page).await,
            latency: if rate == 0 {
                "-".into()
            } else {
                latencies.summary()
            },
            idle,
        }
    }
}

impl Bench {
    /// Cassandra's CPU rate (cores above idle) with `writers` recorders connected and no
    /// increments: what the clients' sessions cost by themselves (keepalives, the driver's
    /// schema refresh every 60 s), a fixed cost both ways of writing pay.
    async fn clients_only(&self, writers: u64, secs: u64) -> f64 {
        let mut recorders = Vec::new();
        let mut dirs = Vec::new();
        for _ in 0..writers {
            let dir = tempfile::tempdir().expect("state dir");
            let config = config(dir.path(), self.contact_points.clone());
            recorders.push(Recorder::connect(&config).await.expect("recorder"));
            dirs.push(dir);
        }
        let idle = self.settle().await;
        let before = cpu_seconds(self.pid);
        tokio::time::sleep(Duration::from_secs(secs)).await;
        let cores = ((cpu_seconds(self.pid) - before) / secs as f64 - idle).max(0.0);
        for recorder in &recorders {
            recorder.shutdown().await;
        }
        drop(dirs);
        cores
    }
}

fn config(state: &std::path::Path, contact_points: Vec<String>) -> Config {
    let mut config = Config::default();
    config.state.dir = state.to_owned();
    config.generic.enabled = false;
    config.store.contact_points = contact_points;
    config.families.push(FamilyConfig {
        name: "views".into(),
        minute_table: "metrics.views_by_minute".into(),
        day_table: "metrics.views_by_day".into(),
        key: vec!["page_id".into()],
        columns: [("page.views".to_string(), "views".to_string())].into(),
        ..FamilyConfig::default()
    });
    config
}

#[tokio::main]
async fn main() {
    let secs = env_u64("BENCH_SECS", 60);
    let writers = env_u64("BENCH_WRITERS", 10);
    let rate = env_u64("BENCH_RATE", 200);
    let saturation_secs = env_u64("BENCH_SATURATION_SECS", 15);
    let pid = u32::try_from(env_u64("CASSANDRA_PID", 0)).expect("pid");
    assert!(pid > 0, "set CASSANDRA_PID to the node's process id");
    let contact_points: Vec<String> = std::env::var("CASSANDRA_CONTACT_POINTS")
        .unwrap_or_else(|_| "127.0.0.1:9042".into())
        .split(',')
        .map(str::to_owned)
        .collect();

    let session = Arc::new(
        SessionBuilder::new()
            .known_nodes(&contact_points)
            .build()
            .await
            .expect("connect"),
    );
    let schema_config = config(std::path::Path::new("/nonexistent"), contact_points.clone());
    for statement in ddl::statements(&schema_config, ddl::DEV_REPLICATION).expect("schema") {
        session
            .query_unpaged(statement, ())
            .await
            .expect("schema statement");
    }
    let mut minute = session
        .prepare("UPDATE metrics.views_by_minute SET views = views + ? WHERE page_id = ? AND day = ? AND minute = ?")
        .await
        .expect("prepare");
    minute.set_is_idempotent(false);
    let mut day = session
        .prepare("UPDATE metrics.views_by_day SET views = views + ? WHERE page_id = ? AND month = ? AND day = ?")
        .await
        .expect("prepare");
    day.set_is_idempotent(false);
    let bench = Bench {
        session,
        pid,
        contact_points,
        minute,
        day,
    };

    // A freshly started JVM runs interpreted code at first: warm it up with the direct load.
    println!("warm-up: direct increments at the seed rate for 20 s (not reported)");
    bench.direct("warmup", writers, rate, 20).await;

    println!("\n== seed scenario: {writers} writers x {rate} increments/s on one key for {secs} s");
    // countersink first: what the direct phase writes is flushed and compacted by Cassandra
    // for a while afterwards, and would be billed to the phase after it.
    let sink = bench.countersink("seed", writers, rate, secs).await;
    sink.print();
    let direct = bench.direct("seed", writers, rate, secs).await;
    direct.print();
    let direct_writes = direct.server.minute_writes + direct.server.day_writes;
    let sink_writes = sink.server.minute_writes + sink.server.day_writes;
    let clients = bench.clients_only(writers, secs).await;
    println!("{writers} connected clients, no increments: {clients:.4} Cassandra cores above idle");
    let net = |p: &Phase| (p.busy() - clients * p.secs).max(1e-9) / p.counted.max(1) as f64;
    println!(
        "write reduction: {:.0}x (local writes {direct_writes} vs {sink_writes}; counter mutations {} vs {}); \
         Cassandra CPU per counted increment: {:.0}x lower through countersink ({:.1} vs {:.2} us), \
         {:.0}x net of the clients' fixed cost ({:.1} vs {:.3} us)",
        direct_writes as f64 / sink_writes.max(1) as f64,
        direct.server.counter_mutations,
        sink.server.counter_mutations,
        (direct.busy() / direct.counted.max(1) as f64) / (sink.busy() / sink.counted.max(1) as f64),
        direct.busy() * 1e6 / direct.counted.max(1) as f64,
        sink.busy() * 1e6 / sink.counted.max(1) as f64,
        net(&direct) / net(&sink),
        net(&direct) * 1e6,
        net(&sink) * 1e6,
    );

    if saturation_secs == 0 {
        return;
    }
    println!("\n== saturation ({saturation_secs} s per step)");
    let mut best: Option<Phase> = None;
    for step_rate in [100, 200, 400, 800, 1600] {
        let phase = bench
            .direct(
                &format!("sat{step_rate}"),
                writers,
                step_rate,
                saturation_secs,
            )
            .await;
        phase.print();
        let clean = phase.unknown == 0
            && phase.not_applied == 0
            && phase.secs < saturation_secs as f64 * 1.05;
        if !clean {
            println!("  -> not absorbed (errors, or fell behind the offered rate)");
            break;
        }
        best = Some(phase);
    }
    let sink = bench.countersink("sat", writers, 0, saturation_secs).await;
    sink.print();
    if let Some(best) = best {
        println!(
            "direct: {:.0} increments/s absorbed without timeouts at {:.2} Cassandra cores; \
             countersink: {:.0} logical increments/s (as fast as the writers call incr) at {:.3} cores",
            best.counted as f64 / best.secs,
            best.busy() / best.secs,
            sink.counted as f64 / sink.secs,
            sink.busy() / sink.secs
        );
    }
}
