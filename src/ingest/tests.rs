//! Socket tests of the receivers: temp dirs for Unix paths, port 0 for UDP.

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

// ---------------------------------------------------------------------------------------
// Packets arrive intact

#[test]
fn udp_datagrams_arrive_intact_with_recv_and_recvmmsg() {
    for batch_size in [1, 32] {
        let seen = Arc::new(Seen::default());
        let mut config = udp_only();
        config.udp.batch_size = batch_size;
        let receivers = start(&config, recording(&seen)).unwrap();
        let sender = udp_sender(receivers.inet(Transport::Udp).unwrap());
        let big = vec![b'x'; 65_000];
        let sent: Vec<Vec<u8>> = vec![
            b"a:1|c".to_vec(),
            b"b:2|c\nc:3|c\r\nd:4|c".to_vec(),
            big,
            b"e:5|c|#k:v".to_vec(),
        ];
        for packet in &sent {
            sender.send(packet).unwrap();
        }
        wait_until("4 udp packets", || seen.count() == 4);
        assert_eq!(
            seen.payloads(Transport::Udp),
            sent,
            "batch_size {batch_size}"
        );
        let stats = receivers.stats().transport(Transport::Udp);
        assert_eq!(stats.packets, 4);
        assert_eq!(
            stats.bytes,
            sent.iter().map(|p| p.len() as u64).sum::<u64>()
        );
        assert_eq!(stats.truncated, 0);
        receivers.shutdown();
    }
}

#[test]
fn unix_datagrams_arrive_intact_and_oversized_ones_are_dropped_whole() {
    for batch_size in [1, 32] {
        let dir = tempfile::tempdir().unwrap();
        let seen = Arc::new(Seen::default());
        let mut config = unix_only(dir.path());
        config.uds.batch_size = batch_size;
        let receivers = start(&config, recording(&seen)).unwrap();
        let sender = UnixDatagram::unbound().unwrap();
        sender
            .connect(receivers.path(Transport::UnixDatagram).unwrap())
            .unwrap();
        sender.send(b"a:1|c").unwrap();
        // Longer than the 64 KiB receive slot: must be counted, not delivered in part.
        sender.send(&vec![b'y'; MAX_DATAGRAM_BYTES + 100]).unwrap();
        sender.send(&vec![b'z'; MAX_DATAGRAM_BYTES]).unwrap();
        sender.send(b"b:2|c").unwrap();
        wait_until("3 uds packets", || seen.count() == 3);
        let stats = receivers.stats();
        wait_until("truncation counted", || {
            stats.transport(Transport::UnixDatagram).truncated == 1
        });
        let got = seen.payloads(Transport::UnixDatagram);
        assert_eq!(got.len(), 3, "batch_size {batch_size}");
        assert_eq!(got[0], b"a:1|c");
        assert_eq!(got[1], vec![b'z'; MAX_DATAGRAM_BYTES]);
        assert_eq!(got[2], b"b:2|c");
        assert_eq!(stats.transport(Transport::UnixDatagram).packets, 3);
        receivers.shutdown();
    }
}

#[test]
fn unix_stream_several_messages_in_one_write_and_one_message_over_many_writes() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Seen::default());
    let receivers = start(&unix_only(dir.path()), recording(&seen)).unwrap();
    let mut stream = UnixStream::connect(receivers.path(Transport::UnixStream).unwrap()).unwrap();

    let mut batch = frame(b"a:1|c");
    batch.extend(frame(b"b:2|c\nc:3|c"));
    batch.extend(frame(b"d:4|c"));
    stream.write_all(&batch).unwrap();

    let long = vec![b'q'; 20_000];
    let split = frame(&long);
    for chunk in split.chunks(997) {
        stream.write_all(chunk).unwrap();
        stream.flush().unwrap();
        std::thread::sleep(Duration::from_micros(200));
    }
    // The prefix itself split across writes.
    let tail = frame(b"e:5|c");
    stream.write_all(&tail[..2]).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    stream.write_all(&tail[2..]).unwrap();

    wait_until("5 stream messages", || seen.count() == 5);
    let got = seen.payloads(Transport::UnixStream);
    let expected: Vec<Vec<u8>> = vec![
        b"a:1|c".to_vec(),
        b"b:2|c\nc:3|c".to_vec(),
        b"d:4|c".to_vec(),
        long,
        b"e:5|c".to_vec(),
    ];
    assert_eq!(got, expected);
    drop(stream);
    let stats = receivers.stats();
    wait_until("connection closed", || {
        stats.transport(Transport::UnixStream).connections_open == 0
    });
    let snapshot = stats.transport(Transport::UnixStream);
    assert_eq!(snapshot.packets, 5);
    assert_eq!(snapshot.connections_accepted, 1);
    assert_eq!(snapshot.partial, 0);
    receivers.shutdown();
}

