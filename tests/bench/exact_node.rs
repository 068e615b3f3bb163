//! Flush throughput with the delta ledger on vs off against a real Cassandra (or ScyllaDB)
//! node, and the same flushes into an in-process cqlsim in the same run: the node's half
//! of the exact-totals benchmark of `tests/bench/exact.rs`. A bench binary, not
//! criterion: each flush takes seconds; the figures are medians of runs interleaved (off,
//! on, off, on, ...) in the same process.
//!
//! ```sh
//! tests/cassandra/cluster.sh up 1
//! COUNTERSINK_BENCH_NODE=127.0.0.1:9042 cargo bench --bench exact_node
//! ```
//!
//! Without `COUNTERSINK_BENCH_NODE` it exits with status 2 and says so: it never reports a
//! figure it did not measure on a node. Each run flushes `rows` distinct rows of the
//! generic family in one `flush_now` (the shapes of `tests/bench/exact.rs`: 100 minutes per
//! key, a backlog; one minute per key, the steady state), through the
//! real driver, into a keyspace of its own (created before the timer starts, dropped
//! after): with `generic.exact = true` the flush also writes one ledger row per minute row,
//! batched per ledger partition, before the counter writes, and waits for it. Optional:
//! `COUNTERSINK_BENCH_RUNS` (runs per figure at 10k rows, default 7; at most 5 at 100k).

use std::sync::Arc;
use std::time::Instant;

use countersink::config::Config;
use countersink::ddl;
use countersink::engine::Engine;
use countersink::flush::Flusher;
use countersink::sink::cql::CqlSink;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;

#[path = "common/mod.rs"]
mod common;
use common::median;

/// The environment variable naming the node, `host:port`.
const NODE_ENV: &str = "COUNTERSINK_BENCH_NODE";
const NOW: i64 = 1_796_042_096;
/// The flushes measured: (distinct rows, minutes per key), as in `tests/bench/exact.rs`.
const SHAPES: [(usize, usize); 4] = [(10_000, 100), (100_000, 100), (10_000, 1), (100_000, 1)];

/// Where a run flushes.
#[derive(Clone, Copy)]
enum Target<'a> {
    /// The node, through `admin` for its schema.
    Node {
        admin: &'a Session,
        contact: &'a str,
    },
    /// A fresh in-process cqlsim per run.
    Cqlsim,
}

impl Target<'_> {
    fn name(&self) -> String {
        match self {
            Target::Node { contact, .. } => format!("node {contact}"),
            Target::Cqlsim => "cqlsim".to_owned(),
        }
    }
}

/// The default configuration (the generic family) in keyspace `keyspace`, the ledger on
/// or off.
fn bench_config(dir: &std::path::Path, keyspace: &str, exact: bool) -> Config {
    let mut config = Config::default();
    config.state.dir = dir.to_owned();
    config.store.keyspace = keyspace.to_owned();
    config.generic.exact = exact;
    config
}

/// Feeds `rows` distinct rows: `rows / minutes` keys, `minutes` minutes each.
fn feed(engine: &Engine, rows: usize, minutes: usize) {
    for i in 0..rows {
        let key = format!("k{}", i / minutes);
        let minute = (i % minutes) as i64;
        engine
            .record(
                "bench",
                &[("key", key.as_str())][..],
                1,
                NOW - 6000 + minute * 60,
                None,
            )
            .expect("record");
    }
}

