//! Sending StatsD lines to a receiver: used by `countersink send`, the tests and load tools.
//!
//! [`Client::send_lines`] packs as many lines per packet as fit in
//! [`Client::max_payload`] bytes, separated by `\n`, which is what makes a sidecar fast:
//! the receiver's cost is per datagram, not per line. Over the Unix stream socket each packet
//! is one DogStatsD frame (4-byte little-endian length, then the lines); over TCP the lines
//! are written newline-ended, as StatsD's TCP clients do.
//!
//! Sends are blocking. A Unix datagram sender therefore waits when the receiver's queue is
//! full (`net.unix.max_dgram_qlen`) instead of losing lines; UDP never waits and may lose.
//!
//! ```no_run
//! use countersink::ingest::client::{Client, Target};
//!
//! let mut client = Client::connect(Target::Udp("127.0.0.1:8125".parse()?))?;
//! let report = client.send_lines(["page.views:1|c|#page:home", "page.views:2|c|#page:about"])?;
//! assert_eq!(report.packets, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::io::{self, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::PathBuf;

use super::MAX_DATAGRAM_BYTES;

use crate::vocabulary::Transport;

/// Where to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A UDP address.
    Udp(SocketAddr),
    /// A Unix datagram socket path.
    UnixDatagram(PathBuf),
    /// A Unix stream socket path (DogStatsD length-prefix framing).
    UnixStream(PathBuf),
    /// A TCP address (newline framing).
    Tcp(SocketAddr),
}

impl Target {
    /// The transport this target uses.
    pub fn transport(&self) -> Transport {
        match self {
            Target::Udp(_) => Transport::Udp,
            Target::UnixDatagram(_) => Transport::UnixDatagram,
            Target::UnixStream(_) => Transport::UnixStream,
            Target::Tcp(_) => Transport::Tcp,
        }
    }

    /// Default packet payload limit: 1432 bytes for UDP (fits a 1500-byte MTU without
    /// fragmentation, as DogStatsD clients do), 8192 for the Unix sockets and TCP.
    pub fn default_max_payload(&self) -> usize {
        match self {
            Target::Udp(_) => 1432,
            Target::UnixDatagram(_) | Target::UnixStream(_) | Target::Tcp(_) => 8192,
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Udp(addr) => write!(f, "udp {addr}"),
            Target::UnixDatagram(path) => write!(f, "uds {}", path.display()),
            Target::UnixStream(path) => write!(f, "uds_stream {}", path.display()),
            Target::Tcp(addr) => write!(f, "tcp {addr}"),
        }
    }
}

/// Why a send failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// The socket could not be created or connected (nothing listening at a Unix path,
    /// permission denied, ...).
    #[error("cannot connect to {target}: {source}")]
    Connect {
        /// The target, as displayed.
        target: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// A send failed. Over UDP "connection refused" means an earlier datagram found nobody
    /// listening.
    #[error("cannot send to {target}: {source}")]
    Send {
        /// The target, as displayed.
        target: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// One line is longer than the packet limit; nothing of it was sent.
    #[error("a line of {len} bytes does not fit in a packet of at most {max} bytes")]
    LineTooLong {
        /// The line's length.
        len: usize,
        /// The packet payload limit.
        max: usize,
    },
}

/// What [`Client::send_lines`] sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SendReport {
    /// Lines sent (empty lines are skipped).
    pub lines: usize,
    /// Datagrams or stream frames sent.
    pub packets: usize,
    /// Payload bytes sent (stream length prefixes not included).
    pub bytes: usize,
}

/// A connected sender.
#[derive(Debug)]
pub struct Client {
    target: Target,
    socket: Conn,
    max_payload: usize,
    packet: Vec<u8>,
}

#[derive(Debug)]
enum Conn {
    Udp(UdpSocket),
    UnixDatagram(UnixDatagram),
    UnixStream(UnixStream),
    Tcp(TcpStream),
}

impl Client {
    /// Creates the socket and connects it to `target`.
    pub fn connect(target: Target) -> Result<Client, SendError> {
        let connect_error = |source| SendError::Connect {
            target: target.to_string(),
            source,
        };
        let socket = match &target {
            Target::Udp(addr) => {
                let local: SocketAddr = match addr {
                    SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
                    SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
                };
                let socket = UdpSocket::bind(local).map_err(connect_error)?;
                socket.connect(addr).map_err(connect_error)?;
                Conn::Udp(socket)
            }
            Target::UnixDatagram(path) => {
                let socket = UnixDatagram::unbound().map_err(connect_error)?;
                socket.connect(path).map_err(connect_error)?;
                Conn::UnixDatagram(socket)
            }
            Target::UnixStream(path) => {
                Conn::UnixStream(UnixStream::connect(path).map_err(connect_error)?)
            }
            Target::Tcp(addr) => Conn::Tcp(TcpStream::connect(addr).map_err(connect_error)?),
        };
        let max_payload = target.default_max_payload();
        Ok(Client {
            target,
            socket,
            max_payload,
            packet: Vec::with_capacity(max_payload + 4),
        })
    }

