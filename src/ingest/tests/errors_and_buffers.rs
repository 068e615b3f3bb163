//! Errors, buffers, threads: typed bind errors, configuration refused before binding, receive buffers, `SO_REUSEPORT` threads, kernel drops and a full Unix datagram queue.

use super::*;

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
