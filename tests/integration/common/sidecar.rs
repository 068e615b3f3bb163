//! The sidecar in this process: configured on free ports, started, ready; its HTTP side.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use countersink::config::Config;
use countersink::sidecar::Sidecar;

use super::config;

/// [`config`] with every receiver on (UDP on a free port, both Unix sockets in `dir`)
/// and the HTTP endpoint on a free port.
pub(crate) fn sidecar_config(dir: &Path) -> Config {
    let mut config = config(dir);
    config.ingest.udp.listen = Some("127.0.0.1:0".parse().unwrap());
    config.ingest.uds.path = Some(dir.join("dgram.sock"));
    config.ingest.uds_stream.path = Some(dir.join("stream.sock"));
    config.metrics.listen = Some("127.0.0.1:0".parse().unwrap());
    config
}

/// Starts a sidecar and waits until it is connected to the store.
pub(crate) async fn start_sidecar(config: &Config) -> Sidecar {
    let sidecar = Sidecar::start(config).await.expect("the sidecar starts");
    wait_ready(&sidecar).await;
    sidecar
}

/// Waits until the sidecar is connected to the store and has checked its tables.
pub(crate) async fn wait_ready(sidecar: &Sidecar) {
    for _ in 0..100 {
        if sidecar.is_ready() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the sidecar never became ready");
}

/// Polls `/metrics` until `done` holds (the receive threads run on their own schedule).
pub(crate) async fn metrics_when(addr: SocketAddr, done: impl Fn(&str) -> bool) -> String {
    for _ in 0..200 {
        let (_, text) = http_get(addr, "/metrics");
        if done(&text) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "metrics never reached the expected state:\n{}",
        http_get(addr, "/metrics").1
    );
}

/// A plain HTTP/1.1 GET: the status code and the body.
pub(crate) fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}
