//! Typed cell values: decoding bound bytes (with Cassandra's validation messages), encoding
//! result cells, ordering for keys, and printing as CQL literals (used by snapshots).

use std::cmp::Ordering;
use std::net::IpAddr;

use crate::error::CqlError;
use crate::proto::wire::{put_i32, put_u8};
use crate::types::ColType;

/// One cell value.
#[derive(Debug, Clone)]
pub enum Value {
    /// `ascii`.
    Ascii(String),
    /// `text`.
    Text(String),
    /// `bigint`.
    BigInt(i64),
    /// `counter`.
    Counter(i64),
    /// `blob`.
    Blob(Vec<u8>),
    /// `boolean`.
    Boolean(bool),
    /// `date`: days, epoch at 2^31.
    Date(u32),
    /// `double`.
    Double(f64),
    /// `float`.
    Float(f32),
    /// `inet`.
    Inet(IpAddr),
    /// `int`.
    Int(i32),
    /// `smallint`.
    SmallInt(i16),
    /// `tinyint`.
    TinyInt(i8),
    /// `timestamp`: ms since the epoch.
    Timestamp(i64),
    /// `uuid`.
    Uuid([u8; 16]),
    /// `timeuuid`.
    TimeUuid([u8; 16]),
    /// `varint`.
    Varint(i128),
    /// `list<T>`.
    List(Vec<Value>),
    /// `set<T>`, kept sorted and without duplicates.
    Set(Vec<Value>),
    /// `map<K, V>`, kept sorted by key.
    Map(Vec<(Value, Value)>),
}

impl Value {
    fn rank(&self) -> u8 {
        match self {
            Value::Ascii(_) => 0,
            Value::Text(_) => 1,
            Value::BigInt(_) => 2,
            Value::Counter(_) => 3,
            Value::Blob(_) => 4,
            Value::Boolean(_) => 5,
            Value::Date(_) => 6,
            Value::Double(_) => 7,
            Value::Float(_) => 8,
            Value::Inet(_) => 9,
            Value::Int(_) => 10,
            Value::SmallInt(_) => 11,
            Value::TinyInt(_) => 12,
            Value::Timestamp(_) => 13,
            Value::Uuid(_) => 14,
            Value::TimeUuid(_) => 15,
            Value::Varint(_) => 16,
            Value::List(_) => 17,
            Value::Set(_) => 18,
            Value::Map(_) => 19,
        }
    }

