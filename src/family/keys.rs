//! Filling a series key under the tag rules: key columns from tags (through renames) or
//! from captures, and the generic family's canonical tag string without the tags the
//! rules drop.

use crate::line::{self, Tag};
use crate::mapping::{Captures, TagRules, Template};
use crate::series;

use super::{TagSet, Unplaced};

/// Appends the key field filled from the tags named in `sources` (the keys, as sent, that
/// are stored under the key column's name: see [`TagRules::sources_of`]). All of them
/// that are present must agree; the value must not be empty.
pub(super) fn push_from_tags<T: TagSet + ?Sized>(
    tags: &T,
    sources: &[Box<str>],
    series: &mut Vec<u8>,
) -> Result<(), Unplaced> {
    let value = match sources {
        // No rename reaches this column: the plain look-up.
        [one] => tags
            .only_value_of(one)
            .map_err(|()| Unplaced::AmbiguousKeyTag)?,
        many => {
            let mut found: Option<&str> = None;
            for source in many {
                let value = tags
                    .only_value_of(source)
                    .map_err(|()| Unplaced::AmbiguousKeyTag)?;
                match (found, value) {
                    (Some(a), Some(b)) if a != b => return Err(Unplaced::AmbiguousKeyTag),
                    (None, Some(b)) => found = Some(b),
                    _ => {}
                }
            }
            found
        }
    };
    let value = value
        .filter(|v| !v.is_empty())
        .ok_or(Unplaced::MissingKeyTag)?;
    if series::push_field(series, value) {
        Ok(())
    } else {
        Err(Unplaced::KeyTooLong)
    }
}

