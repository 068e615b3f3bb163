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
    fn truncated_encoding_stops_instead_of_panicking() {
        let key = encode(["abc", "def"]);
        for cut in 0..key.len() {
            let _ = fields(&key[..cut]).count();
        }
        assert_eq!(fields(&key[..key.len() - 1]).count(), 1);
    }
}
