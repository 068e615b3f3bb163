//! The journal's record of one write of running totals: what recovery needs to write it
//! again, encoded into the body of a [`KindIntent`] of this counting mode's kind. Only
//! this module reads and writes the body; the journal keeps it as bytes.
//!
//! The body is the layout the journal's own record (tag 7) had before kinds were
//! numbered, after its request index: family (`u16`), table (`u8`), writer column,
//! write time (`i64`), series (bytes), then per row its bucket (`u32`), its width
//! (`u16`) and each column's total and unconfirmed part (`i64`, `i64`). Journals
//! written before read the same. After the rows, one byte says whether the write is of
//! rows a replay read back from the spill (`1`) or of the book's rows (`0`); a body
//! without it (an earlier version's) reads as a replay's, the reading that drops nothing
//! (see [`TotalsIntent::replay`]).

use crate::state::journal::codec::{Dec, Enc};
use crate::state::{FlushGroup, KindId, KindIntent};
use crate::vocabulary::Granularity;

/// The kind of the journal's intents of running totals.
pub const KIND: KindId = KindId::FIRST;

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
    /// Whether the rows are a replay's, read back from the spill (the cursor the group
    /// consumed has passed them), rather than the book's, planned from memory. Recovery
    /// spills a replay's rows whatever room `state.max_spill_bytes` leaves (refused,
    /// they would be lost), and the book's only while it has room (beyond it they are
    /// dropped and counted, as the killed process would have). An intent of an earlier
    /// version, which did not say, reads as a replay's.
    pub replay: bool,
}

impl TotalsIntent {
    /// The journal's intent of this write.
    pub fn encode(&self) -> KindIntent {
        let mut body = Vec::with_capacity(64 + self.series.len() + self.rows.len() * 24);
        let mut e = Enc(&mut body);
        e.u16(self.family);
        e.u8(self.table.index() as u8);
        e.str(&self.writer);
        e.i64(self.timestamp);
        e.bytes(&self.series);
        e.u32(self.rows.len() as u32);
        for row in &self.rows {
            e.u32(row.bucket);
            e.u16(row.totals.len() as u16);
            for (total, unconfirmed) in row.totals.iter().zip(&row.unconfirmed) {
                e.i64(*total);
                e.i64(*unconfirmed);
            }
        }
        e.u8(u8::from(self.replay));
        KindIntent {
            kind: KIND,
            request: self.request,
            body,
        }
    }

    /// The write a journal's intent records; `None` when it is of another kind or its
    /// body is cut short. The replay byte after the last row is optional: without it (an
    /// earlier version's body), the write reads as a replay's. Bytes after it are a
    /// later version's (a record grows by optional fields at its end, as the journal's
    /// own do) and are left unread.
    pub fn decode(intent: &KindIntent) -> Option<TotalsIntent> {
        if intent.kind != KIND {
            return None;
        }
        let mut d = Dec::new(&intent.body);
        let family = d.u16()?;
        let table = d.granularity()?;
        let writer = d.str()?;
        let timestamp = d.i64()?;
        let series = d.bytes()?.to_vec();
        let count = d.u32()?;
        let mut rows = Vec::new();
        for _ in 0..count {
            let bucket = d.u32()?;
            let width = usize::from(d.u16()?);
            let (mut totals, mut unconfirmed) = (Vec::new(), Vec::new());
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
        // Any byte but 0 is a replay's: unsure, recovery keeps the rows.
        let replay = d.u8().is_none_or(|replay| replay != 0);
        Some(TotalsIntent {
            request: intent.request,
            family,
            table,
            writer,
            timestamp,
            series,
            rows,
            replay,
        })
    }

    /// The totals intents of `group`, in journal order: `Err` with the request of the
    /// first intent that is of another kind or does not read.
    pub fn of_group(group: &FlushGroup) -> Result<Vec<TotalsIntent>, u32> {
        group
            .kind_intents
            .iter()
            .map(|intent| TotalsIntent::decode(intent).ok_or(intent.request))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intent() -> TotalsIntent {
        TotalsIntent {
            request: 2,
            family: 1,
            table: Granularity::Minute,
            writer: "w/3/a".into(),
            timestamp: -1,
            series: vec![0xab],
            rows: vec![TotalsIntentRow {
                bucket: 6,
                totals: vec![8, i64::MAX],
                unconfirmed: vec![-8, 0],
            }],
            replay: false,
        }
    }

    #[test]
    fn an_intent_reads_back_as_it_was_written() {
        for replay in [false, true] {
            let written = TotalsIntent { replay, ..intent() };
            assert_eq!(TotalsIntent::decode(&written.encode()), Some(written));
        }
    }

    /// The body's bytes are those the journal's record had after its request index
    /// before kinds were numbered, then the replay byte: a journal an earlier version
    /// wrote reads the same, its writes as a replay's.
    #[test]
    fn the_body_keeps_the_layout_of_the_earlier_record() {
        let mut intent = intent();
        intent.rows[0].totals.truncate(1);
        intent.rows[0].unconfirmed.truncate(1);
        let body = intent.encode().body;
        let expected: Vec<u8> = [
            &1u16.to_le_bytes()[..],
            &[0],
            &5u32.to_le_bytes(),
            b"w/3/a",
            &(-1i64).to_le_bytes(),
            &1u32.to_le_bytes(),
            &[0xab],
            &1u32.to_le_bytes(),
            &6u32.to_le_bytes(),
            &1u16.to_le_bytes(),
            &8i64.to_le_bytes(),
            &(-8i64).to_le_bytes(),
        ]
        .concat();
        assert_eq!(body, [&expected[..], &[0]].concat(), "the book's, then 0");
        let replayed = TotalsIntent {
            replay: true,
            ..intent.clone()
        };
        assert_eq!(replayed.encode().body, [&expected[..], &[1]].concat());
        let earlier = KindIntent {
            kind: KIND,
            request: intent.request,
            body: expected,
        };
        assert_eq!(
            TotalsIntent::decode(&earlier),
            Some(replayed),
            "an earlier version's intent, without the byte, reads as a replay's"
        );
    }

    #[test]
    fn a_body_cut_short_or_of_another_kind_does_not_read_and_one_that_grew_does() {
        let mut encoded = intent().encode();
        // The replay byte, then the last byte of the last row.
        encoded.body.truncate(encoded.body.len() - 2);
        assert_eq!(TotalsIntent::decode(&encoded), None, "cut short");
        let mut encoded = intent().encode();
        encoded.body.push(0);
        assert_eq!(
            TotalsIntent::decode(&encoded),
            Some(intent()),
            "a later version's field at its end is left unread"
        );
        let mut encoded = intent().encode();
        encoded.kind = KindId::new(64).unwrap();
        assert_eq!(TotalsIntent::decode(&encoded), None, "another kind");
    }
}