    /// Appends the cell bytes (without the `[bytes]` length).
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Value::Ascii(s) | Value::Text(s) => out.extend_from_slice(s.as_bytes()),
            Value::BigInt(v) | Value::Counter(v) | Value::Timestamp(v) => {
                out.extend_from_slice(&v.to_be_bytes())
            }
            Value::Blob(b) => out.extend_from_slice(b),
            Value::Boolean(b) => put_u8(out, u8::from(*b)),
            Value::Date(d) => out.extend_from_slice(&d.to_be_bytes()),
            Value::Double(v) => out.extend_from_slice(&v.to_be_bytes()),
            Value::Float(v) => out.extend_from_slice(&v.to_be_bytes()),
            Value::Inet(IpAddr::V4(a)) => out.extend_from_slice(&a.octets()),
            Value::Inet(IpAddr::V6(a)) => out.extend_from_slice(&a.octets()),
            Value::Int(v) => out.extend_from_slice(&v.to_be_bytes()),
            Value::SmallInt(v) => out.extend_from_slice(&v.to_be_bytes()),
            Value::TinyInt(v) => out.extend_from_slice(&v.to_be_bytes()),
            Value::Uuid(u) | Value::TimeUuid(u) => out.extend_from_slice(u),
            Value::Varint(v) => out.extend_from_slice(&varint_bytes(*v)),
            Value::List(items) | Value::Set(items) => {
                put_i32(out, len_i32(items.len()));
                for v in items {
                    put_elem(out, v);
                }
            }
            Value::Map(entries) => {
                put_i32(out, len_i32(entries.len()));
                for (k, v) in entries {
                    put_elem(out, k);
                    put_elem(out, v);
                }
            }
        }
    }

    /// Decodes a bound or stored cell. Empty bytes are null for every type but text, ascii and
    /// blob (Cassandra's "empty value" is not modelled).
    pub(crate) fn decode(t: &ColType, b: &[u8]) -> Result<Option<Value>, CqlError> {
        let t = t.unfrozen();
        if b.is_empty() && !matches!(t, ColType::Text | ColType::Ascii | ColType::Blob) {
            return Ok(None);
        }
        let fixed = |n: usize, msg: &str| -> Result<(), CqlError> {
            if b.len() == n {
                Ok(())
            } else {
                Err(CqlError::invalid(format!("{msg} ({})", b.len())))
            }
        };
        let v = match t {
            ColType::Text => Value::Text(
                String::from_utf8(b.to_vec())
                    .map_err(|_| CqlError::invalid("String didn't validate."))?,
            ),
            ColType::Ascii => {
                if let Some(bad) = b.iter().find(|c| !c.is_ascii()) {
                    return Err(CqlError::invalid(format!("Invalid byte for ascii: {bad}")));
                }
                Value::Ascii(String::from_utf8_lossy(b).into_owned())
            }
            ColType::BigInt | ColType::Counter | ColType::Timestamp => {
                let msg = if *t == ColType::Timestamp {
                    "Expected 8 or 0 byte long for date"
                } else {
                    "Expected 8 or 0 byte long"
                };
                fixed(8, msg)?;
                let v = i64::from_be_bytes(arr(b));
                match t {
                    ColType::BigInt => Value::BigInt(v),
                    ColType::Counter => Value::Counter(v),
                    _ => Value::Timestamp(v),
                }
            }
            ColType::Blob => Value::Blob(b.to_vec()),
            ColType::Boolean => {
                fixed(1, "Expected 1 or 0 byte value")?;
                Value::Boolean(b[0] != 0)
            }
            ColType::Date => {
                fixed(4, "Expected 4 byte long for date")?;
                Value::Date(u32::from_be_bytes(arr(b)))
            }
            ColType::Double => {
                fixed(8, "Expected 8 or 0 byte value for a double")?;
                Value::Double(f64::from_be_bytes(arr(b)))
            }
            ColType::Float => {
                fixed(4, "Expected 4 or 0 byte value for a float")?;
                Value::Float(f32::from_be_bytes(arr(b)))
            }
            ColType::Inet => match b.len() {
                4 => Value::Inet(IpAddr::from(arr::<4>(b))),
                16 => Value::Inet(IpAddr::from(arr::<16>(b))),
                n => {
                    return Err(CqlError::invalid(format!(
                        "Expected 4 or 16 byte inetaddress; got {n} bytes"
                    )));
                }
            },
            ColType::Int => {
                fixed(4, "Expected 4 or 0 byte int")?;
                Value::Int(i32::from_be_bytes(arr(b)))
            }
            ColType::SmallInt => {
                fixed(2, "Expected 2 bytes for a smallint")?;
                Value::SmallInt(i16::from_be_bytes(arr(b)))
            }
            ColType::TinyInt => {
                fixed(1, "Expected 1 byte for a tinyint")?;
                Value::TinyInt(i8::from_be_bytes(arr(b)))
            }
            ColType::Uuid | ColType::TimeUuid => {
                fixed(16, "UUID should be 16 or 0 bytes")?;
                let u = arr::<16>(b);
                if *t == ColType::TimeUuid {
                    if u[6] >> 4 != 1 {
                        return Err(CqlError::invalid("Unsupported UUID version for timeuuid"));
                    }
                    Value::TimeUuid(u)
                } else {
                    Value::Uuid(u)
                }
            }
            ColType::Varint => {
                if b.len() > 16 {
                    return Err(CqlError::invalid(
                        "varint too large for this server (> 16 bytes)",
                    ));
                }
                let fill = if b[0] & 0x80 != 0 { 0xff } else { 0 };
                let mut a = [fill; 16];
                a[16 - b.len()..].copy_from_slice(b);
                Value::Varint(i128::from_be_bytes(a))
            }
            ColType::List(e) | ColType::Set(e) => {
                let mut r = crate::proto::wire::Reader::new(b);
                let n = r.i32().map_err(|_| bad_collection())?;
                let mut items = Vec::with_capacity(collection_room(n, b.len(), 4));
                for _ in 0..n.max(0) {
                    let eb = r.bytes().map_err(|_| bad_collection())?;
                    let eb = eb.ok_or_else(|| {
                        CqlError::invalid("null is not supported inside collections")
                    })?;
                    items.push(Value::decode(e, eb)?.ok_or_else(bad_collection)?);
                }
                if matches!(t, ColType::Set(_)) {
                    items.sort();
                    items.dedup();
                    Value::Set(items)
                } else {
                    Value::List(items)
                }
            }
            ColType::Map(kt, vt) => {
                let mut r = crate::proto::wire::Reader::new(b);
                let n = r.i32().map_err(|_| bad_collection())?;
                let mut entries = Vec::with_capacity(collection_room(n, b.len(), 8));
                for _ in 0..n.max(0) {
                    let kb = r
                        .bytes()
                        .map_err(|_| bad_collection())?
                        .ok_or_else(bad_collection)?;
                    let vb = r
                        .bytes()
                        .map_err(|_| bad_collection())?
                        .ok_or_else(bad_collection)?;
                    let k = Value::decode(kt, kb)?.ok_or_else(bad_collection)?;
                    let v = Value::decode(vt, vb)?.ok_or_else(bad_collection)?;
                    entries.push((k, v));
                }
                Value::Map(normalize_map(entries))
            }
            ColType::Frozen(_) => return Err(CqlError::Server("nested frozen type".into())),
        };
        Ok(Some(v))
    }

    /// Prints the value as a CQL literal that parses back to the same value for its type.
    pub(crate) fn to_literal(&self) -> String {
        match self {
            Value::Ascii(s) | Value::Text(s) => format!("'{}'", s.replace('\'', "''")),
            Value::BigInt(v) | Value::Counter(v) | Value::Timestamp(v) => v.to_string(),
            Value::Blob(b) => format!("0x{}", crate::error::hex(b)),
            Value::Boolean(b) => b.to_string(),
            Value::Date(d) => format!("'{}'", format_date(*d)),
            Value::Double(v) => float_literal(*v),
            Value::Float(v) => float_literal(f64::from(*v)),
            Value::Inet(ip) => format!("'{ip}'"),
            Value::Int(v) => v.to_string(),
            Value::SmallInt(v) => v.to_string(),
            Value::TinyInt(v) => v.to_string(),
            Value::Uuid(u) | Value::TimeUuid(u) => format_uuid(u),
            Value::Varint(v) => v.to_string(),
            Value::List(items) => format!("[{}]", join(items.iter().map(Value::to_literal))),
            Value::Set(items) => format!("{{{}}}", join(items.iter().map(Value::to_literal))),
            Value::Map(e) => format!(
                "{{{}}}",
                join(
                    e.iter()
                        .map(|(k, v)| format!("{}: {}", k.to_literal(), v.to_literal()))
                )
            ),
        }
    }
}

