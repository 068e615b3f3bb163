//! StatsD/DogStatsD line parser: bytes from a socket in, one verdict per line out.
//!
//! The parser is the first thing untrusted input meets, so it is built to three rules:
//! it never panics and never allocates on the hot path; a bad line is reported with one
//! reason from a small closed set ([`InvalidReason`]) and never spoils its neighbours; and
//! it accepts what real StatsD clients send, following the Datadog agent's DogStatsD parser
//! wherever the protocol is loose, but refuses anything that a later stage (the canonical
//! tag string, a CQL text column, a log line) could not carry faithfully.
//!
//! # Use
//!
//! ```
//! use countersink::line::{parse_line, split_lines, LineLimits, LineResult, Value};
//!
//! let packet = b"page.views:1|c|#page_id:p123,env:prod\r\npage.views:2|g\n\nbad line\n";
//! let limits = LineLimits::default();
//! let verdicts: Vec<_> = split_lines(packet).map(|l| parse_line(l, &limits)).collect();
//! assert_eq!(verdicts.len(), 3); // the empty line is skipped
//! let LineResult::Counter(c) = &verdicts[0] else { panic!() };
//! assert_eq!(c.name(), "page.views");
//! assert_eq!(c.values().collect::<Vec<_>>(), [Value::Int(1)]);
//! assert_eq!(c.tag("page_id"), Some("p123"));
//! let mut key = Vec::new();
//! c.write_canonical_tags(&mut key);
//! assert_eq!(key, b"env:prod,page_id:p123");
//! assert!(matches!(verdicts[1], LineResult::Ignored(_)));  // a gauge: not ours, not an error
//! assert!(matches!(verdicts[2], LineResult::Invalid(_)));
//! ```
//!
//! # Cost
//!
//! The parser walks a line by byte offsets, part by part, finding separators eight
//! bytes at a time; tags are compared in their raw `key:value` form (in the order of
//! [`Tag`]) without being split. The engine uses two crate-internal entry points beside
//! [`parse_line`]: one that also records where each tag starts and ends, so that the
//! canonical tag string is written without a second pass, and `cut` with
//! `parse_values`, for lines whose name and rest it has placed before (the verdict of
//! such a line depends on its values alone; a property test holds the parser to that).
//!
//! # Grammar
//!
//! ```text
//! packet        = line *( LF line )           ; one CR before each LF (and at the very end) is dropped;
//!                                             ; empty lines are skipped
//! line          = event / service-check / metric
//! event         = "_e{" *OCTET                ; Ignored(Event), content not examined
//! service-check = "_sc|" *OCTET               ; Ignored(ServiceCheck), content not examined
//! metric        = name ":" values "|" type *( "|" field )
//! name          = 1*( any character but ":" "|" )
//! values        = value-list                  ; split at ":"; empty entries ("1::2") skipped;
//!                                             ; at least one value
//! value         = integer / float
//! integer       = [ "+" / "-" ] 1*DIGIT       ; exact; outside i64 is bad_value, never rounded
//! float         = [ "+" / "-" ] ( 1*DIGIT "." *DIGIT / "." 1*DIGIT / 1*DIGIT ) [ exponent ]
//!                                             ; must be finite ("inf", "nan", "1e999": bad_value)
//! exponent      = ( "e" / "E" ) [ "+" / "-" ] 1*DIGIT
//! type          = "c" / "g" / "ms" / "h" / "d" / "s"      ; exact, case-sensitive
//! field         = "@" rate / "#" tags / "T" timestamp / other
//! rate          = float or integer, finite, 0 < rate <= 1  ; default 1
//! tags          = [ tag *( "," tag ) ]        ; empty entries ("a,,b", trailing ",") skipped
//! tag           = key [ ":" tag-value ]       ; split at the FIRST ":", so a value may hold ":"
//! key           = 1*( any character but ":" "," "|" )
//! tag-value     = *( any character but "," "|" )
//! timestamp     = 1*DIGIT                     ; unix seconds, 1 ..= i64::MAX, no sign
//! other         = any other field, including empty ones     ; ignored
//! ```
//!
//! The whole line must be valid UTF-8 (`not_utf8`): names and tags end up in CQL `text`
//! columns, which only hold UTF-8. Names, tag keys and tag values must not contain ASCII
//! control characters (U+0000..U+001F, U+007F): a stray CR, NUL or escape sequence is
//! always a client bug, would split or garble log lines and operator output, and would
//! silently create a second series that looks identical to the first. Nothing else is
//! restricted: spaces, dots, dashes, `#`, `@`, quotes, `;` and any non-ASCII letter are
//! kept byte for byte. The "alphanumerics, `_` and `.`" rule of the Datadog docs is a
//! naming policy that the Datadog agent does not enforce. Etsy statsd rewrites names
//! (spaces to `_`, `/` to `-`, other characters dropped); countersink does not, because a
//! rewrite silently merges distinct series into one row, and the row key should be what
//! the client sent.
//!
//! ## Order of checks (the first failure is the reason)
//!
//! 1. longer than [`LineLimits::max_line_bytes`]: `too_long` (so work per line is bounded);
//! 2. starts with `_e{` or `_sc|`: ignored event / service check;
//! 3. not UTF-8: `not_utf8`;
//! 4. empty name: `no_name`; no `:` after the name, or nothing after it: `no_value`;
//! 5. no type, or a type not in the list: `bad_type`;
//! 6. a type other than `c`: ignored (gauge, timer, histogram, distribution, set). Its name
//!    and values are not examined further: countersink does not own those metrics, and
//!    counting them as invalid would raise alarms about traffic meant for another agent;
//! 7. counters only: control character in the name: `bad_name`; a value that does not
//!    parse, or is not finite, or no value left after skipping empty entries:
//!    `bad_value` / `no_value`;
//! 8. optional fields, left to right: `bad_sample_rate`, `bad_tag`, `too_many_tags`
//!    (more than [`LineLimits::max_tags`] non-empty tags in one `#` field),
//!    `bad_timestamp`.
//!
//! ## DogStatsD fields, and what the Datadog agent does with them
//!
//! - Optional fields may come in any order. A field that appears twice is validated both
//!   times and the last one wins; for `#` that means the earlier tag list is dropped, not
//!   merged. This is what the agent does (each occurrence overwrites the previous one).
//! - `c:<container-id>`, `e:<external-data>` and `card:<cardinality>` carry origin
//!   detection data. The agent uses them only to add origin tags when client origin
//!   detection is enabled and skips them otherwise. countersink does no origin enrichment,
//!   so it skips them always, without validating them.
//! - Any other field (a future protocol extension, an empty field from `||` or a trailing
//!   `|`) is skipped, as the agent does, so that a newer client library does not turn every
//!   line into an error.
//! - `T<unix-seconds>`: the agent rejects a timestamp that is not an integer or is below 1;
//!   so does this parser. It always reports the timestamp; the engine decides whether it
//!   falls inside the accepted window.
//! - `@rate`: the agent accepts any float; Datadog's Rust implementation refuses rates
//!   outside `[0, 1]`. This parser requires `0 < rate <= 1`: the engine scales values by
//!   `1 / rate`, and a rate of 0, above 1 or not a number has no meaning for a count.
//!   Very small positive rates are accepted here; bounding the scaled value (a rate of
//!   1e-300 makes any count overflow) is the engine's job.
//! - Multi-value (`name:1:2:3|c`, protocol v1.1): each value is one increment; empty entries
//!   are skipped as in the agent.
//! - Events are recognised by `_e{` and service checks by `_sc|`, the four-byte prefix
//!   (the agent tests `_sc` alone, which would also swallow a metric named `_scan:1|c`).
//!
//! Anything the agent accepts but this parser refuses is listed above: out-of-range sample
//! rates, non-finite values, integers beyond i64, and control characters.

