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
//! - `decode`: `decode_protobuf` of every request on one thread (the limit: the bytes
//!   must be decoded);
//! - `decode/N`: the same requests decoded by N threads at once, N the OTLP receivers'
//!   runtime workers ([`workers`]: the cores, at most 4): what decoding alone reaches
//!   with as many threads as the receiver, the stricter baseline for `grpc`;
//! - `delta` and `cumulative`: decode, convert (the mapping; for cumulative, the stream
//!   table: each point's difference from its stream's last), and record every increment
//!   into a fresh engine (`convert_each` into one `Engine::batch` per request, what the
//!   receivers' handler does): the receivers' whole work on a request but the socket;
//! - `grpc`: the delta requests sent to the real OTLP/gRPC receiver (4 connections, one
//!   request in flight on each) into a fresh engine, the clock stopping at the last point
//!   counted: the socket, HTTP/2 and tonic included, both ends. The client sends the
//!   already-encoded request bytes (a pass-through codec), as a load generator would: like
//!   `decode`, it pays no protobuf encoding, but it does pay its own HTTP/2 and the copy
//!   into its frames, on the same cores as the receiver;
//! - `grpc+encode`: the same, from tonic's generated client encoding every (already
//!   decoded, cloned before the clock starts) request: the client's protobuf encoding
//!   too, which an exporter pays in its own process, not the receiver's.
//!
//! Reported per round and as medians: ns per point for each, and `decode` / each (the
//! share of the decode-only loop's speed each path reaches; 1.0 = as fast as decoding).
//!
//! Then the CPU time per point, which a busy machine disturbs far less than the wall
//! clock (a request and its answer wait on every thread's turn on a shared core; a
//! decoding loop does not): the whole process's during each path's timed part, and for
//! the `grpc` paths the receiver's threads' alone (`cs-otlp-grpc*`, from
//! `/proc/self/task/*/schedstat`): what the sidecar spends per point, against what
//! decoding alone spends.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use countersink::config::Config;
use countersink::config::ingest::{IngestConfig, OtlpConfig};
use countersink::engine::{self, Engine};
use countersink::ingest::otlp::{
    AttributePolicy, EXPORT_PATH, Point, PreEncoded, Streams, convert_each, decode_protobuf,
    workers,
};
use countersink::ingest::start;
use countersink::sidecar::handler::EngineHandler;
use countersink::vocabulary::Transport;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    metric::Data, number_data_point::Value,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;

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
    let threads = workers();
    let parallel = format!("decode/{threads}");
    let names = [
        "decode",
        parallel.as_str(),
        "delta",
        "cumulative",
        "grpc",
        "grpc+encode",
    ];
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let mut against_parallel: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let mut receiver_cpu: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for round in 0..rounds {
        let mut this = [0.0; 6];
        for k in 0..names.len() {
            let which = (k + round) % names.len();
            let cpu_before = process_cpu_ns();
            let seconds = match which {
                0 => decode_only(&delta),
                1 => decode_parallel(&delta, threads),
                2 => in_process(&delta),
                3 => in_process(&cumulative),
                4 | 5 => {
                    let client = if which == 4 {
                        Client::PreEncoded
                    } else {
                        Client::Encoding
                    };
                    let timed = runtime.block_on(over_grpc(&delta, client, total as u64));
                    receiver_cpu[which].push(timed.receiver_cpu_ns / total);
                    cpu[which].push(timed.process_cpu_ns / total);
                    timed.seconds
                }
                _ => unreachable!(),
            };
            if which < 4 {
                cpu[which].push((process_cpu_ns() - cpu_before) / total);
            }
            this[which] = seconds * 1e9 / total;
        }
        let mut line = format!("round {round}:");
        for (i, name) in names.iter().enumerate() {
            ns[i].push(this[i]);
            ratios[i].push(this[0] / this[i]);
            against_parallel[i].push(this[1] / this[i]);
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
    let mut line = format!("median against {parallel}:");
    for (i, name) in names.iter().enumerate().skip(2) {
        line.push_str(&format!(" {name} {:.2}x", median(&mut against_parallel[i])));
    }
    println!("{line}");
    let decode_cpu = median(&mut cpu[0]);
    let mut line = format!("median CPU per point: decode {decode_cpu:.0} ns");
    for (i, name) in names.iter().enumerate().skip(1) {
        let process = median(&mut cpu[i]);
        line.push_str(&format!(
            ", {name} {process:.0} ns ({:.2}x)",
            decode_cpu / process
        ));
        if !receiver_cpu[i].is_empty() {
            let receiver = median(&mut receiver_cpu[i]);
            line.push_str(&format!(
                " of which the receiver's threads {receiver:.0} ns ({:.2}x)",
                decode_cpu / receiver
            ));
        }
    }
    println!("{line}");
}

/// CPU time of the whole process so far (every thread, ended ones too), ns.
fn process_cpu_ns() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill.
    #[allow(unsafe_code)]
    unsafe {
        libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t);
    }
    t.tv_sec as f64 * 1e9 + t.tv_nsec as f64
}

