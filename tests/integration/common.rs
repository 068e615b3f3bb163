//! Shared set-up: an in-process cqlsim with the schema, and writers (engine + CQL sink +
//! flusher) whose time is injected.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use countersink::accounting::Accounting;
use countersink::config::{Config, FamilyConfig};
use countersink::ddl;
use countersink::engine::Engine;
use countersink::flush::{Flusher, Ledger};
use countersink::sink::cql::CqlSink;
use countersink::state::StateDir;

/// 2026-11-30T23:58:00Z: two minutes before a day (and month) boundary.
pub(crate) const T0: i64 = 1_796_083_080;

/// A configuration with the generic family and the `views` family of seed 000.
pub(crate) fn config(state: &Path) -> Config {
    let mut config = Config::default();
    config.state.dir = state.to_owned();
    config.families.push(FamilyConfig {
        name: "views".into(),
        minute_table: "metrics.views_by_minute".into(),
        day_table: "metrics.views_by_day".into(),
        key: vec!["page_id".into()],
        columns: [
            ("page.views".to_string(), "views".to_string()),
            ("page.bytes".to_string(), "bytes".to_string()),
        ]
        .into(),
        ..FamilyConfig::default()
    });
    config.store.request_timeout = Duration::from_secs(2);
    config.flush.shutdown_deadline = Duration::from_secs(5);
    config
}

/// Starts cqlsim on a free port with the schema of `config`, and points `config` at it.
pub(crate) async fn start_store(config: &mut Config) -> cqlsim::Server {
    let server = cqlsim::Server::start(cqlsim::Config {
        listen: "127.0.0.1:0".parse().expect("address"),
        seed: 7,
        ..Default::default()
    })
    .await
    .expect("cqlsim starts");
    for statement in ddl::statements(config, ddl::DEV_REPLICATION).expect("schema") {
        server.execute(None, &statement).expect("schema statement");
    }
    config.store.contact_points = vec![server.local_addr().to_string()];
    server
}

/// One writer: what a sidecar or a `Recorder` runs, with time passed in.
pub(crate) struct Writer {
    pub(crate) engine: Arc<Engine>,
    pub(crate) ledger: Arc<Ledger>,
    pub(crate) flusher: Flusher<CqlSink>,
    pub(crate) session: Arc<scylla::client::session::Session>,
}

impl Writer {
    pub(crate) async fn start(config: &Config) -> Writer {
        let engine = Arc::new(Engine::with_seed(config, Some(3)).expect("engine"));
        let sink = CqlSink::connect(&config.store, engine.families())
            .await
            .expect("CQL sink");
        let session = sink.session().clone();
        let (state, recovered) = StateDir::open(&config.state).expect("state dir");
        let ledger = Arc::new(Ledger::default());
        let flusher = Flusher::new(
            engine.clone(),
            Arc::new(sink),
            config.flush.clone(),
            state,
            recovered,
            ledger.clone(),
        );
        Writer {
            engine,
            ledger,
            flusher,
            session,
        }
    }

    pub(crate) fn incr(&self, name: &str, tags: &[(&str, &str)], delta: i64, now: i64) {
        self.engine
            .record(name, tags, delta, now, None)
            .expect("recorded");
    }

    pub(crate) fn accounting(&self) -> Accounting {
        Accounting::read(&self.engine, &self.ledger)
    }
}

/// Sum of a column over a whole table, read through cqlsim's in-process API.
pub(crate) fn table_sum(server: &cqlsim::Server, table: &str, column: &str) -> i128 {
    let rows = server
        .execute(None, &format!("SELECT {column} FROM {table}"))
        .expect("select");
    (0..rows.len())
        .filter_map(|i| rows.get_i64(i, column))
        .map(i128::from)
        .sum()
}

/// One counter cell, or `None` when the row does not exist.
pub(crate) fn cell(
    server: &cqlsim::Server,
    table: &str,
    column: &str,
    condition: &str,
) -> Option<i64> {
    let rows = server
        .execute(
            None,
            &format!("SELECT {column} FROM {table} WHERE {condition}"),
        )
        .expect("select");
    rows.get_i64(0, column)
}

/// Minute of the day and date of a Unix time, as the tables key them.
pub(crate) fn day_and_minute(unix: i64) -> (String, i64) {
    let day = unix.div_euclid(86_400);
    let date = time::Date::from_julian_day(2_440_588 + day as i32).expect("date");
    (
        format!(
            "{:04}-{:02}-{:02}",
            date.year(),
            u8::from(date.month()),
            date.day()
        ),
        unix.rem_euclid(86_400) / 60,
    )
}
