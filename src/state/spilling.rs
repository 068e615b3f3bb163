//! The state directory's spill and replay operations: a flush's segments (written whole
//! up to `state.max_spill_bytes`, rows a replay moved kept whatever room is left), and
//! the replay cursor's reads, rewinds and commits (a cursor that cannot be made durable
//! stays owed to the next group's end).

use std::io;

use super::{Chunk, Cursor, FlushId, JsonlLog, Passed, SegmentId, StateDir, Took, WriteRecord};

impl StateDir {
    /// Writes a flush's spill segment (whole writes, up to `state.max_spill_bytes`):
    /// per batch, whether it was written.
    pub fn spill(
        &mut self,
        flush: &FlushId,
        batches: &[Vec<WriteRecord>],
    ) -> io::Result<Vec<bool>> {
        self.spill_moving(flush, batches, 0)
    }

    /// [`StateDir::spill`], the first `moved` batches being rows the flush's replay read
    /// (up to the loaded cursor) and could not settle: those are kept whatever room is
    /// left (see [`super::spill::Spill::write_segment_carrying`]: they are on disk already),
    /// the rest get the room left after them.
    pub fn spill_moving(
        &mut self,
        flush: &FlushId,
        batches: &[Vec<WriteRecord>],
        moved: usize,
    ) -> io::Result<Vec<bool>> {
        let id = SegmentId::live(flush.incarnation, flush.flush_seq);
        let consumes = self.spill.loaded();
        self.spill
            .write_segment_moving(id, consumes, batches, moved)
    }

    /// Writes the held segment of a final flush (rows held for the delta ledger, see
    /// [`ledger_pending`](super::ledger_pending)), as [`StateDir::spill`] does, its header carrying `ledger`,
    /// the rows' ledger rows: both are on disk after one atomic step, or neither. Its
    /// header names no replay cursor: held rows are fresh, never replayed ones, so the
    /// segment owns nothing that replay loaded.
    pub fn spill_held(
        &mut self,
        flush: &FlushId,
        batches: &[Vec<WriteRecord>],
        ledger: &[crate::sink::LedgerRow],
    ) -> io::Result<Vec<bool>> {
        let id = SegmentId {
            held: true,
            ..SegmentId::live(flush.incarnation, flush.flush_seq)
        };
        self.spill.write_segment(id, None, batches, ledger)
    }

    /// Writes the segment crash recovery spills a flush's rows into (see
    /// [`SegmentId::recovered`]), as [`StateDir::spill`] does; `consumes`, the cursor
    /// that flush's group named.
    pub fn spill_recovered(
        &mut self,
        flush: &FlushId,
        consumes: Option<Cursor>,
        batches: &[Vec<WriteRecord>],
    ) -> io::Result<Vec<bool>> {
        let id = SegmentId::recovered(flush.incarnation, flush.flush_seq);
        self.spill.write_segment(id, consumes, batches, &[])
    }

    /// Writes the totals segment of a flush (see [`SegmentId::totals`]): `carried`, the
    /// record lines of the spilled totals its replay read up to `consumes` and could not
    /// settle, kept whatever room is left (they are on disk already, see
    /// [`super::spill::Spill::write_segment_carrying`]), then `batches` (rows of its own), each
    /// whole, up to `state.max_spill_bytes`. Returns, per batch, whether it was written;
    /// `carried` is kept whenever this returns `Ok` (an `Err`: it was not written).
    pub fn spill_totals(
        &mut self,
        flush: &FlushId,
        consumes: Option<Cursor>,
        carried: &[u8],
        batches: &[Vec<WriteRecord>],
    ) -> io::Result<Vec<bool>> {
        let id = SegmentId::totals(flush.incarnation, flush.flush_seq, false);
        self.spill
            .write_segment_carrying(id, consumes, carried, batches)
    }

    /// Writes `carried` (record lines a replay read up to `consumes` and may not send
    /// yet: rows whose epoch the registry cannot place) to the live segment of `flush`,
    /// whole, whatever room `state.max_spill_bytes` leaves (they are on disk already),
    /// its header naming `consumes`: from the rename on, the rows are in the new segment
    /// and not where they were read, after a kill too.
    pub fn spill_carried(
        &mut self,
        flush: &FlushId,
        consumes: Option<Cursor>,
        carried: &[u8],
    ) -> io::Result<()> {
        let id = SegmentId::live(flush.incarnation, flush.flush_seq);
        self.spill
            .write_segment_carrying(id, consumes, carried, &[])?;
        Ok(())
    }

