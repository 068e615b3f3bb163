//! Shared helpers: start a server on a free port, build a session the way countersink does
//! (non-idempotent statements, FallthroughRetryPolicy, no speculative execution), and capture
//! the driver's log output.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::policies::retry::FallthroughRetryPolicy;
use tracing_subscriber::fmt::MakeWriter;

pub(crate) const KEYSPACE: &str = "CREATE KEYSPACE IF NOT EXISTS ks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}";

/// Starts a server on 127.0.0.1:0 with a keyspace `ks` and a counter table `ks.counts`.
pub(crate) async fn start() -> cqlsim::Server {
    let server = cqlsim::Server::start(cqlsim::Config {
        listen: "127.0.0.1:0".parse().expect("address"),
        seed: 42,
        ..Default::default()
    })
    .await
    .expect("server starts");
    server
        .execute_script(
            None,
            &format!(
                "{KEYSPACE};\n-- the table of research §4.6\nCREATE TABLE ks.counts (pk text PRIMARY KEY, c counter, d counter);"
            ),
        )
        .expect("schema");
    server
}

pub(crate) async fn session(addr: SocketAddr) -> Session {
    session_with_timeout(addr, Duration::from_secs(5)).await
}

pub(crate) async fn session_with_timeout(addr: SocketAddr, timeout: Duration) -> Session {
    let profile = ExecutionProfile::builder()
        .retry_policy(Arc::new(FallthroughRetryPolicy::new()))
        .speculative_execution_policy(None)
        .request_timeout(Some(timeout))
        .build();
    SessionBuilder::new()
        .known_node_addr(addr)
        .default_execution_profile_handle(profile.into_handle())
        .build()
        .await
        .expect("session builds")
}

/// Log lines written by `tracing` while the guard lives (current-thread runtimes only: the
/// subscriber is thread-local, and every task of a current-thread test runs on this thread).
#[derive(Clone, Default)]
pub(crate) struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("log lock")).into_owned()
    }
}

pub(crate) struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log lock").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Logs {
    type Writer = LogWriter;

    fn make_writer(&'a self) -> LogWriter {
        LogWriter(self.0.clone())
    }
}

/// Captures WARN and ERROR events.
pub(crate) fn capture_warnings() -> (Logs, tracing::subscriber::DefaultGuard) {
    let logs = Logs::default();
    let sub = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .finish();
    (logs, tracing::subscriber::set_default(sub))
}

/// The counter `col` of `ks.counts` row `pk`, read in-process.
pub(crate) fn counter(server: &cqlsim::Server, pk: &str, col: &str) -> Option<i64> {
    let rows = server
        .execute(
            Some("ks"),
            &format!("SELECT {col} FROM counts WHERE pk = '{pk}'"),
        )
        .expect("select");
    rows.get_i64(0, col)
}
