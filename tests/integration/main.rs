//! countersink against cqlsim, through the real `scylla` driver: exact totals, every
//! fault class, node loss, shutdown and spill, and the write reduction the product exists
//! for. One test binary, modules per subject.

mod cardinality;
mod common;
mod cql_exact;
mod cql_faults;
mod cql_flush;
mod cql_reconcile;
mod cql_reconcile_pages;
mod cql_setup;
mod cql_shutdown;
mod crash;
mod docs;
mod epochs;
#[cfg(feature = "metrics-facade")]
mod facade;
mod granularities;
mod http_api;
mod layers;
mod mapping;
mod operations;
mod ops_hot;
mod ops_keyindex;
mod ops_leaderboard;
mod ops_migrate;
mod ops_prune;
mod ops_read;
#[cfg(feature = "otlp")]
mod otlp;
mod outcomes;
mod reconcile_slices;
mod reload;
mod shards;
mod sidecar;
mod sizing;
mod stores;
mod tables;
#[cfg(feature = "tls")]
mod tls;
mod totals;
mod wrapper;
mod wrapper_crash;
mod wrapper_stops;