#[test]
fn unix_stream_oversized_message_is_counted_and_closes_the_connection() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Seen::default());
    let mut config = unix_only(dir.path());
    config.uds_stream.max_message_bytes = 1000;
    let receivers = start(&config, recording(&seen)).unwrap();
    let mut stream = UnixStream::connect(receivers.path(Transport::UnixStream).unwrap()).unwrap();
    stream.write_all(&frame(b"ok:1|c")).unwrap();
    stream.write_all(&frame(&[b'x'; 1000])).unwrap(); // exactly the limit: accepted
    // Announces 4 GiB: must be refused from the prefix alone, without allocating.
    stream.write_all(&u32::MAX.to_le_bytes()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 16];
    let closed = matches!(stream.read(&mut buf), Ok(0) | Err(_));
    assert!(closed, "the receiver must close the connection");
    let stats = receivers.stats();
    wait_until("oversized counted", || {
        stats.transport(Transport::UnixStream).oversized == 1
    });
    assert_eq!(seen.count(), 2);
    // The next connection is served normally.
    let mut again = UnixStream::connect(receivers.path(Transport::UnixStream).unwrap()).unwrap();
    again.write_all(&frame(b"after:1|c")).unwrap();
    wait_until("message on a new connection", || seen.count() == 3);
    receivers.shutdown();
}

#[test]
fn unix_stream_partial_message_at_eof_is_counted_not_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Seen::default());
    let receivers = start(&unix_only(dir.path()), recording(&seen)).unwrap();
    let mut stream = UnixStream::connect(receivers.path(Transport::UnixStream).unwrap()).unwrap();
    stream.write_all(&frame(b"whole:1|c")).unwrap();
    stream.write_all(&frame(b"cut:1|c")[..7]).unwrap();
    drop(stream);
    let stats = receivers.stats();
    wait_until("partial counted", || {
        stats.transport(Transport::UnixStream).partial == 1
    });
    assert_eq!(
        seen.payloads(Transport::UnixStream),
        vec![b"whole:1|c".to_vec()]
    );
    receivers.shutdown();
}

#[test]
fn unix_stream_connections_over_the_limit_are_refused_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Seen::default());
    let mut config = unix_only(dir.path());
    config.uds_stream.max_connections = 1;
    let receivers = start(&config, recording(&seen)).unwrap();
    let path = receivers.path(Transport::UnixStream).unwrap().to_owned();
    let stats = receivers.stats();
    let mut first = UnixStream::connect(&path).unwrap();
    first.write_all(&frame(b"first:1|c")).unwrap();
    wait_until("first served", || seen.count() == 1);

    let mut second = UnixStream::connect(&path).unwrap();
    second
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 4];
    assert!(
        matches!(second.read(&mut buf), Ok(0) | Err(_)),
        "second connection must be closed"
    );
    wait_until("refusal counted", || {
        stats.transport(Transport::UnixStream).connections_refused == 1
    });

    drop(first);
    wait_until("first closed", || {
        stats.transport(Transport::UnixStream).connections_open == 0
    });
    let mut third = UnixStream::connect(&path).unwrap();
    third.write_all(&frame(b"third:1|c")).unwrap();
    wait_until("third served", || seen.count() == 2);
    assert_eq!(
        stats.transport(Transport::UnixStream).connections_accepted,
        2
    );
    receivers.shutdown();
}

#[test]
fn client_reaches_every_transport_and_packs_lines() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Seen::default());
    let mut config = unix_only(dir.path());
    config.udp.listen = Some("127.0.0.1:0".parse().unwrap());
    let receivers = start(&config, recording(&seen)).unwrap();
    let lines: Vec<String> = (0..100)
        .map(|i| format!("page.views:{i}|c|#page:p{i}"))
        .collect();
    let targets = [
        Target::Udp(receivers.inet(Transport::Udp).unwrap()),
        Target::UnixDatagram(receivers.path(Transport::UnixDatagram).unwrap().to_owned()),
        Target::UnixStream(receivers.path(Transport::UnixStream).unwrap().to_owned()),
    ];
    for target in targets {
        let transport = target.transport();
        let mut client = Client::connect(target).unwrap().with_max_payload(512);
        let report = client.send_lines(&lines).unwrap();
        assert_eq!(report.lines, 100);
        assert!(report.packets > 1 && report.packets < 100, "{report:?}");
        wait_until("all packets of the client", || {
            seen.payloads(transport).len() == report.packets
        });
        let joined: Vec<u8> = seen.payloads(transport).join(&b'\n');
        assert_eq!(joined, lines.join("\n").into_bytes(), "{transport}");
        assert!(seen.payloads(transport).iter().all(|p| p.len() <= 512));
    }
    receivers.shutdown();
}

// ---------------------------------------------------------------------------------------
// Unix socket file rules

#[test]
fn socket_file_mode_is_exactly_the_configured_one() {
    for bits in [0o600, 0o660, 0o622, 0o666] {
        let dir = tempfile::tempdir().unwrap();
        let mut config = unix_only(dir.path());
        config.uds.mode = SocketMode::new(bits).unwrap();
        config.uds_stream.mode = SocketMode::new(bits).unwrap();
        let receivers = start(&config, recording(&Arc::new(Seen::default()))).unwrap();
        for path in [
            receivers.path(Transport::UnixDatagram).unwrap(),
            receivers.path(Transport::UnixStream).unwrap(),
        ] {
            assert!(fs::symlink_metadata(path).unwrap().file_type().is_socket());
            assert_eq!(mode_of(path), bits, "{} right after start", path.display());
        }
        assert!(leftover_private_dirs(dir.path()).is_empty());
        receivers.shutdown();
    }
}

