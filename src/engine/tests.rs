//! The line path end to end through the engine: parse, place, scale, limit, count.

use crate::config::{Config, FamilyConfig};
use crate::line::{IgnoredKind, InvalidReason};
use crate::vocabulary::{DropReason, Granularity, Transport};

use super::{Engine, RecordError};

const NOW: i64 = 1_796_042_096; // 2026-11-30T12:34:56Z

fn config() -> Config {
    let mut config = Config::default();
    config.families.push(FamilyConfig::seed_views());
    config.limits.max_key_bytes = 64;
    config
}

fn engine() -> Engine {
    Engine::with_seed(&config(), Some(9)).unwrap()
}

fn snapshot(engine: &Engine) -> String {
    engine.aggregator().snapshot().to_string()
}

const MINUTE: u32 = (NOW / 60) as u32;

#[test]
fn a_packet_of_mixed_lines_counts_each_and_keeps_the_good_ones() {
    let e = engine();
    let packet = b"req:1|c|#env:prod\r\n\
        req:2|c|#env:prod\n\
        \n\
        temp:21|g\n\
        req:x|c\n\
        \xff\xfe:1|c\n\
        _e{1,1}:a|b\n\
        page.views:1|c|#page_id:p1\n\
        page.bytes:512|c|#page_id:p1,env:prod\n\
        page.views:1|c|#env:prod\n\
        req:1|c|@0|#env:prod\n";
    e.ingest_packet(packet, Transport::Udp, NOW);
    assert_eq!(
        snapshot(&e),
        format!(
            "0/Both(Minute({MINUTE}))/req|env:prod = [3]\n\
             1/Both(Minute({MINUTE}))/p1 = [512, 1]\n"
        )
    );
    let c = e.aggregator().counters();
    assert_eq!(c.received_for(Transport::Udp), 10);
    assert_eq!(c.invalid_for(InvalidReason::BadValue), 1);
    assert_eq!(c.invalid_for(InvalidReason::NotUtf8), 1);
    assert_eq!(c.invalid_for(InvalidReason::MissingKeyTag), 1);
    assert_eq!(c.invalid_for(InvalidReason::BadSampleRate), 1);
    assert_eq!(c.ignored_for(IgnoredKind::Gauge), 1);
    assert_eq!(c.ignored_for(IgnoredKind::Event), 1);
    assert_eq!((c.accepted, c.accepted_sum), (4, 516));
}

#[test]
fn multi_value_and_sample_rates() {
    let e = engine();
    e.ingest_packet(
        b"a:1:2:3|c\nb:1|c|@0.5\nc:1.5:0.5|c\nd:-4|c|@0.25\n",
        Transport::UnixDatagram,
        NOW,
    );
    assert_eq!(
        snapshot(&e),
        format!(
            "0/Both(Minute({MINUTE}))/a| = [6]\n\
             0/Both(Minute({MINUTE}))/b| = [2]\n\
             0/Both(Minute({MINUTE}))/c| = [2]\n\
             0/Both(Minute({MINUTE}))/d| = [-16]\n"
        )
    );
    assert_eq!(
        e.aggregator().counters().accepted,
        7,
        "each value is an increment"
    );
}

#[test]
fn a_line_and_a_call_with_the_same_tags_share_a_row() {
    let e = engine();
    e.ingest_packet(b"x:1|c|#b:2,a:1,a:1,flag\n", Transport::UnixStream, NOW);
    e.record(
        "x",
        &[("flag", ""), ("a", "1"), ("b", "2")][..],
        1,
        NOW,
        None,
    )
    .unwrap();
    assert_eq!(
        snapshot(&e),
        format!("0/Both(Minute({MINUTE}))/x|a:1,b:2,flag = [2]\n")
    );
}

#[test]
fn client_timestamps_pick_the_minute_or_are_dropped_outside_the_window() {
    let e = engine();
    let packet = format!(
        "t:1|c|T{}\nt:1|c|T{}\nt:5|c|T{}\n",
        NOW - 600,
        NOW + 3600,
        NOW - 7200
    );
    e.ingest_packet(packet.as_bytes(), Transport::Udp, NOW);
    assert_eq!(
        snapshot(&e),
        format!("0/Both(Minute({}))/t| = [1]\n", MINUTE - 10)
    );
    let c = e.aggregator().counters();
    assert_eq!(c.dropped_for(DropReason::TimestampWindow), 2);
    assert_eq!(c.dropped_sum_total(), 6);
}

