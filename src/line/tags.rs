//! DogStatsD tags: `#key:value,key2,key3:a:b`.

use super::{InvalidReason, find2, has_control, split_once};

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

/// Where the parser can record the tags it finds, so that canonicalising them later needs
/// no second pass over the tag field. `()` records nothing (the public [`parse_line`]).
///
/// [`parse_line`]: super::parse_line
pub(crate) trait SpanSink {
    /// Forgets earlier tags: a new `#` field starts (a repeated field replaces the list).
    fn clear(&mut self);
    /// One non-empty raw tag, `field[start..end]`.
    fn push(&mut self, start: usize, end: usize);
    /// The field is scanned; `canonical` says whether it is the canonical string already.
    fn finish(&mut self, field: &str, canonical: bool);
}

impl SpanSink for () {
    fn clear(&mut self) {}
    fn push(&mut self, _: usize, _: usize) {}
    fn finish(&mut self, _: &str, _: bool) {}
}

/// The tags of the last line parsed with [`parse_line_indexed`], in canonical order:
/// offsets of each raw tag (`key` or `key:value`) in the tag field, sorted and with exact
/// duplicates removed. Reused from line to line, so it allocates only while it grows.
///
/// [`parse_line_indexed`]: super::parse_line_indexed
#[derive(Debug, Default)]
pub(crate) struct TagSpans {
    spans: Vec<(usize, usize)>,
    /// Address and length of the field the spans belong to, so that spans of another
    /// line are never applied to this one (they are then ignored, not trusted).
    field: (usize, usize),
}

impl SpanSink for TagSpans {
    fn clear(&mut self) {
        self.spans.clear();
        self.field = (0, 0);
    }

    fn push(&mut self, start: usize, end: usize) {
        self.spans.push((start, end));
    }

    fn finish(&mut self, field: &str, canonical: bool) {
        self.field = (field.as_ptr() as usize, field.len());
        if canonical {
            return;
        }
        let bytes = field.as_bytes();
        let raw = |&(start, end): &(usize, usize)| &bytes[start..end];
        let spans = &mut self.spans;
        if spans.len() <= INLINE_TAGS {
            // Insertion sort: the usual handful of tags, nearly always a few compares.
            for i in 1..spans.len() {
                let mut j = i;
                while j > 0 && raw_cmp(raw(&spans[j - 1]), raw(&spans[j])).is_gt() {
                    spans.swap(j - 1, j);
                    j -= 1;
                }
            }
        } else {
            spans.sort_unstable_by(|a, b| raw_cmp(raw(a), raw(b)));
        }
        // Exact duplicates are now adjacent: keep the first of each run.
        let mut kept = usize::from(!spans.is_empty());
        for i in 1..spans.len() {
            if raw(&spans[i]) != raw(&spans[kept - 1]) {
                spans[kept] = spans[i];
                kept += 1;
            }
        }
        spans.truncate(kept);
    }
}

impl TagSpans {
    /// Appends the canonical tag string of `field` (the tag field of the line these spans
    /// were recorded for) to `out`. Returns `false`, writing nothing, if the spans belong
    /// to another field.
    pub(crate) fn write_canonical(&self, field: &str, out: &mut Vec<u8>) -> bool {
        if self.field != (field.as_ptr() as usize, field.len()) {
            return false;
        }
        let bytes = field.as_bytes();
        out.reserve(field.len());
        for (i, &(start, end)) in self.spans.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&bytes[start..end]);
        }
        true
    }

    /// [`write_canonical`](Self::write_canonical) without the tags whose key `keep`
    /// refuses: dropping tags leaves the others in canonical order. Returns `false`,
    /// writing nothing, if the spans belong to another field.
    pub(crate) fn write_canonical_kept(
        &self,
        field: &str,
        keep: &dyn Fn(&str) -> bool,
        out: &mut Vec<u8>,
    ) -> bool {
        if self.field != (field.as_ptr() as usize, field.len()) {
            return false;
        }
        out.reserve(field.len());
        let mut first = true;
        for &(start, end) in &self.spans {
            let raw = &field[start..end];
            let (key, _) = split_once(raw, b':');
            if !keep(key) {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(raw.as_bytes());
        }
        true
    }
}

