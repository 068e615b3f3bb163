//! Integration tests: the real `scylla` 1.9 driver against cqlsim, in-process. One test
//! binary (modules below) keeps link time down.

mod common;
mod counter_rules;
mod driver;
mod faults;
mod persist;
mod regular;
mod wire;
mod write_time;