#[test]
fn stale_sockets_are_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let config = unix_only(dir.path());
    let uds = config.uds.path.clone().unwrap();
    let stream = config.uds_stream.path.clone().unwrap();
    // Leave socket files nobody listens on, as a crashed process would.
    drop(UnixDatagram::bind(&uds).unwrap());
    drop(UnixListener::bind(&stream).unwrap());
    let old_inode = fs::symlink_metadata(&uds).unwrap().ino();

    let seen = Arc::new(Seen::default());
    let receivers = start(&config, recording(&seen)).unwrap();
    assert_ne!(fs::symlink_metadata(&uds).unwrap().ino(), old_inode);
    let sender = UnixDatagram::unbound().unwrap();
    sender.send_to(b"fresh:1|c", &uds).unwrap();
    UnixStream::connect(&stream)
        .unwrap()
        .write_all(&frame(b"fresh:2|c"))
        .unwrap();
    wait_until("both packets", || seen.count() == 2);
    receivers.shutdown();
}

#[test]
fn live_sockets_are_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("taken.sock");

    let live_dgram = UnixDatagram::bind(&path).unwrap();
    let mut config = IngestConfig::default();
    config.udp.listen = None;
    config.uds.path = Some(path.clone());
    let err = start(&config, recording(&Arc::new(Seen::default()))).unwrap_err();
    assert!(
        matches!(
            &err,
            ListenError::InUse {
                transport: Transport::UnixDatagram,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("taken.sock"), "{err}");
    // The live socket still works.
    UnixDatagram::unbound()
        .unwrap()
        .send_to(b"x", &path)
        .unwrap();
    let mut buf = [0u8; 4];
    assert_eq!(live_dgram.recv(&mut buf).unwrap(), 1);
    drop(live_dgram);
    fs::remove_file(&path).unwrap();

    let _live_listener = UnixListener::bind(&path).unwrap();
    let mut config = IngestConfig::default();
    config.udp.listen = None;
    config.uds_stream.path = Some(path.clone());
    let err = start(&config, recording(&Arc::new(Seen::default()))).unwrap_err();
    assert!(
        matches!(
            &err,
            ListenError::InUse {
                transport: Transport::UnixStream,
                ..
            }
        ),
        "{err}"
    );
    // A live stream socket at the datagram path is also "in use" (probe gets EPROTOTYPE).
    let mut config = IngestConfig::default();
    config.udp.listen = None;
    config.uds.path = Some(path.clone());
    let err = start(&config, recording(&Arc::new(Seen::default()))).unwrap_err();
    assert!(matches!(&err, ListenError::InUse { .. }), "{err}");
    assert!(fs::symlink_metadata(&path).unwrap().file_type().is_socket());
    assert!(leftover_private_dirs(dir.path()).is_empty());
}

#[test]
fn non_socket_files_are_refused_and_never_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("precious.txt");
    fs::write(&path, b"do not delete").unwrap();
    let mut config = IngestConfig::default();
    config.udp.listen = None;
    config.uds.path = Some(path.clone());
    let err = start(&config, recording(&Arc::new(Seen::default()))).unwrap_err();
    assert!(
        matches!(
            &err,
            ListenError::NotASocket {
                kind: "regular file",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("precious.txt"), "{err}");
    assert_eq!(fs::read(&path).unwrap(), b"do not delete");

    let sub = dir.path().join("a-directory");
    fs::create_dir(&sub).unwrap();
    config.uds.path = None;
    config.uds_stream.path = Some(sub.clone());
    let err = start(&config, recording(&Arc::new(Seen::default()))).unwrap_err();
    assert!(
        matches!(
            &err,
            ListenError::NotASocket {
                kind: "directory",
                ..
            }
        ),
        "{err}"
    );
    assert!(sub.is_dir());
}

#[test]
fn socket_files_are_removed_on_shutdown_only_if_still_ours() {
    let dir = tempfile::tempdir().unwrap();
    let config = unix_only(dir.path());
    let uds = config.uds.path.clone().unwrap();
    let stream = config.uds_stream.path.clone().unwrap();
    let receivers = start(&config, recording(&Arc::new(Seen::default()))).unwrap();
    assert!(uds.exists() && stream.exists());
    // Someone replaced the stream socket file with their own file meanwhile.
    fs::remove_file(&stream).unwrap();
    fs::write(&stream, b"not ours").unwrap();
    receivers.shutdown();
    assert!(
        fs::symlink_metadata(&uds).is_err(),
        "our socket file must be removed"
    );
    assert_eq!(fs::read(&stream).unwrap(), b"not ours");
    assert!(leftover_private_dirs(dir.path()).is_empty());
}

#[test]
fn a_failed_start_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = unix_only(dir.path());
    let blocker = config.uds_stream.path.clone().unwrap();
    fs::write(&blocker, b"in the way").unwrap();
    config.udp.listen = Some("127.0.0.1:0".parse().unwrap());
    let seen = Arc::new(Seen::default());
    let err = start(&config, recording(&seen)).unwrap_err();
    assert!(matches!(err, ListenError::NotASocket { .. }), "{err}");
    // The UDP thread and the datagram socket file, set up before the failure, are gone.
    assert!(fs::symlink_metadata(config.uds.path.as_ref().unwrap()).is_err());
    assert!(leftover_private_dirs(dir.path()).is_empty());
    // Each started handler got its final idle() when its thread was stopped.
    assert_eq!(seen.handlers.load(Ordering::SeqCst), 2);
    assert!(seen.idles.load(Ordering::SeqCst) >= 2);
}

// ---------------------------------------------------------------------------------------
// Lifecycle

#[test]
fn shutdown_drains_what_the_kernel_holds_udp() {
    for batch_size in [1, 32] {
        let seen = Arc::new(Seen::default());
        let (factory, gate) = gated(&seen);
        let mut config = udp_only();
        config.udp.batch_size = batch_size;
        let receivers = start(&config, factory).unwrap();
        let sender = udp_sender(receivers.inet(Transport::Udp).unwrap());
        // Few enough to fit even a default-sized receive buffer (no kernel drops).
        const N: usize = 150;
        for i in 0..N {
            sender.send(format!("drain:{i}|c").as_bytes()).unwrap();
        }
        // The handler is stuck on its first packet, so the rest waits in the kernel queue
        // when shutdown starts; the gate opens only after the stop flag is up.
        let stopper = std::thread::spawn(move || receivers.shutdown());
        std::thread::sleep(Duration::from_millis(50));
        gate.send(()).unwrap();
        stopper.join().unwrap();
        assert_eq!(seen.count(), N, "batch_size {batch_size}");
    }
}

#[test]
fn shutdown_drains_what_the_kernel_holds_unix_datagram_and_stream() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Seen::default());
    let (factory, gate) = gated(&seen);
    let mut config = unix_only(dir.path());
    config.uds.path = None;
    let receivers = start(&config, factory).unwrap();
    let mut stream = UnixStream::connect(receivers.path(Transport::UnixStream).unwrap()).unwrap();
    const N: usize = 5000;
    let mut bytes = Vec::new();
    for i in 0..N {
        bytes.extend(frame(format!("drain:{i}|c").as_bytes()));
    }
    stream.write_all(&bytes).unwrap();
    // The client keeps its connection open: the receiver must stop reading at "empty", not EOF.
    let stopper = std::thread::spawn(move || receivers.shutdown());
    std::thread::sleep(Duration::from_millis(50));
    gate.send(()).unwrap();
    stopper.join().unwrap();
    assert_eq!(seen.payloads(Transport::UnixStream).len(), N);
    drop(stream);

    // Unix datagram: the queue holds at most net.unix.max_dgram_qlen (10 by default) datagrams.
    let seen = Arc::new(Seen::default());
    let (factory, gate) = gated(&seen);
    let mut config = unix_only(dir.path());
    config.uds_stream.path = None;
    let receivers = start(&config, factory).unwrap();
    let sender = UnixDatagram::unbound().unwrap();
    sender
        .connect(receivers.path(Transport::UnixDatagram).unwrap())
        .unwrap();
    sender.set_nonblocking(true).unwrap();
    let mut sent = 0;
    for i in 0..8 {
        if sender.send(format!("drain:{i}|c").as_bytes()).is_ok() {
            sent += 1;
        }
    }
    assert!(sent >= 2);
    let stopper = std::thread::spawn(move || receivers.shutdown());
    std::thread::sleep(Duration::from_millis(50));
    gate.send(()).unwrap();
    stopper.join().unwrap();
    assert_eq!(seen.payloads(Transport::UnixDatagram).len(), sent);
}

