#!/usr/bin/env bash
# Installs the five languages' StatsD clients and the OpenTelemetry SDKs of Python, Go,
# Java and Node (their OTLP exporters) at pinned versions (PyPI, the Go module proxy,
# npm, Maven Central, crates.io), then runs run.py: real traffic from each to
# `countersink dev`, exact totals read back from both tables; then python/durable_http.py:
# Python requests and httpx, and curl, against the durable HTTP increment API, retries with
# an Idempotency-Key counted once. A client that cannot be installed fails the run. Needs root for the net.unix.max_dgram_qlen phases (CI is root).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
out="$target/clients"
mkdir -p "$out"

echo "==> countersink and the Rust client (cadence, from Cargo.lock)"
cargo build --quiet --locked --bin countersink --example client_cadence

echo "==> Python: datadog, statsd and the OpenTelemetry SDK ($here/python/requirements.txt)"
venv="$target/clients-venv"
if ! "$venv/bin/python" -c 'import sys
import importlib.metadata as m
pins = dict(l.strip().split("==") for l in open(sys.argv[1]) if "==" in l)
sys.exit(any(m.version(p) != v for p, v in pins.items()))' "$here/python/requirements.txt" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/python/requirements.txt"
fi

echo "==> Go: datadog-go, and the OpenTelemetry SDK (go.mod, go.sum of each)"
(cd "$here/go" && GOFLAGS=-mod=readonly go build -o "$out/datadog-go-send" .)
(cd "$here/go/otlp" && GOFLAGS=-mod=readonly go build -o "$out/otel-go-send" .)

echo "==> Go: an OpenTelemetry Collector (OTLP receiver, batch, OTLP exporter) at v0.165.0 (tests/otelcol)"
bash "$root/tests/otelcol/build.sh" "$target/otelcol"

echo "==> Node: hot-shots, unix-dgram and the OpenTelemetry SDK (package-lock.json)"
# unix-dgram is a native module: build it against the installed Node's headers
# (node-gyp would otherwise download them).
nodedir=/usr
[ -f "$nodedir/include/node/node.h" ] || { echo "Node headers missing in $nodedir/include/node (Debian: nodejs or libnode-dev)"; exit 1; }
(cd "$here/node" && npm_config_nodedir="$nodedir" npm ci --no-audit --no-fund --loglevel=error)
node -e "require('$here/node/node_modules/unix-dgram')"

echo "==> Java: java-dogstatsd-client and the OpenTelemetry SDK (pom.xml)"
(cd "$here/java" && mvn -q -B dependency:build-classpath -Dmdep.outputFile="$out/java-classpath.txt")
mkdir -p "$out/java"
javac -d "$out/java" -cp "$(cat "$out/java-classpath.txt")" "$here/java/src/Send.java" "$here/java/src/SendOtlp.java"

tools=$(python3 -c 'import json, sys; print(json.dumps({"python": sys.argv[1], "go": sys.argv[2], "node": "node",
    "java": ["java", "-cp", sys.argv[3]], "cadence": sys.argv[4], "go_otel": sys.argv[5], "collector": sys.argv[6]}))' \
    "$venv/bin/python" "$out/datadog-go-send" "$out/java:$(cat "$out/java-classpath.txt")" "$target/debug/examples/client_cadence" \
    "$out/otel-go-send" "$target/otelcol/otelcol-countersink")
echo "==> run.py"
CLIENT_TOOLS="$tools" COUNTERSINK_BIN="$target/debug/countersink" CLIENTS_REPORT="${CLIENTS_REPORT:-$out/report.json}" \
    python3 "$here/run.py"
echo "==> Python requests and httpx, and curl, against the durable HTTP increment API"
COUNTERSINK_BIN="$target/debug/countersink" "$venv/bin/python" "$here/python/durable_http.py"