/// Rows per second of one flush of `rows` distinct rows (`minutes` per key) into a fresh
/// keyspace of the node (or a fresh cqlsim), ledger on or off.
async fn flush_rate(target: Target<'_>, rows: usize, minutes: usize, exact: bool) -> f64 {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let keyspace = format!("bench_exact_{:08x}", fastrand::u32(..));
    let mut config = bench_config(dir.path(), &keyspace, exact);
    let sim = match target {
        Target::Node { admin, contact } => {
            config.store.contact_points = vec![contact.to_owned()];
            for statement in ddl::statements(&config, ddl::DEV_REPLICATION).expect("schema") {
                admin
                    .query_unpaged(statement.as_str(), ())
                    .await
                    .unwrap_or_else(|e| panic!("{statement}: {e}"));
            }
            None
        }
        Target::Cqlsim => Some(common::store(&mut config).await),
    };
    let engine = Arc::new(Engine::new(&config).expect("engine"));
    let sink = CqlSink::connect(&config.store, engine.families())
        .await
        .expect("sink");
    let mut flusher = Flusher::open(engine.clone(), Arc::new(sink), &config).expect("state");
    feed(&engine, rows, minutes);
    let started = Instant::now();
    let report = flusher.flush_now().await;
    let elapsed = started.elapsed();
    assert_eq!(report.applied, report.writes, "{report:?}");
    assert_eq!(flusher.ledger().exact_ledger().held_rows, 0);
    assert_eq!(engine.aggregator().pending_rows(), 0);
    drop(flusher);
    match (target, sim) {
        (Target::Node { admin, .. }, _) => {
            admin
                .query_unpaged(format!("DROP KEYSPACE {keyspace}"), ())
                .await
                .expect("drop keyspace");
        }
        (Target::Cqlsim, Some(server)) => server.shutdown().await.expect("cqlsim stops"),
        (Target::Cqlsim, None) => unreachable!("a cqlsim run has its server"),
    }
    rows as f64 / elapsed.as_secs_f64()
}

/// Measures and prints the ledger off/on figures of `target` at `rows` rows, `minutes`
/// per key.
async fn measure(target: Target<'_>, rows: usize, minutes: usize, runs: usize) {
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        off.push(flush_rate(target, rows, minutes, false).await);
        on.push(flush_rate(target, rows, minutes, true).await);
    }
    let spread = |v: &[f64]| {
        let (lo, hi) = v
            .iter()
            .fold((f64::MAX, 0.0_f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        format!("{lo:.0}-{hi:.0}")
    };
    let (on_range, off_range) = (spread(&on), spread(&off));
    // Each on run beside the off run just before it: less sensitive to the load of a
    // shared machine changing during the measurement.
    let paired = median(on.iter().zip(&off).map(|(on, off)| on / off).collect());
    let (on, off) = (median(on), median(off));
    println!(
        "{}, flush {rows} rows ({minutes} min per key): ledger off {off:.0} rows/s ({off_range}), \
         ledger on {on:.0} rows/s ({on_range}), ratio {:.2}, paired ratio {paired:.2} \
         (medians of {runs} interleaved runs)",
        target.name(),
        on / off
    );
}

fn main() {
    let Some(node) = std::env::var(NODE_ENV).ok().filter(|n| !n.is_empty()) else {
        eprintln!(
            "exact_node: {NODE_ENV} is not set: nothing measured. Start a node \
             (tests/cassandra/cluster.sh up 1) and run \
             {NODE_ENV}=127.0.0.1:9042 cargo bench --bench exact_node"
        );
        std::process::exit(2);
    };
    let runs: usize = std::env::var("COUNTERSINK_BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .filter(|&r| r > 0)
        .unwrap_or(7);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let admin = SessionBuilder::new()
            .known_node(&node)
            .build()
            .await
            .unwrap_or_else(|e| panic!("{NODE_ENV}={node}: {e}"));
        let node = Target::Node {
            admin: &admin,
            contact: &node,
        };
        // A first flush of each kind, not counted: the node's JIT, the driver's prepared
        // statements, the keyspace code paths.
        for target in [node, Target::Cqlsim] {
            flush_rate(target, 2_000, 100, false).await;
            flush_rate(target, 2_000, 100, true).await;
        }
        for (rows, minutes) in SHAPES {
            let runs = if rows > 10_000 { runs.min(5) } else { runs };
            for target in [node, Target::Cqlsim] {
                measure(target, rows, minutes, runs).await;
            }
        }
    });
}
