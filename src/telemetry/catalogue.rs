//! Every metric countersink exports: name, help text, labels. The one list: the
//! collectors build their series from these entries, a test checks that what is exported
//! is exactly this list, and another that the book's catalogue (docs/src/reference/metrics.md) names each of them.

use prometheus::{
    Gauge, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts,
};

/// One exported metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricDef {
    /// The metric name.
    pub name: &'static str,
    /// The `# HELP` text.
    pub help: &'static str,
    /// Label names (bounded sets, listed in the help text or by an `ALL` constant).
    pub labels: &'static [&'static str],
}

// Names, help texts and labels are constants of this file; building a metric from them
// cannot fail (a test builds every one).
const VALID: &str = "constant metric options are valid";

impl MetricDef {
    fn opts(&self) -> Opts {
        Opts::new(self.name, self.help)
    }

    pub(crate) fn int_counter(&self) -> IntCounter {
        IntCounter::with_opts(self.opts()).expect(VALID)
    }

    pub(crate) fn int_counter_vec(&self) -> IntCounterVec {
        IntCounterVec::new(self.opts(), self.labels).expect(VALID)
    }

    pub(crate) fn int_gauge(&self) -> IntGauge {
        IntGauge::with_opts(self.opts()).expect(VALID)
    }

    pub(crate) fn int_gauge_vec(&self) -> IntGaugeVec {
        IntGaugeVec::new(self.opts(), self.labels).expect(VALID)
    }

    pub(crate) fn gauge(&self) -> Gauge {
        Gauge::with_opts(self.opts()).expect(VALID)
    }

    pub(crate) fn gauge_vec(&self) -> GaugeVec {
        GaugeVec::new(self.opts(), self.labels).expect(VALID)
    }

    pub(crate) fn histogram(&self, buckets: &[f64]) -> Histogram {
        Histogram::with_opts(HistogramOpts::new(self.name, self.help).buckets(buckets.to_vec()))
            .expect(VALID)
    }

    pub(crate) fn histogram_vec(&self, buckets: &[f64]) -> HistogramVec {
        HistogramVec::new(
            HistogramOpts::new(self.name, self.help).buckets(buckets.to_vec()),
            self.labels,
        )
        .expect(VALID)
    }
}

