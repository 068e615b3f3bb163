//! The OTLP listeners' bounds, served on a loopback port: a body that stops coming is
//! answered within the read timeout and counted, a connection over the bound is closed
//! and counted, and OTLP/gRPC advertises a bounded number of streams per connection.

use std::io::Write;
use std::time::Duration;

use super::tests::{Keep, shared};
use super::*;
use crate::ingest::async_listener::testing::{HANG, Running, post, read_to_close, wait_until};

/// A listener of `transport` with the given read timeout and connection bound, and its
/// counters.
fn listening(
    transport: Transport,
    read_timeout: Duration,
    max_connections: usize,
) -> (Running, Arc<IngestStats>) {
    let (running, shared) = listening_with(transport, read_timeout, max_connections, 32);
    (running, Arc::clone(&shared.stats))
}

/// A listener as [`listening`] makes, receiving at most `max_receiving` requests at once,
/// and what its requests share.
fn listening_with(
    transport: Transport,
    read_timeout: Duration,
    max_connections: usize,
    max_receiving: usize,
) -> (Running, Arc<Shared<Keep>>) {
    let shared = Arc::new(Shared {
        transport,
        read_timeout,
        max_connections,
        receiving: async_listener::Receiving::new(max_receiving),
        ..shared(Keep::default())
    });
    let kept = Arc::clone(&shared);
    let running = Running::start(move |listener, stopped| async move {
        match transport {
            Transport::OtlpGrpc => grpc::serve(listener, shared, stopped)
                .await
                .map_err(|e| e.to_string()),
            _ => http::serve(listener, shared, stopped)
                .await
                .map_err(|e| e.to_string()),
        }
    });
    (running, kept)
}

/// OTLP/HTTP: a request whose body stops coming is answered 408 (a `google.rpc.Status`,
/// `DEADLINE_EXCEEDED`) once the read timeout has passed, counted, and its connection
/// closed.
#[test]
fn otlp_http_answers_a_stalled_body_408() {
    let (running, stats) = listening(Transport::OtlpHttp, Duration::from_millis(200), 4);
    let mut client = running.connect();
    client
        .write_all(
            b"POST /v1/metrics HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"resourceMetrics\":",
        )
        .unwrap();
    let answer = String::from_utf8_lossy(&read_to_close(&mut client)).into_owned();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains(r#""code":4"#), "{answer}");
    let counters = stats.transport(Transport::OtlpHttp);
    assert_eq!((counters.timed_out, counters.packets), (1, 1));
}

/// OTLP/HTTP: a request received while the listener reads its most requests at once
/// waits for one of them to finish: here, for the stalled one's 408.
#[test]
fn otlp_http_reads_at_most_its_bound_of_requests_at_once() {
    let (running, shared) = listening_with(Transport::OtlpHttp, Duration::from_millis(300), 4, 1);
    let mut stalled = running.connect();
    stalled
        .write_all(
            b"POST /v1/metrics HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
        )
        .unwrap();
    wait_until("the stalled request holds the only place", || {
        shared.receiving.free() == 0
    });
    let mut next = running.connect();
    let ok = post(&mut next, http::PATH, "application/json", b"{}");
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert_eq!(
        shared.stats.transport(Transport::OtlpHttp).timed_out,
        1,
        "answered only once the stalled request gave its place back"
    );
    let answer = String::from_utf8_lossy(&read_to_close(&mut stalled)).into_owned();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
}

/// OTLP/HTTP: with its most connections open, a new one is closed at once and counted.
#[test]
fn otlp_http_refuses_the_connection_over_the_bound() {
    let (running, stats) = listening(Transport::OtlpHttp, async_listener::READ_TIMEOUT, 1);
    let mut first = running.connect();
    let ok = post(&mut first, http::PATH, "application/json", b"{}");
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    let mut second = running.connect();
    assert_eq!(read_to_close(&mut second), b"");
    wait_until("the refusal counted", || {
        stats.transport(Transport::OtlpHttp).connections_refused == 1
    });
    let counters = stats.transport(Transport::OtlpHttp);
    assert_eq!(
        (counters.connections_accepted, counters.connections_open),
        (1, 1)
    );
}

/// An `Export` call's request head, for an h2 client.
fn export_call(addr: std::net::SocketAddr) -> tonic::codegen::http::Request<()> {
    tonic::codegen::http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}{EXPORT_PATH}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap()
}

