use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum, metric::Data, number_data_point::Value,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::*;

const S: u64 = 1_000_000_000;
/// The sidecar's start in these tests: t = 1000 s.
const BOOT: u64 = 1000 * S;

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

fn point(start: u64, time: u64, value: Value, attrs: Vec<KeyValue>) -> NumberDataPoint {
    NumberDataPoint {
        attributes: attrs,
        start_time_unix_nano: start,
        time_unix_nano: time,
        value: Some(value),
        ..Default::default()
    }
}

fn sum(
    name: &str,
    temporality: AggregationTemporality,
    monotonic: bool,
    points: Vec<NumberDataPoint>,
) -> Metric {
    Metric {
        name: name.into(),
        data: Some(Data::Sum(Sum {
            data_points: points,
            aggregation_temporality: temporality as i32,
            is_monotonic: monotonic,
        })),
        ..Default::default()
    }
}

fn request(metrics: Vec<Metric>) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", "shop"),
                    kv("service.instance.id", "pod-7"),
                ],
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "lib".into(),
                    attributes: vec![kv("team", "core")],
                    ..Default::default()
                }),
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn cumulative_req(start: u64, time: u64, value: i64) -> ExportMetricsServiceRequest {
    request(vec![sum(
        "orders",
        AggregationTemporality::Cumulative,
        true,
        vec![point(
            start,
            time,
            Value::AsInt(value),
            vec![kv("region", "eu")],
        )],
    )])
}

fn deltas(c: &Conversion) -> Vec<i64> {
    c.increments.iter().map(|i| i.delta).collect()
}

/// Tags as owned pairs, to compare with literals.
fn owned(tags: &[crate::ingest::otlp::Tag<'_>]) -> Vec<(String, String)> {
    tags.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn run<'r>(streams: &mut Streams, req: &'r ExportMetricsServiceRequest) -> Conversion<'r> {
    convert(req, &AttributePolicy::default(), streams, 2000 * S)
}

#[test]
fn delta_points_map_with_tags_time_and_default_attribute_policy() {
    let req = request(vec![sum(
        "orders",
        AggregationTemporality::Delta,
        true,
        vec![
            point(0, 1500 * S + 7, Value::AsInt(3), vec![kv("region", "eu")]),
            point(0, 1560 * S, Value::AsDouble(2.0), vec![kv("region", "us")]),
        ],
    )]);
    let c = run(&mut Streams::new(10, BOOT), &req);
    assert_eq!(c.rejected(), 0);
    assert_eq!(c.increments.len(), 2);
    let first = &c.increments[0];
    assert_eq!(first.name, "orders");
    assert_eq!(first.delta, 3);
    assert_eq!(first.at_unix_secs, Some(1500));
    // service.name kept; service.instance.id and scope attributes dropped by default.
    assert_eq!(
        owned(&first.tags),
        vec![
            ("service.name".to_string(), "shop".to_string()),
            ("region".to_string(), "eu".to_string())
        ]
    );
    assert_eq!(c.increments[1].delta, 2);
}

#[test]
fn configured_resource_and_scope_attributes_become_tags() {
    let policy = AttributePolicy {
        resource: vec!["service.instance.id".into()],
        scope: vec!["team".into()],
    };
    let req = request(vec![sum(
        "orders",
        AggregationTemporality::Delta,
        false,
        vec![point(0, 0, Value::AsInt(-4), vec![])],
    )]);
    let c = convert(&req, &policy, &mut Streams::new(10, BOOT), 0);
    assert_eq!(
        deltas(&c),
        vec![-4],
        "a non-monotonic delta may be negative"
    );
    assert_eq!(c.increments[0].at_unix_secs, None);
    assert_eq!(
        owned(&c.increments[0].tags),
        vec![
            ("service.instance.id".to_string(), "pod-7".to_string()),
            ("team".to_string(), "core".to_string())
        ]
    );
}

