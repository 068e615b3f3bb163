//! `[ingest.*]`: the sidecar's receivers, one struct per transport.
//!
//! Part of [`Config`](super::Config) in every build, so that one file serves the sidecar
//! and the library alike (the library reads these sections and ignores them). Every
//! struct is `#[serde(default, deny_unknown_fields)]`: a missing field takes the default
//! written in its doc, a misspelt one is an error.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer, de};

use super::ConfigError;

/// Default UDP address: `127.0.0.1:8125` (loopback only; the StatsD port).
pub const DEFAULT_UDP_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8125);

/// Default requested `SO_RCVBUF`: 8 MiB. Measured on a 2-core VM, the kernel's 208 KiB
/// default lost datagrams at 20-100k lines/s whenever the reader stalled; 1-8 MiB did not.
pub const DEFAULT_RECV_BUFFER_BYTES: usize = 8 * 1024 * 1024;

/// Default TCP address: `127.0.0.1:8125` (loopback only; the StatsD port, beside UDP's).
pub const DEFAULT_TCP_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8125);

/// Default largest OTLP request body, compressed or not: 4 MiB (the gRPC default).
pub const DEFAULT_OTLP_MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// Default time a stream connection may stay silent before it is closed: never (zero).
///
/// StatsD stream clients hold one connection for the life of the process and several do
/// not reconnect: Python `statsd`'s `TCPStatsClient` writes its next line into a
/// connection closed under it (lost in the kernel), and raises on the one after, into
/// the application. So silence alone closes nothing unless asked; a dead peer is seen
/// without it (a Unix peer's exit closes its end; TCP connections carry keepalive
/// probes), and `max_connections` bounds what leaked connections can hold.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::ZERO;

/// Default Unix socket file mode: `0o660`, owner and group may connect, others may not.
pub const DEFAULT_SOCKET_MODE: SocketMode = SocketMode(0o660);

/// Default datagrams per `recvmmsg` call.
pub const DEFAULT_BATCH_SIZE: usize = 32;

const MAX_THREADS: usize = 64;
const MAX_BATCH_SIZE: usize = 1024;
const MAX_RECV_BUFFER_BYTES: usize = (i32::MAX / 2) as usize;
const MAX_MESSAGE_LIMIT: usize = 16 * 1024 * 1024;
const MAX_CONNECTIONS_LIMIT: usize = 4096;

/// Default `max_connections` of the request listeners (the OTLP receivers, the HTTP
/// increment API): their clients hold one or a few long-lived connections each (an
/// OpenTelemetry exporter, an HTTP client's pool), so this leaves room for dozens of
/// them; three such listeners at the bound hold 384 descriptors, within the common soft
/// limit of 1024 beside the journal, spill files, CQL connections and the stream
/// listeners' 64 each.
pub const DEFAULT_REQUEST_MAX_CONNECTIONS: usize = 128;
const MAX_OTLP_REQUEST_LIMIT: usize = 256 * 1024 * 1024;
const MAX_OTLP_STREAMS: usize = 100_000_000;

/// All receivers. In TOML: `[udp]`, `[uds]`, `[uds_stream]`, `[tcp]` (under whatever table
/// the main config nests this in).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct IngestConfig {
    /// The UDP receiver. On by default (`127.0.0.1:8125`).
    pub udp: UdpConfig,
    /// The Unix datagram receiver. Off by default.
    pub uds: UnixDatagramConfig,
    /// The Unix stream receiver. Off by default.
    pub uds_stream: UnixStreamConfig,
    /// The TCP receiver (newline-framed lines). Off by default.
    pub tcp: TcpConfig,
    /// The OTLP/HTTP metrics receiver. Off by default.
    pub otlp_http: OtlpHttpConfig,
    /// The OTLP/gRPC metrics receiver. Off by default.
    pub otlp_grpc: OtlpGrpcConfig,
    /// How OTLP metrics become increments (both OTLP receivers).
    pub otlp: OtlpConfig,
    /// The HTTP increment API (`POST /v1/increments`). Off by default.
    pub http: HttpApiConfig,
}

