//! The small words every stage shares: which family, which granularity, why something
//! was dropped, which transport a line came over.
//!
//! A leaf: it imports nothing of this crate, so any module may use it without pulling in
//! the stage that happens to produce or consume the value. Each closed set has `ALL` (in
//! label order) and the metric label its values are exported under.

/// The clustering column of a `writer_totals` table that tells writers apart: text, the
/// writer id, the incarnation and a start nonce (see `crate::totals`). Here because the
/// configuration's validation needs the name as much as the table layout does.
pub const WRITER_COLUMN: &str = "writer";

/// Index of a counter family: 0 is the generic family, configured families follow in
/// configuration order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FamilyId(pub u16);

/// The time granularities a delta is owed to: a family has a table of each granularity
/// it configures (any non-empty subset), and every accepted delta is written to each of
/// them. The order is that of the labels; `Minute` and `Day` keep the positions they had
/// before `Hour` and `Total` existed, so per-granularity arrays read the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Granularity {
    /// `…_by_minute`: partition (key, day), clustering minute.
    Minute,
    /// `…_by_day`: partition (key, month), clustering day.
    Day,
    /// `…_by_hour`: partition (key, day), clustering hour of the day.
    Hour,
    /// `…_total`: partition (key) only, one row per key: the all-time sum.
    Total,
}

impl Granularity {
    /// How many there are: the length of per-granularity arrays.
    pub const COUNT: usize = 4;

    /// Every granularity, in label order.
    pub const ALL: [Granularity; Granularity::COUNT] = [
        Granularity::Minute,
        Granularity::Day,
        Granularity::Hour,
        Granularity::Total,
    ];

    /// The label in metrics (`granularity`) and records: `minute`, `day`, `hour` or
    /// `total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Granularity::Minute => "minute",
            Granularity::Day => "day",
            Granularity::Hour => "hour",
            Granularity::Total => "total",
        }
    }

    /// Minute and day: the tables of every family the delta ledger (`exact`), writer
    /// totals and epochs serve (the configuration refuses those with other tables), so
    /// reconcile and its reports know only these.
    pub const MINUTE_AND_DAY: [Granularity; 2] = [Granularity::Minute, Granularity::Day];

    /// The granularity labelled `label` (see [`Granularity::as_str`]).
    pub fn parse(label: &str) -> Option<Granularity> {
        Granularity::ALL.into_iter().find(|g| g.as_str() == label)
    }

    /// Position in [`Granularity::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Why an accepted increment (or a row made of them) was dropped instead of buffered or
/// settled. A closed set: each is a `countersink_dropped_total{reason}` label (increments,
/// [`DropReason::INCREMENTS`]) or a `countersink_rows_dropped_total{reason}` label (rows,
/// [`DropReason::ROWS`]), and a `countersink_stage_delta{stage="dropped"}` contribution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The buffer already holds `max_pending_rows` distinct rows.
    MaxRows,
    /// The buffer's estimated size already reached `max_pending_bytes`.
    MaxBytes,
    /// The client timestamp (`|T`) is older than `timestamp_max_past` or further ahead
    /// than `timestamp_max_future`.
    TimestampWindow,
    /// Adding the delta would take the row's pending sum outside the `i64` range.
    Overflow,
    /// The metric name matches no configured family and the generic family is disabled.
    Unconfigured,
    /// A write had to be spilled to disk and the spill could not be written.
    SpillFailed,
    /// A write had to be spilled and the spill already holds `state.max_spill_bytes`.
    SpillFull,
    /// The increment arrived after shutdown had taken the final flush.
    AfterShutdown,
    /// It would have created a context (a new series) in a family that already holds
    /// its `max_contexts` distinct contexts in the current cardinality window.
    CardinalityFamily,
    /// It would have brought a tag a new value while the tag already holds its
    /// `max_tag_values` distinct values in the current cardinality window.
    CardinalityTag,
}

impl DropReason {
    /// Every reason, in label order.
    pub const ALL: [DropReason; 10] = [
        DropReason::MaxRows,
        DropReason::MaxBytes,
        DropReason::TimestampWindow,
        DropReason::Overflow,
        DropReason::Unconfigured,
        DropReason::SpillFailed,
        DropReason::SpillFull,
        DropReason::AfterShutdown,
        DropReason::CardinalityFamily,
        DropReason::CardinalityTag,
    ];

