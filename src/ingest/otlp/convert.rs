//! One OTLP metrics request to increments: plain synchronous code, time passed in.
//!
//! [`convert_each`] is what the receivers call: it hands each increment over as it is
//! made, its name and tag texts borrowed from the decoded request (a tag is rendered only
//! when it must be: a scalar value, a `,` or `:` to replace) in a tag list reused from
//! point to point, and a cumulative stream's identity is built from its resource and
//! scope once per scope, so that a point costs no allocation. [`convert`] collects the
//! same increments (tests, the fuzz target), each with tag texts of its own.

use std::borrow::Cow;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, NumberDataPoint, metric::Data, number_data_point,
};

use super::streams::{Last, StreamId, Streams, stream_id};

/// Data point flag: the point carries no value (OTLP `FLAG_NO_RECORDED_VALUE`).
const FLAG_NO_RECORDED_VALUE: u32 = 1;

/// Which resource and scope attributes become tags. Data point attributes always do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttributePolicy {
    /// Resource attribute keys kept as tags (default `service.name`).
    pub resource: Vec<String>,
    /// Instrumentation scope attribute keys kept as tags (default none).
    pub scope: Vec<String>,
}

impl Default for AttributePolicy {
    fn default() -> Self {
        AttributePolicy {
            resource: vec!["service.name".into()],
            scope: Vec::new(),
        }
    }
}

/// Why a data point was refused before it reached the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PointDrop {
    /// A double value with a fraction.
    NonInteger,
    /// NaN or an infinity.
    NonFinite,
    /// A value outside the 64-bit signed range, or a difference that overflows it.
    OutOfRange,
    /// A negative value in a monotonic sum (delta or cumulative).
    NegativeMonotonic,
    /// A sum whose temporality is unspecified.
    UnknownTemporality,
    /// A cumulative monotonic point below the stream's last one with the same start time
    /// (the new value becomes the baseline).
    CumulativeDecrease,
    /// A cumulative point older than the stream's last one.
    OutOfOrder,
    /// The first point the table sees of a stream that may have been counted before (the
    /// sidecar restarted, the stream was evicted, or its start time is ahead of the
    /// sidecar's clock): it sets the baseline, and what it carries since the stream's
    /// previous point is not counted.
    CumulativeBaseline,
    /// A point with no value that does not say so (the "no recorded value" flag): taken
    /// for 0, a cumulative stream's next point would count its whole value again.
    NoValue,
}

impl PointDrop {
    /// Every reason, in label order.
    pub const ALL: [PointDrop; 9] = [
        PointDrop::NonInteger,
        PointDrop::NonFinite,
        PointDrop::OutOfRange,
        PointDrop::NegativeMonotonic,
        PointDrop::UnknownTemporality,
        PointDrop::CumulativeDecrease,
        PointDrop::OutOfOrder,
        PointDrop::CumulativeBaseline,
        PointDrop::NoValue,
    ];

    /// The metric label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            PointDrop::NonInteger => "non_integer",
            PointDrop::NonFinite => "non_finite",
            PointDrop::OutOfRange => "out_of_range",
            PointDrop::NegativeMonotonic => "negative_monotonic",
            PointDrop::UnknownTemporality => "unknown_temporality",
            PointDrop::CumulativeDecrease => "cumulative_decrease",
            PointDrop::OutOfOrder => "out_of_order",
            PointDrop::CumulativeBaseline => "cumulative_baseline",
            PointDrop::NoValue => "no_value",
        }
    }

    /// Position in [`PointDrop::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Metric kinds that are not counters: their points are ignored, counted by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IgnoredKind {
    /// Gauge.
    Gauge,
    /// Histogram.
    Histogram,
    /// Exponential histogram.
    ExponentialHistogram,
    /// Summary.
    Summary,
    /// A metric without data.
    Empty,
}