#[test]
fn i64_extremes_never_wrap() {
    let e = engine();
    let packet = format!(
        "big:{max}|c\nbig:1|c\nbig:{min}|c\nsum:{max}:{max}|c\nhuge:1|c|@0.0000000001\nbad:9223372036854775808|c\n",
        max = i64::MAX,
        min = i64::MIN
    );
    e.ingest_packet(packet.as_bytes(), Transport::Udp, NOW);
    assert_eq!(
        snapshot(&e),
        format!(
            "0/Both(Minute({MINUTE}))/big| = [-1]\n0/Both(Minute({MINUTE}))/huge| = [10000000000]\n"
        )
    );
    let c = e.aggregator().counters();
    assert_eq!(
        c.dropped_for(DropReason::Overflow),
        3,
        "big:1 and both values of sum"
    );
    assert_eq!(c.invalid_for(InvalidReason::BadValue), 1);
    assert_eq!(
        c.accepted_sum - c.dropped_sum_total(),
        e.aggregator().pending_sum(Granularity::Minute)
    );
}

#[test]
fn key_length_limit_and_disabled_generic_family() {
    let mut config = config();
    config.generic.enabled = false;
    let e = Engine::with_seed(&config, Some(1)).unwrap();
    let long = "p".repeat(65);
    let packet = format!("page.views:1|c|#page_id:{long}\nother:3|c\npage.views:1|c|#page_id:ok\n");
    e.ingest_packet(packet.as_bytes(), Transport::Udp, NOW);
    let c = e.aggregator().counters();
    assert_eq!(c.invalid_for(InvalidReason::KeyTooLong), 1);
    assert_eq!(c.dropped_for(DropReason::Unconfigured), 1);
    assert_eq!(
        e.record("other", &[][..], 1, NOW, None),
        Err(RecordError::Dropped(DropReason::Unconfigured))
    );
    assert_eq!(e.aggregator().snapshot().len(), 1);
}

#[test]
fn row_limit_drops_and_counts_without_blocking() {
    let mut config = config();
    config.limits.max_pending_rows = 3;
    let e = Engine::with_seed(&config, Some(1)).unwrap();
    let packet: String = (0..10).map(|i| format!("k{i}:1|c\n")).collect();
    e.ingest_packet(packet.as_bytes(), Transport::Udp, NOW);
    e.ingest_packet(b"k0:5|c\n", Transport::Udp, NOW);
    let c = e.aggregator().counters();
    assert_eq!(c.dropped_for(DropReason::MaxRows), 7);
    assert_eq!(e.aggregator().pending_sum(Granularity::Minute), 8);
}

#[test]
fn hostile_packets_are_counted_and_the_engine_keeps_working() {
    let e = engine();
    let mut packet = vec![b'x'; 65_536];
    packet.extend_from_slice(b"\nok:1|c\n");
    let tags: Vec<String> = (0..1000).map(|i| format!("t{i}:v")).collect();
    packet.extend_from_slice(format!("many:1|c|#{}\n", tags.join(",")).as_bytes());
    packet.extend_from_slice(b"quote:1|c|#q:\"'; DROP TABLE x;--\n");
    packet.extend((0..=255u8).cycle().take(4096));
    e.ingest_packet(&packet, Transport::Udp, NOW);
    let c = e.aggregator().counters();
    assert_eq!(c.invalid_for(InvalidReason::TooLong), 1);
    assert_eq!(c.invalid_for(InvalidReason::TooManyTags), 1);
    assert!(snapshot(&e).contains("ok| = [1]"));
    assert!(snapshot(&e).contains("quote|q:\"'; DROP TABLE x;-- = [1]"));
}

#[test]
fn after_close_everything_is_refused_and_counted() {
    let e = engine();
    e.aggregator().close();
    e.ingest_packet(b"a:1|c\n", Transport::Udp, NOW);
    assert_eq!(
        e.record("a", &[][..], 2, NOW, None),
        Err(RecordError::Dropped(DropReason::AfterShutdown))
    );
    let c = e.aggregator().counters();
    assert_eq!(
        (
            c.dropped_for(DropReason::AfterShutdown),
            c.dropped_sum_total()
        ),
        (2, 3)
    );
    assert!(e.aggregator().snapshot().is_empty());
}