mod render;
mod tags;
mod value;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

pub use render::{Increment, check_counter, render};
pub use tags::{Tag, Tags};
pub(crate) use tags::{TagSpans, write_canonical_kept, write_sorted};
pub use value::{Value, Values};

use std::fmt;

/// Per-line limits, checked before any other work so that a hostile packet costs little.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineLimits {
    /// Longest accepted line in bytes, not counting its line terminator. Longer lines are
    /// `too_long`. Defaults to 8192, the Datadog agent's default receive buffer
    /// (`dogstatsd_buffer_size`): the agent cannot receive a longer line at all, so no
    /// client that works with it sends one.
    pub max_line_bytes: usize,
    /// Most tags accepted in one line (non-empty entries of the `#` field, duplicates
    /// included). More is `too_many_tags`. Defaults to 64: far more than any sensible
    /// counter key, and low enough that canonicalising the tag string stays cheap.
    pub max_tags: usize,
}

impl LineLimits {
    /// The documented defaults: 8192 bytes per line, 64 tags.
    pub const DEFAULT: Self = Self {
        max_line_bytes: 8192,
        max_tags: 64,
    };
}

impl Default for LineLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Why a line (or, for the last two variants, an increment in a later stage) was refused.
///
/// This is the project's single, closed set of reasons: it is the `reason` label of
/// `countersink_lines_invalid_total`, so it must stay small and must never carry data.
/// [`InvalidReason::ALL`] lists every variant so that metrics can be registered up front.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, thiserror::Error)]
pub enum InvalidReason {
    /// The line is not valid UTF-8.
    #[error("line is not valid UTF-8")]
    NotUtf8,
    /// Nothing before the first `:` (or the line starts with `|`).
    #[error("metric name is empty")]
    NoName,
    /// The name of a counter contains an ASCII control character.
    #[error("metric name contains a control character")]
    BadName,
    /// No `:` after the name, or nothing between it and the first `|`, or only empty
    /// entries in a multi-value list.
    #[error("no value after the metric name")]
    NoValue,
    /// A counter value is not an integer or a finite float, or an integer is outside i64.
    #[error("value is not a finite number or an integer within i64")]
    BadValue,
    /// No `|type` field, or a type other than `c`, `g`, `ms`, `h`, `d`, `s`.
    #[error("missing or unknown metric type")]
    BadType,
    /// `@` not followed by a finite number in `0 < rate <= 1`.
    #[error("sample rate is not a number in (0, 1]")]
    BadSampleRate,
    /// A tag with an empty key, or with an ASCII control character in its key or value.
    #[error("tag has an empty key or a control character")]
    BadTag,
    /// `T` not followed by decimal unix seconds in `1..=i64::MAX`.
    #[error("timestamp is not unix seconds")]
    BadTimestamp,
    /// The line is longer than [`LineLimits::max_line_bytes`].
    #[error("line is longer than the limit")]
    TooLong,
    /// The line has more tags than [`LineLimits::max_tags`].
    #[error("line has more tags than the limit")]
    TooManyTags,
    /// Detected after parsing: the counter's configured family needs a key tag that the
    /// line does not carry.
    #[error("a key tag required by the metric's family is missing")]
    MissingKeyTag,
    /// Detected after parsing: the row key (name, tags or key tag values) is longer than
    /// the configured key length limit.
    #[error("row key is longer than the limit")]
    KeyTooLong,
    /// Detected after parsing: a key tag of the counter's configured family appears twice
    /// with different values, so the row it belongs to is ambiguous.
    #[error("a key tag appears twice with different values")]
    AmbiguousKeyTag,
}