/// `countersink_lines_received_total{transport}`.
pub const LINES_RECEIVED: MetricDef = MetricDef {
    name: "countersink_lines_received_total",
    help: "Lines received (valid or not), by transport.",
    labels: &["transport"],
};
/// `countersink_lines_invalid_total{reason}`.
pub const LINES_INVALID: MetricDef = MetricDef {
    name: "countersink_lines_invalid_total",
    help: "Lines (and in-process calls) refused as invalid, by reason.",
    labels: &["reason"],
};
/// `countersink_lines_ignored_total{type}`.
pub const LINES_IGNORED: MetricDef = MetricDef {
    name: "countersink_lines_ignored_total",
    help: "Well-formed lines of metric types countersink does not aggregate, by type.",
    labels: &["type"],
};
/// `countersink_increments_accepted_total`.
pub const INCREMENTS_ACCEPTED: MetricDef = MetricDef {
    name: "countersink_increments_accepted_total",
    help: "Counter increments accepted (each value of a multi-value line counts).",
    labels: &[],
};
/// `countersink_dropped_total{reason}`.
pub const DROPPED: MetricDef = MetricDef {
    name: "countersink_dropped_total",
    help: "Accepted increments dropped on purpose before reaching a pending row, by reason (unit: increments).",
    labels: &["reason"],
};
/// `countersink_cardinality_dropped_total{family, reason}`.
pub const CARDINALITY_DROPPED: MetricDef = MetricDef {
    name: "countersink_cardinality_dropped_total",
    help: "Accepted increments a cardinality cap dropped, by family and reason: cardinality_family (max_contexts), cardinality_tag (max_tag_values). Unit: increments; also counted in countersink_dropped_total{reason}.",
    labels: &["family", "reason"],
};
/// `countersink_cardinality_contexts{family}`.
pub const CARDINALITY_CONTEXTS: MetricDef = MetricDef {
    name: "countersink_cardinality_contexts",
    help: "Distinct contexts admitted in the current cardinality window, per family with a cap (see /debug/contexts for its tags).",
    labels: &["family"],
};
/// `countersink_rows_dropped_total{reason}`.
pub const ROWS_DROPPED: MetricDef = MetricDef {
    name: "countersink_rows_dropped_total",
    help: "Rows dropped after leaving the buffer, by reason: overflow (a replayed or re-queued row whose sum would leave the i64 range), spill_failed, spill_full (state.max_spill_bytes). Unit: rows; their deltas are in countersink_stage_delta{stage=\"dropped\"}.",
    labels: &["reason"],
};
/// `countersink_pending_rows`.
pub const PENDING_ROWS: MetricDef = MetricDef {
    name: "countersink_pending_rows",
    help: "Rows buffered for the next flush.",
    labels: &[],
};
/// `countersink_pending_bytes`.
pub const PENDING_BYTES: MetricDef = MetricDef {
    name: "countersink_pending_bytes",
    help: "Estimated bytes of the rows held in memory: buffered for the next flush, in flight, and re-queued (what limits.max_pending_bytes caps).",
    labels: &[],
};
/// `countersink_cql_writes_total{table, outcome}`.
pub const CQL_WRITES: MetricDef = MetricDef {
    name: "countersink_cql_writes_total",
    help: "Write requests (one UPDATE or one COUNTER BATCH), by table and outcome (applied, requeued, rejected, unknown).",
    labels: &["table", "outcome"],
};
/// `countersink_flushes_total`.
pub const FLUSHES: MetricDef = MetricDef {
    name: "countersink_flushes_total",
    help: "Flushes completed.",
    labels: &[],
};
/// `countersink_flush_backoff_seconds`.
pub const FLUSH_BACKOFF: MetricDef = MetricDef {
    name: "countersink_flush_backoff_seconds",
    help: "While the store applies none of the flushed writes: the longest wait before the next flush (it doubles per failed flush up to flush.max_backoff). 0 while flushing every interval.",
    labels: &[],
};
/// `countersink_flush_duration_seconds` (histogram).
pub const FLUSH_DURATION: MetricDef = MetricDef {
    name: "countersink_flush_duration_seconds",
    help: "Time per flush, from draining the buffer to recording the last outcome.",
    labels: &[],
};
/// The buckets of [`FLUSH_DURATION`], in seconds.
pub const FLUSH_DURATION_BUCKETS: [f64; 13] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// `countersink_stage_delta{stage, granularity}`: the accounting identity.
pub const DELTA_SUM: MetricDef = MetricDef {
    name: "countersink_stage_delta",
    help: "Signed sum of deltas per stage and table granularity; accepted equals the sum of the other stages when idle.",
    labels: &["stage", "granularity"],
};
/// `countersink_stage_delta_high{stage, granularity}`.
pub const DELTA_SUM_HIGH: MetricDef = MetricDef {
    name: "countersink_stage_delta_high",
    help: "The exact countersink_stage_delta is high * 10^15 + low (both integers exactly representable as float64): the high part, floor(sum / 10^15).",
    labels: &["stage", "granularity"],
};
/// `countersink_stage_delta_low{stage, granularity}`.
pub const DELTA_SUM_LOW: MetricDef = MetricDef {
    name: "countersink_stage_delta_low",
    help: "The exact countersink_stage_delta is high * 10^15 + low: the low part, sum mod 10^15 (0 to 10^15 - 1).",
    labels: &["stage", "granularity"],
};
/// The base of the split of [`DELTA_SUM_HIGH`] and [`DELTA_SUM_LOW`].
pub const DELTA_SUM_SPLIT: i128 = 1_000_000_000_000_000;
/// `countersink_spill_bytes`.
pub const SPILL_BYTES: MetricDef = MetricDef {
    name: "countersink_spill_bytes",
    help: "Bytes of spill on disk (writes not sent yet: the segments), as of the last flush; bounded by state.max_spill_bytes.",
    labels: &[],
};
/// `countersink_ingest_log_bytes`.
pub const INGEST_LOG_BYTES: MetricDef = MetricDef {
    name: "countersink_ingest_log_bytes",
    help: "Bytes of the ingest log (durable requests' increments answered and not yet moved into a spill segment); bounded by state.max_ingest_log_bytes. 0 without a durable listener.",
    labels: &[],
};
/// `countersink_ingest_log_syncs_total`.
pub const INGEST_LOG_SYNCS: MetricDef = MetricDef {
    name: "countersink_ingest_log_syncs_total",
    help: "fdatasyncs of the ingest log: one covers every durable request appended before it started (group commit).",
    labels: &[],
};
/// `countersink_state_lines_corrupt_total{file}`.
pub const STATE_LINES_CORRUPT: MetricDef = MetricDef {
    name: "countersink_state_lines_corrupt_total",
    help: "Lines of state files set aside because they could not be read: a torn last line of unknown.jsonl or rejected.jsonl (a crash mid-append; recovery writes the record again), or an unreadable spill line.",
    labels: &["file"],
};
/// `countersink_outcome_records_lost_total{log, reason}`.
pub const OUTCOME_RECORDS_LOST: MetricDef = MetricDef {
    name: "countersink_outcome_records_lost_total",
    help: "Records of unknown or rejected writes that are not in their log file: deleted by rotation (rotated_out) or not written (write_error). Their deltas are still counted in their stage.",
    labels: &["log", "reason"],
};
/// `countersink_previous_stop_unclean`.
pub const PREVIOUS_STOP_UNCLEAN: MetricDef = MetricDef {
    name: "countersink_previous_stop_unclean",
    help: "1 when the previous run in this state directory stopped without a clean shutdown (killed, crashed), losing what it held in memory; 0 otherwise.",
    labels: &[],
};
/// `countersink_previous_stop_pending_rows`.
pub const PREVIOUS_STOP_PENDING_ROWS: MetricDef = MetricDef {
    name: "countersink_previous_stop_pending_rows",
    help: "Rows the previous run held in memory at its last flush when it stopped without a clean shutdown: a lower bound of the rows it lost. 0 after a clean stop.",
    labels: &[],
};
/// `countersink_writer_totals_rows{state}`.
pub const WRITER_TOTALS_ROWS: MetricDef = MetricDef {
    name: "countersink_writer_totals_rows",
    help: "Running totals of writer_totals families after the last flush, by state: held (in memory, counted against the pending limits) and unwritten (held rows whose newest total the store may lack: retried until applied).",
    labels: &["state"],
};

