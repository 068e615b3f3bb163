//! `otlp_streams.bin` in the state directory: the cumulative stream table as the last
//! flush left it, so that a restart neither counts a stream's total again nor drops the
//! increase its next point carries.
//!
//! Layout (little-endian), 40 bytes per stream, so at most 80 × `ingest.otlp.max_streams`
//! bytes plus 44 (the table holds up to twice `max_streams`: see `streams`):
//!
//! | bytes | content |
//! | --- | --- |
//! | 8 | magic `CSOTLPS1` |
//! | 16 | [`stream_id`] of a fixed probe: a build whose hash differs refuses the file |
//! | 8 | the table's completeness mark (Unix nanoseconds) |
//! | 8 | the number of streams |
//! | 40 each | stream id (16), start time, time (8 each), value (8, signed) |
//! | 4 | CRC32C of everything before it |
//!
//! Written whole and replaced atomically (temporary file, fsync, rename, directory
//! fsync), owner-only like every file of the directory. A file that does not read back
//! exactly (truncated, another version, a bad checksum) is set aside as
//! `otlp_streams.corrupt` and the table starts empty: a loss for the streams it held (their
//! next point is a counted baseline), never a double count.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::streams::{Last, StreamId, Streams, stream_id};

/// The file's name in the state directory.
pub const FILE: &str = "otlp_streams.bin";
/// Where an unreadable file is moved.
pub const CORRUPT: &str = "otlp_streams.corrupt";

const MAGIC: &[u8; 8] = b"CSOTLPS1";
const PROBE: &[u8] = b"countersink otlp stream id probe";
const HEADER: usize = 8 + 16 + 8 + 8;
const ENTRY: usize = 40;
const TRAILER: usize = 4;

/// The most bytes the file takes with a table keeping `max_streams` streams (it holds up
/// to twice that).
pub fn max_file_bytes(max_streams: usize) -> u64 {
    let entries = (max_streams as u64)
        .saturating_mul(2)
        .saturating_mul(ENTRY as u64);
    entries.saturating_add((HEADER + TRAILER) as u64)
}

/// What the state directory held at start.
#[derive(Debug)]
pub enum Loaded {
    /// No file: a first start (or the last save failed and removed it).
    Absent,
    /// The table the last save wrote: its completeness mark and its streams, oldest first.
    Table {
        /// The saved table's completeness mark.
        complete_since: u64,
        /// Its streams.
        entries: Vec<(StreamId, Last)>,
    },
    /// A file that does not read back; why.
    Corrupt(String),
}

/// The path of the file in `dir`.
pub fn path(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

/// The file's bytes for `table`.
pub fn encode(table: &Streams) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + ENTRY * table.len() + TRAILER);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&stream_id(PROBE).to_le_bytes());
    out.extend_from_slice(&table.complete_since().to_le_bytes());
    out.extend_from_slice(&(table.len() as u64).to_le_bytes());
    for (id, last) in table.entries() {
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&last.start.to_le_bytes());
        out.extend_from_slice(&last.time.to_le_bytes());
        out.extend_from_slice(&last.value.to_le_bytes());
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Reads a file's bytes back, or says why not.
pub fn decode(bytes: &[u8]) -> Result<(u64, Vec<(StreamId, Last)>), String> {
    if bytes.len() < HEADER + TRAILER {
        return Err(format!("{} bytes, shorter than a header", bytes.len()));
    }
    if &bytes[..8] != MAGIC {
        return Err("not a stream table (bad magic)".into());
    }
    let (body, crc) = bytes.split_at(bytes.len() - TRAILER);
    if crc32c::crc32c(body).to_le_bytes() != crc {
        return Err("checksum mismatch".into());
    }
    let u64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&body[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let u128_at = |at: usize| {
        let mut b = [0u8; 16];
        b.copy_from_slice(&body[at..at + 16]);
        u128::from_le_bytes(b)
    };
    if u128_at(8) != stream_id(PROBE) {
        return Err("written by a build that identifies streams differently".into());
    }
    let complete_since = u64_at(24);
    let count = u64_at(32);
    let expected = usize::try_from(count)
        .ok()
        .and_then(|n| n.checked_mul(ENTRY))
        .and_then(|n| n.checked_add(HEADER));
    if expected != Some(body.len()) {
        return Err(format!(
            "{count} streams announced, {} bytes of them",
            body.len() - HEADER
        ));
    }
    let entries = body[HEADER..]
        .chunks_exact(ENTRY)
        .map(|e| {
            let at = |i: usize| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&e[i..i + 8]);
                b
            };
            let mut id = [0u8; 16];
            id.copy_from_slice(&e[..16]);
            (
                u128::from_le_bytes(id),
                Last {
                    start: u64::from_le_bytes(at(16)),
                    time: u64::from_le_bytes(at(24)),
                    value: i64::from_le_bytes(at(32)),
                },
            )
        })
        .collect();
    Ok((complete_since, entries))
}

