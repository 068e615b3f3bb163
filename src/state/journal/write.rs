//! The append side of the journal: [`Journal`] opens the file, writes each group's
//! header and intents with one `fdatasync` (the group commit), records start windows'
//! bounds, outcomes, the outcome logs' sizes and the end of a group; and the frame
//! encoder they share. The format is described in the parent module.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::sink::PartitionWrite;
use crate::state::ids::Cursor;

#[cfg(test)]
use super::WRAPPER_BEGIN;
use super::codec::Enc;
use super::read::{FlushGroup, parse, torn_tail};
use super::{
    BEGIN, BEGIN_TABLES, COMMITTED, END, FamilyEntry, FlushId, INTENT, KindIntent, LOGS_AT,
    NO_SHARD, OUTCOME, STARTS_BELOW, Settled, WRAPPER_BEGIN_CURSOR, WRAPPER_INTENT,
    WRAPPER_LOGS_AT, WrapperTable,
};

/// The requests a wrapper flush hands to its group commit: per request, its table's
/// number and its rows (row key, deltas).
pub type WrapperIntents<'a> = [(u32, Vec<(&'a [u8], &'a [i64])>)];

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
pub(super) const PREALLOCATED: u64 = 4 << 20;

/// Buffered outcome records are written once they pass this size (and when sending
/// ends): a kill loses at most these from the page cache's view, which only makes
/// recovery log those requests as unknown.
const OUTCOME_BATCH: usize = 16 << 10;

/// The journal file.
pub struct Journal {
    path: PathBuf,
    file: File,
    /// Where the next write goes (the codec's unit tests read it too).
    pub(super) offset: u64,
    /// Frames waiting to be written (outcome records are batched).
    pending: Vec<u8>,
    /// Requests a counter flush starts per recorded bound (see the start windows);
    /// `None`: no bounds are recorded.
    start_window: Option<u32>,
    /// The open counter group's requests, and the bound recorded for them.
    starts: Option<(u32, u32)>,
    /// Whether the file's last group is open to records about it (outcomes, the logs'
    /// sizes): its group commit succeeded (in this process, or it is a group a start
    /// found unended) and its End was not written. A record written without one would
    /// attach to no group, which the reader stops at (every later group unread), or to
    /// an older group left open, under a request index of another flush.
    group_open: bool,
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
        let mut file = crate::state::private::options()
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
                group_open: groups.last().is_some_and(|g| g.committed && !g.ended),
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

    /// Makes every later write fail, as a full or failing disk would (tests).
    #[cfg(test)]
    pub(crate) fn fail_writes(&mut self) {
        self.file = File::open(&self.path).expect("the journal reopens read-only");
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

    /// The group commit of a kind of write that journals its own intents (a group of
    /// its own, after the counter writes' group ended), with the replay cursor it
    /// consumes. Nothing of them may be sent before it returns `Ok`.
    pub fn begin_kind(
        &mut self,
        flush: &FlushId,
        time: &str,
        consumes: Option<Cursor>,
        families: &[FamilyEntry],
        intents: &[KindIntent],
    ) -> io::Result<()> {
        let header = |e: &mut Enc<'_>| family_header(e, flush, time, consumes, families);
        self.commit_group(None, header, |out| {
            for intent in intents {
                frame(out, |e| {
                    e.u8(intent.kind.tag());
                    e.u32(intent.request);
                    e.0.extend_from_slice(&intent.body);
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
        // Until this commit succeeds, no group takes records: the one before it has had
        // its own, and this one may never exist.
        self.group_open = false;
        let mut out = std::mem::take(&mut self.pending);
        frame(&mut out, header);
        intents(&mut out);
        self.commit_frames(out, first)?;
        self.group_open = true;
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
    pub(in crate::state) fn begin_wrapper_of_an_earlier_version(
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
    /// synced on its own. Nothing is recorded without an open group (its group commit
    /// failed: nothing of it was sent, and nothing of it may be recorded).
    pub fn outcome(&mut self, request: u32, settled: &Settled) {
        if !self.group_open {
            return;
        }
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
    /// recovery reads the logs from there to find what was already written. Nothing is
    /// recorded without an open group (no group's records are in the appends).
    pub fn logs_at(&mut self, unknown: u64, rejected: u64) -> io::Result<()> {
        if !self.group_open {
            return Ok(());
        }
        frame(&mut self.pending, |e| {
            e.u8(LOGS_AT);
            e.u64(unknown);
            e.u64(rejected);
        });
        self.flush_pending()?;
        self.file.sync_data()
    }

    /// Records the sizes of the driver wrapper's three logs before its flush appends to
    /// them, durably (see [`WrapperGroup::logs_at`](super::WrapperGroup::logs_at)).
    pub fn logs_at_wrapper(&mut self, sizes: [u64; 3]) -> io::Result<()> {
        if !self.group_open {
            return Ok(());
        }
        frame(&mut self.pending, |e| {
            e.u8(WRAPPER_LOGS_AT);
            for size in sizes {
                e.u64(size);
            }
        });
        self.flush_pending()?;
        self.file.sync_data()
    }

    /// Whether the file's last group is committed and not ended (see `group_open`).
    pub(in crate::state) fn has_open_group(&self) -> bool {
        self.group_open
    }

    /// Keeps ended groups in the file (the codec's unit tests only).
    #[cfg(test)]
    pub(in crate::state) fn set_keep(&mut self, keep: bool) {
        self.keep = keep;
    }

    /// Marks the flush settled, then starts the journal over.
    pub fn end(&mut self, flush_seq: u64) -> io::Result<()> {
        self.starts = None;
        self.group_open = false;
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

/// The header of a sidecar flush's group (its counter writes, or its writes of running
/// totals): who sent it, when, the replay cursor it consumes and its family dictionary.
fn family_header(
    e: &mut Enc<'_>,
    flush: &FlushId,
    time: &str,
    consumes: Option<Cursor>,
    families: &[FamilyEntry],
) {
    let tables = families
        .iter()
        .any(|f| !f.hour_table.is_empty() || !f.total_table.is_empty());
    e.u8(if tables { BEGIN_TABLES } else { BEGIN });
    e.flush_id(flush);
    e.str(time);
    e.cursor(consumes);
    e.u32(families.len() as u32);
    for f in families {
        e.u16(f.id);
        e.str(&f.name);
        e.str(&f.minute_table);
        e.str(&f.day_table);
        if tables {
            e.str(&f.hour_table);
            e.str(&f.total_table);
        }
        e.strs(&f.key_columns);
        e.strs(&f.columns);
    }
    // Last, and only when there is one: headers written before start nonces existed
    // read the same.
    if let Some(nonce) = flush.nonce {
        e.u32(nonce);
    }
}

/// Appends one frame whose payload `fill` writes.
fn frame(out: &mut Vec<u8>, fill: impl FnOnce(&mut Enc<'_>)) {
    let start = out.len();
    out.extend_from_slice(&[0; 8]);
    fill(&mut Enc(out));
    let payload = &out[start + 8..];
    let (len, crc) = (payload.len() as u32, crc32c::crc32c(payload));
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}
