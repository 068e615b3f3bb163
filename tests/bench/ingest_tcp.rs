//! StatsD lines over TCP against the UDP path, in one run: the same lines, packed the
//! same way (1432-byte payloads, the UDP client default), through the real receivers and
//! the real engine (`EngineHandler` → `Engine::ingest_packet`: parse, place, aggregate).
//! Not part of `cargo test`.
//!
//! ```text
//! cargo bench --bench ingest_tcp                  # 7 rounds of 1,000,000 lines each way
//! cargo bench --bench ingest_tcp -- 5 500000      # rounds, lines
//! ```
//!
//! Each round runs both transports, in alternating order, each against a fresh engine:
//! one sender thread writes every line as fast as it can (UDP: blocking `send`, with a
//! 64 MiB receive buffer so the kernel holds what the receiver has not read yet; TCP:
//! one connection, `write_all`), and the clock stops at the last line the engine counted.
//! Reported: lines/s per transport (median over rounds), UDP's loss, and the TCP/UDP
//! ratio per round and its median.

use std::io::Write;
use std::net::{TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use countersink::config::Config;
use countersink::config::ingest::IngestConfig;
use countersink::engine::Engine;
use countersink::ingest::start;
use countersink::sidecar::handler::EngineHandler;
use countersink::vocabulary::Transport;

/// Bytes per datagram or write: the UDP client's default payload.
const PAYLOAD: usize = 1432;
/// Distinct series, so the buffer never reaches a limit.
const KEYS: usize = 1000;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .filter_map(|a| a.parse().ok())
        .collect();
    let rounds = args.first().copied().unwrap_or(7);
    let lines = args.get(1).copied().unwrap_or(1_000_000);
    let payloads = packets(lines);
    println!(
        "{rounds} rounds, {lines} lines each way in {} payloads of at most {PAYLOAD} bytes",
        payloads.len()
    );
    let mut udp_rates = Vec::new();
    let mut tcp_rates = Vec::new();
    let mut ratios = Vec::new();
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [Transport::Udp, Transport::Tcp]
        } else {
            [Transport::Tcp, Transport::Udp]
        };
        let mut udp = Run::default();
        let mut tcp = Run::default();
        for transport in order {
            let run = measure(transport, &payloads, lines as u64);
            match transport {
                Transport::Udp => udp = run,
                _ => tcp = run,
            }
        }
        let ratio = tcp.rate() / udp.rate();
        println!(
            "round {round}: udp {:>9.0} lines/s ({} lost), tcp {:>9.0} lines/s ({} lost), tcp/udp {ratio:.2}",
            udp.rate(),
            lines as u64 - udp.counted,
            tcp.rate(),
            lines as u64 - tcp.counted,
        );
        udp_rates.push(udp.rate());
        tcp_rates.push(tcp.rate());
        ratios.push(ratio);
    }
    println!(
        "median: udp {:.0} lines/s, tcp {:.0} lines/s, tcp/udp {:.2}",
        median(&mut udp_rates),
        median(&mut tcp_rates),
        median(&mut ratios)
    );
}

/// The lines `name:v|c|#k:N`, packed into newline-separated payloads of at most [`PAYLOAD`].
fn packets(lines: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut packet = Vec::with_capacity(PAYLOAD);
    for i in 0..lines {
        let line = format!("bench.lines:{}|c|#k:{}", i % 5 + 1, i % KEYS);
        if packet.len() + line.len() + 1 > PAYLOAD {
            out.push(std::mem::take(&mut packet));
        }
        if !packet.is_empty() {
            packet.push(b'\n');
        }
        packet.extend_from_slice(line.as_bytes());
    }
    out.push(packet);
    out
}

#[derive(Default)]
struct Run {
    counted: u64,
    seconds: f64,
}

impl Run {
    fn rate(&self) -> f64 {
        self.counted as f64 / self.seconds
    }
}

/// Sends every payload over `transport` to fresh receivers and a fresh engine; returns the
/// lines the engine counted and the time from the first send to the last line counted.
fn measure(transport: Transport, payloads: &[Vec<u8>], lines: u64) -> Run {
    let engine = Arc::new(Engine::new(&Config::default()).expect("default config"));
    let mut config = IngestConfig::default();
    config.udp.listen = None;
    match transport {
        Transport::Udp => {
            config.udp.listen = Some("127.0.0.1:0".parse().unwrap());
            config.udp.recv_buffer_bytes = 64 << 20;
        }
        _ => {
            config.tcp.enabled = true;
            config.tcp.listen = "127.0.0.1:0".parse().unwrap();
        }
    }
    let handler_engine = Arc::clone(&engine);
    let receivers = start(&config, move |t| {
        EngineHandler::new(Arc::clone(&handler_engine), t)
    })
    .expect("receivers start");
    let addr = receivers.inet(transport).expect("bound");
    let counted = || engine.aggregator().counters().received_for(transport);
    let started = Instant::now();
    let sender = {
        let payloads = payloads.to_vec();
        std::thread::spawn(move || match transport {
            Transport::Udp => {
                let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
                socket.connect(addr).unwrap();
                for p in &payloads {
                    socket.send(p).unwrap();
                }
            }
            _ => {
                let mut stream = TcpStream::connect(addr).unwrap();
                for p in &payloads {
                    stream.write_all(p).unwrap();
                    stream.write_all(b"\n").unwrap();
                }
            }
        })
    };
    sender.join().unwrap();
    // The last line counted: stop when all arrived, or when nothing moved for 300 ms
    // (UDP lost the rest).
    let mut last = (counted(), Instant::now());
    loop {
        std::thread::sleep(Duration::from_millis(2));
        let now = counted();
        if now != last.0 {
            last = (now, Instant::now());
        }
        if now >= lines || last.1.elapsed() > Duration::from_millis(300) {
            break;
        }
    }
    receivers.shutdown();
    Run {
        counted: last.0,
        seconds: (last.1 - started).as_secs_f64(),
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
