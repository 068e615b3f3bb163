//! The store the integration tests write to, started in one place.
//!
//! Every test that needs a store gets it from [`launch`] (through [`start_store`] or
//! [`start_cqlsim`] when it wants its configuration pointed at it and its schema created),
//! so the choice of store is made here and nowhere else. One setting chooses it:
//!
//! - `COUNTERSINK_TEST_STORE=cqlsim` (the default): a cqlsim server in this process, one
//!   per test;
//! - `COUNTERSINK_TEST_STORE=cassandra:HOST:PORT`: a running Cassandra node (start one with
//!   `tests/cassandra/cluster.sh up`), shared by every test of the run.
//!
//! Tests run in parallel on one shared node, so each store hands its test keyspaces of its
//! own: `metrics` becomes `it_<8 hex>_metrics`, in the configuration ([`Store::localize`]),
//! in the TOML files given to the binary ([`Store::config_file`]) and in the tables a test
//! reads ([`Store::table`]). cqlsim gets the same renamed keyspaces, so that a test that
//! forgets to map a name fails without Cassandra too. They are dropped at
//! [`Store::shutdown`] on a shared node.
//!
//! A test that needs a power only cqlsim has (fault injection, request counts, a node that
//! goes down or starts late) asks for it with [`StoreOptions::cqlsim_only`], giving the
//! reason: it then runs against cqlsim whatever the setting says, keeps the configured
//! keyspace names, and reaches cqlsim through [`Store::sim`]. With
//! `COUNTERSINK_TEST_STORE_TALLY=FILE`, every launch appends `store<TAB>test<TAB>reason` to
//! FILE, so that a run can say how many tests ran against which store
//! (`tests/cassandra/integration.sh` does).
//!
//! Reads go through a plain `scylla` driver session for both stores: what a test asserts
//! is what a client reads back. A cqlsim-only test may also read its server in process
//! ([`cell`], [`table_sum`]), which leaves its statistics and request log untouched.

use std::collections::BTreeSet;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::OnceLock;

use countersink::config::Config;
use countersink::ddl;
use futures_util::TryStreamExt;
use parking_lot::Mutex;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::value::{CqlValue, Row};

/// The environment variable that chooses the store.
pub(crate) const STORE_ENV: &str = "COUNTERSINK_TEST_STORE";
/// The environment variable naming the file each launch is recorded in.
pub(crate) const TALLY_ENV: &str = "COUNTERSINK_TEST_STORE_TALLY";

/// The store chosen by [`STORE_ENV`].
#[derive(Clone, Debug, PartialEq, Eq)]
enum Choice {
    Cqlsim,
    Cassandra(String),
}

impl Choice {
    fn parse(text: &str) -> Result<Choice, String> {
        match text {
            "" | "cqlsim" => Ok(Choice::Cqlsim),
            _ => match text.strip_prefix("cassandra:") {
                Some(contact)
                    if contact
                        .rsplit_once(':')
                        .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok()) =>
                {
                    Ok(Choice::Cassandra(contact.to_owned()))
                }
                _ => Err(format!(
                    "{STORE_ENV}={text:?}: expected `cqlsim` or `cassandra:HOST:PORT`"
                )),
            },
        }
    }

    fn from_env() -> &'static Choice {
        static CHOICE: OnceLock<Choice> = OnceLock::new();
        CHOICE.get_or_init(|| {
            Choice::parse(&std::env::var(STORE_ENV).unwrap_or_default())
                .unwrap_or_else(|e| panic!("{e}"))
        })
    }
}

