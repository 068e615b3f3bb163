//! Writing segments: whole or not at all (a temporary file, `fsync`, `rename`), within
//! `state.max_spill_bytes`, carried rows kept whatever room is left.

use std::fs;
use std::io::{self, Write};

use crate::sink::LedgerRow;
use crate::state::private::{write_atomically, write_atomically_with};
use crate::state::record::WriteRecord;

use super::header::header_line;
use super::{Cursor, SegmentId, Spill};

impl Spill {
    /// Writes a segment holding the batches that fit under `state.max_spill_bytes` (in
    /// order; a batch is one write's records, kept whole). Returns, per batch, whether
    /// it was written. `consumes` is the replay cursor the writing flush had loaded;
    /// `ledger`, the ledger rows a held segment or an ingest log's segment carries in its
    /// header (written only with at least one batch).
    pub fn write_segment(
        &mut self,
        id: SegmentId,
        consumes: Option<Cursor>,
        batches: &[Vec<WriteRecord>],
        ledger: &[LedgerRow],
    ) -> io::Result<Vec<bool>> {
        self.write_lines(id, consumes, &[], batches, ledger)
    }

    /// [`Spill::write_segment`], the first `moved` batches being rows a replay read (up
    /// to `consumes`) and could not settle: kept whatever room is left, as
    /// [`Spill::write_segment_carrying`] keeps them; the rest get the room left after
    /// them. Per batch, whether it was written.
    pub fn write_segment_moving(
        &mut self,
        id: SegmentId,
        consumes: Option<Cursor>,
        batches: &[Vec<WriteRecord>],
        moved: usize,
    ) -> io::Result<Vec<bool>> {
        let (moved, fresh) = batches.split_at(moved.min(batches.len()));
        let mut lines = Vec::new();
        for record in moved.iter().flatten() {
            serde_json::to_writer(&mut lines, record).map_err(io::Error::other)?;
            lines.push(b'\n');
        }
        let kept = self.write_segment_carrying(id, consumes, &lines, fresh)?;
        let mut all = vec![true; moved.len()];
        all.extend(kept);
        Ok(all)
    }

    /// Writes the segment of a sealed ingest-log file: `records` whole or not at all, its
    /// header carrying `ledger` and naming no cursor (see `StateDir::spill_ingest`).
    /// With `whatever_room`, written whatever room `state.max_spill_bytes` leaves;
    /// otherwise only when header and records fit in it. Whether it was written (nothing
    /// is written for no records).
    ///
    /// The lines go straight into the temporary file (sized first, by serializing into a
    /// counter, when they must fit): a sealed file's segment can be as large as
    /// `state.max_ingest_log_bytes`, and a serialized copy of it in memory would pass
    /// every configured limit.
    pub fn write_segment_ingest(
        &mut self,
        id: SegmentId,
        records: &[WriteRecord],
        ledger: &[LedgerRow],
        whatever_room: bool,
    ) -> io::Result<bool> {
        if records.is_empty() {
            return Ok(true);
        }
        let header = header_line(None, ledger)?;
        if !whatever_room {
            let mut size = Counted::new(io::sink());
            write_records(&mut size, records)?;
            let room = self.max_bytes.saturating_sub(self.bytes());
            if header.len() as u64 + size.bytes > room {
                return Ok(false);
            }
        }
        let path = self.dir.join(id.file_name());
        let mut size = 0_u64;
        let written = write_atomically_with(&self.dir, &path, |out| {
            let mut out = Counted::new(out);
            out.write_all(&header)?;
            write_records(&mut out, records)?;
            size = out.bytes;
            Ok(())
        });
        if let Err(error) = written {
            // As in `write_lines`: renamed into place, only the directory's sync failing.
            if size == 0 || !fs::metadata(&path).is_ok_and(|m| m.len() == size) {
                return Err(error);
            }
            tracing::warn!(%error, segment = %path.display(), "A spill segment is in place, but its directory could not be synced: taken as written.");
        }
        self.segments.insert(id, size);
        Ok(true)
    }

