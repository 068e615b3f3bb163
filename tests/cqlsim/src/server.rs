//! The embedding API: [`Server`] for tests (start on `127.0.0.1:0`, shut down), [`run`] for
//! programs that own their listener and shutdown signal (mini-redis shape), and [`Handle`] for
//! runtime control (faults, node down/up, prepared cache), statistics and in-process CQL.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::sync::{broadcast, oneshot, watch};
use tokio::task::JoinSet;

use crate::cql::ast::Parsed;
use crate::error::{CqlError, Error};
use crate::exec::{self, Outcome, Paging, SchemaChange};
use crate::faults::{FaultRule, FaultSet};
use crate::requests::{LoggedRequest, RequestLog};
use crate::schema::name_uuid;
use crate::stats::{Stats, StatsSnapshot};
use crate::storage::Db;
use crate::system::SysView;
use crate::types::ColType;
use crate::value::Value;

/// Server settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to listen on ([`Server::start`] only; [`run`] takes a bound listener).
    /// Defaults to `127.0.0.1:9042`.
    pub listen: SocketAddr,
    /// Seed of the fault generator (probabilistic rules) and of the node's host id.
    /// Defaults to 0.
    pub seed: u64,
    /// Fault rules in force at start.
    pub faults: Vec<FaultRule>,
    /// Keep schema and data here: loaded at start, written on clean shutdown.
    pub data_dir: Option<PathBuf>,
    /// `system.local.cluster_name`. Defaults to `cqlsim`.
    pub cluster_name: String,
    /// The server posed as: Apache Cassandra 3.11 (default) or ScyllaDB (see the README).
    pub persona: crate::persona::Persona,
    /// ScyllaDB persona: accept counter tables in keyspaces with tablets, as the releases
    /// that support them do (refused by default, as ScyllaDB 6.0 to 2025.x refuse them).
    pub counters_with_tablets: bool,
    /// ScyllaDB persona: its `tablets_mode_for_new_keyspaces` (`enabled` by default).
    pub tablets_mode: crate::persona::TabletsMode,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 9042)),
            seed: 0,
            faults: Vec::new(),
            data_dir: None,
            cluster_name: "cqlsim".into(),
            persona: crate::persona::Persona::default(),
            counters_with_tablets: false,
            tablets_mode: crate::persona::TabletsMode::default(),
        }
    }
}

/// A prepared statement, global to the server like Cassandra's cache.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub(crate) keyspace: Option<String>,
    pub(crate) parsed: Parsed,
    /// Column positions resolved at the first execution (see [`crate::exec::write::PlanCache`]).
    pub(crate) plans: crate::exec::write::PlanCache,
}

/// State shared by the accept loop, the connections and the [`Handle`]s.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) db: Mutex<Db>,
    pub(crate) prepared: Mutex<HashMap<[u8; 16], Arc<Prepared>>>,
    pub(crate) stats: Stats,
    pub(crate) requests: RequestLog,
    pub(crate) faults: Mutex<FaultSet>,
    pub(crate) host_id: [u8; 16],
    pub(crate) cluster_name: String,
    /// `true` while the node is down.
    pub(crate) down: watch::Sender<bool>,
    pub(crate) events: broadcast::Sender<SchemaChange>,
    pub(crate) data_dir: Option<PathBuf>,
    pub(crate) persona: crate::persona::Persona,
}

impl Shared {
    pub(crate) fn sys_view(&self, rpc_address: IpAddr) -> SysView<'_> {
        SysView {
            rpc_address,
            host_id: self.host_id,
            cluster_name: &self.cluster_name,
            stats: &self.stats,
        }
    }
}

/// Rows returned by [`Handle::execute`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rows {
    /// Column names and types, in result order.
    pub columns: Vec<(String, ColType)>,
    /// The rows; `None` is null.
    pub rows: Vec<Vec<Option<Value>>>,
}

impl Rows {
    /// The value of `column` in row `row`, if both exist and it is not null.
    pub fn get(&self, row: usize, column: &str) -> Option<&Value> {
        let i = self.columns.iter().position(|(n, _)| n == column)?;
        self.rows.get(row)?.get(i)?.as_ref()
    }

