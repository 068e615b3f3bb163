//! countersink against cqlsim, through the real `scylla` driver: exact totals, every
//! fault class, node loss, shutdown and spill, and the write reduction the product exists
//! for. One test binary, modules per subject.

mod common;
mod cql_faults;
mod cql_flush;
mod cql_setup;
mod cql_shutdown;
mod docs;
mod operations;
mod shards;
mod sidecar;
mod stores;
#[cfg(feature = "tls")]
mod tls;
