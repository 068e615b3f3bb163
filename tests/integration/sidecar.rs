//! The sidecar end to end: real clients over every transport into cqlsim, hostile
//! input, metrics, exit codes, and `dev` with its banner's commands pasted.

use countersink::vocabulary::Transport;
use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::Duration;

use cadence::prelude::*;
use cadence::{StatsdClient, UdpMetricSink, UnixMetricSink};
use countersink::ingest::client::{Client, Target};
use countersink::sidecar::Sidecar;

use crate::common::{
    BIN, Serve, StoreOptions, http_get, launch, metrics_when, run_cli, sidecar_config,
    start_sidecar, start_store, unused_address, wait_ready,
};

/// Lines sent by the `cadence` StatsD client (UDP and Unix datagram) and by
/// `countersink send` (all three transports) land in the store with exact totals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_clients_over_every_transport_land_with_exact_totals() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = sidecar_config(dir.path());
    let store = start_store(&mut config).await;
    let sidecar = start_sidecar(&config).await;
    let bound = sidecar.bound();

    let udp_socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let udp = StatsdClient::from_sink(
        "app",
        UdpMetricSink::from(bound.inet(Transport::Udp).unwrap(), udp_socket).unwrap(),
    );
    let unix = StatsdClient::from_sink(
        "app",
        UnixMetricSink::from(
            bound.path(Transport::UnixDatagram).unwrap(),
            UnixDatagram::unbound().unwrap(),
        ),
    );
    for _ in 0..500 {
        udp.count_with_tags("hits", 1)
            .with_tag("via", "cadence")
            .send();
        unix.count_with_tags("hits", 2)
            .with_tag("via", "cadence")
            .send();
        udp.count_with_tags("page.views", 1)
            .with_tag("page_id", "home")
            .send();
    }
    // A binary started as a child, the way scripts use it.
    for (flag, target) in [
        ("--udp", bound.inet(Transport::Udp).unwrap().to_string()),
        (
            "--uds",
            bound
                .path(Transport::UnixDatagram)
                .unwrap()
                .display()
                .to_string(),
        ),
        (
            "--uds-stream",
            bound
                .path(Transport::UnixStream)
                .unwrap()
                .display()
                .to_string(),
        ),
    ] {
        let out = run_cli([
            "send",
            flag,
            &target,
            "sent:3|c|#via:cli",
            "sent:4|c|#via:cli",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("sent 2 lines in 1 packets"));
    }
    // Lines from stdin, over the stream socket.
    let mut child = Command::new(BIN)
        .args([
            "send",
            "--uds-stream",
            &bound
                .path(Transport::UnixStream)
                .unwrap()
                .display()
                .to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"sent:10|c|#via:cli\r\nsent:10|c|#via:cli\n")
        .unwrap();
    assert!(child.wait().unwrap().success());

    tokio::time::sleep(Duration::from_millis(300)).await; // let the receivers read
    let report = sidecar.shutdown().await.unwrap();
    assert_eq!(
        report.spilled + report.unknown + report.rejected,
        0,
        "{report:?}"
    );
    let rows = store
        .select(&format!(
            "SELECT name, tags, value FROM {}",
            store.table("countersink.counts_by_day")
        ))
        .await;
    let mut totals = std::collections::BTreeMap::new();
    for i in 0..rows.len() {
        let name = rows.text(i, "name").unwrap();
        let tags = rows.text(i, "tags").unwrap();
        *totals.entry((name, tags)).or_insert(0) += rows.get_i64(i, "value").unwrap();
    }
    assert_eq!(
        totals,
        std::collections::BTreeMap::from([
            (("app.hits", "via:cadence"), 1500),
            (("app.page.views", "page_id:home"), 500),
            (("sent", "via:cli"), 3 * 7 + 20),
        ])
    );
    assert_eq!(
        store.table_sum("metrics.views_by_day", "views").await,
        0,
        "app.page.views is generic"
    );
    store.shutdown().await;
}

/// Newline-framed lines over TCP and over the Unix stream socket (told from length
/// prefixes per connection) land with exact totals in both tables: lines split across
/// writes and CRLF count once; an overlong line and a partial last line at close are
/// counted drops, never joined to the next connection; and the complete lines of a
/// connection still open at shutdown go into the final flush.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newline_streams_over_tcp_and_unix_land_with_exact_totals() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let mut config = sidecar_config(dir.path());
    config.ingest.tcp.enabled = true;
    config.ingest.tcp.listen = "127.0.0.1:0".parse().unwrap();
    config.ingest.tcp.max_line_bytes = 200;
    let store = start_store(&mut config).await;
    let sidecar = start_sidecar(&config).await;
    let bound = sidecar.bound();
    let tcp = bound.inet(Transport::Tcp).unwrap();
    let unix = bound.path(Transport::UnixStream).unwrap();

    // Four TCP connections, 250 lines each (values 1..=5), written in pieces that end
    // inside lines, every third line CRLF-ended.
    let per_connection: i64 = (0..250).map(|i| i % 5 + 1).sum();
    for c in 0..4 {
        let mut stream = std::net::TcpStream::connect(tcp).unwrap();
        let mut bytes = Vec::new();
        for i in 0..250 {
            let end = if i % 3 == 0 { "\r\n" } else { "\n" };
            bytes.extend(format!("stream.hits:{}|c|#via:tcp{end}", i % 5 + 1).as_bytes());
        }
        for piece in bytes.chunks(37 + c * 11) {
            stream.write_all(piece).unwrap();
        }
    }
    // An overlong line between two good ones, then a partial last line at close; the next
    // connection begins with what would complete it.
    let mut first = std::net::TcpStream::connect(tcp).unwrap();
    let long = "x".repeat(300);
    first
        .write_all(
            format!(
                "stream.hits:1|c|#via:tcp\n{long}:1|c\nstream.hits:1|c|#via:tcp\nstream.hits:100"
            )
            .as_bytes(),
        )
        .unwrap();
    drop(first);
    let mut second = std::net::TcpStream::connect(tcp).unwrap();
    second
        .write_all(b"0|c|#via:tcp\nstream.hits:2|c|#via:tcp\n")
        .unwrap();
    drop(second);
    // Python statsd's UnixSocketStatsClient writes lines like these on the stream socket;
    // a DogStatsD client's length-prefixed message shares the socket.
    let mut lines = std::os::unix::net::UnixStream::connect(&unix).unwrap();
    for i in 0..300 {
        lines
            .write_all(format!("stream.hits:{}|c|#via:unix\n", i % 5 + 1).as_bytes())
            .unwrap();
    }
    drop(lines);
    let mut framed = std::os::unix::net::UnixStream::connect(&unix).unwrap();
    let body = b"stream.hits:7|c|#via:unix";
    framed
        .write_all(&(body.len() as u32).to_le_bytes())
        .unwrap();
    framed.write_all(body).unwrap();
    drop(framed);
    // Still open at shutdown: its complete lines must reach the final flush.
    let mut open = std::net::TcpStream::connect(tcp).unwrap();
    open.write_all(b"stream.hits:5|c|#via:open\nstream.hits:5|c|#via:open\nstream.hits:9")
        .unwrap();

    let metrics = bound.metrics.unwrap();
    metrics_when(metrics, |text| {
        text.contains("countersink_packets_dropped_total{reason=\"partial\",transport=\"tcp\"} 1")
            && text.contains(
                "countersink_packets_dropped_total{reason=\"oversized\",transport=\"tcp\"} 1",
            )
            && text.contains(
                "countersink_stream_connections_total{result=\"accepted\",transport=\"tcp\"} 7",
            )
    })
    .await;
    let report = sidecar.shutdown().await.unwrap();
    assert_eq!(
        report.spilled + report.unknown + report.rejected,
        0,
        "{report:?}"
    );
    drop(open);
    for table in ["countersink.counts_by_day", "countersink.counts_by_minute"] {
        let rows = store
            .select(&format!(
                "SELECT name, tags, value FROM {}",
                store.table(table)
            ))
            .await;
        let mut totals = std::collections::BTreeMap::new();
        for i in 0..rows.len() {
            let key = (rows.text(i, "name").unwrap(), rows.text(i, "tags").unwrap());
            *totals.entry(key).or_insert(0) += rows.get_i64(i, "value").unwrap();
        }
        let unix_lines: i64 = (0..300).map(|i| i % 5 + 1).sum();
        assert_eq!(
            totals,
            std::collections::BTreeMap::from([
                (("stream.hits", "via:open"), 10),
                (("stream.hits", "via:tcp"), 4 * per_connection + 2 + 2),
                (("stream.hits", "via:unix"), unix_lines + 7),
            ]),
            "{table}"
        );
    }
    store.shutdown().await;
}

