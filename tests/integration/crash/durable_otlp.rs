//! An acknowledged OTLP export survives SIGKILL (`ingest.otlp.durable`): `serve` is
//! killed at random moments and at the ingest log's crash points, under random store
//! faults, while exporters send cumulative sums over OTLP/HTTP and retry every export
//! that got no answer, as the OTLP exporters do. A cumulative point's increment is its
//! difference from the stream's last point, so this also tests that the stream table
//! and the ingest log agree after every kill: an export written but not answered, then
//! retried, adds nothing the second time; one never written adds its difference once.
//! The checker ([`super::check`]) compares the store, its request log and countersink's
//! records with the differences of the answered points: exactly equal.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    metric::Data, number_data_point::Value,
};
use prost::Message;

use super::check::check;
use super::durable::{kill_runs, kills_from};
use super::harness::{Rig, Settings};

/// Pages (streams) per exporter.
const PAGES: u32 = 6;
/// Exporters.
const EXPORTERS: usize = 4;

/// One exporter's streams: each page's last value sent, and its time.
#[derive(Clone, Default)]
struct Exporter {
    /// Per page: (value, time in nanoseconds) of its last point, answered or not.
    last: Vec<(i64, u64)>,
    /// The export waiting for an answer: its points (page, value, time).
    pending: Option<Vec<(u32, i64, u64)>>,
    /// Exports made, for the next point's time.
    made: u64,
}