#[test]
fn doubles_only_when_integral_and_bad_values_are_counted() {
    let req = request(vec![sum(
        "x",
        AggregationTemporality::Delta,
        true,
        vec![
            point(0, 0, Value::AsDouble(1.5), vec![]),
            point(0, 0, Value::AsDouble(f64::NAN), vec![]),
            point(0, 0, Value::AsDouble(f64::INFINITY), vec![]),
            point(0, 0, Value::AsDouble(1e30), vec![]),
            point(0, 0, Value::AsInt(-1), vec![]),
            point(0, 0, Value::AsDouble(5.0), vec![]),
        ],
    )]);
    let c = run(&mut Streams::new(10, BOOT), &req);
    assert_eq!(deltas(&c), vec![5]);
    assert_eq!(c.dropped[PointDrop::NonInteger.index()], 1);
    assert_eq!(c.dropped[PointDrop::NonFinite.index()], 2);
    assert_eq!(c.dropped[PointDrop::OutOfRange.index()], 1);
    assert_eq!(c.dropped[PointDrop::NegativeMonotonic.index()], 1);
    assert_eq!(c.rejected(), 5);
    assert!(c.message().contains("1 non_integer"), "{}", c.message());
}

#[test]
fn other_kinds_are_ignored_by_kind_not_refused() {
    let gauge = Metric {
        name: "g".into(),
        data: Some(Data::Gauge(Gauge {
            data_points: vec![point(0, 0, Value::AsInt(1), vec![]); 2],
        })),
        ..Default::default()
    };
    let histogram = Metric {
        name: "h".into(),
        data: Some(Data::Histogram(Histogram {
            data_points: vec![HistogramDataPoint::default()],
            aggregation_temporality: 1,
        })),
        ..Default::default()
    };
    let unspecified = sum(
        "u",
        AggregationTemporality::Unspecified,
        true,
        vec![point(0, 0, Value::AsInt(1), vec![])],
    );
    let req = request(vec![gauge, histogram, unspecified]);
    let c = run(&mut Streams::new(10, BOOT), &req);
    assert!(c.increments.is_empty());
    assert_eq!(c.ignored[IgnoredKind::Gauge.index()], 2);
    assert_eq!(c.ignored[IgnoredKind::Histogram.index()], 1);
    assert_eq!(c.dropped[PointDrop::UnknownTemporality.index()], 1);
}

#[test]
fn cumulative_differences_duplicates_and_resets() {
    let mut t = Streams::new(10, BOOT);
    // Started after the sidecar: the first point is all new.
    let start = 1100 * S;
    assert_eq!(
        deltas(&run(&mut t, &cumulative_req(start, 1160 * S, 5))),
        vec![5]
    );
    assert_eq!(
        deltas(&run(&mut t, &cumulative_req(start, 1220 * S, 12))),
        vec![7]
    );
    // The same point again adds nothing.
    let again_request = cumulative_req(start, 1220 * S, 12);
    let again = run(&mut t, &again_request);
    assert!(again.increments.is_empty());
    assert_eq!(again.unchanged, 1);
    assert_eq!(again.rejected(), 0);
    // A point older than the last one: refused, the baseline kept.
    let late_request = cumulative_req(start, 1190 * S, 9);
    let late = run(&mut t, &late_request);
    assert_eq!(late.dropped[PointDrop::OutOfOrder.index()], 1);
    assert_eq!(
        deltas(&run(&mut t, &cumulative_req(start, 1280 * S, 13))),
        vec![1]
    );
    // A new start time is a reset: the new life's value is all new.
    let restart = 1300 * S;
    let r_request = cumulative_req(restart, 1340 * S, 4);
    let r = run(&mut t, &r_request);
    assert_eq!(deltas(&r), vec![4]);
    assert_eq!(r.increments[0].at_unix_secs, Some(1340));
    // A late point of the previous life: refused.
    let old_life_request = cumulative_req(start, 1350 * S, 20);
    let old_life = run(&mut t, &old_life_request);
    assert_eq!(old_life.dropped[PointDrop::OutOfOrder.index()], 1);
    // A decrease without a new start time: counted, and it becomes the baseline.
    let down_request = cumulative_req(restart, 1400 * S, 2);
    let down = run(&mut t, &down_request);
    assert!(down.increments.is_empty());
    assert_eq!(down.dropped[PointDrop::CumulativeDecrease.index()], 1);
    assert_eq!(
        deltas(&run(&mut t, &cumulative_req(restart, 1460 * S, 6))),
        vec![4]
    );
}