impl IgnoredKind {
    /// Every kind, in label order.
    pub const ALL: [IgnoredKind; 5] = [
        IgnoredKind::Gauge,
        IgnoredKind::Histogram,
        IgnoredKind::ExponentialHistogram,
        IgnoredKind::Summary,
        IgnoredKind::Empty,
    ];

    /// The metric label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            IgnoredKind::Gauge => "gauge",
            IgnoredKind::Histogram => "histogram",
            IgnoredKind::ExponentialHistogram => "exponential_histogram",
            IgnoredKind::Summary => "summary",
            IgnoredKind::Empty => "empty",
        }
    }

    /// Position in [`IgnoredKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// One increment for the engine, borrowing its texts from the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Increment<'r> {
    /// The metric name (mapped onto a family like a StatsD name).
    pub name: &'r str,
    /// Tags: kept resource and scope attributes, then the point's attributes.
    pub tags: Vec<Tag<'r>>,
    /// The amount.
    pub delta: i64,
    /// The point's time, Unix seconds (`None` when the point has none: now).
    pub at_unix_secs: Option<i64>,
}

/// A tag, key and value: the request's own text where it could be kept as it was.
pub type Tag<'r> = (Cow<'r, str>, Cow<'r, str>);

/// What one request turned into.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Conversion<'r> {
    /// Increments to record, in request order.
    pub increments: Vec<Increment<'r>>,
    /// Points refused, by [`PointDrop::index`].
    pub dropped: [u64; PointDrop::ALL.len()],
    /// Points ignored, by [`IgnoredKind::index`] (a metric without data counts one).
    pub ignored: [u64; IgnoredKind::ALL.len()],
    /// Sum points that added nothing (a cumulative point equal to the last one).
    pub unchanged: u64,
}

impl Conversion<'_> {
    /// Points refused in all.
    pub fn rejected(&self) -> u64 {
        self.dropped.iter().sum()
    }

    /// A message for `partial_success`: the reasons and their counts.
    pub fn message(&self) -> String {
        let mut parts = Vec::new();
        for reason in PointDrop::ALL {
            let n = self.dropped[reason.index()];
            if n > 0 {
                parts.push(format!("{n} {}", reason.as_str()));
            }
        }
        parts.join(", ")
    }
}

/// Converts one request. Cumulative points go through `streams`; `now_unix_nanos` is the
/// receive time (for the stream table's eviction mark).
pub fn convert<'r>(
    request: &'r ExportMetricsServiceRequest,
    policy: &AttributePolicy,
    streams: &mut Streams,
    now_unix_nanos: u64,
) -> Conversion<'r> {
    let mut increments = Vec::new();
    let mut out = convert_each(
        request,
        policy,
        streams,
        now_unix_nanos,
        &mut |point: &Point<'r, '_>| {
            increments.push(Increment {
                name: point.name,
                tags: point
                    .tags
                    .iter()
                    .map(|&(k, v)| (Cow::Owned(k.to_owned()), Cow::Owned(v.to_owned())))
                    .collect(),
                delta: point.delta,
                at_unix_secs: point.at_unix_secs,
            });
            true
        },
    );
    out.increments = increments;
    out
}

/// One increment as [`convert_each`] hands it over: its tags in a buffer reused for the
/// next point.
#[derive(Debug)]
pub struct Point<'r, 's> {
    /// The metric name.
    pub name: &'r str,
    /// Tags: kept resource and scope attributes, then the point's attributes (what the
    /// engine takes: the request's own text, or text rendered for this point).
    pub tags: &'s [(&'s str, &'s str)],
    /// The amount.
    pub delta: i64,
    /// The point's time, Unix seconds (`None` when the point has none: now).
    pub at_unix_secs: Option<i64>,
}

