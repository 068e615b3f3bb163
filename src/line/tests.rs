//! Unit tests: one per grammar feature and per invalid reason.

use super::*;

const LIMITS: LineLimits = LineLimits::DEFAULT;

fn counter(line: &str) -> CounterLine<'_> {
    match parse_line(line.as_bytes(), &LIMITS) {
        LineResult::Counter(c) => c,
        other => panic!("{line:?} should be a counter, got {other:?}"),
    }
}

fn invalid(line: &[u8]) -> InvalidReason {
    invalid_with(line, &LIMITS)
}

fn invalid_with(line: &[u8], limits: &LineLimits) -> InvalidReason {
    match parse_line(line, limits) {
        LineResult::Invalid(r) => r,
        other => panic!(
            "{:?} should be invalid, got {other:?}",
            String::from_utf8_lossy(line)
        ),
    }
}

fn values(line: &str) -> Vec<Value> {
    counter(line).values().collect()
}

fn tags(line: &str) -> Vec<(&str, Option<&str>)> {
    counter(line).tags().map(|t| (t.key, t.value)).collect()
}

fn canonical(line: &str) -> String {
    let mut out = Vec::new();
    counter(line).write_canonical_tags(&mut out);
    String::from_utf8(out).expect("canonical tags are UTF-8")
}

// ---- splitting ----

#[test]
fn split_lines_handles_lf_crlf_and_skips_empty_lines() {
    let packet = b"a:1|c\nb:2|c\r\n\n\r\nc:3|c\r";
    let lines: Vec<&[u8]> = split_lines(packet).collect();
    assert_eq!(lines, [&b"a:1|c"[..], b"b:2|c", b"c:3|c"]);
}

#[test]
fn split_lines_of_empty_and_blank_packets_is_empty() {
    assert_eq!(split_lines(b"").count(), 0);
    assert_eq!(split_lines(b"\n\n\r\n").count(), 0);
}

#[test]
fn split_lines_keeps_a_cr_in_the_middle_of_a_line() {
    let lines: Vec<&[u8]> = split_lines(b"a\rb:1|c\n").collect();
    assert_eq!(lines, [&b"a\rb:1|c"[..]]);
    assert_eq!(invalid(lines[0]), InvalidReason::BadName);
}

#[test]
fn a_bad_line_does_not_spoil_its_neighbours() {
    let packet = b"a:1|c\nnonsense\nb:2|c|@0.5\n\xff\xfe:1|c\nc:3|c";
    let results: Vec<_> = split_lines(packet)
        .map(|l| parse_line(l, &LIMITS))
        .collect();
    assert_eq!(results.len(), 5);
    assert!(matches!(results[0], LineResult::Counter(c) if c.name() == "a"));
    assert_eq!(results[1], LineResult::Invalid(InvalidReason::NoValue));
    assert!(matches!(results[2], LineResult::Counter(c) if c.sample_rate() == 0.5));
    assert_eq!(results[3], LineResult::Invalid(InvalidReason::NotUtf8));
    assert!(matches!(results[4], LineResult::Counter(c) if c.name() == "c"));
}

// ---- the basic line ----

#[test]
fn plain_counter_has_defaults() {
    let c = counter("page.views:1|c");
    assert_eq!(c.name(), "page.views");
    assert_eq!(c.values().collect::<Vec<_>>(), [Value::Int(1)]);
    assert_eq!(c.value_count(), 1);
    assert_eq!(c.sample_rate(), 1.0);
    assert_eq!(c.timestamp(), None);
    assert_eq!(c.tag_count(), 0);
    assert_eq!(c.tags().count(), 0);
    assert!(c.tags_are_canonical());
    assert_eq!(canonical("page.views:1|c"), "");
}

#[test]
fn names_are_permissive() {
    for name in [
        "a",
        "page views",
        "x-y_z.w",
        "with#hash@at",
        "ünïcödé.名前",
        "quote\"d'",
        "semi;colon",
        "_e",
        "_sc",
        "_scan",
    ] {
        let line = format!("{name}:1|c");
        assert_eq!(counter(&line).name(), name);
    }
}

// ---- values ----

