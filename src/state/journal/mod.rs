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
//! # A kind's own group
//!
//! A kind of write that journals its intents itself (a counting mode's writes: running
//! totals are the first) writes a group of its own after the counter group ended: the
//! same header, then one [`KindIntent`] per request (the kind's record tag, the request
//! index, and a body only the kind reads), the group commit, `Outcome`s, `End`. The
//! journal keeps the body as bytes: recovery hands such a group to the kind's finisher
//! (`state::recovery::FinishKinds`), which reads the bodies and says what they still
//! owe.
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
//!
//! # Files
//!
//! This file holds the records a group is made of and their tags; `write.rs` the
//! append side ([`Journal`]: the group commit, start windows, outcomes, the end of a
//! group) and the frame encoder; `read.rs` reading back: the frame decoder and the
//! groups it yields ([`FlushGroup`], [`WrapperGroup`]).

use crate::vocabulary::Granularity;

pub use self::read::{FlushGroup, WrapperGroup, read, read_with_torn_tail};
pub use self::write::{Journal, WrapperIntents};
pub use super::ids::{FamilyEntry, FlushId};

pub(crate) mod codec;
mod read;
mod write;

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

/// Which kind of write a [`KindIntent`] belongs to: the tag of its records, which the
/// kind chooses once and keeps (it is in journals on disk). The journal leaves two sets
/// of tags to kinds: [`KindId::FIRST`], taken before the others were set aside, and
/// `64..=127` ([`KindId::new`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KindId(u8);

impl KindId {
    /// The first kind with a journal record of its own (running totals, `writer_totals`):
    /// its tag is 7, from before kinds were numbered, so journals written then read
    /// the same.
    pub const FIRST: KindId = KindId(7);

    /// The kind tagged `tag`, one of `64..=127`; `None` for any other tag (the journal's
    /// own records have those).
    pub const fn new(tag: u8) -> Option<KindId> {
        if 64 <= tag && tag <= 127 {
            Some(KindId(tag))
        } else {
            None
        }
    }

    /// The kind a record tag names, if it names one.
    fn of_tag(tag: u8) -> Option<KindId> {
        if tag == KindId::FIRST.0 {
            Some(KindId::FIRST)
        } else {
            KindId::new(tag)
        }
    }

    /// Its record tag.
    pub fn tag(self) -> u8 {
        self.0
    }
}

/// One request of a kind of write that journals its intents itself (a counting mode's
/// writes): the journal keeps its request index, for outcomes, and its body, which
/// only the kind reads and writes (with the journal's own encoding,
/// its `codec` module). Its record is the kind's tag, the request (`u32`), then the
/// body to the end of the frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindIntent {
    /// Which kind wrote it.
    pub kind: KindId,
    /// Its index within the flush (numbered after the flush's counter writes).
    pub request: u32,
    /// What the kind wrote of it.
    pub body: Vec<u8>,
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

// The record tags, the first byte of each frame's payload: `write.rs` writes them and
// `read.rs` reads them, so they are set down here, once.
const BEGIN: u8 = 1;
const INTENT: u8 = 2;
const COMMITTED: u8 = 3;
const OUTCOME: u8 = 4;
const LOGS_AT: u8 = 5;
const END: u8 = 6;
// 7: the first kind's intents (`KindId::FIRST`); 64 to 127: other kinds' (`KindId::new`).
const WRAPPER_BEGIN: u8 = 8;
const WRAPPER_INTENT: u8 = 9;
const WRAPPER_LOGS_AT: u8 = 10;
const STARTS_BELOW: u8 = 11;
/// A wrapper flush's header naming a spill cursor (`WRAPPER_BEGIN` named an offset of
/// the wrapper's own spill file, before the wrapper spilled into segments).
const WRAPPER_BEGIN_CURSOR: u8 = 12;
/// A counter flush's header whose families name all four tables (minute, day, hour,
/// total; empty where a family has none). Written only when some family has other
/// tables than a minute and a day table, so that journals of families without hour or
/// total tables read the same as before (`BEGIN`).
const BEGIN_TABLES: u8 = 13;

/// An intent's shard field when its family is not sharded.
const NO_SHARD: u16 = u16::MAX;

#[cfg(test)]
mod tests;
