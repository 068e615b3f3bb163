//! OTLP/gRPC: the `MetricsService/Export` call, served by tonic, gzip accepted.
//!
//! The service is written here rather than taken from the generated
//! `MetricsServiceServer` for its codec: tonic hands a message over whole in one buffer,
//! and decoding it as a slice costs about a sixth less than through the buffer's cursor
//! (what the generated codec does), and gives its size for the byte counter without a
//! walk of the decoded request (`encoded_len`).
//!
//! Statuses: OK with `partial_success` when points were refused; `RESOURCE_EXHAUSTED`
//! when the buffer is near its limits (nothing applied; with `RetryInfo`, so the exporter
//! retries) and for a message over `max_request_bytes` (without: not retried); `INVALID_ARGUMENT` for a message that does not
//! decode or decompress; `UNIMPLEMENTED` for an unknown compression. tonic refuses those
//! before the call reaches this code; [`Metrics`] counts them by reason, and turns
//! tonic's `OUT_OF_RANGE` (retryable in OTLP) for an oversized message into
//! `RESOURCE_EXHAUSTED`, and `INTERNAL` for a body that does not decode into
//! `INVALID_ARGUMENT`, which exporters do not retry. `DEADLINE_EXCEEDED` for a message
//! that did not arrive within the read timeout (30 s from the call's headers, nothing
//! applied), counted as `timeout`.
//!
//! Bounds: at most 128 connections (`async_listener::Gate`), at most
//! [`MAX_CONCURRENT_STREAMS`] calls at once on each, of which at most 32 on the whole
//! listener are read and handled at once (`async_listener::Receiving`; one more is
//! answered `RESOURCE_EXHAUSTED` with `RetryInfo` at once, counted `busy`), each holding at most
//! `max_request_bytes` of message for at most the read timeout; HTTP/2 pings every
//! [`KEEPALIVE_INTERVAL`] close a connection whose peer is gone.

use std::convert::Infallible;
use std::future::{Future, Ready, ready};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::Either;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::SERVICE_NAME;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use prost::bytes::Buf;
use tonic::codec::{
    Codec, CompressionEncoding, DecodeBuf, Decoder, EnabledCompressionEncodings, EncodeBuf, Encoder,
};
use tonic::codegen::Service as TowerService;
use tonic::codegen::{Body, StdError, http};
use tonic::server::UnaryService;
use tonic::{Code, Request, Response, Status};

use super::{Answer, EXPORT_PATH, RETRY_AFTER, Refusal, Shared, rpc};
use crate::ingest::PacketHandler;
use crate::ingest::async_listener::{Admitted, Gate};

/// The largest HTTP/2 frame the receiver takes (its `SETTINGS_MAX_FRAME_SIZE`).
const MAX_FRAME_BYTES: u32 = 256 * 1024;

/// Most calls open at once on one connection (its `SETTINGS_MAX_CONCURRENT_STREAMS`;
/// tonic's default is no bound). Each may hold up to `max_request_bytes` of a message
/// being received, so this bounds a connection's buffers (128 MiB at the 4 MiB default).
/// An OpenTelemetry Collector's exporter sends on one connection with 10 consumers by
/// default, so 32 leaves it room; a client with more calls than this waits for a free
/// stream rather than failing (HTTP/2 clients queue them).
pub(super) const MAX_CONCURRENT_STREAMS: u32 = 32;

/// How often an idle connection is pinged; a ping unanswered within
/// [`KEEPALIVE_TIMEOUT`] closes it, so a peer that vanished (no FIN, no RST) does not
/// hold its place among the listener's connections.
pub(super) const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(60);

/// How long a keepalive ping may go unanswered.
pub(super) const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// The message of the refusal of a call over the listener's places (see
/// `async_listener::MAX_RECEIVING`).
const FULL: &str = "the receiver is reading its most calls at once; retry later";

/// The message of the busy refusal (counted where it is made, not again by [`classify`]).
const BUSY: &str = "the buffer is near its limits; retry later";

/// A decoded request and its size, decompressed, in bytes.
struct Received {
    request: ExportMetricsServiceRequest,
    bytes: usize,
}

/// The `Export` call's codec: [`Received`] in, the response out (prost both ways).
#[derive(Clone, Copy, Default)]
struct OtlpCodec;

impl Codec for OtlpCodec {
    type Encode = ExportMetricsServiceResponse;
    type Decode = Received;
    type Encoder = OtlpCodec;
    type Decoder = OtlpCodec;

    fn encoder(&mut self) -> OtlpCodec {
        OtlpCodec
    }

    fn decoder(&mut self) -> OtlpCodec {
        OtlpCodec
    }
}

impl Encoder for OtlpCodec {
    type Item = ExportMetricsServiceResponse;
    type Error = Status;

