//! The tags of one increment as the resolver reads them ([`TagSet`]): the in-process
//! API's tag pairs, a parsed line, and a parsed line with its tag index, each answering
//! the same questions (a tag's value, the canonical tag string) without copying tags.

use crate::line::{self, CounterLine, Tag};

use super::keys;

/// The tags of one increment, as the family resolver needs them.
pub trait TagSet {
    /// The value of the first tag named `key` (`""` for a tag without value).
    fn value_of(&self, key: &str) -> Option<&str>;
    /// The value of the tag named `key` when every tag of that name carries the same
    /// value; `Err(())` when two of them disagree.
    #[allow(clippy::result_unit_err)]
    fn only_value_of(&self, key: &str) -> Result<Option<&str>, ()>;
    /// Appends the canonical tag string (see [`CounterLine::write_canonical_tags`]).
    fn write_canonical(&self, out: &mut Vec<u8>);
    /// Calls `f` with every tag, duplicates included (what the tag rules look at).
    fn visit<'s>(&'s self, f: &mut dyn FnMut(Tag<'s>));
    /// Whether some tag's key starts with a byte `first` accepts: the tag rules' quick
    /// test, which a parsed line answers from its raw tag field without splitting it.
    fn any_key_starts(&self, first: &dyn Fn(u8) -> bool) -> bool {
        let mut any = false;
        self.visit(&mut |tag| any |= tag.key.as_bytes().first().is_some_and(|&b| first(b)));
        any
    }
    /// Appends the canonical tag string of the tags whose key `keep` accepts: the tag
    /// rules' path for a line whose tags are dropped but none renamed, so that their
    /// canonical order is that of the line's own tags. A parsed line with its tag index
    /// writes it from the index without splitting the field again.
    fn write_canonical_kept(&self, keep: &dyn Fn(&str) -> bool, out: &mut Vec<u8>) {
        keys::write_sorted_from(self, &|tag| keep(tag.key).then_some(tag), out);
    }
}

/// Tag pairs given to the in-process API. An empty value means a tag without value
/// (`("canary", "")` is the tag `canary`).
impl TagSet for [(&str, &str)] {
    fn value_of(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    fn only_value_of(&self, key: &str) -> Result<Option<&str>, ()> {
        only(self.iter().filter(|(k, _)| *k == key).map(|(_, v)| *v))
    }

    fn write_canonical(&self, out: &mut Vec<u8>) {
        const INLINE: usize = 16;
        match self {
            [] => {}
            [one] => write_pair(out, one),
            // The usual handful of tags: sorted by hand, most comparisons decided by the
            // first byte of the keys.
            [a, b] => {
                let (first, second) = if pair_cmp(b, a).is_lt() {
                    (b, a)
                } else {
                    (a, b)
                };
                out.reserve(a.0.len() + a.1.len() + b.0.len() + b.1.len() + 3);
                write_pair(out, first);
                if !same_pair(first, second) {
                    out.push(b',');
                    write_pair(out, second);
                }
            }
            _ if self.len() <= INLINE => {
                // Sort positions, not the pairs: one-byte swaps.
                let mut order = [0u8; INLINE];
                for (i, slot) in order.iter_mut().enumerate().take(self.len()) {
                    *slot = i as u8;
                }
                let order = &mut order[..self.len()];
                for i in 1..order.len() {
                    let mut j = i;
                    while j > 0
                        && pair_cmp(
                            &self[usize::from(order[j])],
                            &self[usize::from(order[j - 1])],
                        )
                        .is_lt()
                    {
                        order.swap(j, j - 1);
                        j -= 1;
                    }
                }
                let mut previous: Option<&(&str, &str)> = None;
                for &i in order.iter() {
                    let pair = &self[usize::from(i)];
                    if let Some(previous) = previous {
                        // Exact duplicates are adjacent now.
                        if same_pair(previous, pair) {
                            continue;
                        }
                        out.push(b',');
                    }
                    write_pair(out, pair);
                    previous = Some(pair);
                }
            }
            _ => {
                let mut tags: Vec<Tag<'_>> =
                    self.iter().map(|&(key, value)| tag(key, value)).collect();
                line::write_sorted(&mut tags, out);
            }
        }
    }

    fn visit<'s>(&'s self, f: &mut dyn FnMut(Tag<'s>)) {
        for &(key, value) in self {
            f(tag(key, value));
        }
    }

    /// The keys' first bytes straight from the pairs (the default goes through
    /// [`TagSet::visit`]'s closure for each tag): stops at the first key `first` accepts.
    fn any_key_starts(&self, first: &dyn Fn(u8) -> bool) -> bool {
        self.iter()
            .any(|(key, _)| key.as_bytes().first().is_some_and(|&b| first(b)))
    }
}

/// Appends `key` or `key:value` (an empty value is no value).
fn write_pair(out: &mut Vec<u8>, &(key, value): &(&str, &str)) {
    out.extend_from_slice(key.as_bytes());
    if !value.is_empty() {
        out.push(b':');
        out.extend_from_slice(value.as_bytes());
    }
}

/// The same tag; lengths rule most pairs out without comparing bytes.
fn same_pair(a: &(&str, &str), b: &(&str, &str)) -> bool {
    a.0.len() == b.0.len() && a.1.len() == b.1.len() && a == b
}

/// A tag of the in-process API: an empty value is no value.
pub(super) fn tag<'a>(key: &'a str, value: &'a str) -> Tag<'a> {
    Tag {
        key,
        value: (!value.is_empty()).then_some(value),
    }
}

/// The canonical order of tag pairs, the same as that of the [`Tag`]s they stand for:
/// by key, then by value, where an empty value (no value) sorts first, as it does
/// bytewise.
fn pair_cmp(a: &(&str, &str), b: &(&str, &str)) -> std::cmp::Ordering {
    let (x, y) = (a.0.as_bytes(), b.0.as_bytes());
    if let (Some(p), Some(q)) = (x.first(), y.first())
        && p != q
    {
        return p.cmp(q);
    }
    x.cmp(y).then_with(|| a.1.as_bytes().cmp(b.1.as_bytes()))
}

/// The tags of a parsed line.
impl TagSet for CounterLine<'_> {
    fn value_of(&self, key: &str) -> Option<&str> {
        self.tag(key)
    }