/// Garbage, 64 KiB lines, huge tag counts, quotes and semicolons, i64 extremes: each bad
/// line is counted by reason, the good lines of the same packet still count, and the
/// sidecar keeps serving; `/metrics` shows it and the identity holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_packets_are_counted_and_good_neighbours_still_count() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = sidecar_config(dir.path());
    let store = start_store(&mut config).await;
    let sidecar = start_sidecar(&config).await;
    let bound = sidecar.bound();
    let mut client = Client::connect(Target::Udp(bound.inet(Transport::Udp).unwrap()))
        .unwrap()
        .with_max_payload(65_000);

    let garbage: Vec<u8> = (0..4000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    client.send_packet(&garbage).unwrap();
    let mut packet = b"good:1|c\n".to_vec();
    packet.extend(std::iter::repeat_n(b'x', 60_000));
    packet.extend_from_slice(b"\ngood:1|c\n");
    client.send_packet(&packet).unwrap();
    let tags: Vec<String> = (0..500).map(|i| format!("t{i}:v")).collect();
    client
        .send_packet(format!("good:1|c\nmany:1|c|#{}\ngood:1|c", tags.join(",")).as_bytes())
        .unwrap();
    client
        .send_packet(b"quoted:1|c|#q:it's;\"DROP TABLE x\";--\n")
        .unwrap();
    client
        .send_packet(
            format!(
                "big:{}|c\nbig:1|c\nsmall:{}|c\nnope:9223372036854775808|c\n",
                i64::MAX,
                i64::MIN
            )
            .as_bytes(),
        )
        .unwrap();
    // A Unix stream message over the size limit closes that connection only.
    {
        use std::io::Write;
        let mut stream =
            std::os::unix::net::UnixStream::connect(bound.path(Transport::UnixStream).unwrap())
                .unwrap();
        let _ = stream.write_all(&(10_000_000u32).to_le_bytes());
    }
    client.send_packet(b"good:1|c\n").unwrap();
    // Packets are counted as they are received, lines once a worker parsed them: wait
    // for both (a scrape in between sees the packets only).
    let needles = [
        "countersink_packets_received_total{transport=\"udp\"} 6",
        "countersink_lines_invalid_total{reason=\"too_long\"} 1",
        "countersink_lines_invalid_total{reason=\"too_many_tags\"} 1",
        "countersink_lines_invalid_total{reason=\"bad_value\"} 1",
        "countersink_dropped_total{reason=\"overflow\"} 1",
        "countersink_packets_dropped_total{reason=\"oversized\",transport=\"uds_stream\"} 1",
    ];
    let metrics = metrics_when(bound.metrics.unwrap(), |text| {
        needles.iter().all(|needle| text.contains(needle))
    })
    .await;
    assert!(
        !metrics.contains("countersink_lines_invalid_total{reason=\"not_utf8\"} 0"),
        "the garbage was counted"
    );
    assert_eq!(http_get(bound.metrics.unwrap(), "/healthz").0, 200);
    assert_eq!(http_get(bound.metrics.unwrap(), "/readyz").0, 200);

    sidecar.shutdown().await.unwrap();
    let rows = store
        .select(&format!(
            "SELECT name, value FROM {}",
            store.table("countersink.counts_by_minute")
        ))
        .await;
    let value = |name: &str| {
        (0..rows.len())
            .filter(|i| rows.text(*i, "name") == Some(name))
            .filter_map(|i| rows.get_i64(i, "value"))
            .sum::<i64>()
    };
    assert_eq!(value("good"), 5);
    assert_eq!(value("quoted"), 1);
    assert_eq!(value("big"), i64::MAX);
    assert_eq!(value("small"), i64::MIN);
    store.shutdown().await;
}

