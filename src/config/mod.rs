//! The configuration file (TOML), its defaults, and its validation.
//!
//! Every section rejects unknown keys, so a typo is an error rather than a silently
//! ignored setting. Every field documents its unit and default; `examples/countersink.toml`
//! shows them all and a test parses it. [`Config::validate`] turns a parsed file into
//! checked settings or a [`ConfigError`] that names the offending field.

pub mod cardinality;
pub mod duration;
pub mod epochs;
pub mod exact;
pub mod ingest;
pub mod listen;
pub mod mapping;
pub mod mode;
pub mod operations;
pub mod reload;
pub mod tables;
mod validate;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use self::cardinality::CardinalityConfig;
pub use self::epochs::EpochsConfig;
pub use self::exact::ExactConfig;
pub use self::ingest::IngestConfig;
pub use self::mapping::{FamilyTagsConfig, MappingConfig, TagsConfig};
pub use self::mode::{CountingMode, ModeFeature};
pub use self::operations::{KeyIndexConfig, LeaderboardConfig, LeaderboardPeriod, ReadConfig};
pub use self::tables::{
    DayTimeConfig, MinuteTimeConfig, TableTime, TimeColumn, TimeRole, TimeType,
};
pub use self::validate::ConfigError;

/// The whole configuration file.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// How the Cassandra/ScyllaDB cluster is reached.
    pub store: StoreConfig,
    /// When and how pending rows are written.
    pub flush: FlushConfig,
    /// What the buffer accepts.
    pub limits: LimitsConfig,
    /// The window of the cardinality caps, and their default.
    pub cardinality: CardinalityConfig,
    /// Where outcome logs and the spill live.
    pub state: StateConfig,
    /// The zero-configuration family every unmatched counter lands in.
    pub generic: GenericConfig,
    /// Configured families: metric names mapped to counter columns of your own tables.
    #[serde(rename = "family")]
    pub families: Vec<FamilyConfig>,
    /// Name-mapping rules: dotted names matching a pattern go to a configured family,
    /// with key columns filled from the pattern's captures.
    #[serde(rename = "mapping")]
    pub mappings: Vec<MappingConfig>,
    /// Tag rules of every family: deny and allow lists, renames, the default deny list.
    pub tags: TagsConfig,
    /// The sidecar's receivers: `[ingest.udp]`, `[ingest.uds]`, `[ingest.uds_stream]`, `[ingest.tcp]`.
    /// Read in every build (one file serves the sidecar and the library); only the
    /// sidecar uses it.
    pub ingest: IngestConfig,
    /// The sidecar's HTTP endpoint.
    pub metrics: MetricsConfig,
    /// Logging.
    pub log: LogConfig,
    /// The read path: consistency and cache of the in-process read API.
    pub read: ReadConfig,
    /// The key index: keys written per family and day.
    pub key_index: KeyIndexConfig,
    /// Leaderboards: rankings of a family's keys by a counter column.
    #[serde(rename = "leaderboard")]
    pub leaderboards: Vec<LeaderboardConfig>,
    /// Epochs: resets without deletes, for families with an `epoch_column`.
    pub epochs: EpochsConfig,
    /// Exact totals beside the counters: the delta ledger, the outcomes table,
    /// reconciliation.
    pub exact: ExactConfig,
}

/// `[metrics]`: the HTTP endpoint of `/metrics`, `/healthz` and `/readyz`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Address, `"IP:PORT"`, or `"off"`. Default `"127.0.0.1:9102"`.
    #[serde(deserialize_with = "listen::deserialize")]
    pub listen: Option<std::net::SocketAddr>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 9102))),
        }
    }
}

/// `[log]`: structured logs on stderr.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `"text"` or `"json"`. Default `"text"`.
    pub format: LogFormat,
    /// A `tracing` filter such as `"info"` or `"countersink=debug,info"`; `COUNTERSINK_LOG`
    /// or `RUST_LOG` in the environment override it. Default `"info"`.
    pub filter: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: LogFormat::Text,
            filter: "info".into(),
        }
    }
}