#[test]
fn integers_parse_exactly_with_optional_sign() {
    assert_eq!(values("a:0|c"), [Value::Int(0)]);
    assert_eq!(values("a:-0|c"), [Value::Int(0)]);
    assert_eq!(values("a:+5|c"), [Value::Int(5)]);
    assert_eq!(values("a:-5|c"), [Value::Int(-5)]);
    assert_eq!(values("a:007|c"), [Value::Int(7)]);
    // 2^53 + 1 is not representable as f64: an exact integer path is needed.
    assert_eq!(
        values("a:9007199254740993|c"),
        [Value::Int(9_007_199_254_740_993)]
    );
}

#[test]
fn i64_extremes_parse_and_one_beyond_is_bad_value() {
    assert_eq!(values("a:9223372036854775807|c"), [Value::Int(i64::MAX)]);
    assert_eq!(values("a:-9223372036854775808|c"), [Value::Int(i64::MIN)]);
    assert_eq!(values("a:+9223372036854775807|c"), [Value::Int(i64::MAX)]);
    assert_eq!(invalid(b"a:9223372036854775808|c"), InvalidReason::BadValue);
    assert_eq!(
        invalid(b"a:-9223372036854775809|c"),
        InvalidReason::BadValue
    );
    assert_eq!(
        invalid(b"a:18446744073709551616|c"),
        InvalidReason::BadValue
    );
    assert_eq!(
        invalid(b"a:99999999999999999999999999999999999999|c"),
        InvalidReason::BadValue
    );
}

#[test]
fn floats_are_accepted_and_stay_floats() {
    assert_eq!(values("a:1.5|c"), [Value::Float(1.5)]);
    assert_eq!(values("a:2e3|c"), [Value::Float(2000.0)]);
    assert_eq!(values("a:2E+3|c"), [Value::Float(2000.0)]);
    assert_eq!(values("a:1.0|c"), [Value::Float(1.0)]);
    assert_eq!(values("a:-.5|c"), [Value::Float(-0.5)]);
    assert_eq!(values("a:5.|c"), [Value::Float(5.0)]);
    // An integer-looking prefix that overflows i64 is still a float if it has a dot.
    assert_eq!(values("a:99999999999999999999.5|c"), [Value::Float(1e20)]);
    assert_eq!(values("a:1e-400|c"), [Value::Float(0.0)]);
}

#[test]
fn non_finite_and_malformed_values_are_bad_value() {
    for v in [
        "inf",
        "-inf",
        "+infinity",
        "NaN",
        "nan",
        "1e999",
        "-1e999",
        "1x",
        "0x10",
        "1_000",
        " 1",
        "1 ",
        "-",
        "+",
        ".",
        "e5",
        "1e",
        "--1",
        "1.2.3",
        "١",
    ] {
        let line = format!("a:{v}|c");
        assert_eq!(invalid(line.as_bytes()), InvalidReason::BadValue, "{line}");
    }
}

#[test]
fn multi_value_gives_each_value_in_order() {
    let c = counter("a:1:2.5:-3|c|#k:v");
    assert_eq!(c.value_count(), 3);
    let v: Vec<_> = c.values().collect();
    assert_eq!(v, [Value::Int(1), Value::Float(2.5), Value::Int(-3)]);
    assert_eq!(c.values().len(), 3);
}

#[test]
fn multi_value_skips_empty_entries_like_the_datadog_agent() {
    assert_eq!(values("a:1::2:|c"), [Value::Int(1), Value::Int(2)]);
    assert_eq!(values("a::1|c"), [Value::Int(1)]);
    assert_eq!(invalid(b"a:::|c"), InvalidReason::NoValue);
    assert_eq!(invalid(b"a:1:x:2|c"), InvalidReason::BadValue);
}

#[test]
fn values_of_a_huge_multi_value_line_all_come_back() {
    let line = format!("a:{}|c", vec!["1"; 4000].join(":"));
    let c = counter(&line);
    assert_eq!(c.value_count(), 4000);
    assert_eq!(
        c.values()
            .map(|v| matches!(v, Value::Int(1)) as usize)
            .sum::<usize>(),
        4000
    );
}

// ---- types ----

