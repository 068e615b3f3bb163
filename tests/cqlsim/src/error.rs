//! Errors: [`CqlError`] is what a CQL client sees (an ERROR frame, S §9), [`Error`] is what the
//! embedding program sees (bind failures, a bad data directory, a bad fault spec).

use std::fmt;

/// The consistency levels of the protocol (S §3, `[consistency]`).
///
/// Kept as a raw code wrapper: the server accepts any level and only echoes it back in
/// Unavailable/timeout bodies, so unknown codes must survive a round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Consistency(pub u16);

impl Consistency {
    /// ONE (0x0001).
    pub const ONE: Consistency = Consistency(0x0001);
    /// LOCAL_QUORUM (0x0006), the Rust driver's default.
    pub const LOCAL_QUORUM: Consistency = Consistency(0x0006);

    /// The name Cassandra prints in error messages.
    pub fn name(self) -> &'static str {
        match self.0 {
            0x0000 => "ANY",
            0x0001 => "ONE",
            0x0002 => "TWO",
            0x0003 => "THREE",
            0x0004 => "QUORUM",
            0x0005 => "ALL",
            0x0006 => "LOCAL_QUORUM",
            0x0007 => "EACH_QUORUM",
            0x0008 => "SERIAL",
            0x0009 => "LOCAL_SERIAL",
            0x000A => "LOCAL_ONE",
            _ => "UNKNOWN",
        }
    }
}

impl fmt::Display for Consistency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The `write_type` string of WriteTimeout and WriteFailure bodies (S §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteType {
    /// A single non-counter write.
    Simple,
    /// A logged batch (the batch log write succeeded).
    Batch,
    /// An unlogged batch.
    UnloggedBatch,
    /// A counter write, single or batched. Clients must treat the outcome as unknown.
    Counter,
    /// The batch log write itself.
    BatchLog,
}

impl WriteType {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            WriteType::Simple => "SIMPLE",
            WriteType::Batch => "BATCH",
            WriteType::UnloggedBatch => "UNLOGGED_BATCH",
            WriteType::Counter => "COUNTER",
            WriteType::BatchLog => "BATCH_LOG",
        }
    }
}

/// An error as a CQL client receives it: one ERROR frame with Cassandra's code and, where the
/// protocol defines one, its body. Messages follow Cassandra 3.11/4.x wording so that tests and
/// drivers that match on text behave as against a real node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CqlError {
    /// 0x0000: something broke inside the server (or an injected ServerError).
    #[error("{0}")]
    Server(String),
    /// 0x000A: the client broke the protocol.
    #[error("{0}")]
    Protocol(String),
    /// 0x1000: not enough replicas alive; nothing was applied.
    #[error("Cannot achieve consistency level {consistency}")]
    Unavailable {
        /// The requested level.
        consistency: Consistency,
        /// Replicas the level needs.
        required: i32,
        /// Replicas known alive.
        alive: i32,
    },
    /// 0x1001: the coordinator is overloaded.
    #[error("{0}")]
    Overloaded(String),
    /// 0x1002: the coordinator is bootstrapping.
    #[error("Cannot read from a bootstrapping node")]
    IsBootstrapping,
    /// 0x1100: replicas did not answer in time; the write may or may not have been applied.
    #[error("Operation timed out - received only {received} responses.")]
    WriteTimeout {
        /// The requested level.
        consistency: Consistency,
        /// Acknowledgements received.
        received: i32,
        /// Acknowledgements needed.
        block_for: i32,
        /// What kind of write timed out (COUNTER for counter writes and counter batches).
        write_type: WriteType,
    },
    /// 0x1500: replicas answered with failures; the write may or may not have been applied.
    #[error("Operation failed - received {received} responses and {num_failures} failures")]
    WriteFailure {
        /// The requested level.
        consistency: Consistency,
        /// Acknowledgements received.
        received: i32,
        /// Acknowledgements needed.
        block_for: i32,
        /// Replicas that failed.
        num_failures: i32,
        /// What kind of write failed.
        write_type: WriteType,
    },
    /// 0x1200: replicas did not answer a read in time.
    #[error("Operation timed out - received only {received} responses.")]
    ReadTimeout {
        /// The requested level.
        consistency: Consistency,
        /// Responses received.
        received: i32,
        /// Responses needed.
        block_for: i32,
        /// Whether the data replica answered.
        data_present: bool,
    },
    /// 0x2000: the statement does not parse.
    #[error("{0}")]
    Syntax(String),
    /// 0x2100: the statement is not allowed (here: changes to system keyspaces).
    #[error("{0}")]
    Unauthorized(String),
    /// 0x2200: the statement parses but is invalid.
    #[error("{0}")]
    Invalid(String),
    /// 0x2300: invalid configuration in a DDL statement.
    #[error("{0}")]
    Config(String),
    /// 0x2400: CREATE of something that exists (without IF NOT EXISTS).
    #[error("{message}")]
    AlreadyExists {
        /// Cassandra's message.
        message: String,
        /// The keyspace.
        keyspace: String,
        /// The table, empty for a keyspace.
        table: String,
    },
    /// 0x2500: EXECUTE/BATCH named a prepared id this server does not know.
    #[error("Prepared query with ID {} not found (either the query was not prepared on this host (maybe the host has been restarted?) or you have prepared too many queries and it has been evicted from the internal cache)", hex(.0))]
    Unprepared(Vec<u8>),
}

impl CqlError {
    /// The protocol error code (S §9).
    pub fn code(&self) -> i32 {
        match self {
            CqlError::Server(_) => 0x0000,
            CqlError::Protocol(_) => 0x000A,
            CqlError::Unavailable { .. } => 0x1000,
            CqlError::Overloaded(_) => 0x1001,
            CqlError::IsBootstrapping => 0x1002,
            CqlError::WriteTimeout { .. } => 0x1100,
            CqlError::ReadTimeout { .. } => 0x1200,
            CqlError::WriteFailure { .. } => 0x1500,
            CqlError::Syntax(_) => 0x2000,
            CqlError::Unauthorized(_) => 0x2100,
            CqlError::Invalid(_) => 0x2200,
            CqlError::Config(_) => 0x2300,
            CqlError::AlreadyExists { .. } => 0x2400,
            CqlError::Unprepared(_) => 0x2500,
        }
    }

    /// Shorthand for the most common error, 0x2200 Invalid.
    pub(crate) fn invalid(msg: impl Into<String>) -> CqlError {
        CqlError::Invalid(msg.into())
    }

    /// Shorthand for 0x2000 SyntaxError.
    pub(crate) fn syntax(msg: impl Into<String>) -> CqlError {
        CqlError::Syntax(msg.into())
    }
}

/// Lower-case hex, as Cassandra prints prepared ids.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Errors of the embedding API: starting, stopping and configuring the server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// Accepting connections failed for good.
    #[error("network error: {0}")]
    Io(#[from] std::io::Error),
    /// The data directory could not be read or written.
    #[error("data directory {path}: {source}")]
    DataDir {
        /// The file concerned.
        path: std::path::PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A statement of a snapshot or schema script failed.
    #[error("statement {index} of {what} failed: {source}")]
    Script {
        /// Which script (file name or "script").
        what: String,
        /// 1-based statement number.
        index: usize,
        /// The CQL error.
        source: CqlError,
    },
    /// A `--fault` spec did not parse.
    #[error("bad fault spec {spec:?}: {reason}")]
    FaultSpec {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
}
