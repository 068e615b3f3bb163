//! OTLP metrics through a running sidecar to cqlsim: requests built from the
//! `opentelemetry-proto` types over HTTP protobuf, HTTP JSON (gzip) and gRPC (gzip), read
//! back exactly from both tables; bad requests answered with their status and counted.

use std::io::Write;
use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use countersink::vocabulary::Transport;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    metric::Data, number_data_point::Value,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

use crate::common::{http_post, metrics_when, sidecar_config, start_sidecar, start_store};

mod bad_input;
mod durable;
mod restart;

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

fn point(start: u64, time: u64, value: Value, via: &str) -> NumberDataPoint {
    NumberDataPoint {
        attributes: vec![kv("via", via)],
        start_time_unix_nano: start,
        time_unix_nano: time,
        value: Some(value),
        ..Default::default()
    }
}

fn request(metrics: Vec<Metric>) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![kv("service.name", "shop"), kv("service.instance.id", "i-1")],
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn sum(temporality: AggregationTemporality, points: Vec<NumberDataPoint>) -> Metric {
    Metric {
        name: "otlp.orders".into(),
        data: Some(Data::Sum(Sum {
            data_points: points,
            aggregation_temporality: temporality as i32,
            is_monotonic: true,
        })),
        ..Default::default()
    }
}

/// A POST to `/v1/metrics`: the status, the head (lower case) and the body.
fn post(addr: SocketAddr, headers: &[(&str, &str)], body: &[u8]) -> (u16, String, Vec<u8>) {
    http_post(addr, "/v1/metrics", headers, body)
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

const PROTOBUF: (&str, &str) = ("Content-Type", "application/x-protobuf");
const JSON: (&str, &str) = ("Content-Type", "application/json");
const GZIP: (&str, &str) = ("Content-Encoding", "gzip");

/// Delta and cumulative sums over the three encodings land exactly in both tables: a
/// non-integral double and a gauge are refused and ignored in a partial success, a
/// repeated cumulative point adds nothing, a new start time is a reset; malformed,
/// mistyped, truncated and oversized requests get their status and are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_over_http_protobuf_json_and_grpc_land_with_exact_totals() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = sidecar_config(dir.path());
    config.ingest.otlp_http.enabled = true;
    config.ingest.otlp_http.listen = "127.0.0.1:0".parse().unwrap();
    config.ingest.otlp_http.max_request_bytes = 64 * 1024;
    config.ingest.otlp_grpc.enabled = true;
    config.ingest.otlp_grpc.listen = "127.0.0.1:0".parse().unwrap();
    config.ingest.otlp_grpc.max_request_bytes = 64 * 1024;
    let store = start_store(&mut config).await;
    let sidecar = start_sidecar(&config).await;
    let bound = sidecar.bound();
    let http = bound.inet(Transport::OtlpHttp).unwrap();
    let grpc = bound.inet(Transport::OtlpGrpc).unwrap();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let s = 1_000_000_000u64;

    // HTTP protobuf, delta: 3 + 4 count; 1.5 is refused; the gauge is ignored.
    let gauge = Metric {
        name: "otlp.temperature".into(),
        data: Some(Data::Gauge(Gauge {
            data_points: vec![point(0, now, Value::AsInt(20), "pb")],
        })),
        ..Default::default()
    };
    let delta = request(vec![
        sum(
            AggregationTemporality::Delta,
            vec![
                point(0, now - 60 * s, Value::AsInt(3), "pb"),
                point(0, now - 60 * s, Value::AsDouble(4.0), "pb"),
                point(0, now - 60 * s, Value::AsDouble(1.5), "pb"),
            ],
        ),
        gauge,
    ]);
    let (status, _, body) = post(http, &[PROTOBUF], &delta.encode_to_vec());
    assert_eq!(status, 200);
    let answer = ExportMetricsServiceResponse::decode(body.as_slice()).unwrap();
    let partial = answer.partial_success.expect("a partial success");
    assert_eq!(partial.rejected_data_points, 1);
    assert!(
        partial.error_message.contains("non_integer"),
        "{}",
        partial.error_message
    );

    // HTTP JSON, gzip, cumulative, as an SDK writes it (64-bit integers as strings):
    // 5, then 12 (+7), 12 again (+0), then a new start time: 2 (+2).
    let start = now;
    for (start, time, value) in [
        (start, now + s, 5),
        (start, now + 2 * s, 12),
        (start, now + 2 * s, 12),
        (now + 3 * s, now + 4 * s, 2),
    ] {
        let json = format!(
            r#"{{"resourceMetrics":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"shop"}}}}]}},"scopeMetrics":[{{"scope":{{"name":"test"}},"metrics":[{{"name":"otlp.orders","sum":{{"aggregationTemporality":2,"isMonotonic":true,"dataPoints":[{{"attributes":[{{"key":"via","value":{{"stringValue":"json"}}}}],"startTimeUnixNano":"{start}","timeUnixNano":"{time}","asInt":"{value}"}}]}}}}]}}]}}]}}"#
        );
        let (status, _, body) = post(http, &[JSON, GZIP], &gzip(json.as_bytes()));
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert!(
            answer.get("partialSuccess").is_none_or(|p| p.is_null()),
            "{answer}"
        );
    }

    // gRPC, gzip: a delta point and a cumulative stream started after the sidecar.
    let mut client = MetricsServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap()
        .send_compressed(tonic::codec::CompressionEncoding::Gzip);
    let grpc_delta = request(vec![sum(
        AggregationTemporality::Delta,
        vec![point(0, now, Value::AsInt(10), "grpc")],
    )]);
    let answer = client.export(grpc_delta).await.unwrap().into_inner();
    assert_eq!(answer.partial_success, None);
    for (time, value) in [(now + s, 4), (now + 2 * s, 9)] {
        let cumulative = request(vec![sum(
            AggregationTemporality::Cumulative,
            vec![point(now, time, Value::AsInt(value), "grpc-cumulative")],
        )]);
        client.export(cumulative).await.unwrap();
    }

    // Over gRPC's size limit: RESOURCE_EXHAUSTED (not tonic's retryable OUT_OF_RANGE),
    // nothing applied, counted.
    let huge = request(vec![sum(
        AggregationTemporality::Delta,
        (0..5000)
            .map(|i| point(0, now, Value::AsInt(1), &format!("huge-{i}")))
            .collect(),
    )]);
    let mut plain = MetricsServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();
    let refused = plain.export(huge).await.unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );

    // Bad requests: each its status, nothing applied, counted by reason.
    assert_eq!(
        post(http, &[PROTOBUF], b"\xff\xff\xff\xff not protobuf").0,
        400
    );
    assert_eq!(
        post(http, &[("Content-Type", "text/plain")], b"x:1|c").0,
        415
    );
    let truncated = gzip(&delta.encode_to_vec());
    assert_eq!(
        post(http, &[PROTOBUF, GZIP], &truncated[..truncated.len() / 2]).0,
        400
    );
    assert_eq!(post(http, &[PROTOBUF], &vec![0u8; 100 * 1024]).0, 413);
    assert_eq!(post(http, &[JSON], b"{\"resourceMetrics\": [").0, 400);

    let metrics = bound.metrics.unwrap();
    metrics_when(metrics, |text| {
        let has = |series: &str| text.lines().any(|l| l == series);
        has("countersink_packets_dropped_total{reason=\"malformed\",transport=\"otlp_http\"} 3")
            && has("countersink_packets_dropped_total{reason=\"unsupported\",transport=\"otlp_http\"} 1")
            && has("countersink_packets_dropped_total{reason=\"oversized\",transport=\"otlp_http\"} 1")
            && has("countersink_otlp_points_dropped_total{reason=\"non_integer\"} 1")
            && has("countersink_otlp_points_ignored_total{kind=\"gauge\"} 1")
            && has("countersink_otlp_streams 2")
            && has("countersink_lines_received_total{transport=\"otlp_grpc\"} 3")
            && has("countersink_packets_dropped_total{reason=\"oversized\",transport=\"otlp_grpc\"} 1")
    })
    .await;
    // A client stuck in the middle of its body must not hold the shutdown.
    let mut stuck = std::net::TcpStream::connect(http).unwrap();
    stuck
        .write_all(
            b"POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: 1000\r\n\r\nabc",
        )
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let stopping = std::time::Instant::now();
    let report = sidecar.shutdown().await.unwrap();
    assert!(
        stopping.elapsed() < std::time::Duration::from_secs(15),
        "shutdown took {:?}",
        stopping.elapsed()
    );
    drop(stuck);
    assert_eq!(
        report.spilled + report.unknown + report.rejected,
        0,
        "{report:?}"
    );
    for table in ["countersink.counts_by_day", "countersink.counts_by_minute"] {
        let rows = store
            .select(&format!(
                "SELECT name, tags, value FROM {}",
                store.table(table)
            ))
            .await;
        let mut totals = std::collections::BTreeMap::new();
        for i in 0..rows.len() {
            let key = (rows.text(i, "name").unwrap(), rows.text(i, "tags").unwrap());
            *totals.entry(key).or_insert(0) += rows.get_i64(i, "value").unwrap();
        }
        assert_eq!(
            totals,
            std::collections::BTreeMap::from([
                (("otlp.orders", "service.name:shop,via:pb"), 7),
                (("otlp.orders", "service.name:shop,via:json"), 5 + 7 + 2),
                (("otlp.orders", "service.name:shop,via:grpc"), 10),
                (("otlp.orders", "service.name:shop,via:grpc-cumulative"), 9),
            ]),
            "{table}"
        );
    }
    store.shutdown().await;
}

