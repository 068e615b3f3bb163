//! Errors of starting the receivers. Every variant names the transport and the address or
//! path; the command line maps all of them to exit code 2.

use std::io;
use std::path::PathBuf;

use crate::config::ConfigError;
use crate::vocabulary::Transport;

/// The step of setting up a listener that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step {
    /// `socket(2)`.
    CreateSocket,
    /// A `setsockopt(2)`; the option name is given.
    SetOption(&'static str),
    /// `bind(2)`.
    Bind,
    /// `listen(2)`.
    Listen,
    /// Reading the bound address or socket-file metadata back.
    Inspect,
    /// Looking at what is already at the socket path (`lstat`, probe `connect`).
    CheckExisting,
    /// Removing a stale socket file.
    RemoveStale,
    /// Creating the private directory the socket is first bound in.
    CreateTempDir,
    /// Setting the socket file's mode.
    SetMode,
    /// Moving the socket file into place.
    MoveIntoPlace,
    /// Starting a receive thread.
    SpawnThread,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::CreateSocket => f.write_str("create socket"),
            Step::SetOption(name) => write!(f, "set {name}"),
            Step::Bind => f.write_str("bind"),
            Step::Listen => f.write_str("listen"),
            Step::Inspect => f.write_str("read back socket state"),
            Step::CheckExisting => f.write_str("check existing file at socket path"),
            Step::RemoveStale => f.write_str("remove stale socket"),
            Step::CreateTempDir => f.write_str("create private bind directory"),
            Step::SetMode => f.write_str("set socket file mode"),
            Step::MoveIntoPlace => f.write_str("move socket file into place"),
            Step::SpawnThread => f.write_str("start receive thread"),
        }
    }
}

/// Why [`start`](super::start) could not bring the receivers up. Nothing is left listening
/// and no socket file is left behind when it is returned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ListenError {
    /// A system call failed.
    #[error("cannot listen on {transport} {address}: {step} failed: {source}")]
    Io {
        /// The transport being set up.
        transport: Transport,
        /// The address or path, as configured.
        address: String,
        /// The failing step.
        step: Step,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// Something other than a socket is at the socket path; it is never deleted.
    #[error(
        "cannot listen on {transport} {}: the path exists and is not a socket (it is a {kind}); \
         remove it or choose another path",
        path.display()
    )]
    NotASocket {
        /// The transport being set up.
        transport: Transport,
        /// The configured path.
        path: PathBuf,
        /// What is there instead: "regular file", "directory", "symlink", ...
        kind: &'static str,
    },
    /// A live process listens on the socket path (a probe connection was accepted).
    #[error(
        "cannot listen on {transport} {}: another process is listening on this socket",
        path.display()
    )]
    InUse {
        /// The transport being set up.
        transport: Transport,
        /// The configured path.
        path: PathBuf,
    },
    /// A configuration value is out of range (the error names the field).
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl ListenError {
    pub(super) fn io(
        transport: Transport,
        address: impl Into<String>,
        step: Step,
        source: io::Error,
    ) -> Self {
        ListenError::Io {
            transport,
            address: address.into(),
            step,
            source,
        }
    }
}