/// `[ingest.http]`: the HTTP increment API, `POST /v1/increments` with a JSON array or
/// NDJSON of increments and an optional `Idempotency-Key`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpApiConfig {
    /// Whether to listen. Defaults to `false`, in `serve` and `dev` alike.
    pub enabled: bool,
    /// Address to listen on, `"IP:PORT"`. Defaults to `"127.0.0.1:9103"`. Anyone who can
    /// connect can add to counters in the database: open it wider only behind a firewall.
    #[serde(deserialize_with = "super::listen::deserialize_required")]
    pub listen: SocketAddr,
    /// Largest request body accepted, in bytes; a larger one gets 413 and is counted as
    /// `oversized`. Defaults to 4194304 (4 MiB).
    pub max_request_bytes: usize,
    /// Most increments in one request; more get 400, nothing applied. Defaults to 10000.
    pub max_items: usize,
    /// Most connections open at once; one more is accepted and closed at once, counted
    /// in `countersink_stream_connections_total{result="refused"}`. Defaults to 128.
    pub max_connections: usize,
    /// How long the answer to a request with an `Idempotency-Key` is kept: the same key
    /// and body within it get that answer again, applying nothing. Defaults to `"10m"`.
    #[serde(with = "super::duration")]
    pub idempotency_window: Duration,
    /// Most keys whose answer is kept; past it the oldest is forgotten early (counted in
    /// `countersink_idempotency_keys_total{result="evicted"}`). Defaults to 100000.
    pub max_idempotency_keys: usize,
    /// Whether a request is answered only once its increments are on disk, in the ingest
    /// log of the state directory (one `fdatasync` shared by concurrent requests): a 200
    /// then survives a SIGKILL. Defaults to `false` (a 200 means "in the buffer", like a
    /// datagram received). The log is bounded by `state.max_ingest_log_bytes`.
    pub durable: bool,
}

impl Default for HttpApiConfig {
    fn default() -> Self {
        HttpApiConfig {
            enabled: false,
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9103),
            max_request_bytes: DEFAULT_OTLP_MAX_REQUEST_BYTES,
            max_items: 10_000,
            max_connections: DEFAULT_REQUEST_MAX_CONNECTIONS,
            idempotency_window: Duration::from_secs(600),
            max_idempotency_keys: 100_000,
            durable: false,
        }
    }
}

/// One OTLP receiver's section; `$port` is its protocol's port, the default of `listen`.
macro_rules! otlp_listen_config {
    ($(#[$doc:meta])* $name:ident, $port:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct $name {
            /// Whether to listen. Defaults to `false`, in `serve` and `dev` alike.
            pub enabled: bool,
            /// Address to listen on, `"IP:PORT"`: loopback and the protocol's port by
            /// default. Anyone who can connect can add to counters in the database: open it
            /// wider only behind a firewall.
            #[serde(deserialize_with = "super::listen::deserialize_required")]
            pub listen: SocketAddr,
            /// Largest request body accepted, in bytes, compressed and once decompressed; a
            /// larger one is refused whole (HTTP 413, gRPC `RESOURCE_EXHAUSTED`) and counted
            /// as `oversized`. Defaults to 4194304 (4 MiB).
            pub max_request_bytes: usize,
            /// Most connections open at once; one more is accepted and closed at once,
            /// counted in `countersink_stream_connections_total{result="refused"}`.
            /// Defaults to 128.
            pub max_connections: usize,
        }

        impl Default for $name {
            fn default() -> Self {
                $name {
                    enabled: false,
                    listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), $port),
                    max_request_bytes: DEFAULT_OTLP_MAX_REQUEST_BYTES,
                    max_connections: DEFAULT_REQUEST_MAX_CONNECTIONS,
                }
            }
        }
    };
}

otlp_listen_config!(
    /// `[ingest.otlp_http]`: the OTLP/HTTP receiver (`POST /v1/metrics`, protobuf or JSON),
    /// `127.0.0.1:4318` by default.
    OtlpHttpConfig,
    4318
);
otlp_listen_config!(
    /// `[ingest.otlp_grpc]`: the OTLP/gRPC receiver, `127.0.0.1:4317` by default.
    OtlpGrpcConfig,
    4317
);