/// Reads the file of `dir`. A corrupt one is moved aside to [`CORRUPT`] (replacing an
/// earlier one) so that the next save does not meet it and an operator can look.
pub fn load(dir: &Path) -> io::Result<Loaded> {
    let file = path(dir);
    let bytes = match std::fs::read(&file) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Loaded::Absent),
        Err(e) => return Err(e),
    };
    match decode(&bytes) {
        Ok((complete_since, entries)) => Ok(Loaded::Table {
            complete_since,
            entries,
        }),
        Err(why) => {
            std::fs::rename(&file, dir.join(CORRUPT))?;
            Ok(Loaded::Corrupt(why))
        }
    }
}

/// Replaces the file of `dir` with `bytes` (from [`encode`]), atomically and durably.
pub fn save(dir: &Path, bytes: &[u8]) -> io::Result<()> {
    crate::state::private::write_atomically_with(dir, &path(dir), |out| out.write_all(bytes))
}

/// Removes the file of `dir` (after a failed save: an older table must not be read
/// back once newer differences may have reached the store).
pub fn remove(dir: &Path) -> io::Result<()> {
    match std::fs::remove_file(path(dir)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => crate::state::private::sync_dir(dir),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Streams {
        let mut t = Streams::new(100, 5);
        for i in 0..10u32 {
            t.set(
                stream_id(&i.to_le_bytes()),
                Last {
                    start: u64::from(i),
                    time: u64::from(i) + 1,
                    value: -i64::from(i) * 1000,
                },
                7,
            );
        }
        t
    }

    #[test]
    fn round_trip() {
        let t = table();
        let bytes = encode(&t);
        assert_eq!(bytes.len(), HEADER + 10 * ENTRY + TRAILER);
        let (complete_since, entries) = decode(&bytes).unwrap();
        assert_eq!(complete_since, 5);
        assert_eq!(entries, t.entries().collect::<Vec<_>>());
    }

    /// Every damage is refused, whole, with a reason; none panics.
    #[test]
    fn damage_is_refused() {
        let bytes = encode(&table());
        for cut in [0, 1, HEADER, bytes.len() - 41, bytes.len() - 1] {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        for at in [0, 9, 30, HEADER + 3, bytes.len() - 2] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x40;
            assert!(decode(&bad).is_err(), "flip at {at}");
        }
        // A count that disagrees with the length, checksum fixed up: still refused.
        let mut bad = bytes[..bytes.len() - TRAILER].to_vec();
        bad[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
        let crc = crc32c::crc32c(&bad);
        bad.extend_from_slice(&crc.to_le_bytes());
        assert!(decode(&bad).unwrap_err().contains("announced"));
    }

    #[test]
    fn load_save_remove_and_corrupt_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(load(dir.path()).unwrap(), Loaded::Absent));
        save(dir.path(), &encode(&table())).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(path(dir.path()))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        match load(dir.path()).unwrap() {
            Loaded::Table { entries, .. } => assert_eq!(entries.len(), 10),
            other => panic!("{other:?}"),
        }
        std::fs::write(path(dir.path()), b"CSOTLPS1 and then garbage").unwrap();
        assert!(matches!(load(dir.path()).unwrap(), Loaded::Corrupt(_)));
        assert!(dir.path().join(CORRUPT).exists());
        assert!(matches!(load(dir.path()).unwrap(), Loaded::Absent));
        save(dir.path(), &encode(&table())).unwrap();
        remove(dir.path()).unwrap();
        remove(dir.path()).unwrap();
        assert!(matches!(load(dir.path()).unwrap(), Loaded::Absent));
    }
}
