//! The state directory holds key values and deltas (what was counted, for whom): only
//! its owner may read it, whatever the umask. The directory is `0700` and every file
//! countersink creates in it `0600`.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
#[cfg(unix)]
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Mode of the state directory.
pub const DIR_MODE: u32 = 0o700;
/// Mode of every file created in it.
pub const FILE_MODE: u32 = 0o600;

/// Creates the directory (and its parents) if needed and restricts it to its owner.
pub(crate) fn create_dir(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    #[cfg(unix)]
    fs::set_permissions(dir, fs::Permissions::from_mode(DIR_MODE))?;
    Ok(())
}

/// Restricts the regular files already in `dir` (written by an earlier version, or
/// copied in) to their owner.
pub(crate) fn restrict_files(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let metadata = entry.metadata()?;
        if metadata.is_file() && metadata.permissions().mode() & 0o077 != 0 {
            fs::set_permissions(entry.path(), fs::Permissions::from_mode(FILE_MODE))?;
        }
    }
    Ok(())
}

/// Options that create a file readable and writable by its owner only.
pub(crate) fn options() -> OpenOptions {
    let mut options = OpenOptions::new();
    #[cfg(unix)]
    options.mode(FILE_MODE);
    options
}

/// Creates (or truncates) `path` with the owner-only mode and writes `bytes`; synced when
/// `durable`.
pub(crate) fn write(path: &Path, bytes: &[u8], durable: bool) -> io::Result<()> {
    let mut file = options()
        .create(true)
        .write(true)
        .truncate(true)
        .open(path)?;
    file.write_all(bytes)?;
    if durable {
        file.sync_all()?;
    }
    Ok(())
}

/// Makes the creation, rename or removal of a file in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Writes `bytes` to `path` (a file of `dir`) atomically: see [`write_atomically_with`].
pub(crate) fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomically_with(dir, path, |out| out.write_all(bytes))
}

/// Replaces `path` (a file of `dir`) with what `fill` writes, so that a crash leaves the
/// old content or the new, never part of it: a temporary file beside it (the owner-only
/// mode, like every file of the directory), fsync, rename, directory fsync. `fill`
/// writes through a buffer, so content larger than memory can be streamed in.
pub(crate) fn write_atomically_with(
    dir: &Path,
    path: &Path,
    fill: impl FnOnce(&mut BufWriter<File>) -> io::Result<()>,
) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let file = options()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&tmp)?;
    let mut out = BufWriter::new(file);
    fill(&mut out)?;
    out.into_inner()
        .map_err(io::IntoInnerError::into_error)?
        .sync_all()?;
    fs::rename(&tmp, path)?;
    sync_dir(dir)
}
