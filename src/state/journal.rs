//! The write-ahead intent journal (`journal.wal`): what a flush is about to send, durable
//! before it sends anything, and how each request ended.
//!
//! # One group per flush
//!
//! ```text
//! Begin (writer, incarnation, flush_seq, replay cursor consumed, family dictionary,
//!        start nonce)
//! Intent × n (request index, family, table, key, shard, rows: bucket + deltas, epoch)
//! Committed                          ── one write + fdatasync: the group commit ──
//! StartsBelow (first window)         in the same write, when the writer sends in windows
//! Outcome × n                        as requests settle (no fsync: see below)
//! StartsBelow (next window)          fdatasync, before the first request of that window starts
//! LogsAt (sizes of the outcome logs before this flush appends to them; fdatasync)
//! End                                then the file is truncated
//! ```
//!
//! A flush with `writer_totals` families writes a second group after the first ends: the
//! same header, then one `TotalsIntent` per write of running totals (writer column, write
//! time, rows: bucket, absolute totals, and the part of them not known applied), the
//! group commit, `Outcome`s (only `applied` is recorded), `End`. Such a write is idempotent
//! by its write time: recovery never logs it as unknown, it writes every intent not known
//! applied to a totals replay file, and the next start writes it again with its own
//! writer column and write time, which leaves the cell as it is if it had applied (see
//! `crate::totals::recovery`).
//!
//! # Start windows
//!
//! A request with an intent but no outcome may have been sent before a crash; recovery
//! logs it as unknown and never sends it. A large flush starts its requests a few at a
//! time, so most of them would be logged so without ever having left the process. The
//! counter flush therefore records, durably and before starting request `i` at or past
//! the last bound, a new bound `StartsBelow(i + window)`: recovery knows that a request
//! at or past the last bound recorded was never started and spills it. One fdatasync
//! per window (the first window rides on the group commit). A group without the record
//! (other writers, older versions) means every request may have started.
//!
//! Nothing is sent before the group commit returns, so a request without an intent was
//! never sent. Outcome records need no fsync of their own: a missing outcome only makes
//! recovery more conservative (the request is logged as unknown, `in_flight_at_crash`),
//! never less, because recovery acts on an outcome only when it states a fact that
//! allows it (applied, or definitely not applied).
//!
//! # Format
//!
//! Each record is a frame: `u32` payload length, `u32` CRC32C of the payload, payload
//! (little-endian integers, strings and byte strings length-prefixed). Every write is
//! followed by an end mark (an empty frame: eight zero bytes) that the next write
//! overwrites. Reading stops at the end mark, or at the first frame that is short or
//! fails its checksum (a torn tail after a crash); the next write starts there.
//!
//! # Cost
//!
//! The file is zero-filled to 4 MiB once and then overwritten from the start by every
//! flush, never truncated: on ext4 and XFS an `fdatasync` of blocks that are already
//! allocated and written flushes the data alone, while appending to a truncated file
//! also commits the filesystem's journal (block allocation, file size) on every flush.
//! A flush larger than the file grows it once, to its high-water mark.
//!
//! # The driver wrapper's flushes
//!
//! A wrapper flush writes the same group with its own header and intents (the
//! application's tables, not families): `WrapperBegin` (writer, incarnation, flush_seq,
//! the spill's replay cursor consumed, table dictionary), `WrapperIntent` × n
//! (request index, table, rows: the wrapper's row key + deltas), `Committed`, the same
//! `Outcome` records, `WrapperLogsAt` (sizes of its logs), `End`. Such a group is
//! read into [`FlushGroup::wrapper`] and recovered by the wrapper, never by the
//! sidecar's recovery. The wrapper spills into the same segments as the sidecar, so its
//! group names its cursor in [`FlushGroup::consumes`] like any other; a group an earlier
//! version wrote (its own header tag) names a byte offset of that version's
//! `wrapper_spill.jsonl` instead ([`WrapperGroup::legacy_spill_offset`]).
//!
//! A request id is `writer/incarnation.nonce/flush_seq/request` (the start nonce in hex;
//! `writer/incarnation/flush_seq/request` in groups of earlier versions): unique per
//! writer even when two processes share a writer id, carried by every record written for
//! that request (outcome logs, spill, the outcomes table).

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::sink::PartitionWrite;
use crate::vocabulary::Granularity;

use super::ids::{Cursor, SegmentId};
pub use super::ids::{FamilyEntry, FlushId};

/// One destination row of an intent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntentRow {
    /// The minute (minute table) or day (day table), counted from the epoch.
    pub bucket: u32,
    /// One delta per counter column of the family.
    pub deltas: Vec<i64>,
}

