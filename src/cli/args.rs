//! Flags shared by `serve` and `dev`, and how they override the config file.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::config::{Config, ConfigError, ConsistencyLevel, duration};

use super::Failure;

/// A listen address or `off`, as a flag value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Listen(pub(super) Option<SocketAddr>);

fn listen(text: &str) -> Result<Listen, String> {
    crate::config::listen::parse(text).map(Listen)
}

pub(super) fn parse_duration(text: &str) -> Result<Duration, String> {
    duration::parse(text)
}

/// A consistency level as a flag value: `one`, `local_quorum`, ...
pub(super) fn consistency(text: &str) -> Result<ConsistencyLevel, String> {
    Ok(match text {
        "one" => ConsistencyLevel::One,
        "two" => ConsistencyLevel::Two,
        "three" => ConsistencyLevel::Three,
        "quorum" => ConsistencyLevel::Quorum,
        "all" => ConsistencyLevel::All,
        "local_one" => ConsistencyLevel::LocalOne,
        "local_quorum" => ConsistencyLevel::LocalQuorum,
        "each_quorum" => ConsistencyLevel::EachQuorum,
        other => {
            return Err(format!(
                "`{other}` is not a consistency level (one, local_one, local_quorum, quorum, all)"
            ));
        }
    })
}

/// A UTC day written `YYYY-MM-DD`.
pub(super) fn day(text: &str) -> Result<crate::bucket::Day, String> {
    let now = crate::bucket::unix_secs(std::time::SystemTime::now());
    day_at(text, now)
}

/// A UTC day: `YYYY-MM-DD`, or `today` / `yesterday` at `now_unix_secs` (for jobs whose
/// image has no shell to compute a date, such as a Kubernetes CronJob on a `FROM scratch`
/// image).
fn day_at(text: &str, now_unix_secs: i64) -> Result<crate::bucket::Day, String> {
    let today = u32::try_from(now_unix_secs.div_euclid(86_400)).ok();
    let relative = match text {
        "today" => Some(today),
        "yesterday" => Some(today.and_then(|d| d.checked_sub(1))),
        _ => None,
    };
    match relative {
        Some(day) => day
            .map(crate::bucket::Day)
            .ok_or_else(|| format!("`{text}` is before 1970")),
        None => crate::bucket::parse_date(text)
            .and_then(crate::bucket::Day::from_date)
            .ok_or_else(|| format!("`{text}` is not a date like 2026-11-30 (or today, yesterday)")),
    }
}

/// The flags of `serve` (and, with more, of `dev`).
#[derive(Debug, Args)]
pub(super) struct ServeArgs {
    /// Config file (TOML).
    #[arg(long, env = "COUNTERSINK_CONFIG", value_name = "FILE")]
    pub(super) config: Option<PathBuf>,
    /// UDP address to receive on, or `off` [default: 127.0.0.1:8125].
    #[arg(long, env = "COUNTERSINK_UDP", value_name = "ADDR", value_parser = listen)]
    pub(super) udp: Option<Listen>,
    /// Unix datagram socket to receive on.
    #[arg(long, env = "COUNTERSINK_UDS", value_name = "PATH")]
    pub(super) uds: Option<PathBuf>,
    /// Unix stream socket to receive on (DogStatsD length prefixes or newline-ended lines,
    /// told apart per connection unless `ingest.uds_stream.framing` says which).
    #[arg(
        long = "uds-stream",
        env = "COUNTERSINK_UDS_STREAM",
        value_name = "PATH"
    )]
    pub(super) uds_stream: Option<PathBuf>,
    /// TCP address to receive newline-framed lines on, or `off` [default: off; the
    /// address when on is 127.0.0.1:8125].
    #[arg(long, env = "COUNTERSINK_TCP", value_name = "ADDR", value_parser = listen)]
    pub(super) tcp: Option<Listen>,
    /// OTLP/HTTP address to receive OpenTelemetry metrics on, or `off` [default: off; the
    /// address when on is 127.0.0.1:4318].
    #[arg(long = "otlp-http", env = "COUNTERSINK_OTLP_HTTP", value_name = "ADDR", value_parser = listen)]
    pub(super) otlp_http: Option<Listen>,
    /// OTLP/gRPC address to receive OpenTelemetry metrics on, or `off` [default: off; the
    /// address when on is 127.0.0.1:4317].
    #[arg(long = "otlp-grpc", env = "COUNTERSINK_OTLP_GRPC", value_name = "ADDR", value_parser = listen)]
    pub(super) otlp_grpc: Option<Listen>,
    /// HTTP address of the increment API (`POST /v1/increments`), or `off` [default: off;
    /// the address when on is 127.0.0.1:9103].
    #[arg(long = "http", env = "COUNTERSINK_HTTP", value_name = "ADDR", value_parser = listen)]
    pub(super) http: Option<Listen>,
    /// HTTP address of /metrics, /healthz and /readyz, or `off` [default: 127.0.0.1:9102].
    #[arg(long, env = "COUNTERSINK_METRICS", value_name = "ADDR", value_parser = listen)]
    pub(super) metrics: Option<Listen>,
    /// A contact point of the cluster; repeat for several (env: comma-separated).
    #[arg(
        long = "contact-point",
        env = "COUNTERSINK_CONTACT_POINTS",
        value_name = "HOST:PORT",
        value_delimiter = ','
    )]
    pub(super) contact_points: Vec<String>,
    /// Keyspace of the generic tables.
    #[arg(long, env = "COUNTERSINK_KEYSPACE", value_name = "KS")]
    pub(super) keyspace: Option<String>,
    /// Local data centre, for DC-aware load balancing.
    #[arg(long = "local-dc", env = "COUNTERSINK_LOCAL_DC", value_name = "DC")]
    pub(super) local_dc: Option<String>,
    /// Time between flushes, like `5s` or `250ms`.
    #[arg(long = "flush-interval", env = "COUNTERSINK_FLUSH_INTERVAL", value_name = "DURATION", value_parser = parse_duration)]
    pub(super) flush_interval: Option<Duration>,
    /// State directory (intent journal, outcome logs, spill).
    #[arg(long = "state-dir", env = "COUNTERSINK_STATE_DIR", value_name = "DIR")]
    pub(super) state_dir: Option<PathBuf>,
    /// Log format: `text` or `json`.
    #[arg(
        long = "log-format",
        env = "COUNTERSINK_LOG_FORMAT",
        value_name = "FORMAT"
    )]
    pub(super) log_format: Option<crate::config::LogFormat>,
    /// Refuse to start when the state directory's filesystem has less room than the
    /// configuration lets countersink write there (`countersink state-size`); without
    /// it, a warning.
    #[arg(long, env = "COUNTERSINK_STRICT")]
    pub(super) strict: bool,
}