/// Log line format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("`{other}` is not a log format (text or json)")),
        }
    }
}

impl Config {
    /// Parses a TOML document (without validating it; see [`Config::validate`]).
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::parse(e.message(), e.span(), text))
    }

    /// Reads and parses a config file.
    pub fn from_file(path: &std::path::Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.to_owned(),
            error: e.to_string(),
        })?;
        Config::from_toml(&text)
    }
}

/// `[store]`: the cluster and the session settings.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// Contact points, `host:port`. Default `["127.0.0.1:9042"]`.
    pub contact_points: Vec<String>,
    /// Keyspace of the generic tables, and of family tables not written `ks.table`.
    /// Default `"countersink"`.
    pub keyspace: String,
    /// Local data centre for DC-aware load balancing; when unset the driver's default
    /// (token-aware, any DC) applies. Default unset.
    pub local_dc: Option<String>,
    /// Consistency of counter writes. Default `"local_quorum"`.
    pub consistency: ConsistencyLevel,
    /// Client-side timeout of one write request; longer than the server's counter write
    /// timeout (5 s in Cassandra) so that slow writes surface as the server's
    /// WriteTimeout. A timed-out write is an unknown outcome. Default `"10s"`.
    #[serde(with = "duration")]
    pub request_timeout: Duration,
    /// Timeout of opening a connection. Default `"5s"`.
    #[serde(with = "duration")]
    pub connect_timeout: Duration,
    /// User name for password authentication. Default unset (no authentication).
    pub username: Option<String>,
    /// File holding the password (first line). The password is never read from the
    /// config file or the command line; `COUNTERSINK_PASSWORD` in the environment is the
    /// other way. Default unset.
    pub password_file: Option<PathBuf>,
    /// TLS to the cluster (needs a build with the `tls` feature).
    pub tls: TlsConfig,
}

/// `[store.tls]`: TLS to the cluster, through the driver's rustls support. Available in
/// builds with the `tls` feature (`cargo build --release --features tls`); enabling it in
/// a build without is a configuration error.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// Whether to connect with TLS. Default `false`.
    pub enabled: bool,
    /// PEM file of the CA certificate(s) that issued the nodes' certificates (the only
    /// trust anchors). Required when enabled. Default unset.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate chain, for clusters that require client certificates;
    /// set together with `key_file`. Default unset.
    pub cert_file: Option<PathBuf>,
    /// PEM private key of the client certificate. Default unset.
    pub key_file: Option<PathBuf>,
    /// Whether a node's certificate must name the address it is reached at. When false,
    /// the chain and dates are still verified. Default `true`.
    pub verify_hostname: bool,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            enabled: false,
            ca_file: None,
            cert_file: None,
            key_file: None,
            verify_hostname: true,
        }
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            contact_points: vec!["127.0.0.1:9042".into()],
            keyspace: "countersink".into(),
            local_dc: None,
            consistency: ConsistencyLevel::LocalQuorum,
            request_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            username: None,
            password_file: None,
            tls: TlsConfig::default(),
        }
    }
}

/// Consistency levels that make sense for counter writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ConsistencyLevel {
    /// ONE
    One,
    /// TWO
    Two,
    /// THREE
    Three,
    /// QUORUM
    Quorum,
    /// ALL
    All,
    /// LOCAL_ONE
    LocalOne,
    /// LOCAL_QUORUM (the default)
    LocalQuorum,
    /// EACH_QUORUM
    EachQuorum,
}