    /// Reasons an increment is dropped before it reaches a pending row: the labels of
    /// `countersink_dropped_total` (unit: increments).
    pub const INCREMENTS: [DropReason; 8] = [
        DropReason::MaxRows,
        DropReason::MaxBytes,
        DropReason::TimestampWindow,
        DropReason::Overflow,
        DropReason::Unconfigured,
        DropReason::AfterShutdown,
        DropReason::CardinalityFamily,
        DropReason::CardinalityTag,
    ];

    /// Reasons a row is dropped after it left the buffer: the labels of
    /// `countersink_rows_dropped_total` (unit: rows).
    pub const ROWS: [DropReason; 3] = [
        DropReason::Overflow,
        DropReason::SpillFailed,
        DropReason::SpillFull,
    ];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::MaxRows => "max_rows",
            DropReason::MaxBytes => "max_bytes",
            DropReason::TimestampWindow => "timestamp_window",
            DropReason::Overflow => "overflow",
            DropReason::Unconfigured => "unconfigured",
            DropReason::SpillFailed => "spill_failed",
            DropReason::SpillFull => "spill_full",
            DropReason::AfterShutdown => "after_shutdown",
            DropReason::CardinalityFamily => "cardinality_family",
            DropReason::CardinalityTag => "cardinality_tag",
        }
    }

    /// Position in [`DropReason::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Where lines come from, for `countersink_lines_received_total{transport}` and the
/// receivers' own metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// UDP datagrams.
    Udp,
    /// Unix datagram socket.
    UnixDatagram,
    /// Unix stream socket: DogStatsD length-prefix framing, or newline-framed lines.
    UnixStream,
    /// TCP, newline-framed lines.
    Tcp,
    /// OTLP metrics over HTTP (`POST /v1/metrics`).
    OtlpHttp,
    /// OTLP metrics over gRPC.
    OtlpGrpc,
    /// The HTTP increment API (`POST /v1/increments`).
    Http,
}

impl Transport {
    /// Every transport, in label order.
    pub const ALL: [Transport; 7] = [
        Transport::Udp,
        Transport::UnixDatagram,
        Transport::UnixStream,
        Transport::Tcp,
        Transport::OtlpHttp,
        Transport::OtlpGrpc,
        Transport::Http,
    ];

    /// The metric label value: `udp`, `uds`, `uds_stream`, `tcp`, `otlp_http`,
    /// `otlp_grpc` or `http` (the names of the CLI flags and config sections, with `_` for
    /// `-`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Transport::Udp => "udp",
            Transport::UnixDatagram => "uds",
            Transport::UnixStream => "uds_stream",
            Transport::Tcp => "tcp",
            Transport::OtlpHttp => "otlp_http",
            Transport::OtlpGrpc => "otlp_grpc",
            Transport::Http => "http",
        }
    }

    /// Position in [`Transport::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Whether it accepts connections (and so has connection counters and a connection
    /// limit served by `ingest/stream.rs`) rather than receiving datagrams or requests.
    pub const fn is_stream(self) -> bool {
        match self {
            Transport::Udp
            | Transport::UnixDatagram
            | Transport::OtlpHttp
            | Transport::OtlpGrpc
            | Transport::Http => false,
            Transport::UnixStream | Transport::Tcp => true,
        }
    }

    /// How people name it: the sidecar's start-up banner and logs.
    pub const fn title(self) -> &'static str {
        match self {
            Transport::Udp => "UDP",
            Transport::UnixDatagram => "Unix dgram",
            Transport::UnixStream => "Unix stream",
            Transport::Tcp => "TCP",
            Transport::OtlpHttp => "OTLP/HTTP",
            Transport::OtlpGrpc => "OTLP/gRPC",
            Transport::Http => "HTTP increments",
        }
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `index()` is the position in `ALL`: arrays of counters are indexed by it.
    #[test]
    fn every_index_is_the_position_in_all() {
        for (i, g) in Granularity::ALL.into_iter().enumerate() {
            assert_eq!(g.index(), i);
        }
        for (i, r) in DropReason::ALL.into_iter().enumerate() {
            assert_eq!(r.index(), i);
        }
        for (i, t) in Transport::ALL.into_iter().enumerate() {
            assert_eq!(t.index(), i);
        }
    }
}
