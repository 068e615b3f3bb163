//! The Unix stream socket's framings: `auto` serves length prefixes and lines on one socket; `newline` when configured.

use super::*;

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
