//! Native protocol v4 (and v3, whose framing is the same): frame header, primitive notations,
//! request decoding and response encoding, written by hand and cross-checked against
//! `scylla-cql` in the tests (`proto/tests.rs`).

pub(crate) mod frame;
pub(crate) mod request;
pub(crate) mod response;
pub(crate) mod wire;

#[cfg(test)]
mod tests;
