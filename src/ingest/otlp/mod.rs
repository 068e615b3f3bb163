//! The OTLP metrics receivers: OpenTelemetry exporters over HTTP (`POST /v1/metrics`,
//! protobuf or JSON, gzip or not) and gRPC, into the engine.
//!
//! | module | job |
//! | --- | --- |
//! | `convert` | one request to increments: the mapping, temporalities, resets (synchronous, time passed in) |
//! | `streams` | the bounded table of the last point per cumulative stream |
//! | `state` | that table shared by both listeners, saved at each flush |
//! | `persist` | its file in the state directory, `otlp_streams.bin` |
//! | `http` | the HTTP listener: body limit, gzip, content types, status codes |
//! | `grpc` | the gRPC listener (tonic) |
//! | `rpc` | the `google.rpc.Status` and `RetryInfo` of error answers |
//! | [`pre_encoded`] | a client codec sending already-encoded requests (load generators, tests) |
//!
//! Each listener is one thread of the receivers (joined at shutdown like the others)
//! running an async runtime of [`workers`] threads (up to [`MAX_WORKERS`]), so that
//! requests on several connections decode and record at the same time, each worker with
//! its own handler. At shutdown it stops accepting, finishes the requests in flight
//! (their points reach the buffer before the final flush) and exits; its workers with it.
//! Both listeners share one cumulative stream table, which the sidecar saves in the
//! state directory at each flush (see [`state`]) and reads back at start.
//!
//! A request is answered only after its points are in the buffer (or refused and
//! counted). When the buffer is near its limits ([`PacketHandler::busy`]) a request is
//! refused whole, before any of its points is applied, with a status the exporter
//! retries on; a refusal in the middle of a request (a limit reached by another sender
//! meanwhile) is answered as a partial success, never as a retry, because a retried
//! request would add its delta points twice.

pub mod convert;
mod durable;
mod grpc;
mod http;
pub mod persist;
pub mod pre_encoded;
mod rpc;
pub mod state;
pub mod streams;

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;

pub use convert::{
    AttributePolicy, Conversion, IgnoredKind, Increment, Point, PointDrop, Tag, convert,
    convert_each,
};
pub use pre_encoded::{EXPORT_PATH, PreEncoded};
pub use state::StreamState;
pub use streams::Streams;

pub use super::handler_pool::{MAX_WORKERS, workers};

use super::async_listener;
use super::handler_pool::HandlerPool;
use super::receivers::Receivers;
use super::stats::IngestStats;
use super::worker::StopFlag;
use super::{ListenError, PacketHandler, Recorded};
use crate::config::ConfigError;
use crate::config::ingest::IngestConfig;
use crate::state::ingest_log::IngestLog;
use crate::vocabulary::Transport;

/// Longest wait, after the stop, for requests in flight to finish (their points reach
/// the final flush); what is still unanswered then is cut off with its connection.
pub const SHUTDOWN_GRACE: Duration = async_listener::SHUTDOWN_GRACE;

/// What an exporter is told to wait before retrying a request refused as busy.
pub const RETRY_AFTER: Duration = Duration::from_secs(2);