#[test]
fn shutdown_drains_stream_connections_still_in_the_backlog() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Seen::default());
    let (go, wait) = mpsc::channel::<()>();
    let wait = Mutex::new(wait);
    let calls = AtomicUsize::new(0);
    let factory = {
        let seen = Arc::clone(&seen);
        move |transport| {
            // The second stream connection's factory call blocks the accept thread, so the
            // third connection stays in the listen backlog until shutdown.
            if calls.fetch_add(1, Ordering::SeqCst) == 1 {
                let _ = wait.lock().unwrap().recv_timeout(Duration::from_secs(10));
            }
            Recorder {
                transport,
                seen: Arc::clone(&seen),
                gate: None,
            }
        }
    };
    let mut config = unix_only(dir.path());
    config.uds.path = None;
    let receivers = start(&config, factory).unwrap();
    let path = receivers.path(Transport::UnixStream).unwrap().to_owned();
    let mut first = UnixStream::connect(&path).unwrap();
    first.write_all(&frame(b"one:1|c")).unwrap();
    wait_until("first served", || seen.count() == 1);
    let mut second = UnixStream::connect(&path).unwrap();
    second.write_all(&frame(b"two:1|c")).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let mut third = UnixStream::connect(&path).unwrap();
    third.write_all(&frame(b"three:1|c")).unwrap();
    let stopper = std::thread::spawn(move || receivers.shutdown());
    std::thread::sleep(Duration::from_millis(50));
    go.send(()).unwrap();
    stopper.join().unwrap();
    let mut got = seen.payloads(Transport::UnixStream);
    got.sort();
    assert_eq!(
        got,
        vec![
            b"one:1|c".to_vec(),
            b"three:1|c".to_vec(),
            b"two:1|c".to_vec()
        ]
    );
}

