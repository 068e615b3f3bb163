//! The names the state directory's files share: who sent a flush ([`FlushId`]), the
//! families as the journal describes them ([`FamilyEntry`]), and where the spill is read
//! to ([`SegmentId`], [`Cursor`]).
//!
//! A leaf of the state module: the journal, the records, the spill and recovery all use
//! these words, and none of them is the place of another's.

use serde::{Deserialize, Serialize};

use crate::vocabulary::Granularity;

/// A family as the journal describes it: enough to turn an intent into records (and into
/// ledger rows) without the configuration that wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FamilyEntry {
    /// The family's id in that configuration.
    pub id: u16,
    /// Its name.
    pub name: String,
    /// `keyspace.table` of its minute table (empty: none).
    pub minute_table: String,
    /// `keyspace.table` of its day table (empty: none).
    pub day_table: String,
    /// `keyspace.table` of its hour table (empty: none).
    pub hour_table: String,
    /// `keyspace.table` of its all-time total table (empty: none).
    pub total_table: String,
    /// Key columns, in series order.
    pub key_columns: Vec<String>,
    /// Counter columns, in delta order.
    pub columns: Vec<String>,
}

impl FamilyEntry {
    /// The journal's description of `family` (what its records and intents need).
    pub fn of(family: &crate::family::FamilyDef) -> FamilyEntry {
        FamilyEntry {
            id: family.id.0,
            name: family.name.clone(),
            minute_table: table_or_empty(family, Granularity::Minute),
            day_table: table_or_empty(family, Granularity::Day),
            hour_table: table_or_empty(family, Granularity::Hour),
            total_table: table_or_empty(family, Granularity::Total),
            key_columns: family.key_columns.clone(),
            columns: family.columns.clone(),
        }
    }

    /// The table of one granularity.
    pub fn table(&self, table: Granularity) -> &str {
        match table {
            Granularity::Minute => &self.minute_table,
            Granularity::Day => &self.day_table,
            Granularity::Hour => &self.hour_table,
            Granularity::Total => &self.total_table,
        }
    }
}

fn table_or_empty(family: &crate::family::FamilyDef, table: Granularity) -> String {
    family
        .table(table)
        .map(ToString::to_string)
        .unwrap_or_default()
}

/// Who sent a flush: with a request index, the request id.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FlushId {
    /// The writer id.
    pub writer: String,
    /// The state directory's incarnation.
    pub incarnation: u64,
    /// The flush sequence within the incarnation.
    pub flush_seq: u64,
    /// The start nonce of the process that sent it (random at each start; `None` in
    /// journals of earlier versions): two processes with one writer id, on two hosts or
    /// one after the other on a fresh state directory, count incarnations alike, and
    /// only the nonce tells their requests and ledger rows apart.
    pub nonce: Option<u32>,
}

impl FlushId {
    /// The id of request `request` of this flush:
    /// `writer/incarnation.nonce/flush_seq/request` (`writer/incarnation/flush_seq/request`
    /// without a nonce).
    pub fn request_id(&self, request: u32) -> String {
        self.named_request(&request.to_string())
    }

    /// The id of a request of this flush named rather than numbered (rows a final flush
    /// held back: `…/held`, `…/ledger-held`).
    pub fn named_request(&self, request: &str) -> String {
        match self.nonce {
            Some(nonce) => format!(
                "{}/{}.{nonce:08x}/{}/{request}",
                self.writer, self.incarnation, self.flush_seq
            ),
            None => format!(
                "{}/{}/{}/{request}",
                self.writer, self.incarnation, self.flush_seq
            ),
        }
    }

    /// The writer as the delta ledger names it: `writer/nonce` (the writer id alone
    /// without a nonce), so the ledger rows of two processes sharing a writer id never
    /// overwrite each other.
    pub fn ledger_writer(&self) -> String {
        match self.nonce {
            Some(nonce) => format!("{}/{nonce:08x}", self.writer),
            None => self.writer.clone(),
        }
    }
}

/// A spill segment's identity: the flush that wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SegmentId {
    /// Incarnation of the process that wrote it.
    pub incarnation: u64,
    /// Its flush.
    pub flush_seq: u64,
    /// Written by crash recovery for that flush (sorts after the flush's own segment).
    pub recovered: bool,
    /// Rows a final flush held for the delta ledger, with their ledger rows in the header,
    /// written apart from (and before) the flush's own segment (see
    /// [`crate::state::ledger_pending`]). Never an intent of the
    /// flush, so recovery of the flush neither reads nor writes it: it is replayed once,
    /// like any segment. Sorts after the flush's own segment, before a recovered one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub held: bool,
    /// Running totals of `writer_totals` families (their flush's second group, or its
    /// recovery): apart from the flush's counter rows, which its first group spilled to
    /// the segment of the same flush. Sorts right after that counter segment, before the
    /// flush's held and recovered ones (fields compare in declaration order).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub totals: bool,
}