/// Starts the OTLP listeners that are enabled, around `streams` (a table in memory when
/// none is given).
pub(super) fn start<F, H>(
    config: &IngestConfig,
    streams: Option<Arc<StreamState>>,
    receivers: &mut Receivers,
    factory: &Arc<F>,
) -> Result<(), ListenError>
where
    F: Fn(Transport) -> H + Send + Sync + 'static,
    H: PacketHandler,
{
    if !config.otlp_http.enabled && !config.otlp_grpc.enabled {
        return Ok(());
    }
    let streams =
        streams.unwrap_or_else(|| Arc::new(StreamState::in_memory(&config.otlp, now_unix_nanos())));
    streams.report_to(receivers.shared_stats());
    let policy = AttributePolicy {
        resource: config.otlp.resource_attributes.clone(),
        scope: config.otlp.scope_attributes.clone(),
    };
    let durable = if config.otlp.durable {
        let log = factory(Transport::OtlpHttp).ingest_log();
        if log.is_none() {
            return Err(ListenError::Config(ConfigError::invalid(
                "ingest.otlp.durable",
                "needs a pipeline that keeps an ingest log in its state directory (the sidecar's)",
            )));
        }
        log
    } else {
        None
    };
    let listeners = [
        (
            Transport::OtlpHttp,
            &config.otlp_http.enabled,
            config.otlp_http.listen,
            config.otlp_http.max_request_bytes,
            config.otlp_http.max_connections,
        ),
        (
            Transport::OtlpGrpc,
            &config.otlp_grpc.enabled,
            config.otlp_grpc.listen,
            config.otlp_grpc.max_request_bytes,
            config.otlp_grpc.max_connections,
        ),
    ];
    for (transport, enabled, addr, max_request_bytes, max_connections) in listeners {
        if !enabled {
            continue;
        }
        let listener = async_listener::bind(transport, addr)?;
        let local = receivers.listen_inet(transport, addr, &listener)?;
        let shared = Arc::new(Shared {
            handlers: HandlerPool::new(workers(), || factory(transport)),
            streams: Arc::clone(&streams),
            policy: policy.clone(),
            stats: receivers.shared_stats(),
            transport,
            max_request_bytes,
            durable: durable.clone(),
            read_timeout: async_listener::READ_TIMEOUT,
            max_connections,
            receiving: async_listener::Receiving::new(async_listener::MAX_RECEIVING),
        });
        let stop = receivers.stop_flag();
        let name = match transport {
            Transport::OtlpGrpc => "cs-otlp-grpc",
            _ => "cs-otlp-http",
        };
        receivers.spawn(transport, &addr.to_string(), name.into(), move || {
            serve(transport, listener, shared, stop);
        })?;
        tracing::info!(address = %local, "Listening for OTLP metrics ({}).", transport.title());
    }
    Ok(())
}

/// The listener thread: a runtime of one worker per handler (see
/// [`async_listener::serve`]).
fn serve<H: PacketHandler>(
    transport: Transport,
    listener: TcpListener,
    shared: Arc<Shared<H>>,
    stop: StopFlag,
) {
    let worker_name = match transport {
        Transport::OtlpGrpc => "cs-otlp-grpc-w",
        _ => "cs-otlp-http-w",
    };
    let workers = (shared.handlers.len(), worker_name);
    async_listener::serve(
        transport,
        listener,
        stop,
        workers,
        |listener, stopped| async move {
            match transport {
                Transport::OtlpGrpc => grpc::serve(listener, shared, stopped)
                    .await
                    .map_err(|e| e.to_string()),
                _ => http::serve(listener, shared, stopped)
                    .await
                    .map_err(|e| e.to_string()),
            }
        },
    );
}

/// Decodes an OTLP/HTTP protobuf body (or a gRPC message), already decompressed.
pub fn decode_protobuf(body: &[u8]) -> Result<ExportMetricsServiceRequest, String> {
    prost::Message::decode(body).map_err(|e: prost::DecodeError| e.to_string())
}

/// Decodes an OTLP/HTTP JSON body, already decompressed.
pub fn decode_json(body: &[u8]) -> Result<ExportMetricsServiceRequest, String> {
    serde_json::from_slice(body).map_err(|e| e.to_string())
}

/// Nanoseconds since the Unix epoch, now.
pub fn now_unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// What a listener's workers share: the handlers into the engine, the stream table (both
/// listeners share that one), counters.
pub(super) struct Shared<H> {
    handlers: HandlerPool<H>,
    streams: Arc<StreamState>,
    policy: AttributePolicy,
    stats: Arc<IngestStats>,
    transport: Transport,
    max_request_bytes: usize,
    /// The ingest log, when the receivers are durable (`ingest.otlp.durable`).
    durable: Option<Arc<IngestLog>>,
    /// Longest a request's body (OTLP/HTTP: and its headers) may take to arrive
    /// ([`async_listener::READ_TIMEOUT`]; shorter in tests).
    read_timeout: Duration,
    /// Most connections open at once (the listener's `max_connections`).
    max_connections: usize,
    /// The requests received and handled at once ([`async_listener::MAX_RECEIVING`];
    /// fewer in tests).
    receiving: async_listener::Receiving,
}