/// OTLP/gRPC: the server's SETTINGS bound the streams of a connection (tonic's default
/// is none), and a call that sends part of its message and stalls is answered
/// `DEADLINE_EXCEEDED` once the read timeout has passed, and counted.
#[test]
fn otlp_grpc_bounds_streams_and_answers_a_stalled_message() {
    let (running, stats) = listening(Transport::OtlpGrpc, Duration::from_millis(200), 4);
    let addr = running.addr;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (max_streams, status) = runtime.block_on(async move {
        let call = async move {
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (mut client, mut connection) = h2::client::handshake(tcp).await.unwrap();
            let (response, mut body) = client.send_request(export_call(addr), false).unwrap();
            // A message of 100 bytes announced (gRPC's 5-byte prefix), 3 sent.
            body.send_data(
                bytes::Bytes::from_static(&[0, 0, 0, 0, 100, 1, 2, 3]),
                false,
            )
            .unwrap();
            let response = tokio::select! {
                response = response => response.unwrap(),
                ended = &mut connection => panic!("the connection ended first: {ended:?}"),
            };
            let status = response
                .headers()
                .get("grpc-status")
                .map(|v| v.to_str().unwrap().to_owned());
            (connection.max_concurrent_send_streams(), status)
        };
        tokio::time::timeout(HANG, call)
            .await
            .expect("answered within the hang bound")
    });
    assert_eq!(max_streams, grpc::MAX_CONCURRENT_STREAMS as usize);
    assert_eq!(status.as_deref(), Some("4"), "DEADLINE_EXCEEDED");
    let counters = stats.transport(Transport::OtlpGrpc);
    assert_eq!((counters.timed_out, counters.malformed), (1, 0));
}

/// OTLP/gRPC: a call over the listener's places is refused busy at once
/// (`RESOURCE_EXHAUSTED`, retried by exporters) rather than left waiting unread beside
/// the calls that hold them; here the only place is held by a stalled call.
#[test]
fn otlp_grpc_refuses_a_call_over_its_places_as_busy() {
    let (running, shared) = listening_with(Transport::OtlpGrpc, async_listener::READ_TIMEOUT, 4, 1);
    let addr = running.addr;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let waiting = Arc::clone(&shared);
    let status = runtime.block_on(async move {
        let call = async move {
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (mut client, connection) = h2::client::handshake(tcp).await.unwrap();
            tokio::spawn(connection);
            // A message of 100 bytes announced, 3 sent: it holds the place.
            let (_stalled, mut body) = client.send_request(export_call(addr), false).unwrap();
            body.send_data(
                bytes::Bytes::from_static(&[0, 0, 0, 0, 100, 1, 2, 3]),
                false,
            )
            .unwrap();
            while waiting.receiving.free() > 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let mut client = client.ready().await.unwrap();
            let (response, mut body) = client.send_request(export_call(addr), false).unwrap();
            body.send_data(bytes::Bytes::from_static(&[0, 0, 0, 0, 0]), true)
                .unwrap();
            let response = response.await.unwrap();
            let grpc_status = |map: &tonic::codegen::http::HeaderMap| {
                map.get("grpc-status")
                    .map(|v| v.to_str().unwrap().to_owned())
            };
            match grpc_status(response.headers()) {
                Some(status) => Some(status),
                None => {
                    let mut body = response.into_body();
                    while body.data().await.is_some() {}
                    body.trailers()
                        .await
                        .unwrap()
                        .as_ref()
                        .and_then(grpc_status)
                }
            }
        };
        tokio::time::timeout(HANG, call)
            .await
            .expect("answered within the hang bound")
    });
    assert_eq!(status.as_deref(), Some("8"), "RESOURCE_EXHAUSTED");
    let counters = shared.stats.transport(Transport::OtlpGrpc);
    assert_eq!((counters.busy, counters.timed_out), (1, 0));
}

/// OTLP/gRPC: with its most connections open, a new one is closed at once and counted.
#[test]
fn otlp_grpc_refuses_the_connection_over_the_bound() {
    let (running, stats) = listening(Transport::OtlpGrpc, async_listener::READ_TIMEOUT, 1);
    let _first = running.connect();
    wait_until("the first connection admitted", || {
        stats.transport(Transport::OtlpGrpc).connections_open == 1
    });
    let mut second = running.connect();
    read_to_close(&mut second);
    wait_until("the refusal counted", || {
        stats.transport(Transport::OtlpGrpc).connections_refused == 1
    });
    assert_eq!(stats.transport(Transport::OtlpGrpc).connections_accepted, 1);
}
