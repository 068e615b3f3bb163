//! Packets arrive intact: datagrams, stream messages and the client, on every transport; a handler may be boxed.

use super::*;

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
