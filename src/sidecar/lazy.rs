//! A CQL sink that connects in the background.
//!
//! A sidecar must start receiving even when the cluster is briefly unreachable (a rolling
//! restart, a slow DNS): refusing datagrams would lose them. Until the session is up,
//! every write is "not applied, transient" — re-queued, and spilled if it stays that way
//! past `flush.requeue_max_age` — and `/readyz` says not ready. A schema mismatch, on
//! the other hand, is a configuration error that retrying cannot fix: it is reported
//! once, and the sidecar stops with exit code 2.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OnceCell, watch};

use crate::backoff::Backoff;
use crate::config::StoreConfig;
use crate::sink::Sink;
use crate::sink::cql::{CqlSink, CqlSinkError};
use crate::sink::{Outcome, Request, WriteError};

thread_local! {
    /// One text for every write refused while there is no session (see
    /// `WriteError`'s note on shared texts).
    static NOT_CONNECTED: Arc<str> = Arc::from("no session to the store yet; nothing was sent");
}

/// The wait between two connection attempts: doubling from 500 ms up to 30 s.
const CONNECT_BACKOFF: Backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));

/// The CQL sink once connected; "not connected" until then.
#[derive(Clone, Default)]
pub struct LazyCqlSink {
    inner: Arc<OnceCell<CqlSink>>,
}

/// How the background connection ended when it did not connect.
#[derive(Debug)]
pub enum ConnectFailure {
    /// The tables do not match the configuration, or the store refuses a statement.
    Fatal(CqlSinkError),
}

impl LazyCqlSink {
    /// Whether the session is up, every table was found, and writes can be routed (a
    /// node is connected, of `store.local_dc` when one is set). Otherwise, why not.
    pub fn readiness(&self) -> Result<(), String> {
        match self.inner.get() {
            None => Err("no session to the store yet, or tables not checked yet".into()),
            Some(sink) => sink.routable(),
        }
    }

    /// Whether [`LazyCqlSink::readiness`] is ready.
    pub fn is_connected(&self) -> bool {
        self.readiness().is_ok()
    }

    /// Checks and prepares the tables of families a live reload adds (see
    /// [`CqlSink::prepare_tables`]), and writes to them from now on: nothing routes to
    /// them before the reload takes its routing. Refused while there is no session, since
    /// the tables cannot be checked then.
    pub async fn add_tables(&self, families: &[crate::family::FamilyDef]) -> Result<(), String> {
        if families.is_empty() {
            return Ok(());
        }
        let Some(sink) = self.inner.get() else {
            return Err("no session to the store yet: the new families' tables cannot be checked; reload again once connected".into());
        };
        let tables = sink
            .prepare_tables(families)
            .await
            .map_err(|error| error.to_string())?;
        sink.add_tables(tables);
        Ok(())
    }

    /// The connected sink, if any.
    pub fn get(&self) -> Option<&CqlSink> {
        self.inner.get()
    }

    /// Tries to connect until it succeeds, a fatal error occurs, or `stop` turns true.
    /// Waits between attempts, doubling from 500 ms up to 30 s.
    pub async fn connect_until(
        &self,
        store: StoreConfig,
        engine: Arc<crate::engine::Engine>,
        mut stop: watch::Receiver<bool>,
    ) -> Result<(), ConnectFailure> {
        // Which attempt this is: when it fails, that many failed in a row.
        let mut attempt = 1;
        loop {
            let wait = CONNECT_BACKOFF.delay(attempt);
            match CqlSink::connect(&store, engine.families()).await {
                Ok(sink) => {
                    tracing::info!(contact_points = ?store.contact_points, "Connected to the store; every configured table checked.");
                    if let (Some(_), Err(why)) = (&store.local_dc, sink.routable()) {
                        tracing::warn!(
                            local_dc = store.local_dc.as_deref(),
                            "Not ready: {why}. Writes are re-queued (and spilled when too old) meanwhile; /readyz answers 503."
                        );
                    }
                    let _ = self.inner.set(sink);
                    return Ok(());
                }
                Err(error) if error.is_permanent() => {
                    return Err(ConnectFailure::Fatal(error));
                }
                Err(error @ CqlSinkError::Prepare { .. }) => {
                    tracing::warn!(%error, retry_in = ?wait, "A statement could not be prepared, for a reason that may pass; retrying, buffering meanwhile.");
                }
                Err(error) => {
                    tracing::warn!(%error, retry_in = ?wait, "Cannot reach the store yet; buffering meanwhile.");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.wait_for(|s| *s) => return Ok(()),
            }
            attempt = attempt.saturating_add(1);
        }
    }
}

impl Sink for LazyCqlSink {
    async fn send(&self, request: Request<'_>) -> Outcome {
        match self.inner.get() {
            Some(sink) => sink.send(request).await,
            None => Outcome::NotAppliedTransient(WriteError::new(
                "not_connected",
                NOT_CONNECTED.with(Arc::clone),
            )),
        }
    }
}
