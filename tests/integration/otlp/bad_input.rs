//! Bad OTLP input end to end, over both receivers: a gRPC message that is not protobuf,
//! invalid UTF-8 in a metric name or an attribute (protobuf and JSON), bodies over the
//! size limit however they arrive (chunked, gzip bomb), and back-pressure. Each gets a
//! status the exporter acts on and is counted by reason; nothing of a refused request is
//! applied; the sidecar keeps serving (the valid requests around them land exactly).

use std::collections::BTreeMap;
use std::io::Write;

use countersink::ingest::otlp::{EXPORT_PATH, PreEncoded};
use countersink::vocabulary::Transport;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::metrics::v1::AggregationTemporality;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value;
use prost::Message;

use super::{
    GZIP, JSON, PROTOBUF, gzip, now_nanos, otlp_config, point, post, request, store_totals, sum,
};
use crate::common::{
    assert_one_connection_held, metrics_when, read_response, start_sidecar,
    start_sidecar_without_store, start_store,
};

/// Sends `body` as the message of an OTLP gRPC export, unchecked.
async fn grpc_raw(
    addr: std::net::SocketAddr,
    body: Vec<u8>,
) -> Result<ExportMetricsServiceResponse, tonic::Status> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    grpc.unary(
        tonic::Request::new(body.into()),
        tonic::codegen::http::uri::PathAndQuery::from_static(EXPORT_PATH),
        PreEncoded,
    )
    .await
    .map(tonic::Response::into_inner)
}

/// A delta request of one point `value` tagged `via`, encoded, with its metric name
/// `name`.
fn delta(name: &str, via: &str, value: i64) -> ExportMetricsServiceRequest {
    let mut metric = sum(
        AggregationTemporality::Delta,
        vec![point(0, now_nanos(), Value::AsInt(value), via)],
    );
    metric.name = name.into();
    request(vec![metric])
}

/// `bytes` with every `from` replaced by `to` (same length).
fn replaced(mut bytes: Vec<u8>, from: &[u8], to: &[u8]) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let at = bytes
        .windows(from.len())
        .position(|w| w == from)
        .expect("the placeholder is in the encoding");
    bytes[at..at + from.len()].copy_from_slice(to);
    bytes
}

/// A POST with a chunked body (no length announced), chunk by chunk: the status.
fn post_chunked(addr: std::net::SocketAddr, chunks: usize, chunk: &[u8]) -> u16 {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .write_all(
            b"POST /v1/metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/x-protobuf\r\nTransfer-Encoding: chunked\r\n\r\n",
        )
        .unwrap();
    for _ in 0..chunks {
        // The server may answer and close before the end.
        if stream
            .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .and_then(|()| stream.write_all(chunk))
            .and_then(|()| stream.write_all(b"\r\n"))
            .is_err()
        {
            break;
        }
    }
    let _ = stream.write_all(b"0\r\n\r\n");
    read_response(&mut stream).0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_invalid_utf8_and_oversized_requests_are_refused_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = otlp_config(dir.path());
    config.ingest.otlp_http.max_request_bytes = 16 * 1024;
    config.ingest.otlp_grpc.max_request_bytes = 16 * 1024;
    let store = start_store(&mut config).await;
    let sidecar = start_sidecar(&config).await;
    let bound = sidecar.bound();
    let http = bound.inet(Transport::OtlpHttp).unwrap();
    let grpc = bound.inet(Transport::OtlpGrpc).unwrap();

    // gRPC: a message that is not protobuf, and one whose metric name (then an attribute
    // value) is not UTF-8: INVALID_ARGUMENT, which exporters do not retry.
    let garbage = b"\x0a\xff\xff\xff\xff\x0f not protobuf at all".to_vec();
    let bad_name = replaced(
        delta("otlp.XXXX", "grpc", 1).encode_to_vec(),
        b"XXXX",
        b"\xff\xfe\xc0\x80",
    );
    let bad_attribute = replaced(
        delta("otlp.orders", "XXXX", 1).encode_to_vec(),
        b"XXXX",
        b"\xc3\x28\xa0\xa1",
    );
    for body in [garbage.clone(), bad_name.clone(), bad_attribute.clone()] {
        let status = grpc_raw(grpc, body).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    }
    // The same raw path with a valid message works: the refusals were about the bytes.
    let answer = grpc_raw(grpc, delta("otlp.orders", "grpc", 4).encode_to_vec())
        .await
        .unwrap();
    assert_eq!(answer.partial_success, None);

    // HTTP: the same bodies get 400 with a google.rpc.Status saying why.
    for body in [&garbage, &bad_name, &bad_attribute] {
        let (status, _, answer) = post(http, &[PROTOBUF], body);
        assert_eq!(status, 400);
        let why = String::from_utf8_lossy(&answer);
        assert!(why.contains("does not decode"), "{why}");
    }
    // JSON with invalid UTF-8 in a string (gzip too): 400.
    let json = delta("otlp.orders", "XXXX", 1);
    let json = serde_json::to_vec(&json).unwrap();
    let json = replaced(json, b"XXXX", b"\xff\xfe\xfd\xfc");
    assert_eq!(post(http, &[JSON], &json).0, 400);
    assert_eq!(post(http, &[JSON, GZIP], &gzip(&json)).0, 400);

    // Over the size limit: announced, chunked without a length, or only once
    // decompressed (a gzip bomb): 413 every time.
    assert_eq!(post(http, &[PROTOBUF], &vec![0u8; 17 * 1024]).0, 413);
    assert_eq!(post_chunked(http, 40, &[0u8; 1024]), 413);
    assert_eq!(
        post(http, &[PROTOBUF, GZIP], &gzip(&vec![0u8; 1 << 20])).0,
        413
    );

    // The receiver still serves, and a valid request lands.
    let (status, _, _) = post(
        http,
        &[PROTOBUF],
        &delta("otlp.orders", "http", 6).encode_to_vec(),
    );
    assert_eq!(status, 200);

    let metrics = bound.metrics.unwrap();
    metrics_when(metrics, |text| {
        let has = |series: &str| text.lines().any(|l| l == series);
        has("countersink_packets_dropped_total{reason=\"malformed\",transport=\"otlp_grpc\"} 3")
            && has(
                "countersink_packets_dropped_total{reason=\"malformed\",transport=\"otlp_http\"} 5",
            )
            && has(
                "countersink_packets_dropped_total{reason=\"oversized\",transport=\"otlp_http\"} 3",
            )
            && has("countersink_lines_received_total{transport=\"otlp_grpc\"} 1")
            && has("countersink_lines_received_total{transport=\"otlp_http\"} 1")
    })
    .await;
    let report = sidecar.shutdown().await.unwrap();
    assert_eq!(report.spilled + report.unknown + report.rejected, 0);
    let expected = BTreeMap::from([
        (
            (
                "otlp.orders".to_string(),
                "service.name:shop,via:grpc".to_string(),
            ),
            4,
        ),
        (
            (
                "otlp.orders".to_string(),
                "service.name:shop,via:http".to_string(),
            ),
            6,
        ),
    ]);
    for totals in store_totals(&store).await {
        assert_eq!(totals, expected, "nothing of a refused request applied");
    }
    store.shutdown().await;
}

