//! The `countersink` command: sidecar, dev mode and operator tools.

fn main() {}
