//! Building the driver session: contact points, credentials, DC-aware routing, and the
//! execution profile that makes counter writes safe (no retries, no speculation).

use std::sync::Arc;

use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::policies::load_balancing::DefaultPolicy;
use scylla::policies::retry::FallthroughRetryPolicy;
use scylla::statement::Consistency;

use crate::config::{ConsistencyLevel, StoreConfig};

/// The environment variable that may hold the store password.
pub const PASSWORD_ENV: &str = "COUNTERSINK_PASSWORD";

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// A password is set but no user name (or the password file cannot be read).
    #[error("store credentials: {0}")]
    Credentials(String),
    /// The TLS settings cannot be used (a file cannot be read, a key does not match).
    #[error("{0}")]
    Tls(String),
    /// The driver could not connect.
    #[error("cannot connect to {contact_points}: {error}")]
    Connect {
        /// The contact points tried.
        contact_points: String,
        /// The driver's error.
        error: Box<scylla::errors::NewSessionError>,
    },
    /// The driver neither connected nor failed in time: a contact point accepted TCP but
    /// never finished the TLS handshake or the CQL start-up.
    #[error(
        "cannot connect to {contact_points}: no session after {after:?} (a contact point accepts connections but does not answer; is it a CQL port, with the TLS setting it expects?)"
    )]
    Timeout {
        /// The contact points tried.
        contact_points: String,
        /// The bound that passed: [`SESSION_SETUP_TIMEOUTS`] times `store.connect_timeout`.
        after: std::time::Duration,
    },
}

/// How many `store.connect_timeout`s one session setup may take in all. The driver bounds
/// each TCP connect by `connect_timeout` but not the TLS handshake after it nor the CQL
/// start-up, so a peer that accepts a connection and then stays silent (a TLS port spoken
/// to without TLS, a stalled proxy) would hold `serve`'s connect loop, and every CLI
/// command, forever. Six leaves room for the start-up queries and the schema metadata read
/// of a loaded cluster (30 s with the default 5 s).
pub const SESSION_SETUP_TIMEOUTS: u32 = 6;

/// The driver's consistency for a configured level.
pub fn consistency(level: ConsistencyLevel) -> Consistency {
    match level {
        ConsistencyLevel::One => Consistency::One,
        ConsistencyLevel::Two => Consistency::Two,
        ConsistencyLevel::Three => Consistency::Three,
        ConsistencyLevel::Quorum => Consistency::Quorum,
        ConsistencyLevel::All => Consistency::All,
        ConsistencyLevel::LocalOne => Consistency::LocalOne,
        ConsistencyLevel::LocalQuorum => Consistency::LocalQuorum,
        ConsistencyLevel::EachQuorum => Consistency::EachQuorum,
    }
}

/// The execution profile of every counter write: the configured consistency and timeout,
/// token- and DC-aware routing, `FallthroughRetryPolicy` (the driver never retries), and
/// no speculative execution (a second copy of a counter write would count twice).
pub fn write_profile(store: &StoreConfig) -> ExecutionProfile {
    let mut policy = DefaultPolicy::builder().token_aware(true);
    if let Some(dc) = &store.local_dc {
        policy = policy
            .prefer_datacenter(dc.clone())
            .permit_dc_failover(false);
    }
    ExecutionProfile::builder()
        .consistency(consistency(store.consistency))
        .request_timeout(Some(store.request_timeout))
        .retry_policy(Arc::new(FallthroughRetryPolicy::new()))
        .speculative_execution_policy(None)
        .load_balancing_policy(policy.build())
        .build()
}

/// The password: from `COUNTERSINK_PASSWORD`, else from `store.password_file` (first
/// line). Never from the config file itself or the command line, and never logged.
fn password(store: &StoreConfig) -> Result<Option<String>, SessionError> {
    if let Ok(value) = std::env::var(PASSWORD_ENV) {
        return Ok(Some(value));
    }
    match &store.password_file {
        None => Ok(None),
        Some(path) => std::fs::read_to_string(path)
            .map(|text| Some(text.lines().next().unwrap_or("").to_owned()))
            .map_err(|e| {
                SessionError::Credentials(format!(
                    "cannot read password file {}: {e}",
                    path.display()
                ))
            }),
    }
}

#[cfg(feature = "tls")]
fn with_tls(builder: SessionBuilder, store: &StoreConfig) -> Result<SessionBuilder, SessionError> {
    let config = super::tls::client_config(&store.tls).map_err(SessionError::Tls)?;
    Ok(builder.tls_context(Some(Arc::new(config))))
}

#[cfg(not(feature = "tls"))]
fn with_tls(_: SessionBuilder, _: &StoreConfig) -> Result<SessionBuilder, SessionError> {
    Err(SessionError::Tls(
        "this build has no TLS support; build with `--features tls`".into(),
    ))
}

/// Opens a session with the write profile as its default.
pub async fn connect(store: &StoreConfig) -> Result<Session, SessionError> {
    let mut builder = SessionBuilder::new()
        .known_nodes(&store.contact_points)
        .connection_timeout(store.connect_timeout)
        .default_execution_profile_handle(write_profile(store).into_handle());
    if store.tls.enabled {
        builder = with_tls(builder, store)?;
    }
    match (&store.username, password(store)?) {
        (Some(user), Some(password)) => builder = builder.user(user.clone(), password),
        (Some(user), None) => {
            return Err(SessionError::Credentials(format!(
                "user `{user}` is set but no password: set {PASSWORD_ENV} or store.password_file"
            )));
        }
        (None, Some(_)) if store.password_file.is_some() => {
            return Err(SessionError::Credentials(
                "store.password_file is set but store.username is not".into(),
            ));
        }
        (None, _) => {}
    }
    let bound = store.connect_timeout.saturating_mul(SESSION_SETUP_TIMEOUTS);
    match tokio::time::timeout(bound, builder.build()).await {
        Ok(Ok(session)) => Ok(session),
        Ok(Err(error)) => Err(SessionError::Connect {
            contact_points: store.contact_points.join(","),
            error: Box::new(error),
        }),
        Err(_) => Err(SessionError::Timeout {
            contact_points: store.contact_points.join(","),
            after: bound,
        }),
    }
}