/// The line cache changes nothing: lines whose name and rest were seen before (so they
/// are served from the cache, with only their values parsed) count exactly as the same
/// lines parsed in full on threads whose caches are empty.
#[test]
fn cached_lines_count_exactly_like_lines_parsed_in_full() {
    let rests = [
        "c|#env:prod".to_string(),
        "c|@0.5|#env:prod,az:b".to_string(),
        "c|#page_id:p1,env:prod".to_string(),
        "c".to_string(),
        format!("c|T{}", NOW - 60),
        format!("c|T{}", NOW + 7200),
        "g|#env:prod".to_string(),
        "c|#page_id:".to_string(),
    ];
    let names = ["req", "page.views", "page.bytes"];
    let values: [&[u8]; 10] = [
        b"1",
        b"7",
        b"-3",
        b"2.0",
        b"1:2:3",
        b"",
        b"x",
        b"\xff",
        // Large, but no sum of this test reaches the i64 limit: where an overflow is
        // refused depends on which stripe each thread adds into, which differs between
        // the two engines (overflow has its own test, `i64_extremes_never_wrap`).
        b"1000000000000000000",
        b"1\x01",
    ];
    let mut lines: Vec<Vec<u8>> = Vec::new();
    for value in values {
        for name in names {
            for rest in &rests {
                let mut line = format!("{name}:").into_bytes();
                line.extend_from_slice(value);
                line.push(b'|');
                line.extend_from_slice(rest.as_bytes());
                lines.push(line);
            }
        }
    }
    // Every line twice in one thread: the second time, and for most lines already the
    // first (the same name and rest with another value), from the cache.
    let cached = engine();
    let packet: Vec<u8> = lines
        .iter()
        .flat_map(|l| [&l[..], b"\n"].concat())
        .collect();
    cached.ingest_packet(&packet, Transport::Udp, NOW);
    cached.ingest_packet(&packet, Transport::Udp, NOW);
    // The same lines, each on a thread of its own, whose cache starts empty.
    let fresh = engine();
    for _ in 0..2 {
        for line in &lines {
            std::thread::scope(|s| {
                s.spawn(|| fresh.ingest_packet(line, Transport::Udp, NOW));
            });
        }
    }
    assert_eq!(snapshot(&cached), snapshot(&fresh));
    assert_eq!(
        cached.aggregator().counters(),
        fresh.aggregator().counters()
    );
    assert!(snapshot(&cached).contains("req|az:b,env:prod"));
}

/// A non-line source is counted as received on its own transport, and its increment is
/// kept exactly as an in-process one.
#[test]
fn record_from_counts_its_source() {
    let e = engine();
    e.record_from(
        Transport::UnixStream,
        "req",
        &[("env", "prod")][..],
        3,
        NOW,
        None,
    )
    .unwrap();
    let c = e.aggregator().counters();
    assert_eq!(c.received_for(Transport::UnixStream), 1);
    assert_eq!(c.received_for(Transport::Udp), 0);
    assert_eq!((c.accepted, c.accepted_sum), (1, 3));
}

/// A second name for the `views` column, the routing change a reload takes live.
fn config_with_alias() -> Config {
    let mut config = config();
    config.families[0]
        .columns
        .insert("page.view".into(), "views".into());
    config
}

#[test]
fn a_replaced_routing_places_the_next_lines_and_leaves_pending_rows_alone() {
    let e = engine();
    // Twice, so that the second one is placed from this thread's line cache.
    e.ingest_packet(
        b"page.view:1|c|#page_id:p1\npage.view:1|c|#page_id:p1\n",
        Transport::Udp,
        NOW,
    );
    let families = crate::family::Families::from_config(&config_with_alias()).unwrap();
    e.replace_routing(families).unwrap();
    e.ingest_packet(b"page.view:5|c|#page_id:p1\n", Transport::Udp, NOW);
    assert_eq!(
        snapshot(&e),
        format!(
            "0/Both(Minute({MINUTE}))/page.view|page_id:p1 = [2]\n\
             1/Both(Minute({MINUTE}))/p1 = [0, 5]\n"
        )
    );
    // And back: the cache holds no placement of the routing before.
    e.replace_routing(crate::family::Families::from_config(&config()).unwrap())
        .unwrap();
    e.ingest_packet(b"page.view:7|c|#page_id:p1\n", Transport::Udp, NOW);
    assert!(
        snapshot(&e).contains("page.view|page_id:p1 = [9]"),
        "{}",
        snapshot(&e)
    );
}

