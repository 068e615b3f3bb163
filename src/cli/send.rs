//! `countersink send`.

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use crate::ingest::client::{Client, Target};

use super::Failure;

/// The flags of `send`.
#[derive(Debug, Args)]
pub(super) struct SendArgs {
    /// Send over UDP to this address [default: 127.0.0.1:8125].
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["uds", "uds_stream", "tcp"])]
    udp: Option<SocketAddr>,
    /// Send over this Unix datagram socket.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["uds_stream", "tcp"])]
    uds: Option<PathBuf>,
    /// Send over this Unix stream socket (DogStatsD length-prefix framing).
    #[arg(long = "uds-stream", value_name = "PATH", conflicts_with = "tcp")]
    uds_stream: Option<PathBuf>,
    /// Send over TCP to this address (newline framing).
    #[arg(long, value_name = "ADDR")]
    tcp: Option<SocketAddr>,
    /// The lines, e.g. `page.views:1|c|#page:home`. Without any, lines are read from stdin.
    #[arg(value_name = "LINE")]
    lines: Vec<String>,
}

/// Sends the lines, packed into as few packets as fit.
pub(super) fn run(args: SendArgs) -> Result<(), Failure> {
    let target = match (args.udp, args.uds, args.uds_stream, args.tcp) {
        (_, Some(path), _, _) => Target::UnixDatagram(path),
        (_, _, Some(path), _) => Target::UnixStream(path),
        (_, _, _, Some(addr)) => Target::Tcp(addr),
        (Some(addr), _, _, _) => Target::Udp(addr),
        (None, None, None, None) => Target::Udp(crate::config::ingest::DEFAULT_UDP_LISTEN),
    };
    let lines = if args.lines.is_empty() {
        std::io::stdin()
            .lock()
            .lines()
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Failure::other(format!("reading stdin: {e}")))?
    } else {
        args.lines
    };
    let lines: Vec<&str> = lines
        .iter()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| !l.is_empty())
        .collect();
    if lines.is_empty() {
        return Err(Failure::usage("no lines to send"));
    }
    let mut client =
        Client::connect(target.clone()).map_err(|e| Failure::other(format!("{target}: {e}")))?;
    let report = client
        .send_lines(lines)
        .map_err(|e| Failure::other(format!("{target}: {e}")))?;
    println!(
        "sent {} lines in {} packets to {target}",
        report.lines, report.packets
    );
    Ok(())
}
