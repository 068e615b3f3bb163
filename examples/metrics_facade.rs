//! A service instrumented with the `metrics` crate, counting into countersink.
//!
//! Teaches: `countersink::facade::install` (connect, check the tables, install the
//! process's `metrics` recorder), unchanged `counter!` calls landing in the generic
//! family and in a configured family keyed by a label, what happens to gauges and
//! histograms (counted as ignored, written nowhere), and `shutdown().await`, the final
//! flush a service must run before it exits.
//!
//! It starts an in-process cqlsim (a test store) so it runs anywhere; point
//! `store.contact_points` at a real cluster in your own code. Run it with
//! `cargo run --example metrics_facade --features metrics-facade`.

use countersink::config::{Config, FamilyConfig};
use countersink::ddl;
use countersink::line::IgnoredKind;

/// What a request handler of the service records: instrumentation written for the
/// `metrics` facade, which knows nothing of countersink.
fn handle_request(route: &'static str, page: &str, bytes: u64) {
    metrics::gauge!("api.in_flight").increment(1.0);
    metrics::counter!("api.requests", "route" => route, "status" => "200").increment(1);
    metrics::counter!("page.views", "page_id" => page.to_owned()).increment(1);
    metrics::counter!("page.bytes", "page_id" => page.to_owned()).increment(bytes);
    metrics::histogram!("api.latency_seconds", "route" => route).record(0.004);
    metrics::gauge!("api.in_flight").decrement(1.0);
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // --- example setup: a throw-away store with the schema ---
    let store = cqlsim::Server::start(cqlsim::Config {
        listen: "127.0.0.1:0".parse()?,
        ..Default::default()
    })
    .await?;
    let state = tempfile::tempdir()?;
    let mut config = Config::default();
    config.state.dir = state.path().to_owned();
    config.store.contact_points = vec![store.local_addr().to_string()];
    config.families.push(FamilyConfig {
        name: "views".into(),
        minute_table: "metrics.views_by_minute".into(),
        day_table: "metrics.views_by_day".into(),
        key: vec!["page_id".into()],
        columns: [
            ("page.views".into(), "views".into()),
            ("page.bytes".into(), "bytes".into()),
        ]
        .into(),
        ..FamilyConfig::default()
    });
    for statement in ddl::statements(&config, ddl::DEV_REPLICATION)? {
        store
            .execute(None, &statement)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    // --- end of setup ---

    // Once, at start-up, before the instrumented code runs.
    let handle = countersink::facade::install(&config).await?;

    // The service: four workers serving 2,500 requests each.
    let workers: Vec<_> = (0..4)
        .map(|worker| {
            tokio::spawn(async move {
                for i in 0..2_500 {
                    let page = if (worker + i) % 5 == 0 {
                        "about"
                    } else {
                        "home"
                    };
                    handle_request("/page", page, 2048);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await?;
    }

    // Before exiting: the final flush.
    let report = handle.shutdown().await.expect("first shutdown");
    println!(
        "final flush: {} rows in {} writes, {} applied",
        report.rows, report.writes, report.applied
    );
    let counters = handle.recorder().engine().aggregator().counters();
    println!(
        "counted, not written: {} gauge updates, {} histogram values",
        counters.ignored_for(IgnoredKind::Gauge),
        counters.ignored_for(IgnoredKind::Histogram)
    );
    assert_eq!(counters.ignored_for(IgnoredKind::Gauge), 20_000);
    assert_eq!(counters.ignored_for(IgnoredKind::Histogram), 10_000);

    let requests = store
        .execute(None, "SELECT tags, value FROM countersink.counts_by_day")
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    assert_eq!(requests.len(), 1);
    assert_eq!(requests.get_i64(0, "value"), Some(10_000));
    let views = store
        .execute(
            None,
            "SELECT page_id, views, bytes FROM metrics.views_by_day",
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let total_views: i64 = (0..views.len())
        .filter_map(|i| views.get_i64(i, "views"))
        .sum();
    let total_bytes: i64 = (0..views.len())
        .filter_map(|i| views.get_i64(i, "bytes"))
        .sum();
    assert_eq!((views.len(), total_views), (2, 10_000));
    assert_eq!(total_bytes, 10_000 * 2048);
    store.shutdown().await?;
    println!("Ok.");
    Ok(())
}