impl InvalidReason {
    /// Every reason, in declaration order, for pre-registering metric label values.
    pub const ALL: [Self; 14] = [
        Self::NotUtf8,
        Self::NoName,
        Self::BadName,
        Self::NoValue,
        Self::BadValue,
        Self::BadType,
        Self::BadSampleRate,
        Self::BadTag,
        Self::BadTimestamp,
        Self::TooLong,
        Self::TooManyTags,
        Self::MissingKeyTag,
        Self::KeyTooLong,
        Self::AmbiguousKeyTag,
    ];

    /// The snake_case metric label, e.g. `bad_sample_rate`. Stable: dashboards depend on it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::NotUtf8 => "not_utf8",
            Self::NoName => "no_name",
            Self::BadName => "bad_name",
            Self::NoValue => "no_value",
            Self::BadValue => "bad_value",
            Self::BadType => "bad_type",
            Self::BadSampleRate => "bad_sample_rate",
            Self::BadTag => "bad_tag",
            Self::BadTimestamp => "bad_timestamp",
            Self::TooLong => "too_long",
            Self::TooManyTags => "too_many_tags",
            Self::MissingKeyTag => "missing_key_tag",
            Self::KeyTooLong => "key_too_long",
            Self::AmbiguousKeyTag => "ambiguous_key_tag",
        }
    }
}

