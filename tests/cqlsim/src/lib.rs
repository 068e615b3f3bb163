//! cqlsim: a single-node, in-memory CQL native protocol v4 server with Cassandra's counter
//! rules, deterministic fault injection and statistics. It is a **test and development store,
//! not a production database**: no durability beyond an optional snapshot on clean shutdown,
//! no replication, no compaction, one global lock.
//!
//! Real clients (the Rust `scylla` driver, Python `cassandra-driver`, `cqlsh`) connect to it
//! unchanged: it poses as a plain Apache Cassandra 3.11.17 node.
//!
//! ```no_run
//! # async fn demo() -> Result<(), cqlsim::Error> {
//! let server = cqlsim::Server::start(cqlsim::Config {
//!     listen: "127.0.0.1:0".parse().expect("address"),
//!     ..Default::default()
//! })
//! .await?;
//! server.execute_script(None, "CREATE KEYSPACE ks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1};
//!     CREATE TABLE ks.counts (pk text PRIMARY KEY, c counter);")?;
//! server.add_fault("write-timeout,applied=yes,table=ks.counts,every=3".parse()?);
//! // ... connect a driver to server.local_addr() ...
//! let rows = server.execute(Some("ks"), "SELECT c FROM counts WHERE pk = 'a'").expect("select");
//! println!("{:?} {:?}", rows.get_i64(0, "c"), server.stats().table("ks", "counts"));
//! server.shutdown().await
//! # }
//! ```
//!
//! # Layout
//! - `proto/`: frame codec, primitive notations, requests, responses.
//! - `cql/`: lexer, statement tree, parser (DML in `parser.rs`, DDL in `parser_ddl.rs`).
//! - `types.rs`, `value.rs`: column types and typed values (wire codec, ordering, literals).
//! - `schema.rs`: keyspaces, tables, DDL validation. `storage.rs`: rows in ordered maps.
//! - `exec/`: the executor (`write.rs` modifications and counter rules, `select.rs`,
//!   `ddl.rs`, `prepare.rs` marker metadata, `bind.rs` values).
//! - `system.rs`: `system.*`, `system_schema.*` and `cqlsim.*` virtual tables.
//! - `faults.rs`: fault rules and their `--fault` grammar. `stats.rs`: statistics.
//!   `requests.rs`: the request log (what each write carried, whether it applied).
//! - `server.rs`: [`Server`], [`Handle`], [`run`]. `conn.rs`: one connection.
//!   `persist.rs`: `--data-dir` snapshots.

mod conn;
mod cql;
mod error;
mod exec;
mod faults;
mod persist;
mod persona;
mod proto;
mod requests;
mod schema;
mod server;
mod stats;
mod storage;
mod system;
mod types;
mod value;

pub use error::{Consistency, CqlError, Error, WriteType};
pub use faults::{FaultKind, FaultRule, Op, Target, Trigger};
pub use persona::{Persona, TabletsMode};
pub use requests::{LoggedRequest, LoggedStatement};
pub use server::{Config, Handle, Rows, Server, run};
pub use stats::{DeleteRecord, DeleteScope, FaultStats, StatsSnapshot, TableStats};
pub use types::ColType;
pub use value::Value;

/// Printed by the binary at start and repeated in the README.
pub const BANNER: &str = "cqlsim: in-memory CQL v4 server posing as Cassandra 3.11.17 -- a test/dev store, not for production";
