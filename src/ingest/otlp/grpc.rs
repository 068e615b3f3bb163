//! OTLP/gRPC: the `MetricsService/Export` call, served by tonic, gzip accepted.
//!
//! Statuses: OK with `partial_success` when points were refused; `RESOURCE_EXHAUSTED`
//! when the buffer is near its limits (nothing applied: the exporter retries) and, from
//! tonic, for a message over `max_request_bytes`. A message that does not decode is
//! answered by tonic (`INTERNAL`) before it reaches this code.

use std::future::Future;
use std::sync::Arc;

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use tonic::codec::CompressionEncoding;
use tonic::{Request, Response, Status};

use super::{Answer, Shared};
use crate::ingest::PacketHandler;

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
            Answer::Busy => Err(Status::resource_exhausted(
                "the buffer is near its limits; retry later",
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
    let service = MetricsServiceServer::new(Service { shared })
        .accept_compressed(CompressionEncoding::Gzip)
        .max_decoding_message_size(limit);
    tonic::transport::Server::builder()
        .add_service(service)
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener),
            stopped,
        )
        .await
}
