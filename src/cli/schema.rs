//! `countersink schema`.

use std::path::PathBuf;

use clap::Args;
use scylla::client::session_builder::SessionBuilder;

use crate::config::Config;
use crate::ddl;

use super::Failure;

/// The flags of `schema`.
#[derive(Debug, Args)]
pub(super) struct SchemaArgs {
    /// Config file (families add their tables).
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
    let statements = ddl::statements(&config, &args.replication)?;
    if !args.apply {
        print!("{}", ddl::script(&config, &args.replication)?);
        return Ok(());
    }
    let session = SessionBuilder::new()
        .known_nodes(&config.store.contact_points)
        .connection_timeout(config.store.connect_timeout)
        .build()
        .await
        .map_err(|e| {
            Failure::other(format!(
                "cannot connect to {}: {e}",
                config.store.contact_points.join(",")
            ))
        })?;
    for statement in &statements {
        session
            .query_unpaged(statement.as_str(), ())
            .await
            .map_err(|e| Failure::other(format!("{statement}: {e}")))?;
    }
    println!(
        "applied {} statements (each IF NOT EXISTS)",
        statements.len()
    );
    Ok(())
}