/// One request a flush will send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Intent {
    /// Its index within the flush (the last part of the request id).
    pub request: u32,
    /// The family's id (see the group's dictionary).
    pub family: u16,
    /// Which of the family's tables.
    pub table: Granularity,
    /// The shard, for sharded families.
    pub shard: Option<u8>,
    /// The epoch, for families with an epoch column.
    pub epoch: Option<i32>,
    /// The encoded series (key values).
    pub series: Vec<u8>,
    /// The rows, all in one partition.
    pub rows: Vec<IntentRow>,
}

/// One row of a totals intent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TotalsIntentRow {
    /// The minute (minute table) or day (day table), counted from the epoch.
    pub bucket: u32,
    /// The writer's absolute totals, one per value column of the family.
    pub totals: Vec<i64>,
    /// The part of each total not known applied when the write was planned: what the
    /// accounting still owes the store.
    pub unconfirmed: Vec<i64>,
}

/// One write of running totals (`writer_totals`) a flush will send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TotalsIntent {
    /// Its index within the flush (numbered after the flush's counter writes).
    pub request: u32,
    /// The family's id (see the group's dictionary).
    pub family: u16,
    /// Which of the family's tables.
    pub table: Granularity,
    /// The writer column (writer id, incarnation, start nonce).
    pub writer: String,
    /// The write time (`USING TIMESTAMP`), microseconds.
    pub timestamp: i64,
    /// The encoded series (key values).
    pub series: Vec<u8>,
    /// The rows, all in one partition.
    pub rows: Vec<TotalsIntentRow>,
}

/// How a request ended, as far as the journal knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settled {
    /// The store acknowledged it.
    Applied,
    /// Definitely not applied; re-queued in memory (or spilled).
    NotApplied {
        /// Error kind.
        kind: String,
        /// Error text.
        text: String,
    },
    /// Refused permanently (not applied).
    Rejected {
        /// Error kind.
        kind: String,
        /// Error text.
        text: String,
    },
    /// It may or may not have applied.
    Unknown {
        /// Error kind.
        kind: String,
        /// Error text.
        text: String,
    },
    /// Never sent (the deadline passed first).
    NotStarted,
    /// Not applied, and its rows were dropped (counted) because the spill could not take
    /// them.
    Dropped,
}

impl Settled {
    /// What the journal records for an answer of the store.
    pub fn of(outcome: &crate::sink::Outcome) -> Settled {
        use crate::sink::Outcome;
        let error = |e: &crate::sink::WriteError| (e.kind.to_owned(), e.text.to_string());
        match outcome {
            Outcome::Applied => Settled::Applied,
            Outcome::NotAppliedTransient(e) => {
                let (kind, text) = error(e);
                Settled::NotApplied { kind, text }
            }
            Outcome::NotAppliedPermanent(e) => {
                let (kind, text) = error(e);
                Settled::Rejected { kind, text }
            }
            Outcome::Unknown(e) => {
                let (kind, text) = error(e);
                Settled::Unknown { kind, text }
            }
        }
    }
}

/// A table of the driver wrapper's flush, as the journal names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrapperTable {
    /// Its number in the flush's row keys.
    pub id: u32,
    /// The keyspace.
    pub keyspace: String,
    /// The table.
    pub name: String,
    /// Key columns, partition then clustering (the order of the values in a row key).
    pub key_columns: Vec<String>,
    /// Counter columns, in delta order.
    pub counters: Vec<String>,
}

/// One row of a wrapper intent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrapperRow {
    /// The wrapper's row key (table number, then the key values), opaque here.
    pub key: Vec<u8>,
    /// One delta per counter column of the table.
    pub deltas: Vec<i64>,
}

/// One request of a wrapper flush: rows of one partition of one table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrapperIntent {
    /// Its index within the flush.
    pub request: u32,
    /// The table's number (see [`WrapperGroup::tables`]).
    pub table: u32,
    /// The rows.
    pub rows: Vec<WrapperRow>,
}

/// The requests a wrapper flush hands to its group commit: per request, its table's
/// number and its rows (row key, deltas).
pub type WrapperIntents<'a> = [(u32, Vec<(&'a [u8], &'a [i64])>)];

/// What a wrapper flush's group holds besides the common parts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WrapperGroup {
    /// In a group an earlier version wrote: how far that version's spill replay had
    /// loaded rows into the buffer when this flush drained it (a byte offset of its
    /// `wrapper_spill.jsonl`, which the spill migrates into a segment at start). A group
    /// of this version names a cursor in [`FlushGroup::consumes`] instead.
    pub legacy_spill_offset: Option<u64>,
    /// The tables its intents refer to.
    pub tables: Vec<WrapperTable>,
    /// Its requests.
    pub intents: Vec<WrapperIntent>,
    /// Sizes of `unknown.jsonl` and `rejected.jsonl` before this flush appended to them,
    /// and a third that only groups of earlier versions fill (their `wrapper_spill.jsonl`;
    /// a spill segment names its flush, so the size is not needed any more). In a group
    /// of an even earlier version, the first two are of the wrapper's own
    /// `wrapper_unknown.jsonl` and `wrapper_rejected.jsonl`: its recovery also looks in
    /// those files.
    pub logs_at: Option<[u64; 3]>,
}

