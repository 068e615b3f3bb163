//! OTLP ingest cost per data point against a loop that only decodes the same requests,
//! in one run. Not part of `cargo test`.
//!
//! ```text
//! cargo bench --bench otlp                  # 7 rounds, 200 requests of 500 points
//! cargo bench --bench otlp -- 5 100 1000    # rounds, requests, points per request
//! ```
//!
//! The requests are what an SDK sends: one resource (`service.name`, `service.instance.id`,
//! `host.name` and the `telemetry.sdk.*` attributes), one scope, one monotonic sum whose
//! points carry three attributes over 1000 distinct series, integer values, encoded as
//! protobuf once before the clock starts. Each round measures, in rotating order:
//!
//! - `decode`: `decode_protobuf` of every request (the limit: the bytes must be decoded);
//! - `delta` and `cumulative`: decode, convert (the mapping; for cumulative, the stream
//!   table: each point's difference from its stream's last), and record every increment
//!   into a fresh engine (`Engine::record_from`, what the receivers' handler calls): the
//!   receivers' whole work on a request but the socket;
//! - `grpc`: the delta requests sent to the real OTLP/gRPC receiver (4 connections, one
//!   request in flight on each) into a fresh engine, the clock stopping at the last point
//!   counted: the socket, HTTP/2 and tonic included.
//!
//! Reported per round and as medians: ns per point for each, and `decode` / each (the
//! share of the decode-only loop's speed each path reaches; 1.0 = as fast as decoding).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use countersink::config::Config;
use countersink::config::ingest::{IngestConfig, OtlpConfig};
use countersink::engine::{self, Engine};
use countersink::ingest::otlp::{AttributePolicy, Streams, convert, decode_protobuf};
use countersink::ingest::start;
use countersink::sidecar::handler::EngineHandler;
use countersink::vocabulary::Transport;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    metric::Data, number_data_point::Value,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

/// Distinct series (attribute sets).
const SERIES: usize = 1000;
/// gRPC connections sending at once.
const CONNECTIONS: usize = 4;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .filter_map(|a| a.parse().ok())
        .collect();
    let rounds = args.first().copied().unwrap_or(7);
    let requests = args.get(1).copied().unwrap_or(200);
    let points = args.get(2).copied().unwrap_or(500);
    let now = unix_nanos();
    let delta = encoded(requests, points, AggregationTemporality::Delta, now);
    let cumulative = encoded(requests, points, AggregationTemporality::Cumulative, now);
    let total = (requests * points) as f64;
    println!(
        "{rounds} rounds, {requests} requests of {points} points ({} bytes each), {SERIES} series",
        delta[0].len()
    );
    let names = ["decode", "delta", "cumulative", "grpc"];
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for round in 0..rounds {
        let mut this = [0.0; 4];
        for k in 0..names.len() {
            let which = (k + round) % names.len();
            let seconds = match which {
                0 => decode_only(&delta),
                1 => in_process(&delta),
                2 => in_process(&cumulative),
                _ => runtime.block_on(over_grpc(&delta, (requests * points) as u64)),
            };
            this[which] = seconds * 1e9 / total;
        }
        let mut line = format!("round {round}:");
        for (i, name) in names.iter().enumerate() {
            ns[i].push(this[i]);
            ratios[i].push(this[0] / this[i]);
            line.push_str(&format!(
                " {name} {:.0} ns/point ({:.2}x)",
                this[i],
                this[0] / this[i]
            ));
        }
        println!("{line}");
    }
    let mut line = "median:".to_string();
    for (i, name) in names.iter().enumerate() {
        line.push_str(&format!(
            " {name} {:.0} ns/point ({:.2}x of decode-only)",
            median(&mut ns[i]),
            median(&mut ratios[i])
        ));
    }
    println!("{line}");
}

fn unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