/// The sidecar config of these tests: both OTLP receivers on free ports.
fn otlp_config(dir: &std::path::Path) -> countersink::config::Config {
    let mut config = sidecar_config(dir);
    config.ingest.otlp_http.enabled = true;
    config.ingest.otlp_http.listen = "127.0.0.1:0".parse().unwrap();
    config.ingest.otlp_grpc.enabled = true;
    config.ingest.otlp_grpc.listen = "127.0.0.1:0".parse().unwrap();
    config
}

/// Nanoseconds since the Unix epoch, now.
fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// (name, tags) → total, in each of the day and minute tables.
async fn store_totals(
    store: &crate::common::Store,
) -> Vec<std::collections::BTreeMap<(String, String), i64>> {
    let mut out = Vec::new();
    for table in ["countersink.counts_by_day", "countersink.counts_by_minute"] {
        let rows = store
            .select(&format!(
                "SELECT name, tags, value FROM {}",
                store.table(table)
            ))
            .await;
        let mut totals = std::collections::BTreeMap::new();
        for i in 0..rows.len() {
            let key = (
                rows.text(i, "name").unwrap().to_string(),
                rows.text(i, "tags").unwrap().to_string(),
            );
            *totals.entry(key).or_insert(0) += rows.get_i64(i, "value").unwrap();
        }
        out.push(totals);
    }
    out
}