#[test]
fn idle_is_called_while_quiet_while_busy_and_once_at_exit() {
    let seen = Arc::new(Seen::default());
    let receivers = start(&udp_only(), recording(&seen)).unwrap();
    std::thread::sleep(IDLE_INTERVAL * 4);
    let quiet = seen.idles.load(Ordering::SeqCst);
    assert!(
        quiet >= 2,
        "only {quiet} idle calls in 4 intervals of silence"
    );

    // Busy: a packet every 10 ms never lets the read time out, idle() must still come.
    let sender = udp_sender(receivers.inet(Transport::Udp).unwrap());
    let before = seen.idles.load(Ordering::SeqCst);
    let until = Instant::now() + IDLE_INTERVAL * 5;
    while Instant::now() < until {
        sender.send(b"busy:1|c").unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
    let busy = seen.idles.load(Ordering::SeqCst) - before;
    assert!(busy >= 2, "only {busy} idle calls in 5 busy intervals");

    let before = seen.idles.load(Ordering::SeqCst);
    receivers.shutdown();
    assert!(
        seen.idles.load(Ordering::SeqCst) > before,
        "no final idle()"
    );
}

#[test]
fn dropping_receivers_also_stops_them_and_removes_files() {
    let dir = tempfile::tempdir().unwrap();
    let config = unix_only(dir.path());
    let receivers = start(&config, recording(&Arc::new(Seen::default()))).unwrap();
    let path = receivers.path(Transport::UnixDatagram).unwrap().to_owned();
    drop(receivers);
    assert!(fs::symlink_metadata(&path).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_is_usable_from_async_code() {
    let seen = Arc::new(Seen::default());
    let receivers = start(&udp_only(), recording(&seen)).unwrap();
    let addr = receivers.inet(Transport::Udp).unwrap();
    udp_sender(addr).send(b"async:1|c").unwrap();
    tokio::time::timeout(Duration::from_secs(5), receivers.shutdown_async())
        .await
        .unwrap();
    assert_eq!(seen.count(), 1);
    // The port is free again.
    UdpSocket::bind(addr).unwrap();
}

// ---------------------------------------------------------------------------------------
// Errors, buffers, threads

#[test]
fn udp_address_in_use_is_a_typed_bind_error() {
    let taken = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let mut config = IngestConfig::default();
    config.udp.listen = Some(addr);
    let err = start(&config, recording(&Arc::new(Seen::default()))).unwrap_err();
    match &err {
        ListenError::Io {
            transport: Transport::Udp,
            step: Step::Bind,
            source,
            address,
        } => {
            assert_eq!(source.kind(), std::io::ErrorKind::AddrInUse);
            assert_eq!(address, &addr.to_string());
        }
        other => panic!("unexpected error: {other}"),
    }
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
}

#[test]
fn invalid_config_is_refused_before_binding() {
    let mut config = udp_only();
    config.udp.batch_size = 0;
    let err = start(&config, recording(&Arc::new(Seen::default()))).unwrap_err();
    assert!(
        matches!(
            &err,
            ListenError::Config(ConfigError::Invalid { field, .. }) if field == "ingest.udp.batch_size"
        ),
        "{err}"
    );
}

fn sysctl(name: &str) -> usize {
    fs::read_to_string(format!("/proc/sys/{name}"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1).map(|euid| euid == "0"))
        .unwrap_or(false)
}

#[test]
fn effective_receive_buffer_is_read_back_and_reported() {
    let rmem_max = sysctl("net/core/rmem_max");
    // 0 keeps the system default, which Linux reports undoubled.
    let mut config = udp_only();
    config.udp.recv_buffer_bytes = 0;
    let receivers = start(&config, recording(&Arc::new(Seen::default()))).unwrap();
    let reported = receivers
        .stats()
        .transport(Transport::Udp)
        .recv_buffer_bytes as usize;
    assert_eq!(reported, sysctl("net/core/rmem_default"));
    receivers.shutdown();

    // Above rmem_max: granted in full as root (SO_RCVBUFFORCE), else capped at rmem_max.
    let requested = rmem_max * 2;
    let mut config = udp_only();
    config.udp.recv_buffer_bytes = requested;
    let receivers = start(&config, recording(&Arc::new(Seen::default()))).unwrap();
    let reported = receivers
        .stats()
        .transport(Transport::Udp)
        .recv_buffer_bytes as usize;
    let expected = if is_root() {
        2 * requested
    } else {
        2 * rmem_max
    };
    assert_eq!(reported, expected, "rmem_max {rmem_max}");
    receivers.shutdown();
}

#[test]
fn several_udp_threads_share_the_port_with_reuseport() {
    let seen = Arc::new(Seen::default());
    let mut config = udp_only();
    config.udp.threads = 2;
    let receivers = start(&config, recording(&seen)).unwrap();
    assert_eq!(seen.handlers.load(Ordering::SeqCst), 2);
    let addr = receivers.inet(Transport::Udp).unwrap();
    assert_ne!(addr.port(), 0);
    // Many source ports, so the kernel's hash spreads them over both sockets.
    let senders: Vec<UdpSocket> = (0..32).map(|_| udp_sender(addr)).collect();
    for (i, sender) in senders.iter().enumerate() {
        sender.send(format!("t:{i}|c").as_bytes()).unwrap();
    }
    wait_until("32 packets", || seen.count() == 32);
    receivers.shutdown();
}

#[test]
fn kernel_drops_are_counted_when_the_queue_overflows() {
    let seen = Arc::new(Seen::default());
    let (factory, gate) = gated(&seen);
    let mut config = udp_only();
    config.udp.recv_buffer_bytes = 64 * 1024;
    let receivers = start(&config, factory).unwrap();
    let sender = udp_sender(receivers.inet(Transport::Udp).unwrap());
    sender.send(b"first").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    // The handler is blocked: 2 MB of 1 KiB datagrams overflow a 64 KiB (128 KiB charged) queue.
    let payload = vec![b'd'; 1024];
    for _ in 0..2000 {
        sender.send(&payload).unwrap();
    }
    gate.send(()).unwrap();
    let stats = receivers.stats();
    wait_until("drops sampled", || {
        stats.transport(Transport::Udp).kernel_drops > 0
    });
    receivers.shutdown();
    let snapshot = stats.transport(Transport::Udp);
    assert_eq!(
        snapshot.packets + snapshot.kernel_drops,
        2001,
        "{snapshot:?}"
    );
}

/// A full Unix datagram queue is visible on this side. With the handler held, a
/// non-blocking sender fills the queue until the kernel refuses a datagram (it lets
/// `net.unix.max_dgram_qlen` + 1 wait); the next read returns them all, more than
/// `max_dgram_qlen`, and is counted as a read of a full queue.
#[test]
fn a_full_unix_datagram_queue_is_seen_and_counted() {
    let qlen = super::max_dgram_qlen().expect("net.unix.max_dgram_qlen is readable");
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Seen::default());
    let (factory, gate) = gated(&seen);
    let mut config = unix_only(dir.path());
    config.uds_stream.path = None;
    config.uds.batch_size = usize::try_from(qlen).unwrap() + 2;
    let receivers = start(&config, factory).unwrap();
    let sender = UnixDatagram::unbound().unwrap();
    sender
        .connect(receivers.path(Transport::UnixDatagram).unwrap())
        .unwrap();
    sender.set_nonblocking(true).unwrap();
    sender.send(b"first:1|c").unwrap();
    // The receiver wakes at once for it, and its handler then holds it (the packet
    // counters move only when the handler returns, so there is nothing to poll).
    std::thread::sleep(Duration::from_millis(200));
    let mut queued = 0_u64;
    loop {
        match sender.send(b"x:1|c") {
            Ok(_) => queued += 1,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("{e}"),
        }
        assert!(
            queued <= qlen + 1,
            "the queue holds at most max_dgram_qlen + 1: {queued} of {qlen}"
        );
    }
    gate.send(()).unwrap();
    wait_until("every datagram read", || seen.count() as u64 == 1 + queued);
    let stats = receivers.stats();
    receivers.shutdown();
    let uds = stats.transport(Transport::UnixDatagram);
    assert_eq!(uds.queue_limit, qlen, "{uds:?}");
    assert_eq!(
        uds.queue_high_water, queued,
        "one read took the whole queue: {uds:?}"
    );
    if queued == qlen + 1 {
        assert_eq!(uds.queue_full, 1, "{uds:?}");
    } else {
        // The sender's own send buffer filled first (a long queue): the queue never did.
        assert_eq!(uds.queue_full, 0, "{uds:?}");
    }
}

/// Every inotify event on the children of `dir` during `during`, as (name, flags).
fn directory_events(
    dir: &Path,
    during: impl FnOnce(),
) -> Vec<(String, rustix::fs::inotify::ReadFlags)> {
    use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
    let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).unwrap();
    inotify::add_watch(
        &fd,
        dir,
        WatchFlags::CREATE | WatchFlags::ATTRIB | WatchFlags::MOVED_TO,
    )
    .unwrap();
    during();
    let mut buf = vec![std::mem::MaybeUninit::<u8>::uninit(); 64 * 1024];
    let mut reader = inotify::Reader::new(&fd, &mut buf);
    let mut events = Vec::new();
    while let Ok(event) = reader.next() {
        let name = event
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        events.push((name, event.events()));
    }
    events
}

#[test]
fn socket_file_appears_with_its_final_mode_and_is_never_changed_in_place() {
    use rustix::fs::inotify::ReadFlags;
    let dir = tempfile::tempdir().unwrap();
    let config = unix_only(dir.path());
    let mut receivers = None;
    let events = directory_events(dir.path(), || {
        receivers = Some(start(&config, recording(&Arc::new(Seen::default()))).unwrap());
    });
    for name in ["dsd.sock", "dsd-stream.sock"] {
        let seen: Vec<ReadFlags> = events
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, f)| *f)
            .collect();
        // Created (linked) once, already complete: no chmod, no bind at the visible path.
        assert_eq!(seen, vec![ReadFlags::CREATE], "{name}: {events:?}");
    }
    receivers.unwrap().shutdown();
}