/// The answer to one decoded request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Answer {
    /// Every point is in the buffer, ignored (another kind) or counted as refused:
    /// `rejected` points, and why in `message` (empty when none).
    Done {
        /// Points refused.
        rejected: u64,
        /// The reasons, for `partial_success.error_message`.
        message: String,
    },
    /// Nothing applied: the buffer is near its limits (durable: the ingest log is
    /// full); retry later.
    Busy,
    /// Durable only: the ingest log takes nothing (it failed earlier, or this write
    /// failed, which a reader skips whole): nothing was applied; retry later (a restart
    /// makes the log take appends again).
    Unavailable,
    /// Durable only: the points were written to the ingest log but its sync failed, so
    /// a restart may or may not count them: answered with a status exporters do not
    /// retry, since a retry could count them twice (as an unknown write to the store is
    /// never re-sent). The log takes nothing more until a restart.
    Unknown,
}

/// The message of [`Answer::Unknown`].
pub(super) const UNKNOWN_OUTCOME: &str = "the export was written to the ingest log but could not be synced: a restart may or may not count it; do not send it again";

/// Why a request was refused before decoding finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Larger than `max_request_bytes` (compressed or decompressed).
    TooLarge,
    /// Not protobuf, not OTLP JSON, or a gzip body that does not decompress.
    Malformed,
    /// A content type or encoding the receiver does not speak.
    Unsupported,
    /// A body that did not arrive within the read timeout.
    TimedOut,
}

impl<H: PacketHandler> Shared<H> {
    /// Counts one request received, of `bytes` bytes on the wire.
    pub(super) fn count_request(&self, bytes: usize) {
        let t = self.stats.get(self.transport);
        t.packets.fetch_add(1, Relaxed);
        t.bytes.fetch_add(bytes as u64, Relaxed);
    }

    /// Counts a request refused before decoding.
    pub(super) fn count_refusal(&self, refusal: Refusal) {
        let t = self.stats.get(self.transport);
        match refusal {
            Refusal::TooLarge => &t.oversized,
            Refusal::Malformed => &t.malformed,
            Refusal::Unsupported => &t.unsupported,
            Refusal::TimedOut => &t.timed_out,
        }
        .fetch_add(1, Relaxed);
    }

    /// The largest request body accepted.
    pub(super) fn max_request_bytes(&self) -> usize {
        self.max_request_bytes
    }

    /// Longest a request's body may take to arrive.
    pub(super) fn read_timeout(&self) -> Duration {
        self.read_timeout
    }

    /// A place among the requests received at once, once one is free.
    pub(super) async fn enter(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.receiving.enter().await
    }

    /// A place among the requests received at once, if one is free now; else the
    /// request is counted as refused busy.
    pub(super) fn try_enter(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let place = self.receiving.try_enter();
        if place.is_none() {
            self.count_request(0);
            self.stats.get(self.transport).busy.fetch_add(1, Relaxed);
        }
        place
    }

    /// The listener's connection bound, counting into its transport's counters.
    pub(super) fn gate(&self) -> async_listener::Gate {
        async_listener::Gate::new(
            self.transport,
            Arc::clone(&self.stats),
            self.max_connections,
        )
    }

    /// Applies one decoded request: its points into the buffer, or refused and counted.
    pub(super) fn export(&self, request: &ExportMetricsServiceRequest) -> Answer {
        let mut handler = self.handlers.take();
        if handler.busy() {
            self.stats.get(self.transport).busy.fetch_add(1, Relaxed);
            return Answer::Busy;
        }
        // The stream table first, then the handler's stripe (inside `record_each`):
        // every worker takes them in this order. Without a cumulative sum the table is
        // never read: an empty one (which does not allocate) spares delta requests the
        // shared table's lock.
        let mut shared_table = convert::has_cumulative(request).then(|| self.streams.table());
        let mut empty = Streams::new(2, 0);
        let streams = shared_table.as_deref_mut().unwrap_or(&mut empty);
        let mut refused = 0u64;
        let mut conversion = Conversion::default();
        // Each point straight to the handler, in one batch.
        handler.record_each(&mut |record| {
            conversion = convert::convert_each(
                request,
                &self.policy,
                streams,
                now_unix_nanos(),
                &mut |point| {
                    let taken = record(point.name, point.tags, point.delta, point.at_unix_secs)
                        != Recorded::Refused;
                    if !taken {
                        refused += 1;
                    }
                    taken
                },
            );
        });
        drop(handler);
        if let Some(streams) = shared_table {
            self.publish_streams(&streams);
        }
        self.done(&conversion, refused)
    }