/// `countersink_previous_stop_pending_delta{granularity}`.
pub const PREVIOUS_STOP_PENDING_DELTA_SUM: MetricDef = MetricDef {
    name: "countersink_previous_stop_pending_delta",
    help: "Signed delta sum of the rows the previous run held in memory at its last flush when it stopped without a clean shutdown, per table granularity. 0 after a clean stop.",
    labels: &["granularity"],
};
/// `countersink_previous_stop_unknown_rows`.
pub const PREVIOUS_STOP_UNKNOWN_ROWS: MetricDef = MetricDef {
    name: "countersink_previous_stop_unknown_rows",
    help: "Rows of requests the previous run had in flight when it was killed, written to unknown.jsonl (in_flight_at_crash) by this start's recovery.",
    labels: &[],
};

/// `countersink_packets_received_total{transport}` (sidecar).
pub const PACKETS_RECEIVED: MetricDef = MetricDef {
    name: "countersink_packets_received_total",
    help: "Datagrams (or stream messages) received, by transport.",
    labels: &["transport"],
};
/// `countersink_received_bytes_total{transport}` (sidecar).
pub const RECEIVED_BYTES: MetricDef = MetricDef {
    name: "countersink_received_bytes_total",
    help: "Bytes received, by transport.",
    labels: &["transport"],
};
/// `countersink_receive_errors_total{transport}` (sidecar).
pub const RECEIVE_ERRORS: MetricDef = MetricDef {
    name: "countersink_receive_errors_total",
    help: "Errors returned by the receive system calls, by transport.",
    labels: &["transport"],
};
/// `countersink_packets_dropped_total{transport, reason}` (sidecar).
pub const PACKETS_DROPPED: MetricDef = MetricDef {
    name: "countersink_packets_dropped_total",
    help: "Packets lost before parsing, by transport and reason: truncated (datagram over 64 KiB), oversized (stream message, line or OTLP request over the limit), partial (a stream connection ended inside a message or line), kernel (the socket's receive queue overflowed), malformed (an OTLP body that does not decode or decompress, an HTTP increment request that is not increments), unsupported (an OTLP or HTTP increment API content type or encoding), busy (an OTLP or HTTP increment request refused with a retry status because the buffer was near its limits), timeout (an OTLP or HTTP increment request whose body did not arrive within 30 s: HTTP 408, gRPC DEADLINE_EXCEEDED; or, over HTTP, whose headers did not: the connection is closed).",
    labels: &["transport", "reason"],
};
/// `countersink_otlp_points_dropped_total{reason}` (sidecar).
pub const OTLP_POINTS_DROPPED: MetricDef = MetricDef {
    name: "countersink_otlp_points_dropped_total",
    help: "OTLP sum points refused before the aggregator, by reason: non_integer, non_finite, out_of_range, negative_monotonic, unknown_temporality, cumulative_decrease, out_of_order, cumulative_baseline (the first point of a cumulative stream that may have been counted before: it sets the baseline), no_value (a point without a value that does not flag it).",
    labels: &["reason"],
};
/// `countersink_otlp_points_ignored_total{kind}` (sidecar).
pub const OTLP_POINTS_IGNORED: MetricDef = MetricDef {
    name: "countersink_otlp_points_ignored_total",
    help: "OTLP points of metric kinds that are not counters, by kind: gauge, histogram, exponential_histogram, summary, empty (a metric without data).",
    labels: &["kind"],
};
/// `countersink_idempotency_keys_total{result}` (sidecar).
pub const IDEMPOTENCY_KEYS: MetricDef = MetricDef {
    name: "countersink_idempotency_keys_total",
    help: "Requests with an Idempotency-Key at the HTTP increment API, by result: applied (a new key), replayed (the kept answer sent again, nothing applied), in_flight (409), other_body (422), and evicted (an answer forgotten before its window to stay within ingest.http.max_idempotency_keys).",
    labels: &["result"],
};
/// `countersink_otlp_streams` (sidecar).
pub const OTLP_STREAMS: MetricDef = MetricDef {
    name: "countersink_otlp_streams",
    help: "OTLP cumulative streams whose last point is held (at most ingest.otlp.max_streams).",
    labels: &[],
};
/// `countersink_otlp_stream_evictions_total` (sidecar).
pub const OTLP_STREAM_EVICTIONS: MetricDef = MetricDef {
    name: "countersink_otlp_stream_evictions_total",
    help: "OTLP cumulative streams evicted from the full stream table.",
    labels: &[],
};
/// `countersink_otlp_streams_restored` (sidecar).
pub const OTLP_STREAMS_RESTORED: MetricDef = MetricDef {
    name: "countersink_otlp_streams_restored",
    help: "OTLP cumulative streams read back from the state directory (otlp_streams.bin) at start.",
    labels: &[],
};
/// `countersink_otlp_stream_state_errors_total{kind}` (sidecar).
pub const OTLP_STREAM_STATE_ERRORS: MetricDef = MetricDef {
    name: "countersink_otlp_stream_state_errors_total",
    help: "Problems with the OTLP cumulative stream table's file, by kind: corrupt (unreadable at start: set aside, the table starts empty), save (a save failed: the file is removed).",
    labels: &["kind"],
};
/// `countersink_socket_receive_buffer_bytes{transport}` (sidecar).
pub const SOCKET_RECEIVE_BUFFER: MetricDef = MetricDef {
    name: "countersink_socket_receive_buffer_bytes",
    help: "Effective SO_RCVBUF of the socket, as the kernel reports it.",
    labels: &["transport"],
};
/// `countersink_stream_connections_total{transport,result}` (sidecar).
pub const STREAM_CONNECTIONS: MetricDef = MetricDef {
    name: "countersink_stream_connections_total",
    help: "Connections of the stream listeners and of the request listeners (OTLP, HTTP increments), by transport and result (accepted, refused over max_connections or a request listener's 128, idle_timeout: a stream connection closed after sending nothing for idle_timeout).",
    labels: &["transport", "result"],
};
/// `countersink_stream_connections_open{transport}` (sidecar).
pub const STREAM_CONNECTIONS_OPEN: MetricDef = MetricDef {
    name: "countersink_stream_connections_open",
    help: "Connections open now, of the stream listeners and of the request listeners (OTLP, HTTP increments).",
    labels: &["transport"],
};