/// [`convert`] without collecting: each increment goes to `each` as it is made, in
/// request order, and the [`Conversion`] returned counts the rest (its `increments` are
/// empty). What a receiver calls, so that a point costs no allocation of its own: its tag
/// list is a buffer reused from point to point, of texts borrowed from the request but
/// for attributes that must be rendered (not a string) or have a separator replaced.
///
/// `each` says whether it took the increment. A cumulative stream's last point moves to
/// a point only once its increase is taken: the increase of a point the aggregator
/// refused (a limit, the time window) is carried by the stream's next point, as a
/// cumulative stream's is meant to be, rather than lost.
pub fn convert_each<'r>(
    request: &'r ExportMetricsServiceRequest,
    policy: &AttributePolicy,
    streams: &mut Streams,
    now_unix_nanos: u64,
    each: &mut dyn FnMut(&Point<'r, '_>) -> bool,
) -> Conversion<'r> {
    let mut out = Conversion::default();
    // A cumulative stream's identity: its scope's part once per scope, then per point
    // the metric and the point's attributes (see `stream_key`).
    let mut scope_key = Vec::new();
    let mut key = Vec::new();
    let mut sorted = Vec::new();
    // Per point: the texts of its attributes that are not their own string (see
    // `attribute_text`), then its tag list (emptied and kept between points: `reuse`).
    let mut rendered: Vec<String> = Vec::new();
    let mut tags_buffer: Vec<(&str, &str)> = Vec::new();
    for rm in &request.resource_metrics {
        let resource_attrs: &[KeyValue] = rm.resource.as_ref().map_or(&[], |r| &r.attributes);
        let resource_tags = kept(resource_attrs, &policy.resource);
        for sm in &rm.scope_metrics {
            let (scope_name, scope_version, scope_attrs): (&str, &str, &[KeyValue]) =
                match &sm.scope {
                    Some(s) => (&s.name, &s.version, &s.attributes),
                    None => ("", "", &[]),
                };
            let scope_tags = kept(scope_attrs, &policy.scope);
            scope_key.clear();
            stream_key_scope(
                &mut scope_key,
                resource_attrs,
                (scope_name, scope_version, scope_attrs),
                &mut sorted,
            );
            for metric in &sm.metrics {
                let sum = match &metric.data {
                    Some(Data::Sum(sum)) => sum,
                    other => {
                        let (kind, n) = match other {
                            Some(Data::Gauge(g)) => (IgnoredKind::Gauge, g.data_points.len()),
                            Some(Data::Histogram(h)) => {
                                (IgnoredKind::Histogram, h.data_points.len())
                            }
                            Some(Data::ExponentialHistogram(h)) => {
                                (IgnoredKind::ExponentialHistogram, h.data_points.len())
                            }
                            Some(Data::Summary(s)) => (IgnoredKind::Summary, s.data_points.len()),
                            Some(Data::Sum(_)) | None => (IgnoredKind::Empty, 1),
                        };
                        out.ignored[kind.index()] += n as u64;
                        continue;
                    }
                };
                let temporality = AggregationTemporality::try_from(sum.aggregation_temporality)
                    .unwrap_or(AggregationTemporality::Unspecified);
                for point in &sum.data_points {
                    if point.flags & FLAG_NO_RECORDED_VALUE != 0 {
                        continue;
                    }
                    let value = match integral(point) {
                        Ok(v) => v,
                        Err(reason) => {
                            out.dropped[reason.index()] += 1;
                            continue;
                        }
                    };
                    // A cumulative stream's last point, once this one is taken.
                    let mut taken_last = None;
                    let delta = match temporality {
                        AggregationTemporality::Unspecified => Err(PointDrop::UnknownTemporality),
                        AggregationTemporality::Delta => {
                            if sum.is_monotonic && value < 0 {
                                Err(PointDrop::NegativeMonotonic)
                            } else {
                                Ok(value)
                            }
                        }
                        AggregationTemporality::Cumulative if sum.is_monotonic && value < 0 => {
                            Err(PointDrop::NegativeMonotonic)
                        }
                        AggregationTemporality::Cumulative => {
                            key.clear();
                            key.extend_from_slice(&scope_key);
                            stream_key_point(
                                &mut key,
                                &metric.name,
                                &point.attributes,
                                &mut sorted,
                            );
                            let id = stream_id(&key);
                            cumulative(streams, id, point, value, sum.is_monotonic, now_unix_nanos)
                                .map(|(delta, last)| {
                                    taken_last = last.map(|last| (id, last));
                                    delta
                                })
                        }
                    };
                    match delta {
                        Err(reason) => out.dropped[reason.index()] += 1,
                        Ok(0) => out.unchanged += 1,
                        Ok(delta) => {
                            let attributes = &point.attributes;
                            // Bit i: attribute i is its own string (the first 64; any
                            // further one is rendered).
                            let mut own = 0u64;
                            rendered.clear();
                            for (i, a) in attributes.iter().enumerate() {
                                match attribute_text(a) {
                                    Some(_) if i < 64 => own |= 1u64 << i,
                                    _ => {
                                        let (k, v) = tag(&a.key, render(a.value.as_ref()));
                                        rendered.push(k.into_owned());
                                        rendered.push(v.into_owned());
                                    }
                                }
                            }
                            let mut tags = reuse(std::mem::take(&mut tags_buffer));
                            for (k, v) in resource_tags.iter().chain(&scope_tags) {
                                if !attributes.iter().any(|a| a.key == *k) {
                                    tags.push((k, v));
                                }
                            }
                            let mut texts = rendered.iter().map(String::as_str);
                            for (i, a) in attributes.iter().enumerate() {
                                let own_text = if i < 64 && own & (1u64 << i) != 0 {
                                    string_value(a)
                                } else {
                                    None
                                };
                                tags.push(match own_text {
                                    Some(value) => (&a.key, value),
                                    None => (
                                        texts.next().unwrap_or_default(),
                                        texts.next().unwrap_or_default(),
                                    ),
                                });
                            }
                            let taken = each(&Point {
                                name: &metric.name,
                                tags: &tags,
                                delta,
                                at_unix_secs: unix_secs(point.time_unix_nano),
                            });
                            if taken && let Some((id, last)) = taken_last {
                                streams.set(id, last, now_unix_nanos);
                            }
                            tags_buffer = reuse(tags);
                        }
                    }
                }
            }
        }
    }
    out
}

