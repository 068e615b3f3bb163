//! Socket tests of the receivers: temp dirs for Unix paths, port 0 for UDP. Shared here:
//! the recording handlers, configurations and helpers; the tests, by topic, in the
//! modules below.

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixDatagram, UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use super::client::{Client, Target};
use super::*;
use crate::config::ConfigError;
use crate::config::ingest::{IngestConfig, SocketMode};
use crate::vocabulary::Transport;

mod delivery;
mod errors_and_buffers;
mod lifecycle;
mod socket_files;
mod stream_framing;
mod tcp;

/// What the test handlers saw, shared by every handler of one `start`.
#[derive(Default)]
struct Seen {
    packets: Mutex<Vec<(Transport, Vec<u8>)>>,
    idles: AtomicUsize,
    handlers: AtomicUsize,
}

impl Seen {
    fn count(&self) -> usize {
        self.packets.lock().unwrap().len()
    }

    fn payloads(&self, transport: Transport) -> Vec<Vec<u8>> {
        let packets = self.packets.lock().unwrap();
        packets
            .iter()
            .filter(|(t, _)| *t == transport)
            .map(|(_, p)| p.clone())
            .collect()
    }
}

struct Recorder {
    transport: Transport,
    seen: Arc<Seen>,
    /// If set, the first `handle` waits for a message on it (to let the kernel queue fill).
    gate: Option<mpsc::Receiver<()>>,
}

impl PacketHandler for Recorder {
    fn handle(&mut self, packet: &[u8]) {
        if let Some(gate) = self.gate.take() {
            let _ = gate.recv_timeout(Duration::from_secs(10));
        }
        self.seen
            .packets
            .lock()
            .unwrap()
            .push((self.transport, packet.to_vec()));
    }

    fn idle(&mut self) {
        self.seen.idles.fetch_add(1, Ordering::SeqCst);
    }
}

fn recording(seen: &Arc<Seen>) -> impl Fn(Transport) -> Recorder + Send + Sync + 'static {
    let seen = Arc::clone(seen);
    move |transport| {
        seen.handlers.fetch_add(1, Ordering::SeqCst);
        Recorder {
            transport,
            seen: Arc::clone(&seen),
            gate: None,
        }
    }
}

/// A factory whose first handler blocks on its first packet until the returned sender fires.
fn gated(
    seen: &Arc<Seen>,
) -> (
    impl Fn(Transport) -> Recorder + Send + Sync + 'static,
    mpsc::Sender<()>,
) {
    let (tx, rx) = mpsc::channel();
    let rx = Mutex::new(Some(rx));
    let seen = Arc::clone(seen);
    let factory = move |transport| Recorder {
        transport,
        seen: Arc::clone(&seen),
        gate: rx.lock().unwrap().take(),
    };
    (factory, tx)
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn udp_only() -> IngestConfig {
    let mut config = IngestConfig::default();
    config.udp.listen = Some("127.0.0.1:0".parse().unwrap());
    config
}

fn unix_only(dir: &Path) -> IngestConfig {
    let mut config = IngestConfig::default();
    config.udp.listen = None;
    config.uds.path = Some(dir.join("dsd.sock"));
    config.uds_stream.path = Some(dir.join("dsd-stream.sock"));
    config
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

fn udp_sender(to: SocketAddr) -> UdpSocket {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.connect(to).unwrap();
    socket
}

fn mode_of(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

fn leftover_private_dirs(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(".cs"))
        .collect()
}

/// Every line handed on for `transport`, runs split at their newlines (a `\r` kept).
fn lines_of(seen: &Seen, transport: Transport) -> Vec<String> {
    let mut out = Vec::new();
    for run in seen.payloads(transport) {
        let text = String::from_utf8(run).unwrap();
        assert!(
            text.ends_with('\n'),
            "a run ends with its newline: {text:?}"
        );
        out.extend(text[..text.len() - 1].split('\n').map(str::to_owned));
    }
    out
}

/// Writes `bytes` in pieces of `chunk` bytes with a pause between them, so the receiver
/// sees reads that end inside lines.
fn write_in_pieces(stream: &mut impl Write, bytes: &[u8], chunk: usize) {
    for piece in bytes.chunks(chunk) {
        stream.write_all(piece).unwrap();
        stream.flush().unwrap();
        std::thread::sleep(Duration::from_micros(300));
    }
}