/// A well-formed line that countersink does not aggregate. Counted, never an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IgnoredKind {
    /// `|g`.
    Gauge,
    /// `|ms`.
    Timer,
    /// `|h`.
    Histogram,
    /// `|d`.
    Distribution,
    /// `|s`.
    Set,
    /// A DogStatsD event, `_e{...`.
    Event,
    /// A DogStatsD service check, `_sc|...`.
    ServiceCheck,
    /// Never a line: an `absolute` update of a counter through the `metrics` facade
    /// (`src/facade/`), a value to set rather than a delta to add.
    CounterAbsolute,
}

impl IgnoredKind {
    /// Every kind, in declaration order, for pre-registering metric label values.
    pub const ALL: [Self; 8] = [
        Self::Gauge,
        Self::Timer,
        Self::Histogram,
        Self::Distribution,
        Self::Set,
        Self::Event,
        Self::ServiceCheck,
        Self::CounterAbsolute,
    ];

    /// The snake_case metric label (the `type` label of `countersink_lines_ignored_total`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Gauge => "gauge",
            Self::Timer => "timer",
            Self::Histogram => "histogram",
            Self::Distribution => "distribution",
            Self::Set => "set",
            Self::Event => "event",
            Self::ServiceCheck => "service_check",
            Self::CounterAbsolute => "counter_absolute",
        }
    }
}

impl fmt::Display for IgnoredKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The verdict on one line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LineResult<'a> {
    /// A counter line, fully validated: iterating its values and tags cannot fail.
    Counter(CounterLine<'a>),
    /// A well-formed line of a type countersink does not aggregate.
    Ignored(IgnoredKind),
    /// A line that was refused, and why.
    Invalid(InvalidReason),
}

/// A parsed counter line. Borrows the packet: nothing is copied.
///
/// Values and tags are kept as the raw text that was validated in [`parse_line`] and
/// decoded again when iterated: that keeps this struct small and allocation-free however
/// many values or tags the line has, at the cost of reading a few bytes twice.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CounterLine<'a> {
    name: &'a str,
    values: &'a str,
    value_count: usize,
    /// The value, when the line has exactly one and it is an integer (the usual case).
    exact: Option<i64>,
    sample_rate: f64,
    timestamp: Option<i64>,
    tags: &'a str,
    tag_count: usize,
    tags_canonical: bool,
}

