//! Lifecycle: the shutdown drain of kernel queues and backlogs, `idle` calls, stopping on drop and from async code.

use super::*;

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