    /// Publishes the stream table's size and evictions.
    fn publish_streams(&self, streams: &Streams) {
        let otlp = &self.stats.otlp;
        otlp.streams.store(streams.len() as u64, Relaxed);
        otlp.evicted.store(streams.evicted(), Relaxed);
    }

    /// Counts what the conversion dropped and ignored; the answer for a request of which
    /// `refused` points the aggregator refused.
    fn done(&self, conversion: &Conversion<'_>, refused: u64) -> Answer {
        let otlp = &self.stats.otlp;
        for (counter, n) in otlp.dropped.iter().zip(conversion.dropped) {
            counter.fetch_add(n, Relaxed);
        }
        for (counter, n) in otlp.ignored.iter().zip(conversion.ignored) {
            counter.fetch_add(n, Relaxed);
        }
        let mut message = conversion.message();
        if refused > 0 {
            if !message.is_empty() {
                message.push_str(", ");
            }
            message.push_str(&format!(
                "{refused} refused by the aggregator (invalid key, outside the time window or over a limit; see countersink_dropped_total and countersink_lines_invalid_total)"
            ));
        }
        Answer::Done {
            rejected: conversion.rejected() + refused,
            message,
        }
    }
}

#[cfg(test)]
mod listener_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::metrics::v1::{
        AggregationTemporality, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
        metric::Data, number_data_point::Value,
    };

    /// A handler that keeps what it is given, refuses every `refuse_every`-th increment,
    /// and says it is busy when told to.
    #[derive(Default)]
    pub(super) struct Keep {
        kept: Vec<(String, i64)>,
        seen: usize,
        refuse_every: usize,
        busy: bool,
        /// What `count_checked` was told: (accepted, refused) summed.
        counted: (u64, usize),
    }

    impl PacketHandler for Keep {
        fn handle(&mut self, _packet: &[u8]) {}

        fn record(
            &mut self,
            name: &str,
            _tags: &[(&str, &str)],
            delta: i64,
            _at: Option<i64>,
        ) -> Recorded {
            self.seen += 1;
            if self.refuse_every > 0 && self.seen.is_multiple_of(self.refuse_every) {
                return Recorded::Refused;
            }
            self.kept.push((name.to_string(), delta));
            Recorded::Accepted
        }

        fn busy(&self) -> bool {
            self.busy
        }

        fn count_checked(&mut self, accepted: u64, refused: &[crate::engine::Refusal]) {
            self.counted.0 += accepted;
            self.counted.1 += refused.len();
        }

        fn check(
            &mut self,
            _name: &str,
            _tags: &[(&str, &str)],
            delta: i64,
            _at: Option<i64>,
        ) -> Result<crate::bucket::Minute, crate::engine::Refusal> {
            self.seen += 1;
            let refused = self.refuse_every > 0 && self.seen.is_multiple_of(self.refuse_every);
            if refused {
                return Err(crate::engine::Refusal {
                    error: crate::engine::RecordError::Dropped(
                        crate::vocabulary::DropReason::Unconfigured,
                    ),
                    delta,
                });
            }
            Ok(crate::bucket::Minute(7))
        }
    }

    pub(super) fn shared(handler: Keep) -> Shared<Keep> {
        shared_by(vec![handler])
    }

    fn shared_by(handlers: Vec<Keep>) -> Shared<Keep> {
        let mut handlers = handlers.into_iter();
        Shared {
            handlers: HandlerPool::new(handlers.len(), || handlers.next().unwrap()),
            streams: Arc::new(StreamState::in_memory(
                &crate::config::ingest::OtlpConfig {
                    max_streams: 100,
                    ..Default::default()
                },
                0,
            )),
            policy: AttributePolicy::default(),
            stats: Arc::new(IngestStats::default()),
            transport: Transport::OtlpHttp,
            max_request_bytes: 1 << 20,
            durable: None,
            read_timeout: async_listener::READ_TIMEOUT,
            max_connections: crate::config::ingest::DEFAULT_REQUEST_MAX_CONNECTIONS,
            receiving: async_listener::Receiving::new(async_listener::MAX_RECEIVING),
        }
    }

    fn deltas(values: &[f64]) -> ExportMetricsServiceRequest {
        let points = values
            .iter()
            .map(|v| NumberDataPoint {
                value: Some(Value::AsDouble(*v)),
                ..Default::default()
            })
            .collect();
        sums(points, AggregationTemporality::Delta)
    }

    /// One cumulative point of stream `m`, started at 1 (after the table's mark: its
    /// first value counts whole).
    fn cumulative(time: u64, value: i64) -> ExportMetricsServiceRequest {
        let point = NumberDataPoint {
            start_time_unix_nano: 1,
            time_unix_nano: time,
            value: Some(Value::AsInt(value)),
            ..Default::default()
        };
        sums(vec![point], AggregationTemporality::Cumulative)
    }

    fn sums(
        points: Vec<NumberDataPoint>,
        temporality: AggregationTemporality,
    ) -> ExportMetricsServiceRequest {
        ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![Metric {
                        name: "m".into(),
                        data: Some(Data::Sum(Sum {
                            data_points: points,
                            aggregation_temporality: temporality as i32,
                            is_monotonic: true,
                        })),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    /// Busy: nothing of the request is applied (so the exporter's retry cannot double
    /// count), and the refusal is counted.
    #[test]
    fn a_busy_buffer_refuses_the_whole_request_before_applying_anything() {
        let s = shared(Keep {
            busy: true,
            ..Keep::default()
        });
        assert_eq!(s.export(&deltas(&[1.0, 2.0])), Answer::Busy);
        assert!(s.handlers.slot(0).lock().kept.is_empty());
        assert_eq!(s.stats.transport(Transport::OtlpHttp).busy, 1);
    }

    /// Refusals by the mapping and by the aggregator add up in one partial success; what
    /// was accepted stays accepted.
    #[test]
    fn refusals_are_reported_as_a_partial_success_with_counts() {
        let s = shared(Keep {
            refuse_every: 2,
            ..Keep::default()
        });
        let answer = s.export(&deltas(&[1.0, 2.5, 3.0, 4.0, 5.0]));
        let Answer::Done { rejected, message } = answer else {
            panic!("{answer:?}");
        };
        // 2.5 by the mapping; of 1, 3, 4, 5 the handler refuses the 2nd and the 4th.
        assert_eq!(rejected, 3);
        assert!(message.contains("1 non_integer"), "{message}");
        assert!(message.contains("2 refused by the aggregator"), "{message}");
        let kept: Vec<i64> = s
            .handlers
            .slot(0)
            .lock()
            .kept
            .iter()
            .map(|(_, d)| *d)
            .collect();
        assert_eq!(kept, vec![1, 4]);
        assert_eq!(s.stats.otlp().dropped[PointDrop::NonInteger.index()], 1);
    }

    /// A request takes a free handler: one held elsewhere (another worker's request)
    /// does not make it wait, and the points go through the free one.
    #[test]
    fn a_request_takes_a_free_handler_while_another_is_held() {
        let s = shared_by(vec![Keep::default(), Keep::default()]);
        let held = s.handlers.slot(0).lock();
        let answer = s.export(&deltas(&[1.0, 2.0]));
        assert!(
            matches!(answer, Answer::Done { rejected: 0, .. }),
            "{answer:?}"
        );
        assert!(held.kept.is_empty());
        drop(held);
        let kept: Vec<i64> = s
            .handlers
            .slot(1)
            .lock()
            .kept
            .iter()
            .map(|(_, d)| *d)
            .collect();
        assert_eq!(kept, vec![1, 2]);
    }

    /// A request without a cumulative sum never takes the shared stream table's lock:
    /// it completes while another holder keeps it locked.
    #[test]
    fn delta_requests_do_not_wait_on_the_stream_table() {
        let s = Arc::new(shared(Keep::default()));
        let table = s.streams.table();
        let (done_tx, done) = std::sync::mpsc::channel();
        let exporter = Arc::clone(&s);
        std::thread::spawn(move || {
            let _ = done_tx.send(exporter.export(&deltas(&[4.0])));
        });
        let answer = done
            .recv_timeout(Duration::from_secs(30))
            .expect("the delta request finished with the table locked elsewhere");
        assert!(
            matches!(answer, Answer::Done { rejected: 0, .. }),
            "{answer:?}"
        );
        drop(table);
        assert_eq!(s.handlers.slot(0).lock().kept, vec![("m".to_string(), 4)]);
    }

    /// The metric labels in `stats` are the receiver's own reasons and kinds.
    #[test]
    fn stats_labels_match_the_reasons() {
        let reasons: Vec<&str> = PointDrop::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(reasons, super::super::OTLP_DROP_REASONS);
        let kinds: Vec<&str> = IgnoredKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(kinds, super::super::OTLP_IGNORED_KINDS);
    }

    fn durable(handler: Keep, max_log_bytes: u64) -> (tempfile::TempDir, Shared<Keep>) {
        let dir = tempfile::tempdir().unwrap();
        let retention = crate::state::ingest_log::Retention {
            window_secs: 600,
            max_keys: 10,
            max_streams: 10,
        };
        let log = IngestLog::open(dir.path(), max_log_bytes, 1, retention).unwrap();
        let shared = Shared {
            durable: Some(Arc::new(log)),
            ..shared(handler)
        };
        (dir, shared)
    }

    fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }

    /// What a durable export leaves in the ingest log: its increments (nothing in the
    /// buffer) and, for a cumulative point, the stream's new last point with them.
    fn logged(shared: &Shared<Keep>) -> crate::state::ingest_log::SealedContent {
        let log = shared.durable.as_ref().unwrap();
        assert!(log.seal(1, 5).unwrap());
        let sealed = log.sealed().unwrap();
        crate::state::ingest_log::read_sealed_whole(&sealed[0].path).unwrap()
    }

    /// A durable export is answered once its lines are written and synced: the
    /// increments and each stream's last point, nothing in the buffer.
    #[test]
    fn a_durable_export_logs_its_increments_and_stream_points() {
        let (_dir, s) = durable(Keep::default(), 1 << 20);
        let answer = block_on(s.answer(cumulative(10, 100)));
        assert!(
            matches!(answer, Answer::Done { rejected: 0, .. }),
            "{answer:?}"
        );
        let answer = block_on(s.answer(cumulative(20, 130)));
        assert!(
            matches!(answer, Answer::Done { rejected: 0, .. }),
            "{answer:?}"
        );
        let answer = block_on(s.answer(deltas(&[4.0])));
        assert!(
            matches!(answer, Answer::Done { rejected: 0, .. }),
            "{answer:?}"
        );
        assert!(
            s.handlers.slot(0).lock().kept.is_empty(),
            "nothing goes to the buffer"
        );
        let content = logged(&s);
        let increments: Vec<i64> = content.entries.iter().map(|e| e.delta).collect();
        assert_eq!(increments, vec![100, 30, 4]);
        let points: Vec<(u64, i64)> = content.streams.iter().map(|l| (l.time, l.value)).collect();
        assert_eq!(points, vec![(10, 100), (20, 130)]);
        assert_eq!(content.streams[0].stream, content.streams[1].stream);
    }

    /// A durable export whose client goes away while its lines wait for their sync (the
    /// server drops the export's future then) is counted all the same: its lines are in
    /// the log and will be applied, and its refused points are drops to count.
    #[test]
    fn a_durable_export_dropped_while_syncing_is_counted() {
        let (_dir, s) = durable(
            Keep {
                refuse_every: 2,
                ..Keep::default()
            },
            1 << 20,
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // Polled once, then dropped: until one was dropped while it waited (a sync may
        // end between its request and the check that follows it).
        let (mut dropped, mut exports) = (false, 0_u64);
        for _ in 0..50 {
            exports += 1;
            let request = deltas(&[1.0, 2.0]);
            // Polled exactly once (a zero timeout parks until the timer's next tick, which
            // a fast sync beats): pending means it waits for its sync, and it is dropped.
            let answer = runtime
                .block_on(async { futures_util::FutureExt::now_or_never(s.answer(request)) });
            if answer.is_none() {
                dropped = true;
                break;
            }
        }
        assert!(
            dropped,
            "no export was still waiting for its sync when dropped"
        );
        let (accepted, refused) = s.handlers.slot(0).lock().counted;
        assert_eq!(
            (accepted, refused as u64),
            (exports, exports),
            "every export counted, the dropped one too"
        );
    }

    /// A point the aggregator refuses is answered as rejected, and neither it nor its
    /// stream's point is logged: the stream's next point taken carries its increase.
    #[test]
    fn a_refused_point_is_rejected_and_its_increase_carried_by_the_next() {
        let (_dir, s) = durable(
            Keep {
                refuse_every: 2,
                ..Keep::default()
            },
            1 << 20,
        );
        let rejected = |answer: Answer| match answer {
            Answer::Done { rejected, .. } => rejected,
            other => panic!("{other:?}"),
        };
        assert_eq!(rejected(block_on(s.answer(cumulative(10, 100)))), 0);
        assert_eq!(rejected(block_on(s.answer(cumulative(20, 130)))), 1);
        assert_eq!(rejected(block_on(s.answer(cumulative(30, 150)))), 0);
        let content = logged(&s);
        let increments: Vec<i64> = content.entries.iter().map(|e| e.delta).collect();
        assert_eq!(
            increments,
            vec![100, 50],
            "the refused 30 comes with the next"
        );
        let points: Vec<(u64, i64)> = content.streams.iter().map(|l| (l.time, l.value)).collect();
        assert_eq!(points, vec![(10, 100), (30, 150)]);
    }

    /// The same without the ingest log: a cumulative point the aggregator refuses leaves
    /// the stream's last point where it was, so the buffer gets the whole increase from
    /// the next point taken; a refused new stream's first point is not its baseline.
    #[test]
    fn a_refused_cumulative_point_moves_no_baseline() {
        let s = shared(Keep {
            refuse_every: 2,
            ..Keep::default()
        });
        for (time, value) in [(10, 100), (20, 130), (30, 150), (40, 190), (50, 200)] {
            s.export(&cumulative(time, value));
        }
        let kept: Vec<i64> = s
            .handlers
            .slot(0)
            .lock()
            .kept
            .iter()
            .map(|(_, d)| *d)
            .collect();
        // Taken: 100, then 150 - 100 (130 refused), then 200 - 150 (190 refused).
        assert_eq!(kept, vec![100, 50, 50]);
        assert_eq!(
            kept.iter().sum::<i64>(),
            200,
            "the stream's whole value, once"
        );
    }

    /// A full log refuses the export whole and takes back what it changed in the
    /// stream table, so the exporter's retry counts the same difference again, once.
    #[test]
    fn a_full_log_refuses_the_export_and_undoes_its_stream_changes() {
        // A log that holds one export's lines, and not the next one's.
        let (_dir, probe) = durable(Keep::default(), 1 << 20);
        block_on(probe.answer(cumulative(10, 100)));
        let one = probe.durable.as_ref().unwrap().bytes();
        let (_dir, s) = durable(Keep::default(), one + one / 2);
        let answer = block_on(s.answer(cumulative(10, 100)));
        assert!(
            matches!(answer, Answer::Done { rejected: 0, .. }),
            "{answer:?}"
        );
        let before: Vec<_> = s.streams.table().entries().collect();
        let answer = block_on(s.answer(cumulative(20, 130)));
        assert_eq!(answer, Answer::Busy);
        assert_eq!(s.streams.table().entries().collect::<Vec<_>>(), before);
        assert_eq!(s.stats.transport(Transport::OtlpHttp).busy, 1);
    }
}
