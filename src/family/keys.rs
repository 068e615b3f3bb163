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
/// plain path unchanged; the others are split once, the rules applied, and sorted.
pub(super) fn write_canonical<T: TagSet + ?Sized>(tags: &T, rules: &TagRules, out: &mut Vec<u8>) {
    if rules.is_empty() || !tags.any_key_starts(&|b| rules.touches_first_byte(b)) {
        tags.write_canonical(out);
        return;
    }
    let mut inline = [Tag {
        key: "",
        value: None,
    }; INLINE];
    let mut count = 0;
    let mut spilled: Vec<Tag<'_>> = Vec::new();
    tags.visit(&mut |tag| {
        let Some(key) = rules.apply(tag.key) else {
            return;
        };
        let kept = Tag {
            key,
            value: tag.value,
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
    use crate::line::{LineLimits, LineResult, parse_line};

    proptest::proptest! {
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
