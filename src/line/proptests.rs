//! Property tests: round trip, no panics, line independence, canonical tags.

use std::collections::BTreeSet;

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

use super::*;

const LIMITS: LineLimits = LineLimits {
    max_line_bytes: 1 << 20,
    max_tags: 1000,
};

/// Owned version of an increment, so strategies can generate it.
#[derive(Debug, Clone)]
struct Owned {
    name: String,
    values: Vec<Value>,
    sample_rate: f64,
    tags: Vec<(String, Option<String>)>,
    timestamp: Option<i64>,
}

fn name() -> impl Strategy<Value = String> {
    "[^:|\\x00-\\x1f\\x7f]{1,24}".prop_filter("would read as an event", |n| !n.starts_with("_e{"))
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::Int),
        (-1000i64..1000).prop_map(Value::Int),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::Float),
        (-1e6f64..1e6).prop_map(Value::Float),
    ]
}

fn tag() -> impl Strategy<Value = (String, Option<String>)> {
    (
        "[^:,|\\x00-\\x1f\\x7f]{1,8}",
        proptest::option::of("[^,|\\x00-\\x1f\\x7f]{0,8}"),
    )
}

fn increment() -> impl Strategy<Value = Owned> {
    (
        name(),
        proptest::collection::vec(value(), 1..6),
        prop_oneof![
            Just(1.0),
            (0.0f64..=1.0).prop_filter("positive", |r| *r > 0.0),
            Just(f64::MIN_POSITIVE),
        ],
        proptest::collection::vec(tag(), 0..12),
        proptest::option::of(1i64..=i64::MAX),
    )
        .prop_map(|(name, values, sample_rate, tags, timestamp)| Owned {
            name,
            values,
            sample_rate,
            tags,
            timestamp,
        })
}

fn render_owned(inc: &Owned) -> Vec<u8> {
    let tags: Vec<Tag<'_>> = inc
        .tags
        .iter()
        .map(|(k, v)| Tag {
            key: k,
            value: v.as_deref(),
        })
        .collect();
    let mut out = Vec::new();
    render(
        &Increment {
            name: &inc.name,
            values: &inc.values,
            sample_rate: inc.sample_rate,
            tags: &tags,
            timestamp: inc.timestamp,
        },
        &mut out,
    )
    .expect("generated increments are renderable");
    out
}

/// Bit-exact comparison, so that 1.0 vs 1 and -0.0 vs 0.0 are told apart.
fn same_values(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|pair| match pair {
            (Value::Int(x), Value::Int(y)) => x == y,
            (Value::Float(x), Value::Float(y)) => x.to_bits() == y.to_bits(),
            _ => false,
        })
}

/// The canonical tag string computed the slow, obvious way.
fn reference_canonical(line: &CounterLine<'_>) -> Vec<u8> {
    let set: BTreeSet<Tag<'_>> = line.tags().collect();
    let mut out = Vec::new();
    for (i, tag) in set.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        tag.write_to(&mut out);
    }
    out
}

/// Exercises everything a consumer of a counter line can call, and checks its invariants.
fn exercise(result: &LineResult<'_>) {
    if let LineResult::Counter(c) = result {
        assert!(!c.name().is_empty());
        assert_eq!(c.values().count(), c.value_count());
        assert!(c.value_count() >= 1);
        for v in c.values() {
            if let Value::Float(f) = v {
                assert!(f.is_finite());
            }
        }
        assert!(c.sample_rate() > 0.0 && c.sample_rate() <= 1.0);
        assert!(c.timestamp().is_none_or(|t| t >= 1));
        assert_eq!(c.tags().count(), c.tag_count());
        let mut canon = Vec::new();
        c.write_canonical_tags(&mut canon);
        assert_eq!(canon, reference_canonical(c));
        if c.tags_are_canonical() {
            assert_eq!(canon, c.raw_tags().as_bytes());
        }
        for tag in c.tags() {
            assert!(!tag.key.is_empty());
            assert!(c.tag(tag.key).is_some());
        }
    }
}

/// Parses `line` both ways, the public parser and the engine's indexed one, checks that
/// they agree (verdict and canonical tag string), and exercises the verdict.
fn check(line: &[u8], limits: &LineLimits) {
    let plain = parse_line(line, limits);
    let mut spans = TagSpans::default();
    let indexed = parse_line_indexed(line, limits, &mut spans);
    assert_eq!(plain, indexed, "{:?}", String::from_utf8_lossy(line));
    if let LineResult::Counter(c) = indexed {
        let mut with_spans = Vec::new();
        c.write_canonical_tags_with(&spans, &mut with_spans);
        assert_eq!(
            with_spans,
            reference_canonical(&c),
            "{:?}",
            String::from_utf8_lossy(line)
        );
        let exact = match c.values().collect::<Vec<_>>()[..] {
            [Value::Int(v)] => Some(v),
            _ => None,
        };
        assert_eq!(c.single_int(), exact);
    }
    exercise(&plain);
}