/// A cumulative point with no value that does not flag it ("no recorded value") is a
/// counted drop that leaves the stream as it was: taken for 0, it would be a decrease,
/// the baseline would drop to 0, and the next point would count its whole value again.
#[test]
fn a_point_without_a_value_leaves_its_stream_as_it_was() {
    let mut t = Streams::new(10, BOOT);
    let start = 1100 * S;
    assert_eq!(
        deltas(&run(&mut t, &cumulative_req(start, 1160 * S, 100))),
        vec![100]
    );
    let mut empty = cumulative_req(start, 1220 * S, 0);
    let Some(Data::Sum(sum)) = &mut empty.resource_metrics[0].scope_metrics[0].metrics[0].data
    else {
        unreachable!("a sum")
    };
    sum.data_points[0].value = None;
    let c = run(&mut t, &empty);
    assert!(c.increments.is_empty());
    assert_eq!(c.dropped[PointDrop::NoValue.index()], 1);
    assert_eq!(
        deltas(&run(&mut t, &cumulative_req(start, 1280 * S, 110))),
        vec![10],
        "the difference from the last value, not the whole value"
    );
}

#[test]
fn a_stream_older_than_the_table_only_sets_its_baseline() {
    let mut t = Streams::new(10, BOOT);
    // Started before the sidecar (which may have counted it in a previous life).
    let first_request = cumulative_req(500 * S, 1060 * S, 40);
    let first = run(&mut t, &first_request);
    assert!(first.increments.is_empty());
    assert_eq!(first.dropped[PointDrop::CumulativeBaseline.index()], 1);
    assert_eq!(
        deltas(&run(&mut t, &cumulative_req(500 * S, 1120 * S, 45))),
        vec![5]
    );
}

#[test]
fn non_monotonic_cumulative_goes_down_without_a_reset() {
    let mut t = Streams::new(10, BOOT);
    let m = |time, v| {
        request(vec![sum(
            "queue",
            AggregationTemporality::Cumulative,
            false,
            vec![point(1100 * S, time, Value::AsInt(v), vec![])],
        )])
    };
    assert_eq!(deltas(&run(&mut t, &m(1160 * S, 10))), vec![10]);
    assert_eq!(deltas(&run(&mut t, &m(1220 * S, 3))), vec![-7]);
}

#[test]
fn streams_differ_by_every_attribute_even_when_not_tagged() {
    let mut t = Streams::new(10, BOOT);
    let with_instance = |instance: &str, v| {
        let mut r = cumulative_req(1100 * S, 1160 * S, v);
        r.resource_metrics[0].resource.as_mut().unwrap().attributes[1] =
            kv("service.instance.id", instance);
        r
    };
    // Two instances of a service: two streams, though both land on the same tags.
    assert_eq!(deltas(&run(&mut t, &with_instance("a", 5))), vec![5]);
    assert_eq!(deltas(&run(&mut t, &with_instance("b", 3))), vec![3]);
    assert_eq!(t.len(), 2);
}

