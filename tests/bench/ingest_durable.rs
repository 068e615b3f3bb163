//! Acknowledged increments per second through the HTTP increment API, durable
//! (`ingest.http.durable`: answered once the ingest log is synced) against the same
//! endpoint without it, in one run: the real listener, handlers, engine, ingest log and
//! flusher (into a memory sink). Not part of `cargo test`. With
//! `INGEST_DURABLE_TRANSPORT=otlp`, the same through the OTLP/HTTP receiver
//! (`ingest.otlp.durable`): protobuf exports of cumulative sums, one stream per point,
//! each client's streams its own, every export moving each of them on.
//!
//! ```text
//! cargo bench --bench ingest_durable                # 3 rounds of 3 s per case
//! cargo bench --bench ingest_durable -- 5 4         # rounds, seconds per case
//! INGEST_DURABLE_CASES=64x100 cargo bench --bench ingest_durable   # one case
//! INGEST_DURABLE_TRANSPORT=otlp cargo bench --bench ingest_durable # OTLP exports
//! ```
//!
//! Cases: 1, 16 and 64 concurrent clients (each one keep-alive connection, sending its
//! next request when the answer came) × 1 and 100 increments per request (over 1,000
//! series). Each round runs every case both ways, alternating which goes first. Reported
//! per case (medians over rounds): increments/s each way and their ratio, the durable
//! run's fsyncs/s, the answer latency p50/p99 each way, and the ingest log's bytes per
//! increment.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use countersink::config::Config;
use countersink::ingest::start;
use countersink::pipeline::Pipeline;
use countersink::sidecar::handler::EngineHandler;
use countersink::sink::MemorySink;
use countersink::vocabulary::Transport;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    metric::Data, number_data_point::Value,
};
use prost::Message;

const SERIES: usize = 1000;

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .filter_map(|a| a.parse().ok())
        .collect();
    let rounds = args.first().copied().unwrap_or(3) as usize;
    let seconds = args.get(1).copied().unwrap_or(3);
    let otlp = std::env::var("INGEST_DURABLE_TRANSPORT").is_ok_and(|t| t == "otlp");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let cases: Vec<(usize, usize)> = [1, 16, 64]
        .into_iter()
        .flat_map(|c| [1, 100].map(move |n| (c, n)))
        .filter(|(c, n)| {
            // `INGEST_DURABLE_CASES=64x100,1x1` runs only those (for a profile).
            std::env::var("INGEST_DURABLE_CASES").map_or(true, |only| {
                only.split(',').any(|o| o == format!("{c}x{n}"))
            })
        })
        .collect();
    let mut results: Vec<[Vec<Run>; 2]> = cases.iter().map(|_| [Vec::new(), Vec::new()]).collect();
    println!(
        "{rounds} rounds, {seconds} s per case and way, {}",
        if otlp {
            "OTLP/HTTP cumulative exports"
        } else {
            "HTTP increment API"
        }
    );
    for round in 0..rounds {
        for (i, &(clients, per)) in cases.iter().enumerate() {
            let order = if (round + i) % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for durable in order {
                let run = runtime.block_on(measure(clients, per, durable, seconds, otlp));
                println!(
                    "round {round} clients {clients:>2} x {per:>3}/request {}: {:>9.0} increments/s, p50 {:.2} ms, p99 {:.2} ms, {:.0} fsyncs/s",
                    if durable {
                        "durable    "
                    } else {
                        "not durable"
                    },
                    run.rate(),
                    run.p(0.50),
                    run.p(0.99),
                    run.syncs as f64 / run.seconds,
                );
                results[i][usize::from(durable)].push(run);
            }
        }
    }
    println!();
    println!(
        "| clients x increments/request | not durable inc/s | durable inc/s | durable / not | fsyncs/s | p50 ms (not / durable) | p99 ms (not / durable) | log bytes / increment |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for (i, &(clients, per)) in cases.iter().enumerate() {
        let [plain, durable] = &results[i];
        let med = |runs: &[Run], f: &dyn Fn(&Run) -> f64| {
            let mut v: Vec<f64> = runs.iter().map(f).collect();
            median(&mut v)
        };
        let ratio = {
            let mut v: Vec<f64> = plain
                .iter()
                .zip(durable)
                .map(|(p, d)| d.rate() / p.rate())
                .collect();
            median(&mut v)
        };
        println!(
            "| {clients} x {per} | {:.0} | {:.0} | {ratio:.2} | {:.0} | {:.2} / {:.2} | {:.2} / {:.2} | {:.1} |",
            med(plain, &|r| r.rate()),
            med(durable, &|r| r.rate()),
            med(durable, &|r| r.syncs as f64 / r.seconds),
            med(plain, &|r| r.p(0.5)),
            med(durable, &|r| r.p(0.5)),
            med(plain, &|r| r.p(0.99)),
            med(durable, &|r| r.p(0.99)),
            med(durable, &|r| r.log_bytes as f64
                / r.increments.max(1) as f64),
        );
    }
}

#[derive(Default)]
struct Run {
    increments: u64,
    seconds: f64,
    syncs: u64,
    log_bytes: u64,
    /// Answer latencies, milliseconds, sorted.
    latencies: Vec<f64>,
}

impl Run {
    fn rate(&self) -> f64 {
        self.increments as f64 / self.seconds
    }

    fn p(&self, q: f64) -> f64 {
        if self.latencies.is_empty() {
            return 0.0;
        }
        let i = ((self.latencies.len() - 1) as f64 * q).round() as usize;
        self.latencies[i]
    }
}

