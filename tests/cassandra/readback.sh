#!/usr/bin/env bash
# countersink writes to a real Cassandra node, and the Python cassandra-driver and cqlsh read
# it back (readback.py says how). Needs a running node: tests/cassandra/cluster.sh up.
#
#   tests/cassandra/readback.sh [HOST:PORT]     default: the cluster's first contact point
#
# The virtualenv with the pinned driver and cqlsh is tests/cqlsim/python/venv.sh's.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
contact="${1:-$("$here/cluster.sh" contact | cut -d, -f1)}"
[ -n "$contact" ] || { echo "readback.sh: no running node (tests/cassandra/cluster.sh up)" >&2; exit 1; }

bin="$(bash "$root/tests/cqlsim/python/venv.sh")"
target="$(cd "$root" && cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
(cd "$root" && cargo build --quiet --locked --bin countersink)
"$bin/python" "$here/readback.py" "${contact%:*}" "${contact##*:}" "$target/debug/countersink" "$bin/cqlsh"
