//! The store flags of the operator commands: a config file, contact points and keyspace
//! on top of it.

use std::path::PathBuf;

use clap::Args;

use crate::config::Config;

use super::Failure;

/// `--config`, `--contact-point`, `--keyspace`.
#[derive(Debug, Args)]
pub(super) struct StoreArgs {
    /// Config file (families, leaderboards, the store).
    #[arg(long, env = "COUNTERSINK_CONFIG", value_name = "FILE")]
    pub(super) config: Option<PathBuf>,
    /// A contact point; repeat for several [default: from the config, else 127.0.0.1:9042].
    #[arg(
        long = "contact-point",
        env = "COUNTERSINK_CONTACT_POINTS",
        value_name = "HOST:PORT",
        value_delimiter = ','
    )]
    pub(super) contact_points: Vec<String>,
    /// Keyspace of the generic tables and of countersink's own tables.
    #[arg(long, env = "COUNTERSINK_KEYSPACE", value_name = "KS")]
    pub(super) keyspace: Option<String>,
}

impl StoreArgs {
    /// The configuration with the flags applied, validated.
    pub(super) fn load(&self) -> Result<Config, Failure> {
        let mut config = match &self.config {
            Some(path) => Config::from_file(path).map_err(Failure::usage)?,
            None => Config::default(),
        };
        if !self.contact_points.is_empty() {
            config.store.contact_points = self.contact_points.clone();
        }
        if let Some(keyspace) = &self.keyspace {
            config.store.keyspace = keyspace.clone();
        }
        config.validate().map_err(Failure::usage)?;
        Ok(config)
    }
}