/// An emptied vector of tag pairs, its allocation kept for pairs that borrow from
/// something else (the next point's tags): the collect reuses the allocation in place,
/// both element types having one layout.
fn reuse<'b>(mut pairs: Vec<(&str, &str)>) -> Vec<(&'b str, &'b str)> {
    pairs.clear();
    pairs.into_iter().map(|_| ("", "")).collect()
}

/// Whether the request holds a cumulative sum: only then does [`convert`] read or change
/// the stream table (so a caller holding it shared locks it only then).
pub fn has_cumulative(request: &ExportMetricsServiceRequest) -> bool {
    let cumulative = AggregationTemporality::Cumulative as i32;
    request
        .resource_metrics
        .iter()
        .flat_map(|rm| &rm.scope_metrics)
        .flat_map(|sm| &sm.metrics)
        .any(|m| matches!(&m.data, Some(Data::Sum(sum)) if sum.aggregation_temporality == cumulative))
}

/// The difference a cumulative point adds, and the stream's last point to set once that
/// difference is taken (`None`: set already, the point adds nothing to take). A point
/// that adds nothing, or is dropped as a new baseline or a decrease, moves the stream's
/// last point here.
fn cumulative(
    streams: &mut Streams,
    id: StreamId,
    point: &NumberDataPoint,
    value: i64,
    monotonic: bool,
    now_unix_nanos: u64,
) -> Result<(i64, Option<Last>), PointDrop> {
    let this = Last {
        start: point.start_time_unix_nano,
        time: point.time_unix_nano,
        value,
    };
    let taken = |streams: &mut Streams, delta: i64| {
        if delta == 0 {
            streams.set(id, this, now_unix_nanos);
            Ok((0, None))
        } else {
            Ok((delta, Some(this)))
        }
    };
    let Some(last) = streams.get(id) else {
        if streams.is_complete_for(point.start_time_unix_nano, now_unix_nanos) {
            return taken(streams, value);
        }
        streams.set(id, this, now_unix_nanos);
        return if value == 0 {
            Ok((0, None))
        } else {
            Err(PointDrop::CumulativeBaseline)
        };
    };
    if this.start != last.start {
        if this.start < last.start {
            // A point of the stream's previous life, arriving late.
            return Err(PointDrop::OutOfOrder);
        }
        // A reset: the new life's whole value is new.
        return taken(streams, value);
    }
    if this.time < last.time {
        return Err(PointDrop::OutOfOrder);
    }
    if monotonic && value < last.value {
        streams.set(id, this, now_unix_nanos);
        return Err(PointDrop::CumulativeDecrease);
    }
    let delta = value.checked_sub(last.value).ok_or(PointDrop::OutOfRange)?;
    taken(streams, delta)
}