#[test]
fn a_routing_for_other_families_is_refused_by_name() {
    let e = engine();
    let mut moved = config();
    moved.families[0].minute_table = "metrics.elsewhere".into();
    let families = crate::family::Families::from_config(&moved).unwrap();
    assert_eq!(
        e.replace_routing(families),
        Err("family `views`: minute_table".into())
    );
    let mut wider = config();
    wider.families[0]
        .columns
        .insert("page.clicks".into(), "clicks".into());
    let error = e
        .replace_routing(crate::family::Families::from_config(&wider).unwrap())
        .unwrap_err();
    assert!(error.contains("counter columns"), "{error}");
    // Still routed as before.
    e.ingest_packet(b"page.views:1|c|#page_id:p1\n", Transport::Udp, NOW);
    assert_eq!(
        snapshot(&e),
        format!("1/Both(Minute({MINUTE}))/p1 = [0, 1]\n")
    );
}

/// Name, tags, delta and client time.
type TestIncrement = (&'static str, Vec<(String, String)>, i64, Option<i64>);

/// The increments of the batch tests: kept in the generic family and in `views`, and
/// refused for each reason an increment can be (missing or empty key tag, key too long,
/// a client time outside the window).
fn batch_increments() -> Vec<TestIncrement> {
    let tags = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Vec<_>>()
    };
    vec![
        ("req", tags(&[("env", "prod"), ("az", "b")]), 3, None),
        (
            "req",
            tags(&[("az", "b"), ("env", "prod")]),
            4,
            Some(NOW - 60),
        ),
        ("page.views", tags(&[("page_id", "p1")]), 5, Some(NOW)),
        ("page.views", tags(&[("env", "prod")]), 1, None),
        ("page.views", tags(&[("page_id", "")]), 1, None),
        ("req", tags(&[("k", &"v".repeat(80))]), 1, None),
        ("req", tags(&[("env", "prod")]), 2, Some(NOW + 86_400)),
        ("other", Vec::new(), -7, None),
    ]
}

/// A batch records each increment exactly as `record_from` does: the same rows, the
/// same counters (received on its source, accepted, invalid and dropped by reason), the
/// same answer per increment; with the generic family off too (unconfigured names), and
/// with a `[[mapping]]` rule (names it matches in a row, each with its own capture,
/// between names it does not: the batch keeps the last name's route and time's minute).
#[test]
fn a_batch_records_exactly_as_record_from() {
    let mut without_generic = config();
    without_generic.generic.enabled = false;
    let mut mapped = config();
    mapped.mappings.push(crate::config::MappingConfig {
        pattern: "page.*.views".into(),
        family: "views".into(),
        column: "bytes".into(),
        key: [("page_id".to_string(), "$1".to_string())].into(),
        ..Default::default()
    });
    for config in [config(), without_generic, mapped] {
        let one_by_one = Engine::with_seed(&config, Some(9)).unwrap();
        let batched = Engine::with_seed(&config, Some(9)).unwrap();
        let mut increments = batch_increments();
        for (name, at) in [
            ("page.home.views", None),
            ("page.home.views", Some(NOW - 60)),
            ("page.about.views", Some(NOW - 60)),
            ("req", Some(NOW - 60)),
            ("page.about.views", None),
            ("page.views", None),
        ] {
            increments.push((name, vec![("page_id".into(), "p2".into())], 2, at));
        }
        let mut answers = Vec::new();
        for (name, tags, delta, at) in &increments {
            let pairs: Vec<(&str, &str)> =
                tags.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            answers.push(one_by_one.record_from(
                Transport::OtlpGrpc,
                name,
                pairs.as_slice(),
                *delta,
                NOW,
                *at,
            ));
        }
        let mut batch = batched.batch(Transport::OtlpGrpc, NOW);
        let mut batch_answers = Vec::new();
        for (name, tags, delta, at) in &increments {
            let pairs: Vec<(&str, &str)> =
                tags.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            batch_answers.push(batch.record(name, pairs.as_slice(), *delta, *at));
        }
        drop(batch);
        assert_eq!(batch_answers, answers);
        assert!(answers.iter().any(Result::is_ok));
        assert!(answers.iter().any(Result::is_err));
        assert_eq!(snapshot(&batched), snapshot(&one_by_one));
        if !config.mappings.is_empty() {
            let rows = snapshot(&batched);
            assert!(
                rows.contains("/home = ") && rows.contains("/about = "),
                "{rows}"
            );
        }
        assert_eq!(
            batched.aggregator().counters(),
            one_by_one.aggregator().counters()
        );
        assert_eq!(
            batched
                .aggregator()
                .counters()
                .received_for(Transport::OtlpGrpc),
            increments.len() as u64
        );
    }
}