/// `[flush]`: when and how pending rows are written.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct FlushConfig {
    /// Time between flushes. Default `"5s"`.
    #[serde(with = "duration")]
    pub interval: Duration,
    /// Each flush starts up to this much earlier or later than the interval says, at
    /// random, so that a fleet started together does not write at the same instant.
    /// Default `"500ms"`.
    #[serde(with = "duration")]
    pub jitter: Duration,
    /// Most rows in one COUNTER BATCH (all in one partition). Larger partitions are
    /// written as several batches, which keeps each under Cassandra's batch size
    /// warning. Default `16`.
    pub max_batch_rows: usize,
    /// Most write requests in flight at once. Default `64`.
    pub max_in_flight: usize,
    /// A write that keeps failing with "definitely not applied" errors is re-queued
    /// until it is this old, then spilled to disk for the next start. Default `"10m"`.
    #[serde(with = "duration")]
    pub requeue_max_age: Duration,
    /// How long the final flush on shutdown may take before what is left is spilled.
    /// Fits a 30 s Kubernetes grace period with time to spare. Default `"20s"`.
    #[serde(with = "duration")]
    pub shutdown_deadline: Duration,
    /// While the store applies nothing (down, unreachable, failing every write), the wait
    /// between flushes doubles from `interval` up to this, jittered, and the first flush
    /// that applies anything resets it. Default `"60s"`.
    #[serde(with = "duration")]
    pub max_backoff: Duration,
}

impl Default for FlushConfig {
    fn default() -> Self {
        FlushConfig {
            interval: Duration::from_secs(5),
            jitter: Duration::from_millis(500),
            max_batch_rows: 16,
            max_in_flight: 64,
            requeue_max_age: Duration::from_secs(600),
            shutdown_deadline: Duration::from_secs(20),
            max_backoff: Duration::from_secs(60),
        }
    }
}

/// `[limits]`: what the buffer accepts. Each limit is counted when it bites.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Most distinct pending rows (series × minute); new rows beyond it are dropped
    /// (`reason="max_rows"`). Default `1000000`.
    pub max_pending_rows: usize,
    /// Most estimated bytes held: rows (pending, in flight, re-queued) take up to three
    /// quarters, and new rows beyond are dropped (`reason="max_bytes"`); the last quarter
    /// bounds the writes of the chunk a flush is sending. Default `268435456` (256 MiB).
    pub max_pending_bytes: usize,
    /// Longest series key in bytes (metric name plus canonical tags, or the key tag
    /// values of a configured family); longer lines are invalid (`key_too_long`).
    /// Default `1024`.
    pub max_key_bytes: usize,
    /// Longest line in bytes; longer lines are invalid (`too_long`). Default `8192`.
    pub max_line_bytes: usize,
    /// Most tags on one line; more are invalid (`too_many_tags`). Default `64`.
    pub max_tags: usize,
    /// Oldest client timestamp (`|T`) accepted, relative to now; older lines are
    /// dropped (`reason="timestamp_window"`). Default `"1h"`.
    #[serde(with = "duration")]
    pub timestamp_max_past: Duration,
    /// Furthest-ahead client timestamp accepted (clock skew). Default `"10m"`.
    #[serde(with = "duration")]
    pub timestamp_max_future: Duration,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        let core = crate::aggregate::Limits::default();
        LimitsConfig {
            max_pending_rows: core.max_pending_rows,
            max_pending_bytes: core.max_pending_bytes,
            max_key_bytes: core.max_key_bytes,
            max_line_bytes: 8192,
            max_tags: 64,
            timestamp_max_past: core.timestamp_max_past,
            timestamp_max_future: core.timestamp_max_future,
        }
    }
}

/// `[state]`: the directory of outcome logs, the intent journal and the spill.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct StateConfig {
    /// The state directory (`unknown.jsonl`, `rejected.jsonl`, the spill, the
    /// writer id). One process per directory: it is locked. Default `"./countersink-state"`.
    pub dir: PathBuf,
    /// This writer's id in every record. Default: generated once and kept in the state
    /// directory.
    pub writer_id: Option<String>,
    /// Size at which an outcome log is rotated (`unknown.jsonl` → `unknown.1.jsonl`).
    /// Default `67108864` (64 MiB).
    pub max_log_bytes: u64,
    /// Rotated files kept per log; the oldest beyond this is deleted (and counted).
    /// Default `8`.
    pub max_log_files: u32,
    /// Most bytes of spill on disk: the spill segments and the `writer_totals` spill
    /// files together; a write that would go beyond is dropped (counted in
    /// `countersink_rows_dropped_total{reason="spill_full"}` and logged).
    /// Default `1073741824` (1 GiB).
    pub max_spill_bytes: u64,
    /// Most bytes of the ingest log (`ingest.log` and its sealed files): the increments of
    /// durable requests (`ingest.http.durable`, `ingest.otlp.durable`) not yet in a spill
    /// segment. A request
    /// that would go beyond is refused before anything is written (HTTP 429), never
    /// dropped after its answer. Default `268435456` (256 MiB).
    pub max_ingest_log_bytes: u64,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            dir: PathBuf::from("./countersink-state"),
            writer_id: None,
            max_log_bytes: 64 << 20,
            max_log_files: 8,
            max_spill_bytes: 1 << 30,
            max_ingest_log_bytes: 256 << 20,
        }
    }
}