impl WrapperGroup {
    /// The table numbered `id`.
    pub fn table(&self, id: u32) -> Option<&WrapperTable> {
        self.tables.iter().find(|t| t.id == id)
    }
}

/// One flush as read back from the journal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlushGroup {
    /// Who sent it.
    pub flush: FlushId,
    /// When it began, RFC 3339.
    pub time: String,
    /// How far the spill replay had loaded rows into the buffer when this flush drained
    /// it: those rows are in this flush's intents.
    pub consumes: Option<Cursor>,
    /// The families its intents refer to.
    pub families: Vec<FamilyEntry>,
    /// Its requests.
    pub intents: Vec<Intent>,
    /// Its writes of running totals (a totals group).
    pub totals: Vec<TotalsIntent>,
    /// Whether the group commit completed (without it, nothing was sent).
    pub committed: bool,
    /// The last outcome recorded per request index.
    pub outcomes: HashMap<u32, Settled>,
    /// Sizes of `unknown.jsonl` and `rejected.jsonl` before this flush appended to them.
    pub logs_at: Option<(u64, u64)>,
    /// Whether the flush settled every request (its records are all durable).
    pub ended: bool,
    /// A driver wrapper's flush: its tables and requests (`intents` is then empty).
    pub wrapper: Option<WrapperGroup>,
    /// Requests at or past this index were never started (see the module's start
    /// windows); `None` when the group records no bound: every request may have started.
    pub starts_below: Option<u32>,
}

impl FlushGroup {
    /// A group as its header starts it: nothing committed, sent or settled yet.
    fn begun(flush: FlushId, time: String) -> FlushGroup {
        FlushGroup {
            flush,
            time,
            consumes: None,
            families: Vec::new(),
            intents: Vec::new(),
            totals: Vec::new(),
            committed: false,
            outcomes: HashMap::new(),
            logs_at: None,
            ended: false,
            wrapper: None,
            starts_below: None,
        }
    }

    /// Whether request `index` certainly never left the process.
    pub fn never_started(&self, index: u32) -> bool {
        self.starts_below.is_some_and(|bound| index >= bound)
    }

    /// The family entry of an intent.
    pub fn family(&self, id: u16) -> Option<&FamilyEntry> {
        self.families.iter().find(|f| f.id == id)
    }
}

const BEGIN: u8 = 1;
const INTENT: u8 = 2;
const COMMITTED: u8 = 3;
const OUTCOME: u8 = 4;
const LOGS_AT: u8 = 5;
const END: u8 = 6;
const TOTALS_INTENT: u8 = 7;
const WRAPPER_BEGIN: u8 = 8;
const WRAPPER_INTENT: u8 = 9;
const WRAPPER_LOGS_AT: u8 = 10;
const STARTS_BELOW: u8 = 11;
/// A wrapper flush's header naming a spill cursor (`WRAPPER_BEGIN` named an offset of
/// the wrapper's own spill file, before the wrapper spilled into segments).
const WRAPPER_BEGIN_CURSOR: u8 = 12;

const NO_SHARD: u16 = u16::MAX;

/// What a wrapper flush's header names of the spill.
#[derive(Clone, Copy)]
enum SpillAt {
    /// The replay cursor its group consumes.
    Cursor(Option<Cursor>),
    /// An offset of an earlier version's `wrapper_spill.jsonl` (only written by tests).
    #[cfg(test)]
    LegacyOffset(Option<u64>),
}

/// The end mark: an empty frame (length 0, and 0 is the CRC32C of nothing).
const END_MARK: [u8; 8] = [0; 8];

/// Size the file is zero-filled to once, so that flushes overwrite allocated blocks.
const PREALLOCATED: u64 = 4 << 20;

/// Buffered outcome records are written once they pass this size (and when sending
/// ends): a kill loses at most these from the page cache's view, which only makes
/// recovery log those requests as unknown.
const OUTCOME_BATCH: usize = 16 << 10;

/// The journal file.
pub struct Journal {
    path: PathBuf,
    file: File,
    /// Where the next write goes.
    offset: u64,
    /// Frames waiting to be written (outcome records are batched).
    pending: Vec<u8>,
    /// Requests a counter flush starts per recorded bound (see the start windows);
    /// `None`: no bounds are recorded.
    start_window: Option<u32>,
    /// The open counter group's requests, and the bound recorded for them.
    starts: Option<(u32, u32)>,
    /// Keep ended groups in the file (the codec's unit tests read several back; the
    /// product always starts over).
    #[cfg(test)]
    keep: bool,
}