#[test]
fn an_evicted_stream_coming_back_is_a_counted_baseline() {
    let mut t = Streams::new(2, BOOT);
    let named = |name: &str, time, v| {
        request(vec![sum(
            name,
            AggregationTemporality::Cumulative,
            true,
            vec![point(1100 * S, time, Value::AsInt(v), vec![])],
        )])
    };
    assert_eq!(deltas(&run(&mut t, &named("a", 1160 * S, 5))), vec![5]);
    assert_eq!(deltas(&run(&mut t, &named("b", 1160 * S, 5))), vec![5]);
    // Three more streams: `a` is not among the last two seen, and goes.
    for name in ["c", "d", "e"] {
        assert_eq!(deltas(&run(&mut t, &named(name, 1160 * S, 5))), vec![5]);
    }
    assert!(t.evicted() >= 1);
    // `a` was evicted: its next point must not add its whole value again.
    let back_request = named("a", 1220 * S, 9);
    let back = run(&mut t, &back_request);
    assert!(back.increments.is_empty(), "{back:?}");
    assert_eq!(back.dropped[PointDrop::CumulativeBaseline.index()], 1);
}

/// An exporter whose clock runs 500 s ahead of the sidecar's: stream `x` starts at
/// 1500 s by its clock, at 1000 s by the sidecar's. Evicted at 1200 s, then seen again
/// once the sidecar's clock passed 1500 s: its start is after the eviction, yet it was
/// counted before, so its next point is a baseline, not its whole value again.
#[test]
fn a_stream_from_a_clock_ahead_evicted_is_not_counted_whole_again() {
    let mut t = Streams::new(2, BOOT);
    // (increments, baselines) of one request converted at `now`.
    let mut at = |req: &ExportMetricsServiceRequest, now| {
        let c = convert(req, &AttributePolicy::default(), &mut t, now);
        (deltas(&c), c.dropped[PointDrop::CumulativeBaseline.index()])
    };
    let x = |time, v| cumulative_req(1500 * S, time, v);
    // Its start is after the sidecar's now: a baseline (a previous run may have counted
    // it), then its increase counts.
    assert_eq!(at(&x(1560 * S, 100), 1060 * S), (vec![], 1));
    assert_eq!(at(&x(1620 * S, 105), 1120 * S), (vec![5], 0));
    for name in ["b", "c", "d", "e"] {
        let other = request(vec![sum(
            name,
            AggregationTemporality::Cumulative,
            true,
            vec![point(1100 * S, 1190 * S, Value::AsInt(1), vec![])],
        )]);
        assert_eq!(at(&other, 1200 * S), (vec![1], 0));
    }
    assert_eq!(
        at(&x(2120 * S, 110), 1620 * S),
        (vec![], 1),
        "a baseline, not 110 again"
    );
    assert_eq!(at(&x(2180 * S, 112), 1680 * S), (vec![2], 0));
    assert!(t.evicted() >= 1);
}

/// The table lost (a start without a file: its mark is that start), a stream whose
/// exporter's clock runs ahead has a start after the mark though a previous run may
/// have counted it: while its start is after the sidecar's now, its first point is a
/// baseline.
#[test]
fn a_start_after_now_is_a_baseline_after_the_table_is_lost() {
    let mut t = Streams::new(10, BOOT);
    let req = cumulative_req(1500 * S, 1620 * S, 105);
    let c = convert(&req, &AttributePolicy::default(), &mut t, 1120 * S);
    assert!(c.increments.is_empty(), "{c:?}");
    assert_eq!(c.dropped[PointDrop::CumulativeBaseline.index()], 1);
}

#[test]
fn no_recorded_value_points_are_skipped() {
    let mut p = point(0, 0, Value::AsInt(9), vec![]);
    p.flags = FLAG_NO_RECORDED_VALUE;
    let req = request(vec![sum("x", AggregationTemporality::Delta, true, vec![p])]);
    let c = run(&mut Streams::new(10, BOOT), &req);
    assert!(c.increments.is_empty());
    assert_eq!(c.rejected(), 0);
}

