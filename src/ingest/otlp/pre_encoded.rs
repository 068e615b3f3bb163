//! [`PreEncoded`]: the client side of the `Export` call for a sender whose requests are
//! already protobuf bytes, as a load generator's are: they go out as they are (no
//! encoding on the sender's clock, and bytes that do not decode reach the receiver
//! unchecked), and the answer is decoded.

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use prost::bytes::{BufMut, Bytes};
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

/// The path of the OTLP metrics `Export` method, the one the receiver serves.
pub const EXPORT_PATH: &str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";

/// A codec for `tonic::client::Grpc::unary` on [`EXPORT_PATH`]: the request's bytes sent
/// as they are, the answer decoded.
#[derive(Debug, Clone, Copy, Default)]
pub struct PreEncoded;

impl Codec for PreEncoded {
    type Encode = Bytes;
    type Decode = ExportMetricsServiceResponse;
    type Encoder = PreEncoded;
    type Decoder = PreEncoded;

    fn encoder(&mut self) -> PreEncoded {
        PreEncoded
    }

    fn decoder(&mut self) -> PreEncoded {
        PreEncoded
    }
}

impl Encoder for PreEncoded {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for PreEncoded {
    type Item = ExportMetricsServiceResponse;
    type Error = Status;

    fn decode(
        &mut self,
        src: &mut DecodeBuf<'_>,
    ) -> Result<Option<ExportMetricsServiceResponse>, Status> {
        prost::Message::decode(src)
            .map(Some)
            .map_err(|e: prost::DecodeError| Status::internal(e.to_string()))
    }
}
