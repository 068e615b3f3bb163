//! Reading the journal back: the frame decoder, and the groups it rebuilds record by
//! record ([`FlushGroup`], a driver wrapper's [`WrapperGroup`]) for recovery, tools and
//! audits. A read stops at the end mark or at the first frame that is short, fails its
//! checksum or cannot be decoded (a torn tail).

use std::collections::HashMap;
use std::io;
use std::path::Path;

use crate::state::ids::Cursor;

use super::codec::Dec;

use super::{
    BEGIN, BEGIN_TABLES, COMMITTED, END, FamilyEntry, FlushId, INTENT, Intent, IntentRow, KindId,
    KindIntent, LOGS_AT, NO_SHARD, OUTCOME, STARTS_BELOW, Settled, WRAPPER_BEGIN,
    WRAPPER_BEGIN_CURSOR, WRAPPER_INTENT, WRAPPER_LOGS_AT, WrapperIntent, WrapperRow, WrapperTable,
};

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
    /// The intents of a kind of write that journals its own (a group of its own after
    /// the counter group: running totals), in request order.
    pub kind_intents: Vec<KindIntent>,
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
    /// Requests at or past this index were never started (see the journal's start
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
            kind_intents: Vec::new(),
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

/// Reads a journal file: its groups, oldest first (tests and audits).
pub fn read(path: &Path) -> io::Result<Vec<FlushGroup>> {
    let bytes = std::fs::read(path)?;
    Ok(parse(&bytes).0)
}

/// Reads a journal file without changing it (a tool beside a running sidecar): its
/// groups, oldest first, and the length of a torn tail after the last readable record,
/// as [`Journal::open`](super::Journal::open) counts it.
pub fn read_with_torn_tail(path: &Path) -> io::Result<(Vec<FlushGroup>, u64)> {
    let bytes = std::fs::read(path)?;
    let (groups, valid) = parse(&bytes);
    Ok((groups, torn_tail(&bytes, valid)))
}

/// Bytes after the valid prefix that are not an end mark: a torn record (the count
/// [`Journal::open`](super::Journal::open) makes).
pub(super) fn torn_tail(bytes: &[u8], valid: usize) -> u64 {
    let after = &bytes[valid..bytes.len().min(valid + 8)];
    if after.iter().all(|b| *b == 0) {
        0
    } else {
        (bytes.len() - valid) as u64
    }
}

/// Parses frames until the end or the first bad one; returns the groups and the length
/// of the valid prefix.
pub(super) fn parse(bytes: &[u8]) -> (Vec<FlushGroup>, usize) {
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
    let mut d = Dec::new(payload);
    let tag = d.u8()?;
    match tag {
        BEGIN | BEGIN_TABLES => {
            let flush = d.flush_id()?;
            let time = d.str()?;
            let consumes = d.cursor()?;
            let mut families = Vec::new();
            for _ in 0..d.u32()? {
                let (id, name) = (d.u16()?, d.str()?);
                let (minute_table, day_table) = (d.str()?, d.str()?);
                let (hour_table, total_table) = match tag {
                    BEGIN_TABLES => (d.str()?, d.str()?),
                    _ => (String::new(), String::new()),
                };
                families.push(FamilyEntry {
                    id,
                    name,
                    minute_table,
                    day_table,
                    hour_table,
                    total_table,
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
        tag if KindId::of_tag(tag).is_some() => {
            let request = d.u32()?;
            groups.last_mut()?.kind_intents.push(KindIntent {
                kind: KindId::of_tag(tag)?,
                request,
                body: d.rest().to_vec(),
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