/// Appends the key field a rule's template builds from the captures of `name`. An empty
/// value (a regex group that matched nothing) is a missing key, as an empty tag is.
pub(super) fn push_from_captures(
    template: &Template,
    name: &str,
    captures: &Captures,
    series: &mut Vec<u8>,
) -> Result<(), Unplaced> {
    let at = series.len();
    series.extend_from_slice(&[0, 0]);
    template.write(name, captures, series);
    let len = series.len() - at - 2;
    if len == 0 {
        return Err(Unplaced::MissingKeyTag);
    }
    let len = u16::try_from(len).map_err(|_| Unplaced::KeyTooLong)?;
    series[at..at + 2].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

/// Tags kept on the stack while the rules are applied; more use one temporary vector.
const INLINE: usize = 16;

/// Appends the generic family's canonical tag string of `tags` under `rules`: renamed,
/// without the dropped ones, sorted and de-duplicated. A line none of whose keys the rules
/// can touch (one bit test per key's first byte, read from the raw tag field) takes the
/// plain path unchanged. A line none of whose keys may be renamed (the usual case: the
/// default deny list drops the pod UID) keeps its tags' canonical order and only loses
/// the dropped ones; only a line with a renamed key is split, renamed and sorted again.
pub(super) fn write_canonical<T: TagSet + ?Sized>(tags: &T, rules: &TagRules, out: &mut Vec<u8>) {
    if rules.is_empty() {
        tags.write_canonical(out);
        return;
    }
    // One scan of the first bytes answers both questions: it stops at a key that may be
    // renamed (every such key may be touched too), and notes any key that may be touched.
    let touched = std::cell::Cell::new(false);
    let renamed = tags.any_key_starts(&|b| {
        if rules.touches_first_byte(b) {
            touched.set(true);
        }
        rules.may_rename_first_byte(b)
    });
    if !touched.get() {
        tags.write_canonical(out);
        return;
    }
    if !renamed {
        tags.write_canonical_kept(&|key| !rules.touches(key) || rules.keeps(key), out);
        return;
    }
    write_sorted_from(
        tags,
        &|tag| {
            let key = if rules.touches(tag.key) {
                rules.apply(tag.key)?
            } else {
                tag.key
            };
            Some(Tag {
                key,
                value: tag.value,
            })
        },
        out,
    );
}

/// Appends the canonical string of the tags `map` gives for the tags of `tags` (dropping
/// those it gives `None` for): sorted on the stack for up to [`INLINE`] tags.
pub(super) fn write_sorted_from<'s, T: TagSet + ?Sized>(
    tags: &'s T,
    map: &dyn Fn(Tag<'s>) -> Option<Tag<'s>>,
    out: &mut Vec<u8>,
) {
    let mut inline = [Tag {
        key: "",
        value: None,
    }; INLINE];
    let mut count = 0;
    let mut spilled: Vec<Tag<'_>> = Vec::new();
    tags.visit(&mut |tag| {
        let Some(kept) = map(tag) else {
            return;
        };
        if count < INLINE {
            inline[count] = kept;
            count += 1;
        } else {
            spilled.push(kept);
        }
    });
    if spilled.is_empty() {
        line::write_sorted(&mut inline[..count], out);
    } else {
        spilled.extend_from_slice(&inline[..count]);
        line::write_sorted(&mut spilled, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::tagset::IndexedLine;
    use crate::line::{LineLimits, LineResult, TagSpans, parse_line, parse_line_indexed};

    /// The generic tag string of `tags` under `rules`, spelled out: each tag renamed or
    /// dropped, then sorted and de-duplicated.
    fn reference(line: &crate::line::CounterLine<'_>, rules: &TagRules) -> Vec<u8> {
        let kept: std::collections::BTreeSet<Tag<'_>> = line
            .tags()
            .filter_map(|tag| {
                Some(Tag {
                    key: rules.apply(tag.key)?,
                    value: tag.value,
                })
            })
            .collect();
        let mut out = Vec::new();
        for (i, tag) in kept.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            tag.write_to(&mut out);
        }
        out
    }

    proptest::proptest! {
        /// A parsed line's value of a key, read from the raw field, is the one its split
        /// tags give: the first value when all agree, an error when two differ.
        #[test]
        fn a_lines_only_value_is_that_of_its_split_tags(
            tags in proptest::collection::vec(("[a-c]{1,2}", proptest::option::of("[a-c:]{0,2}")), 0..12),
            key in "[a-c]{1,2}",
            commas in ",{0,2}",
        ) {
            let field: Vec<String> = tags
                .iter()
                .map(|(k, v)| v.as_ref().map_or(k.clone(), |v| format!("{k}:{v}")))
                .collect();
            let text = format!("m:1|c|#{commas}{}", field.join(","));
            let LineResult::Counter(line) = parse_line(text.as_bytes(), &LineLimits::default())
            else {
                panic!("{text}");
            };
            let expected = crate::family::tagset::only(
                line.tags().filter(|t| t.key == key).map(|t| t.value.unwrap_or("")),
            );
            proptest::prop_assert_eq!(line.only_value_of(&key), expected, "{}", text);
        }

        /// Whichever path a line takes (untouched, only filtered, renamed) and whether its
        /// tag index is at hand or not, its generic tag string is the one the rules spell
        /// out.
        #[test]
        fn every_path_writes_the_ruled_canonical_string(
            tags in proptest::collection::vec(("[a-d]{1,2}", proptest::option::of("[a-c:]{0,2}")), 0..24),
        ) {
            let field: Vec<String> = tags
                .iter()
                .map(|(k, v)| v.as_ref().map_or(k.clone(), |v| format!("{k}:{v}")))
                .collect();
            let text = format!("m:1|c|#{}", field.join(","));
            let limits = LineLimits::default();
            let LineResult::Counter(line) = parse_line(text.as_bytes(), &limits) else {
                panic!("{text}");
            };
            let mut spans = TagSpans::default();
            let LineResult::Counter(indexed) = parse_line_indexed(text.as_bytes(), &limits, &mut spans)
            else {
                panic!("{text}");
            };
            let indexed = IndexedLine { line: &indexed, spans: &spans };
            for rules in [
                TagRules::new([], ["a"], []).unwrap(),
                TagRules::new([], ["b*", "cc"], []).unwrap(),
                TagRules::new([("c", "a"), ("dd", "b")], ["b"], []).unwrap(),
                TagRules::new([("d", "dz")], ["a*"], []).unwrap(),
                TagRules::new([], [], [vec!["a*", "c"]]).unwrap(),
            ] {
                let expected = reference(&line, &rules);
                let mut plain = Vec::new();
                write_canonical(&line, &rules, &mut plain);
                proptest::prop_assert_eq!(&plain, &expected, "{} {:?}", text, rules);
                let mut from_index = Vec::new();
                write_canonical(&indexed, &rules, &mut from_index);
                proptest::prop_assert_eq!(&from_index, &expected, "{} {:?}", text, rules);
            }
        }

        /// Rules that touch a line's keys without renaming or dropping any (a deny entry
        /// for an absent key that shares their first byte) give the same tag string as
        /// the plain path, and rules that drop a key give the plain string of the line
        /// without it.
        #[test]
        fn the_rules_path_writes_the_plain_canonical_string(
            tags in proptest::collection::vec(("[a-c]{1,2}", proptest::option::of("[a-c:]{0,2}")), 0..24),
        ) {
            let field: Vec<String> = tags
                .iter()
                .map(|(k, v)| v.as_ref().map_or(k.clone(), |v| format!("{k}:{v}")))
                .collect();
            let text = format!("m:1|c|#{}", field.join(","));
            let LineResult::Counter(line) = parse_line(text.as_bytes(), &LineLimits::default())
            else {
                panic!("{text}");
            };
            let mut plain = Vec::new();
            line.write_canonical_tags(&mut plain);
            let touching = TagRules::new([], ["azz", "bzz", "czz"], []).unwrap();
            let mut ruled = Vec::new();
            write_canonical(&line, &touching, &mut ruled);
            proptest::prop_assert_eq!(&ruled, &plain);

            let without_a = TagRules::new([], ["a"], []).unwrap();
            let mut dropped = Vec::new();
            write_canonical(&line, &without_a, &mut dropped);
            let kept: Vec<&String> = field
                .iter()
                .filter(|t| t.split(':').next() != Some("a"))
                .collect();
            let text = format!("m:1|c|#{}", kept.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(","));
            let LineResult::Counter(line) = parse_line(text.as_bytes(), &LineLimits::default())
            else {
                panic!("{text}");
            };
            let mut expected = Vec::new();
            line.write_canonical_tags(&mut expected);
            proptest::prop_assert_eq!(dropped, expected);
        }
    }
}
