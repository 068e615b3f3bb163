//! The socket-file rules shared by both Unix receivers.
//!
//! 1. **What is already at the path.** Nothing: fine. A socket nobody listens on (a probe
//!    `connect` gets `ECONNREFUSED`): stale, removed. A live socket: [`ListenError::InUse`].
//!    Anything else (regular file, directory, symlink, ...): [`ListenError::NotASocket`]; it
//!    is never deleted.
//! 2. **No window of looser permissions.** The socket is bound inside a fresh private
//!    directory (mode `0700`) next to the target, its mode is set there, a stream socket
//!    starts listening there, and only then is it hard-linked to the target path (`link`
//!    fails if something appeared there meanwhile, so nothing is overwritten). The process
//!    umask is never touched. Filesystems without hard links fall back to `rename`.
//! 3. **Cleanup.** The file is removed at shutdown only if the path still holds the same
//!    inode (another instance may have replaced it).
//!
//! Connecting needs write permission on the socket file and search permission on every
//! directory above it; those directories are the operator's to set.

use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use socket2::{Domain, SockAddr, Socket, Type};

use crate::config::ingest::SocketMode;
use crate::vocabulary::Transport;

use super::{ListenError, Step};

/// Listen backlog of the stream socket (the kernel caps it at `net.core.somaxconn`).
const LISTEN_BACKLOG: i32 = 1024;

/// A socket file this process created. [`SocketFile::remove`] (or drop) deletes it if the
/// path still names the same inode.
#[derive(Debug)]
pub(super) struct SocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
    removed: bool,
}

impl SocketFile {
    /// Deletes the file if it is still ours; idempotent.
    pub(super) fn remove(&mut self) {
        if self.removed {
            return;
        }
        self.removed = true;
        match fs::symlink_metadata(&self.path) {
            Ok(meta)
                if meta.file_type().is_socket()
                    && meta.dev() == self.dev
                    && meta.ino() == self.ino =>
            {
                if let Err(error) = fs::remove_file(&self.path) {
                    tracing::warn!(path = %self.path.display(), %error, "Cannot remove socket file.");
                }
            }
            Ok(_) => tracing::info!(
                path = %self.path.display(),
                "Socket path now holds another file; left in place."
            ),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => {
                tracing::warn!(path = %self.path.display(), %error, "Cannot inspect socket file.")
            }
        }
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Creates a Unix socket of type `ty` at `path` with exactly `mode`, following the rules in
/// the module docs. `configure` runs on the unbound socket (socket options). A stream socket
/// is listening when this returns.
pub(super) fn bind(
    path: &Path,
    ty: Type,
    mode: SocketMode,
    transport: Transport,
    configure: impl FnOnce(&Socket) -> Result<(), ListenError>,
) -> Result<(Socket, SocketFile), ListenError> {
    let path = absolute(path, transport)?;
    let fail = |step: Step| {
        let address = path.display().to_string();
        move |e| ListenError::io(transport, address, step, e)
    };

    if let Some(stale) = check_existing(&path, ty, transport)? {
        remove_stale(&path, &stale).map_err(fail(Step::RemoveStale))?;
        tracing::info!(%transport, path = %path.display(), "Removed stale socket file.");
    }

    let parent = path.parent().unwrap_or(Path::new("/"));
    let private = PrivateDir::create(parent).map_err(fail(Step::CreateTempDir))?;
    let temp_path = private.path.join("s");

    let socket = Socket::new(Domain::UNIX, ty, None).map_err(fail(Step::CreateSocket))?;
    configure(&socket)?;
    let addr = SockAddr::unix(&temp_path).map_err(fail(Step::Bind))?;
    socket.bind(&addr).map_err(fail(Step::Bind))?;
    fs::set_permissions(&temp_path, fs::Permissions::from_mode(mode.bits()))
        .map_err(fail(Step::SetMode))?;
    if ty == Type::STREAM {
        socket.listen(LISTEN_BACKLOG).map_err(fail(Step::Listen))?;
    }
    let meta = fs::symlink_metadata(&temp_path).map_err(fail(Step::Inspect))?;

    match fs::hard_link(&temp_path, &path) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
            // Something appeared at the path since the check: report what it is.
            check_existing(&path, ty, transport)?;
            return Err(ListenError::InUse { transport, path });
        }
        Err(link_error) => {
            // No hard links on this filesystem: rename, after checking again that the path is free.
            tracing::debug!(%link_error, "hard link failed; falling back to rename");
            if fs::symlink_metadata(&path).is_ok() {
                return Err(ListenError::InUse { transport, path });
            }
            fs::rename(&temp_path, &path).map_err(fail(Step::MoveIntoPlace))?;
        }
    }
    drop(private);
    let file = SocketFile {
        path,
        dev: meta.dev(),
        ino: meta.ino(),
        removed: false,
    };
    Ok((socket, file))
}