#[test]
fn a_factory_may_return_boxed_trait_objects() {
    let seen = Arc::new(Seen::default());
    let factory = {
        let seen = Arc::clone(&seen);
        move |transport| -> Box<dyn PacketHandler> {
            Box::new(Recorder {
                transport,
                seen: Arc::clone(&seen),
                gate: None,
            })
        }
    };
    let receivers = start(&udp_only(), factory).unwrap();
    udp_sender(receivers.inet(Transport::Udp).unwrap())
        .send(b"boxed:1|c")
        .unwrap();
    wait_until("boxed handler", || seen.count() == 1);
    receivers.shutdown();
}

fn tcp_only(idle_timeout: Duration) -> IngestConfig {
    let mut config = IngestConfig::default();
    config.udp.listen = None;
    config.tcp.enabled = true;
    config.tcp.listen = "127.0.0.1:0".parse().unwrap();
    config.tcp.idle_timeout = idle_timeout;
    config
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

#[test]
fn tcp_lines_split_across_writes_with_crlf_over_many_connections() {
    let seen = Arc::new(Seen::default());
    let receivers = start(&tcp_only(Duration::ZERO), recording(&seen)).unwrap();
    let addr = receivers.inet(Transport::Tcp).unwrap();
    let stats = receivers.stats();
    let connections = 16;
    let per_connection = 300;
    std::thread::scope(|s| {
        for c in 0..connections {
            s.spawn(move || {
                let mut stream = std::net::TcpStream::connect(addr).unwrap();
                let mut bytes = Vec::new();
                for i in 0..per_connection {
                    let end = if i % 3 == 0 { "\r\n" } else { "\n" };
                    bytes.extend(format!("c{c}.l{i}:1|c|#k:v{end}").as_bytes());
                }
                write_in_pieces(&mut stream, &bytes, 7 + c * 13);
            });
        }
    });
    let expected = connections * per_connection;
    wait_until("every line", || {
        lines_of(&seen, Transport::Tcp).len() == expected
    });
    wait_until("connections closed", || {
        stats.transport(Transport::Tcp).connections_open == 0
    });
    let mut got = lines_of(&seen, Transport::Tcp);
    let crlf = got.iter().filter(|l| l.ends_with('\r')).count();
    assert_eq!(crlf, connections * per_connection.div_ceil(3));
    got.iter_mut()
        .for_each(|l| *l = l.trim_end_matches('\r').to_owned());
    got.sort();
    got.dedup();
    assert_eq!(got.len(), expected, "every line exactly once");
    let snapshot = stats.transport(Transport::Tcp);
    assert_eq!(snapshot.packets, expected as u64);
    assert_eq!(snapshot.connections_accepted, connections as u64);
    assert_eq!((snapshot.partial, snapshot.oversized), (0, 0));
    receivers.shutdown();
}

#[test]
fn tcp_overlong_line_is_counted_and_the_connection_resyncs() {
    let seen = Arc::new(Seen::default());
    let mut config = tcp_only(Duration::ZERO);
    config.tcp.max_line_bytes = 100;
    let receivers = start(&config, recording(&seen)).unwrap();
    let mut stream = std::net::TcpStream::connect(receivers.inet(Transport::Tcp).unwrap()).unwrap();
    let long = "x".repeat(5000);
    let bytes = format!("a:1|c\n{long}:1|c\nb:2|c\n{}\nc:3|c\n", "y".repeat(101));
    write_in_pieces(&mut stream, bytes.as_bytes(), 333);
    wait_until("three lines", || lines_of(&seen, Transport::Tcp).len() == 3);
    assert_eq!(lines_of(&seen, Transport::Tcp), ["a:1|c", "b:2|c", "c:3|c"]);
    let stats = receivers.stats();
    assert_eq!(stats.transport(Transport::Tcp).oversized, 2);
    // The same connection goes on.
    stream.write_all(b"d:4|c\n").unwrap();
    wait_until("a fourth line", || {
        lines_of(&seen, Transport::Tcp).len() == 4
    });
    receivers.shutdown();
}

#[test]
fn tcp_partial_last_line_is_counted_and_never_joined_to_the_next_connection() {
    let seen = Arc::new(Seen::default());
    let receivers = start(&tcp_only(Duration::ZERO), recording(&seen)).unwrap();
    let addr = receivers.inet(Transport::Tcp).unwrap();
    let stats = receivers.stats();
    let mut first = std::net::TcpStream::connect(addr).unwrap();
    first.write_all(b"a:1|c\nb:2").unwrap();
    drop(first);
    wait_until("partial counted", || {
        stats.transport(Transport::Tcp).partial == 1
    });
    let mut second = std::net::TcpStream::connect(addr).unwrap();
    second.write_all(b"3|c\nc:1|c\n").unwrap();
    wait_until("three lines", || lines_of(&seen, Transport::Tcp).len() == 3);
    assert_eq!(lines_of(&seen, Transport::Tcp), ["a:1|c", "3|c", "c:1|c"]);
    receivers.shutdown();
}

#[test]
fn tcp_idle_connection_is_closed_and_counted() {
    let seen = Arc::new(Seen::default());
    let receivers = start(&tcp_only(Duration::from_millis(300)), recording(&seen)).unwrap();
    let mut stream = std::net::TcpStream::connect(receivers.inet(Transport::Tcp).unwrap()).unwrap();
    stream.write_all(b"a:1|c\nhalf").unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 4];
    assert!(matches!(stream.read(&mut buf), Ok(0) | Err(_)), "closed");
    assert!(started.elapsed() < Duration::from_secs(3));
    let stats = receivers.stats();
    // The close is counted, then the connection's slot released: wait for both.
    wait_until("idle close counted and the connection gone", || {
        let now = stats.transport(Transport::Tcp);
        now.idle_closed == 1 && now.connections_open == 0
    });
    assert_eq!(stats.transport(Transport::Tcp).partial, 1);
    assert_eq!(lines_of(&seen, Transport::Tcp), ["a:1|c"]);
    receivers.shutdown();
}

