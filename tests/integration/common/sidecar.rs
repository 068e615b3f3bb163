//! The sidecar in this process: configured on free ports, started, ready; its HTTP side.

use std::io::{Read, Write};
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

/// An address nobody listens on (a free port, bound and let go): a store that is not there.
pub(crate) fn unused_address() -> SocketAddr {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    free.local_addr().unwrap()
}

/// Starts a sidecar whose store is not there, so nothing leaves its buffer; its shutdown
/// deadline is made short (its last flush can never land).
pub(crate) async fn start_sidecar_without_store(config: &mut Config) -> Sidecar {
    config.store.contact_points = vec![unused_address().to_string()];
    config.flush.shutdown_deadline = Duration::from_secs(1);
    Sidecar::start(config)
        .await
        .expect("the sidecar starts without its store")
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

/// Checks a receiver whose `max_connections` is 1: with one connection held open (and
/// counted accepted), one more is closed at once without an answer and counted refused.
/// Returns the held connection (the caller decides when it goes).
pub(crate) async fn assert_one_connection_held(
    bound: &countersink::sidecar::Bound,
    transport: countersink::vocabulary::Transport,
) -> std::net::TcpStream {
    let addr = bound.inet(transport).unwrap();
    let metrics = bound.metrics.unwrap();
    let held = std::net::TcpStream::connect(addr).unwrap();
    let accepted = format!(
        "countersink_stream_connections_total{{result=\"accepted\",transport=\"{transport}\"}} 1"
    );
    metrics_when(metrics, |text| text.lines().any(|l| l == accepted)).await;
    let mut over = std::net::TcpStream::connect(addr).unwrap();
    over.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut buf = [0u8; 64];
    let closed = match over.read(&mut buf) {
        Ok(n) => n == 0,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    };
    assert!(
        closed,
        "{transport}: the connection over the bound is closed"
    );
    let refused = format!(
        "countersink_stream_connections_total{{result=\"refused\",transport=\"{transport}\"}} 1"
    );
    metrics_when(metrics, |text| text.lines().any(|l| l == refused)).await;
    held
}

/// A plain HTTP/1.1 GET: the status code and the body.
pub(crate) fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let (status, _, body) = read_response(&mut stream);
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// A plain HTTP/1.1 POST of `body` to `path` with `headers` (the length is set here):
/// the status, the response head in lower case, and the body (de-chunked).
pub(crate) fn http_post(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    // A server may answer (413) before reading the whole body and close.
    let _ = stream.write_all(body);
    read_response(&mut stream)
}

/// Reads an HTTP/1.1 response to its end (the request said `Connection: close`): the
/// status, the head in lower case, and the body (de-chunked).
pub(crate) fn read_response(stream: &mut std::net::TcpStream) -> (u16, String, Vec<u8>) {
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&response[..split]).to_ascii_lowercase();
    let status = head[9..12].parse().unwrap();
    let mut body = response[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    (status, head, body)
}

/// The data of a chunked body.
fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&data[..line_end]).unwrap().trim(), 16)
                .unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[line_end + 2..line_end + 2 + size]);
        data = &data[line_end + 2 + size + 2..];
    }
}