#[test]
fn other_types_are_ignored_not_invalid() {
    for (line, kind) in [
        ("a:1|g", IgnoredKind::Gauge),
        ("a:1|ms", IgnoredKind::Timer),
        ("a:1|h", IgnoredKind::Histogram),
        ("a:1:2|d", IgnoredKind::Distribution),
        ("a:user42|s", IgnoredKind::Set),
        // Their content is not examined: this gauge would be bad_value as a counter.
        ("a:notanumber|g|@7", IgnoredKind::Gauge),
        ("_e{5,4}:title|text|#a:b", IgnoredKind::Event),
        ("_sc|my.check|0|#a:b", IgnoredKind::ServiceCheck),
        ("_e{\u{1}\u{ff}", IgnoredKind::Event),
    ] {
        assert_eq!(
            parse_line(line.as_bytes(), &LIMITS),
            LineResult::Ignored(kind),
            "{line}"
        );
    }
    assert_eq!(
        parse_line(b"_e{\xff}", &LIMITS),
        LineResult::Ignored(IgnoredKind::Event)
    );
}

#[test]
fn missing_or_unknown_type_is_bad_type() {
    for line in [
        "a:1",
        "a:1|",
        "a:1|C",
        "a:1|count",
        "a:1|c ",
        "a:1|ms2",
        "a:1| c",
        "a:1|c@0.5",
    ] {
        assert_eq!(invalid(line.as_bytes()), InvalidReason::BadType, "{line}");
    }
}

// ---- names ----

#[test]
fn empty_name_is_no_name() {
    for line in [":1|c", "|c", ":1|g", ":|c"] {
        assert_eq!(invalid(line.as_bytes()), InvalidReason::NoName, "{line}");
    }
}

#[test]
fn control_characters_in_a_counter_name_are_bad_name() {
    for line in [
        "a\0b:1|c",
        "a\tb:1|c",
        "a\rb:1|c",
        "\u{1b}[31m:1|c",
        "a\u{7f}:1|c",
    ] {
        assert_eq!(invalid(line.as_bytes()), InvalidReason::BadName, "{line:?}");
    }
}

#[test]
fn missing_value_is_no_value() {
    for line in ["a", "a|c", "a:|c", "a:", "page.views|c|#a:b"] {
        assert_eq!(invalid(line.as_bytes()), InvalidReason::NoValue, "{line}");
    }
}

#[test]
fn invalid_utf8_is_not_utf8() {
    assert_eq!(invalid(b"a\xff:1|c"), InvalidReason::NotUtf8);
    assert_eq!(invalid(b"a:1|c|#k:\xc3"), InvalidReason::NotUtf8);
    // Overlong encoding of '/'.
    assert_eq!(invalid(b"a\xc0\xaf:1|c"), InvalidReason::NotUtf8);
}

// ---- sample rate ----

#[test]
fn sample_rate_is_parsed() {
    assert_eq!(counter("a:1|c|@0.1").sample_rate(), 0.1);
    assert_eq!(counter("a:1|c|@1").sample_rate(), 1.0);
    assert_eq!(counter("a:1|c|@1.0").sample_rate(), 1.0);
    assert_eq!(counter("a:1|c|@1e-3").sample_rate(), 0.001);
    assert_eq!(counter("a:1|c|@.5").sample_rate(), 0.5);
}

#[test]
fn out_of_range_or_malformed_sample_rate_is_bad_sample_rate() {
    for rate in [
        "0", "0.0", "-0.5", "1.0001", "2", "nan", "inf", "", "x", "0.5x", " 0.5", "1e999",
    ] {
        let line = format!("a:1|c|@{rate}");
        assert_eq!(
            invalid(line.as_bytes()),
            InvalidReason::BadSampleRate,
            "{line}"
        );
    }
}

// ---- tags ----

#[test]
fn tags_split_at_the_first_colon_and_may_have_no_value() {
    assert_eq!(
        tags("a:1|c|#env:prod,flag,url:http://x:8080/p,empty:"),
        [
            ("env", Some("prod")),
            ("flag", None),
            ("url", Some("http://x:8080/p")),
            ("empty", Some("")),
        ]
    );
}