/// `[generic]`: the zero-configuration family.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct GenericConfig {
    /// Whether counters that match no configured family are kept (in the generic
    /// tables) or dropped (`reason="unconfigured"`). Default `true`.
    pub enabled: bool,
    /// Minute table: `((name, tags, day), minute) value counter` (with `writer_totals`:
    /// `((name, tags, day), minute, writer) value bigint`). Default `"counts_by_minute"`.
    pub minute_table: String,
    /// Day table: `((name, tags, month), day) value counter` (with `writer_totals`:
    /// `((name, tags, month), day, writer) value bigint`). Default `"counts_by_day"`.
    pub day_table: String,
    /// Keep exact totals of the generic family beside its counters (see `[exact]`).
    /// Default `false`.
    pub exact: bool,
    /// How the generic tables count: `"counter"` or `"writer_totals"`. The two need
    /// tables of different shapes: switching an existing deployment needs new tables
    /// (other names, or another keyspace). Default `"counter"`.
    pub mode: CountingMode,
    /// Most distinct contexts (name and tags) the generic family admits per
    /// `cardinality.window`; increments of further ones are dropped
    /// (`reason="cardinality_family"`). Default unset (`cardinality.max_contexts`).
    pub max_contexts: Option<usize>,
    /// Most distinct values per `cardinality.window` of the named tags, e.g.
    /// `{ user_id = 1000 }`; increments of new contexts bringing a further value are
    /// dropped (`reason="cardinality_tag"`). Default empty.
    pub max_tag_values: BTreeMap<String, usize>,
}

impl Default for GenericConfig {
    fn default() -> Self {
        GenericConfig {
            enabled: true,
            minute_table: "counts_by_minute".into(),
            day_table: "counts_by_day".into(),
            exact: false,
            mode: CountingMode::Counter,
            max_contexts: None,
            max_tag_values: BTreeMap::new(),
        }
    }
}

