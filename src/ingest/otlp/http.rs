//! OTLP/HTTP: `POST /v1/metrics`, a protobuf (`application/x-protobuf`) or JSON
//! (`application/json`) body, optionally gzip (`Content-Encoding: gzip`).
//!
//! Statuses (the OTLP/HTTP specification's): 200 with an `ExportMetricsServiceResponse`
//! in the request's encoding (`partial_success` when points were refused); 400 for a body
//! that does not decode or decompress; 413 over `max_request_bytes`; 415 for another
//! content type or encoding; 429 with `Retry-After` when the buffer is near its limits
//! (nothing applied: the exporter retries); 408 for a body that did not arrive within
//! 30 s (`async_listener::READ_TIMEOUT`; nothing applied).
//! Error bodies are a `google.rpc.Status`.
//!
//! The listener holds at most 128 connections and closes one whose request headers take
//! longer than the read timeout (see `async_listener`).

use std::future::Future;
use std::io::Read;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use prost::Message;

use super::rpc::RpcStatus;
use super::{Answer, RETRY_AFTER, Refusal, Shared};
use crate::ingest::PacketHandler;
use crate::ingest::async_listener;

/// The path every OTLP/HTTP metrics exporter posts to.
pub(super) const PATH: &str = "/v1/metrics";

const PROTOBUF: &str = "application/x-protobuf";
const JSON: &str = "application/json";

/// Serves until `stopped` completes, then finishes the requests in flight.
pub(super) async fn serve<H: PacketHandler>(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared<H>>,
    stopped: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (gate, read_timeout) = (shared.gate(), shared.read_timeout());
    let app = Router::new()
        .route(PATH, post(export::<H>))
        .with_state(shared);
    async_listener::serve_http(listener, app, stopped, gate, read_timeout).await
}

/// How the request body is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Protobuf,
    Json,
}

async fn export<H: PacketHandler>(
    State(shared): State<Arc<Shared<H>>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let limit = shared.max_request_bytes();
    let format = match content_type(&headers) {
        Some(format) => format,
        None => {
            shared.count_request(0);
            return refuse(
                &shared,
                Refusal::Unsupported,
                Format::Protobuf,
                "content type must be application/x-protobuf or application/json",
            );
        }
    };
    let _receiving = shared.enter().await;
    let body = match async_listener::read_body(body, limit, shared.read_timeout()).await {
        Some(Ok(body)) => body,
        None => {
            shared.count_request(0);
            let message = format!(
                "the request body did not arrive within {:?}",
                shared.read_timeout()
            );
            return refuse(&shared, Refusal::TimedOut, format, &message);
        }
        Some(Err(error)) => {
            shared.count_request(0);
            let too_large = std::error::Error::source(&error)
                .is_some_and(|e| e.is::<http_body_util::LengthLimitError>());
            return if too_large {
                refuse(
                    &shared,
                    Refusal::TooLarge,
                    format,
                    &format!("request body over {limit} bytes"),
                )
            } else {
                refuse(
                    &shared,
                    Refusal::Malformed,
                    format,
                    "the request body could not be read",
                )
            };
        }
    };
    shared.count_request(body.len());
    let request = match decode(&headers, body, format, limit) {
        Ok(request) => request,
        Err((refusal, message)) => return refuse(&shared, refusal, format, &message),
    };
    match shared.answer(request).await {
        Answer::Done { rejected, message } => {
            let partial_success = (rejected > 0).then(|| ExportMetricsPartialSuccess {
                rejected_data_points: i64::try_from(rejected).unwrap_or(i64::MAX),
                error_message: message,
            });
            let response = ExportMetricsServiceResponse { partial_success };
            match format {
                Format::Protobuf => reply(StatusCode::OK, format, response.encode_to_vec()),
                Format::Json => reply(
                    StatusCode::OK,
                    format,
                    serde_json::to_vec(&response).unwrap_or_default(),
                ),
            }
        }
        Answer::Busy => {
            let mut response = status(
                StatusCode::TOO_MANY_REQUESTS,
                format,
                8, // RESOURCE_EXHAUSTED
                "the buffer is near its limits; retry later",
            );
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(RETRY_AFTER.as_secs()),
            );
            response
        }
        // The exporter retries a 503 (the OTLP/HTTP specification's retryable codes):
        // nothing was applied.
        Answer::Unavailable => status(
            StatusCode::SERVICE_UNAVAILABLE,
            format,
            14, // UNAVAILABLE
            "the ingest log takes nothing until a restart: the export was not applied",
        ),
        // Not a 503: a retry could count the export twice.
        Answer::Unknown => status(
            StatusCode::INTERNAL_SERVER_ERROR,
            format,
            2, // UNKNOWN
            super::UNKNOWN_OUTCOME,
        ),
    }
}