/// The point's value as an integer, or why not.
fn integral(point: &NumberDataPoint) -> Result<i64, PointDrop> {
    match point.value {
        Some(number_data_point::Value::AsInt(v)) => Ok(v),
        Some(number_data_point::Value::AsDouble(v)) => {
            if !v.is_finite() {
                Err(PointDrop::NonFinite)
            } else if v.fract() != 0.0 {
                Err(PointDrop::NonInteger)
            } else if !(-9.223_372_036_854_775e18..9.223_372_036_854_775e18).contains(&v) {
                Err(PointDrop::OutOfRange)
            } else {
                #[allow(clippy::cast_possible_truncation)]
                Ok(v as i64)
            }
        }
        None => Err(PointDrop::NoValue),
    }
}

/// Unix seconds of a point time; `None` for 0 (no time).
fn unix_secs(nanos: u64) -> Option<i64> {
    (nanos != 0).then(|| i64::try_from(nanos / 1_000_000_000).unwrap_or(i64::MAX))
}

/// The attributes among `attrs` whose key is in `keep`, rendered.
fn kept<'r>(attrs: &'r [KeyValue], keep: &[String]) -> Vec<Tag<'r>> {
    attrs
        .iter()
        .filter(|a| keep.iter().any(|k| k == &a.key))
        .map(|a| tag(&a.key, render(a.value.as_ref())))
        .collect()
}

/// An attribute's value when it is a string that can be its tag's text as it is, under
/// a key that can be too: the usual attribute, whose tag borrows the request's text.
/// `None` for any other (rendered and rewritten by [`tag`]).
#[inline(always)]
fn attribute_text(a: &KeyValue) -> Option<&str> {
    string_value(a).filter(|value| {
        !has_byte(a.key.as_bytes(), b',', b':') && !has_byte(value.as_bytes(), b',', b',')
    })
}

/// Whether `text` holds the byte `x` or `y`: eight bytes a step (a zero byte of the word
/// XORed with `x` repeated is an `x`), the tail one by one. Every point's tag texts are
/// scanned so; a loop of one byte a step was half the conversion's own time.
#[inline(always)]
fn has_byte(text: &[u8], x: u8, y: u8) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    let (xs, ys) = (ONES * u64::from(x), ONES * u64::from(y));
    let zero = |w: u64| w.wrapping_sub(ONES) & !w & HIGHS != 0;
    let mut words = text.chunks_exact(8);
    for word in &mut words {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(word);
        let w = u64::from_ne_bytes(bytes);
        if zero(w ^ xs) || zero(w ^ ys) {
            return true;
        }
    }
    words.remainder().iter().any(|&b| b == x || b == y)
}

/// An attribute's value when it is a string.
#[inline(always)]
fn string_value(a: &KeyValue) -> Option<&str> {
    match &a.value {
        Some(AnyValue {
            value: Some(any_value::Value::StringValue(value)),
        }) => Some(value),
        _ => None,
    }
}

