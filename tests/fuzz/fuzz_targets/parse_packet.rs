//! Whole packets through everything a consumer of the parser calls: `split_lines`,
//! `parse_line`, value and tag iteration, tag lookup and the canonical tag string.
//!
//! Beyond "no panic", each counter line is checked against two oracles: the canonical tag
//! string must equal a slow sort-and-dedup reference, and rendering the parsed line must
//! give a line that parses back to the same name, values, rate, tags and timestamp.
//!
//! The first two bytes choose the limits, so the `too_long` and `too_many_tags` paths are
//! reached with short inputs too.

#![no_main]

use std::collections::BTreeSet;

use countersink::line::{
    Increment, LineLimits, LineResult, Tag, Value, parse_line, render, split_lines,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (limits, packet) = match data {
        [a, b, rest @ ..] => (
            LineLimits {
                max_line_bytes: usize::from(*a) * 64 + 1,
                max_tags: usize::from(*b % 32),
            },
            rest,
        ),
        _ => (LineLimits::default(), data),
    };
    let mut canonical = Vec::new();
    let mut reference = Vec::new();
    let mut rendered = Vec::new();
    for line in split_lines(packet) {
        // Only one CR is removed per line: "a\r\r\n" leaves "a\r", which parse_line judges.
        assert!(!line.is_empty() && !line.contains(&b'\n'));
        let LineResult::Counter(c) = parse_line(line, &limits) else {
            continue;
        };
        assert!(line.len() <= limits.max_line_bytes);

        let values: Vec<Value> = c.values().collect();
        assert_eq!(values.len(), c.value_count());
        assert!(!values.is_empty());
        assert!(c.sample_rate() > 0.0 && c.sample_rate() <= 1.0);

        let tags: Vec<Tag<'_>> = c.tags().collect();
        assert_eq!(tags.len(), c.tag_count());
        assert!(tags.len() <= limits.max_tags);
        for t in &tags {
            assert!(c.tag(t.key).is_some());
        }

        canonical.clear();
        c.write_canonical_tags(&mut canonical);
        reference.clear();
        for (i, t) in tags
            .iter()
            .copied()
            .collect::<BTreeSet<_>>()
            .iter()
            .enumerate()
        {
            if i > 0 {
                reference.push(b',');
            }
            t.write_to(&mut reference);
        }
        assert_eq!(canonical, reference);
        if c.tags_are_canonical() {
            assert_eq!(canonical, c.raw_tags().as_bytes());
        }

        rendered.clear();
        let inc = Increment {
            name: c.name(),
            values: &values,
            sample_rate: c.sample_rate(),
            tags: &tags,
            timestamp: c.timestamp(),
        };
        render(&inc, &mut rendered).expect("a parsed line can be rendered");
        let roomy = LineLimits {
            max_line_bytes: usize::MAX,
            max_tags: usize::MAX,
        };
        let LineResult::Counter(again) = parse_line(&rendered, &roomy) else {
            panic!("rendered line {rendered:?} does not parse");
        };
        assert_eq!(again.name(), c.name());
        let again_values: Vec<Value> = again.values().collect();
        assert_eq!(again_values.len(), values.len());
        for (a, b) in again_values.iter().zip(&values) {
            match (a, b) {
                (Value::Int(x), Value::Int(y)) => assert_eq!(x, y),
                (Value::Float(x), Value::Float(y)) => assert_eq!(x.to_bits(), y.to_bits()),
                _ => panic!("value kind changed: {a:?} vs {b:?}"),
            }
        }
        assert_eq!(again.sample_rate().to_bits(), c.sample_rate().to_bits());
        assert_eq!(again.tags().collect::<Vec<_>>(), tags);
        assert_eq!(again.timestamp(), c.timestamp());
    }
});
