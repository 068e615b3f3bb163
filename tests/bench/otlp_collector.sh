#!/usr/bin/env bash
# Builds countersink (release) and tests/otelcol's collector and load generator (Go module
# proxy, pinned in tests/otelcol/go.sum), then runs otlp_collector.py: OTLP/gRPC points
# absorbed per second, countersink against the OpenTelemetry Collector. Arguments go to
# the script (rounds, connections, seconds).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
cargo build --quiet --locked --release --bin countersink
bash tests/otelcol/build.sh "$target/otelcol"
tools=$(python3 -c 'import json, sys; print(json.dumps({"countersink": sys.argv[1], "collector": sys.argv[2], "load": sys.argv[3]}))' \
    "$target/release/countersink" "$target/otelcol/otelcol-countersink" "$target/otelcol/otlp-load")
OTLP_BENCH_TOOLS="$tools" python3 tests/bench/otlp_collector.py "$@"