#[test]
fn tag_values_keep_quotes_semicolons_and_spaces() {
    let c = counter(r#"a:1|c|#q:"quoted",s:a;b=c,sp:two words,u:ç"#);
    assert_eq!(c.tag("q"), Some("\"quoted\""));
    assert_eq!(c.tag("s"), Some("a;b=c"));
    assert_eq!(c.tag("sp"), Some("two words"));
    assert_eq!(c.tag("u"), Some("ç"));
}

#[test]
fn tag_lookup() {
    let c = counter("page.views:1|c|#page_id:p123,env:prod,flag,page_id:p999");
    assert_eq!(c.tag("page_id"), Some("p123"));
    assert_eq!(c.tag("env"), Some("prod"));
    assert_eq!(c.tag("flag"), Some(""));
    assert_eq!(c.tag("missing"), None);
    assert_eq!(c.tag("page"), None);
    assert_eq!(c.tag_count(), 4);
    assert_eq!(c.raw_tags(), "page_id:p123,env:prod,flag,page_id:p999");
}

#[test]
fn empty_tag_entries_are_skipped() {
    assert_eq!(
        tags("a:1|c|#,a:1,,b:2,"),
        [("a", Some("1")), ("b", Some("2"))]
    );
    assert!(tags("a:1|c|#").is_empty());
    assert!(tags("a:1|c|#,,,").is_empty());
    let c = counter("a:1|c|#,a:1,,b:2,");
    assert_eq!(c.tag_count(), 2);
    assert!(!c.tags_are_canonical());
    assert_eq!(canonical("a:1|c|#,a:1,,b:2,"), "a:1,b:2");
}

#[test]
fn only_empty_tag_entries_give_an_empty_canonical_string() {
    // Found by fuzzing: a tag field holding only commas was flagged canonical, so its raw
    // text (",") was copied out as the canonical string.
    for line in ["a:0|c|#,", "a:0|c|#,,,"] {
        assert_eq!(canonical(line), "", "{line}");
        assert!(!counter(line).tags_are_canonical(), "{line}");
    }
    assert!(counter("a:0|c|#").tags_are_canonical());
}

#[test]
fn bad_tags_are_bad_tag() {
    for line in [
        "a:1|c|#:v",
        "a:1|c|#k:v,:x",
        "a:1|c|#k:a\tb",
        "a:1|c|#k\0:v",
        "a:1|c|#k:v\r",
    ] {
        assert_eq!(invalid(line.as_bytes()), InvalidReason::BadTag, "{line:?}");
    }
}

#[test]
fn canonical_tags_sort_by_key_then_value_and_drop_exact_duplicates() {
    assert_eq!(canonical("a:1|c|#b:2,a:1"), "a:1,b:2");
    assert_eq!(canonical("a:1|c|#b:2,a:1,b:2,a:1"), "a:1,b:2");
    // Same key, different values: both kept, ordered by value.
    assert_eq!(canonical("a:1|c|#k:z,k:a"), "k:a,k:z");
    // No value sorts before an empty value, which sorts before any value.
    assert_eq!(canonical("a:1|c|#k:v,k:,k"), "k,k:,k:v");
    // Key then value, not the raw string: "env" < "env2" although ':' > '2'.
    assert_eq!(canonical("a:1|c|#env2:x,env:z"), "env:z,env2:x");
    // Order of tags on the wire does not matter.
    assert_eq!(
        canonical("page.views:1|c|#page_id:p123,env:prod"),
        canonical("page.views:1|c|#env:prod,page_id:p123")
    );
}

#[test]
fn canonical_check_detects_sorted_unique_tags() {
    assert!(counter("a:1|c|#a:1,b:2,c").tags_are_canonical());
    assert!(counter("a:1|c|#k,k:,k:v").tags_are_canonical());
    assert!(!counter("a:1|c|#b:2,a:1").tags_are_canonical());
    assert!(!counter("a:1|c|#a:1,a:1").tags_are_canonical());
    assert!(!counter("a:1|c|#a:1,").tags_are_canonical());
}

#[test]
fn indexed_parse_gives_the_same_canonical_string_and_ignores_foreign_spans() {
    let limits = LineLimits::default();
    let mut spans = TagSpans::default();
    for line in [
        "a:1|c|#b:2,a:1,b:2",
        "a:1|c|#env2:x,env:z",
        "a:1|c|#k:v,k:,k",
        "a:1|c|#,,a,",
        "a:1|c|#z|#y:1,x:2",
        "a:1|c",
    ] {
        let LineResult::Counter(c) = parse_line_indexed(line.as_bytes(), &limits, &mut spans)
        else {
            panic!("{line} is a counter");
        };
        let mut out = Vec::new();
        c.write_canonical_tags_with(&spans, &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), canonical(line), "{line}");
    }
    // Spans recorded for another line are not applied to this one.
    let other = "m:1|c|#b,a";
    let LineResult::Counter(first) = parse_line_indexed(other.as_bytes(), &limits, &mut spans)
    else {
        panic!("counter");
    };
    let _ = parse_line_indexed(b"m:1|c|#d,c,b,a", &limits, &mut spans);
    let mut out = Vec::new();
    first.write_canonical_tags_with(&spans, &mut out);
    assert_eq!(out, b"a,b");
}

