//! The store the integration tests write to, started in one place.
//!
//! Every test that needs a store gets it from [`launch`] (through [`start_store`] when
//! it wants the schema of its configuration and the configuration pointed at it), so the
//! choice of store is made here and nowhere else.

use std::net::SocketAddr;

use countersink::config::Config;
use countersink::ddl;

/// How a test wants its store.
pub(crate) struct StoreOptions<'a> {
    /// Where it listens (port 0: any free port).
    pub(crate) listen: SocketAddr,
    /// Create the keyspaces and tables of this configuration.
    pub(crate) schema_of: Option<&'a Config>,
    /// The server cqlsim poses as.
    pub(crate) persona: cqlsim::Persona,
    /// ScyllaDB persona: accept counter tables in keyspaces with tablets.
    pub(crate) counters_with_tablets: bool,
}

impl Default for StoreOptions<'_> {
    fn default() -> Self {
        StoreOptions {
            listen: "127.0.0.1:0".parse().expect("address"),
            schema_of: None,
            persona: cqlsim::Persona::Cassandra,
            counters_with_tablets: false,
        }
    }
}

/// Starts a store: cqlsim in this process, seeded so that injected faults repeat.
pub(crate) async fn launch(options: StoreOptions<'_>) -> cqlsim::Server {
    let server = cqlsim::Server::start(cqlsim::Config {
        listen: options.listen,
        seed: 7,
        persona: options.persona,
        counters_with_tablets: options.counters_with_tablets,
        ..Default::default()
    })
    .await
    .expect("cqlsim starts");
    if let Some(config) = options.schema_of {
        create_schema(&server, config);
    }
    server
}

/// Creates the keyspaces and tables of `config` (all `IF NOT EXISTS`).
fn create_schema(server: &cqlsim::Server, config: &Config) {
    for statement in ddl::statements(config, ddl::DEV_REPLICATION).expect("schema") {
        server.execute(None, &statement).expect("schema statement");
    }
}

/// Starts a store with the schema of `config`, and points `config` at it.
pub(crate) async fn start_store(config: &mut Config) -> cqlsim::Server {
    start_store_as(config, cqlsim::Persona::Cassandra).await
}

/// The same, posing as `persona`.
pub(crate) async fn start_store_as(
    config: &mut Config,
    persona: cqlsim::Persona,
) -> cqlsim::Server {
    let server = launch(StoreOptions {
        schema_of: Some(config),
        persona,
        ..StoreOptions::default()
    })
    .await;
    config.store.contact_points = vec![server.local_addr().to_string()];
    server
}

/// Sum of a column over a whole table.
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