/// `/metrics` carries the minimum set, and after a run the accounting identity holds on
/// the exported figures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_carry_the_minimum_set_and_the_identity_holds() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = sidecar_config(dir.path());
    config.flush.interval = Duration::from_millis(200);
    config.flush.jitter = Duration::from_millis(10);
    let store = start_store(&mut config).await;
    let sidecar = start_sidecar(&config).await;
    let bound = sidecar.bound();
    let mut client = Client::connect(Target::Udp(bound.inet(Transport::Udp).unwrap())).unwrap();
    let lines: Vec<String> = (0..2000)
        .map(|i| format!("m{}:{}|c|#k:{}", i % 7, i % 5 + 1, i % 13))
        .collect();
    client.send_lines(lines.iter().map(String::as_str)).unwrap();
    // Every line read and at least one flush done.
    let text = metrics_when(bound.metrics.unwrap(), |text| {
        text.contains("countersink_increments_accepted_total 2000")
            && !text.contains("countersink_flushes_total 0")
    })
    .await;
    for name in [
        "countersink_lines_received_total{transport=",
        "countersink_lines_invalid_total{reason=",
        "countersink_lines_ignored_total{type=",
        "countersink_pending_rows ",
        "countersink_cql_writes_total{outcome=\"applied\"",
        "countersink_dropped_total{reason=",
        "countersink_flush_duration_seconds_bucket",
        "countersink_stage_delta{granularity=\"minute\",stage=\"accepted\"}",
        "countersink_socket_receive_buffer_bytes{transport=\"udp\"}",
    ] {
        assert!(text.contains(name), "missing {name}:\n{text}");
    }
    let stage = |granularity: &str, stage: &str| -> f64 {
        let prefix =
            format!("countersink_stage_delta{{granularity=\"{granularity}\",stage=\"{stage}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap()
            .parse()
            .unwrap()
    };
    for g in ["minute", "day"] {
        let accepted = stage(g, "accepted");
        let others: f64 = [
            "applied", "unknown", "rejected", "dropped", "spilled", "pending",
        ]
        .iter()
        .map(|s| stage(g, s))
        .sum();
        assert_eq!(accepted, others, "{g}");
        assert_eq!(accepted, 6000.0);
    }
    sidecar.shutdown().await.unwrap();
    assert_eq!(
        store
            .table_sum("countersink.counts_by_minute", "value")
            .await,
        6000
    );
    store.shutdown().await;
}