#[test]
fn canonical_tags_append_and_work_above_the_inline_capacity() {
    let tags: Vec<String> = (0..40).rev().map(|i| format!("t{i:02}:v")).collect();
    let line = format!("a:1|c|#{},t00:v", tags.join(","));
    let mut out = b"prefix|".to_vec();
    counter(&line).write_canonical_tags(&mut out);
    let expected: Vec<String> = (0..40).map(|i| format!("t{i:02}:v")).collect();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        format!("prefix|{}", expected.join(","))
    );
}

#[test]
fn tag_count_limit_is_too_many_tags() {
    let limits = LineLimits {
        max_tags: 3,
        ..LIMITS
    };
    assert!(matches!(
        parse_line(b"a:1|c|#a,b,c", &limits),
        LineResult::Counter(_)
    ));
    assert!(matches!(
        parse_line(b"a:1|c|#a,b,,c,", &limits),
        LineResult::Counter(_)
    ));
    assert_eq!(
        invalid_with(b"a:1|c|#a,b,c,d", &limits),
        InvalidReason::TooManyTags
    );
    assert_eq!(
        invalid_with(b"a:1|c|#a,a,a,a", &limits),
        InvalidReason::TooManyTags
    );
}

#[test]
fn huge_tag_counts_are_refused_by_default_and_accepted_when_allowed() {
    let many: Vec<String> = (0..5000).map(|i| format!("k{i}:v")).collect();
    let line = format!("a:1|c|#{}", many.join(","));
    let big = LineLimits {
        max_line_bytes: 1 << 20,
        max_tags: 64,
    };
    assert_eq!(
        invalid_with(line.as_bytes(), &big),
        InvalidReason::TooManyTags
    );
    let bigger = LineLimits {
        max_tags: 5000,
        ..big
    };
    let LineResult::Counter(c) = parse_line(line.as_bytes(), &bigger) else {
        panic!("5000 tags are allowed here");
    };
    assert_eq!(c.tags().count(), 5000);
    let mut out = Vec::new();
    c.write_canonical_tags(&mut out);
    assert_eq!(out.len(), line.len() - "a:1|c|#".len());
}

// ---- timestamp ----

#[test]
fn timestamp_is_parsed() {
    assert_eq!(
        counter("a:1|c|T1700000000").timestamp(),
        Some(1_700_000_000)
    );
    assert_eq!(counter("a:1|c|T1").timestamp(), Some(1));
    assert_eq!(
        counter("a:1|c|T9223372036854775807").timestamp(),
        Some(i64::MAX)
    );
}

#[test]
fn malformed_timestamp_is_bad_timestamp() {
    for ts in [
        "",
        "0",
        "-1",
        "+1",
        "1.5",
        "abc",
        "1e9",
        "9223372036854775808",
        " 1",
    ] {
        let line = format!("a:1|c|T{ts}");
        assert_eq!(
            invalid(line.as_bytes()),
            InvalidReason::BadTimestamp,
            "{line}"
        );
    }
}

// ---- fields: order, repetition, unknown ----

#[test]
fn all_fields_in_any_order() {
    for line in [
        "a:1|c|@0.5|#k:v|T1700000000",
        "a:1|c|T1700000000|#k:v|@0.5",
        "a:1|c|#k:v|T1700000000|@0.5",
    ] {
        let c = counter(line);
        assert_eq!(c.sample_rate(), 0.5, "{line}");
        assert_eq!(c.timestamp(), Some(1_700_000_000), "{line}");
        assert_eq!(c.tag("k"), Some("v"), "{line}");
    }
}