proptest! {
    // Failing cases are kept next to this file (proptests.regressions) and replayed first.
    #![proptest_config(ProptestConfig {
        cases: 2000,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("regressions"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn rendered_increments_parse_back(inc in increment()) {
        let line = render_owned(&inc);
        let LineResult::Counter(c) = parse_line(&line, &LIMITS) else {
            panic!("{:?} did not parse as a counter", String::from_utf8_lossy(&line));
        };
        prop_assert_eq!(c.name(), inc.name.as_str());
        let values: Vec<Value> = c.values().collect();
        prop_assert!(same_values(&values, &inc.values), "{:?} vs {:?}", values, inc.values);
        prop_assert_eq!(c.sample_rate().to_bits(), inc.sample_rate.to_bits());
        prop_assert_eq!(c.timestamp(), inc.timestamp);
        let tags: Vec<(String, Option<String>)> = c
            .tags()
            .map(|t| (t.key.to_owned(), t.value.map(str::to_owned)))
            .collect();
        prop_assert_eq!(tags, inc.tags.clone());
        exercise(&LineResult::Counter(c));
        check(&line, &LIMITS);
    }

    #[test]
    fn arbitrary_bytes_never_panic(packet in proptest::collection::vec(any::<u8>(), 0..512)) {
        for line in split_lines(&packet) {
            check(line, &LineLimits::DEFAULT);
            check(line, &LineLimits { max_line_bytes: 16, max_tags: 2 });
        }
    }

    #[test]
    fn line_shaped_noise_never_panics(
        parts in proptest::collection::vec(
            prop_oneof![
                Just("|"), Just(":"), Just(","), Just("#"), Just("@"), Just("T"), Just("c"),
                Just("g"), Just("1"), Just("-"), Just("."), Just("e"), Just("\r"), Just("\n"),
                Just("_e{"), Just("_sc|"), Just("0.5"), Just("k:v"), Just("\u{0}"), Just("é"),
            ],
            0..40,
        )
    ) {
        let packet = parts.concat();
        for line in split_lines(packet.as_bytes()) {
            check(line, &LineLimits::DEFAULT);
        }
    }

    #[test]
    fn tag_field_noise_matches_the_reference_canonical_string(
        parts in proptest::collection::vec(
            prop_oneof![Just(","), Just(":"), Just("k"), Just("v"), Just("k2"), Just("é")],
            0..24,
        )
    ) {
        let line = format!("m:1|c|#{}", parts.concat());
        let result = parse_line(line.as_bytes(), &LIMITS);
        if !parts.concat().split(',').any(|t| t.starts_with(':')) {
            prop_assert!(matches!(result, LineResult::Counter(_)), "{line:?}: {result:?}");
        }
        exercise(&result);
        check(line.as_bytes(), &LIMITS);
    }

    #[test]
    fn every_line_gets_its_own_verdict(
        lines in proptest::collection::vec(
            prop_oneof![
                increment().prop_map(|inc| render_owned(&inc)),
                proptest::collection::vec(any::<u8>(), 1..40)
                    .prop_filter("one line, not blank after CR removal", |l| {
                        !l.contains(&b'\n') && l.last() != Some(&b'\r')
                    }),
            ],
            0..20,
        ),
        crlf in any::<bool>(),
        blank_every in 1usize..6,
    ) {
        let sep: &[u8] = if crlf { b"\r\n" } else { b"\n" };
        let mut packet = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            packet.extend_from_slice(line);
            packet.extend_from_slice(sep);
            if i % blank_every == 0 {
                packet.extend_from_slice(sep); // an empty line, skipped
            }
        }
        let in_packet: Vec<LineResult<'_>> =
            split_lines(&packet).map(|l| parse_line(l, &LIMITS)).collect();
        let alone: Vec<LineResult<'_>> = lines.iter().map(|l| parse_line(l, &LIMITS)).collect();
        prop_assert_eq!(in_packet.len(), lines.len());
        prop_assert_eq!(in_packet, alone);
    }

    #[test]
    fn canonical_tags_ignore_order_and_repetition(
        tags in proptest::collection::vec(tag(), 1..30),
        seed in any::<u64>(),
    ) {
        let raw: Vec<String> = tags
            .iter()
            .map(|(k, v)| match v { Some(v) => format!("{k}:{v}"), None => k.clone() })
            .collect();
        // A shuffled copy with some tags repeated.
        let mut shuffled = raw.clone();
        shuffled.extend(raw.iter().step_by(3).cloned());
        let mut state = seed | 1;
        for i in (1..shuffled.len()).rev() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            shuffled.swap(i, (state % (i as u64 + 1)) as usize);
        }
        let a = format!("m:1|c|#{}", raw.join(","));
        let b = format!("m:1|c|#{}", shuffled.join(","));
        let canon = |line: &str| {
            let LineResult::Counter(c) = parse_line(line.as_bytes(), &LIMITS) else {
                panic!("{line:?} is a valid counter");
            };
            let mut out = Vec::new();
            c.write_canonical_tags(&mut out);
            out
        };
        let ca = canon(&a);
        prop_assert_eq!(&ca, &canon(&b));
        check(a.as_bytes(), &LIMITS);
        check(b.as_bytes(), &LIMITS);
        // Idempotent: the canonical string is itself canonical and detected as such.
        let again = format!("m:1|c|#{}", String::from_utf8(ca.clone()).unwrap());
        let LineResult::Counter(c) = parse_line(again.as_bytes(), &LIMITS) else {
            panic!("canonical string parses");
        };
        prop_assert!(c.tags_are_canonical());
        prop_assert_eq!(canon(&again), ca);
    }

    #[test]
    fn raw_tag_order_is_the_order_of_split_tags(
        a in "[^,|\\x00-\\x1f\\x7f:][^,|\\x00-\\x1f\\x7f]{0,6}",
        b in "[^,|\\x00-\\x1f\\x7f:][^,|\\x00-\\x1f\\x7f]{0,6}",
        common in "[a:1]{0,3}",
    ) {
        // A shared prefix makes the interesting cases (equal keys, prefixes) frequent.
        let (a, b) = (format!("{common}{a}"), format!("{common}{b}"));
        fn split(raw: &str) -> Tag<'_> {
            let (key, value) = split_once(raw, b':');
            Tag { key, value }
        }
        if !a.starts_with(':') && !b.starts_with(':') {
            prop_assert_eq!(
                tags::raw_cmp(a.as_bytes(), b.as_bytes()),
                split(&a).cmp(&split(&b)),
                "{:?} vs {:?}", a, b
            );
        }
    }

    /// What the engine's line cache relies on: once a line with some name and rest has
    /// parsed as a counter, any line with the same name and rest gets the verdict of its
    /// values alone.
    #[test]
    fn name_and_rest_decide_everything_but_the_values(
        inc in increment(),
        values in prop_oneof![
            "[0-9]{1,20}".prop_map(String::into_bytes),
            "[-+]?[0-9]{0,4}(\\.[0-9]{0,3})?(e[-+]?[0-9]{1,3})?".prop_map(String::into_bytes),
            "([0-9]{1,3})?(:[0-9]{0,3}){0,4}".prop_map(String::into_bytes),
            "[^|\n]{0,12}".prop_map(String::into_bytes),
            "[0-9]\\x01|[0-9]\\x7f|inf|NaN|\\u{e9}".prop_map(String::into_bytes),
            proptest::collection::vec(any::<u8>().prop_filter("one part", |b| *b != b'|' && *b != b'\n'), 0..6),
        ],
    ) {
        let line = render_owned(&inc);
        let LineResult::Counter(original) = parse_line(&line, &LIMITS) else {
            panic!("{line:?} did not parse as a counter");
        };
        let cut_line = cut(&line).expect("a counter line has a name, values and a type");
        prop_assert_eq!(cut_line.name, original.name().as_bytes());
        prop_assert_eq!(cut_line.values, original.values.as_bytes());
        let mut other = cut_line.name.to_vec();
        other.push(b':');
        other.extend_from_slice(&values);
        other.push(b'|');
        other.extend_from_slice(cut_line.rest);
        let cut_other = cut(&other).expect("same shape");
        prop_assert_eq!(
            (cut_other.name, cut_other.values, cut_other.rest),
            (cut_line.name, values.as_slice(), cut_line.rest)
        );
        match (parse_line(&other, &LIMITS), parse_values(&values)) {
            (LineResult::Invalid(a), Err(b)) => prop_assert_eq!(a, b, "{:?}", other),
            (LineResult::Counter(c), Ok(v)) => {
                prop_assert_eq!(c.name(), original.name());
                prop_assert_eq!(c.raw_tags(), original.raw_tags());
                prop_assert_eq!(c.tag_count(), original.tag_count());
                prop_assert_eq!(c.tags_are_canonical(), original.tags_are_canonical());
                prop_assert_eq!(c.sample_rate().to_bits(), original.sample_rate().to_bits());
                prop_assert_eq!(c.timestamp(), original.timestamp());
                prop_assert_eq!(c.value_count(), v.count());
                prop_assert_eq!(c.single_int(), v.single_int());
                let (a, b): (Vec<Value>, Vec<Value>) = (c.values().collect(), v.values().collect());
                prop_assert!(same_values(&a, &b), "{:?}", other);
            }
            (verdict, values) => prop_assert!(false, "{other:?}: {verdict:?} vs {values:?}"),
        }
    }
}