/// How a test wants its store.
pub(crate) struct StoreOptions<'a> {
    /// Point this configuration at the store, give it this test's keyspaces and create its
    /// keyspaces and tables.
    pub(crate) schema_of: Option<&'a mut Config>,
    /// The test needs a power only cqlsim has: why (see [`StoreOptions::cqlsim_only`]).
    pub(crate) cqlsim_only: Option<&'static str>,
    /// Where cqlsim listens (port 0: any free port). Only with `cqlsim_only`.
    pub(crate) listen: SocketAddr,
    /// The server cqlsim poses as. Other than Apache Cassandra only with `cqlsim_only`.
    pub(crate) persona: cqlsim::Persona,
    /// ScyllaDB persona: accept counter tables in keyspaces with tablets. Only with
    /// `cqlsim_only`.
    pub(crate) counters_with_tablets: bool,
    /// ScyllaDB persona: `tablets_mode_for_new_keyspaces`. Other than the default only
    /// with `cqlsim_only`.
    pub(crate) tablets_mode: cqlsim::TabletsMode,
}

impl Default for StoreOptions<'_> {
    fn default() -> Self {
        StoreOptions {
            schema_of: None,
            cqlsim_only: None,
            listen: "127.0.0.1:0".parse().expect("address"),
            persona: cqlsim::Persona::Cassandra,
            counters_with_tablets: false,
            tablets_mode: cqlsim::TabletsMode::default(),
        }
    }
}

impl StoreOptions<'_> {
    /// The options of a test that needs cqlsim's powers, with the reason (counted in the
    /// tally): it runs against cqlsim whatever [`STORE_ENV`] says.
    pub(crate) fn cqlsim_only(reason: &'static str) -> Self {
        StoreOptions {
            cqlsim_only: Some(reason),
            ..StoreOptions::default()
        }
    }
}

enum Backend {
    Cqlsim(cqlsim::Server),
    Cassandra(String),
}

/// A store for one test: where it is, the test's keyspaces in it, a session to read it.
pub(crate) struct Store {
    backend: Backend,
    /// Prefix of this test's keyspaces; `None` keeps configured names (cqlsim only).
    prefix: Option<String>,
    /// Keyspaces handed out (renamed), dropped at shutdown on a shared node.
    keyspaces: Mutex<BTreeSet<String>>,
    cqlsim_only: bool,
    session: Session,
}

/// Starts (or, for Cassandra, connects to) the store `options` ask for.
pub(crate) async fn launch(options: StoreOptions<'_>) -> Store {
    assert!(
        options.cqlsim_only.is_some() || options.listen.port() == 0,
        "a listen address needs StoreOptions::cqlsim_only"
    );
    assert!(
        options.cqlsim_only.is_some()
            || (options.persona == cqlsim::Persona::Cassandra
                && !options.counters_with_tablets
                && options.tablets_mode == cqlsim::TabletsMode::default()),
        "a cqlsim persona needs StoreOptions::cqlsim_only"
    );
    let choice = match options.cqlsim_only {
        Some(_) => &Choice::Cqlsim,
        None => Choice::from_env(),
    };
    let backend = match choice {
        Choice::Cqlsim => Backend::Cqlsim(
            cqlsim::Server::start(cqlsim::Config {
                listen: options.listen,
                // Seeded so that injected faults repeat.
                seed: 7,
                persona: options.persona,
                counters_with_tablets: options.counters_with_tablets,
                tablets_mode: options.tablets_mode,
                ..Default::default()
            })
            .await
            .expect("cqlsim starts"),
        ),
        Choice::Cassandra(contact) => Backend::Cassandra(contact.clone()),
    };
    let contact = match &backend {
        Backend::Cqlsim(server) => server.local_addr().to_string(),
        Backend::Cassandra(contact) => contact.clone(),
    };
    let session = SessionBuilder::new()
        .known_node(&contact)
        .build()
        .await
        .unwrap_or_else(|e| panic!("a session on the test store {contact}: {e}"));
    let store = Store {
        prefix: options
            .cqlsim_only
            .is_none()
            .then(|| format!("it_{:08x}", fastrand::u32(..))),
        keyspaces: Mutex::new(BTreeSet::new()),
        cqlsim_only: options.cqlsim_only.is_some(),
        backend,
        session,
    };
    tally(store.kind(), options.cqlsim_only.unwrap_or(""));
    if let Some(config) = options.schema_of {
        store.localize(config);
        store.create_schema(config).await;
    }
    store
}