/// CPU time so far of the threads whose name starts with `prefix`, ns (the first field
/// of each thread's `schedstat`).
fn threads_cpu_ns(prefix: &str) -> f64 {
    let mut sum = 0.0;
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with(prefix) {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        sum += stat
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<f64>().ok())
            .unwrap_or(0.0);
    }
    sum
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

/// Seconds for `threads` threads to decode every request between them.
fn decode_parallel(requests: &[Vec<u8>], threads: usize) -> f64 {
    let started = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..threads {
            scope.spawn(move || {
                for body in requests.iter().skip(t).step_by(threads) {
                    black_box(decode_protobuf(black_box(body)).unwrap());
                }
            });
        }
    });
    started.elapsed().as_secs_f64()
}

/// Seconds to decode, convert and record every request into a fresh engine, as the
/// receivers do: each point straight into one engine batch per request.
fn in_process(requests: &[Vec<u8>]) -> f64 {
    let engine = Engine::new(&Config::default()).expect("default config");
    let mut streams = Streams::new(OtlpConfig::default().max_streams, 0);
    let policy = AttributePolicy::default();
    let started = Instant::now();
    for body in requests {
        let request = decode_protobuf(body).unwrap();
        let mut batch = engine.batch(Transport::OtlpGrpc, engine::now_unix_secs());
        convert_each(
            &request,
            &policy,
            &mut streams,
            unix_nanos(),
            &mut |point: &Point<'_, '_>| {
                batch
                    .record(point.name, point.tags, point.delta, point.at_unix_secs)
                    .expect("accepted");
                true
            },
        );
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

/// The names of the OTLP/gRPC receiver's threads start with this (its listener thread
/// and its runtime's workers).
const RECEIVER_THREADS: &str = "cs-otlp-grpc";

/// One `grpc` run: wall time, and the CPU time of the process and of the receiver's
/// threads in it.
struct Timed {
    seconds: f64,
    process_cpu_ns: f64,
    receiver_cpu_ns: f64,
}

/// How the `grpc` paths' client sends a request.
#[derive(Clone, Copy)]
enum Client {
    /// The encoded bytes as they are (a pass-through codec): a load generator.
    PreEncoded,
    /// tonic's generated client, encoding each decoded request: an exporter.
    Encoding,
}

/// One connection's client and what it sends.
enum Prepared {
    Bytes(tonic::client::Grpc<Channel>, Vec<Bytes>),
    Decoded(
        MetricsServiceClient<Channel>,
        Vec<ExportMetricsServiceRequest>,
    ),
}

impl Prepared {
    /// Sends every request, one at a time, each answered with success.
    async fn send_all(self) {
        match self {
            Prepared::Bytes(mut grpc, bodies) => {
                for body in bodies {
                    grpc.ready().await.unwrap();
                    grpc.unary::<_, ExportMetricsServiceResponse, _>(
                        tonic::Request::new(body),
                        PathAndQuery::from_static(EXPORT_PATH),
                        PreEncoded,
                    )
                    .await
                    .expect("accepted");
                }
            }
            Prepared::Decoded(mut client, requests) => {
                for request in requests {
                    client.export(request).await.expect("accepted");
                }
            }
        }
    }
}

/// Seconds from the first request sent to the OTLP/gRPC receiver until the engine
/// counted the last point. Everything a connection sends is prepared before the clock
/// starts: the bytes, or the decoded requests `client` encodes.
async fn over_grpc(requests: &[Vec<u8>], client: Client, points: u64) -> Timed {
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
    let mut prepared = Vec::new();
    for c in 0..CONNECTIONS {
        let channel = Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mine = requests.iter().skip(c).step_by(CONNECTIONS);
        prepared.push(match client {
            Client::PreEncoded => Prepared::Bytes(
                tonic::client::Grpc::new(channel),
                mine.map(|b| Bytes::copy_from_slice(b)).collect(),
            ),
            Client::Encoding => Prepared::Decoded(
                MetricsServiceClient::new(channel),
                mine.map(|b| decode_protobuf(b).unwrap()).collect(),
            ),
        });
    }
    let receiver_before = threads_cpu_ns(RECEIVER_THREADS);
    let process_before = process_cpu_ns();
    let started = Instant::now();
    let tasks: Vec<_> = prepared
        .into_iter()
        .map(|p| tokio::spawn(p.send_all()))
        .collect();
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
    let timed = Timed {
        seconds,
        process_cpu_ns: process_cpu_ns() - process_before,
        receiver_cpu_ns: threads_cpu_ns(RECEIVER_THREADS) - receiver_before,
    };
    receivers.shutdown_async().await;
    timed
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