impl<'a> CounterLine<'a> {
    /// The metric name, exactly as sent.
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// The values, in line order (one for plain StatsD, several for `name:1:2:3|c`).
    pub fn values(&self) -> Values<'a> {
        Values::new(self.values, self.value_count)
    }

    /// How many values the line carries (at least one).
    pub fn value_count(&self) -> usize {
        self.value_count
    }

    /// The value, when the line carries exactly one and it is an integer: the common
    /// case, which then needs no second look at the value text.
    pub(crate) fn single_int(&self) -> Option<i64> {
        self.exact
    }

    /// The client's sample rate, in `(0, 1]`; 1.0 when the line has no `@` field.
    pub fn sample_rate(&self) -> f64 {
        self.sample_rate
    }

    /// The client timestamp in unix seconds (`|T...`), if any. Not range-checked here: the
    /// engine applies the accepted time window.
    pub fn timestamp(&self) -> Option<i64> {
        self.timestamp
    }

    /// The tags, in line order, empty entries skipped, duplicates kept.
    pub fn tags(&self) -> Tags<'a> {
        Tags::new(self.tags, self.tag_count)
    }

    /// Number of tags (non-empty entries, duplicates included).
    pub fn tag_count(&self) -> usize {
        self.tag_count
    }

    /// The value of the first tag (in line order) whose key is `key`. A tag without a value
    /// (`#env`) and a tag with an empty value (`#env:`) both give `Some("")`; use
    /// [`tags`](Self::tags) to tell them apart. If a line repeats a key with different
    /// values, only the first is returned.
    pub fn tag(&self, key: &str) -> Option<&'a str> {
        self.tags()
            .find(|t| t.key == key)
            .map(|t| t.value.unwrap_or(""))
    }

    /// The tag field as sent, without the `#`.
    pub fn raw_tags(&self) -> &'a str {
        self.tags
    }

    /// True when [`raw_tags`](Self::raw_tags) is already the canonical tag string (sorted,
    /// no duplicates, no empty entries), so a caller may borrow it instead of copying.
    /// Clients that always send their tags in the same sorted order hit this fast path.
    pub fn tags_are_canonical(&self) -> bool {
        self.tags_canonical
    }

    /// Appends the canonical tag string to `out`: tags sorted by key then value (bytewise;
    /// a tag without a value sorts before any tag with that key and a value), exact
    /// duplicates removed, rendered `k:v,k2,k3:v3`. Two lines whose tags differ only in
    /// order or repetition give the same string, so they land on the same row. The string
    /// reads back unambiguously with the `#` grammar: keys hold no `:` or `,`, values no `,`.
    ///
    /// `out` is not cleared. Nothing is allocated besides growth of `out`, unless the line
    /// has more than 16 tags, in which case one temporary vector is used for sorting.
    pub fn write_canonical_tags(&self, out: &mut Vec<u8>) {
        if self.tags_canonical {
            out.extend_from_slice(self.tags.as_bytes());
        } else {
            tags::write_canonical(self.tags(), out);
        }
    }

    /// [`write_canonical_tags`](Self::write_canonical_tags), from the tags that
    /// [`parse_line_indexed`] recorded for this line (already sorted), so the tag field is
    /// not split again. Falls back to the plain method if `spans` belongs to another line.
    pub(crate) fn write_canonical_tags_with(&self, spans: &TagSpans, out: &mut Vec<u8>) {
        if self.tags_canonical {
            out.extend_from_slice(self.tags.as_bytes());
        } else if !spans.write_canonical(self.tags, out) {
            tags::write_canonical(self.tags(), out);
        }
    }
}

/// Splits a datagram (or a stream frame) into lines.
///
/// Lines end at `\n`; one `\r` before it (or at the end of the packet) is removed, so
/// `\r\n` works too. Empty lines are skipped, so `a\n\nb\n` gives two lines. Each line is
/// then given to [`parse_line`] on its own.
#[must_use]
pub fn split_lines(packet: &[u8]) -> Lines<'_> {
    Lines { rest: packet }
}

/// Iterator over the non-empty lines of a packet; see [`split_lines`].
#[derive(Debug, Clone)]
pub struct Lines<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Lines<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        while !self.rest.is_empty() {
            let (line, rest) = match memchr::memchr(b'\n', self.rest) {
                Some(i) => (&self.rest[..i], &self.rest[i + 1..]),
                None => (self.rest, &[][..]),
            };
            self.rest = rest;
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if !line.is_empty() {
                return Some(line);
            }
        }
        None
    }
}

