//! Hot keys: the rows each writer sends to most (`/debug/hot`), the shard advice summed
//! over a fleet, and the per-table write latency and error-kind metrics.

use countersink::vocabulary::Transport;
use std::sync::Arc;
use std::time::Duration;

use countersink::engine::Engine;
use countersink::flush::Flusher;
use countersink::sink::cql::CqlSink;
use countersink::telemetry::{HotKeys, HotReport, ObservedSink, OperationsMetrics};

use crate::common::{
    T0, cli_stdout, config, http_get, metrics_when, sidecar_config, start_cqlsim, start_sidecar,
};

/// Three writers flush a synthetic hot key 20 times each within one minute (time is
/// passed in) and a cold key once. Summed over the three `/debug/hot` reports the hot
/// key took 60 writes in that minute, 1 per second; at a safe rate of 0.15 writes per
/// second per key that needs ceil(6.67) = 7 shards, and the advice is the next power of
/// two, 8.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advise_shards_sums_a_fleet_and_rounds_up_to_a_power_of_two() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    let server = start_cqlsim(&mut config, "injects store faults")
        .await
        .into_sim();
    let now = T0 - 7200;
    let mut files = Vec::new();
    for w in 0..3 {
        let mut c = config.clone();
        c.state.dir = dir.path().join(format!("w{w}"));
        let engine = Arc::new(Engine::with_seed(&c, Some(w)).unwrap());
        let hot = Arc::new(HotKeys::new(engine.families(), HotKeys::DEFAULT_CAPACITY));
        let sink = CqlSink::connect(&c.store, engine.families()).await.unwrap();
        let sink = ObservedSink::new(
            sink,
            engine.families(),
            OperationsMetrics::default(),
            hot.clone(),
        );
        let mut flusher = Flusher::open(engine.clone(), Arc::new(sink), &c).unwrap();
        engine
            .record("page.views", &[("page_id", "cold")][..], 1, now, None)
            .unwrap();
        for i in 0..20 {
            engine
                .record("page.views", &[("page_id", "hot")][..], 100, now + i, None)
                .unwrap();
            flusher.flush_now().await;
        }
        let report = hot.report(20);
        assert_eq!(report.by_writes[0].key, ["hot"]);
        assert_eq!(report.by_writes[0].writes, 20);
        assert_eq!(report.by_delta[0].delta, 2000);
        let file = dir.path().join(format!("hot{w}.json"));
        std::fs::write(&file, serde_json::to_string(&report).unwrap()).unwrap();
        files.push(file);
    }
    let mut args = vec!["advise-shards", "--safe-rate", "0.15", "--format", "json"]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
    for file in &files {
        args.extend(["--from".into(), file.display().to_string()]);
    }
    let out: serde_json::Value = serde_json::from_str(&cli_stdout(&args)).unwrap();
    let views = &out[0];
    assert_eq!(views["family"], "views");
    assert_eq!(views["peak"]["key"][0], "hot");
    assert_eq!(views["peak"]["writes_per_minute"], 60);
    assert_eq!(views["needed"], 7);
    assert_eq!(views["shards"], 8);
    // One sidecar alone sees a third of the load: 20 writes a minute, 3 shards needed.
    let one = cli_stdout([
        "advise-shards",
        "--safe-rate",
        "0.15",
        "--from",
        &files[0].display().to_string(),
    ]);
    assert!(one.starts_with("views: shards = 4 "), "{one}");
    let bad = crate::common::run_cli(["advise-shards", "--safe-rate", "0", "--from", "x"]);
    assert_eq!(bad.status.code(), Some(2));
    server.shutdown().await.unwrap();
}

/// The sidecar serves `/debug/hot` as JSON, `advise-shards` reads it over HTTP, and
/// `/metrics` shows write latency per table and failures by error kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sidecar_serves_hot_keys_and_per_table_write_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = sidecar_config(dir.path());
    config.flush.interval = Duration::from_millis(200);
    config.flush.jitter = Duration::from_millis(10);
    let server = start_cqlsim(&mut config, "injects store faults")
        .await
        .into_sim();
    server.set_faults(vec![
        "write-timeout,applied=yes,table=metrics.views_by_day,max=1"
            .parse()
            .unwrap(),
    ]);
    let sidecar = start_sidecar(&config).await;
    let bound = sidecar.bound();
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .send_to(
            b"page.views:7|c|#page_id:home\npage.views:1|c|#page_id:about",
            bound.inet(Transport::Udp).unwrap(),
        )
        .unwrap();
    let addr = bound.metrics.unwrap();
    let minute_writes =
        "countersink_cql_write_duration_seconds_count{table=\"metrics.views_by_minute\"} 2";
    let metrics = metrics_when(addr, |text| {
        text.contains("countersink_cql_write_errors_total{kind=\"write_timeout\",table=\"metrics.views_by_day\"} 1")
            && text.contains(minute_writes)
    })
    .await;
    assert!(
        metrics.contains(
            "countersink_cql_write_duration_seconds_count{table=\"countersink.counts_by_day\"} 0"
        ),
        "every table shown from the start: {metrics}"
    );
    let (status, body) = http_get(addr, "/debug/hot?k=1");
    assert_eq!(status, 200);
    let report: HotReport = serde_json::from_str(&body).unwrap();
    assert_eq!(report.by_delta.len(), 1);
    assert_eq!(
        (report.by_delta[0].key.clone(), report.by_delta[0].delta),
        (vec!["home".to_string()], 7)
    );
    let advice = cli_stdout([
        "advise-shards",
        "--safe-rate",
        "100",
        "--from",
        &format!("http://{addr}"),
    ]);
    assert!(advice.starts_with("views: shards = 1 "), "{advice}");
    sidecar.shutdown().await.unwrap();
    server.shutdown().await.unwrap();
}
