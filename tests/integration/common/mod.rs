//! Shared set-up: the configuration, the store ([`store`]), writers (engine + CQL sink +
//! flusher) whose time is injected, the sidecar in this process ([`sidecar`]) and the
//! binary ([`cli`]).

mod cli;
mod fault_proxy;
mod indexed;
mod sidecar;
mod store;

pub(crate) use self::cli::{BIN, Serve, cli_get, cli_stdout, run_cli};
pub(crate) use self::fault_proxy::{FaultProxy, Swallow};
pub(crate) use self::indexed::IndexedWriter;
pub(crate) use self::sidecar::{
    assert_one_connection_held, http_get, http_post, metrics_when, read_response, sidecar_config,
    start_sidecar, start_sidecar_without_store, unused_address, wait_ready,
};
pub(crate) use self::store::Store;
pub(crate) use self::store::{
    StoreOptions, cell, launch, start_cqlsim, start_cqlsim_as, start_store, table_sum,
};

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use countersink::config::Config;
use countersink::engine::Engine;
use countersink::flush::Flusher;
use countersink::sink::cql::CqlSink;
use countersink::telemetry::Accounting;
use countersink::telemetry::Ledger;

/// 2026-11-30T23:58:00Z: two minutes before a day (and month) boundary.
pub(crate) const T0: i64 = 1_796_083_080;

/// The annotated example configuration (the generic family and seed 000's `views`
/// family, every other setting at its default), with its state in `state`, short store
/// timeouts and a shorter shutdown deadline.
pub(crate) fn config(state: &Path) -> Config {
    let mut config = Config::from_toml(include_str!("../../../examples/countersink.toml"))
        .expect("the example configuration parses");
    config.state.dir = state.to_owned();
    config.store.request_timeout = Duration::from_secs(2);
    config.flush.shutdown_deadline = Duration::from_secs(5);
    config
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
        let flusher = Flusher::open(engine.clone(), Arc::new(sink), config).expect("state dir");
        let ledger = flusher.ledger().clone();
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

/// Every record in the spill segments of a state directory, as JSON, in replay order.
pub(crate) fn spilled_records(state: &Path) -> Vec<serde_json::Value> {
    let mut names: Vec<String> = std::fs::read_dir(state)
        .expect("state dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("spill.") && n.ends_with(".jsonl") && n != "spill.corrupt.jsonl")
        .collect();
    names.sort();
    names
        .iter()
        .flat_map(|n| {
            std::fs::read_to_string(state.join(n))
                .expect("segment")
                .lines()
                .filter(|l| !l.starts_with("{\"spill_segment\""))
                .map(|l| serde_json::from_str(l).expect("record"))
                .collect::<Vec<serde_json::Value>>()
        })
        .collect()
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