#[test]
fn tcp_shutdown_hands_on_complete_lines_of_open_connections() {
    let seen = Arc::new(Seen::default());
    let receivers = start(&tcp_only(Duration::ZERO), recording(&seen)).unwrap();
    let addr = receivers.inet(Transport::Tcp).unwrap();
    let stats = receivers.stats();
    let mut open = Vec::new();
    for c in 0..4 {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        let mut bytes = String::new();
        for i in 0..1000 {
            bytes.push_str(&format!("s{c}.{i}:1|c\n"));
        }
        bytes.push_str("cut:1");
        stream.write_all(bytes.as_bytes()).unwrap();
        open.push(stream);
    }
    wait_until("connections accepted", || {
        stats.transport(Transport::Tcp).connections_accepted == 4
    });
    // The peers stay connected: shutdown must not wait for them to close.
    let started = Instant::now();
    receivers.shutdown();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(lines_of(&seen, Transport::Tcp).len(), 4000);
    assert_eq!(stats.transport(Transport::Tcp).partial, 4);
    drop(open);
}

#[test]
fn tcp_over_max_connections_is_refused_and_a_taken_port_is_an_error() {
    let seen = Arc::new(Seen::default());
    let mut config = tcp_only(Duration::ZERO);
    config.tcp.max_connections = 1;
    let receivers = start(&config, recording(&seen)).unwrap();
    let addr = receivers.inet(Transport::Tcp).unwrap();
    let mut first = std::net::TcpStream::connect(addr).unwrap();
    first.write_all(b"first:1|c\n").unwrap();
    wait_until("first served", || seen.count() == 1);
    let mut second = std::net::TcpStream::connect(addr).unwrap();
    second
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 4];
    assert!(matches!(second.read(&mut buf), Ok(0) | Err(_)), "refused");
    let stats = receivers.stats();
    wait_until("refusal counted", || {
        stats.transport(Transport::Tcp).connections_refused == 1
    });

    let mut taken = tcp_only(Duration::ZERO);
    taken.tcp.listen = addr;
    let error = start(&taken, recording(&seen)).unwrap_err();
    assert!(error.to_string().contains("tcp"), "{error}");
    assert!(error.to_string().contains(&addr.to_string()), "{error}");
    receivers.shutdown();
}