#[test]
fn tag_separators_in_attributes_are_replaced() {
    let req = request(vec![sum(
        "x",
        AggregationTemporality::Delta,
        true,
        vec![point(
            0,
            0,
            Value::AsInt(1),
            vec![kv("a", "1,b:2"), kv("k:ey", "v")],
        )],
    )]);
    let c = run(&mut Streams::new(10, BOOT), &req);
    assert_eq!(
        owned(&c.increments[0].tags),
        vec![
            ("service.name".to_string(), "shop".to_string()),
            ("a".to_string(), "1_b:2".to_string()),
            ("k_ey".to_string(), "v".to_string())
        ]
    );
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<i64>().prop_map(Value::AsInt),
            (-5i64..50).prop_map(Value::AsInt),
            prop_oneof![
                Just(f64::NAN),
                Just(f64::INFINITY),
                Just(-0.0),
                Just(1.5),
                Just(1e300),
                Just(-9.3e18),
                (-50i32..50).prop_map(f64::from),
            ]
            .prop_map(Value::AsDouble),
        ]
    }

    fn points() -> impl Strategy<Value = Vec<(u64, u64, Value, u32, u8)>> {
        // (start, time, value, flags, attribute) from small sets: duplicates, resets and
        // out-of-order points happen often.
        prop::collection::vec((0u64..3, 0u64..6, value(), 0u32..2, 0u8..3), 0..30)
    }

    proptest! {
        /// Never a panic, and every point is accounted for exactly once: an increment,
        /// a counted drop, unchanged, or skipped for having no value.
        #[test]
        fn every_point_is_accounted_for(
            batches in prop::collection::vec((0i32..4, any::<bool>(), points()), 1..6),
        ) {
            let mut streams = Streams::new(4, BOOT);
            for (temporality, monotonic, pts) in batches {
                let no_value = pts.iter().filter(|p| p.3 == 1).count() as u64;
                let n = pts.len() as u64;
                let data_points = pts
                    .into_iter()
                    .map(|(start, time, v, flags, attr)| NumberDataPoint {
                        attributes: vec![kv("a", &attr.to_string())],
                        start_time_unix_nano: (start + 1) * 100 * S + BOOT,
                        time_unix_nano: (time + 1) * 100 * S + BOOT,
                        value: Some(v),
                        flags,
                        ..Default::default()
                    })
                    .collect();
                let metric = Metric {
                    name: "p".into(),
                    data: Some(Data::Sum(Sum {
                        data_points,
                        aggregation_temporality: temporality,
                        is_monotonic: monotonic,
                    })),
                    ..Default::default()
                };
                let c_request = request(vec![metric]);
                let c = run(&mut streams, &c_request);
                prop_assert_eq!(
                    c.increments.len() as u64 + c.rejected() + c.unchanged + no_value,
                    n
                );
                prop_assert!(c.increments.iter().all(|i| i.delta != 0));
                // A monotonic sum never takes anything away, whatever the points say.
                if monotonic {
                    prop_assert!(c.increments.iter().all(|i| i.delta > 0));
                }
                prop_assert!(streams.len() <= 4);
            }
        }
    }
}

/// `has_cumulative` is what lets the receiver skip the shared stream table's lock: a
/// request it says no to leaves the table untouched however it converts, and a single
/// cumulative sum among other metrics makes it say yes.
#[test]
fn only_a_cumulative_sum_needs_the_stream_table() {
    let delta = sum(
        "d",
        AggregationTemporality::Delta,
        true,
        vec![point(BOOT, BOOT + S, Value::AsInt(3), vec![kv("a", "1")])],
    );
    let cumulative_histogram = Metric {
        name: "h".into(),
        data: Some(Data::Histogram(Histogram {
            data_points: vec![HistogramDataPoint::default()],
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        })),
        ..Default::default()
    };
    let unspecified = sum(
        "u",
        AggregationTemporality::Unspecified,
        true,
        vec![point(0, 0, Value::AsInt(1), vec![])],
    );
    let without = request(vec![delta.clone(), cumulative_histogram, unspecified]);
    assert!(!has_cumulative(&without));
    let mut streams = Streams::new(10, BOOT);
    let c = run(&mut streams, &without);
    assert_eq!(deltas(&c), vec![3]);
    assert_eq!((streams.len(), streams.generation()), (0, 0));

    let with = request(vec![
        delta,
        sum(
            "c",
            AggregationTemporality::Cumulative,
            true,
            vec![point(BOOT, BOOT + S, Value::AsInt(5), vec![])],
        ),
    ]);
    assert!(has_cumulative(&with));
    run(&mut streams, &with);
    assert_eq!(streams.len(), 1);
}