/// What the exporters share across the runs.
#[derive(Default)]
struct Exporters {
    state: Mutex<Vec<Exporter>>,
    /// Each answered point's difference: (page, Unix seconds, delta).
    answered: Mutex<Vec<(u32, i64, i64)>>,
    /// Per (exporter, page): the value of its last answered point.
    acknowledged: Mutex<Vec<Vec<i64>>>,
    /// Answered exports.
    exports: Mutex<usize>,
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

/// The export of `points` (page, cumulative value, time): one `page.views` sum, one point
/// per page, each started at `start` nanoseconds.
fn export(points: &[(u32, i64, u64)], start: u64) -> Vec<u8> {
    let data_points = points
        .iter()
        .map(|&(page, value, time)| NumberDataPoint {
            attributes: vec![kv("page_id", &format!("p{page}"))],
            start_time_unix_nano: start,
            time_unix_nano: time,
            value: Some(Value::AsInt(value)),
            ..Default::default()
        })
        .collect();
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: "page.views".into(),
                    data: Some(Data::Sum(Sum {
                        data_points,
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
    .encode_to_vec()
}

/// A POST that gives up on any failure (the process may be killed meanwhile): the
/// status, if an answer came.
fn try_post(addr: SocketAddr, body: &[u8]) -> Option<u16> {
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let head = format!(
        "POST /v1/metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).ok()?;
    stream.write_all(body).ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let text = String::from_utf8_lossy(&response);
    text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}

/// The exporters sending to `addr` until `stop`; with `drain`, each then goes on until
/// its pending export is answered. Exporter `e` owns pages `e * PAGES ..`; each export
/// moves 1 to 3 of them on by 1 to 99 (a stream's first point is 0), at `base_nanos`
/// plus 10 ms per export.
fn start_exporters(
    addr: SocketAddr,
    base_nanos: u64,
    seed: u64,
    stop: &Arc<AtomicBool>,
    drain: bool,
    shared: &Arc<Exporters>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..EXPORTERS)
        .map(|e| {
            let (stop, shared) = (Arc::clone(stop), Arc::clone(shared));
            std::thread::spawn(move || {
                let mut rng = fastrand::Rng::with_seed(seed * 16 + e as u64);
                loop {
                    let mut me = shared.state.lock().unwrap()[e].clone();
                    if stop.load(Ordering::Relaxed) && (!drain || me.pending.is_none()) {
                        return;
                    }
                    let points = me.pending.clone().unwrap_or_else(|| {
                        me.made += 1;
                        let time = base_nanos + me.made * 10_000_000;
                        let mut pages: Vec<u32> = (0..PAGES).collect();
                        rng.shuffle(&mut pages);
                        pages
                            .into_iter()
                            .take(rng.usize(1..=3))
                            .map(|page| {
                                let slot = &mut me.last[page as usize];
                                // A stream's first point is 0: it started before the
                                // first sidecar, so that point is a baseline.
                                let step = if slot.1 == 0 { 0 } else { rng.i64(1..100) };
                                *slot = (slot.0 + step, time);
                                (e as u32 * PAGES + page, slot.0, time)
                            })
                            .collect()
                    });
                    me.pending = Some(points.clone());
                    shared.state.lock().unwrap()[e] = me.clone();
                    match try_post(addr, &export(&points, base_nanos)) {
                        Some(200) => {
                            let mut acknowledged = shared.acknowledged.lock().unwrap();
                            let mut answered = shared.answered.lock().unwrap();
                            for &(page, value, time) in &points {
                                let before = &mut acknowledged[e][(page % PAGES) as usize];
                                let secs = i64::try_from(time / 1_000_000_000).unwrap();
                                answered.push((page, secs, value - *before));
                                *before = value;
                            }
                            *shared.exports.lock().unwrap() += 1;
                            me.pending = None;
                            shared.state.lock().unwrap()[e] = me;
                        }
                        Some(429 | 503) | None => {
                            // Busy, or the process is gone: the same export again later.
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        Some(status) => panic!("unexpected answer {status} to an export"),
                    }
                }
            })
        })
        .collect()
}

#[test]
fn acknowledged_cumulative_exports_survive_kills_and_retries_count_once() {
    let kills = kills_from("DURABLE_OTLP_KILLS", 50);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut rig = runtime.block_on(Rig::new(Settings::default()));
    let shared = Arc::new(Exporters {
        state: Mutex::new(vec![
            Exporter {
                last: vec![(0, 0); PAGES as usize],
                ..Exporter::default()
            };
            EXPORTERS
        ]),
        acknowledged: Mutex::new(vec![vec![0; PAGES as usize]; EXPORTERS]),
        ..Exporters::default()
    });
    // Every stream starts before the first sidecar does: a point the table does not
    // know is then a baseline, so a table lost across a kill shows as a missing
    // difference, and one that ran ahead of the log as a difference counted twice.
    let base_nanos = u64::try_from(rig.base).unwrap() * 1_000_000_000;
    let configure = |config: &str, port: SocketAddr| {
        let durable = config
            .replace(
                "enabled = false\nlisten = \"127.0.0.1:4318\"",
                &format!("enabled = true\nlisten = \"{port}\""),
            )
            .replace(
                "otlp_streams.bin.\ndurable = false",
                "otlp_streams.bin.\ndurable = true",
            );
        assert!(
            durable.contains(&format!("listen = \"{port}\"")) && durable.contains("durable = true"),
            "the example has an [ingest.otlp_http] and an [ingest.otlp] to turn on"
        );
        durable
    };
    kill_runs(
        &mut rig,
        kills,
        31,
        &configure,
        "Listening for OTLP metrics",
        &mut |port, run, stop, drain| start_exporters(port, base_nanos, run, stop, drain, &shared),
    );
    assert!(
        shared
            .state
            .lock()
            .unwrap()
            .iter()
            .all(|e| e.pending.is_none()),
        "every export was answered in the end"
    );
    let answered = shared.answered.lock().unwrap();
    for &(page, at, delta) in answered.iter() {
        rig.model.feed(page, at, delta);
    }
    let exports = *shared.exports.lock().unwrap();
    assert!(exports > 50, "too few exports answered: {exports}");
    // Nothing answered was only in memory: no loss is allowed.
    rig.lost_bound = [0, 0];
    let findings = check(&rig);
    assert_eq!(
        findings.unexplained,
        [0, 0],
        "answered differences are missing or counted twice: {findings:?}"
    );
    eprintln!(
        "{} kills, {exports} exports answered, {findings:?}",
        rig.kills
    );
    runtime.block_on(rig.shutdown());
}
