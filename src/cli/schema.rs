//! `countersink schema`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::config::Config;
use crate::ddl::{self, Keyspaces};
use crate::sink::cql::session::{self, SessionError};
use crate::sink::cql::store::{self, StoreKind};

use super::Failure;

/// Which store the keyspaces are created for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(super) enum SchemaStore {
    /// `--apply`: identify the store at connect; printing: the Apache Cassandra form.
    Auto,
    /// Apache Cassandra: keyspaces with their replication only.
    Cassandra,
    /// ScyllaDB 6.0 and later: keyspaces with `tablets = {'enabled': false}`.
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
    /// disabled: counter tables are refused in keyspaces with tablets.
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
    let keyspaces_for = |kind: StoreKind| match kind {
        StoreKind::ScyllaDb => Keyspaces::WithoutTablets,
        StoreKind::Cassandra | StoreKind::Unidentified => Keyspaces::Plain,
    };
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
        SessionError::Connect { .. } => Failure::other(e),
    })?;
    let kind = match args.store {
        SchemaStore::Auto => {
            let identity = store::detect(&session).await;
            eprintln!("store: {identity}");
            identity.kind
        }
        SchemaStore::Cassandra => StoreKind::Cassandra,
        SchemaStore::Scylladb => StoreKind::ScyllaDb,
    };
    let keyspaces = keyspaces_for(kind);
    let statements = ddl::statements_with(&config, &args.replication, keyspaces)?;
    let plain = ddl::statements(&config, &args.replication)?;
    for (statement, plain) in statements.iter().zip(&plain) {
        match session.query_unpaged(statement.as_str(), ()).await {
            Ok(_) => {}
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
    let tablets = match keyspaces {
        Keyspaces::WithoutTablets => ", keyspaces with tablets disabled",
        Keyspaces::Plain => "",
    };
    println!(
        "applied {} statements (each IF NOT EXISTS{tablets})",
        statements.len()
    );
    Ok(())
}
