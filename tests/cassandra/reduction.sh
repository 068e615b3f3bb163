#!/usr/bin/env bash
# Write reduction on a real Cassandra node: starts a one-node cluster, runs the
# cassandra_reduction benchmark (tests/cassandra/reduction.rs: the seed scenario direct and
# through countersink, then the saturation comparison) and stops the cluster. A benchmark,
# not a test: run it on an otherwise idle machine. About five minutes; BENCH_* variables
# (see the program's header) shorten or change the run.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"

cargo build --locked --release --example cassandra_reduction
"$here/cluster.sh" down
trap '"$here/cluster.sh" down' EXIT
"$here/cluster.sh" up 1
CASSANDRA_PID="$("$here/cluster.sh" pid 1)" CASSANDRA_CONTACT_POINTS="$("$here/cluster.sh" contact)" \
    target/release/examples/cassandra_reduction
