//! The TCP receiver: lines across writes and connections, overlong and partial lines, the idle timeout, the shutdown, the connection limit and a taken port.

use super::*;

fn tcp_only(idle_timeout: Duration) -> IngestConfig {
    let mut config = IngestConfig::default();
    config.udp.listen = None;
    config.tcp.enabled = true;
    config.tcp.listen = "127.0.0.1:0".parse().unwrap();
    config.tcp.idle_timeout = idle_timeout;
    config
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