/// Starts a store of the chosen kind with the schema of `config`, after pointing `config`
/// at it and giving it this test's keyspaces.
pub(crate) async fn start_store(config: &mut Config) -> Store {
    launch(StoreOptions {
        schema_of: Some(config),
        ..StoreOptions::default()
    })
    .await
}

/// [`start_store`] for a test that needs cqlsim's powers, and says why.
pub(crate) async fn start_cqlsim(config: &mut Config, reason: &'static str) -> Store {
    launch(StoreOptions {
        schema_of: Some(config),
        ..StoreOptions::cqlsim_only(reason)
    })
    .await
}

/// [`start_cqlsim`] posing as `persona`.
pub(crate) async fn start_cqlsim_as(
    config: &mut Config,
    reason: &'static str,
    persona: cqlsim::Persona,
) -> Store {
    launch(StoreOptions {
        schema_of: Some(config),
        persona,
        ..StoreOptions::cqlsim_only(reason)
    })
    .await
}

/// Appends this launch to the tally file, if one is set. The test's name is its thread's
/// (the test harness names each test's thread after it).
fn tally(store: &str, reason: &str) {
    let Some(path) = std::env::var_os(TALLY_ENV) else {
        return;
    };
    let test = std::thread::current().name().unwrap_or("?").to_owned();
    // One write of one short line, in append mode: lines from parallel tests never mix.
    let line = format!("{store}\t{test}\t{reason}\n");
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(line.as_bytes()))
        .unwrap_or_else(|e| panic!("{TALLY_ENV}: {e}"));
}