/// `countersink_uds_queue_full_total` (sidecar).
pub const UDS_QUEUE_FULL: MetricDef = MetricDef {
    name: "countersink_uds_queue_full_total",
    help: "Reads of the Unix datagram socket that returned more datagrams than net.unix.max_dgram_qlen: its queue was at the limit, where blocking senders wait and non-blocking senders lose datagrams. Seen only with ingest.uds.batch_size above the limit.",
    labels: &[],
};
/// `countersink_uds_queue_high_water` (sidecar).
pub const UDS_QUEUE_HIGH_WATER: MetricDef = MetricDef {
    name: "countersink_uds_queue_high_water",
    help: "The most datagrams one read of the Unix datagram socket returned since start (at most ingest.uds.batch_size).",
    labels: &[],
};
/// `countersink_uds_max_dgram_qlen` (sidecar).
pub const UDS_MAX_DGRAM_QLEN: MetricDef = MetricDef {
    name: "countersink_uds_max_dgram_qlen",
    help: "net.unix.max_dgram_qlen when the Unix datagram socket was made: how many datagrams may wait in it (0: not listening, or unknown).",
    labels: &[],
};

/// `countersink_cql_write_duration_seconds{table}` (histogram, sidecar).
pub const CQL_WRITE_DURATION: MetricDef = MetricDef {
    name: "countersink_cql_write_duration_seconds",
    help: "Time from sending a counter write request to its outcome, by table (seed 000: watch counter write latency per table).",
    labels: &["table"],
};
/// The buckets of [`CQL_WRITE_DURATION`], in seconds: up to the 10 s request timeout.
pub const CQL_WRITE_DURATION_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0, 10.0,
];
/// `countersink_cql_write_errors_total{table, kind}` (sidecar).
pub const CQL_WRITE_ERRORS: MetricDef = MetricDef {
    name: "countersink_cql_write_errors_total",
    help: "Counter write requests that did not apply, by table and error kind (write_timeout, unavailable, overloaded, ...: the bounded kinds of the outcome classification).",
    labels: &["table", "kind"],
};
/// `countersink_key_index_writes_total{outcome}` (sidecar).
pub const KEY_INDEX_WRITES: MetricDef = MetricDef {
    name: "countersink_key_index_writes_total",
    help: "Key index rows, by outcome: applied, retried (a failed write, sent again later), dropped (the queue was full; a later flush offers the key again).",
    labels: &["outcome"],
};
/// `countersink_key_index_pending_keys` (sidecar).
pub const KEY_INDEX_PENDING: MetricDef = MetricDef {
    name: "countersink_key_index_pending_keys",
    help: "Key index rows waiting to be written (new keys, and failed writes waiting for their retry).",
    labels: &[],
};
/// `countersink_leaderboard_runs_total{board, result}` (sidecar).
pub const LEADERBOARD_RUNS: MetricDef = MetricDef {
    name: "countersink_leaderboard_runs_total",
    help: "Leaderboard job runs in this process, by board and result (ok: a new ranking is served; failed: the previous one still is).",
    labels: &["board", "result"],
};
/// `countersink_epoch_rows_held_total` (sidecar).
pub const EPOCH_ROWS_HELD: MetricDef = MetricDef {
    name: "countersink_epoch_rows_held_total",
    help: "Rows of families with an epoch column that a flush kept pending because the last read of the epoch registry does not cover their minute (a row held over several flushes counts each time).",
    labels: &[],
};
/// `countersink_epoch_registry_age_seconds` (sidecar).
pub const EPOCH_REGISTRY_AGE: MetricDef = MetricDef {
    name: "countersink_epoch_registry_age_seconds",
    help: "Seconds since the read of the epoch registry behind the writer's current view was sent (since start while no read succeeded).",
    labels: &[],
};
/// `countersink_config_reloads_total` (sidecar).
pub const CONFIG_RELOADS: MetricDef = MetricDef {
    name: "countersink_config_reloads_total",
    help: "Live reloads of the configuration file (SIGHUP, POST /-/reload) that took effect.",
    labels: &[],
};
/// `countersink_config_reload_failures_total` (sidecar).
pub const CONFIG_RELOAD_FAILURES: MetricDef = MetricDef {
    name: "countersink_config_reload_failures_total",
    help: "Live reloads refused (the file cannot be read or is invalid, it changes a field that needs a restart, or a new family's table is missing or does not match); the configuration in force stayed.",
    labels: &[],
};
/// `countersink_config_generation` (sidecar).
pub const CONFIG_GENERATION: MetricDef = MetricDef {
    name: "countersink_config_generation",
    help: "Which configuration is in force: 0 as started, plus one per reload that took effect.",
    labels: &[],
};

