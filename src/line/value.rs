//! Counter values: exact integers or finite floats.

use super::InvalidReason;

/// One counter value as sent by the client.
///
/// Integers are kept exact (a float would silently round anything above 2^53); floats are
/// accepted because StatsD clients send `1.5` or `2e3`, and the engine decides how to turn
/// them (and sample rates) into integer deltas.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// `[+-]digits`, within i64.
    Int(i64),
    /// Any other finite number (`1.5`, `-.5`, `2e3`, `1.0`).
    Float(f64),
}

/// Parses one value; `None` if it is not a valid value (see the module grammar).
pub(super) fn parse(s: &str) -> Option<Value> {
    let bytes = s.as_bytes();
    let (negative, digits) = match bytes.first() {
        Some(b'-') => (true, &bytes[1..]),
        Some(b'+') => (false, &bytes[1..]),
        _ => (false, bytes),
    };
    if digits.is_empty() {
        return None;
    }
    // Integer syntax is decided by the characters, not by whether the number fits: an
    // integer beyond i64 is an error, never a rounded float.
    let mut magnitude: u64 = 0;
    let mut overflow = false;
    for &d in digits {
        if !d.is_ascii_digit() {
            return parse_float(s);
        }
        match magnitude
            .checked_mul(10)
            .and_then(|m| m.checked_add(u64::from(d - b'0')))
        {
            Some(m) => magnitude = m,
            None => overflow = true,
        }
    }
    if overflow {
        return None;
    }
    let value = if negative {
        0i64.checked_sub_unsigned(magnitude)?
    } else {
        i64::try_from(magnitude).ok()?
    };
    Some(Value::Int(value))
}

fn parse_float(s: &str) -> Option<Value> {
    // The standard library's parser is correctly rounded. It also accepts "inf" and "nan"
    // spellings, which the finiteness check turns away.
    match s.parse::<f64>() {
        Ok(f) if f.is_finite() => Some(Value::Float(f)),
        _ => None,
    }
}

/// Validates a `:`-separated value list and returns how many values it holds, and the
/// value itself when there is exactly one and it is an integer.
pub(super) fn validate(list: &str) -> Result<(usize, Option<i64>), InvalidReason> {
    // The common case, `1` or `250`: one unsigned integer short enough that it cannot
    // overflow. Same result as the general path below, in a fraction of the work.
    let bytes = list.as_bytes();
    if !bytes.is_empty() && bytes.len() <= 18 && bytes.iter().all(u8::is_ascii_digit) {
        let value = bytes
            .iter()
            .fold(0i64, |acc, &d| acc * 10 + i64::from(d - b'0'));
        return Ok((1, Some(value)));
    }
    let mut count = 0;
    let mut exact = None;
    let mut rest = Some(list);
    while let Some(r) = rest {
        let (raw, next) = super::split_once(r, b':');
        rest = next;
        if raw.is_empty() {
            continue;
        }
        match parse(raw) {
            None => return Err(InvalidReason::BadValue),
            Some(Value::Int(v)) => exact = Some(v),
            Some(Value::Float(_)) => exact = None,
        }
        count += 1;
    }
    match count {
        0 => Err(InvalidReason::NoValue),
        1 => Ok((1, exact)),
        _ => Ok((count, None)),
    }
}

/// Iterator over the values of a [`CounterLine`](super::CounterLine), decoded on the fly.
///
/// The list was validated by [`parse_line`](super::parse_line), so every entry decodes.
#[derive(Debug, Clone)]
pub struct Values<'a> {
    rest: Option<&'a str>,
    remaining: usize,
}

impl<'a> Values<'a> {
    pub(super) fn new(list: &'a str, count: usize) -> Self {
        Self {
            rest: Some(list),
            remaining: count,
        }
    }
}

impl Iterator for Values<'_> {
    type Item = Value;

    fn next(&mut self) -> Option<Value> {
        while let Some(rest) = self.rest {
            let (raw, next) = super::split_once(rest, b':');
            self.rest = next;
            if raw.is_empty() {
                continue;
            }
            let value = parse(raw);
            debug_assert!(value.is_some(), "value {raw:?} passed validation");
            if let Some(value) = value {
                self.remaining = self.remaining.saturating_sub(1);
                return Some(value);
            }
        }
        None
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for Values<'_> {}
impl std::iter::FusedIterator for Values<'_> {}