/// One case one way, on a fresh state directory and pipeline.
async fn measure(clients: usize, per: usize, durable: bool, seconds: u64, otlp: bool) -> Run {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.state.dir = dir.path().join("state");
    config.ingest.udp.listen = None;
    config.ingest.http.enabled = true;
    config.ingest.http.durable = durable;
    config.ingest.http.listen = "127.0.0.1:0".parse().unwrap();
    if otlp {
        config.ingest.http.enabled = false;
        config.ingest.http.durable = false;
        config.ingest.otlp_http.enabled = true;
        config.ingest.otlp_http.listen = "127.0.0.1:0".parse().unwrap();
        config.ingest.otlp.durable = durable;
    }
    config.flush.interval = Duration::from_secs(1);
    config.flush.jitter = Duration::ZERO;
    let pipeline = Pipeline::start(&config, MemorySink::new())
        .await
        .expect("pipeline");
    let log = pipeline.ingest_log().cloned();
    let engine = Arc::clone(pipeline.engine());
    let handler_log = log.clone();
    let receivers = start(&config.ingest, move |t| {
        EngineHandler::new(Arc::clone(&engine), t).with_ingest_log(handler_log.clone())
    })
    .expect("listener");
    let transport = if otlp {
        Transport::OtlpHttp
    } else {
        Transport::Http
    };
    let addr = receivers.inet(transport).expect("bound");
    let syncs_before = log.as_ref().map_or(0, |l| l.syncs());
    let bytes_before = log.as_ref().map_or(0, |l| l.appended_bytes());
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            std::thread::spawn(move || {
                if otlp {
                    exporter(addr, c, per, deadline)
                } else {
                    client(addr, c, per, deadline)
                }
            })
        })
        .collect();
    let mut run = Run::default();
    for thread in threads {
        let (requests, latencies) = thread.join().expect("client");
        run.increments += requests * per as u64;
        run.latencies.extend(latencies);
    }
    run.seconds = started.elapsed().as_secs_f64();
    run.latencies.sort_by(f64::total_cmp);
    run.syncs = log.as_ref().map_or(0, |l| l.syncs()) - syncs_before;
    run.log_bytes = log.as_ref().map_or(0, |l| l.appended_bytes()) - bytes_before;
    receivers.shutdown_async().await;
    let mut pipeline = pipeline;
    pipeline.shutdown().await;
    run
}

/// One client: requests of `per` increments on one keep-alive connection until
/// `deadline`; the requests answered 200 and each answer's latency (ms).
fn client(addr: SocketAddr, c: usize, per: usize, deadline: Instant) -> (u64, Vec<f64>) {
    let stream = TcpStream::connect(addr).expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let mut writer = stream.try_clone().expect("clone");
    let mut reader = BufReader::new(stream);
    let bodies: Vec<String> = (0..16)
        .map(|b| {
            let items: Vec<String> = (0..per)
                .map(|i| {
                    let series = (c * 7919 + b * 104_729 + i) % SERIES;
                    format!(r#"{{"name":"bench.http","tags":{{"k":"{series}"}},"value":1}}"#)
                })
                .collect();
            format!("[{}]", items.join(","))
        })
        .collect();
    let (mut answered, mut latencies) = (0_u64, Vec::new());
    let mut n = 0;
    while Instant::now() < deadline {
        let body = &bodies[n % bodies.len()];
        n += 1;
        let sent = Instant::now();
        let request = format!(
            "POST /v1/increments HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        writer.write_all(request.as_bytes()).expect("send");
        let status = read_answer(&mut reader);
        latencies.push(sent.elapsed().as_secs_f64() * 1e3);
        match status {
            200 => answered += 1,
            429 => std::thread::sleep(Duration::from_millis(10)),
            other => panic!("status {other}"),
        }
    }
    (answered, latencies)
}

/// One exporter: exports of `per` cumulative points (its own streams, each moved on by
/// one per export) on one keep-alive connection until `deadline`; the exports answered
/// 200 and each answer's latency (ms).
fn exporter(addr: SocketAddr, c: usize, per: usize, deadline: Instant) -> (u64, Vec<f64>) {
    let stream = TcpStream::connect(addr).expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let mut writer = stream.try_clone().expect("clone");
    let mut reader = BufReader::new(stream);
    let start = 1_000_000_000u64;
    let (mut answered, mut latencies) = (0_u64, Vec::new());
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        let points = (0..per)
            .map(|i| NumberDataPoint {
                attributes: vec![KeyValue {
                    key: "k".into(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue(format!("{c}-{i}"))),
                    }),
                    ..Default::default()
                }],
                start_time_unix_nano: start,
                time_unix_nano: start + n * 1_000,
                value: Some(Value::AsInt(i64::try_from(n).unwrap_or(i64::MAX))),
                ..Default::default()
            })
            .collect();
        let body = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![Metric {
                        name: "bench.otlp".into(),
                        data: Some(Data::Sum(Sum {
                            data_points: points,
                            aggregation_temporality: AggregationTemporality::Cumulative as i32,
                            is_monotonic: true,
                        })),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
        .encode_to_vec();
        let sent = Instant::now();
        let head = format!(
            "POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        writer.write_all(head.as_bytes()).expect("send");
        writer.write_all(&body).expect("send");
        let status = read_answer(&mut reader);
        latencies.push(sent.elapsed().as_secs_f64() * 1e3);
        match status {
            200 => answered += 1,
            429 => std::thread::sleep(Duration::from_millis(10)),
            other => panic!("status {other}"),
        }
    }
    (answered, latencies)
}

/// Reads one answer on a keep-alive connection: its status.
fn read_answer(reader: &mut BufReader<TcpStream>) -> u16 {
    let mut line = String::new();
    reader.read_line(&mut line).expect("status line");
    let status = line
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let mut length = 0;
    loop {
        line.clear();
        reader.read_line(&mut line).expect("header");
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().expect("length");
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).expect("body");
    status
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