    fn encode(&mut self, item: Self::Item, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        prost::Message::encode(&item, dst).map_err(|e| Status::internal(e.to_string()))
    }
}

impl Decoder for OtlpCodec {
    type Item = Received;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Received>, Status> {
        let bytes = src.remaining();
        let chunk = src.chunk();
        let decoded = if chunk.len() == bytes {
            let decoded = prost::Message::decode(chunk);
            src.advance(bytes);
            decoded
        } else {
            // Not the case with tonic's buffers today; correct either way.
            prost::Message::decode(&mut *src)
        };
        decoded
            .map(|request| Some(Received { request, bytes }))
            .map_err(|e: prost::DecodeError| Status::invalid_argument(e.to_string()))
    }
}

/// The `Export` call itself: synchronous (the points are in the buffer when it returns).
struct Export<H> {
    shared: Arc<Shared<H>>,
}

impl<H: PacketHandler> UnaryService<Received> for Export<H> {
    type Response = ExportMetricsServiceResponse;
    /// Ready at once unless durable: a durable export waits for the ingest log's sync.
    type Future = Either<Ready<Exported>, Pin<Box<dyn Future<Output = Exported> + Send>>>;

    fn call(&mut self, request: Request<Received>) -> Self::Future {
        let Received { request, bytes } = request.into_inner();
        self.shared.count_request(bytes);
        if self.shared.is_durable() {
            let shared = Arc::clone(&self.shared);
            Either::Right(Box::pin(async move { reply(shared.answer(request).await) }))
        } else {
            Either::Left(ready(reply(self.shared.export(&request))))
        }
    }
}

/// What the `Export` call returns.
type Exported = Result<Response<ExportMetricsServiceResponse>, Status>;

/// The call's reply to `answer`.
fn reply(answer: Answer) -> Exported {
    match answer {
        Answer::Done { rejected, message } => Ok(Response::new(ExportMetricsServiceResponse {
            partial_success: (rejected > 0).then(|| ExportMetricsPartialSuccess {
                rejected_data_points: i64::try_from(rejected).unwrap_or(i64::MAX),
                error_message: message,
            }),
        })),
        Answer::Busy => Err(busy(BUSY)),
        // UNAVAILABLE is one of the codes exporters retry: nothing was applied.
        Answer::Unavailable => Err(Status::new(
            Code::Unavailable,
            "the ingest log takes nothing until a restart: the export was not applied",
        )),
        // UNKNOWN is not retried (the OTLP specification's list): a retry could count
        // the export twice.
        Answer::Unknown => Err(Status::new(Code::Unknown, super::UNKNOWN_OUTCOME)),
    }
}

/// The busy refusal: `RESOURCE_EXHAUSTED` with `RetryInfo`, the OTLP specification's sign
/// that it is worth retrying (an oversized message gets it without, so is not retried).
fn busy(message: &str) -> Status {
    Status::with_details(
        Code::ResourceExhausted,
        message,
        rpc::retryable_exhausted(message, RETRY_AFTER).into(),
    )
}

/// Serves until `stopped` completes, then finishes the calls in flight.
pub(super) async fn serve<H: PacketHandler>(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared<H>>,
    stopped: impl Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let incoming = admitted(listener, shared.gate());
    tonic::transport::Server::builder()
        // Frames of up to 256 KiB rather than HTTP/2's 16 KiB: a client that sends as
        // large frames as it may (tonic's, hyper's) sends an export of a few hundred
        // points in one DATA frame, not three or more, each of which the receiver reads,
        // accounts and copies on its own. One connection's read buffer holds at most one
        // such frame.
        .max_frame_size(Some(MAX_FRAME_BYTES))
        .max_concurrent_streams(Some(MAX_CONCURRENT_STREAMS))
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .add_service(Metrics { shared })
        .serve_with_incoming_shutdown(incoming, stopped)
        .await
}

/// The listener's connections, as far as its [`Gate`] admits them (one over the bound
/// is closed at once and counted); failed accepts counted and paced.
fn admitted(
    listener: tokio::net::TcpListener,
    gate: Gate,
) -> impl futures_util::Stream<Item = std::io::Result<Admitted<tokio::net::TcpStream>>> {
    futures_util::stream::unfold((listener, gate), |(listener, gate)| async move {
        loop {
            let tcp = match listener.accept().await {
                Ok((tcp, _)) => tcp,
                Err(error) => {
                    gate.accept_failed(&error).await;
                    continue;
                }
            };
            // Without TCP_NODELAY the reply's frames wait on the client's delayed ACK:
            // about 40 ms per export (measured: 87 exports/s on four connections).
            if let Err(error) = tcp.set_nodelay(true) {
                tracing::debug!(%error, "Could not set TCP_NODELAY on an OTLP/gRPC connection.");
            }
            if let Some(io) = gate.admit(tcp) {
                return Some((Ok(io), (listener, gate)));
            }
        }
    })
}

