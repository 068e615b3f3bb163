//! Operating the sidecar: a start that survives a store answering badly for a moment,
//! and readiness that means writes can be routed.

use std::time::Duration;

use cqlsim::{FaultKind, FaultRule, Op};

use crate::common::{http_get, sidecar_config, start_cqlsim, wait_ready};

/// A PREPARE that fails because the store is overloaded is retried like a connection
/// failure (it used to stop the sidecar with the bad-configuration exit code).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_prepare_failures_at_start_are_retried() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = sidecar_config(dir.path());
    let server = start_cqlsim(&mut config, "injects PREPARE faults")
        .await
        .into_sim();
    server.add_fault(FaultRule::new(FaultKind::Overloaded).op(Op::Prepare).max(2));
    let sidecar = countersink::sidecar::Sidecar::start(&config).await.unwrap();
    wait_ready(&sidecar).await;
    assert_eq!(sidecar.fatal_reason(), None);
    assert_eq!(server.stats().fault(FaultKind::Overloaded).fired, 2);
    sidecar.shutdown().await;
    server.shutdown().await.unwrap();
}

/// With `store.local_dc` naming a data centre no node is in, DC-aware routing sends
/// every write nowhere (`EmptyPlan`): not ready, and `/readyz` says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_waits_for_a_node_of_the_local_dc() {
    for (local_dc, ready) in [("elsewhere", false), ("datacenter1", true)] {
        let dir = tempfile::tempdir().unwrap();
        let mut config = sidecar_config(dir.path());
        config.store.local_dc = Some(local_dc.into());
        let server = start_cqlsim(&mut config, "relies on cqlsim's data centre name")
            .await
            .into_sim();
        let sidecar = countersink::sidecar::Sidecar::start(&config).await.unwrap();
        let metrics = sidecar.bound().metrics.unwrap();
        // The session is up within this time in every other test.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let (status, body) = http_get(metrics, "/readyz");
        if ready {
            wait_ready(&sidecar).await;
            assert_eq!(http_get(metrics, "/readyz").0, 200);
        } else {
            assert_eq!(status, 503, "{body}");
            assert!(
                body.contains("`elsewhere`") && body.contains("datacenter1"),
                "{body}"
            );
            assert!(!sidecar.is_ready());
        }
        sidecar.shutdown().await;
        server.shutdown().await.unwrap();
    }
}

/// A configuration that lets countersink write more to its state directory than the
/// directory's filesystem holds (a spill of 1 PiB) is refused by `serve --strict`, before
/// it connects, with the figures; `state-size` prints the bound it checks, part by part.
#[test]
fn serve_strict_refuses_a_state_directory_too_small_for_the_configuration() {
    use crate::common::{cli_stdout, run_cli};
    const PIB: u64 = 1 << 50;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("countersink.toml");
    std::fs::write(
        &config,
        format!(
            "[state]\ndir = \"{}\"\nmax_spill_bytes = {PIB}\n",
            dir.path().join("state").display()
        ),
    )
    .unwrap();
    let sizes: serde_json::Value = serde_json::from_str(&cli_stdout([
        "state-size",
        "--config",
        config.to_str().unwrap(),
        "--json",
    ]))
    .unwrap();
    let (total, free) = (
        sizes["total"].as_u64().unwrap(),
        sizes["free"].as_u64().unwrap(),
    );
    assert_eq!(sizes["spill"].as_u64(), Some(PIB));
    assert_eq!(
        total,
        [
            "spill",
            "logs",
            "journal",
            "small_files",
            "otlp_streams",
            "ingest_log"
        ]
        .iter()
        .map(|part| sizes[part].as_u64().unwrap())
        .sum::<u64>()
    );
    assert!(free < total, "no disk here holds a PiB: {sizes}");
    assert_eq!(sizes["otlp_streams"].as_u64(), Some(0), "no OTLP receiver");
    // With a receiver on, the stream table's file counts: itself, its temporary copy
    // while it is replaced, and one set aside as corrupt; the table holds up to twice
    // `max_streams` streams, 40 bytes each.
    let otlp = dir.path().join("otlp.toml");
    std::fs::write(
        &otlp,
        format!(
            "[state]\ndir = \"{}\"\n[ingest.otlp_http]\nenabled = true\n[ingest.otlp]\nmax_streams = 1000\n",
            dir.path().join("state").display()
        ),
    )
    .unwrap();
    let with_otlp: serde_json::Value = serde_json::from_str(&cli_stdout([
        "state-size",
        "--config",
        otlp.to_str().unwrap(),
        "--json",
    ]))
    .unwrap();
    assert_eq!(
        with_otlp["otlp_streams"].as_u64(),
        Some(3 * (44 + 80 * 1000))
    );
    assert_eq!(sizes["ingest_log"].as_u64(), Some(0), "no durable listener");
    // With a durable HTTP listener, the ingest log and its kept keys count.
    let durable = dir.path().join("durable.toml");
    std::fs::write(
        &durable,
        format!(
            "[state]\ndir = \"{}\"\nmax_ingest_log_bytes = 1000000\n[ingest.http]\nenabled = true\ndurable = true\nmax_idempotency_keys = 10\n",
            dir.path().join("state").display()
        ),
    )
    .unwrap();
    let with_log: serde_json::Value = serde_json::from_str(&cli_stdout([
        "state-size",
        "--config",
        durable.to_str().unwrap(),
        "--json",
    ]))
    .unwrap();
    assert_eq!(
        with_log["ingest_log"].as_u64(),
        Some(2 * 1_000_000 + 2 * 10 * 1400)
    );
    let out = run_cli([
        "serve",
        "--config",
        config.to_str().unwrap(),
        "--strict",
        "--udp",
        "off",
        "--metrics",
        "off",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("refused: --strict") && stderr.contains("state.max_spill_bytes"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("state").exists(),
        "refused before the state directory is opened"
    );
}

/// A log filter that does not parse stops `serve` with exit code 2 and says where it
/// came from, instead of running with a filter nobody asked for.
#[test]
fn a_log_filter_that_does_not_parse_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("countersink.toml");
    std::fs::write(
        &config,
        format!(
            "[log]\nfilter = \"countersink=loud\"\n[state]\ndir = \"{}\"\n",
            dir.path().join("state").display()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(crate::common::BIN)
        .args(["serve", "--config", config.to_str().unwrap()])
        .args(["--udp", "off", "--metrics", "off"])
        .env_remove("COUNTERSINK_LOG")
        .env_remove("RUST_LOG")
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("log.filter \"countersink=loud\""),
        "{stderr}"
    );
}
