//! The journal's primitive encoding, shared by its records and by the bodies of the
//! intents a kind of write journals itself ([`super::KindIntent`]): little-endian
//! integers, strings and byte strings prefixed by a `u32` length, deltas prefixed by a
//! `u16` count. Decoding returns `None` where the bytes end early or do not read: the
//! journal treats such a record as a torn tail; a kind, such a body as unreadable (its
//! finisher then keeps the state directory from opening).

use crate::state::ids::{Cursor, SegmentId};
use crate::vocabulary::Granularity;

use super::FlushId;

/// Appends values to a byte buffer.
pub(crate) struct Enc<'a>(pub(crate) &'a mut Vec<u8>);

impl Enc<'_> {
    pub(crate) fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub(crate) fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn bytes(&mut self, v: &[u8]) {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
    }
    pub(crate) fn str(&mut self, v: &str) {
        self.bytes(v.as_bytes());
    }
    pub(crate) fn strs(&mut self, v: &[String]) {
        self.u32(v.len() as u32);
        for s in v {
            self.str(s);
        }
    }
    pub(crate) fn flush_id(&mut self, flush: &FlushId) {
        self.str(&flush.writer);
        self.u64(flush.incarnation);
        self.u64(flush.flush_seq);
    }
    /// A row's deltas: their count (`u16`), then each.
    pub(crate) fn deltas(&mut self, deltas: &[i64]) {
        self.u16(deltas.len() as u16);
        for d in deltas {
            self.i64(*d);
        }
    }
    #[cfg(test)]
    pub(crate) fn option_u64(&mut self, v: Option<u64>) {
        match v {
            None => self.u8(0),
            Some(v) => {
                self.u8(1);
                self.u64(v);
            }
        }
    }
    pub(crate) fn cursor(&mut self, cursor: Option<Cursor>) {
        match cursor {
            None => self.u8(0),
            Some(c) => {
                self.u8(1);
                self.u64(c.segment.incarnation);
                self.u64(c.segment.flush_seq);
                // Bit 0: recovered; bit 1: a held segment; bit 2: a totals segment (older
                // journals never set the last two).
                self.u8(u8::from(c.segment.recovered)
                    | (u8::from(c.segment.held) << 1)
                    | (u8::from(c.segment.totals) << 2));
                self.u64(c.offset);
            }
        }
    }
}

/// Reads values back from bytes, from the start.
pub(crate) struct Dec<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Dec<'a> {
    /// A decoder at the start of `bytes`.
    pub(crate) fn new(bytes: &'a [u8]) -> Dec<'a> {
        Dec { b: bytes, pos: 0 }
    }
    /// The bytes not read yet, all of them (a kind's intent body ends its record).
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let rest = self.b.get(self.pos..).unwrap_or_default();
        self.pos = self.b.len();
        rest
    }
    pub(crate) fn remaining(&self) -> usize {
        self.b.len().saturating_sub(self.pos)
    }
    pub(crate) fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.b.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }
    pub(crate) fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    pub(crate) fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    pub(crate) fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    pub(crate) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    pub(crate) fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    pub(crate) fn bytes(&mut self) -> Option<&[u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    pub(crate) fn str(&mut self) -> Option<String> {
        String::from_utf8(self.bytes()?.to_vec()).ok()
    }
    pub(crate) fn strs(&mut self) -> Option<Vec<String>> {
        (0..self.u32()?).map(|_| self.str()).collect()
    }
    pub(crate) fn flush_id(&mut self) -> Option<FlushId> {
        Some(FlushId {
            writer: self.str()?,
            incarnation: self.u64()?,
            flush_seq: self.u64()?,
            // Read at the end of the header, where it is written (see `nonce`).
            nonce: None,
        })
    }
    pub(crate) fn deltas(&mut self) -> Option<Vec<i64>> {
        let width = self.u16()?;
        (0..width).map(|_| self.i64()).collect()
    }
    pub(crate) fn granularity(&mut self) -> Option<Granularity> {
        let index = usize::from(self.u8()?);
        Granularity::ALL.get(index).copied()
    }
    pub(crate) fn option_u64(&mut self) -> Option<Option<u64>> {
        Some(match self.u8()? {
            0 => None,
            _ => Some(self.u64()?),
        })
    }
    pub(crate) fn cursor(&mut self) -> Option<Option<Cursor>> {
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
                        totals: kind & 4 != 0,
                    }
                },
                offset: self.u64()?,
            }),
        })
    }
}
