//! What the intent journal costs the driver wrapper's flush (`cargo bench --bench
//! wrapper_flush`): one flush of 10,000 and of 100,000 distinct rows (one per partition)
//! to an in-process cqlsim, with the journal (group commit: one write + `fdatasync` before
//! sending, outcomes, log sizes, end) and without it (the baseline, `dev` feature only),
//! alternating, seven runs each (each a fresh session and state directory, whose second
//! flush is timed); medians and their ratio, rows per second.

use std::time::{Duration, Instant};

use scylla::client::session_builder::SessionBuilder;
use scylla::value::Counter;

use countersink::CounterSession;
use countersink::config::Config;

const RUNS: usize = 7;

async fn one_flush(contact: &str, rows: usize, journal: bool) -> Duration {
    let dir = tempfile::tempdir().expect("state dir");
    let mut config = Config::default();
    config.state.dir = dir.path().to_owned();
    config.flush.interval = Duration::from_secs(24 * 3600);
    config.limits.max_pending_rows = rows * 2;
    config.limits.max_pending_bytes = rows * 1024;
    let session = SessionBuilder::new()
        .known_node(contact)
        .build()
        .await
        .expect("session");
    let session = CounterSession::new(session, &config)
        .await
        .expect("wrapper");
    if !journal {
        session.disable_journal_for_benchmark().await;
    }
    let update = session
        .prepare("UPDATE app.c SET views = views + ? WHERE k = ?")
        .await
        .expect("prepare");
    // The first flush is a warm-up (statement prepared, journal file grown to this
    // flush's size once, as in a process that runs for long): the second is timed.
    let mut took = Duration::ZERO;
    for round in 0..2 {
        for i in 0..rows {
            session
                .execute_unpaged(&update, (Counter(1), format!("key-{i}")))
                .await
                .expect("buffered");
        }
        let start = Instant::now();
        let report = session.flush_now().await;
        took = start.elapsed();
        assert_eq!(report.applied, rows, "round {round}: {report:?}");
    }
    session.shutdown().await;
    took
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let store = cqlsim::Server::start(cqlsim::Config {
            listen: "127.0.0.1:0".parse().expect("address"),
            ..Default::default()
        })
        .await
        .expect("cqlsim");
        store
            .execute_script(
                None,
                "CREATE KEYSPACE app WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1};
                 CREATE TABLE app.c (k text PRIMARY KEY, views counter);",
            )
            .expect("schema");
        let contact = store.local_addr().to_string();
        for rows in [10_000, 100_000] {
            let (mut with, mut without) = (Vec::new(), Vec::new());
            for _ in 0..RUNS {
                with.push(one_flush(&contact, rows, true).await);
                without.push(one_flush(&contact, rows, false).await);
            }
            let (with, without) = (median(with), median(without));
            let rate = |d: Duration| rows as f64 / d.as_secs_f64();
            println!(
                "{rows} rows: with journal {:.1} ms ({:.0} rows/s), without {:.1} ms ({:.0} rows/s), throughput ratio {:.3}",
                with.as_secs_f64() * 1e3,
                rate(with),
                without.as_secs_f64() * 1e3,
                rate(without),
                rate(with) / rate(without),
            );
        }
        store.shutdown().await.expect("cqlsim stops");
    });
}
