//! Durable OTLP receivers (`ingest.otlp.durable`): an export is answered once its
//! increments, and each cumulative stream's last point, are in the ingest log; the
//! stream table lives there (`ingest.streams.jsonl`) instead of `otlp_streams.bin`, and
//! switching the setting either way on the same state directory keeps every stream
//! exact (the crash suite's `crash::durable_otlp` kills the process under load).

use std::collections::BTreeMap;

use countersink::vocabulary::Transport;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::metrics::v1::AggregationTemporality;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value;

use super::restart::send;
use super::{now_nanos, otlp_config, point, request, store_totals, sum};
use crate::common::{start_sidecar, start_store};

/// Stream `a` over four starts, not durable, durable, durable, not durable: 5, 12 | 20,
/// `b` 3 | 25 (+5 only if the table outlived the restart: else a baseline), 25 again
/// (a retry: +0), `c` 4 over gRPC (whole: started after the first start, which the
/// kept table's mark remembers) | 30. Each start merges the table the other mode kept;
/// the store holds each stream's last value exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cumulative_streams_stay_exact_across_durable_and_plain_starts() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = otlp_config(dir.path());
    let store = start_store(&mut config).await;
    let s = 1_000_000_000u64;
    let bin = dir.path().join("otlp_streams.bin");
    let kept = dir.path().join("ingest.streams.jsonl");

    let plain = start_sidecar(&config).await;
    let start = now_nanos();
    let http = plain.bound().inet(Transport::OtlpHttp).unwrap();
    send(http, "a", start, start + s, 5);
    send(http, "a", start, start + 2 * s, 12);
    plain.shutdown().await.unwrap();
    assert!(bin.exists());

    let mut durable_config = config.clone();
    durable_config.ingest.otlp.durable = true;
    let durable = start_sidecar(&durable_config).await;
    assert!(
        !bin.exists(),
        "a durable start moves the table into the ingest log"
    );
    assert!(kept.exists());
    let http = durable.bound().inet(Transport::OtlpHttp).unwrap();
    send(http, "a", start, start + 3 * s, 20);
    send(http, "b", start + 1, start + 3 * s, 3);
    let log = std::fs::read_to_string(dir.path().join("ingest.log")).unwrap();
    assert!(
        log.contains("\"stream\":") && log.contains("\"d\":8"),
        "answered once in the ingest log: {log}"
    );
    durable.shutdown().await.unwrap();

    let durable = start_sidecar(&durable_config).await;
    let http = durable.bound().inet(Transport::OtlpHttp).unwrap();
    send(http, "a", start, start + 4 * s, 25);
    send(http, "a", start, start + 4 * s, 25);
    let grpc = durable.bound().inet(Transport::OtlpGrpc).unwrap();
    let mut client = MetricsServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();
    let answer = client
        .export(request(vec![sum(
            AggregationTemporality::Cumulative,
            vec![point(start + 1, start + 4 * s, Value::AsInt(4), "c")],
        )]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.partial_success, None);
    durable.shutdown().await.unwrap();

    let plain = start_sidecar(&config).await;
    assert!(
        !kept.exists(),
        "a start that is not durable takes the table back"
    );
    assert!(bin.exists());
    let http = plain.bound().inet(Transport::OtlpHttp).unwrap();
    send(http, "a", start, start + 5 * s, 30);

    let totals = |via: &str, value: i64| {
        (
            (
                "otlp.orders".to_string(),
                format!("service.name:shop,via:{via}"),
            ),
            value,
        )
    };
    let expected = BTreeMap::from([totals("a", 30), totals("b", 3), totals("c", 4)]);
    // What the durable starts logged reaches the store through the spill's replay, a
    // flush round or more after this start.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut held = store_totals(&store).await;
    while held.iter().any(|table| *table != expected) && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        held = store_totals(&store).await;
    }
    plain.shutdown().await.unwrap();
    for table in held {
        assert_eq!(table, expected);
    }
    // Nothing more arrives after (no row replayed twice).
    for table in store_totals(&store).await {
        assert_eq!(table, expected);
    }
    store.shutdown().await;
}