/// `[ingest.otlp]`: which OTLP attributes become tags.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OtlpConfig {
    /// Resource attributes kept as tags (data point attributes always are). Defaults to
    /// `["service.name"]`: per-process attributes such as `service.instance.id` or
    /// `host.name` would make one row per process; add them knowingly.
    pub resource_attributes: Vec<String>,
    /// Instrumentation scope attributes kept as tags. Defaults to none.
    pub scope_attributes: Vec<String>,
    /// Most cumulative streams whose last point is kept (both receivers share the table);
    /// beyond it the least recently seen are evicted (counted), and an evicted stream's
    /// next point only sets its baseline again (counted as `cumulative_baseline`). The
    /// table is saved in the state directory (`otlp_streams.bin`, 40 bytes per stream)
    /// at each flush and read back at start. Defaults to 100000.
    pub max_streams: usize,
    /// Whether an export is answered only once its points' increments are on disk, in
    /// the ingest log of the state directory (as `ingest.http.durable`): an answered
    /// export then survives a SIGKILL. For both OTLP receivers, which share the stream
    /// table: with it, each cumulative stream's last point is written with the increment
    /// it produced (`ingest.streams.jsonl` keeps them), so an exporter's retry of an
    /// export whose answer it lost counts nothing twice. A delta export retried that way
    /// counts twice (OTLP carries no idempotency key). Defaults to `false`.
    pub durable: bool,
}

impl Default for OtlpConfig {
    fn default() -> Self {
        OtlpConfig {
            resource_attributes: vec!["service.name".into()],
            scope_attributes: Vec::new(),
            max_streams: 100_000,
            durable: false,
        }
    }
}

/// The UDP receiver.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UdpConfig {
    /// Address to listen on, `"IP:PORT"`, or `"off"` (`None`) to disable UDP.
    /// Defaults to `"127.0.0.1:8125"`. Port 0 picks a free port (tests).
    #[serde(deserialize_with = "super::listen::deserialize")]
    pub listen: Option<SocketAddr>,
    /// Receive threads, one socket each (`SO_REUSEPORT` when more than 1). The kernel spreads
    /// senders over the sockets by address hash, so one sender always lands on one thread.
    /// Defaults to 1; raise it only with cores to spare (one core per thread). Note that any
    /// process of the same user that also sets `SO_REUSEPORT` can then join the port and take
    /// a share of the traffic; with 1 thread a second listener fails with "address in use".
    pub threads: usize,
    /// Requested `SO_RCVBUF` per socket, in bytes; 0 keeps the system default. When
    /// `net.core.rmem_max` caps it, `SO_RCVBUFFORCE` is tried (needs `CAP_NET_ADMIN`), else a
    /// warning names the sysctl. Defaults to 8 MiB (8388608).
    pub recv_buffer_bytes: usize,
    /// Datagrams read per system call (`recvmmsg`); 1 uses plain `recvmsg`. Each slot holds a
    /// 64 KiB buffer (mostly untouched memory). Defaults to 32.
    pub batch_size: usize,
}

impl Default for UdpConfig {
    fn default() -> Self {
        UdpConfig {
            listen: Some(DEFAULT_UDP_LISTEN),
            threads: 1,
            recv_buffer_bytes: DEFAULT_RECV_BUFFER_BYTES,
            batch_size: DEFAULT_BATCH_SIZE,
        }
    }
}

/// The Unix datagram receiver.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UnixDatagramConfig {
    /// Socket path; absent (`None`) disables the receiver. Defaults to none.
    pub path: Option<PathBuf>,
    /// File mode of the socket file: an integer (`0o660` in TOML) or an octal string
    /// (`"0660"`). Connecting needs write permission. Defaults to `0o660`.
    pub mode: SocketMode,
    /// Requested `SO_RCVBUF`, in bytes; 0 keeps the system default. How many datagrams may
    /// wait is limited separately by the `net.unix.max_dgram_qlen` sysctl (default 10, which
    /// makes blocking senders wait; 512 or more is advised). Defaults to 8 MiB (8388608).
    pub recv_buffer_bytes: usize,
    /// Datagrams read per system call (`recvmmsg`); 1 uses plain `recvmsg`. Defaults to 32.
    pub batch_size: usize,
}

impl Default for UnixDatagramConfig {
    fn default() -> Self {
        UnixDatagramConfig {
            path: None,
            mode: DEFAULT_SOCKET_MODE,
            recv_buffer_bytes: DEFAULT_RECV_BUFFER_BYTES,
            batch_size: DEFAULT_BATCH_SIZE,
        }
    }
}

/// How a stream connection's bytes are cut into lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamFraming {
    /// Decided per connection on its first four bytes: a DogStatsD length prefix of a
    /// message within `max_message_bytes` (at most 16 MiB) has a fourth byte of 0 or 1,
    /// which no StatsD line has (a line's fourth byte is part of its name, value or `:`);
    /// anything else is a newline-framed stream. The default: both kinds of client work
    /// against one socket, and neither can be mistaken for the other.
    Auto,
    /// Every message is preceded by its length, 4 bytes little-endian (DogStatsD).
    Length,
    /// Lines end with `\n` (`\r\n` accepted): Python `statsd`'s `UnixSocketStatsClient`.
    Newline,
}