impl std::iter::FusedIterator for Lines<'_> {}

/// Parses one line (without its terminator) into a verdict. Never panics, never allocates.
///
/// See the [module documentation](self) for the grammar and the order of checks.
#[must_use]
pub fn parse_line<'a>(line: &'a [u8], limits: &LineLimits) -> LineResult<'a> {
    match parse(line, limits, &mut ()) {
        Ok(result) => result,
        Err(reason) => LineResult::Invalid(reason),
    }
}

/// [`parse_line`], recording the line's tags in `spans` so that
/// [`CounterLine::write_canonical_tags_with`] can build the canonical tag string without
/// splitting the tag field again. The engine's per-packet path.
pub(crate) fn parse_line_indexed<'a>(
    line: &'a [u8],
    limits: &LineLimits,
    spans: &mut TagSpans,
) -> LineResult<'a> {
    match parse(line, limits, spans) {
        Ok(result) => result,
        Err(reason) => LineResult::Invalid(reason),
    }
}

/// A line cut where the parser cuts it first: `name ":" values "|" rest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cut<'a> {
    /// Up to the first `:`.
    pub(crate) name: &'a [u8],
    /// Between that `:` and the next `|`.
    pub(crate) values: &'a [u8],
    /// Everything after that `|`: the type and the optional fields.
    pub(crate) rest: &'a [u8],
}

/// Cuts `line` exactly as [`parse_line`] does before it looks at the parts, or `None`
/// when the line has no name or no `|` after its values (it is invalid then).
///
/// Everything [`parse_line`] decides about a line besides its values is a function of
/// `name` and `rest` (and the limits); see [`parse_values`] for the values.
pub(crate) fn cut(line: &[u8]) -> Option<Cut<'_>> {
    let name_end = find2(line, 0, b':', b'|');
    if name_end == 0 || line.get(name_end) != Some(&b':') {
        return None;
    }
    let values_end = find(line, name_end + 1, b'|');
    let rest = line.get(values_end + 1..)?;
    Some(Cut {
        name: &line[..name_end],
        values: &line[name_end + 1..values_end],
        rest,
    })
}

/// The values of a counter line, validated.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ParsedValues<'a> {
    text: &'a str,
    count: usize,
    exact: Option<i64>,
}

impl<'a> ParsedValues<'a> {
    /// The values, in line order.
    pub(crate) fn values(&self) -> Values<'a> {
        Values::new(self.text, self.count)
    }

    /// How many.
    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// The value, when there is exactly one and it is an integer.
    pub(crate) fn single_int(&self) -> Option<i64> {
        self.exact
    }
}

/// Validates the values part of a [`Cut`]. For a line whose name and rest are those of a
/// line that [`parse_line`] accepted as a counter (so both are valid UTF-8 without
/// control characters in the name or tags), this gives the same verdict and the same
/// values as parsing the whole line: invalid UTF-8 in the values is `not_utf8`, as it is
/// for the line; the type and the fields are checked before and after the values but do
/// not depend on them; and a control character in the values fails them either way.
#[inline]
pub(crate) fn parse_values(values: &[u8]) -> Result<ParsedValues<'_>, InvalidReason> {
    // A lone single digit, by far the most common value, without a call.
    if let [digit @ b'0'..=b'9'] = values {
        const DIGITS: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
        let digit = usize::from(digit - b'0');
        return Ok(ParsedValues {
            text: DIGITS[digit],
            count: 1,
            exact: Some(digit as i64),
        });
    }
    parse_values_slow(values)
}

fn parse_values_slow(values: &[u8]) -> Result<ParsedValues<'_>, InvalidReason> {
    let text = std::str::from_utf8(values).map_err(|_| InvalidReason::NotUtf8)?;
    let (count, exact) = value::validate(text)?;
    Ok(ParsedValues { text, count, exact })
}

