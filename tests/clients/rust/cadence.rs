//! Sends COUNT increments (value i % 5 + 1, tag client:CASE) through the `cadence` StatsD
//! client, for the client checks of `tests/clients/run.py`:
//!
//! ```text
//! cargo run --example client_cadence -- OPTION TRANSPORT TARGET NAME CASE COUNT
//! ```
//!
//! OPTION: `plain` (one datagram per increment), `buffered` (cadence's buffered sink,
//! flushed before exit), `queuing` (the buffered sink behind cadence's queuing sink,
//! drained before exit) or `blocking` (plain, on a blocking socket). TRANSPORT: `udp`
//! (TARGET host:port) or `uds` (a Unix datagram socket path); sockets are non-blocking,
//! as cadence's documentation recommends, except with `blocking`.
//! Prints one JSON line: the sends the client reported as failed.

use std::net::UdpSocket;
use std::os::unix::net::UnixDatagram;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cadence::prelude::*;
use cadence::{
    BufferedUdpMetricSink, BufferedUnixMetricSink, MetricSink, QueuingMetricSink, StatsdClient,
    UdpMetricSink, UnixMetricSink,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [option, transport, target, name, case, count] = args.as_slice() else {
        eprintln!("usage: client_cadence OPTION TRANSPORT TARGET NAME CASE COUNT");
        std::process::exit(2);
    };
    let count: u64 = count.parse()?;
    let sink: Box<dyn MetricSink + Send + Sync + std::panic::RefUnwindSafe> =
        match (transport.as_str(), option.as_str()) {
            ("udp", "plain") => Box::new(UdpMetricSink::from(target.as_str(), udp()?)?),
            ("uds", "blocking") => {
                let socket = UnixDatagram::unbound()?;
                Box::new(UnixMetricSink::from(target, socket))
            }
            ("udp", "buffered" | "queuing") => {
                Box::new(BufferedUdpMetricSink::from(target.as_str(), udp()?)?)
            }
            ("uds", "plain") => Box::new(UnixMetricSink::from(target, unix()?)),
            ("uds", "buffered" | "queuing") => {
                Box::new(BufferedUnixMetricSink::from(target, unix()?))
            }
            _ => return Err(format!("unknown transport/option {transport}/{option}").into()),
        };
    let failed = Arc::new(AtomicU64::new(0));
    let errors = Arc::clone(&failed);
    let (client, queue) = if option == "queuing" {
        // The queuing sink's thread reports the wrapped sink's errors to its own
        // handler, not to the client's.
        let sink_errors = Arc::clone(&errors);
        let queuing = Arc::new(
            QueuingMetricSink::builder()
                .with_error_handler(move |_| {
                    sink_errors.fetch_add(1, Ordering::Relaxed);
                })
                .build(BoxedSink(sink)),
        );
        let client = StatsdClient::builder("", SharedQueue(Arc::clone(&queuing)))
            .with_error_handler(move |_| {
                errors.fetch_add(1, Ordering::Relaxed);
            })
            .build();
        (client, Some(queuing))
    } else {
        let client = StatsdClient::builder("", BoxedSink(sink))
            .with_error_handler(move |_| {
                errors.fetch_add(1, Ordering::Relaxed);
            })
            .build();
        (client, None)
    };
    for i in 0..count {
        client
            .count_with_tags(name, (i % 5 + 1) as i64)
            .with_tag("client", case)
            .send();
    }
    if let Some(queue) = &queue {
        // Dropping a queuing sink only signals its thread: drain the queue first.
        let deadline = Instant::now() + Duration::from_secs(30);
        while queue.queued() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    if client.flush().is_err() {
        failed.fetch_add(1, Ordering::Relaxed);
    }
    println!("{{\"dropped\": {}}}", failed.load(Ordering::Relaxed));
    Ok(())
}

fn udp() -> std::io::Result<UdpSocket> {
    let socket = UdpSocket::bind("127.0.0.1:0")?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

fn unix() -> std::io::Result<UnixDatagram> {
    let socket = UnixDatagram::unbound()?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

/// A boxed sink as a sink (cadence takes sinks by value).
struct BoxedSink(Box<dyn MetricSink + Send + Sync + std::panic::RefUnwindSafe>);

impl MetricSink for BoxedSink {
    fn emit(&self, metric: &str) -> std::io::Result<usize> {
        self.0.emit(metric)
    }

    fn flush(&self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// The queuing sink shared with `main`, which watches its queue drain.
struct SharedQueue(Arc<QueuingMetricSink>);

impl MetricSink for SharedQueue {
    fn emit(&self, metric: &str) -> std::io::Result<usize> {
        self.0.emit(metric)
    }

    fn flush(&self) -> std::io::Result<()> {
        self.0.flush()
    }
}