impl Journal {
    /// Opens (creating if needed) the journal and reads every group in it. Returns the
    /// journal, its groups (oldest first), and the length of a torn tail cut off (bytes
    /// after the last readable record that are not an end mark).
    pub fn open(path: PathBuf) -> io::Result<(Journal, Vec<FlushGroup>, u64)> {
        let mut file = super::private::options()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let (groups, valid) = parse(&bytes);
        let torn = torn_tail(&bytes, valid);
        file.write_all_at(&END_MARK, valid as u64)?;
        let len = bytes.len() as u64;
        if len < PREALLOCATED {
            let zeros = vec![0_u8; 64 << 10];
            let mut at = len.max(valid as u64 + END_MARK.len() as u64);
            while at < PREALLOCATED {
                let n = zeros.len().min((PREALLOCATED - at) as usize);
                file.write_all_at(&zeros[..n], at)?;
                at += n as u64;
            }
        }
        file.sync_all()?;
        Ok((
            Journal {
                path,
                file,
                offset: valid as u64,
                pending: Vec::new(),
                start_window: None,
                starts: None,
                #[cfg(test)]
                keep: false,
            },
            groups,
            torn,
        ))
    }

    /// Writes `frames` at the current offset, followed by the end mark.
    fn write(&mut self, frames: &[u8]) -> io::Result<()> {
        self.file.write_all_at(frames, self.offset)?;
        self.offset += frames.len() as u64;
        self.file.write_all_at(&END_MARK, self.offset)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Counter flushes (the sidecar's and the driver wrapper's) from now on start their
    /// requests in windows of `window` (at least 1), each window's bound durable before
    /// its first request starts.
    pub fn set_start_window(&mut self, window: u32) {
        self.start_window = Some(window.max(1));
    }

    /// Before request `index` of the open counter group starts: records the next
    /// window's bound, durably, when `index` is at or past the last one. `Err`: the
    /// request must not start (recovery would take it for never started).
    pub fn may_start(&mut self, index: u32) -> io::Result<()> {
        let (Some(window), Some((requests, bound))) = (self.start_window, self.starts) else {
            return Ok(());
        };
        if index < bound {
            return Ok(());
        }
        let next = index.saturating_add(window).min(requests);
        frame(&mut self.pending, |e| {
            e.u8(STARTS_BELOW);
            e.u32(next);
        });
        self.flush_pending()?;
        self.file.sync_data()?;
        self.starts = Some((requests, next));
        Ok(())
    }

    /// The group commit: writes the flush's header and one intent per write, and makes
    /// them durable. Nothing of this flush may be sent before it returns `Ok`.
    pub fn begin(
        &mut self,
        flush: &FlushId,
        time: &str,
        consumes: Option<Cursor>,
        families: &[FamilyEntry],
        writes: &[PartitionWrite],
    ) -> io::Result<()> {
        let requests = Some(u32::try_from(writes.len()).unwrap_or(u32::MAX));
        let header = |e: &mut Enc<'_>| family_header(e, flush, time, consumes, families);
        self.commit_group(requests, header, |out| {
            for (index, write) in writes.iter().enumerate() {
                frame(out, |e| {
                    e.u8(INTENT);
                    e.u32(index as u32);
                    e.u16(write.family.0);
                    e.u8(write.table.index() as u8);
                    e.u16(write.shard.map_or(NO_SHARD, u16::from));
                    e.bytes(&write.series);
                    e.u32(write.rows.len() as u32);
                    for row in &write.rows {
                        e.u32(row.bucket);
                        e.deltas(row.columns.as_slice());
                    }
                    // Last, and only when there is one: intents written before epochs
                    // existed read the same.
                    if let Some(epoch) = write.epoch {
                        e.i64(i64::from(epoch));
                    }
                });
            }
        })
    }

    /// The group commit of a flush's writes of running totals (a second group, after
    /// the counter writes' group ended). Nothing of them may be sent before it returns
    /// `Ok`.
    pub fn begin_totals(
        &mut self,
        flush: &FlushId,
        time: &str,
        families: &[FamilyEntry],
        intents: &[TotalsIntent],
    ) -> io::Result<()> {
        let header = |e: &mut Enc<'_>| family_header(e, flush, time, None, families);
        self.commit_group(None, header, |out| {
            for intent in intents {
                frame(out, |e| {
                    e.u8(TOTALS_INTENT);
                    e.u32(intent.request);
                    e.u16(intent.family);
                    e.u8(intent.table.index() as u8);
                    e.str(&intent.writer);
                    e.i64(intent.timestamp);
                    e.bytes(&intent.series);
                    e.u32(intent.rows.len() as u32);
                    for row in &intent.rows {
                        e.u32(row.bucket);
                        e.u16(row.totals.len() as u16);
                        for (total, unconfirmed) in row.totals.iter().zip(&row.unconfirmed) {
                            e.i64(*total);
                            e.i64(*unconfirmed);
                        }
                    }
                });
            }
        })
    }

    /// The group commit every kind of flush shares: its header frame (`header` writes
    /// it), its intents (`intents` appends their frames), the commit mark and, for a
    /// flush of `requests` requests that start in windows, the first window's bound, with
    /// one `fdatasync`.
    fn commit_group(
        &mut self,
        requests: Option<u32>,
        header: impl FnOnce(&mut Enc<'_>),
        intents: impl FnOnce(&mut Vec<u8>),
    ) -> io::Result<()> {
        let first = requests.and_then(|n| self.start_window.map(|window| window.min(n)));
        self.starts = None;
        self.flush_pending()?;
        let mut out = std::mem::take(&mut self.pending);
        frame(&mut out, header);
        intents(&mut out);
        self.commit_frames(out, first)?;
        self.starts = requests.zip(first);
        Ok(())
    }

    /// The group commit of a driver wrapper's flush: its header, one intent per request
    /// (`intents`: request table and rows), made durable. Nothing of this flush may be
    /// sent before it returns `Ok`.
    pub fn begin_wrapper(
        &mut self,
        flush: &FlushId,
        time: &str,
        consumes: Option<Cursor>,
        tables: &[WrapperTable],
        intents: &WrapperIntents<'_>,
    ) -> io::Result<()> {
        self.wrapper_group(flush, time, SpillAt::Cursor(consumes), tables, intents)
    }

    /// A group as an earlier version wrote it, naming an offset of its own spill file
    /// (the tests of reading such journals).
    #[cfg(test)]
    pub(super) fn begin_wrapper_of_an_earlier_version(
        &mut self,
        flush: &FlushId,
        offset: Option<u64>,
        tables: &[WrapperTable],
        intents: &WrapperIntents<'_>,
    ) -> io::Result<()> {
        self.wrapper_group(flush, "t", SpillAt::LegacyOffset(offset), tables, intents)
    }

    fn wrapper_group(
        &mut self,
        flush: &FlushId,
        time: &str,
        spill: SpillAt,
        tables: &[WrapperTable],
        intents: &WrapperIntents<'_>,
    ) -> io::Result<()> {
        let requests = Some(u32::try_from(intents.len()).unwrap_or(u32::MAX));
        let header = |e: &mut Enc<'_>| {
            match spill {
                SpillAt::Cursor(_) => e.u8(WRAPPER_BEGIN_CURSOR),
                #[cfg(test)]
                SpillAt::LegacyOffset(_) => e.u8(WRAPPER_BEGIN),
            }
            e.flush_id(flush);
            e.str(time);
            match spill {
                SpillAt::Cursor(consumes) => e.cursor(consumes),
                #[cfg(test)]
                SpillAt::LegacyOffset(offset) => e.option_u64(offset),
            }
            e.u32(tables.len() as u32);
            for t in tables {
                e.u32(t.id);
                e.str(&t.keyspace);
                e.str(&t.name);
                e.strs(&t.key_columns);
                e.strs(&t.counters);
            }
        };
        self.commit_group(requests, header, |out| {
            for (index, (table, rows)) in intents.iter().enumerate() {
                frame(out, |e| {
                    e.u8(WRAPPER_INTENT);
                    e.u32(index as u32);
                    e.u32(*table);
                    e.u32(rows.len() as u32);
                    for (key, deltas) in rows {
                        e.bytes(key);
                        e.deltas(deltas);
                    }
                });
            }
        })
    }

    /// Ends a group's frames (header and intents) with the commit mark and the first
    /// start window's bound, writes them and syncs: the group commit. The bound follows
    /// the mark, so that a reader that does not know it still finds the group committed.
    fn commit_frames(&mut self, mut out: Vec<u8>, starts_below: Option<u32>) -> io::Result<()> {
        frame(&mut out, |e| e.u8(COMMITTED));
        if let Some(bound) = starts_below {
            frame(&mut out, |e| {
                e.u8(STARTS_BELOW);
                e.u32(bound);
            });
        }
        let start = self.offset;
        let written = self.write(&out).and_then(|()| self.file.sync_data());
        if written.is_err() {
            // Nothing of this flush is sent: the group must not look committed to a later
            // recovery, so the next write starts where it began, behind an end mark.
            self.offset = start;
            let _ = self.file.write_all_at(&END_MARK, start);
        }
        out.clear();
        self.pending = out;
        written
    }

    /// Records how a request ended. Buffered: written once the buffer passes 16 KiB, by
    /// [`Journal::flush_pending`], or with the next record that must be durable; never
    /// synced on its own.
    pub fn outcome(&mut self, request: u32, settled: &Settled) {
        frame(&mut self.pending, |e| {
            e.u8(OUTCOME);
            e.u32(request);
            let (code, error) = match settled {
                Settled::Applied => (0, None),
                Settled::NotApplied { kind, text } => (1, Some((kind, text))),
                Settled::Rejected { kind, text } => (2, Some((kind, text))),
                Settled::Unknown { kind, text } => (3, Some((kind, text))),
                Settled::NotStarted => (4, None),
                Settled::Dropped => (5, None),
            };
            e.u8(code);
            let (kind, text) = error.map_or(("", ""), |(k, t)| (k.as_str(), t.as_str()));
            e.str(kind);
            e.str(text);
        });
        if self.pending.len() >= OUTCOME_BATCH
            && let Err(error) = self.flush_pending()
        {
            tracing::warn!(%error, "Could not write outcome records to the journal; a crash now would log those requests as unknown.");
        }
    }

    /// Writes buffered outcome records to the file (not synced).
    pub fn flush_pending(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending);
        let result = self.write(&pending);
        self.pending = pending;
        self.pending.clear();
        result
    }