#[test]
fn repeated_fields_last_one_wins_but_each_is_validated() {
    let c = counter("a:1|c|@0.5|#a:1|@0.25|#b:2|T5|T6");
    assert_eq!(c.sample_rate(), 0.25);
    assert_eq!(tags("a:1|c|#a:1|#b:2"), [("b", Some("2"))]);
    assert_eq!(c.timestamp(), Some(6));
    assert_eq!(invalid(b"a:1|c|@2|@0.5"), InvalidReason::BadSampleRate);
    assert_eq!(invalid(b"a:1|c|#:x|#b:2"), InvalidReason::BadTag);
}

#[test]
fn dogstatsd_origin_and_unknown_fields_are_skipped() {
    let c = counter("a:1|c|#k:v|c:ci-0123abcd|e:it-false,cn-app|card:high|x:future||");
    assert_eq!(c.tag("k"), Some("v"));
    assert_eq!(c.sample_rate(), 1.0);
    // Contents are not validated either (the agent logs and carries on).
    assert!(matches!(
        parse_line("a:1|c|c:\u{1}garbage|e:".as_bytes(), &LIMITS),
        LineResult::Counter(_)
    ));
    // A trailing pipe is an empty field.
    assert_eq!(counter("a:1|c|").name(), "a");
}

// ---- limits ----

#[test]
fn limits_have_the_documented_defaults() {
    assert_eq!(LineLimits::default().max_line_bytes, 8192);
    assert_eq!(LineLimits::default().max_tags, 64);
}

#[test]
fn line_over_the_limit_is_too_long_even_if_garbage() {
    let limits = LineLimits {
        max_line_bytes: 10,
        ..LIMITS
    };
    assert!(matches!(
        parse_line(b"abcde:1|c", &limits),
        LineResult::Counter(_)
    ));
    assert!(matches!(
        parse_line(b"abcdef:1|c", &limits),
        LineResult::Counter(_)
    ));
    assert_eq!(
        invalid_with(b"abcdefg:1|c", &limits),
        InvalidReason::TooLong
    );
    assert_eq!(
        invalid_with(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", &limits),
        InvalidReason::TooLong
    );
    assert_eq!(
        invalid_with(b"_e{xxxxxxxxxxxxxx", &limits),
        InvalidReason::TooLong
    );
}

#[test]
fn sixty_four_kib_lines() {
    let tagval = "x".repeat(64 * 1024);
    let line = format!("a:1|c|#k:{tagval}");
    assert_eq!(invalid(line.as_bytes()), InvalidReason::TooLong);
    let roomy = LineLimits {
        max_line_bytes: 128 * 1024,
        ..LIMITS
    };
    let LineResult::Counter(c) = parse_line(line.as_bytes(), &roomy) else {
        panic!("fits the raised limit")
    };
    assert_eq!(c.tag("k").map(str::len), Some(64 * 1024));
    // A 64 KiB packet of garbage with no newline: one line, one verdict.
    let garbage = vec![b'|'; 64 * 1024];
    let results: Vec<_> = split_lines(&garbage)
        .map(|l| parse_line(l, &roomy))
        .collect();
    assert_eq!(results, [LineResult::Invalid(InvalidReason::NoName)]);
}

// ---- reasons and kinds ----

#[test]
fn invalid_reason_labels_are_unique_snake_case_and_all_listed() {
    let labels: Vec<&str> = InvalidReason::ALL.iter().map(|r| r.as_str()).collect();
    let mut sorted = labels.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), labels.len());
    for l in &labels {
        assert!(
            l.bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'_' || b.is_ascii_digit()),
            "{l}"
        );
    }
    assert_eq!(
        labels,
        [
            "not_utf8",
            "no_name",
            "bad_name",
            "no_value",
            "bad_value",
            "bad_type",
            "bad_sample_rate",
            "bad_tag",
            "bad_timestamp",
            "too_long",
            "too_many_tags",
            "missing_key_tag",
            "key_too_long",
            "ambiguous_key_tag"
        ]
    );
    // Display is a sentence for humans, distinct from the label.
    assert_eq!(
        InvalidReason::TooLong.to_string(),
        "line is longer than the limit"
    );
}

#[test]
fn ignored_kind_labels_are_unique() {
    let labels: Vec<&str> = IgnoredKind::ALL.iter().map(|k| k.as_str()).collect();
    assert_eq!(
        labels,
        [
            "gauge",
            "timer",
            "histogram",
            "distribution",
            "set",
            "event",
            "service_check",
            "counter_absolute"
        ]
    );
}

