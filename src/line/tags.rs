//! DogStatsD tags: `#key:value,key2,key3:a:b`.

use super::{InvalidReason, has_control, split_once};

/// One tag, borrowed from the line.
///
/// `value` is an `Option` because `#env` (no value) and `#env:` (empty value) are different
/// tags to a DogStatsD client, and the canonical tag string keeps them apart. The tag is
/// split at its first `:`, so `#url:http://x` has key `url` and value `http://x`.
///
/// Ordering is by key, then value, bytewise, with no value before any value: the order of
/// the canonical tag string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tag<'a> {
    /// Everything before the first `:`. Never empty in a parsed line.
    pub key: &'a str,
    /// Everything after the first `:`, or `None` if the tag has no `:`.
    pub value: Option<&'a str>,
}

impl<'a> Tag<'a> {
    const EMPTY: Tag<'static> = Tag {
        key: "",
        value: None,
    };

    /// Splits one raw tag at its first `:`.
    fn from_raw(raw: &'a str) -> Self {
        let (key, value) = split_once(raw, b':');
        Tag { key, value }
    }

    /// Appends `key` or `key:value` to `out`.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.key.as_bytes());
        if let Some(value) = self.value {
            out.push(b':');
            out.extend_from_slice(value.as_bytes());
        }
    }
}

/// Iterator over the tags of a [`CounterLine`](super::CounterLine), in line order.
#[derive(Debug, Clone)]
pub struct Tags<'a> {
    rest: Option<&'a str>,
    remaining: usize,
}

impl<'a> Tags<'a> {
    pub(super) fn new(list: &'a str, count: usize) -> Self {
        Self {
            rest: (count > 0).then_some(list),
            remaining: count,
        }
    }
}

impl<'a> Iterator for Tags<'a> {
    type Item = Tag<'a>;

    fn next(&mut self) -> Option<Tag<'a>> {
        while let Some(rest) = self.rest {
            let (raw, next) = split_once(rest, b',');
            self.rest = next;
            if !raw.is_empty() {
                self.remaining = self.remaining.saturating_sub(1);
                return Some(Tag::from_raw(raw));
            }
        }
        None
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for Tags<'_> {}
impl std::iter::FusedIterator for Tags<'_> {}

/// What [`scan`] learned about a tag list.
#[derive(Debug, Clone, Copy)]
pub(super) struct Scan {
    /// Non-empty entries, duplicates included.
    pub(super) count: usize,
    /// The raw list is byte for byte the canonical tag string.
    pub(super) canonical: bool,
}

impl Scan {
    pub(super) const EMPTY: Self = Self {
        count: 0,
        canonical: true,
    };
}

/// Validates a tag list (the `#` field without its `#`).
///
/// `controls` says whether the line holds any control character at all; when it does not
/// (nearly always), the per-tag check is skipped.
pub(super) fn scan(list: &str, max_tags: usize, controls: bool) -> Result<Scan, InvalidReason> {
    if list.is_empty() {
        return Ok(Scan::EMPTY);
    }
    let mut count = 0;
    let mut canonical = true;
    let mut previous: Option<Tag<'_>> = None;
    let mut rest = Some(list);
    while let Some(r) = rest {
        let (raw, next) = split_once(r, b',');
        rest = next;
        if raw.is_empty() {
            // "a,,b", a leading or a trailing comma: skipped, but the raw text is then not
            // the canonical string any more.
            canonical = false;
            continue;
        }
        count += 1;
        if count > max_tags {
            return Err(InvalidReason::TooManyTags);
        }
        let tag = Tag::from_raw(raw);
        if tag.key.is_empty() || (controls && has_control(raw)) {
            return Err(InvalidReason::BadTag);
        }
        if let Some(previous) = previous {
            // Strictly increasing: sorted, and no exact duplicate.
            canonical &= previous < tag;
        }
        previous = Some(tag);
    }
    Ok(Scan { count, canonical })
}

/// Tags sorted on the stack when there are at most this many; more use one temporary vector.
const INLINE_TAGS: usize = 16;

/// Writes the canonical form of `tags` (sorted, exact duplicates removed) to `out`.
pub(super) fn write_canonical(tags: Tags<'_>, out: &mut Vec<u8>) {
    let count = tags.len();
    if count <= INLINE_TAGS {
        let mut buf = [Tag::EMPTY; INLINE_TAGS];
        for (slot, tag) in buf.iter_mut().zip(tags) {
            *slot = tag;
        }
        write_sorted(&mut buf[..count], out);
    } else {
        let mut buf: Vec<Tag<'_>> = tags.collect();
        write_sorted(&mut buf, out);
    }
}

/// Sorts, de-duplicates and writes tags in canonical form; shared with the in-process
/// API so that a line and a call with the same tags land on the same row.
pub(crate) fn write_sorted(tags: &mut [Tag<'_>], out: &mut Vec<u8>) {
    // In place, no allocation; insertion sort for the usual handful of tags.
    tags.sort_unstable();
    let mut previous: Option<Tag<'_>> = None;
    for tag in tags.iter() {
        if previous == Some(*tag) {
            continue;
        }
        if previous.is_some() {
            out.push(b',');
        }
        tag.write_to(out);
        previous = Some(*tag);
    }
}