/// Exit codes: a bad config field is 2 and named; an address in use is 2; SIGTERM after a
/// run is 0 and everything was flushed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_exit_codes_and_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[flush]\ninterval = \"10\"\n").unwrap();
    let out = run_cli(["serve", "--config", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line 2"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run_cli(["serve", "--keyspace", "Bad-Name"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("store.keyspace"));

    let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let out = run_cli([
        "serve",
        "--udp",
        &taken.local_addr().unwrap().to_string(),
        "--metrics",
        "off",
        "--state-dir",
        &dir.path().join("s1").display().to_string(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&taken.local_addr().unwrap().to_string())
    );

    let mut config = sidecar_config(dir.path());
    let store = start_store(&mut config).await;
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = udp.local_addr().unwrap();
    drop(udp);
    let serve = Serve::start([
        "--udp",
        &port.to_string(),
        "--metrics",
        "off",
        "--flush-interval",
        "1h",
        "--contact-point",
        &config.store.contact_points[0],
        "--keyspace",
        &config.store.keyspace,
        "--state-dir",
        &dir.path().join("s2").display().to_string(),
    ]);
    let mut client = Client::connect(Target::Udp(port)).unwrap();
    client.send_lines(["term:5|c", "term:6|c"]).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, _) = serve.terminate();
    assert_eq!(status.code(), Some(0));
    assert_eq!(
        store
            .table_sum("countersink.counts_by_minute", "value")
            .await,
        11,
        "flushed on SIGTERM"
    );
    store.shutdown().await;
}

/// `countersink dev` started on free ports, and its banner: the whole text, and its
/// `send`, `get` and `get --minutes` command lines, in that order.
#[cfg(feature = "dev")]
fn start_dev(dir: &std::path::Path) -> (std::process::Child, String, Vec<String>) {
    let mut child = Command::new(BIN)
        .args([
            "dev",
            "--udp",
            "127.0.0.1:0",
            "--cql-listen",
            "127.0.0.1:0",
            "--metrics",
            "127.0.0.1:0",
            "--flush-interval",
            "300ms",
        ])
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut banner = String::new();
    let mut commands = Vec::new();
    for line in stdout.lines() {
        let line = line.unwrap();
        banner.push_str(&line);
        banner.push('\n');
        if line.contains(" send ") || line.contains(" get ") {
            commands.push(line.trim().to_owned());
        }
        if line.starts_with("Ctrl-C") {
            break;
        }
    }
    assert_eq!(commands.len(), 3, "{banner}");
    (child, banner, commands)
}

/// Runs a pasted command line in a shell, with `env` set; asserts it succeeded and
/// returns its trimmed stdout.
#[cfg(feature = "dev")]
fn paste(command: &str, dir: &std::path::Path, env: &[(&str, &str)]) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(command)
        .envs(env.iter().copied())
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Pastes the banner's commands: two sends, then `get` until it says 2 (flushes run on
/// their own schedule), then `get --minutes`.
#[cfg(feature = "dev")]
fn paste_banner_commands(commands: &[String], dir: &std::path::Path, env: &[(&str, &str)]) {
    paste(&commands[0], dir, env);
    paste(&commands[0], dir, env);
    let mut total = String::new();
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        total = paste(&commands[1], dir, env);
        if total == "2" {
            break;
        }
    }
    assert_eq!(total, "2", "{}", commands[1]);
    let minutes = paste(&commands[2], dir, env);
    assert!(minutes.ends_with(" 2"), "{}: {minutes}", commands[2]);
}