/// Orders two raw tags (`key` or `key:value`, keys without `:`) exactly as the [`Tag`]s
/// they split into are ordered: by key, then no value, then by value, all bytewise.
/// Works on the raw text, so the tags need not be split first; most pairs differ in
/// their first byte and are decided without calling `memcmp`.
pub(super) fn raw_cmp(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let common = a.len().min(b.len());
    let mut i = 0;
    while i < common && a[i] == b[i] {
        if a[i] == b':' {
            // Same key, both with a value: the values decide.
            return a[i + 1..].cmp(&b[i + 1..]);
        }
        i += 1;
    }
    // Still inside both keys. A key that ends here (no value, then a value) sorts before
    // one that goes on.
    let rank = |s: &[u8]| match s.get(i) {
        None => 0,
        Some(b':') => 1,
        Some(&c) => u16::from(c) + 2,
    };
    rank(a).cmp(&rank(b))
}

/// Validates a tag list: `line[start..]` up to the next `|` or the end of the line.
/// Returns where the list ends and what was learned, and records each non-empty tag in
/// `spans`.
///
/// `controls` says whether the line holds any control character at all; when it does not
/// (nearly always), the per-tag check is skipped.
pub(super) fn scan(
    line: &str,
    start: usize,
    max_tags: usize,
    controls: bool,
    spans: &mut impl SpanSink,
) -> Result<(usize, Scan), InvalidReason> {
    let bytes = line.as_bytes();
    spans.clear();
    let mut count = 0;
    let mut canonical = true;
    let mut previous: &[u8] = &[];
    let mut at = start;
    let end = loop {
        // One entry: up to the next `,` or the end of the field.
        let stop = find2(bytes, at, b',', b'|');
        let last = stop == bytes.len() || bytes[stop] == b'|';
        if stop == at {
            // "a,,b", a leading or a trailing comma: skipped, but the raw text is then not
            // the canonical string any more. (An empty list is canonical.)
            if !(last && at == start) {
                canonical = false;
            }
        } else {
            count += 1;
            if count > max_tags {
                return Err(InvalidReason::TooManyTags);
            }
            let raw = &bytes[at..stop];
            if raw[0] == b':' || (controls && has_control(&line[at..stop])) {
                return Err(InvalidReason::BadTag);
            }
            // Strictly increasing: sorted, and no exact duplicate.
            canonical &= previous.is_empty() || raw_cmp(previous, raw).is_lt();
            previous = raw;
            spans.push(at - start, stop - start);
        }
        if last {
            break stop;
        }
        at = stop + 1;
    };
    spans.finish(&line[start..end], canonical);
    Ok((end, Scan { count, canonical }))
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

/// Writes the canonical form of the tags of `tags` whose key `keep` accepts: the tag
/// rules' path for a line whose tags are dropped but none renamed.
pub(crate) fn write_canonical_kept(tags: Tags<'_>, keep: &dyn Fn(&str) -> bool, out: &mut Vec<u8>) {
    let mut buf = [Tag::EMPTY; INLINE_TAGS];
    let mut count = 0;
    let mut spilled: Vec<Tag<'_>> = Vec::new();
    for tag in tags.filter(|tag| keep(tag.key)) {
        if count < INLINE_TAGS {
            buf[count] = tag;
            count += 1;
        } else {
            spilled.push(tag);
        }
    }
    if spilled.is_empty() {
        write_sorted(&mut buf[..count], out);
    } else {
        spilled.extend_from_slice(&buf[..count]);
        write_sorted(&mut spilled, out);
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