impl Store {
    /// `cqlsim` or `cassandra`.
    pub(crate) fn kind(&self) -> &'static str {
        match self.backend {
            Backend::Cqlsim(_) => "cqlsim",
            Backend::Cassandra(_) => "cassandra",
        }
    }

    /// The contact point, `host:port`.
    pub(crate) fn contact_point(&self) -> String {
        match &self.backend {
            Backend::Cqlsim(server) => server.local_addr().to_string(),
            Backend::Cassandra(contact) => contact.clone(),
        }
    }

    /// The contact point as an address (for a proxy in front of the store).
    #[cfg(feature = "tls")]
    pub(crate) fn addr(&self) -> SocketAddr {
        use std::net::ToSocketAddrs;
        self.contact_point()
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .expect("the contact point resolves")
    }

    /// cqlsim, for its powers: faults, request counts, node down and up.
    ///
    /// # Panics
    /// Unless the test asked for them with [`StoreOptions::cqlsim_only`], even when the
    /// store happens to be cqlsim, so that such a test is caught in a run without Cassandra.
    pub(crate) fn sim(&self) -> &cqlsim::Server {
        match &self.backend {
            Backend::Cqlsim(server) if self.cqlsim_only => server,
            _ => panic!("this test did not ask for cqlsim: use StoreOptions::cqlsim_only"),
        }
    }

    /// cqlsim itself, for a test that keeps it (and reads it in process with [`cell`] and
    /// [`table_sum`]). Panics as [`Store::sim`] does.
    pub(crate) fn into_sim(self) -> cqlsim::Server {
        match self.backend {
            Backend::Cqlsim(server) if self.cqlsim_only => server,
            _ => panic!("this test did not ask for cqlsim: use StoreOptions::cqlsim_only"),
        }
    }

    /// This test's name for keyspace `name`.
    pub(crate) fn keyspace(&self, name: &str) -> String {
        let Some(prefix) = &self.prefix else {
            return name.to_owned();
        };
        let renamed = format!("{prefix}_{name}");
        self.keyspaces.lock().insert(renamed.clone());
        renamed
    }

    /// This test's name for `keyspace.table` (a table without keyspace stays as it is: it
    /// lives in the configured keyspace, renamed on its own).
    pub(crate) fn table(&self, name: &str) -> String {
        match name.split_once('.') {
            Some((keyspace, table)) => format!("{}.{table}", self.keyspace(keyspace)),
            None => name.to_owned(),
        }
    }

    /// Points `config` at this store and gives it this test's keyspaces.
    pub(crate) fn localize(&self, config: &mut Config) {
        config.store.contact_points = vec![self.contact_point()];
        config.store.keyspace = self.keyspace(&config.store.keyspace);
        config.generic.minute_table = self.table(&config.generic.minute_table);
        config.generic.day_table = self.table(&config.generic.day_table);
        for family in &mut config.families {
            for table in [
                &mut family.minute_table,
                &mut family.hour_table,
                &mut family.day_table,
                &mut family.total_table,
            ] {
                if !table.is_empty() {
                    *table = self.table(table);
                }
            }
        }
    }

    /// A configuration file for the binary, `toml` localized as [`Store::localize`] does:
    /// this store as contact point, this test's keyspaces.
    pub(crate) fn config_file(&self, toml: &str) -> String {
        let mut doc: toml::Table = toml.parse().expect("the test's TOML parses");
        let store = doc
            .entry("store")
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .expect("[store] is a table");
        let keyspace = store
            .get("keyspace")
            .and_then(toml::Value::as_str)
            .map_or_else(|| Config::default().store.keyspace, str::to_owned);
        store.insert("keyspace".into(), self.keyspace(&keyspace).into());
        store.insert(
            "contact_points".into(),
            toml::Value::Array(vec![self.contact_point().into()]),
        );
        let tables = |section: &mut toml::Table| {
            for key in ["minute_table", "hour_table", "day_table", "total_table"] {
                if let Some(name) = section.get(key).and_then(toml::Value::as_str) {
                    let renamed = self.table(name);
                    section.insert(key.into(), renamed.into());
                }
            }
        };
        if let Some(generic) = doc.get_mut("generic").and_then(toml::Value::as_table_mut) {
            tables(generic);
        }
        if let Some(families) = doc.get_mut("family").and_then(toml::Value::as_array_mut) {
            for family in families.iter_mut().filter_map(toml::Value::as_table_mut) {
                tables(family);
            }
        }
        toml::to_string(&doc).expect("TOML")
    }

    /// Creates the keyspaces and tables of `config` (all `IF NOT EXISTS`), as
    /// `countersink schema --apply` would; the driver waits for schema agreement.
    pub(crate) async fn create_schema(&self, config: &Config) {
        for statement in ddl::statements(config, ddl::DEV_REPLICATION).expect("schema") {
            self.execute(&statement).await;
        }
    }

    /// Runs one statement; panics with the statement and the error if it fails.
    pub(crate) async fn execute(&self, cql: &str) {
        self.session
            .query_unpaged(cql, ())
            .await
            .unwrap_or_else(|e| panic!("{cql}: {e}"));
    }

    /// Every row of a SELECT (all pages).
    pub(crate) async fn select(&self, cql: &str) -> Rows {
        let pager = self
            .session
            .query_iter(cql, ())
            .await
            .unwrap_or_else(|e| panic!("{cql}: {e}"));
        let columns = pager
            .column_specs()
            .iter()
            .map(|c| c.name().to_owned())
            .collect();
        let rows = pager
            .rows_stream::<Row>()
            .unwrap_or_else(|e| panic!("{cql}: {e}"))
            .map_ok(|row| row.columns)
            .try_collect()
            .await
            .unwrap_or_else(|e| panic!("{cql}: {e}"));
        Rows { columns, rows }
    }

    /// Sum of a column over a whole table (`keyspace.table` as configured; renamed here).
    pub(crate) async fn table_sum(&self, table: &str, column: &str) -> i128 {
        let rows = self
            .select(&format!("SELECT {column} FROM {}", self.table(table)))
            .await;
        (0..rows.len())
            .filter_map(|i| rows.get_i64(i, column))
            .map(i128::from)
            .sum()
    }

    /// One counter cell, or `None` when the row does not exist (table as configured).
    pub(crate) async fn cell(&self, table: &str, column: &str, condition: &str) -> Option<i64> {
        let rows = self
            .select(&format!(
                "SELECT {column} FROM {} WHERE {condition}",
                self.table(table)
            ))
            .await;
        rows.get_i64(0, column)
    }

    /// Drops this test's keyspaces on a shared node (a test that failed leaves its own
    /// behind, to be read); stops cqlsim.
    pub(crate) async fn shutdown(self) {
        match self.backend {
            Backend::Cqlsim(server) => server.shutdown().await.expect("cqlsim stops"),
            Backend::Cassandra(_) => {
                let keyspaces = std::mem::take(&mut *self.keyspaces.lock());
                for keyspace in keyspaces {
                    let drop = format!("DROP KEYSPACE IF EXISTS {keyspace}");
                    self.session
                        .query_unpaged(drop.as_str(), ())
                        .await
                        .unwrap_or_else(|e| panic!("{drop}: {e}"));
                }
            }
        }
    }
}