    /// The counter (or bigint) in `column` of row `row`.
    pub fn get_i64(&self, row: usize, column: &str) -> Option<i64> {
        match self.get(row, column)? {
            Value::Counter(v) | Value::BigInt(v) => Some(*v),
            _ => None,
        }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// A cloneable control handle. All methods are cheap and take effect immediately for every
/// connection.
#[derive(Debug, Clone)]
pub struct Handle {
    pub(crate) shared: Arc<Shared>,
}

impl Handle {
    /// Builds the store (loading the data directory's snapshot, if any) without listening.
    pub fn new(config: &Config) -> Result<Handle, Error> {
        let mut db = Db::new();
        db.persona = config.persona;
        db.counters_with_tablets = config.counters_with_tablets;
        db.tablets_mode = config.tablets_mode;
        crate::system::install(&mut db);
        let (down, _) = watch::channel(false);
        let (events, _) = broadcast::channel(64);
        let h = Handle {
            shared: Arc::new(Shared {
                db: Mutex::new(db),
                prepared: Mutex::new(HashMap::new()),
                stats: Stats::default(),
                requests: RequestLog::default(),
                faults: Mutex::new(FaultSet::new(config.faults.clone(), config.seed)),
                host_id: name_uuid(&format!("host:{}", config.seed)),
                cluster_name: config.cluster_name.clone(),
                down,
                events,
                data_dir: config.data_dir.clone(),
                persona: config.persona,
            }),
        };
        if let Some(dir) = &config.data_dir {
            crate::persist::load(&h, dir)?;
        }
        Ok(h)
    }

    /// Replaces all fault rules (their counters restart; the seeded generator continues).
    pub fn set_faults(&self, rules: Vec<FaultRule>) {
        self.shared.faults.lock().replace(rules);
    }

    /// Appends a fault rule.
    pub fn add_fault(&self, rule: FaultRule) {
        self.shared.faults.lock().push(rule);
    }

    /// Removes all fault rules.
    pub fn clear_faults(&self) {
        self.set_faults(Vec::new());
    }

    /// The rules in force.
    pub fn faults(&self) -> Vec<FaultRule> {
        self.shared.faults.lock().rules()
    }

    /// Takes the node down: every connection is dropped at once, new ones are accepted and
    /// closed immediately, and prepared statements are forgotten (as by a restart).
    pub fn node_down(&self) {
        self.shared.down.send_replace(true);
        self.clear_prepared_cache();
    }

    /// Brings the node back up.
    pub fn node_up(&self) {
        self.shared.down.send_replace(false);
    }

    /// Whether the node is down.
    pub fn is_down(&self) -> bool {
        *self.shared.down.borrow()
    }

    /// Starts logging every write request on a user table: what it carried, the fault
    /// that fired, whether it applied (see [`Handle::request_log`]).
    pub fn enable_request_log(&self) {
        self.shared.requests.enable();
    }

    /// The write requests logged since [`Handle::enable_request_log`], in arrival order.
    pub fn request_log(&self) -> Vec<LoggedRequest> {
        self.shared.requests.snapshot()
    }

    /// Forgets all prepared statements: the next EXECUTE gets UNPREPARED and drivers
    /// re-prepare (ids are deterministic, so they match).
    pub fn clear_prepared_cache(&self) {
        self.shared.prepared.lock().clear();
    }

    /// A copy of the statistics.
    pub fn stats(&self) -> StatsSnapshot {
        self.shared.stats.snapshot()
    }

    /// Zeroes the statistics.
    pub fn reset_stats(&self) {
        self.shared.stats.reset();
    }

    /// Runs one CQL statement in-process, bypassing the wire, faults and statistics. Schema
    /// changes still notify REGISTERed clients.
    pub fn execute(&self, keyspace: Option<&str>, cql: &str) -> Result<Rows, CqlError> {
        let parsed = crate::cql::parse(cql)?;
        self.execute_parsed(keyspace, &parsed)
    }

    fn execute_parsed(&self, keyspace: Option<&str>, parsed: &Parsed) -> Result<Rows, CqlError> {
        let view = self.shared.sys_view(IpAddr::V4(Ipv4Addr::LOCALHOST));
        let (outcome, _) = {
            let mut db = self.shared.db.lock();
            exec::execute(
                &mut db,
                parsed,
                keyspace,
                &[],
                Paging::default(),
                &view,
                None,
                None,
            )?
        };
        Ok(match outcome {
            Outcome::Rows(r) => Rows {
                columns: r.cols.into_iter().map(|c| (c.name, c.ty)).collect(),
                rows: r.rows,
            },
            Outcome::SchemaChange(sc) => {
                let _ = self.shared.events.send(sc);
                Rows::default()
            }
            Outcome::Void | Outcome::SetKeyspace(_) => Rows::default(),
        })
    }

    /// Runs a `;`-separated script (e.g. a schema file with `--` comments) in-process. `USE`
    /// changes the keyspace for the statements after it. Returns the number of statements.
    pub fn execute_script(&self, keyspace: Option<&str>, script: &str) -> Result<usize, Error> {
        let what = "script".to_owned();
        let stmts = crate::cql::parse_script(script).map_err(|source| Error::Script {
            what: what.clone(),
            index: 0,
            source,
        })?;
        let mut ks = keyspace.map(str::to_owned);
        for (i, p) in stmts.iter().enumerate() {
            if let crate::cql::ast::Statement::Use(name) = &p.stmt {
                ks = Some(name.clone());
            }
            self.execute_parsed(ks.as_deref(), p)
                .map_err(|source| Error::Script {
                    what: what.clone(),
                    index: i + 1,
                    source,
                })?;
        }
        Ok(stmts.len())
    }

    /// Serves connections on `listener` until `shutdown` completes, then closes every
    /// connection and writes the snapshot if a data directory is set.
    pub async fn serve(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), Error> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut conns = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = listener.accept() => {
                    let (sock, _) = match accepted {
                        Ok(x) => x,
                        Err(e) => {
                            // Per-connection errors (e.g. the peer reset before accept) must
                            // not stop the server; back off briefly on resource exhaustion.
                            tracing::warn!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    self.shared.stats.connection();
                    if self.is_down() {
                        drop(sock);
                        continue;
                    }
                    let _ = sock.set_nodelay(true);
                    conns.spawn(crate::conn::serve(sock, self.shared.clone(), stop_rx.clone()));
                }
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
        drop(listener);
        let _ = stop_tx.send(true);
        let drain = async { while conns.join_next().await.is_some() {} };
        if tokio::time::timeout(Duration::from_secs(2), drain)
            .await
            .is_err()
        {
            conns.abort_all();
        }
        if let Some(dir) = &self.shared.data_dir {
            crate::persist::save(self, dir)?;
        }
        Ok(())
    }
}

/// Serves on an already bound listener until `shutdown` completes (for embedding, e.g.
/// `countersink dev`).
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    let handle = Handle::new(&config)?;
    handle.serve(listener, shutdown).await
}

/// A running server owned by a test or program. Dropping it asks the server task to stop
/// without waiting for it; call [`Server::shutdown`] to wait for a clean stop (connections
/// closed, snapshot written).
#[derive(Debug)]
pub struct Server {
    handle: Handle,
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), Error>>>,
}

impl Server {
    /// Binds `config.listen` (use port 0 for a free port) and starts serving.
    pub async fn start(config: Config) -> Result<Server, Error> {
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|source| Error::Bind {
                addr: config.listen,
                source,
            })?;
        let addr = listener.local_addr()?;
        let handle = Handle::new(&config)?;
        let (stop, stopped) = oneshot::channel();
        let h = handle.clone();
        let task = tokio::spawn(async move {
            h.serve(listener, async {
                let _ = stopped.await;
            })
            .await
        });
        Ok(Server {
            handle,
            addr,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// The address clients connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The control handle.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Stops serving, closes connections and writes the snapshot (with a data directory).
    pub async fn shutdown(mut self) -> Result<(), Error> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task
                .await
                .map_err(|e| Error::Io(std::io::Error::other(e)))?,
            None => Ok(()),
        }
    }
}

/// `server.stats()`, `server.set_faults(..)` etc. act on the server's [`Handle`].
impl std::ops::Deref for Server {
    type Target = Handle;

    fn deref(&self) -> &Handle {
        &self.handle
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
