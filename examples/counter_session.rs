//! Adopting countersink in a service that already writes its counters with the `scylla`
//! driver: wrap the session, change nothing else.
//!
//! Teaches: `CounterSession::new(session, &config)` (the one changed line), that its
//! `prepare`/`execute_unpaged` are the driver's, that reads and regular writes pass
//! through, and `shutdown().await`, the final flush. The service (`counter_session/service.rs`)
//! runs twice on an in-process cqlsim, plain and wrapped, in two keyspaces; the example
//! checks that both end with the same counters and prints how many counter write
//! requests each sent.

#[path = "counter_session/service.rs"]
mod service;

use std::sync::Arc;

use countersink::{Config, CounterSession};
use scylla::client::session_builder::SessionBuilder;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // --- example setup: a throw-away store with the service's tables, twice ---
    let store = cqlsim::Server::start(cqlsim::Config {
        listen: "127.0.0.1:0".parse()?,
        ..Default::default()
    })
    .await?;
    for keyspace in ["plain", "wrapped"] {
        for statement in service::schema(keyspace) {
            store
                .execute(None, &statement)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
    }
    let builder = SessionBuilder::new().known_node(store.local_addr().to_string());
    let state = tempfile::tempdir()?;
    let mut config = Config::default();
    config.state.dir = state.path().to_owned();
    // --- end of setup ---

    // The service as it was.
    let session = Arc::new(builder.build().await?);
    service::run(session, "plain")
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;

    // The same service, wrapped: the one changed line.
    let session = Arc::new(CounterSession::new(builder.build().await?, &config).await?);
    let summary = service::run(Arc::clone(&session), "wrapped")
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let stats = session.stats();
    let Ok(session) = Arc::try_unwrap(session) else {
        anyhow::bail!("the service still holds the session");
    };
    let report = session.shutdown().await;
    println!(
        "wrapped run: {} increments buffered, {} requests passed through (reads and inserts), final flush {} rows in {} writes",
        stats.buffered,
        stats.passed_through_total(),
        report.rows,
        report.writes
    );
    println!(
        "reads: {} ({} found their page)",
        summary.reads, summary.titles_found
    );

    let stats = store.stats();
    let mut requests = [0; 2];
    for (i, keyspace) in ["plain", "wrapped"].into_iter().enumerate() {
        for table in ["views_by_minute", "views_by_day"] {
            requests[i] += stats.table(keyspace, table).write_requests;
        }
        for table in ["views_by_minute", "views_by_day"] {
            let read = |ks: &str| {
                store
                    .execute(None, &format!("SELECT * FROM {ks}.{table}"))
                    .map(|rows| {
                        (0..rows.len())
                            .map(|r| (rows.get_i64(r, "views"), rows.get_i64(r, "bytes")))
                            .collect::<Vec<_>>()
                    })
                    .map_err(|e| anyhow::anyhow!("{e}"))
            };
            anyhow::ensure!(
                read("plain")? == read(keyspace)?,
                "{keyspace}.{table} differs from plain.{table}"
            );
        }
    }
    let (_, days) = service::expected();
    let views = store
        .execute(None, "SELECT views FROM wrapped.views_by_day")
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let stored: i64 = (0..views.len())
        .filter_map(|r| views.get_i64(r, "views"))
        .sum();
    anyhow::ensure!(
        stored == days.values().map(|(v, _)| v).sum::<i64>(),
        "the wrapped day table holds {stored} views"
    );
    println!(
        "counter write requests at the store: plain {}, wrapped {} ({}x fewer)",
        requests[0],
        requests[1],
        requests[0] / requests[1].max(1)
    );
    anyhow::ensure!(requests[1] * 100 <= requests[0], "less than 100x fewer");
    store.shutdown().await?;
    println!("Ok: the same counters.");
    Ok(())
}
