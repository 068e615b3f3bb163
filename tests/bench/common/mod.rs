//! What the store-backed benchmarks share: an in-process cqlsim with a configuration's
//! schema, and the median they report.

use countersink::config::Config;
use countersink::ddl;

/// The middle value (the upper one of an even count).
pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// An in-process cqlsim on a free port holding `config`'s schema; `config` is pointed at it.
pub(crate) async fn store(config: &mut Config) -> cqlsim::Server {
    let server = cqlsim::Server::start(cqlsim::Config {
        listen: "127.0.0.1:0".parse().expect("address"),
        ..Default::default()
    })
    .await
    .expect("cqlsim");
    for statement in ddl::statements(config, ddl::DEV_REPLICATION).expect("schema") {
        server.execute(None, &statement).expect("ddl");
    }
    config.store.contact_points = vec![server.local_addr().to_string()];
    server
}