/// A batch routes by the routing of its start; a routing replaced meanwhile applies from
/// the next batch.
#[test]
fn a_batch_keeps_its_routing_and_the_next_takes_the_new_one() {
    let e = engine();
    let tags: &[(&str, &str)] = &[("page_id", "p1")];
    let mut batch = e.batch(Transport::OtlpHttp, NOW);
    batch.record("page.view", tags, 1, None).unwrap();
    e.replace_routing(crate::family::Families::from_config(&config_with_alias()).unwrap())
        .unwrap();
    batch.record("page.view", tags, 2, None).unwrap();
    drop(batch);
    e.batch(Transport::OtlpHttp, NOW)
        .record("page.view", tags, 5, None)
        .unwrap();
    assert_eq!(
        snapshot(&e),
        format!(
            "0/Both(Minute({MINUTE}))/page.view|page_id:p1 = [3]\n\
             1/Both(Minute({MINUTE}))/p1 = [0, 5]\n"
        )
    );
}

#[test]
fn new_limits_bind_from_the_next_line_cached_or_not() {
    let e = engine();
    let line = b"req:1|c|#env:prod,zone:a\n";
    // Placed, and so cached, under the limits as started.
    e.ingest_packet(line, Transport::Udp, NOW);
    let mut tight = config();
    tight.limits.max_tags = 1;
    tight.limits.max_line_bytes = 64;
    tight.limits.max_pending_rows = 2;
    e.set_limits(&tight);
    // The cached line is parsed again, and has one tag too many now.
    e.ingest_packet(line, Transport::Udp, NOW);
    e.ingest_packet(&[b'x'; 65], Transport::Udp, NOW);
    let c = e.aggregator().counters();
    assert_eq!(c.invalid_for(InvalidReason::TooManyTags), 1);
    assert_eq!(c.invalid_for(InvalidReason::TooLong), 1);
    // One row is pending: one more fits under the new row limit, a third does not
    // (accepted, then dropped).
    e.ingest_packet(b"a:1|c\nb:1|c\n", Transport::Udp, NOW);
    let c = e.aggregator().counters();
    assert_eq!(c.accepted, 3);
    assert_eq!(c.dropped_for(DropReason::MaxRows), 1);
    // Raised again, the same lines pass.
    e.set_limits(&config());
    e.ingest_packet(line, Transport::Udp, NOW);
    e.ingest_packet(b"b:1|c\n", Transport::Udp, NOW);
    let c = e.aggregator().counters();
    assert_eq!((c.accepted, c.dropped_total()), (5, 1));
    assert_eq!(e.aggregator().pending_rows(), 3);
}

#[test]
fn a_new_key_limit_comes_with_the_routing() {
    let e = engine();
    let long = format!("page.views:1|c|#page_id:{}\n", "p".repeat(40));
    e.ingest_packet(long.as_bytes(), Transport::Udp, NOW);
    let mut tight = config();
    tight.limits.max_key_bytes = 16;
    e.replace_routing(crate::family::Families::from_config(&tight).unwrap())
        .unwrap();
    e.ingest_packet(long.as_bytes(), Transport::Udp, NOW);
    let c = e.aggregator().counters();
    assert_eq!(c.accepted, 1);
    assert_eq!(c.invalid_for(InvalidReason::KeyTooLong), 1);
}