/// The Unix stream receiver: DogStatsD framing (each message preceded by its length as a
/// 4-byte little-endian unsigned integer) or newline-framed lines, see [`StreamFraming`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UnixStreamConfig {
    /// Socket path; absent (`None`) disables the receiver. Defaults to none.
    pub path: Option<PathBuf>,
    /// File mode of the socket file, as for [`UnixDatagramConfig::mode`]. Defaults to `0o660`.
    pub mode: SocketMode,
    /// `"auto"`, `"length"` or `"newline"`. Defaults to `"auto"`.
    pub framing: StreamFraming,
    /// Largest message (the length prefix not included) or line (the newline not
    /// included) accepted, in bytes; nothing larger is ever allocated. An oversized
    /// length-prefixed message closes its connection (what follows cannot be trusted); an
    /// oversized line is dropped up to the next newline and the connection goes on. Both
    /// are counted as oversized. Defaults to 65536.
    pub max_message_bytes: usize,
    /// Connections served at once (one thread each). Further connections are closed at once
    /// and counted as refused. Defaults to 64.
    pub max_connections: usize,
    /// A connection that sends nothing for this long is closed (counted as
    /// `idle_timeout`); `"0s"` keeps silent connections open. Defaults to `"0s"` (see
    /// [`DEFAULT_IDLE_TIMEOUT`] for why).
    #[serde(with = "super::duration")]
    pub idle_timeout: Duration,
}

impl Default for UnixStreamConfig {
    fn default() -> Self {
        UnixStreamConfig {
            path: None,
            mode: DEFAULT_SOCKET_MODE,
            framing: StreamFraming::Auto,
            max_message_bytes: 64 * 1024,
            max_connections: 64,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }
}

/// The TCP receiver: StatsD lines, newline-framed (`\r\n` accepted), as StatsD's own TCP
/// server and Python `statsd`'s `TCPStatsClient` write them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TcpConfig {
    /// Whether to listen. Defaults to `false`, in `serve` and `dev` alike (the flag
    /// `--tcp ADDR` turns it on).
    pub enabled: bool,
    /// Address to listen on, `"IP:PORT"`. Defaults to `"127.0.0.1:8125"`: loopback only,
    /// the StatsD port (TCP and UDP may share the number). Anyone who can connect can add
    /// to counters in the database: open it wider only behind a firewall.
    #[serde(deserialize_with = "super::listen::deserialize_required")]
    pub listen: SocketAddr,
    /// Longest line accepted, in bytes (the newline not included). A longer one is dropped
    /// up to the next newline, counted as oversized, and the connection goes on; at most
    /// this much is buffered per connection. Defaults to 65536.
    pub max_line_bytes: usize,
    /// Connections served at once (one thread each). Further connections are closed at once
    /// and counted as refused. Defaults to 64.
    pub max_connections: usize,
    /// A connection that sends nothing for this long is closed (counted as
    /// `idle_timeout`); `"0s"` keeps silent connections open. Defaults to `"0s"` (see
    /// [`DEFAULT_IDLE_TIMEOUT`] for why).
    #[serde(with = "super::duration")]
    pub idle_timeout: Duration,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            enabled: false,
            listen: DEFAULT_TCP_LISTEN,
            max_line_bytes: 64 * 1024,
            max_connections: 64,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }
}

/// Permission bits of a Unix socket file (`0o000`..=`0o777`).
///
/// The default, `0o660`, lets the sidecar's user and group connect. Anyone who can connect
/// can add to counters in the database, so the world is left out; give the application
/// containers the socket's group (or use `0o666`/`0o622` knowingly). Read bits have no effect
/// on Unix sockets; write permission is what `connect`/`sendto` check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketMode(u32);

impl SocketMode {
    /// A mode from its permission bits; `None` if any bit above `0o777` is set.
    pub const fn new(bits: u32) -> Option<SocketMode> {
        if bits <= 0o777 {
            Some(SocketMode(bits))
        } else {
            None
        }
    }

    /// The permission bits.
    pub const fn bits(self) -> u32 {
        self.0
    }
}

impl Default for SocketMode {
    fn default() -> Self {
        DEFAULT_SOCKET_MODE
    }
}

impl std::fmt::Display for SocketMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "0o{:03o}", self.0)
    }
}

