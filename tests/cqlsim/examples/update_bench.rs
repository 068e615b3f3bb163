//! How many counter UPDATEs per second cqlsim sustains through the real `scylla` driver, so
//! later benchmarks know when the store is their bottleneck.
//!
//! Teaches: a prepared, non-idempotent `UPDATE ... SET c = c + ?` (the countersink flush
//! statement) driven at concurrency 1, 16 and 128, reported as the median of several runs.
//!
//! Run: `cargo run --release -p cqlsim --example update_bench`
//!
//! Environment: `CQLSIM_BENCH_SECS` (seconds per run, default 2), `CQLSIM_BENCH_RUNS` (runs per
//! level, default 5), `CQLSIM_BENCH_KEYS` (distinct partitions, default 1000),
//! `CQLSIM_BENCH_LEVELS` (comma-separated concurrencies, default `1,16,128`), `CQLSIM_ADDR`
//! (benchmark a running server instead of an in-process one). The server runs on its own
//! runtime thread; the machine's load average is printed so noisy runs can be recognised.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use scylla::client::session_builder::SessionBuilder;
use scylla::value::Counter;

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Starts cqlsim on a dedicated single-worker runtime thread, so the driver's runtime and the
/// server's do not share workers.
fn start_server() -> anyhow::Result<std::net::SocketAddr> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                let _ = tx.send(Err(anyhow::Error::from(e)));
                return;
            }
        };
        rt.block_on(async move {
            let config = cqlsim::Config {
                listen: "127.0.0.1:0".parse().expect("literal address"),
                ..Default::default()
            };
            match cqlsim::Server::start(config).await {
                Ok(server) => {
                    let _ = tx.send(Ok(server.local_addr()));
                    std::future::pending::<()>().await;
                }
                Err(e) => {
                    let _ = tx.send(Err(e.into()));
                }
            }
        });
    });
    rx.recv().context("server thread")?
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let secs: f64 = env("CQLSIM_BENCH_SECS", 2.0);
    let runs: usize = env("CQLSIM_BENCH_RUNS", 5);
    let keys: usize = env("CQLSIM_BENCH_KEYS", 1000);
    let levels: Vec<usize> = std::env::var("CQLSIM_BENCH_LEVELS")
        .unwrap_or_else(|_| "1,16,128".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let addr = match std::env::var("CQLSIM_ADDR") {
        Ok(a) => a.parse().context("CQLSIM_ADDR")?,
        Err(_) => start_server()?,
    };
    println!(
        "cqlsim update_bench: {addr}, {runs} runs x {secs}s per level, {keys} keys, load average {}",
        loadavg()
    );
    let session = Arc::new(SessionBuilder::new().known_node_addr(addr).build().await?);
    session
        .query_unpaged("CREATE KEYSPACE IF NOT EXISTS bench WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}", ())
        .await?;
    session
        .query_unpaged(
            "CREATE TABLE IF NOT EXISTS bench.counts (pk text PRIMARY KEY, c counter)",
            (),
        )
        .await?;
    let mut upd = session
        .prepare("UPDATE bench.counts SET c = c + ? WHERE pk = ?")
        .await?;
    upd.set_is_idempotent(false);
    let upd = Arc::new(upd);
    let names: Arc<Vec<String>> = Arc::new((0..keys.max(1)).map(|i| format!("key-{i}")).collect());

    println!(
        "{:>11} {:>14} {:>14} {:>14}",
        "concurrency", "median ops/s", "min ops/s", "max ops/s"
    );
    for &conc in &levels {
        let mut rates = Vec::with_capacity(runs);
        for _ in 0..runs.max(1) {
            let done = Arc::new(AtomicU64::new(0));
            let start = Instant::now();
            let deadline = start + Duration::from_secs_f64(secs);
            let mut tasks = tokio::task::JoinSet::new();
            for t in 0..conc {
                let (session, upd, names, done) =
                    (session.clone(), upd.clone(), names.clone(), done.clone());
                tasks.spawn(async move {
                    let mut i = t;
                    while Instant::now() < deadline {
                        let pk = &names[i % names.len()];
                        session
                            .execute_unpaged(&upd, (Counter(1), pk.as_str()))
                            .await?;
                        done.fetch_add(1, Ordering::Relaxed);
                        i += conc;
                    }
                    anyhow::Ok(())
                });
            }
            while let Some(r) = tasks.join_next().await {
                r??;
            }
            rates.push(done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64());
        }
        rates.sort_by(f64::total_cmp);
        println!(
            "{conc:>11} {:>14.0} {:>14.0} {:>14.0}",
            rates[rates.len() / 2],
            rates[0],
            rates[rates.len() - 1]
        );
    }
    println!("load average after: {}", loadavg());
    println!("Ok.");
    Ok(())
}