/// While the buffer is near its limits (here: no store to flush to, so it stays full), a
/// request is refused whole with the status an exporter retries on: HTTP 429 with
/// `Retry-After`, gRPC `RESOURCE_EXHAUSTED` carrying `RetryInfo` (without it the OTLP
/// specification says not to retry), each counted as `busy`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overloaded_receiver_answers_retry_later() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = otlp_config(dir.path());
    config.limits.max_pending_rows = 8;
    let sidecar = start_sidecar_without_store(&mut config).await;
    let bound = sidecar.bound();
    let http = bound.inet(Transport::OtlpHttp).unwrap();
    let grpc = bound.inet(Transport::OtlpGrpc).unwrap();

    // Fill the buffer: 16 rows asked, at most 8 taken; the rest a partial success.
    let now = now_nanos();
    let fill = request(vec![sum(
        AggregationTemporality::Delta,
        (0..16)
            .map(|i| point(0, now, Value::AsInt(1), &format!("fill-{i}")))
            .collect(),
    )]);
    let (status, _, answer) = post(http, &[PROTOBUF], &fill.encode_to_vec());
    assert_eq!(status, 200);
    let answer = ExportMetricsServiceResponse::decode(answer.as_slice()).unwrap();
    let partial = answer.partial_success.expect("some points refused");
    assert!(partial.rejected_data_points > 0, "{partial:?}");

    let next = delta("otlp.orders", "later", 1).encode_to_vec();
    let (status, head, _) = post(http, &[PROTOBUF], &next);
    assert_eq!(status, 429, "{head}");
    assert!(
        head.to_ascii_lowercase().contains("retry-after: 2"),
        "{head}"
    );

    let mut client = MetricsServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();
    let refused = client
        .export(delta("otlp.orders", "later", 1))
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    let details = google_rpc_status(refused.details());
    assert_eq!(details.0, 8);
    assert_eq!(details.1, "type.googleapis.com/google.rpc.RetryInfo");

    let metrics = bound.metrics.unwrap();
    metrics_when(metrics, |text| {
        let has = |series: &str| text.lines().any(|l| l == series);
        has("countersink_packets_dropped_total{reason=\"busy\",transport=\"otlp_http\"} 1")
            && has("countersink_packets_dropped_total{reason=\"busy\",transport=\"otlp_grpc\"} 1")
    })
    .await;
    sidecar.shutdown().await;
}

/// The code and the first detail's type URL of an encoded `google.rpc.Status`.
fn google_rpc_status(bytes: &[u8]) -> (i32, String) {
    #[derive(Clone, PartialEq, prost::Message)]
    struct Any {
        #[prost(string, tag = "1")]
        type_url: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct Status {
        #[prost(int32, tag = "1")]
        code: i32,
        #[prost(message, repeated, tag = "3")]
        details: Vec<Any>,
    }
    let status = Status::decode(bytes).expect("a google.rpc.Status");
    let first = status.details.first().map(|a| a.type_url.clone());
    (status.code, first.unwrap_or_default())
}

/// `max_connections` of each receiver, from the configuration: with its one connection
/// held open, one more is closed at once without an answer and counted as refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_receiver_holds_at_most_its_configured_connections() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = otlp_config(dir.path());
    config.ingest.otlp_http.max_connections = 1;
    config.ingest.otlp_grpc.max_connections = 1;
    let sidecar = start_sidecar_without_store(&mut config).await;
    let bound = sidecar.bound();
    let mut held = Vec::new();
    for transport in [Transport::OtlpHttp, Transport::OtlpGrpc] {
        held.push(assert_one_connection_held(&bound, transport).await);
    }
    drop(held);
    sidecar.shutdown().await;
}
