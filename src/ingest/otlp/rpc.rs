//! The `google.rpc` messages the receivers answer errors with: `Status` (the body of an
//! OTLP/HTTP error, and gRPC's `grpc-status-details-bin`) and `RetryInfo`, which the OTLP
//! specification requires beside `RESOURCE_EXHAUSTED` for an exporter to retry: without
//! it, `RESOURCE_EXHAUSTED` means "do not retry" (as for a request over the size limit).

use std::time::Duration;

use prost::Message;

/// `google.rpc.Status`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct RpcStatus {
    #[prost(int32, tag = "1")]
    pub(super) code: i32,
    #[prost(string, tag = "2")]
    pub(super) message: String,
    #[prost(message, repeated, tag = "3")]
    pub(super) details: Vec<Any>,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct Any {
    #[prost(string, tag = "1")]
    pub(super) type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    pub(super) value: Vec<u8>,
}

/// `google.rpc.RetryInfo`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    pub(super) retry_delay: Option<ProtoDuration>,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct ProtoDuration {
    #[prost(int64, tag = "1")]
    pub(super) seconds: i64,
    #[prost(int32, tag = "2")]
    pub(super) nanos: i32,
}

/// The type URL of `RetryInfo` in an `Any`.
pub(super) const RETRY_INFO_TYPE: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// gRPC's `RESOURCE_EXHAUSTED`.
pub(super) const RESOURCE_EXHAUSTED: i32 = 8;

/// An encoded `google.rpc.Status` of `RESOURCE_EXHAUSTED` with `message`, carrying a
/// `RetryInfo` of `delay`: "retry, after this long".
pub(super) fn retryable_exhausted(message: &str, delay: Duration) -> Vec<u8> {
    let retry = RetryInfo {
        retry_delay: Some(ProtoDuration {
            seconds: i64::try_from(delay.as_secs()).unwrap_or(i64::MAX),
            nanos: i32::try_from(delay.subsec_nanos()).unwrap_or(0),
        }),
    };
    RpcStatus {
        code: RESOURCE_EXHAUSTED,
        message: message.to_string(),
        details: vec![Any {
            type_url: RETRY_INFO_TYPE.to_string(),
            value: retry.encode_to_vec(),
        }],
    }
    .encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_info_decodes_back() {
        let bytes = retryable_exhausted("busy", Duration::from_millis(2500));
        let status = RpcStatus::decode(bytes.as_slice()).unwrap();
        assert_eq!(status.code, RESOURCE_EXHAUSTED);
        assert_eq!(status.message, "busy");
        assert_eq!(status.details.len(), 1);
        assert_eq!(status.details[0].type_url, RETRY_INFO_TYPE);
        let retry = RetryInfo::decode(status.details[0].value.as_slice()).unwrap();
        assert_eq!(
            retry.retry_delay,
            Some(ProtoDuration {
                seconds: 2,
                nanos: 500_000_000
            })
        );
    }
}
