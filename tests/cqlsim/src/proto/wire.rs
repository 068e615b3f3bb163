//! The protocol's primitive notations (S §3): `[short]`, `[int]`, `[string]`, `[bytes]`, maps and
//! lists. Reading is bounds-checked and never panics: every short read is a [`WireError`], which
//! the connection turns into a protocol error.

use bytes::Bytes;

/// A malformed request body. The message names what could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed frame body: {0}")]
pub(crate) struct WireError(pub(crate) &'static str);

/// A bound value as sent by a client (S §3 `[value]`): the bytes, null (length -1) or, since v4,
/// "unset" (length -2), which means "leave this alone". The bytes are a view of the frame
/// body they came in (a BATCH of rows carries a dozen values per row: one allocation per
/// frame, not per value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BoundValue {
    /// Length -1.
    Null,
    /// Length -2 (v4).
    Unset,
    /// The serialized value.
    Bytes(Bytes),
}

/// A cursor over a request body.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    /// The body `buf` is part of, when the values read are to share it.
    owner: Option<&'a Bytes>,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, owner: None }
    }

    /// A cursor whose values and ids are views of `body` instead of copies.
    pub(crate) fn shared(body: &'a Bytes) -> Self {
        Reader {
            buf: body,
            owner: Some(body),
        }
    }

    /// Bytes read from this body, owned: a view of the body when it is shared.
    fn owned(&self, part: &'a [u8]) -> Bytes {
        match self.owner {
            Some(body) => body.slice_ref(part),
            None => Bytes::copy_from_slice(part),
        }
    }

    /// `[short bytes]`, owned (a prepared id).
    pub(crate) fn short_bytes_owned(&mut self) -> Result<Bytes, WireError> {
        let part = self.short_bytes()?;
        Ok(self.owned(part))
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        if self.buf.len() < n {
            return Err(WireError(what));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1, "truncated byte")?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, WireError> {
        let b = self.take(2, "truncated [short]")?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub(crate) fn i32(&mut self) -> Result<i32, WireError> {
        let b = self.take(4, "truncated [int]")?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn i64(&mut self) -> Result<i64, WireError> {
        let b = self.take(8, "truncated [long]")?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }

    /// `[string]`: a [short] length and UTF-8 bytes.
    pub(crate) fn string(&mut self) -> Result<&'a str, WireError> {
        let n = usize::from(self.u16()?);
        let b = self.take(n, "truncated [string]")?;
        std::str::from_utf8(b).map_err(|_| WireError("[string] is not UTF-8"))
    }

    /// `[long string]`: an [int] length and UTF-8 bytes.
    pub(crate) fn long_string(&mut self) -> Result<&'a str, WireError> {
        let n = self.i32()?;
        let n = usize::try_from(n).map_err(|_| WireError("negative [long string] length"))?;
        let b = self.take(n, "truncated [long string]")?;
        std::str::from_utf8(b).map_err(|_| WireError("[long string] is not UTF-8"))
    }

    /// `[short bytes]`.
    pub(crate) fn short_bytes(&mut self) -> Result<&'a [u8], WireError> {
        let n = usize::from(self.u16()?);
        self.take(n, "truncated [short bytes]")
    }

    /// `[bytes]`: null for any negative length.
    pub(crate) fn bytes(&mut self) -> Result<Option<&'a [u8]>, WireError> {
        let n = self.i32()?;
        if n < 0 {
            return Ok(None);
        }
        let n = usize::try_from(n).map_err(|_| WireError("bad [bytes] length"))?;
        Ok(Some(self.take(n, "truncated [bytes]")?))
    }

    /// `[value]`: like `[bytes]` but -2 means unset.
    pub(crate) fn value(&mut self) -> Result<BoundValue, WireError> {
        let n = self.i32()?;
        match n {
            -1 => Ok(BoundValue::Null),
            -2 => Ok(BoundValue::Unset),
            n if n < 0 => Err(WireError("invalid [value] length")),
            n => {
                let n = usize::try_from(n).map_err(|_| WireError("bad [value] length"))?;
                let part = self.take(n, "truncated [value]")?;
                Ok(BoundValue::Bytes(self.owned(part)))
            }
        }
    }

    /// `[string list]`.
    pub(crate) fn string_list(&mut self) -> Result<Vec<String>, WireError> {
        let n = self.u16()?;
        (0..n).map(|_| self.string().map(str::to_owned)).collect()
    }

    /// `[string map]`.
    pub(crate) fn string_map(&mut self) -> Result<Vec<(String, String)>, WireError> {
        let n = self.u16()?;
        (0..n)
            .map(|_| Ok((self.string()?.to_owned(), self.string()?.to_owned())))
            .collect()
    }
}