/// What the engine and the flusher export, in every build.
pub const ENGINE_METRICS: [MetricDef; 27] = [
    LINES_RECEIVED,
    LINES_INVALID,
    LINES_IGNORED,
    INCREMENTS_ACCEPTED,
    DROPPED,
    CARDINALITY_DROPPED,
    CARDINALITY_CONTEXTS,
    ROWS_DROPPED,
    DELTA_SUM_HIGH,
    DELTA_SUM_LOW,
    SPILL_BYTES,
    INGEST_LOG_BYTES,
    INGEST_LOG_SYNCS,
    STATE_LINES_CORRUPT,
    PREVIOUS_STOP_PENDING_DELTA_SUM,
    PREVIOUS_STOP_UNKNOWN_ROWS,
    PENDING_ROWS,
    PENDING_BYTES,
    CQL_WRITES,
    FLUSHES,
    FLUSH_BACKOFF,
    FLUSH_DURATION,
    DELTA_SUM,
    OUTCOME_RECORDS_LOST,
    PREVIOUS_STOP_UNCLEAN,
    PREVIOUS_STOP_PENDING_ROWS,
    WRITER_TOTALS_ROWS,
];

/// What the sidecar's receivers export besides.
pub const INGEST_METRICS: [MetricDef; 17] = [
    PACKETS_RECEIVED,
    RECEIVED_BYTES,
    RECEIVE_ERRORS,
    PACKETS_DROPPED,
    SOCKET_RECEIVE_BUFFER,
    STREAM_CONNECTIONS,
    STREAM_CONNECTIONS_OPEN,
    UDS_QUEUE_FULL,
    UDS_QUEUE_HIGH_WATER,
    UDS_MAX_DGRAM_QLEN,
    OTLP_POINTS_DROPPED,
    OTLP_POINTS_IGNORED,
    OTLP_STREAMS,
    OTLP_STREAM_EVICTIONS,
    OTLP_STREAMS_RESTORED,
    OTLP_STREAM_STATE_ERRORS,
    IDEMPOTENCY_KEYS,
];

