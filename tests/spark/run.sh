#!/usr/bin/env bash
# The Spark job of deploy/spark against a store with seeded drift (outside writers, and
# unknown outcomes that applied and did not, through fault_proxy.py): the same report and
# exit code as one `countersink reconcile` process, also with a task killed mid-job
# (spark_reconcile.py says how). In local mode (`local[2,4]`); PySpark 3.5.9 from PyPI (venv.sh) on Java 17.
#
#   tests/spark/run.sh HOST:PORT    a running Cassandra node (CI: tests/cassandra/cluster.sh up 1)
#   tests/spark/run.sh              countersink dev's embedded store (cqlsim), for local runs
#
# Environment: SPARK_TEST_KEYS (keys of the day, default 5000); SPARK_MEASURE_RUNS=N (more
# runs of each, medians of keys/s: the figure in docs/src/performance.md, not part of CI).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
if ! command -v java >/dev/null; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless
fi
target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
cargo build --quiet --locked --bin countersink
spark_bin="$(bash "$here/venv.sh")"
# The Python cassandra-driver of the outside writer: the virtualenv tests/cassandra uses.
driver_bin="$(bash "$root/tests/cqlsim/python/venv.sh")"
mkdir -p "$target/tmp"
work="$(mktemp -d "$target/tmp/spark-XXXXXX")"
trap 'rm -rf "$work"' EXIT
started=$SECONDS
# fault_proxy.py is imported from beside the script: no __pycache__ left in the tree.
PYTHONDONTWRITEBYTECODE=1 "$driver_bin/python" "$here/spark_reconcile.py" "$target/debug/countersink" "$spark_bin" "$work" "$@"
echo "tests/spark/run.sh: $((SECONDS - started)) s (the virtualenvs and the build before it not counted)"
