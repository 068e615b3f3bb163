//! A recorder for the [`metrics`] facade (feature `metrics-facade`), so that
//! `metrics::counter!` in any Rust service lands in countersink without rewriting its
//! instrumentation.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let config = countersink::Config::from_file("countersink.toml".as_ref())?;
//! let handle = countersink::facade::install(&config).await?; // connects, then installs
//! metrics::counter!("page.views", "page_id" => "home").increment(1);
//! handle.shutdown().await; // the final flush: never skip it
//! # Ok(()) }
//! ```
//!
//! # What each update becomes
//!
//! | facade call | in countersink |
//! |---|---|
//! | counter `increment(n)` | an increment of `n`, exactly where the line `name:n\|c\|#k:v,…` and `Recorder::incr(name, &[(k, v), …], n)` land: a configured family that maps the name (keyed by its key labels), else the generic family (name and canonical tags) |
//! | counter `absolute(n)` | counted as ignored, `type="counter_absolute"`: a value to set, not a delta to add |
//! | gauge `increment`, `decrement`, `set` | counted as ignored, `type="gauge"` |
//! | histogram `record` (`record_many(v, n)`: `n` times) | counted as ignored, `type="histogram"` |
//! | `describe_*` | nothing: the tables have no place for units or descriptions |
//!
//! A counter key is refused for the reasons its line would be, and then each increment
//! is counted invalid (`countersink_lines_invalid_total`): `missing_key_tag` when a
//! configured family's key label is absent or empty, `ambiguous_key_tag`,
//! `key_too_long`, `no_name`, `bad_name` (a `:` or `|` in the name), `bad_tag` (a label
//! key with `:`, `,` or `|`, a value with `,` or `|`, or control characters: the canonical
//! tag string could not tell such label sets apart), and `bad_value` for an increment
//! above `i64::MAX`. Limits drop and count as for any increment (`max_rows`, …), and
//! increments after `shutdown()` are dropped as `after_shutdown`.
//!
//! # Registration once per key
//!
//! The facade registers a counter each time `counter!` runs, then increments the handle
//! it got. The first registration of a key places it (family, column, series key and its
//! hash) and keeps it in a registry shared by all threads (`registry.rs`). Each thread
//! then keeps its own handle on it (`local.rs`), found by the key's precomputed hash and,
//! for `counter!` with literal labels, by pointer: its later registrations on that thread
//! take no lock and share no reference count with other threads. An increment reads the
//! coarse clock and adds to the row in this thread's stripe, without resolving a family,
//! canonicalising tags or hashing the series. Measured with callgrind on one thread (see
//! `tests/bench/facade.rs`): `counter!(…).increment(1)` on a registered key is about 480
//! instructions, a kept `Counter` 285, `Recorder::incr` 760, the Prometheus exporter's
//! `counter!` 600.
//!
//! # High-cardinality labels
//!
//! Each label set is a key of its own, kept until the process ends (as the Prometheus
//! exporter keeps them): at most [`Builder::max_keys`] of them (default
//! [`DEFAULT_MAX_KEYS`]) for the process, and as many handles per thread. Past that,
//! keys are placed at each registration and not kept: nothing is lost, a `counter!` of a
//! new key then costs about a `Recorder::incr` plus an allocation, and a warning is
//! logged once. Rows are bounded as for every increment: a key over
//! `limits.max_key_bytes` is invalid (`key_too_long`), and rows beyond
//! `limits.max_pending_rows` or `limits.max_pending_bytes` are dropped and counted
//! (`max_rows`, `max_bytes`).
//!
//! # Installation
//!
//! As with other exporters, one recorder is installed for the whole process, once:
//! [`install`] connects (checking every configured table), installs the recorder with
//! `metrics::set_global_recorder`, and returns a [`FacadeHandle`] whose `shutdown()` runs
//! the final flush. The global recorder cannot be removed; after shutdown it counts later
//! increments as dropped (`after_shutdown`). Updates made before installation go to the
//! facade's no-op recorder and are not seen. [`Builder::build`] gives a recorder that is
//! not installed, for `metrics::with_local_recorder` or a recorder of one's own.

