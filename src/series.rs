//! The byte encoding of a series: the key values that identify one counter row within a
//! family, independent of time.
//!
//! A series is stored once per pending row, so it is one flat byte string rather than a
//! `Vec<String>`: each field is a little-endian `u16` length followed by the field's UTF-8
//! bytes. Generic rows have two fields (metric name, canonical tag string); rows of a
//! configured family have one field per key column, in the family's key order. Encoding
//! appends into a caller-owned buffer, so the hot path allocates only when a new row is
//! created.

/// The longest a single field may be; callers cap whole keys well below this.
pub const MAX_FIELD_BYTES: usize = u16::MAX as usize;

/// Appends one field to an encoded series. Returns `false` (leaving `out` unchanged)
/// when the field is longer than [`MAX_FIELD_BYTES`].
pub fn push_field(out: &mut Vec<u8>, field: &str) -> bool {
    let Ok(len) = u16::try_from(field.len()) else {
        return false;
    };
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(field.as_bytes());
    true
}

/// Iterates the fields of an encoded series.
pub fn fields(series: &[u8]) -> Fields<'_> {
    Fields { rest: series }
}

/// The key values of an encoded series as the regular tables store them (the key index,
/// the delta ledger, the outcomes table): a JSON array of strings, `["home"]`.
pub fn key_json(series: &[u8]) -> String {
    let fields: Vec<&str> = fields(series).collect();
    serde_json::to_string(&fields).unwrap_or_default()
}

/// Iterator over the fields of an encoded series; see [`fields`].
#[derive(Clone, Debug)]
pub struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Fields<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let (len, tail) = self.rest.split_first_chunk::<2>()?;
        let len = usize::from(u16::from_le_bytes(*len));
        let field = tail.get(..len)?;
        self.rest = &tail[len..];
        // Fields are only ever written from `&str`; a broken encoding would be a bug in
        // this module, and is shown rather than trusted.
        Some(std::str::from_utf8(field).unwrap_or("\u{fffd}"))
    }
}

/// The little-endian word at `at`.
#[inline(always)]
pub(crate) fn word(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// A fewer-than-eight-byte slice packed into a word, every byte included (the first and
/// last four overlap for 4 to 7 bytes). Equal slices of equal length pack equally, and
/// different ones of equal length differ.
#[inline(always)]
pub(crate) fn short_word(bytes: &[u8]) -> u64 {
    let len = bytes.len();
    if len >= 4 {
        let mut low = [0; 4];
        let mut high = [0; 4];
        low.copy_from_slice(&bytes[..4]);
        high.copy_from_slice(&bytes[len - 4..]);
        u64::from(u32::from_le_bytes(low)) | (u64::from(u32::from_le_bytes(high)) << 32)
    } else if len > 0 {
        u64::from(bytes[0]) | (u64::from(bytes[len / 2]) << 8) | (u64::from(bytes[len - 1]) << 16)
    } else {
        0
    }
}

/// `a == b`, eight bytes at a time: series and line keys are a few dozen bytes, too short
/// for a `memcmp` call to pay.
#[inline]
pub(crate) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let len = a.len();
    if len != b.len() {
        return false;
    }
    if len < 8 {
        return short_word(a) == short_word(b);
    }
    let mut at = 0;
    while at + 8 < len {
        if word(a, at) != word(b, at) {
            return false;
        }
        at += 8;
    }
    word(a, len - 8) == word(b, len - 8)
}

/// Encodes fields into a fresh series key, for tests and cold paths.
pub fn encode<'a>(parts: impl IntoIterator<Item = &'a str>) -> Vec<u8> {
    let mut out = Vec::new();
    for part in parts {
        push_field(&mut out, part);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_including_empty_and_separators() {
        let parts = ["page.views", "", "env:prod,page_id:p'1;\"", "ünïcode"];
        let key = encode(parts);
        assert_eq!(fields(&key).collect::<Vec<_>>(), parts);
    }

    #[test]
    fn over_long_field_is_refused_without_writing() {
        let mut out = b"x".to_vec();
        let long = "a".repeat(MAX_FIELD_BYTES + 1);
        assert!(!push_field(&mut out, &long));
        assert_eq!(out, b"x");
    }

    #[test]
    fn word_at_a_time_equality_sees_every_byte() {
        for len in 0..40_usize {
            let a: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            assert!(same_bytes(&a, &a.clone()));
            if len > 0 {
                assert!(!same_bytes(&a, &a[..len - 1]));
            }
            for i in 0..len {
                let mut b = a.clone();
                b[i] ^= 0x20;
                assert!(!same_bytes(&a, &b), "len {len}, byte {i}");
            }
        }
    }

    #[test]
    fn truncated_encoding_stops_instead_of_panicking() {
        let key = encode(["abc", "def"]);
        for cut in 0..key.len() {
            let _ = fields(&key[..cut]).count();
        }
        assert_eq!(fields(&key[..key.len() - 1]).count(), 1);
    }
}