/// Splits at the first `sep`; the separator belongs to neither side. Slicing at an ASCII
/// byte is always on a character boundary.
fn split_once(s: &str, sep: u8) -> (&str, Option<&str>) {
    // The parts of a line are short: a plain loop beats memchr's set-up cost here.
    match s.as_bytes().iter().position(|&b| b == sep) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    }
}

/// True if `s` contains an ASCII control character (C0 or DEL).
///
/// Written without an early exit so that it compiles to a vectorised loop: the parser runs
/// it once over the whole line, and looks for the culprit part only when it says yes.
fn has_control(s: &str) -> bool {
    s.bytes()
        .fold(false, |found, b| found | (b < 0x20) | (b == 0x7f))
}

/// Index of the first `a` or `b` in `bytes[from..]`, or `bytes.len()`.
///
/// Eight bytes at a time (SWAR): the parts of a line are a few to a few dozen bytes
/// long, too short for `memchr`'s set-up to pay, and a byte loop costs several
/// instructions per byte.
#[inline]
fn find2(bytes: &[u8], from: usize, a: u8, b: u8) -> usize {
    let (a, b) = (BYTES_ONE * u64::from(a), BYTES_ONE * u64::from(b));
    let matches = |word: u64| zero_bytes(word ^ a) | zero_bytes(word ^ b);
    search(bytes, from, matches)
}

/// Index of the first `a` in `bytes[from..]`, or `bytes.len()`.
#[inline]
fn find(bytes: &[u8], from: usize, a: u8) -> usize {
    let a = BYTES_ONE * u64::from(a);
    search(bytes, from, |word| zero_bytes(word ^ a))
}

/// `0x01` in every byte.
const BYTES_ONE: u64 = u64::from_le_bytes([1; 8]);
/// `0x7f` in every byte.
const BYTES_LOW7: u64 = u64::from_le_bytes([0x7f; 8]);

/// The high bit set in exactly the bytes of `word` that are zero (no false positives:
/// no carry crosses a byte).
#[inline]
fn zero_bytes(word: u64) -> u64 {
    !(((word & BYTES_LOW7) + BYTES_LOW7) | word | BYTES_LOW7)
}

