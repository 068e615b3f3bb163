#!/usr/bin/env bash
# Real faults on a real three-node Cassandra through countersink's flush path: starts the
# cluster (RF=3 keyspace, QUORUM writes, counter_write_request_timeout 1 s so paused replicas
# give real WriteTimeouts quickly), runs the cassandra_faults example (tests/cassandra/faults.rs),
# which kills, pauses and restarts nodes through cluster.sh, and stops the cluster.
# Exits non-zero if any row ends above what was accepted for it or above
# applied + unknown (a double count); rows below applied (the store lost an acknowledged
# write) are reported, not failed: they depend on CASSANDRA_COMMITLOG_SYNC (periodic, the
# default as in Cassandra, or batch), passed through to cluster.sh. About eight minutes.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"

cargo build --locked --release --example cassandra_faults
"$here/cluster.sh" down
trap '"$here/cluster.sh" down' EXIT
CASSANDRA_COUNTER_WRITE_TIMEOUT=1000ms CASSANDRA_WRITE_TIMEOUT=1000ms "$here/cluster.sh" up 3
# `start` after a kill reuses these settings: the yaml is written once by `up`.
CASSANDRA_CONTACT_POINTS="$("$here/cluster.sh" contact)" target/release/examples/cassandra_faults