#[test]
fn unix_stream_auto_framing_serves_length_prefixes_and_lines_on_one_socket() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Seen::default());
    let mut config = unix_only(dir.path());
    config.uds.path = None;
    let receivers = start(&config, recording(&seen)).unwrap();
    let path = receivers.path(Transport::UnixStream).unwrap().to_owned();
    let stats = receivers.stats();

    let mut framed = UnixStream::connect(&path).unwrap();
    // A first read of fewer than four bytes must not decide the framing.
    let message = frame(b"framed:1|c");
    framed.write_all(&message[..1]).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    framed.write_all(&message[1..]).unwrap();
    wait_until("framed message", || seen.count() == 1);

    let mut lines = UnixStream::connect(&path).unwrap();
    write_in_pieces(&mut lines, b"li", 1);
    write_in_pieces(&mut lines, b"ne:1|c\r\nline:2|c\n", 5);
    wait_until("lines", || seen.count() >= 2);
    drop((framed, lines));
    wait_until("closed", || {
        stats.transport(Transport::UnixStream).connections_open == 0
    });
    let payloads = seen.payloads(Transport::UnixStream);
    assert_eq!(payloads[0], b"framed:1|c");
    let rest: Vec<u8> = payloads[1..].concat();
    assert_eq!(rest, b"line:1|c\r\nline:2|c\n");
    let snapshot = stats.transport(Transport::UnixStream);
    assert_eq!((snapshot.packets, snapshot.partial), (3, 0));
    receivers.shutdown();
}

#[test]
fn unix_stream_newline_framing_when_configured() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Seen::default());
    let mut config = unix_only(dir.path());
    config.uds.path = None;
    config.uds_stream.framing = crate::config::ingest::StreamFraming::Newline;
    config.uds_stream.max_message_bytes = 10;
    let receivers = start(&config, recording(&seen)).unwrap();
    let path = receivers.path(Transport::UnixStream).unwrap().to_owned();
    let mut stream = UnixStream::connect(&path).unwrap();
    // A length prefix read as a line: it is not a line under the limit, so it is dropped.
    stream.write_all(&frame(b"framed:1|c|#a:bcdefgh")).unwrap();
    stream.write_all(b"\na:1|c\nb:2").unwrap();
    drop(stream);
    let stats = receivers.stats();
    wait_until("partial", || {
        stats.transport(Transport::UnixStream).partial == 1
    });
    assert_eq!(lines_of(&seen, Transport::UnixStream), ["a:1|c"]);
    assert_eq!(stats.transport(Transport::UnixStream).oversized, 1);
    receivers.shutdown();
}