/// What `convert_each` hands over per point is what `convert` collects: the same tags in
/// the same order (kept resource attributes first unless a point attribute has the key;
/// plain strings borrowed, other values rendered and separators replaced, wherever they
/// stand among the attributes, past the 64th too), the same deltas, times and counts.
#[test]
fn convert_each_hands_over_what_convert_collects() {
    let int = |k: &str, i: i64| KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(i)),
        }),
        ..Default::default()
    };
    let mixed = vec![
        kv("region", "eu"),
        int("code", 404),
        kv("a", "1,b:2"),
        kv("k:ey", "v"),
        kv("route", "/x"),
    ];
    let mut many: Vec<KeyValue> = (0..70).map(|i| kv(&format!("t{i}"), "v")).collect();
    many[66] = int("t66", 7);
    many[68] = kv("t68", "x,y");
    let req = request(vec![sum(
        "orders",
        AggregationTemporality::Delta,
        true,
        vec![
            point(0, 1500 * S, Value::AsInt(3), mixed),
            point(
                0,
                1500 * S,
                Value::AsInt(2),
                vec![kv("service.name", "mine")],
            ),
            point(0, 0, Value::AsDouble(0.5), vec![]),
            point(0, 1560 * S, Value::AsInt(4), many),
        ],
    )]);
    let policy = AttributePolicy::default();
    let collected = convert(&req, &policy, &mut Streams::new(10, BOOT), 0);
    let mut handed = Vec::new();
    let counted = convert_each(&req, &policy, &mut Streams::new(10, BOOT), 0, &mut |p| {
        let tags: Vec<(String, String)> = p
            .tags
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        handed.push((p.name.to_string(), tags, p.delta, p.at_unix_secs));
        true
    });
    let expected: Vec<_> = collected
        .increments
        .iter()
        .map(|i| (i.name.to_string(), owned(&i.tags), i.delta, i.at_unix_secs))
        .collect();
    assert_eq!(handed, expected);
    assert!(counted.increments.is_empty());
    assert_eq!(counted.dropped, collected.dropped);
    assert_eq!(counted.dropped[PointDrop::NonInteger.index()], 1);
    let pairs = |tags: &[(&str, &str)]| {
        tags.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        handed[0].1,
        pairs(&[
            ("service.name", "shop"),
            ("region", "eu"),
            ("code", "404"),
            ("a", "1_b:2"),
            ("k_ey", "v"),
            ("route", "/x"),
        ])
    );
    assert_eq!(handed[1].1, pairs(&[("service.name", "mine")]));
    let last = &handed[2].1;
    assert_eq!(last.len(), 71);
    assert_eq!(last[0], ("service.name".to_string(), "shop".to_string()));
    assert_eq!(last[1], ("t0".to_string(), "v".to_string()));
    assert_eq!(last[65], ("t64".to_string(), "v".to_string()));
    assert_eq!(last[67], ("t66".to_string(), "7".to_string()));
    assert_eq!(last[69], ("t68".to_string(), "x_y".to_string()));
    assert_eq!(last[70], ("t69".to_string(), "v".to_string()));
}

/// The word-at-a-time separator scan finds what a byte loop finds: every position,
/// every length around the word size, bytes next to the separators' values.
#[test]
fn separator_scan_matches_a_byte_loop() {
    for len in 0..40 {
        for at in 0..=len {
            for needle in [b',', b':', b'+', b';', b'-', 0x80 | b',', 0xff, 0] {
                let mut text = vec![b'a'; len];
                if at < len {
                    text[at] = needle;
                }
                for (x, y) in [(b',', b':'), (b',', b',')] {
                    let expected = text.iter().any(|&b| b == x || b == y);
                    assert_eq!(has_byte(&text, x, y), expected, "{text:?} {x} {y}");
                }
            }
        }
    }
}
