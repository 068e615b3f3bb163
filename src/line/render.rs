//! The inverse of the parser: an increment rendered as a counter line.

use std::io::Write as _;

use super::{InvalidReason, Tag, Value, has_control};

/// A counter increment to render as a line: what load generators and tests send.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Increment<'a> {
    /// Metric name.
    pub name: &'a str,
    /// One or more values (several render as DogStatsD multi-value, `name:1:2|c`).
    pub values: &'a [Value],
    /// Sample rate in `(0, 1]`; 1.0 is not written.
    pub sample_rate: f64,
    /// Tags, written in this order.
    pub tags: &'a [Tag<'a>],
    /// Client timestamp in unix seconds, written as `|T...`.
    pub timestamp: Option<i64>,
}

impl<'a> Increment<'a> {
    /// A plain increment: no sample rate, no tags, no timestamp.
    pub fn new(name: &'a str, values: &'a [Value]) -> Self {
        Self {
            name,
            values,
            sample_rate: 1.0,
            tags: &[],
            timestamp: None,
        }
    }
}

/// Appends `inc` to `out` as one counter line, without a line terminator.
///
/// The line parses back to the same name, values, sample rate, tags (in the same order)
/// and timestamp. Floats are written in a form that keeps them floats (`1.0`, not `1`) and
/// reads back to the same bits.
///
/// # Errors
///
/// If `inc` cannot be expressed as a line, returns the reason [`parse_line`] would give for
/// the closest line, and leaves `out` unchanged: an empty name (`no_name`); a name with `:`,
/// `|`, a control character, or starting with `_e{`, which would read as an event
/// (`bad_name`); no values (`no_value`); a non-finite float (`bad_value`); a sample rate
/// outside `(0, 1]` (`bad_sample_rate`); a tag with an empty key, a key holding `:`, or a
/// `,`, `|` or control character anywhere (`bad_tag`); a timestamp below 1
/// (`bad_timestamp`). Line and tag-count limits are not checked.
///
/// [`parse_line`]: super::parse_line
pub fn render(inc: &Increment<'_>, out: &mut Vec<u8>) -> Result<(), InvalidReason> {
    check(inc)?;
    out.extend_from_slice(inc.name.as_bytes());
    for value in inc.values {
        out.push(b':');
        // Writing to a Vec cannot fail.
        let _ = match *value {
            Value::Int(i) => write!(out, "{i}"),
            // Debug gives the shortest text that reads back to the same f64, and always
            // has a '.' or an exponent, so it never reads back as an integer.
            Value::Float(f) => write!(out, "{f:?}"),
        };
    }
    out.extend_from_slice(b"|c");
    if inc.sample_rate != 1.0 {
        let _ = write!(out, "|@{:?}", inc.sample_rate);
    }
    if !inc.tags.is_empty() {
        out.extend_from_slice(b"|#");
        for (i, tag) in inc.tags.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            tag.write_to(out);
        }
    }
    if let Some(ts) = inc.timestamp {
        let _ = write!(out, "|T{ts}");
    }
    Ok(())
}

/// Refuses a counter name and tag pairs that a counter line could not carry, for the
/// reason its line would be refused: the in-process APIs (`Recorder::incr`, the
/// `metrics` facade) take names and tags as strings, and the generic family's canonical
/// tag string (`k:v,k2:v2`) could not tell `[("a", "1,b:2")]` from `[("a", "1"),
/// ("b", "2")]`: two different tag sets would sum into one row. An empty value is a tag
/// without value.
pub fn check_counter(name: &str, tags: &[(&str, &str)]) -> Result<(), InvalidReason> {
    check_name(name)?;
    for (key, value) in tags {
        check_tag(key, value)?;
    }
    Ok(())
}

fn check_name(name: &str) -> Result<(), InvalidReason> {
    if name.is_empty() {
        return Err(InvalidReason::NoName);
    }
    if name.contains([':', '|']) || has_control(name) || name.starts_with("_e{") {
        return Err(InvalidReason::BadName);
    }
    Ok(())
}

fn check_tag(key: &str, value: &str) -> Result<(), InvalidReason> {
    if key.is_empty()
        || key.contains([':', ',', '|'])
        || value.contains([',', '|'])
        || has_control(key)
        || has_control(value)
    {
        return Err(InvalidReason::BadTag);
    }
    Ok(())
}

fn check(inc: &Increment<'_>) -> Result<(), InvalidReason> {
    check_name(inc.name)?;
    if inc.values.is_empty() {
        return Err(InvalidReason::NoValue);
    }
    if inc
        .values
        .iter()
        .any(|v| matches!(v, Value::Float(f) if !f.is_finite()))
    {
        return Err(InvalidReason::BadValue);
    }
    if !(inc.sample_rate > 0.0 && inc.sample_rate <= 1.0) {
        return Err(InvalidReason::BadSampleRate);
    }
    for tag in inc.tags {
        check_tag(tag.key, tag.value.unwrap_or(""))?;
    }
    if inc.timestamp.is_some_and(|t| t < 1) {
        return Err(InvalidReason::BadTimestamp);
    }
    Ok(())
}