/// `[[family]]`: metric names mapped to counter columns of your own tables.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct FamilyConfig {
    /// Name of the family, for logs and the `get` command. Required, unique.
    pub name: String,
    /// Minute table, `table` or `keyspace.table`; its primary key is the key columns
    /// plus `day date` in the partition key and `minute smallint` as clustering column
    /// (other names and types: `minute_time`). Default unset (no minute table). A
    /// family needs at least one of `minute_table`, `hour_table`, `day_table` and
    /// `total_table`.
    pub minute_table: String,
    /// Hour table; its primary key is the key columns plus `day date` in the partition
    /// key and `hour smallint` (hour of the day, 0..23) as clustering column: one
    /// partition of at most 24 rows per key and day. Default unset (no hour table).
    pub hour_table: String,
    /// Day table; its primary key is the key columns plus `month text` in the partition
    /// key and `day date` as clustering column (other names and types: `day_time`).
    /// Default unset (no day table).
    pub day_table: String,
    /// All-time total table; its primary key is the key columns only (one row per
    /// key, the sum of every increment ever flushed). Default unset (no total table).
    pub total_table: String,
    /// The minute table's time columns, for an existing table whose columns are named
    /// or typed otherwise: `day` (partition) and `minute` (clustering), each
    /// `{ column = NAME, type = CQL_TYPE }`. Default: `day date`, `minute smallint`.
    pub minute_time: MinuteTimeConfig,
    /// The day table's time columns: `month` (partition) and `day` (clustering), each
    /// `{ column = NAME, type = CQL_TYPE }`. Default: `month text`, `day date`.
    pub day_time: DayTimeConfig,
    /// Key columns, in order; each is filled from the tag of the same name, and a line
    /// without one of them is invalid (`missing_key_tag`). Required, non-empty.
    pub key: Vec<String>,
    /// Metric name → counter column. Several metrics may feed one column. Required
    /// unless a `[[mapping]]` rule feeds the family.
    pub columns: BTreeMap<String, String>,
    /// Hot-key sharding: number of shards (1 = off). Each flush writes a row to one
    /// shard, chosen from the writer id and the flush sequence, so a fleet spreads over
    /// all of them; readers sum the shards. Default `1`, at most `64`.
    pub shards: u8,
    /// Where the shard column sits: `"partition"` (in the partition key: spreads load
    /// over replicas) or `"clustering"` (first clustering column: spreads cell locks
    /// within a partition). Default `"partition"`.
    pub shard_placement: ShardPlacement,
    /// Name of the `tinyint` shard column. Default `"shard"`.
    pub shard_column: String,
    /// Resets by epoch: an `int` column in the partition key, after the key columns,
    /// holding the epoch a row belongs to (see `[epochs]` and `countersink reset`).
    /// Default unset (no epochs).
    pub epoch_column: Option<String>,
    /// Keep exact totals beside the counters: every delta's first drain is written to
    /// the delta ledger before the counter writes that carry it (see `[exact]`).
    /// Default `false`.
    pub exact: bool,
    /// How the family's tables count: `"counter"` (counter columns, one delta per row
    /// per flush) or `"writer_totals"` (`bigint` columns and a `writer` clustering
    /// column: each writer's running total, written idempotently; no sharding, since
    /// writers never share a cell). Default `"counter"`.
    pub mode: CountingMode,
    /// Most distinct keys the family admits per `cardinality.window`; increments of
    /// further ones are dropped (`reason="cardinality_family"`). Default unset
    /// (`cardinality.max_contexts`).
    pub max_contexts: Option<usize>,
    /// Most distinct values per `cardinality.window` of the named key columns, e.g.
    /// `{ user_id = 1000 }`; increments of new keys bringing a further value are dropped
    /// (`reason="cardinality_tag"`). Default empty.
    pub max_tag_values: BTreeMap<String, usize>,
    /// Tag rules of this family, on top of `[tags]` (which tag fills a key column).
    pub tags: FamilyTagsConfig,
}

impl Default for FamilyConfig {
    fn default() -> Self {
        FamilyConfig {
            name: String::new(),
            minute_table: String::new(),
            hour_table: String::new(),
            day_table: String::new(),
            total_table: String::new(),
            minute_time: MinuteTimeConfig::default(),
            day_time: DayTimeConfig::default(),
            key: Vec::new(),
            columns: BTreeMap::new(),
            shards: 1,
            shard_placement: ShardPlacement::Partition,
            shard_column: "shard".into(),
            epoch_column: None,
            exact: false,
            mode: CountingMode::Counter,
            max_contexts: None,
            max_tag_values: BTreeMap::new(),
            tags: FamilyTagsConfig::default(),
        }
    }
}

impl FamilyConfig {
    /// Seed 000's page-views family, as in `examples/countersink.toml` and
    /// `cql/example_views.cql`: the fixture the unit tests share.
    #[cfg(test)]
    pub(crate) fn seed_views() -> FamilyConfig {
        FamilyConfig {
            name: "views".into(),
            minute_table: "metrics.views_by_minute".into(),
            day_table: "metrics.views_by_day".into(),
            key: vec!["page_id".into()],
            columns: [
                ("page.views".to_string(), "views".to_string()),
                ("page.bytes".to_string(), "bytes".to_string()),
            ]
            .into(),
            ..FamilyConfig::default()
        }
    }
}

/// Where a family's shard column sits in its primary key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ShardPlacement {
    /// In the partition key.
    #[default]
    Partition,
    /// As the first clustering column.
    Clustering,
}