/// Identity of a stale socket file found at the path.
struct Stale {
    dev: u64,
    ino: u64,
}

/// Looks at what is at `path`. `Ok(None)`: nothing. `Ok(Some)`: a stale socket.
fn check_existing(
    path: &Path,
    ty: Type,
    transport: Transport,
) -> Result<Option<Stale>, ListenError> {
    let fail = |e| {
        ListenError::io(
            transport,
            path.display().to_string(),
            Step::CheckExisting,
            e,
        )
    };
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(fail(error)),
    };
    let file_type = meta.file_type();
    if !file_type.is_socket() {
        let kind = if file_type.is_file() {
            "regular file"
        } else if file_type.is_dir() {
            "directory"
        } else if file_type.is_symlink() {
            "symbolic link"
        } else if file_type.is_fifo() {
            "named pipe"
        } else {
            "device or other special file"
        };
        return Err(ListenError::NotASocket {
            transport,
            path: path.to_owned(),
            kind,
        });
    }
    // Probe without blocking: a stream listener with a full backlog answers EAGAIN.
    let probe = Socket::new(Domain::UNIX, ty, None).map_err(fail)?;
    probe.set_nonblocking(true).map_err(fail)?;
    let addr = SockAddr::unix(path).map_err(fail)?;
    match probe.connect(&addr) {
        Ok(()) => Err(ListenError::InUse {
            transport,
            path: path.to_owned(),
        }),
        Err(error) if error.raw_os_error() == Some(libc::ECONNREFUSED) => Ok(Some(Stale {
            dev: meta.dev(),
            ino: meta.ino(),
        })),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        // Backlog full (EAGAIN), or a live socket of the other type (EPROTOTYPE).
        Err(error) if matches!(error.raw_os_error(), Some(libc::EAGAIN | libc::EPROTOTYPE)) => {
            Err(ListenError::InUse {
                transport,
                path: path.to_owned(),
            })
        }
        Err(error) => Err(fail(error)),
    }
}

/// Removes the stale socket if the path still holds the same inode.
fn remove_stale(path: &Path, stale: &Stale) -> io::Result<()> {
    let meta = fs::symlink_metadata(path)?;
    if meta.dev() != stale.dev || meta.ino() != stale.ino {
        return Err(io::Error::other(
            "the socket file changed while it was being checked",
        ));
    }
    fs::remove_file(path)
}

/// Makes a relative path absolute against the current directory, so that cleanup at
/// shutdown does not depend on it.
fn absolute(path: &Path, transport: Transport) -> Result<PathBuf, ListenError> {
    std::path::absolute(path)
        .map_err(|e| ListenError::io(transport, path.display().to_string(), Step::Inspect, e))
}

/// A fresh directory with mode 0700 (the umask can only remove bits) next to the target;
/// removed with whatever is left in it on drop.
struct PrivateDir {
    path: PathBuf,
}

impl PrivateDir {
    fn create(parent: &Path) -> io::Result<PrivateDir> {
        use std::os::unix::fs::DirBuilderExt;
        let mut last = io::Error::from(io::ErrorKind::AlreadyExists);
        for _ in 0..16 {
            // Short, so that the temporary socket path stays within the 108-byte limit
            // whenever the target does (within a few bytes).
            let name: String = std::iter::repeat_with(fastrand::alphanumeric)
                .take(6)
                .collect();
            let path = parent.join(format!(".cs{name}"));
            match fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(PrivateDir { path }),
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => last = error,
                Err(error) => return Err(error),
            }
        }
        Err(last)
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = fs::remove_file(self.path.join("s"));
        if let Err(error) = fs::remove_dir(&self.path) {
            tracing::warn!(path = %self.path.display(), %error, "Cannot remove private bind directory.");
        }
    }
}