/// One tag from an attribute, with the bytes that separate tags in the canonical tag
/// string replaced by `_`: `,` anywhere, `:` in the key. Otherwise `{a: "1,b:2"}` and
/// `{a: "1", b: "2"}` would be one series under two spellings. (The stream identity keeps
/// the attribute as it was.) Text that needs no replacement is kept borrowed.
fn tag<'r>(key: &'r str, value: Cow<'r, str>) -> Tag<'r> {
    let key = if has_byte(key.as_bytes(), b',', b':') {
        Cow::Owned(key.replace([',', ':'], "_"))
    } else {
        Cow::Borrowed(key)
    };
    let value = if value.bytes().any(|b| b == b',') {
        Cow::Owned(value.replace(',', "_"))
    } else {
        value
    };
    (key, value)
}

/// An attribute value as tag text: strings as they are (borrowed), scalars in decimal,
/// bytes in hex, arrays and maps as JSON.
fn render(value: Option<&AnyValue>) -> Cow<'_, str> {
    match value.and_then(|v| v.value.as_ref()) {
        None => Cow::Borrowed(""),
        Some(any_value::Value::StringValue(s)) => Cow::Borrowed(s),
        Some(any_value::Value::BoolValue(b)) => Cow::Owned(b.to_string()),
        Some(any_value::Value::IntValue(i)) => Cow::Owned(i.to_string()),
        Some(any_value::Value::DoubleValue(d)) => Cow::Owned(d.to_string()),
        Some(any_value::Value::BytesValue(b)) => {
            Cow::Owned(b.iter().map(|x| format!("{x:02x}")).collect())
        }
        Some(other) => Cow::Owned(serde_json::to_string(other).unwrap_or_default()),
    }
}

/// The stream identity is, each part length-prefixed: the resource's attributes, the
/// scope's name, version and attributes ([`stream_key_scope`], once per scope), then the
/// metric's name and the point's attributes ([`stream_key_point`]); attributes sorted by
/// key, each with its value's kind and text. `sorted` is scratch space.
fn stream_key_scope<'r>(
    out: &mut Vec<u8>,
    resource: &'r [KeyValue],
    scope: (&str, &str, &'r [KeyValue]),
    sorted: &mut Vec<&'r KeyValue>,
) {
    key_attrs(out, resource, sorted);
    key_part(out, scope.0.as_bytes());
    key_part(out, scope.1.as_bytes());
    key_attrs(out, scope.2, sorted);
}

/// The point's part of the stream identity (see [`stream_key_scope`]).
fn stream_key_point<'r>(
    out: &mut Vec<u8>,
    metric: &str,
    point: &'r [KeyValue],
    sorted: &mut Vec<&'r KeyValue>,
) {
    key_part(out, metric.as_bytes());
    key_attrs(out, point, sorted);
}

fn key_part(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn key_attrs<'r>(out: &mut Vec<u8>, attrs: &'r [KeyValue], sorted: &mut Vec<&'r KeyValue>) {
    sorted.clear();
    sorted.extend(attrs);
    sorted.sort_by(|a, b| a.key.cmp(&b.key));
    key_part(out, &(sorted.len() as u64).to_le_bytes());
    for a in sorted.iter() {
        key_part(out, a.key.as_bytes());
        let value = a.value.as_ref();
        // The kind too: the string "1" and the integer 1 are two streams.
        let kind = match value.and_then(|v| v.value.as_ref()) {
            None => 0u8,
            Some(any_value::Value::StringValue(_)) => 1,
            Some(any_value::Value::BoolValue(_)) => 2,
            Some(any_value::Value::IntValue(_)) => 3,
            Some(any_value::Value::DoubleValue(_)) => 4,
            Some(any_value::Value::ArrayValue(_)) => 5,
            Some(any_value::Value::KvlistValue(_)) => 6,
            Some(any_value::Value::BytesValue(_)) => 7,
            Some(any_value::Value::StringValueStrindex(_)) => 8,
        };
        key_part(out, &[kind]);
        key_part(out, render(value).as_bytes());
    }
}

#[cfg(test)]
mod tests;