fn join(it: impl Iterator<Item = String>) -> String {
    it.collect::<Vec<_>>().join(", ")
}

fn float_literal(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        }
    } else {
        format!("{v:?}")
    }
}

fn bad_collection() -> CqlError {
    CqlError::invalid("Not enough bytes to read a collection")
}

/// Sorts a map by key; the last value of a duplicated key wins, as in a CQL map literal.
pub(crate) fn normalize_map(mut entries: Vec<(Value, Value)>) -> Vec<(Value, Value)> {
    entries.reverse();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    entries.dedup_by(|a, b| a.0 == b.0);
    entries
}

/// Room for the `n` elements a collection's bytes announce, never more than `len` bytes of
/// `per`-byte length prefixes can hold (a bad count must not reserve memory it cannot fill).
fn collection_room(n: i32, len: usize, per: usize) -> usize {
    usize::try_from(n).unwrap_or(0).min(len / per)
}

fn arr<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[..N]);
    a
}

fn len_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn put_elem(out: &mut Vec<u8>, v: &Value) {
    let at = out.len();
    put_i32(out, 0);
    v.encode(out);
    let n = len_i32(out.len() - at - 4).to_be_bytes();
    out[at..at + 4].copy_from_slice(&n);
}

/// Minimal two's-complement big-endian bytes, as Java's `BigInteger.toByteArray`.
fn varint_bytes(v: i128) -> Vec<u8> {
    let b = v.to_be_bytes();
    let mut i = 0;
    while i < 15 {
        let (cur, next) = (b[i], b[i + 1]);
        if (cur == 0 && next & 0x80 == 0) || (cur == 0xff && next & 0x80 != 0) {
            i += 1;
        } else {
            break;
        }
    }
    b[i..].to_vec()
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Value {}

impl PartialOrd for Value {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Values of one column compare like Cassandra's comparators for the simple types (signed
/// numbers, UTF-8 byte order for text, byte order for blobs/inets). UUIDs compare by bytes,
/// which differs from Cassandra's time-based timeuuid order; documented in the README.
impl Ord for Value {
    fn cmp(&self, other: &Self) -> Ordering {
        use Value as V;
        match (self, other) {
            (V::Ascii(a), V::Ascii(b)) | (V::Text(a), V::Text(b)) => a.cmp(b),
            (V::BigInt(a), V::BigInt(b))
            | (V::Counter(a), V::Counter(b))
            | (V::Timestamp(a), V::Timestamp(b)) => a.cmp(b),
            (V::Blob(a), V::Blob(b)) => a.cmp(b),
            (V::Boolean(a), V::Boolean(b)) => a.cmp(b),
            (V::Date(a), V::Date(b)) => a.cmp(b),
            (V::Double(a), V::Double(b)) => a.total_cmp(b),
            (V::Float(a), V::Float(b)) => a.total_cmp(b),
            (V::Inet(a), V::Inet(b)) => a.cmp(b),
            (V::Int(a), V::Int(b)) => a.cmp(b),
            (V::SmallInt(a), V::SmallInt(b)) => a.cmp(b),
            (V::TinyInt(a), V::TinyInt(b)) => a.cmp(b),
            (V::Uuid(a), V::Uuid(b)) | (V::TimeUuid(a), V::TimeUuid(b)) => a.cmp(b),
            (V::Varint(a), V::Varint(b)) => a.cmp(b),
            (V::List(a), V::List(b)) | (V::Set(a), V::Set(b)) => a.cmp(b),
            (V::Map(a), V::Map(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

/// Formats 16 bytes as the canonical 8-4-4-4-12 UUID text.
pub(crate) fn format_uuid(u: &[u8; 16]) -> String {
    let h = crate::error::hex(u);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
pub(crate) fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date of a day count since 1970-01-01.
pub(crate) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// `date` wire value (epoch at 2^31) to `YYYY-MM-DD`.
pub(crate) fn format_date(d: u32) -> String {
    let (y, m, day) = civil_from_days(i64::from(d) - (1i64 << 31));
    format!("{y:04}-{m:02}-{day:02}")
}

/// Parses `YYYY-MM-DD` into the `date` wire value. Strict, like Cassandra's `date` type:
/// 2024-02-30 is refused.
pub(crate) fn parse_date(s: &str) -> Option<u32> {
    let (y, m, d) = date_parts(s)?;
    let days = days_from_civil(y, m, d);
    if civil_from_days(days) != (y, m, d) {
        return None;
    }
    u32::try_from(days + (1i64 << 31)).ok()
}

/// Days since 1970-01-01 of a `YYYY-MM-DD` that may name a day past its month's end, which
/// Cassandra's `timestamp` parsing (java.time's smart resolver) moves back to the month's last
/// day: 2024-02-30 is 2024-02-29.
fn lenient_days(s: &str) -> Option<i64> {
    let (y, m, mut d) = date_parts(s)?;
    while civil_from_days(days_from_civil(y, m, d)) != (y, m, d) {
        d -= 1;
    }
    Some(days_from_civil(y, m, d))
}

fn date_parts(s: &str) -> Option<(i64, u32, u32)> {
    let mut it = s.splitn(3, '-');
    let y: i64 = it.next()?.parse().ok()?;
    let m: u32 = it.next()?.parse().ok()?;
    let d: u32 = it.next()?.parse().ok()?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    Some((y, m, d))
}

/// Parses the timestamp literal forms cqlsh users type: `YYYY-MM-DD`, optionally followed by
/// ` ` or `T`, `HH:MM[:SS[.fff]]` and a zone `Z` or `+HHMM`/`-HH:MM`. No zone means UTC.
pub(crate) fn parse_timestamp(s: &str) -> Option<i64> {
    let s = s.trim();
    let (date, rest) = match s.find([' ', 'T']) {
        Some(i) => (&s[..i], s[i + 1..].trim()),
        None => (s, ""),
    };
    let days = lenient_days(date)?;
    let mut ms = days * 86_400_000;
    if rest.is_empty() {
        return Some(ms);
    }
    let zone_at = rest.find(['Z', 'z', '+', '-']).unwrap_or(rest.len());
    let (time, zone) = rest.split_at(zone_at);
    let mut parts = time.trim().split(':');
    let h: i64 = parts.next()?.parse().ok()?;
    let mi: i64 = parts.next()?.parse().ok()?;
    let sec = parts.next().unwrap_or("0");
    let (whole, frac) = sec.split_once('.').unwrap_or((sec, ""));
    let secs: i64 = whole.parse().ok()?;
    let frac_ms: i64 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<3}")[..3].parse().ok()?
    };
    ms += ((h * 60 + mi) * 60 + secs) * 1000 + frac_ms;
    let zone = zone.trim();
    if !(zone.is_empty() || zone.eq_ignore_ascii_case("z")) {
        let sign = if zone.starts_with('-') { -1 } else { 1 };
        let digits: String = zone[1..].chars().filter(char::is_ascii_digit).collect();
        if digits.len() != 4 {
            return None;
        }
        let zh: i64 = digits[..2].parse().ok()?;
        let zm: i64 = digits[2..].parse().ok()?;
        ms -= sign * (zh * 60 + zm) * 60_000;
    }
    Some(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip() {
        for s in ["1970-01-01", "2024-02-29", "1900-03-01", "2100-12-31"] {
            let d = parse_date(s).expect("parses");
            assert_eq!(format_date(d), s);
        }
        assert_eq!(parse_date("1970-01-01"), Some(1u32 << 31));
        assert_eq!(
            parse_timestamp("1970-01-02 00:00:01.5+0100"),
            Some(86_400_000 + 1500 - 3_600_000)
        );
    }

    #[test]
    fn varints_are_minimal() {
        assert_eq!(varint_bytes(0), vec![0]);
        assert_eq!(varint_bytes(127), vec![0x7f]);
        assert_eq!(varint_bytes(128), vec![0, 0x80]);
        assert_eq!(varint_bytes(-1), vec![0xff]);
        assert_eq!(varint_bytes(-129), vec![0xff, 0x7f]);
        for v in [0i128, 1, -1, 128, -129, i128::from(i64::MAX) * 3, i128::MIN] {
            let b = varint_bytes(v);
            assert_eq!(
                Value::decode(&ColType::Varint, &b),
                Ok(Some(Value::Varint(v)))
            );
        }
    }

    #[test]
    fn counters_must_be_eight_bytes() {
        let e = Value::decode(&ColType::Counter, &[1, 2, 3]).unwrap_err();
        assert_eq!(e, CqlError::invalid("Expected 8 or 0 byte long (3)"));
    }
}