impl tonic::transport::server::Connected for Admitted<tokio::net::TcpStream> {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.get_ref().connect_info()
    }
}

/// A call's request body that ends in an error once its deadline passes, with `expired`
/// set: a client that sends part of a message and stalls is answered, and its buffers
/// freed, within the read timeout.
struct TimedBody<B> {
    inner: Pin<Box<B>>,
    deadline: Pin<Box<tokio::time::Sleep>>,
    expired: Arc<AtomicBool>,
}

impl<B> Body for TimedBody<B>
where
    B: Body,
    B::Error: Into<StdError>,
{
    type Data = B::Data;
    type Error = StdError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<B::Data>, StdError>>> {
        let this = &mut *self;
        match this.inner.as_mut().poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|f| f.map_err(Into::into))),
            Poll::Pending if this.deadline.as_mut().poll(cx).is_ready() => {
                this.expired.store(true, Relaxed);
                Poll::Ready(Some(Err("the request did not arrive in time".into())))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// The metrics service: `Export` through tonic's unary handling (compression, size
/// limit, status), with tonic's own refusals (before the call) counted by reason and
/// given the status an exporter should act on.
struct Metrics<H> {
    shared: Arc<Shared<H>>,
}

impl<H> Clone for Metrics<H> {
    fn clone(&self) -> Self {
        Metrics {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<H> tonic::server::NamedService for Metrics<H> {
    const NAME: &'static str = SERVICE_NAME;
}

impl<H, B> TowerService<http::Request<B>> for Metrics<H>
where
    H: PacketHandler,
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future =
        Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send + 'static>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let shared = Arc::clone(&self.shared);
        Box::pin(async move {
            if request.uri().path() != EXPORT_PATH {
                return Ok(unimplemented());
            }
            // Held until answered. Over the bound the call is refused as busy (the
            // exporter retries) rather than left waiting unread: its data would fill
            // the connection's HTTP/2 window, which the calls beside it need.
            let Some(_receiving) = shared.try_enter() else {
                return Ok(busy(FULL).into_http());
            };
            let mut accept = EnabledCompressionEncodings::default();
            accept.enable(CompressionEncoding::Gzip);
            let mut grpc = tonic::server::Grpc::new(OtlpCodec)
                .apply_compression_config(accept, EnabledCompressionEncodings::default())
                .apply_max_message_size_config(Some(shared.max_request_bytes()), None);
            let export = Export {
                shared: Arc::clone(&shared),
            };
            let expired = Arc::new(AtomicBool::new(false));
            let read_timeout = shared.read_timeout();
            let request = request.map(|body| TimedBody {
                inner: Box::pin(body),
                deadline: Box::pin(tokio::time::sleep(read_timeout)),
                expired: Arc::clone(&expired),
            });
            let response = grpc.unary(export, request).await;
            if expired.load(Relaxed) {
                shared.count_request(0);
                shared.count_refusal(Refusal::TimedOut);
                let message = format!("the request did not arrive within {read_timeout:?}");
                return Ok(Status::deadline_exceeded(message).into_http());
            }
            let mut response = response;
            let refused = response.extensions().get::<Status>().and_then(classify);
            if let Some((refusal, code)) = refused {
                shared.count_request(0);
                shared.count_refusal(refusal);
                response
                    .headers_mut()
                    .insert(Status::GRPC_STATUS, (code as i32).into());
            }
            Ok(response)
        })
    }
}

/// The answer to a method of the service other than `Export` (as tonic's generated
/// servers answer it).
fn unimplemented() -> http::Response<tonic::body::Body> {
    let mut response = http::Response::new(tonic::body::Body::default());
    let headers = response.headers_mut();
    headers.insert(Status::GRPC_STATUS, (Code::Unimplemented as i32).into());
    headers.insert(
        http::header::CONTENT_TYPE,
        tonic::metadata::GRPC_CONTENT_TYPE,
    );
    response
}

/// A refusal tonic made before the call, and the status to answer with; `None` for the
/// service's own answers.
fn classify(status: &Status) -> Option<(Refusal, Code)> {
    match status.code() {
        Code::OutOfRange => Some((Refusal::TooLarge, Code::ResourceExhausted)),
        Code::ResourceExhausted if status.message() != BUSY => {
            Some((Refusal::TooLarge, Code::ResourceExhausted))
        }
        Code::Unimplemented => Some((Refusal::Unsupported, Code::Unimplemented)),
        Code::Internal | Code::InvalidArgument | Code::DataLoss => {
            Some((Refusal::Malformed, Code::InvalidArgument))
        }
        _ => None,
    }
}