    /// Records the sizes of the outcome logs before this flush appends to them, durably:
    /// recovery reads the logs from there to find what was already written.
    pub fn logs_at(&mut self, unknown: u64, rejected: u64) -> io::Result<()> {
        frame(&mut self.pending, |e| {
            e.u8(LOGS_AT);
            e.u64(unknown);
            e.u64(rejected);
        });
        self.flush_pending()?;
        self.file.sync_data()
    }

    /// Records the sizes of the driver wrapper's three logs before its flush appends to
    /// them, durably (see [`WrapperGroup::logs_at`]).
    pub fn logs_at_wrapper(&mut self, sizes: [u64; 3]) -> io::Result<()> {
        frame(&mut self.pending, |e| {
            e.u8(WRAPPER_LOGS_AT);
            for size in sizes {
                e.u64(size);
            }
        });
        self.flush_pending()?;
        self.file.sync_data()
    }

    /// Keeps ended groups in the file (the codec's unit tests only).
    #[cfg(test)]
    pub(super) fn set_keep(&mut self, keep: bool) {
        self.keep = keep;
    }

    /// Marks the flush settled, then starts the journal over.
    pub fn end(&mut self, flush_seq: u64) -> io::Result<()> {
        self.starts = None;
        frame(&mut self.pending, |e| {
            e.u8(END);
            e.u64(flush_seq);
        });
        self.flush_pending()?;
        #[cfg(test)]
        if self.keep {
            return Ok(());
        }
        // An end mark at the start, not synced: the next group commit's fdatasync makes
        // it durable with that group, and a journal that comes back whole is read as
        // settled (it ends with End).
        self.offset = 0;
        self.file.write_all_at(&END_MARK, 0)?;
        Ok(())
    }
}

