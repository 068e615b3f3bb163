//! The OTLP metrics receiver: OpenTelemetry exporters (HTTP `POST /v1/metrics`, protobuf
//! or JSON, and gRPC) into the engine.
//!
//! | module | job |
//! | --- | --- |
//! | `convert` | one request to increments: the mapping, temporalities, resets (synchronous, time passed in) |
//! | `streams` | the bounded table of the last point per cumulative stream |

pub mod convert;
pub mod streams;

pub use convert::{AttributePolicy, Conversion, IgnoredKind, Increment, PointDrop, convert};
pub use streams::Streams;