    /// Sets the packet payload limit for [`Client::send_lines`], clamped to 1..=65,507 bytes
    /// (the largest UDP payload).
    pub fn with_max_payload(mut self, bytes: usize) -> Client {
        self.max_payload = bytes.clamp(1, MAX_DATAGRAM_BYTES - 29);
        self
    }

    /// The packet payload limit.
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// The target.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Sends `lines`, as many per packet as fit, separated by `\n`. A trailing `\n` or
    /// `\r\n` on a line is ignored and empty lines are skipped. A line longer than the limit
    /// is an error, raised before anything of the batch it would start is sent.
    pub fn send_lines<I, L>(&mut self, lines: I) -> Result<SendReport, SendError>
    where
        I: IntoIterator<Item = L>,
        L: AsRef<[u8]>,
    {
        let mut report = SendReport::default();
        let mut packet = std::mem::take(&mut self.packet);
        packet.clear();
        let result = (|| {
            for line in lines {
                let line = trim_line_end(line.as_ref());
                if line.is_empty() {
                    continue;
                }
                if line.len() > self.max_payload {
                    return Err(SendError::LineTooLong {
                        len: line.len(),
                        max: self.max_payload,
                    });
                }
                if !packet.is_empty() && packet.len() + 1 + line.len() > self.max_payload {
                    self.send_packet(&packet)?;
                    report.packets += 1;
                    report.bytes += packet.len();
                    packet.clear();
                }
                if !packet.is_empty() {
                    packet.push(b'\n');
                }
                packet.extend_from_slice(line);
                report.lines += 1;
            }
            if !packet.is_empty() {
                self.send_packet(&packet)?;
                report.packets += 1;
                report.bytes += packet.len();
            }
            Ok(report)
        })();
        self.packet = packet;
        result
    }

    /// Sends `payload` as one datagram, as one length-prefixed frame over a Unix stream, or
    /// followed by a newline over TCP.
    pub fn send_packet(&mut self, payload: &[u8]) -> Result<(), SendError> {
        let result = match &mut self.socket {
            Conn::Udp(socket) => socket.send(payload).map(drop),
            Conn::UnixDatagram(socket) => socket.send(payload).map(drop),
            Conn::UnixStream(stream) => match u32::try_from(payload.len()) {
                Ok(len) => {
                    let mut frame = Vec::with_capacity(4 + payload.len());
                    frame.extend_from_slice(&len.to_le_bytes());
                    frame.extend_from_slice(payload);
                    stream.write_all(&frame)
                }
                Err(_) => Err(io::Error::from(io::ErrorKind::InvalidInput)),
            },
            Conn::Tcp(stream) => {
                let mut lines = Vec::with_capacity(payload.len() + 1);
                lines.extend_from_slice(payload);
                lines.push(b'\n');
                stream.write_all(&lines)
            }
        };
        result.map_err(|source| SendError::Send {
            target: self.target.to_string(),
            source,
        })
    }
}

fn trim_line_end(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_packed_up_to_the_limit() {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        let target = Target::Udp(receiver.local_addr().unwrap());
        let mut client = Client::connect(target).unwrap().with_max_payload(10);
        let report = client
            .send_lines(["a:1|c\n", "", "b:2|c", "c:3|c\r\n", "0123456789"])
            .unwrap();
        assert_eq!(
            report,
            SendReport {
                lines: 4,
                packets: 4,
                bytes: 25
            }
        );
        let mut buf = [0u8; 64];
        let mut got = Vec::new();
        for _ in 0..4 {
            let n = receiver.recv(&mut buf).unwrap();
            got.push(String::from_utf8(buf[..n].to_vec()).unwrap());
        }
        assert_eq!(got, ["a:1|c", "b:2|c", "c:3|c", "0123456789"]);

        let mut client = client.with_max_payload(11);
        let report = client.send_lines(["a:1|c", "b:2|c", "c:3|c"]).unwrap();
        assert_eq!(report.packets, 2);
        let n = receiver.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"a:1|c\nb:2|c");
    }

    #[test]
    fn a_line_over_the_limit_is_an_error() {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut client = Client::connect(Target::Udp(receiver.local_addr().unwrap()))
            .unwrap()
            .with_max_payload(4);
        let err = client.send_lines(["abcde"]).unwrap_err();
        assert!(
            matches!(err, SendError::LineTooLong { len: 5, max: 4 }),
            "{err}"
        );
    }

    #[test]
    fn connect_errors_name_the_target() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nobody.sock");
        let err = Client::connect(Target::UnixStream(path.clone())).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("uds_stream") && text.contains("nobody.sock"),
            "{text}"
        );
        assert!(matches!(err, SendError::Connect { .. }));
        assert!(Client::connect(Target::UnixDatagram(path)).is_err());
    }
}