/// What the sidecar exports about the counter tables and the operator jobs.
pub const OPERATIONS_METRICS: [MetricDef; 10] = [
    CQL_WRITE_DURATION,
    CQL_WRITE_ERRORS,
    KEY_INDEX_WRITES,
    KEY_INDEX_PENDING,
    LEADERBOARD_RUNS,
    EPOCH_ROWS_HELD,
    EPOCH_REGISTRY_AGE,
    CONFIG_RELOADS,
    CONFIG_RELOAD_FAILURES,
    CONFIG_GENERATION,
];

/// `countersink_exact_ledger_writes_total{outcome}`.
pub const EXACT_LEDGER_WRITES: MetricDef = MetricDef {
    name: "countersink_exact_ledger_writes_total",
    help: "Delta ledger write requests (exact families; one INSERT or one UNLOGGED BATCH of one ledger partition), every attempt, by outcome (applied; requeued, rejected, unknown: the same rows are sent again).",
    labels: &["outcome"],
};
/// `countersink_exact_ledger_held_rows`.
pub const EXACT_LEDGER_HELD_ROWS: MetricDef = MetricDef {
    name: "countersink_exact_ledger_held_rows",
    help: "Drained rows of exact families held out of the counter writes until their ledger rows are confirmed (non-zero for long: the ledger table is failing).",
    labels: &[],
};
/// `countersink_exact_ledger_backlog_rows`.
pub const EXACT_LEDGER_BACKLOG_ROWS: MetricDef = MetricDef {
    name: "countersink_exact_ledger_backlog_rows",
    help: "Delta ledger rows formed and not confirmed by the store yet.",
    labels: &[],
};

