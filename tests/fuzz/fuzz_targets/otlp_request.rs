//! An OTLP metrics request body (protobuf or JSON) through the receiver's decode and
//! conversion to increments, with the cumulative stream table and its state-directory
//! file, which the receivers' tests only reach with well-formed requests.
//!
//! Beyond "no panic" (decoding and converting any bytes), three oracles:
//! - every sum point is accounted for exactly once: an increment, a drop by reason, an
//!   unchanged cumulative point, or a point without a recorded value; every point of
//!   another kind is counted as ignored;
//! - the table never holds more than its capacity;
//! - a restart changes nothing: the table saved to its file bytes and read back converts
//!   the same request again exactly as the table that never left memory (when neither
//!   evicts in that pass).
//!
//! The first byte chooses the encoding (protobuf or JSON) and the table's capacity
//! (small, so that evictions happen, or large).

#![no_main]

use countersink::ingest::otlp::{
    AttributePolicy, Streams, convert, decode_json, decode_protobuf, persist,
};
use libfuzzer_sys::fuzz_target;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;

/// The receive time: 2026-11-30T12:34:56Z.
const NOW: u64 = 1_796_042_096_000_000_000;

/// Sum points with a value flag clear, sum points without a value, and points of other
/// kinds (an empty metric counts one).
fn census(request: &ExportMetricsServiceRequest) -> (u64, u64, u64) {
    let (mut valued, mut no_value, mut other) = (0, 0, 0);
    for rm in &request.resource_metrics {
        for sm in &rm.scope_metrics {
            for metric in &sm.metrics {
                match &metric.data {
                    Some(Data::Sum(sum)) => {
                        for p in &sum.data_points {
                            if p.flags & 1 != 0 {
                                no_value += 1;
                            } else {
                                valued += 1;
                            }
                        }
                    }
                    Some(Data::Gauge(g)) => other += g.data_points.len() as u64,
                    Some(Data::Histogram(h)) => other += h.data_points.len() as u64,
                    Some(Data::ExponentialHistogram(h)) => other += h.data_points.len() as u64,
                    Some(Data::Summary(s)) => other += s.data_points.len() as u64,
                    None => other += 1,
                }
            }
        }
    }
    (valued, no_value, other)
}

fuzz_target!(|data: &[u8]| {
    let (selector, body) = match data {
        [s, rest @ ..] => (*s, rest),
        [] => return,
    };
    let decoded = if selector & 1 == 0 {
        decode_protobuf(body)
    } else {
        decode_json(body)
    };
    let Ok(request) = decoded else { return };
    let capacity = if selector & 2 == 0 { 4 } else { 4096 };
    let policy = AttributePolicy {
        resource: vec!["service.name".into(), "host.name".into()],
        scope: vec!["library".into()],
    };
    let mut table = Streams::new(capacity, NOW - 60_000_000_000);
    let first = convert(&request, &policy, &mut table, NOW);
    let (valued, _no_value, other) = census(&request);
    assert_eq!(
        first.increments.len() as u64 + first.rejected() + first.unchanged,
        valued,
        "every valued sum point accounted for once"
    );
    assert_eq!(
        first.ignored.iter().sum::<u64>(),
        other,
        "other kinds ignored"
    );
    assert!(first.increments.iter().all(|i| i.delta != 0));
    assert!(table.len() <= capacity.max(2));

    let bytes = persist::encode(&table);
    let (complete_since, entries) = persist::decode(&bytes).expect("a saved table reads back");
    let mut restored = Streams::restore(capacity, complete_since, entries, NOW);
    let mut kept = table.clone();
    let (evicted, restored_evicted) = (kept.evicted(), restored.evicted());
    let again = convert(&request, &policy, &mut kept, NOW + 1);
    let after_restart = convert(&request, &policy, &mut restored, NOW + 1);
    if kept.evicted() == evicted && restored.evicted() == restored_evicted {
        assert_eq!(again, after_restart, "a restart changed the conversion");
    }
});