pub(crate) fn put_u8(buf: &mut Vec<u8>, v: u8) {
    buf.push(v);
}

pub(crate) fn put_u16(buf: &mut Vec<u8>, v: u16) {
    buf.extend_from_slice(&v.to_be_bytes());
}

pub(crate) fn put_i32(buf: &mut Vec<u8>, v: i32) {
    buf.extend_from_slice(&v.to_be_bytes());
}

/// Lengths in this server are bounded by the frame size limit, far below `i32::MAX`.
fn len_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn len_u16(n: usize) -> u16 {
    u16::try_from(n).unwrap_or(u16::MAX)
}

/// `[string]`. Strings longer than 65535 bytes are cut (names never are that long).
pub(crate) fn put_string(buf: &mut Vec<u8>, s: &str) {
    let b = &s.as_bytes()[..s.len().min(usize::from(u16::MAX))];
    put_u16(buf, len_u16(b.len()));
    buf.extend_from_slice(b);
}

pub(crate) fn put_short_bytes(buf: &mut Vec<u8>, b: &[u8]) {
    put_u16(buf, len_u16(b.len()));
    buf.extend_from_slice(&b[..b.len().min(usize::from(u16::MAX))]);
}

/// `[bytes]`; `None` is null.
pub(crate) fn put_bytes(buf: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        None => put_i32(buf, -1),
        Some(b) => {
            put_i32(buf, len_i32(b.len()));
            buf.extend_from_slice(b);
        }
    }
}

pub(crate) fn put_string_list(buf: &mut Vec<u8>, items: &[&str]) {
    put_u16(buf, len_u16(items.len()));
    for s in items {
        put_string(buf, s);
    }
}

pub(crate) fn put_string_multimap(buf: &mut Vec<u8>, map: &[(&str, &[&str])]) {
    put_u16(buf, len_u16(map.len()));
    for (k, v) in map {
        put_string(buf, k);
        put_string_list(buf, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_reads_are_errors_not_panics() {
        let mut r = Reader::new(&[0, 5, b'a']);
        assert!(r.string().is_err());
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xfd]);
        assert!(r.value().is_err());
        let mut r = Reader::new(&[0x7f, 0xff, 0xff, 0xff]);
        assert!(r.long_string().is_err());
        let mut r = Reader::new(&[]);
        assert!(r.u8().is_err());
    }

    #[test]
    fn values_distinguish_null_and_unset() {
        let mut buf = Vec::new();
        put_i32(&mut buf, -1);
        put_i32(&mut buf, -2);
        put_bytes(&mut buf, Some(&[1, 2]));
        let mut r = Reader::new(&buf);
        assert_eq!(r.value(), Ok(BoundValue::Null));
        assert_eq!(r.value(), Ok(BoundValue::Unset));
        assert_eq!(
            r.value(),
            Ok(BoundValue::Bytes(Bytes::from_static(&[1, 2])))
        );
        assert!(r.is_empty());
    }

    #[test]
    fn shared_bodies_lend_their_values_and_ids() {
        let mut buf = Vec::new();
        put_bytes(&mut buf, Some(&[7, 8, 9]));
        buf.extend_from_slice(&[0, 2, 0xaa, 0xbb]);
        let body = Bytes::from(buf);
        let mut r = Reader::shared(&body);
        let Ok(BoundValue::Bytes(value)) = r.value() else {
            panic!("a value");
        };
        let id = r.short_bytes_owned().expect("an id");
        assert_eq!((&value[..], &id[..]), (&[7, 8, 9][..], &[0xaa, 0xbb][..]));
        let inside = |b: &Bytes| body.as_ptr_range().contains(&b.as_ptr());
        assert!(
            inside(&value) && inside(&id),
            "views of the body, not copies"
        );
        assert!(r.is_empty());
    }
}
