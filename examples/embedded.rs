//! Embedding countersink in a Rust service: count in-process, flush to Cassandra.
//!
//! Teaches: `Recorder::connect` (checks the tables and prepares the statements), the
//! name-and-tags `incr` and the typed column handle of a configured family, and
//! `shutdown().await`, the final flush a service must run before it exits.
//!
//! It starts an in-process cqlsim (a test store) so it runs anywhere; point
//! `store.contact_points` at a real cluster in your own code.

use countersink::config::{Config, FamilyConfig};
use countersink::{Recorder, ddl};

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

    let recorder = Recorder::connect(&config).await?;
    // Generic family: any name, keyed by name and tags.
    for _ in 0..1000 {
        recorder.incr("api.requests", &[("route", "/home"), ("status", "200")], 1)?;
    }
    // A configured family through its typed handle: no name look-up, no tag parsing.
    let views = recorder.column("views", "views").expect("configured");
    let bytes = recorder.column("views", "bytes").expect("configured");
    for _ in 0..500 {
        views.incr(&["home"], 1)?;
        bytes.incr(&["home"], 2048)?;
    }
    let report = recorder.shutdown().await.expect("first shutdown");
    println!(
        "final flush: {} rows in {} writes, {} applied",
        report.rows, report.writes, report.applied
    );

    let rows = store
        .execute(None, "SELECT views, bytes FROM metrics.views_by_day")
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    assert_eq!(rows.get_i64(0, "views"), Some(500));
    assert_eq!(rows.get_i64(0, "bytes"), Some(1_024_000));
    let requests = store
        .execute(None, "SELECT value FROM countersink.counts_by_day")
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    assert_eq!(requests.get_i64(0, "value"), Some(1000));
    store.shutdown().await?;
    println!("Ok.");
    Ok(())
}