/// `countersink dev` starts, its banner's `send` and `get` commands work when pasted.
/// (`dev` embeds its own store, so this runs against cqlsim whatever the test store.)
#[cfg(feature = "dev")]
#[test]
fn dev_banner_commands_work_when_pasted() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, _, commands) = start_dev(dir.path());
    paste_banner_commands(&commands, dir.path(), &[]);
    let pid = child.id().to_string();
    Command::new("kill").args(["-INT", &pid]).status().unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

/// The same banner commands work against `serve` on the test store (a real cluster, when
/// it is one): pasted with only dev's addresses changed to serve's and the store's, and
/// the test's keyspace exported as `COUNTERSINK_KEYSPACE`, as an operator would.
#[cfg(feature = "dev")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_banner_commands_work_against_serve() {
    let dir = tempfile::tempdir().unwrap();
    let (mut dev, banner, commands) = start_dev(dir.path());
    Command::new("kill")
        .args(["-INT", &dev.id().to_string()])
        .status()
        .unwrap();
    assert_eq!(dev.wait().unwrap().code(), Some(0));
    let field = |label: &str| {
        banner
            .lines()
            .find_map(|l| l.trim().strip_prefix(label))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no {label} in the banner:\n{banner}"))
            .to_owned()
    };
    let (dev_udp, dev_cql) = (field("UDP:"), field("CQL store:"));

    let mut config = countersink::Config::default();
    config.state.dir = dir.path().join("state");
    let store = start_store(&mut config).await;
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let serve_udp = udp.local_addr().unwrap().to_string();
    drop(udp);
    let serve = Serve::start([
        "--udp",
        &serve_udp,
        "--metrics",
        "off",
        "--flush-interval",
        "300ms",
        "--contact-point",
        &store.contact_point(),
        "--keyspace",
        &config.store.keyspace,
        "--state-dir",
        &config.state.dir.display().to_string(),
    ]);
    let commands: Vec<String> = commands
        .iter()
        .map(|c| {
            let pasted = c
                .replace(&dev_udp, &serve_udp)
                .replace(&dev_cql, &store.contact_point());
            assert_ne!(&pasted, c, "the command names dev's address");
            pasted
        })
        .collect();
    paste_banner_commands(
        &commands,
        dir.path(),
        &[("COUNTERSINK_KEYSPACE", &config.store.keyspace)],
    );
    let (status, _) = serve.terminate();
    assert_eq!(status.code(), Some(0));
    store.shutdown().await;
}