impl<'de> Deserialize<'de> for SocketMode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u32),
            Text(String),
        }
        let bits = match Raw::deserialize(deserializer)? {
            Raw::Int(bits) => bits,
            Raw::Text(text) => {
                let digits = text.trim();
                let digits = digits.strip_prefix("0o").unwrap_or(digits);
                u32::from_str_radix(digits, 8).map_err(|_| {
                    de::Error::custom(format!(
                        "socket mode {text:?} is not an octal number like \"0660\""
                    ))
                })?
            }
        };
        SocketMode::new(bits)
            .ok_or_else(|| de::Error::custom(format!("socket mode 0o{bits:o} is above 0o777")))
    }
}

impl IngestConfig {
    /// Whether a receiver that is on answers only once its increments are on disk (the
    /// state directory then keeps an ingest log).
    pub fn durable(&self) -> bool {
        (self.http.enabled && self.http.durable)
            || (self.otlp.durable && (self.otlp_http.enabled || self.otlp_grpc.enabled))
    }

    /// Checks every range; the error names the field (`ingest.udp.threads`). The
    /// receivers check it again before binding anything.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let udp = &self.udp;
        check_range("udp.threads", udp.threads, 1, MAX_THREADS)?;
        check_range("udp.batch_size", udp.batch_size, 1, MAX_BATCH_SIZE)?;
        check_range(
            "udp.recv_buffer_bytes",
            udp.recv_buffer_bytes,
            0,
            MAX_RECV_BUFFER_BYTES,
        )?;
        check_range("uds.batch_size", self.uds.batch_size, 1, MAX_BATCH_SIZE)?;
        check_range(
            "uds.recv_buffer_bytes",
            self.uds.recv_buffer_bytes,
            0,
            MAX_RECV_BUFFER_BYTES,
        )?;
        let stream = &self.uds_stream;
        check_range(
            "uds_stream.max_message_bytes",
            stream.max_message_bytes,
            1,
            MAX_MESSAGE_LIMIT,
        )?;
        check_range(
            "uds_stream.max_connections",
            stream.max_connections,
            1,
            MAX_CONNECTIONS_LIMIT,
        )?;
        check_range(
            "tcp.max_line_bytes",
            self.tcp.max_line_bytes,
            1,
            MAX_MESSAGE_LIMIT,
        )?;
        check_range(
            "tcp.max_connections",
            self.tcp.max_connections,
            1,
            MAX_CONNECTIONS_LIMIT,
        )?;
        for (key, value) in [
            ("otlp_http.max_connections", self.otlp_http.max_connections),
            ("otlp_grpc.max_connections", self.otlp_grpc.max_connections),
            ("http.max_connections", self.http.max_connections),
        ] {
            check_range(key, value, 1, MAX_CONNECTIONS_LIMIT)?;
        }
        check_range(
            "otlp_http.max_request_bytes",
            self.otlp_http.max_request_bytes,
            1024,
            MAX_OTLP_REQUEST_LIMIT,
        )?;
        check_range(
            "otlp_grpc.max_request_bytes",
            self.otlp_grpc.max_request_bytes,
            1024,
            MAX_OTLP_REQUEST_LIMIT,
        )?;
        check_range(
            "http.max_request_bytes",
            self.http.max_request_bytes,
            1024,
            MAX_OTLP_REQUEST_LIMIT,
        )?;
        check_range("http.max_items", self.http.max_items, 1, 1_000_000)?;
        check_range(
            "http.max_idempotency_keys",
            self.http.max_idempotency_keys,
            1,
            10_000_000,
        )?;
        check_range(
            "otlp.max_streams",
            self.otlp.max_streams,
            2,
            MAX_OTLP_STREAMS,
        )?;
        if let (Some(a), Some(b)) = (&self.uds.path, &stream.path)
            && a == b
        {
            return Err(ConfigError::invalid(
                "ingest.uds_stream.path",
                format!("{} is also the ingest.uds.path", b.display()),
            ));
        }
        for (field, path) in [
            ("ingest.uds.path", &self.uds.path),
            ("ingest.uds_stream.path", &stream.path),
        ] {
            if let Some(path) = path
                && path.file_name().is_none()
            {
                return Err(ConfigError::invalid(
                    field,
                    format!("{} does not name a file", path.display()),
                ));
            }
        }
        Ok(())
    }
}

