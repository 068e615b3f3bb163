//! `countersink schema`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::config::Config;
use crate::ddl::{self, Keyspaces};
use crate::sink::cql::session::{self, SessionError};
use crate::sink::cql::store::{self, COUNTERS_WITH_TABLETS, StoreKind};

use super::Failure;

/// Which store the keyspaces are created for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(super) enum SchemaStore {
    /// `--apply`: identify the store at connect; printing: the Apache Cassandra form.
    Auto,
    /// Apache Cassandra: keyspaces with their replication only.
    Cassandra,
    /// ScyllaDB 6.0 and later: keyspaces with `tablets = {'enabled': false}` (with
    /// `--apply`, unless the release supports counters with tablets).
    Scylladb,
}

/// The flags of `schema`.
#[derive(Debug, Args)]
pub(super) struct SchemaArgs {
    /// Config file (families add their tables; `[store]` gives the credentials and TLS
    /// settings `--apply` connects with, as `serve` does).
    #[arg(long, env = "COUNTERSINK_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Create the schema (every statement is `IF NOT EXISTS`) instead of printing it.
    #[arg(long)]
    apply: bool,
    /// A contact point for --apply; repeat for several [default: from the config].
    #[arg(
        long = "contact-point",
        env = "COUNTERSINK_CONTACT_POINTS",
        value_name = "HOST:PORT",
        value_delimiter = ','
    )]
    contact_points: Vec<String>,
    /// Replication of keyspaces that do not exist yet. For production, give your data
    /// centres, e.g. "{'class': 'NetworkTopologyStrategy', 'dc1': 3}".
    #[arg(long, value_name = "CQL_MAP", default_value = ddl::DEV_REPLICATION)]
    replication: String,
    /// The store the keyspaces are for. On ScyllaDB they are created with tablets
    /// disabled (counter tables are refused in keyspaces with tablets), unless `--apply`
    /// finds a release that supports counters with tablets (`COUNTERS_WITH_TABLETS` in
    /// `system.local.supported_features`).
    #[arg(long, value_enum, default_value = "auto")]
    store: SchemaStore,
}

/// Prints or applies the schema.
pub(super) async fn run(args: SchemaArgs) -> Result<(), Failure> {
    let mut config = match &args.config {
        Some(path) => Config::from_file(path).map_err(Failure::usage)?,
        None => Config::default(),
    };
    if !args.contact_points.is_empty() {
        config.store.contact_points = args.contact_points.clone();
    }
    if !args.apply {
        let keyspaces = match args.store {
            SchemaStore::Scylladb => Keyspaces::WithoutTablets,
            SchemaStore::Auto | SchemaStore::Cassandra => Keyspaces::Plain,
        };
        print!("{}", ddl::script(&config, &args.replication, keyspaces)?);
        return Ok(());
    }
    // The session `serve` would open: same credentials, same TLS.
    let session = session::connect(&config.store).await.map_err(|e| match e {
        SessionError::Credentials(_) | SessionError::Tls(_) => Failure::usage(e),
        SessionError::Connect { .. } | SessionError::Timeout { .. } => Failure::other(e),
    })?;
    let identity = store::detect(&session).await;
    let kind = match args.store {
        SchemaStore::Auto => {
            eprintln!("store: {identity}");
            identity.kind
        }
        SchemaStore::Cassandra => StoreKind::Cassandra,
        SchemaStore::Scylladb => StoreKind::ScyllaDb,
    };
    let keyspaces = keyspaces_for(kind, identity.counters_with_tablets());
    if kind == StoreKind::ScyllaDb && keyspaces == Keyspaces::Plain {
        eprintln!(
            "this ScyllaDB release supports counters with tablets ({COUNTERS_WITH_TABLETS}): new keyspaces take the cluster's tablets setting"
        );
    }
    let statements = ddl::statements_with(&config, &args.replication, keyspaces)?;
    let plain = ddl::statements(&config, &args.replication)?;
    for (statement, plain) in statements.iter().zip(&plain) {
        match session.query_unpaged(statement.as_str(), ()).await {
            Ok(_) => {}
            Err(e) if e.to_string().contains("tablets_mode_for_new_keyspaces") => {
                return Err(Failure::other(format!(
                    "{statement}: {e}\nThis ScyllaDB cluster enforces tablets for new keyspaces (tablets_mode_for_new_keyspaces: enforced), and its release does not list {COUNTERS_WITH_TABLETS} among its features (system.local.supported_features): it refuses counter tables in a keyspace with tablets. Either create the keyspace without tablets while the mode is `enabled` on every node (then enforce it again: existing keyspaces keep their setting), or upgrade to a ScyllaDB release that supports counters with tablets, then run this again."
                )));
            }
            Err(e) if e.to_string().contains("not yet supported with tablets") => {
                return Err(Failure::other(format!(
                    "{statement}: {e}\nThe keyspace uses tablets and this ScyllaDB cluster refuses counter tables there (during a rolling upgrade, {COUNTERS_WITH_TABLETS} is enabled only once every node supports it). Finish the upgrade, or drop the keyspace (it holds no counter table) and run this again on a release without that feature: its keyspaces are then created with tablets disabled."
                )));
            }
            // A ScyllaDB release from before tablets does not know the option, and has no
            // tablets to avoid.
            Err(e) if statement != plain && e.to_string().contains("tablets") => {
                eprintln!(
                    "this store does not know the tablets option ({e}); creating the keyspace without it"
                );
                session
                    .query_unpaged(plain.as_str(), ())
                    .await
                    .map_err(|e| Failure::other(format!("{plain}: {e}")))?;
            }
            Err(e) => return Err(Failure::other(format!("{statement}: {e}"))),
        }
    }
    let tablets = match (keyspaces, kind) {
        (Keyspaces::WithoutTablets, _) => ", keyspaces with tablets disabled",
        (Keyspaces::Plain, StoreKind::ScyllaDb) => ", keyspaces with the cluster's tablets setting",
        (Keyspaces::Plain, _) => "",
    };
    println!(
        "applied {} statements (each IF NOT EXISTS{tablets})",
        statements.len()
    );
    Ok(())
}

/// How new keyspaces are created on a store of `kind`: on ScyllaDB with tablets disabled,
/// unless its release takes counter tables in keyspaces with tablets
/// (`counters_with_tablets`); elsewhere plainly.
fn keyspaces_for(kind: StoreKind, counters_with_tablets: bool) -> Keyspaces {
    match kind {
        StoreKind::ScyllaDb if !counters_with_tablets => Keyspaces::WithoutTablets,
        StoreKind::ScyllaDb | StoreKind::Cassandra | StoreKind::Unidentified => Keyspaces::Plain,
    }
}