/// Reads a journal file: its groups, oldest first (tests and audits).
pub fn read(path: &Path) -> io::Result<Vec<FlushGroup>> {
    let bytes = std::fs::read(path)?;
    Ok(parse(&bytes).0)
}

/// Reads a journal file without changing it (a tool beside a running sidecar): its
/// groups, oldest first, and the length of a torn tail after the last readable record,
/// as [`Journal::open`] counts it.
pub fn read_with_torn_tail(path: &Path) -> io::Result<(Vec<FlushGroup>, u64)> {
    let bytes = std::fs::read(path)?;
    let (groups, valid) = parse(&bytes);
    Ok((groups, torn_tail(&bytes, valid)))
}

/// Bytes after the valid prefix that are not an end mark: a torn record (the count
/// [`Journal::open`] makes).
fn torn_tail(bytes: &[u8], valid: usize) -> u64 {
    let after = &bytes[valid..bytes.len().min(valid + 8)];
    if after.iter().all(|b| *b == 0) {
        0
    } else {
        (bytes.len() - valid) as u64
    }
}

/// Parses frames until the end or the first bad one; returns the groups and the length
/// of the valid prefix.
fn parse(bytes: &[u8]) -> (Vec<FlushGroup>, usize) {
    let mut groups: Vec<FlushGroup> = Vec::new();
    let mut pos = 0;
    while let Some((payload, next)) = next_frame(bytes, pos) {
        if apply(&mut groups, payload).is_none() {
            break;
        }
        pos = next;
    }
    (groups, pos)
}

