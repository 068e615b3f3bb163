#!/usr/bin/env bash
# Builds the collector and the OTLP load generator of this module into DIR (default
# target/otelcol), from the Go module proxy at the versions go.sum pins. Skips a binary
# that is newer than every source file of the module, so CI builds the collector once
# per target directory.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/../../target/otelcol}"
mkdir -p "$out"
for cmd in otelcol-countersink otlp-load; do
    bin="$out/$cmd"
    if [ -x "$bin" ] && [ -z "$(find "$here" -name '*.go' -newer "$bin" -o -name 'go.*' -newer "$bin" | head -1)" ]; then
        continue
    fi
    (cd "$here" && GOFLAGS=-mod=readonly go build -o "$bin" "./cmd/$cmd")
done