/// `requests` requests of `points` points each, protobuf-encoded. Cumulative values grow
/// with the request's index, so every point adds.
fn encoded(
    requests: usize,
    points: usize,
    temporality: AggregationTemporality,
    now: u64,
) -> Vec<Vec<u8>> {
    let resource = Resource {
        attributes: vec![
            kv("service.name", "checkout"),
            kv(
                "service.instance.id",
                "6f1c2a34-0c55-4d5e-9b1e-8a4f2d9c7e11",
            ),
            kv("host.name", "ip-10-0-12-34"),
            kv("telemetry.sdk.name", "opentelemetry"),
            kv("telemetry.sdk.language", "go"),
            kv("telemetry.sdk.version", "1.38.0"),
        ],
        ..Default::default()
    };
    (0..requests)
        .map(|r| {
            let data_points = (0..points)
                .map(|p| {
                    let series = (r * points + p) % SERIES;
                    let value = match temporality {
                        AggregationTemporality::Cumulative => (r + 1) as i64 * 3,
                        _ => 3,
                    };
                    NumberDataPoint {
                        attributes: vec![
                            kv("http.route", &format!("/api/v1/items/{}", series % 50)),
                            kv("http.method", ["GET", "POST"][series % 2]),
                            kv("customer", &format!("c{}", series / 50)),
                        ],
                        start_time_unix_nano: now - 1_000_000_000,
                        time_unix_nano: now + r as u64,
                        value: Some(Value::AsInt(value)),
                        ..Default::default()
                    }
                })
                .collect();
            ExportMetricsServiceRequest {
                resource_metrics: vec![ResourceMetrics {
                    resource: Some(resource.clone()),
                    scope_metrics: vec![ScopeMetrics {
                        scope: Some(InstrumentationScope {
                            name: "checkout/http".into(),
                            version: "0.1.0".into(),
                            ..Default::default()
                        }),
                        metrics: vec![Metric {
                            name: "http.server.requests".into(),
                            data: Some(Data::Sum(Sum {
                                data_points,
                                aggregation_temporality: temporality as i32,
                                is_monotonic: true,
                            })),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            }
            .encode_to_vec()
        })
        .collect()
}

/// Seconds to decode every request.
fn decode_only(requests: &[Vec<u8>]) -> f64 {
    let started = Instant::now();
    for body in requests {
        black_box(decode_protobuf(black_box(body)).unwrap());
    }
    started.elapsed().as_secs_f64()
}

/// Seconds to decode, convert and record every request into a fresh engine.
fn in_process(requests: &[Vec<u8>]) -> f64 {
    let engine = Engine::new(&Config::default()).expect("default config");
    let mut streams = Streams::new(OtlpConfig::default().max_streams, 0);
    let policy = AttributePolicy::default();
    let started = Instant::now();
    for body in requests {
        let request = decode_protobuf(body).unwrap();
        let conversion = convert(&request, &policy, &mut streams, unix_nanos());
        let now = engine::now_unix_secs();
        let mut tags: Vec<(&str, &str)> = Vec::new();
        for increment in &conversion.increments {
            tags.clear();
            tags.extend(increment.tags.iter().map(|(k, v)| (k.as_ref(), v.as_ref())));
            engine
                .record_from(
                    Transport::OtlpGrpc,
                    increment.name,
                    tags.as_slice(),
                    increment.delta,
                    now,
                    increment.at_unix_secs,
                )
                .expect("accepted");
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let counted = engine
        .aggregator()
        .counters()
        .received_for(Transport::OtlpGrpc);
    assert_eq!(counted as usize, requests.len() * points_of(&requests[0]));
    seconds
}

fn points_of(body: &[u8]) -> usize {
    let request = decode_protobuf(body).unwrap();
    match &request.resource_metrics[0].scope_metrics[0].metrics[0].data {
        Some(Data::Sum(sum)) => sum.data_points.len(),
        _ => 0,
    }
}

/// Seconds from the first request sent to the OTLP/gRPC receiver until the engine
/// counted the last point.
async fn over_grpc(requests: &[Vec<u8>], points: u64) -> f64 {
    let engine = Arc::new(Engine::new(&Config::default()).expect("default config"));
    let mut config = IngestConfig::default();
    config.udp.listen = None;
    config.otlp_grpc.enabled = true;
    config.otlp_grpc.listen = "127.0.0.1:0".parse().unwrap();
    let handler_engine = Arc::clone(&engine);
    let receivers = start(&config, move |t| {
        EngineHandler::new(Arc::clone(&handler_engine), t)
    })
    .expect("receivers start");
    let addr = receivers.inet(Transport::OtlpGrpc).expect("bound");
    let decoded: Vec<ExportMetricsServiceRequest> = requests
        .iter()
        .map(|b| decode_protobuf(b).unwrap())
        .collect();
    let mut clients = Vec::new();
    for _ in 0..CONNECTIONS {
        clients.push(
            MetricsServiceClient::connect(format!("http://{addr}"))
                .await
                .unwrap(),
        );
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (c, mut client) in clients.into_iter().enumerate() {
        let mine: Vec<ExportMetricsServiceRequest> = decoded
            .iter()
            .skip(c)
            .step_by(CONNECTIONS)
            .cloned()
            .collect();
        tasks.push(tokio::spawn(async move {
            for request in mine {
                client.export(request).await.expect("accepted");
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    while engine
        .aggregator()
        .counters()
        .received_for(Transport::OtlpGrpc)
        < points
    {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let seconds = started.elapsed().as_secs_f64();
    receivers.shutdown_async().await;
    seconds
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
