//! Crash safety with a real child process: `countersink serve` killed (SIGKILL) at each
//! step of flush, spill, replay, rotation and recovery, and at random moments under
//! random faults; after a restart and a clean stop, the checker ([`check`]) compares
//! what was fed, what the store holds and received, and what countersink recorded.

pub(crate) mod chaos;
pub(crate) mod check;
mod durable;
mod durable_otlp;
mod exact;
pub(crate) mod harness;
mod windows;