// ---- render ----

#[test]
fn render_writes_a_line_that_parses_back() {
    let tags = [
        Tag {
            key: "page_id",
            value: Some("p1"),
        },
        Tag {
            key: "flag",
            value: None,
        },
        Tag {
            key: "url",
            value: Some("http://x:1"),
        },
    ];
    let vals = [
        Value::Int(3),
        Value::Float(1.0),
        Value::Float(1e16),
        Value::Int(i64::MIN),
    ];
    let inc = Increment {
        name: "page.views",
        values: &vals,
        sample_rate: 0.25,
        tags: &tags,
        timestamp: Some(1_700_000_000),
    };
    let mut out = Vec::new();
    render(&inc, &mut out).unwrap();
    assert_eq!(
        String::from_utf8(out.clone()).unwrap(),
        "page.views:3:1.0:1e16:-9223372036854775808|c|@0.25|#page_id:p1,flag,url:http://x:1|T1700000000"
    );
    let c = counter(std::str::from_utf8(&out).unwrap());
    assert_eq!(c.values().collect::<Vec<_>>(), vals);
    let mut plain = Vec::new();
    render(&Increment::new("a", &[Value::Int(1)]), &mut plain).unwrap();
    assert_eq!(plain, b"a:1|c");
}

#[test]
fn render_refuses_what_cannot_be_a_line() {
    let one = [Value::Int(1)];
    let ok = Increment::new("a", &one);
    let bad_tag = [Tag {
        key: "k,",
        value: None,
    }];
    let colon_key = [Tag {
        key: "k:x",
        value: Some("v"),
    }];
    let pipe_value = [Tag {
        key: "k",
        value: Some("a|b"),
    }];
    let nan = [Value::Float(f64::NAN)];
    let cases = [
        (Increment { name: "", ..ok }, InvalidReason::NoName),
        (Increment { name: "a:b", ..ok }, InvalidReason::BadName),
        (Increment { name: "a|b", ..ok }, InvalidReason::BadName),
        (Increment { name: "a\nb", ..ok }, InvalidReason::BadName),
        (Increment { name: "_e{x", ..ok }, InvalidReason::BadName),
        (Increment { values: &[], ..ok }, InvalidReason::NoValue),
        (Increment { values: &nan, ..ok }, InvalidReason::BadValue),
        (
            Increment {
                sample_rate: 0.0,
                ..ok
            },
            InvalidReason::BadSampleRate,
        ),
        (
            Increment {
                sample_rate: f64::NAN,
                ..ok
            },
            InvalidReason::BadSampleRate,
        ),
        (
            Increment {
                tags: &bad_tag,
                ..ok
            },
            InvalidReason::BadTag,
        ),
        (
            Increment {
                tags: &colon_key,
                ..ok
            },
            InvalidReason::BadTag,
        ),
        (
            Increment {
                tags: &pipe_value,
                ..ok
            },
            InvalidReason::BadTag,
        ),
        (
            Increment {
                timestamp: Some(0),
                ..ok
            },
            InvalidReason::BadTimestamp,
        ),
    ];
    for (inc, reason) in cases {
        let mut out = b"x".to_vec();
        assert_eq!(render(&inc, &mut out), Err(reason), "{inc:?}");
        assert_eq!(out, b"x", "output untouched on error");
    }
}

#[test]
fn word_at_a_time_search_matches_a_byte_loop() {
    let naive = |bytes: &[u8], from: usize, set: &[u8]| {
        bytes[from..]
            .iter()
            .position(|b| set.contains(b))
            .map_or(bytes.len(), |i| from + i)
    };
    // Every length up to three words, separators at every position, high bytes around.
    for len in 0..=24 {
        for sep_at in 0..=len {
            for filler in [b'x', 0xff, 0x80, b'|' ^ 0x80] {
                let mut bytes = vec![filler; len];
                if sep_at < len {
                    bytes[sep_at] = b'|';
                }
                if len > 3 {
                    bytes[len - 2] = b',';
                }
                for from in 0..=len {
                    assert_eq!(find(&bytes, from, b'|'), naive(&bytes, from, b"|"));
                    assert_eq!(
                        find2(&bytes, from, b',', b'|'),
                        naive(&bytes, from, b",|"),
                        "{bytes:?} from {from}"
                    );
                }
            }
        }
    }
}