    /// Writes the segment a sealed file of the ingest log becomes (see [`ingest_log`](super::ingest_log)),
    /// whole or not at all, with `ledger`, the ledger rows of its exact families'
    /// increments, in its header: whether it was written (`false`: it would not fit in
    /// `state.max_spill_bytes`, and the file waits). It consumes no replay cursor. Into
    /// an empty spill it goes whatever its size: waiting could never make room for a
    /// segment larger than the limit, and its file would hold answered increments (and
    /// the ingest log's room) for ever; the ingest log's own bound
    /// (`state.max_ingest_log_bytes`) bounds it. Its lines are streamed into the file
    /// from `records`, never copied whole in memory (see
    /// [`super::spill::Spill::write_segment_ingest`]).
    pub fn spill_ingest(
        &mut self,
        id: SegmentId,
        records: &[WriteRecord],
        ledger: &[crate::sink::LedgerRow],
    ) -> io::Result<bool> {
        let whatever_room = self.spill.bytes() == 0;
        self.spill
            .write_segment_ingest(id, records, ledger, whatever_room)
    }

    /// Whether a spill segment is on disk.
    pub fn has_spill_segment(&self, id: SegmentId) -> bool {
        self.spill.has_segment(id)
    }

    /// The `(request_id, row)` of the records a segment holds (empty when there is no
    /// such segment): what a recovery must not spill again.
    pub fn spill_keys(
        &self,
        id: SegmentId,
    ) -> io::Result<std::collections::HashSet<(String, u16)>> {
        Ok(self.spill.segment_keys(id)?.unwrap_or_default())
    }

    /// Bytes of the spill segments on disk, and the limit (`state.max_spill_bytes`).
    pub fn spill_bytes(&self) -> (u64, u64) {
        (self.spill.bytes(), self.spill.max_bytes())
    }

    /// Whether spilled rows wait to be replayed.
    pub fn has_unreplayed(&self) -> bool {
        self.spill.has_unloaded()
    }

    /// How far replay has read spilled rows.
    pub fn replay_loaded(&self) -> Option<Cursor> {
        self.spill.loaded()
    }

    /// The rows read for replay since the last consumed cursor were not sent (their
    /// group could not be committed): the next read starts from that cursor again.
    pub fn rewind_replay(&mut self) {
        let consumed = self.spill.durable().max(self.owed_cursor);
        self.spill.rewind(consumed);
    }

    /// Every spilled record not consumed yet, read without consuming any.
    pub fn scan_spill(&mut self, each: impl FnMut(&WriteRecord)) -> io::Result<()> {
        self.spill.scan(each)
    }

    /// Makes a replay cursor durable outside a flush: a chunk that produced no write (its
    /// rows refused, or held in memory), or a run carried into a segment whose header
    /// names the cursor ([`StateDir::spill_carried`]: a start finds it there already).
    /// If that fails it stays owed, as a group's cursor does: no read goes back before it
    /// (read again, held rows would be in memory twice), and the next group's end makes
    /// it durable first.
    pub fn commit_replay(&mut self, cursor: Option<Cursor>) -> io::Result<()> {
        let committed = self.spill.commit(cursor);
        if self.spill.durable() < cursor {
            self.owed_cursor = self.owed_cursor.max(cursor);
        }
        // Rounds that only carry held rows or refusals write no group, so no end would
        // delete what they passed: done here when no group is open.
        self.delete_passed_segments();
        committed
    }

    /// Reads spilled records from the replay cursor on, one at a time, as `take` takes,
    /// refuses or declines them (see [`Spill::read`](super::Spill::read)). Unreadable lines are copied to
    /// `spill.corrupt.jsonl` (or, when that fails, only counted); returns what the read
    /// passed over, the unreadable lines counted once, and the error that ended it early.
    pub fn read_spill(&mut self, take: impl FnMut(SegmentId, WriteRecord) -> Took) -> Passed {
        let passed = self.spill.read(take);
        if self.spill.taken_since_open() {
            // Past the run of refusals found at open: no line of it is needed any more.
            self.logged_refusals = None;
        }
        if let Err(error) = self.set_corrupt_aside(&passed.corrupt) {
            tracing::error!(%error, lines = passed.corrupt.len(), "Could not copy unreadable spill lines to spill.corrupt.jsonl; they are counted, and passed over.");
        }
        passed
    }

    /// Reads the next replay chunk whole (see [`Spill::load`](super::Spill::load)); unreadable lines are
    /// copied to `spill.corrupt.jsonl` and returned counted. For tests and audits: the
    /// flusher streams with [`StateDir::read_spill`].
    pub fn load_spill(
        &mut self,
        more: impl FnMut(usize, &WriteRecord) -> bool,
    ) -> io::Result<Chunk> {
        let chunk = self.spill.load(more)?;
        self.set_corrupt_aside(&chunk.corrupt)?;
        Ok(chunk)
    }

    fn set_corrupt_aside(&self, lines: &[String]) -> io::Result<()> {
        if !lines.is_empty() {
            let mut log = JsonlLog::open(self.dir.join("spill.corrupt.jsonl"), u64::MAX, 1)?;
            for line in lines {
                log.append(&serde_json::json!({ "unparsed": line }))?;
            }
            log.sync()?;
        }
        Ok(())
    }
}
