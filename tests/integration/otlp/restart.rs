//! Cumulative streams across sidecar restarts on the same state directory: the stream
//! table saved at each flush is read back, so the first point after a restart adds
//! exactly what the store has not received; a corrupt file is counted and costs a
//! baseline, never a double count.

use std::collections::BTreeMap;

use countersink::vocabulary::Transport;
use opentelemetry_proto::tonic::metrics::v1::AggregationTemporality;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value;
use prost::Message;

use super::{PROTOBUF, now_nanos, otlp_config, point, post, request, store_totals, sum};
use crate::common::{metrics_when, start_sidecar, start_store};

/// One cumulative point of the stream tagged `via`, over OTLP/HTTP protobuf; the answer's
/// status must be 200.
pub(super) fn send(addr: std::net::SocketAddr, via: &str, start: u64, time: u64, value: i64) {
    let body = request(vec![sum(
        AggregationTemporality::Cumulative,
        vec![point(start, time, Value::AsInt(value), via)],
    )])
    .encode_to_vec();
    let (status, _, body) = post(addr, &[PROTOBUF], &body);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
}

/// Stream `a`: 5, 12, restart, 20 (+8), 20 again (+0), then a new start time: 2 (+2).
/// Stream `b`: first seen after the restart, started after the first sidecar did and
/// never seen by it: its whole value (3) is new. Then the file is damaged: the third
/// sidecar counts it, sets it aside, and `a`'s next point only sets a baseline (counted),
/// so the store still holds exactly 22 for `a`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cumulative_streams_stay_exact_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = otlp_config(dir.path());
    let store = start_store(&mut config).await;
    let s = 1_000_000_000u64;

    let first = start_sidecar(&config).await;
    let start = now_nanos();
    let http = first.bound().inet(Transport::OtlpHttp).unwrap();
    send(http, "a", start, start + s, 5);
    send(http, "a", start, start + 2 * s, 12);
    let report = first.shutdown().await.unwrap();
    assert_eq!(report.spilled + report.unknown + report.rejected, 0);
    let file = dir.path().join("otlp_streams.bin");
    assert!(file.exists(), "the final flush saved the stream table");

    let second = start_sidecar(&config).await;
    let http = second.bound().inet(Transport::OtlpHttp).unwrap();
    send(http, "a", start, start + 3 * s, 20);
    send(http, "a", start, start + 3 * s, 20);
    send(http, "b", start + 1, start + 3 * s, 3);
    send(http, "a", start + 1, start + 4 * s, 2);
    let metrics = second.bound().metrics.unwrap();
    metrics_when(metrics, |text| {
        let has = |series: &str| text.lines().any(|l| l == series);
        has("countersink_otlp_streams_restored 1")
            && has("countersink_otlp_streams 2")
            && has("countersink_otlp_points_dropped_total{reason=\"cumulative_baseline\"} 0")
    })
    .await;
    second.shutdown().await.unwrap();

    let expected = BTreeMap::from([
        (
            (
                "otlp.orders".to_string(),
                "service.name:shop,via:a".to_string(),
            ),
            5 + 7 + 8 + 2,
        ),
        (
            (
                "otlp.orders".to_string(),
                "service.name:shop,via:b".to_string(),
            ),
            3,
        ),
    ]);
    for totals in store_totals(&store).await {
        assert_eq!(totals, expected);
    }

    // A damaged file: counted, set aside; `a` (started before this start) is a baseline.
    let mut bytes = std::fs::read(&file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&file, bytes).unwrap();
    let third = start_sidecar(&config).await;
    assert!(dir.path().join("otlp_streams.corrupt").exists());
    let http = third.bound().inet(Transport::OtlpHttp).unwrap();
    send(http, "a", start + 1, start + 5 * s, 9);
    let metrics = third.bound().metrics.unwrap();
    metrics_when(metrics, |text| {
        let has = |series: &str| text.lines().any(|l| l == series);
        has("countersink_otlp_stream_state_errors_total{kind=\"corrupt\"} 1")
            && has("countersink_otlp_streams_restored 0")
            && has("countersink_otlp_points_dropped_total{reason=\"cumulative_baseline\"} 1")
    })
    .await;
    third.shutdown().await.unwrap();
    for totals in store_totals(&store).await {
        assert_eq!(totals, expected, "a baseline adds nothing");
    }
    store.shutdown().await;
}