/// The sidecar starts before the store is reachable: it receives and buffers, `/readyz`
/// says 503; once the store is up it connects, flushes, and says 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_before_the_store_and_catches_up() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = sidecar_config(dir.path());
    config.flush.interval = Duration::from_millis(200);
    config.flush.jitter = Duration::from_millis(10);
    let store_addr = unused_address();
    config.store.contact_points = vec![store_addr.to_string()];
    let sidecar = Sidecar::start(&config).await.unwrap();
    let bound = sidecar.bound();
    let mut client = Client::connect(Target::Udp(bound.inet(Transport::Udp).unwrap())).unwrap();
    client.send_lines(["early:5|c"]).unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(http_get(bound.metrics.unwrap(), "/readyz").0, 503);
    assert!(!sidecar.is_ready());

    let store = launch(StoreOptions {
        listen: store_addr,
        schema_of: Some(&mut config),
        ..StoreOptions::cqlsim_only("starts the store after the sidecar")
    })
    .await;
    wait_ready(&sidecar).await;
    for _ in 0..50 {
        if store
            .table_sum("countersink.counts_by_minute", "value")
            .await
            == 5
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        store
            .table_sum("countersink.counts_by_minute", "value")
            .await,
        5
    );
    assert_eq!(http_get(bound.metrics.unwrap(), "/readyz").0, 200);
    sidecar.shutdown().await.unwrap();
    store.shutdown().await;
}

/// A configured table missing from the store stops `serve` with exit code 2 and a
/// message naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_mismatch_stops_serve_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = sidecar_config(dir.path());
    let store = start_store(&mut config).await;
    let file = dir.path().join("c.toml");
    std::fs::write(
        &file,
        store.config_file("[[family]]\nname = \"v\"\nminute_table = \"metrics.absent\"\nday_table = \"metrics.views_by_day\"\nkey = [\"page_id\"]\n[family.columns]\n\"page.views\" = \"views\"\n"),
    )
    .unwrap();
    let out = run_cli([
        "serve",
        "--config",
        &file.display().to_string(),
        "--udp",
        "127.0.0.1:0",
        "--metrics",
        "off",
        "--contact-point",
        &config.store.contact_points[0],
        "--state-dir",
        &dir.path().join("s").display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&store.table("metrics.absent")),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    store.shutdown().await;
}