    /// [`Spill::write_segment`], `first` (moved rows' lines, kept whatever the room)
    /// before the batches.
    fn write_lines(
        &mut self,
        id: SegmentId,
        consumes: Option<Cursor>,
        first: &[u8],
        batches: &[Vec<WriteRecord>],
        ledger: &[LedgerRow],
    ) -> io::Result<Vec<bool>> {
        let mut bytes = header_line(consumes, ledger)?;
        bytes.extend_from_slice(first);
        // `first` (moved rows) is kept whatever the room; the batches fit after it.
        let room = self.max_bytes.saturating_sub(self.bytes());
        let mut kept = Vec::with_capacity(batches.len());
        for batch in batches {
            let mut lines = Vec::new();
            for record in batch {
                serde_json::to_writer(&mut lines, record).map_err(io::Error::other)?;
                lines.push(b'\n');
            }
            let fits = (bytes.len() + lines.len()) as u64 <= room;
            if fits {
                bytes.extend_from_slice(&lines);
            }
            kept.push(fits);
        }
        if !first.is_empty() || kept.iter().any(|k| *k) {
            let path = self.dir.join(id.file_name());
            if let Err(error) = write_atomically(&self.dir, &path, &bytes) {
                // Renamed into place, with only the directory's sync failing: the segment
                // is there, and a start finds it. Taken as written; reported as not, its
                // rows would be written again elsewhere (or counted dropped) and then
                // replayed from both.
                if !fs::metadata(&path).is_ok_and(|m| m.len() == bytes.len() as u64) {
                    return Err(error);
                }
                tracing::warn!(%error, segment = %path.display(), "A spill segment is in place, but its directory could not be synced: taken as written.");
            }
            self.segments.insert(id, bytes.len() as u64);
        }
        Ok(kept)
    }

    /// Writes a segment as [`Spill::write_segment`] does, with `carried` first (record
    /// lines, already serialized: a chunk's worth never lives in memory as records): rows
    /// a replay read (up to `consumes`) that its flush could not settle, moved here. They
    /// are kept whatever room `state.max_spill_bytes` leaves, since they are on disk
    /// already: the limit bounds the rows admitted to the spill, and refusing a moved row
    /// would drop what the spill held (an answered increment of a durable listener among
    /// them). Until the segments the replay passed are deleted (at the flush's end, or
    /// once no journal group is open), the directory holds the moved rows twice; that
    /// passes the limit by at most one replay chunk (and the read part of a segment not
    /// yet wholly consumed) a round, and the passed segments count against the limit
    /// until they are deleted, so a group left open for long makes later spills refused
    /// (counted) rather than the disk fill. A moved record may also have
    /// grown by the error its write met (one error per record, replaced each time). `batches` (rows of the flush's
    /// own) get only the room left after them. The header names `consumes`. Returns, per
    /// batch, whether it was written; `carried` is kept whenever this returns `Ok` (an
    /// `Err`: the segment was not written, and neither was `carried`).
    pub fn write_segment_carrying(
        &mut self,
        id: SegmentId,
        consumes: Option<Cursor>,
        carried: &[u8],
        batches: &[Vec<WriteRecord>],
    ) -> io::Result<Vec<bool>> {
        self.write_lines(id, consumes, carried, batches, &[])
    }
}

/// Writes `records`, one line each, to `out`.
fn write_records(out: &mut impl Write, records: &[WriteRecord]) -> io::Result<()> {
    for record in records {
        serde_json::to_writer(&mut *out, record).map_err(io::Error::other)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// A writer that counts the bytes written through it.
struct Counted<W> {
    inner: W,
    bytes: u64,
}

impl<W> Counted<W> {
    fn new(inner: W) -> Counted<W> {
        Counted { inner, bytes: 0 }
    }
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