impl SegmentId {
    /// The segment crash recovery writes for a flush it finishes (sorts after the
    /// flush's own segment and its held one).
    pub fn recovered(incarnation: u64, flush_seq: u64) -> SegmentId {
        SegmentId {
            recovered: true,
            ..SegmentId::live(incarnation, flush_seq)
        }
    }

    /// The own segment of a flush.
    pub fn live(incarnation: u64, flush_seq: u64) -> SegmentId {
        SegmentId {
            incarnation,
            flush_seq,
            recovered: false,
            held: false,
            totals: false,
        }
    }

    /// The segment of a flush's running totals (`recovered`: written by crash recovery
    /// for that flush's totals group).
    pub fn totals(incarnation: u64, flush_seq: u64, recovered: bool) -> SegmentId {
        SegmentId {
            recovered,
            totals: true,
            ..SegmentId::live(incarnation, flush_seq)
        }
    }

    /// The segment a start of `incarnation` moves an earlier version's spill files into
    /// (the wrapper's `wrapper_spill.jsonl`, `totals`: the `writer_totals` files): the
    /// last flush number of the incarnation before it. That sorts after every segment an
    /// earlier run wrote and every replay cursor it left (a segment that sorts before the
    /// cursor counts as consumed and is deleted unread), and before everything this run
    /// spills. No flush takes that number, so a segment numbered so is a moved one
    /// ([`SegmentId::is_migration`]): a start killed half-way through the move finds it
    /// and only removes the old files.
    pub fn migration(incarnation: u64, totals: bool) -> SegmentId {
        SegmentId {
            totals,
            ..SegmentId::live(incarnation.saturating_sub(1), u64::MAX)
        }
    }

    /// Whether this is a segment an earlier version's spill files were moved into.
    pub fn is_migration(&self) -> bool {
        self.flush_seq == u64::MAX && !self.recovered && !self.held
    }

    /// The segment of `dir` an earlier start moved spill files into ([`SegmentId::migration`]),
    /// of the `writer_totals` kind or the other, if it is still there.
    pub fn migration_in(dir: &std::path::Path, totals: bool) -> std::io::Result<Option<SegmentId>> {
        for entry in std::fs::read_dir(dir)? {
            let name = entry?.file_name();
            if let Some(id) = SegmentId::parse(&name.to_string_lossy())
                && id.totals == totals
                && id.is_migration()
            {
                return Ok(Some(id));
            }
        }
        Ok(None)
    }

    /// `spill.<incarnation>.<flush_seq>[.recovered|.held][.totals].jsonl`.
    pub fn file_name(&self) -> String {
        format!(
            "spill.{:010}.{:012}{}{}{}.jsonl",
            self.incarnation,
            self.flush_seq,
            if self.recovered { ".recovered" } else { "" },
            if self.held { ".held" } else { "" },
            if self.totals { ".totals" } else { "" }
        )
    }

    /// The identity a segment file's name gives, if it is one.
    pub(super) fn parse(name: &str) -> Option<SegmentId> {
        let rest = name.strip_prefix("spill.")?.strip_suffix(".jsonl")?;
        let (rest, totals) = match rest.strip_suffix(".totals") {
            Some(r) => (r, true),
            None => (rest, false),
        };
        let (rest, held) = match rest.strip_suffix(".held") {
            Some(r) => (r, true),
            None => (rest, false),
        };
        let (rest, recovered) = match rest.strip_suffix(".recovered") {
            Some(r) => (r, true),
            None => (rest, false),
        };
        let (incarnation, flush_seq) = rest.split_once('.')?;
        Some(SegmentId {
            incarnation: incarnation.parse().ok()?,
            flush_seq: flush_seq.parse().ok()?,
            recovered,
            held,
            totals,
        })
    }
}

/// How far the spill has been consumed: every segment before `segment`, and `segment`
/// up to byte `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Cursor {
    /// The segment being read.
    pub segment: SegmentId,
    /// Byte offset of the next unread line in it.
    pub offset: u64,
}