fn next_frame(bytes: &[u8], pos: usize) -> Option<(&[u8], usize)> {
    let header = bytes.get(pos..pos + 8)?;
    let len = u32::from_le_bytes(header[..4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(header[4..8].try_into().ok()?);
    let payload = bytes.get(pos + 8..pos + 8 + len)?;
    (crc32c::crc32c(payload) == crc).then_some((payload, pos + 8 + len))
}

/// Applies one record to the groups read so far; `None` for a record that cannot be read
/// (treated like a torn tail).
fn apply(groups: &mut Vec<FlushGroup>, payload: &[u8]) -> Option<()> {
    let mut d = Dec { b: payload, pos: 0 };
    let tag = d.u8()?;
    match tag {
        BEGIN => {
            let flush = d.flush_id()?;
            let time = d.str()?;
            let consumes = d.cursor()?;
            let mut families = Vec::new();
            for _ in 0..d.u32()? {
                families.push(FamilyEntry {
                    id: d.u16()?,
                    name: d.str()?,
                    minute_table: d.str()?,
                    day_table: d.str()?,
                    key_columns: d.strs()?,
                    columns: d.strs()?,
                });
            }
            let mut flush = flush;
            flush.nonce = match d.remaining() {
                0 => None,
                _ => Some(d.u32()?),
            };
            groups.push(FlushGroup {
                consumes,
                families,
                ..FlushGroup::begun(flush, time)
            });
        }
        WRAPPER_BEGIN | WRAPPER_BEGIN_CURSOR => {
            let flush = d.flush_id()?;
            let time = d.str()?;
            let (consumes, legacy_spill_offset) = if tag == WRAPPER_BEGIN_CURSOR {
                (d.cursor()?, None)
            } else {
                (None, d.option_u64()?)
            };
            let mut tables = Vec::new();
            for _ in 0..d.u32()? {
                tables.push(WrapperTable {
                    id: d.u32()?,
                    keyspace: d.str()?,
                    name: d.str()?,
                    key_columns: d.strs()?,
                    counters: d.strs()?,
                });
            }
            groups.push(FlushGroup {
                consumes,
                wrapper: Some(WrapperGroup {
                    legacy_spill_offset,
                    tables,
                    intents: Vec::new(),
                    logs_at: None,
                }),
                ..FlushGroup::begun(flush, time)
            });
        }
        WRAPPER_INTENT => {
            let request = d.u32()?;
            let table = d.u32()?;
            let mut rows = Vec::new();
            for _ in 0..d.u32()? {
                let key = d.bytes()?.to_vec();
                let deltas = d.deltas()?;
                rows.push(WrapperRow { key, deltas });
            }
            groups
                .last_mut()?
                .wrapper
                .as_mut()?
                .intents
                .push(WrapperIntent {
                    request,
                    table,
                    rows,
                });
        }
        WRAPPER_LOGS_AT => {
            let at = [d.u64()?, d.u64()?, d.u64()?];
            groups.last_mut()?.wrapper.as_mut()?.logs_at = Some(at);
        }
        INTENT => {
            let request = d.u32()?;
            let family = d.u16()?;
            let table = d.granularity()?;
            let shard = match d.u16()? {
                NO_SHARD => None,
                s => Some(u8::try_from(s).ok()?),
            };
            let series = d.bytes()?.to_vec();
            let mut rows = Vec::new();
            for _ in 0..d.u32()? {
                let bucket = d.u32()?;
                let deltas = d.deltas()?;
                rows.push(IntentRow { bucket, deltas });
            }
            let epoch = match d.remaining() {
                0 => None,
                _ => Some(i32::try_from(d.i64()?).ok()?),
            };
            groups.last_mut()?.intents.push(Intent {
                request,
                family,
                table,
                shard,
                epoch,
                series,
                rows,
            });
        }
        TOTALS_INTENT => {
            let request = d.u32()?;
            let family = d.u16()?;
            let table = d.granularity()?;
            let writer = d.str()?;
            let timestamp = d.i64()?;
            let series = d.bytes()?.to_vec();
            let mut rows = Vec::new();
            for _ in 0..d.u32()? {
                let bucket = d.u32()?;
                let width = usize::from(d.u16()?);
                let (mut totals, mut unconfirmed) =
                    (Vec::with_capacity(width), Vec::with_capacity(width));
                for _ in 0..width {
                    totals.push(d.i64()?);
                    unconfirmed.push(d.i64()?);
                }
                rows.push(TotalsIntentRow {
                    bucket,
                    totals,
                    unconfirmed,
                });
            }
            groups.last_mut()?.totals.push(TotalsIntent {
                request,
                family,
                table,
                writer,
                timestamp,
                series,
                rows,
            });
        }
        COMMITTED => groups.last_mut()?.committed = true,
        STARTS_BELOW => {
            let bound = d.u32()?;
            let group = groups.last_mut()?;
            group.starts_below = group.starts_below.max(Some(bound));
        }
        OUTCOME => {
            let request = d.u32()?;
            let code = d.u8()?;
            let (kind, text) = (d.str()?, d.str()?);
            let settled = match code {
                0 => Settled::Applied,
                1 => Settled::NotApplied { kind, text },
                2 => Settled::Rejected { kind, text },
                3 => Settled::Unknown { kind, text },
                4 => Settled::NotStarted,
                5 => Settled::Dropped,
                _ => return None,
            };
            groups.last_mut()?.outcomes.insert(request, settled);
        }
        LOGS_AT => {
            let at = (d.u64()?, d.u64()?);
            groups.last_mut()?.logs_at = Some(at);
        }
        END => {
            let seq = d.u64()?;
            let group = groups.last_mut()?;
            if group.flush.flush_seq != seq {
                return None;
            }
            group.ended = true;
        }
        _ => return None,
    }
    Some(())
}

/// Appends one frame whose payload `fill` writes.
/// The header of a sidecar flush's group (its counter writes, or its writes of running
/// totals): who sent it, when, the replay cursor it consumes and its family dictionary.
fn family_header(
    e: &mut Enc<'_>,
    flush: &FlushId,
    time: &str,
    consumes: Option<Cursor>,
    families: &[FamilyEntry],
) {
    e.u8(BEGIN);
    e.flush_id(flush);
    e.str(time);
    e.cursor(consumes);
    e.u32(families.len() as u32);
    for f in families {
        e.u16(f.id);
        e.str(&f.name);
        e.str(&f.minute_table);
        e.str(&f.day_table);
        e.strs(&f.key_columns);
        e.strs(&f.columns);
    }
    // Last, and only when there is one: headers written before start nonces existed
    // read the same.
    if let Some(nonce) = flush.nonce {
        e.u32(nonce);
    }
}

fn frame(out: &mut Vec<u8>, fill: impl FnOnce(&mut Enc<'_>)) {
    let start = out.len();
    out.extend_from_slice(&[0; 8]);
    fill(&mut Enc(out));
    let payload = &out[start + 8..];
    let (len, crc) = (payload.len() as u32, crc32c::crc32c(payload));
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

struct Enc<'a>(&'a mut Vec<u8>);

impl Enc<'_> {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, v: &[u8]) {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
    }
    fn str(&mut self, v: &str) {
        self.bytes(v.as_bytes());
    }
    fn strs(&mut self, v: &[String]) {
        self.u32(v.len() as u32);
        for s in v {
            self.str(s);
        }
    }
    fn flush_id(&mut self, flush: &FlushId) {
        self.str(&flush.writer);
        self.u64(flush.incarnation);
        self.u64(flush.flush_seq);
    }
    /// A row's deltas: their count (`u16`), then each.
    fn deltas(&mut self, deltas: &[i64]) {
        self.u16(deltas.len() as u16);
        for d in deltas {
            self.i64(*d);
        }
    }
    #[cfg(test)]
    fn option_u64(&mut self, v: Option<u64>) {
        match v {
            None => self.u8(0),
            Some(v) => {
                self.u8(1);
                self.u64(v);
            }
        }
    }
    fn cursor(&mut self, cursor: Option<Cursor>) {
        match cursor {
            None => self.u8(0),
            Some(c) => {
                self.u8(1);
                self.u64(c.segment.incarnation);
                self.u64(c.segment.flush_seq);
                // Bit 0: recovered; bit 1: a held segment (older journals never set it).
                self.u8(u8::from(c.segment.recovered) | (u8::from(c.segment.held) << 1));
                self.u64(c.offset);
            }
        }
    }
}

struct Dec<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Dec<'_> {
    fn remaining(&self) -> usize {
        self.b.len().saturating_sub(self.pos)
    }
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.b.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<&[u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn str(&mut self) -> Option<String> {
        String::from_utf8(self.bytes()?.to_vec()).ok()
    }
    fn strs(&mut self) -> Option<Vec<String>> {
        (0..self.u32()?).map(|_| self.str()).collect()
    }
    fn flush_id(&mut self) -> Option<FlushId> {
        Some(FlushId {
            writer: self.str()?,
            incarnation: self.u64()?,
            flush_seq: self.u64()?,
            // Read at the end of the header, where it is written (see `nonce`).
            nonce: None,
        })
    }
    fn deltas(&mut self) -> Option<Vec<i64>> {
        let width = self.u16()?;
        (0..width).map(|_| self.i64()).collect()
    }
    fn granularity(&mut self) -> Option<Granularity> {
        match self.u8()? {
            0 => Some(Granularity::Minute),
            1 => Some(Granularity::Day),
            _ => None,
        }
    }
    fn option_u64(&mut self) -> Option<Option<u64>> {
        Some(match self.u8()? {
            0 => None,
            _ => Some(self.u64()?),
        })
    }
    fn cursor(&mut self) -> Option<Option<Cursor>> {
        Some(match self.u8()? {
            0 => None,
            _ => Some(Cursor {
                segment: {
                    let incarnation = self.u64()?;
                    let flush_seq = self.u64()?;
                    let kind = self.u8()?;
                    SegmentId {
                        incarnation,
                        flush_seq,
                        recovered: kind & 1 != 0,
                        held: kind & 2 != 0,
                    }
                },
                offset: self.u64()?,
            }),
        })
    }
}

#[cfg(test)]
mod tests;