/// The request in `body`, decompressed as `Content-Encoding` says and decoded as
/// `format`; else the refusal and its message. The body, and what it decompressed into,
/// are dropped on return: a durable export waits for its sync without them.
fn decode(
    headers: &HeaderMap,
    body: Bytes,
    format: Format,
    limit: usize,
) -> Result<ExportMetricsServiceRequest, (Refusal, String)> {
    let body = match headers
        .get(header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("").trim().to_ascii_lowercase())
        .as_deref()
    {
        None | Some("" | "identity") => body,
        Some("gzip") => gunzip(&body, limit).map_err(|refusal| {
            let message = match refusal {
                Refusal::TooLarge => format!("decompressed body over {limit} bytes"),
                _ => "the gzip body does not decompress (truncated or corrupt)".to_string(),
            };
            (refusal, message)
        })?,
        Some(_) => {
            return Err((
                Refusal::Unsupported,
                "content encoding must be gzip or none".to_string(),
            ));
        }
    };
    let request = match format {
        Format::Protobuf => super::decode_protobuf(&body),
        Format::Json => super::decode_json(&body),
    };
    request.map_err(|error| {
        (
            Refusal::Malformed,
            format!("the body does not decode: {error}"),
        )
    })
}

/// The request's format from its `Content-Type` (parameters ignored).
fn content_type(headers: &HeaderMap) -> Option<Format> {
    let value = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let essence = value.split(';').next()?.trim().to_ascii_lowercase();
    match essence.as_str() {
        PROTOBUF | "application/protobuf" => Some(Format::Protobuf),
        JSON => Some(Format::Json),
        _ => None,
    }
}

/// Decompresses a gzip body (every member), at most `limit` bytes of output.
fn gunzip(body: &[u8], limit: usize) -> Result<Bytes, Refusal> {
    let mut out = Vec::new();
    let decoder = flate2::read::MultiGzDecoder::new(body);
    match decoder.take(limit as u64 + 1).read_to_end(&mut out) {
        Ok(n) if n > limit => Err(Refusal::TooLarge),
        Ok(_) => Ok(Bytes::from(out)),
        Err(_) => Err(Refusal::Malformed),
    }
}

/// Counts a refusal and answers it.
fn refuse<H: PacketHandler>(
    shared: &Shared<H>,
    refusal: Refusal,
    format: Format,
    message: &str,
) -> Response {
    shared.count_refusal(refusal);
    let (code, grpc) = match refusal {
        Refusal::TooLarge => (StatusCode::PAYLOAD_TOO_LARGE, 8), // RESOURCE_EXHAUSTED
        Refusal::Malformed => (StatusCode::BAD_REQUEST, 3),      // INVALID_ARGUMENT
        Refusal::Unsupported => (StatusCode::UNSUPPORTED_MEDIA_TYPE, 3),
        Refusal::TimedOut => (StatusCode::REQUEST_TIMEOUT, 4), // DEADLINE_EXCEEDED
    };
    let mut response = status(code, format, grpc, message);
    if refusal == Refusal::TimedOut {
        // The rest of the body may still come: the connection cannot carry another
        // request.
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// An error response: a `google.rpc.Status` in the request's format.
fn status(code: StatusCode, format: Format, grpc_code: i32, message: &str) -> Response {
    let body = match format {
        Format::Protobuf => RpcStatus {
            code: grpc_code,
            message: message.to_string(),
            details: Vec::new(),
        }
        .encode_to_vec(),
        Format::Json => serde_json::to_vec(&serde_json::json!({
            "code": grpc_code,
            "message": message,
        }))
        .unwrap_or_default(),
    };
    reply(code, format, body)
}

fn reply(code: StatusCode, format: Format, body: Vec<u8>) -> Response {
    let content_type = match format {
        Format::Protobuf => PROTOBUF,
        Format::Json => JSON,
    };
    (code, [(header::CONTENT_TYPE, content_type)], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_truncated_corrupt_and_bomb_are_refused() {
        use std::io::Write;
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(&[7u8; 10_000]).unwrap();
        let gz = encoder.finish().unwrap();
        assert_eq!(gunzip(&gz, 10_000).unwrap().len(), 10_000);
        assert_eq!(gunzip(&gz, 9_999), Err(Refusal::TooLarge));
        assert_eq!(gunzip(&gz[..gz.len() - 5], 10_000), Err(Refusal::Malformed));
        assert_eq!(gunzip(b"not gzip at all", 10_000), Err(Refusal::Malformed));
    }

    #[test]
    fn content_types() {
        let mut h = HeaderMap::new();
        assert_eq!(content_type(&h), None);
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("Application/JSON; charset=utf-8"),
        );
        assert_eq!(content_type(&h), Some(Format::Json));
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-protobuf"),
        );
        assert_eq!(content_type(&h), Some(Format::Protobuf));
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        assert_eq!(content_type(&h), None);
    }
}