mod handles;
mod local;
mod recorder;
mod registry;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use crate::config::Config;
use crate::engine::Engine;
use crate::flush::FlushReport;
use crate::pipeline::StartError;
use crate::recorder::Recorder;

pub use self::recorder::FacadeRecorder;

/// Counter keys kept by default (see the module documentation on high cardinality).
pub const DEFAULT_MAX_KEYS: usize = 10_000;

/// Builds a [`FacadeRecorder`], or starts and installs one.
#[derive(Clone, Debug)]
pub struct Builder {
    max_keys: usize,
}

impl Default for Builder {
    fn default() -> Builder {
        Builder {
            max_keys: DEFAULT_MAX_KEYS,
        }
    }
}

impl Builder {
    /// A builder with the defaults.
    pub fn new() -> Builder {
        Builder::default()
    }

    /// How many counter keys the recorder keeps placed, and how many handles each thread
    /// keeps (see the module documentation on high cardinality).
    pub fn max_keys(mut self, max_keys: usize) -> Builder {
        self.max_keys = max_keys;
        self
    }

    /// A recorder over `engine` (for example [`Recorder::engine`]), not installed.
    pub fn build(&self, engine: &Arc<Engine>) -> FacadeRecorder {
        FacadeRecorder::new(engine.clone(), self.max_keys)
    }

    /// Connects to the cluster of `config.store` (as [`Recorder::connect`]) and installs
    /// the recorder for the whole process. If another recorder is installed already, the
    /// new one is shut down again and the error says so.
    pub async fn install(self, config: &Config) -> Result<FacadeHandle, InstallError> {
        let recorder = Recorder::connect(config).await?;
        match self.install_with(&recorder) {
            Ok(handle) => Ok(handle),
            Err(error) => {
                recorder.shutdown().await;
                Err(error)
            }
        }
    }

    /// Installs, for the whole process, a recorder over a running `recorder` (started
    /// with a sink of one's own, for example).
    pub fn install_with(&self, recorder: &Recorder) -> Result<FacadeHandle, InstallError> {
        ::metrics::set_global_recorder(self.build(recorder.engine()))
            .map_err(|_| InstallError::AlreadyInstalled)?;
        Ok(FacadeHandle {
            recorder: recorder.clone(),
        })
    }
}

/// Connects to the cluster of `config.store` and installs a recorder with the defaults
/// for the whole process (see [`Builder::install`]).
pub async fn install(config: &Config) -> Result<FacadeHandle, InstallError> {
    Builder::new().install(config).await
}

/// Why the recorder could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The recorder could not start (configuration, state directory, cluster).
    #[error(transparent)]
    Start(Box<StartError>),
    /// The process already has a global `metrics` recorder; it can be set only once.
    #[error("a global recorder for the metrics facade is installed already")]
    AlreadyInstalled,
}

impl From<StartError> for InstallError {
    fn from(error: StartError) -> InstallError {
        InstallError::Start(Box::new(error))
    }
}

/// The installed recorder's pipeline: call [`FacadeHandle::shutdown`] before the process
/// exits.
///
/// The global recorder holds only the engine. Dropping the last handle (and every clone
/// of its [`Recorder`]) without `shutdown()` is what dropping a `Recorder` is: counted,
/// logged, and the final flush runs in the background with nothing waiting for it.
#[derive(Clone)]
pub struct FacadeHandle {
    recorder: Recorder,
}

impl FacadeHandle {
    /// Stops recording and runs the final flush (see [`Recorder::shutdown`]). Later
    /// increments through the facade are counted as dropped (`after_shutdown`).
    pub async fn shutdown(&self) -> Option<FlushReport> {
        self.recorder.shutdown().await
    }

    /// The recorder behind the facade: its accounting, or direct `incr` calls.
    pub fn recorder(&self) -> &Recorder {
        &self.recorder
    }
}