/// `countersink_exact_owed_days`.
pub const EXACT_OWED_DAYS: MetricDef = MetricDef {
    name: "countersink_exact_owed_days",
    help: "Family-days of exact families this state directory still owes the counters (rows in its spill, or brought back by a replay and not written yet): reconcile keeps them open (their owed mark in the outcomes table).",
    labels: &[],
};
/// `countersink_exact_owed_marks_queued`.
pub const EXACT_OWED_MARKS_QUEUED: MetricDef = MetricDef {
    name: "countersink_exact_owed_marks_queued",
    help: "Owed and replayed marks waiting to be written to the outcomes table (non-zero for long: reconcile cannot see what this writer owes).",
    labels: &[],
};

/// `countersink_exact_outcome_rows_queued`.
pub const EXACT_OUTCOME_ROWS_QUEUED: MetricDef = MetricDef {
    name: "countersink_exact_outcome_rows_queued",
    help: "Outcome rows (unknown and rejected records of exact families) waiting to be written to the outcomes table (non-zero for long: the outcomes table is failing).",
    labels: &[],
};
/// `countersink_exact_outcome_rows_dropped_total`.
pub const EXACT_OUTCOME_ROWS_DROPPED: MetricDef = MetricDef {
    name: "countersink_exact_outcome_rows_dropped_total",
    help: "Outcome rows dropped, oldest first, from a queue past its bound (rows, or a quarter of limits.max_pending_bytes); their records stay in unknown.jsonl and rejected.jsonl, but reconcile does not see them.",
    labels: &[],
};

/// What the flusher exports about the delta ledger of the exact families.
pub const EXACT_METRICS: [MetricDef; 7] = [
    EXACT_LEDGER_WRITES,
    EXACT_LEDGER_HELD_ROWS,
    EXACT_LEDGER_BACKLOG_ROWS,
    EXACT_OWED_DAYS,
    EXACT_OWED_MARKS_QUEUED,
    EXACT_OUTCOME_ROWS_QUEUED,
    EXACT_OUTCOME_ROWS_DROPPED,
];

/// `countersink_wrapper_passthrough_total{reason}` (the driver wrapper).
pub const WRAPPER_PASSTHROUGH: MetricDef = MetricDef {
    name: "countersink_wrapper_passthrough_total",
    help: "Requests the driver wrapper sent to the store unchanged, by reason: not_counter_update, using_or_if, in_relation, unbound_key, non_counter_column, unsupported_form, unknown_table, null_or_unset_value, invalid_values, statement_options, buffer_full, delta_overflow, unprepared, batch_unsupported, after_shutdown.",
    labels: &["reason"],
};
/// `countersink_wrapper_buffered_total` (the driver wrapper).
pub const WRAPPER_BUFFERED: MetricDef = MetricDef {
    name: "countersink_wrapper_buffered_total",
    help: "Counter UPDATE executions (and statements of COUNTER BATCHes) the driver wrapper buffered instead of sending.",
    labels: &[],
};
/// `countersink_wrapper_writes_total{outcome}` (the driver wrapper).
pub const WRAPPER_WRITES: MetricDef = MetricDef {
    name: "countersink_wrapper_writes_total",
    help: "Write requests the driver wrapper's flushes sent, by outcome class: applied, requeued, rejected, unknown.",
    labels: &["outcome"],
};
/// `countersink_wrapper_pending_rows` (the driver wrapper).
pub const WRAPPER_PENDING_ROWS: MetricDef = MetricDef {
    name: "countersink_wrapper_pending_rows",
    help: "Rows (table, primary key) the driver wrapper holds: pending for its next flush, or in the flush running now (limits.max_pending_rows bounds them).",
    labels: &[],
};
/// `countersink_wrapper_stage_delta{stage}` (the driver wrapper).
pub const WRAPPER_DELTA_SUM: MetricDef = MetricDef {
    name: "countersink_wrapper_stage_delta",
    help: "The driver wrapper's accounting identity, signed delta sums by stage: buffered = applied + pending + in_flight + unknown + rejected + unsent (exact between flushes).",
    labels: &["stage"],
};

/// What the driver wrapper (`CounterSession`) exports.
pub const WRAPPER_METRICS: [MetricDef; 5] = [
    WRAPPER_PASSTHROUGH,
    WRAPPER_BUFFERED,
    WRAPPER_WRITES,
    WRAPPER_PENDING_ROWS,
    WRAPPER_DELTA_SUM,
];