/// The first index at or after `from` whose byte `matches` flags (with its high bit, as
/// [`zero_bytes`] does), reading little-endian words; `bytes.len()` if none.
#[inline(always)]
fn search(bytes: &[u8], from: usize, matches: impl Fn(u64) -> u64) -> usize {
    let mut at = from;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let found = matches(u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8])));
        if found != 0 {
            return at + (found.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    if at >= bytes.len() {
        return bytes.len();
    }
    if bytes.len() >= 8 {
        // The last word, overlapping what was searched already: ignore the bytes before `at`.
        let last = bytes.len() - 8;
        let word = u64::from_le_bytes(bytes[last..].try_into().unwrap_or([0; 8]));
        let found = matches(word) & (u64::MAX << ((at - last) * 8));
        return if found != 0 {
            last + (found.trailing_zeros() / 8) as usize
        } else {
            bytes.len()
        };
    }
    // A line shorter than a word.
    let mut padded = [0u8; 8];
    padded[..bytes.len()].copy_from_slice(bytes);
    let found = matches(u64::from_le_bytes(padded))
        & (u64::MAX << (at * 8))
        & !(u64::MAX << (bytes.len() * 8));
    if found != 0 {
        (found.trailing_zeros() / 8) as usize
    } else {
        bytes.len()
    }
}

/// The parser proper. Works on byte offsets into the line, one pass per part: the parts
/// are found left to right and each byte is looked at about once. `spans` records the
/// tags for [`CounterLine::write_canonical_tags_with`].
fn parse<'a>(
    line: &'a [u8],
    limits: &LineLimits,
    spans: &mut impl tags::SpanSink,
) -> Result<LineResult<'a>, InvalidReason> {
    if line.len() > limits.max_line_bytes {
        return Err(InvalidReason::TooLong);
    }
    if line.starts_with(b"_e{") {
        return Ok(LineResult::Ignored(IgnoredKind::Event));
    }
    if line.starts_with(b"_sc|") {
        return Ok(LineResult::Ignored(IgnoredKind::ServiceCheck));
    }
    let line = std::str::from_utf8(line).map_err(|_| InvalidReason::NotUtf8)?;
    // Control characters are rare; one pass over the line spares a pass over each part.
    let controls = has_control(line);
    let bytes = line.as_bytes();
    let len = bytes.len();

    // name ":" values "|" type: the name ends at the first ":" before the first "|".
    let name_end = find2(bytes, 0, b':', b'|');
    if name_end == 0 {
        return Err(InvalidReason::NoName);
    }
    if name_end == len || bytes[name_end] == b'|' {
        return Err(InvalidReason::NoValue);
    }
    let values_end = find(bytes, name_end + 1, b'|');
    if values_end == name_end + 1 {
        return Err(InvalidReason::NoValue);
    }
    if values_end == len {
        return Err(InvalidReason::BadType);
    }
    let type_end = find(bytes, values_end + 1, b'|');
    let ignored = match &bytes[values_end + 1..type_end] {
        b"c" => None,
        b"g" => Some(IgnoredKind::Gauge),
        b"ms" => Some(IgnoredKind::Timer),
        b"h" => Some(IgnoredKind::Histogram),
        b"d" => Some(IgnoredKind::Distribution),
        b"s" => Some(IgnoredKind::Set),
        _ => return Err(InvalidReason::BadType),
    };
    if let Some(kind) = ignored {
        return Ok(LineResult::Ignored(kind));
    }

    let name = &line[..name_end];
    if controls && has_control(name) {
        return Err(InvalidReason::BadName);
    }
    let values = &line[name_end + 1..values_end];
    let (value_count, exact) = value::validate(values)?;

    let mut sample_rate = 1.0;
    let mut timestamp = None;
    let mut tag_field = (0, 0);
    let mut tag_scan = tags::Scan::EMPTY;
    spans.clear();
    // `at` is the index of the "|" before the next field, or the end of the line.
    let mut at = type_end;
    while at < len {
        let start = at + 1;
        match bytes.get(start) {
            Some(b'#') => {
                let (end, scan) = tags::scan(line, start + 1, limits.max_tags, controls, spans)?;
                tag_field = (start + 1, end);
                tag_scan = scan;
                at = end;
            }
            Some(b'@') => {
                at = find(bytes, start, b'|');
                sample_rate = parse_sample_rate(&line[start + 1..at])?;
            }
            Some(b'T') => {
                at = find(bytes, start, b'|');
                timestamp = Some(parse_timestamp(&line[start + 1..at])?);
            }
            // c:, e:, card:, empty and unknown fields: skipped, as the Datadog agent does.
            _ => at = find(bytes, start, b'|'),
        }
    }

    Ok(LineResult::Counter(CounterLine {
        name,
        values,
        value_count,
        exact,
        sample_rate,
        timestamp,
        tags: &line[tag_field.0..tag_field.1],
        tag_count: tag_scan.count,
        tags_canonical: tag_scan.canonical,
    }))
}

fn parse_sample_rate(s: &str) -> Result<f64, InvalidReason> {
    match s.parse::<f64>() {
        // NaN fails both comparisons; infinities fail the upper bound.
        Ok(r) if r > 0.0 && r <= 1.0 => Ok(r),
        _ => Err(InvalidReason::BadSampleRate),
    }
}

fn parse_timestamp(s: &str) -> Result<i64, InvalidReason> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(InvalidReason::BadTimestamp);
    }
    match s.parse::<i64>() {
        Ok(t) if t >= 1 => Ok(t),
        _ => Err(InvalidReason::BadTimestamp),
    }
}