fn check_range(field: &str, value: usize, min: usize, max: usize) -> Result<(), ConfigError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(ConfigError::invalid(
            format!("ingest.{field}"),
            format!("{value} is outside {min}..={max}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_from_empty_toml() {
        let config: IngestConfig = toml::from_str("").unwrap();
        assert_eq!(config, IngestConfig::default());
        assert_eq!(config.udp.listen, Some(DEFAULT_UDP_LISTEN));
        assert_eq!(config.uds.path, None);
        assert_eq!(config.uds_stream.mode.bits(), 0o660);
        config.validate().unwrap();
    }

    #[test]
    fn full_toml_parses() {
        let config: IngestConfig = toml::from_str(
            r#"
            [udp]
            listen = "off"
            threads = 2
            recv_buffer_bytes = 0
            batch_size = 1
            [uds]
            path = "/run/countersink/dsd.sock"
            mode = 0o622
            [uds_stream]
            path = "/run/countersink/dsd-stream.sock"
            mode = "0600"
            framing = "newline"
            max_message_bytes = 8192
            max_connections = 4
            idle_timeout = "30s"
            [tcp]
            enabled = true
            listen = "0.0.0.0:9125"
            max_line_bytes = 1024
            max_connections = 8
            idle_timeout = "0s"
            [otlp_grpc]
            max_connections = 16
            [otlp_http]
            max_connections = 17
            [http]
            max_connections = 18
            "#,
        )
        .unwrap();
        assert_eq!(
            (
                config.otlp_grpc.max_connections,
                config.otlp_http.max_connections,
                config.http.max_connections
            ),
            (16, 17, 18)
        );
        assert_eq!(config.udp.listen, None);
        assert_eq!(config.udp.threads, 2);
        assert_eq!(config.uds.mode.bits(), 0o622);
        assert_eq!(config.uds_stream.mode.bits(), 0o600);
        assert_eq!(config.uds_stream.max_connections, 4);
        assert_eq!(config.uds_stream.framing, StreamFraming::Newline);
        assert_eq!(config.uds_stream.idle_timeout, Duration::from_secs(30));
        assert!(config.tcp.enabled);
        assert_eq!(config.tcp.listen, "0.0.0.0:9125".parse().unwrap());
        assert_eq!(config.tcp.idle_timeout, Duration::ZERO);
        config.validate().unwrap();
    }

    #[test]
    fn listen_values_parse_like_the_cli_flag() {
        use crate::config::listen::parse;
        assert_eq!(parse(" OFF "), Ok(None));
        assert_eq!(parse("[::1]:9125"), Ok(Some("[::1]:9125".parse().unwrap())));
        let err = parse("localhost:8125").unwrap_err();
        assert!(err.contains("IP:PORT"), "{err}");
    }

    #[test]
    fn unknown_fields_and_bad_values_are_rejected() {
        assert!(toml::from_str::<IngestConfig>("[udp]\nthread = 2").is_err());
        assert!(toml::from_str::<IngestConfig>("[udp]\nlisten = \"localhost\"").is_err());
        assert!(toml::from_str::<IngestConfig>("[uds]\nmode = 0o1777").is_err());
        assert!(toml::from_str::<IngestConfig>("[uds]\nmode = \"rw\"").is_err());
        assert!(toml::from_str::<IngestConfig>("[uds_stream]\nframing = \"nul\"").is_err());
        assert!(toml::from_str::<IngestConfig>("[tcp]\nlisten = \"off\"").is_err());
        let config: IngestConfig = toml::from_str("[tcp]\nmax_line_bytes = 0").unwrap();
        let err = config.validate().unwrap_err();
        assert!(
            err.to_string().contains("ingest.tcp.max_line_bytes"),
            "{err}"
        );
        for section in ["otlp_grpc", "otlp_http", "http"] {
            let config: IngestConfig =
                toml::from_str(&format!("[{section}]\nmax_connections = 0")).unwrap();
            let err = config.validate().unwrap_err();
            let key = format!("ingest.{section}.max_connections");
            assert!(err.to_string().contains(&key), "{err}");
        }
        let config: IngestConfig = toml::from_str("[udp]\nthreads = 0").unwrap();
        let err = config.validate().unwrap_err();
        assert!(err.to_string().contains("ingest.udp.threads"), "{err}");
        let config: IngestConfig =
            toml::from_str("[uds]\npath = \"/tmp/a\"\n[uds_stream]\npath = \"/tmp/a\"").unwrap();
        assert!(config.validate().is_err());
    }
}
