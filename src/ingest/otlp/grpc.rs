//! OTLP/gRPC: the `MetricsService/Export` call, served by tonic, gzip accepted.
//!
//! Statuses: OK with `partial_success` when points were refused; `RESOURCE_EXHAUSTED`
//! when the buffer is near its limits (nothing applied; with `RetryInfo`, so the exporter
//! retries) and for a message over `max_request_bytes` (without: not retried); `INVALID_ARGUMENT` for a message that does not
//! decode or decompress; `UNIMPLEMENTED` for an unknown compression. tonic refuses those
//! before the call reaches this code; [`Counted`] counts them by reason, and turns
//! tonic's `OUT_OF_RANGE` (retryable in OTLP) for an oversized message into
//! `RESOURCE_EXHAUSTED`, and `INTERNAL` for a body that does not decode into
//! `INVALID_ARGUMENT`, which exporters do not retry.

use std::future::Future;
use std::sync::Arc;

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::SERVICE_NAME;
use tonic::codec::CompressionEncoding;
use tonic::codegen::Service as TowerService;
use tonic::codegen::http;
use tonic::{Code, Request, Response, Status};

use super::{Answer, RETRY_AFTER, Refusal, Shared, rpc};
use crate::ingest::PacketHandler;

/// The message of the busy refusal (counted where it is made, not again by [`Counted`]).
const BUSY: &str = "the buffer is near its limits; retry later";

struct Service<H> {
    shared: Arc<Shared<H>>,
}

#[tonic::async_trait]
impl<H: PacketHandler> MetricsService for Service<H> {
    async fn export(
        &self,
        request: Request<ExportMetricsServiceRequest>,
    ) -> Result<Response<ExportMetricsServiceResponse>, Status> {
        let request = request.into_inner();
        self.shared
            .count_request(prost::Message::encoded_len(&request));
        match self.shared.export(&request) {
            Answer::Done { rejected, message } => Ok(Response::new(ExportMetricsServiceResponse {
                partial_success: (rejected > 0).then(|| ExportMetricsPartialSuccess {
                    rejected_data_points: i64::try_from(rejected).unwrap_or(i64::MAX),
                    error_message: message,
                }),
            })),
            // With RetryInfo: the OTLP specification's sign that RESOURCE_EXHAUSTED is
            // worth retrying (an oversized message gets it without, so is not retried).
            Answer::Busy => Err(Status::with_details(
                Code::ResourceExhausted,
                BUSY,
                rpc::retryable_exhausted(BUSY, RETRY_AFTER).into(),
            )),
        }
    }
}

/// Serves until `stopped` completes, then finishes the calls in flight.
pub(super) async fn serve<H: PacketHandler>(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared<H>>,
    stopped: impl Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let limit = shared.max_request_bytes();
    let inner = MetricsServiceServer::new(Service {
        shared: Arc::clone(&shared),
    })
    .accept_compressed(CompressionEncoding::Gzip)
    .max_decoding_message_size(limit);
    let service = Counted { inner, shared };
    tonic::transport::Server::builder()
        .add_service(service)
        .serve_with_incoming_shutdown(
            // Without TCP_NODELAY the reply's frames wait on the client's delayed ACK:
            // about 40 ms per export (measured: 87 exports/s on four connections).
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            stopped,
        )
        .await
}

/// The metrics service, with tonic's own refusals (before the call) counted by reason
/// and given the status an exporter should act on.
struct Counted<H> {
    inner: MetricsServiceServer<Service<H>>,
    shared: Arc<Shared<H>>,
}

impl<H> Clone for Counted<H> {
    fn clone(&self) -> Self {
        Counted {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<H> tonic::server::NamedService for Counted<H> {
    const NAME: &'static str = SERVICE_NAME;
}

impl<H, B> TowerService<http::Request<B>> for Counted<H>
where
    H: PacketHandler,
    MetricsServiceServer<Service<H>>: TowerService<
            http::Request<B>,
            Response = http::Response<tonic::body::Body>,
            Error = Infallible,
        >,
    <MetricsServiceServer<Service<H>> as TowerService<http::Request<B>>>::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future =
        Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send + 'static>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let call = self.inner.call(request);
        let shared = Arc::clone(&self.shared);
        Box::pin(async move {
            let mut response = call.await?;
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