impl ServeArgs {
    /// The configuration: the file (or defaults), then environment and flags on top.
    pub(super) fn load(&self) -> Result<Config, Failure> {
        let mut config = match &self.config {
            Some(path) => Config::from_file(path).map_err(Failure::usage)?,
            None => Config::default(),
        };
        self.apply(&mut config);
        config.validate().map_err(Failure::usage)?;
        config.ingest.validate().map_err(Failure::usage)?;
        Ok(config)
    }

    fn apply(&self, config: &mut Config) {
        if let Some(Listen(udp)) = self.udp {
            config.ingest.udp.listen = udp;
        }
        if let Some(path) = &self.uds {
            config.ingest.uds.path = Some(path.clone());
        }
        if let Some(path) = &self.uds_stream {
            config.ingest.uds_stream.path = Some(path.clone());
        }
        if let Some(Listen(tcp)) = self.tcp {
            config.ingest.tcp.enabled = tcp.is_some();
            if let Some(addr) = tcp {
                config.ingest.tcp.listen = addr;
            }
        }
        if let Some(Listen(otlp)) = self.otlp_http {
            config.ingest.otlp_http.enabled = otlp.is_some();
            if let Some(addr) = otlp {
                config.ingest.otlp_http.listen = addr;
            }
        }
        if let Some(Listen(otlp)) = self.otlp_grpc {
            config.ingest.otlp_grpc.enabled = otlp.is_some();
            if let Some(addr) = otlp {
                config.ingest.otlp_grpc.listen = addr;
            }
        }
        if let Some(Listen(http)) = self.http {
            config.ingest.http.enabled = http.is_some();
            if let Some(addr) = http {
                config.ingest.http.listen = addr;
            }
        }
        if let Some(Listen(metrics)) = self.metrics {
            config.metrics.listen = metrics;
        }
        if !self.contact_points.is_empty() {
            config.store.contact_points = self.contact_points.clone();
        }
        if let Some(keyspace) = &self.keyspace {
            config.store.keyspace = keyspace.clone();
        }
        if let Some(dc) = &self.local_dc {
            config.store.local_dc = Some(dc.clone());
        }
        if let Some(interval) = self.flush_interval {
            config.flush.interval = interval;
            // Keep the default jitter valid for short intervals.
            if config.flush.jitter >= interval {
                config.flush.jitter = interval / 10;
            }
        }
        if let Some(dir) = &self.state_dir {
            config.state.dir = dir.clone();
        }
        if let Some(format) = self.log_format {
            config.log.format = format;
        }
    }
}

/// Maps a configuration error to exit code 2.
impl From<ConfigError> for Failure {
    fn from(error: ConfigError) -> Failure {
        Failure::usage(error)
    }
}

#[cfg(test)]
mod tests {
    use super::day_at;
    use crate::bucket::Day;

    /// `today` and `yesterday` are UTC days at the given time; dates parse as before; the
    /// rest is refused with the forms it takes.
    #[test]
    fn days_are_dates_or_today_or_yesterday() {
        // 2026-12-01T00:30:00Z is day 20_788.
        let now = 20_788 * 86_400 + 1_800;
        assert_eq!(day_at("today", now), Ok(Day(20_788)));
        assert_eq!(day_at("yesterday", now), Ok(Day(20_787)));
        assert_eq!(day_at("2026-11-30", now), Ok(Day(20_787)));
        assert!(day_at("yesterday", 3_600).is_err());
        let refused = day_at("tomorrow", now).unwrap_err();
        assert!(refused.contains("today, yesterday"), "{refused}");
    }
}