/// Sum of a column over a whole table of a cqlsim-only test's server, read in process (no
/// request reaches the server, so none shows in its statistics or request log).
pub(crate) fn table_sum(server: &cqlsim::Server, table: &str, column: &str) -> i128 {
    let rows = server
        .execute(None, &format!("SELECT {column} FROM {table}"))
        .expect("select");
    (0..rows.len())
        .filter_map(|i| rows.get_i64(i, column))
        .map(i128::from)
        .sum()
}

/// One counter cell of a cqlsim-only test's server, read in process; `None` when the row
/// does not exist.
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

/// Rows read back through the driver.
pub(crate) struct Rows {
    columns: Vec<String>,
    rows: Vec<Vec<Option<CqlValue>>>,
}

impl Rows {
    /// Number of rows.
    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    /// The value of `column` in row `row`, if both exist and it is not null.
    pub(crate) fn get(&self, row: usize, column: &str) -> Option<&CqlValue> {
        let i = self.columns.iter().position(|c| c == column)?;
        self.rows.get(row)?.get(i)?.as_ref()
    }

    /// A counter or integer cell.
    pub(crate) fn get_i64(&self, row: usize, column: &str) -> Option<i64> {
        match self.get(row, column)? {
            CqlValue::Counter(c) => Some(c.0),
            CqlValue::BigInt(v) => Some(*v),
            CqlValue::Int(v) => Some(i64::from(*v)),
            CqlValue::SmallInt(v) => Some(i64::from(*v)),
            CqlValue::TinyInt(v) => Some(i64::from(*v)),
            _ => None,
        }
    }

    /// A text cell.
    pub(crate) fn text(&self, row: usize, column: &str) -> Option<&str> {
        match self.get(row, column)? {
            CqlValue::Text(s) | CqlValue::Ascii(s) => Some(s),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Choice;

    #[test]
    fn the_store_setting_parses_or_says_what_it_wants() {
        assert_eq!(Choice::parse(""), Ok(Choice::Cqlsim));
        assert_eq!(Choice::parse("cqlsim"), Ok(Choice::Cqlsim));
        assert_eq!(
            Choice::parse("cassandra:127.0.0.1:9042"),
            Ok(Choice::Cassandra("127.0.0.1:9042".into()))
        );
        for bad in [
            "cassandra",
            "cassandra:127.0.0.1",
            "scylla:h:1",
            "cassandra::9042",
        ] {
            assert!(
                Choice::parse(bad)
                    .unwrap_err()
                    .contains("cassandra:HOST:PORT")
            );
        }
    }
}
