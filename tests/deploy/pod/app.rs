//! The application of the played pod (tests/deploy/play_pod.sh): a stand-in for a service
//! that counts with a DogStatsD client. It sends `APP_INCREMENTS` increments of the
//! counter `APP_METRIC` (tag `via:pod`) to the address in `DD_DOGSTATSD_URL`
//! (`unix://PATH`, `unixstream://PATH` or `udp://HOST:PORT`, as the DogStatsD clients read
//! it), in packets of several lines, then waits for SIGTERM and exits 0. It waits for the
//! socket to appear (the sidecar may start after it). Standard library only: built with
//! `rustc --target x86_64-unknown-linux-musl` into a static binary for a FROM scratch image.
use std::io::Write;
use std::net::UdpSocket;
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use std::{env, process, thread};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_term(_signal: i32) {
    STOP.store(true, Ordering::SeqCst);
}

extern "C" {
    fn signal(signum: i32, handler: extern "C" fn(i32)) -> usize;
}

const SIGTERM: i32 = 15;
const SIGINT: i32 = 2;
const LINES_PER_PACKET: u64 = 16;

enum Sink {
    Datagram(UnixDatagram, String),
    Stream(UnixStream),
    Udp(UdpSocket, String),
}

impl Sink {
    fn open(url: &str) -> std::io::Result<Sink> {
        if let Some(path) = url.strip_prefix("unix://") {
            let socket = UnixDatagram::unbound()?;
            // Connecting fails while the sidecar has not bound the socket yet: the caller
            // retries.
            socket.connect(path)?;
            Ok(Sink::Datagram(socket, path.to_string()))
        } else if let Some(path) = url.strip_prefix("unixstream://") {
            Ok(Sink::Stream(UnixStream::connect(path)?))
        } else if let Some(address) = url.strip_prefix("udp://") {
            Ok(Sink::Udp(
                UdpSocket::bind("127.0.0.1:0")?,
                address.to_string(),
            ))
        } else {
            eprintln!("app: DD_DOGSTATSD_URL {url:?}: expected unix://, unixstream:// or udp://");
            process::exit(2);
        }
    }

    fn send(&mut self, packet: &[u8]) -> std::io::Result<()> {
        match self {
            Sink::Datagram(socket, _) => socket.send(packet).map(drop),
            // DogStatsD's stream framing: a 4-byte little-endian length, then the message.
            Sink::Stream(stream) => {
                stream.write_all(&(packet.len() as u32).to_le_bytes())?;
                stream.write_all(packet)
            }
            Sink::Udp(socket, address) => socket.send_to(packet, address.as_str()).map(drop),
        }
    }
}

fn main() {
    // SAFETY: libc's signal(2) with a handler that only stores to an atomic.
    unsafe {
        signal(SIGTERM, on_term);
        signal(SIGINT, on_term);
    }
    let url = env::var("DD_DOGSTATSD_URL").unwrap_or_else(|_| "udp://127.0.0.1:8125".into());
    let metric = env::var("APP_METRIC").unwrap_or_else(|_| "pod.app".into());
    let increments: u64 = env::var("APP_INCREMENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut sink = loop {
        match Sink::open(&url) {
            Ok(sink) => break sink,
            Err(e) if Instant::now() < deadline && !STOP.load(Ordering::SeqCst) => {
                eprintln!("app: waiting for {url}: {e}");
                thread::sleep(Duration::from_millis(200));
            }
            Err(e) => {
                eprintln!("app: cannot reach {url}: {e}");
                process::exit(1);
            }
        }
    };
    let mut sent = 0;
    while sent < increments {
        let lines = LINES_PER_PACKET.min(increments - sent);
        let packet: String = (0..lines)
            .map(|_| format!("{metric}:1|c|#via:pod\n"))
            .collect();
        if let Err(e) = sink.send(packet.as_bytes()) {
            eprintln!("app: send failed after {sent} increments: {e}");
            process::exit(1);
        }
        sent += lines;
    }
    let target = match &sink {
        Sink::Datagram(_, path) => format!("unix://{path}"),
        Sink::Stream(_) => url.clone(),
        Sink::Udp(_, address) => format!("udp://{address}"),
    };
    println!("app: sent {sent} increments of {metric} to {target}");
    while !STOP.load(Ordering::SeqCst) {
        thread::sleep(Duration::from_millis(100));
    }
    println!("app: SIGTERM, exiting");
}