    fn only_value_of(&self, key: &str) -> Result<Option<&str>, ()> {
        if key.is_empty() {
            return only(
                self.tags()
                    .filter(|t| t.key == key)
                    .map(|t| t.value.unwrap_or("")),
            );
        }
        // The raw field is cut at its commas only (memchr), and each entry's start compared
        // with `key`: a key holds no `:`, so `key` then `:` or the entry's end is that key.
        // Splitting every tag at its `:` as well cost as much as the whole canonical tag
        // string of a line without rules.
        let mut found: Option<&str> = None;
        for entry in self.raw_tags().split(',') {
            let Some(rest) = entry.strip_prefix(key) else {
                continue;
            };
            let value = match rest.as_bytes().first() {
                None => "",
                Some(b':') => &rest[1..],
                Some(_) => continue,
            };
            match found {
                None => found = Some(value),
                Some(seen) if seen != value => return Err(()),
                Some(_) => {}
            }
        }
        Ok(found)
    }

    fn write_canonical(&self, out: &mut Vec<u8>) {
        self.write_canonical_tags(out);
    }

    fn visit<'s>(&'s self, f: &mut dyn FnMut(Tag<'s>)) {
        for tag in self.tags() {
            f(tag);
        }
    }

    fn write_canonical_kept(&self, keep: &dyn Fn(&str) -> bool, out: &mut Vec<u8>) {
        line::write_canonical_kept(self.tags(), keep, out);
    }

    fn any_key_starts(&self, first: &dyn Fn(u8) -> bool) -> bool {
        // A key starts the field and follows each `,` (an empty entry shows a `,` or
        // nothing, which no rule key starts with).
        let raw = self.raw_tags().as_bytes();
        raw.first().is_some_and(|&b| first(b))
            || memchr::memchr_iter(b',', raw).any(|i| raw.get(i + 1).is_some_and(|&b| first(b)))
    }
}

/// A parsed line with the tag index its parse recorded: the engine's per-packet path,
/// which builds the canonical tag string without splitting the tag field again.
pub(crate) struct IndexedLine<'l, 'a> {
    /// The line.
    pub(crate) line: &'l CounterLine<'a>,
    /// What [`line::parse_line_indexed`] recorded for it.
    pub(crate) spans: &'l line::TagSpans,
}

impl TagSet for IndexedLine<'_, '_> {
    fn value_of(&self, key: &str) -> Option<&str> {
        self.line.value_of(key)
    }

    fn only_value_of(&self, key: &str) -> Result<Option<&str>, ()> {
        self.line.only_value_of(key)
    }

    fn write_canonical(&self, out: &mut Vec<u8>) {
        self.line.write_canonical_tags_with(self.spans, out);
    }

    fn visit<'s>(&'s self, f: &mut dyn FnMut(Tag<'s>)) {
        self.line.visit(f);
    }

    fn any_key_starts(&self, first: &dyn Fn(u8) -> bool) -> bool {
        self.line.any_key_starts(first)
    }

    fn write_canonical_kept(&self, keep: &dyn Fn(&str) -> bool, out: &mut Vec<u8>) {
        if !self
            .spans
            .write_canonical_kept(self.line.raw_tags(), keep, out)
        {
            self.line.write_canonical_kept(keep, out);
        }
    }
}

/// The one value of an iterator, `Err` if two differ.
pub(super) fn only<'a>(mut values: impl Iterator<Item = &'a str>) -> Result<Option<&'a str>, ()> {
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.all(|v| v == first) {
        Ok(Some(first))
    } else {
        Err(())
    }
}
