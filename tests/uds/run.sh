#!/usr/bin/env bash
# The Python `datadog` client (DogStatsd over the Unix datagram socket, non-blocking as it
# ships) against `countersink dev`: the warning at net.unix.max_dgram_qlen = 10 and loss
# only as the client and countersink report it, exact totals at 512. Sets the sysctl, so it
# needs root (as CI is); the previous value is restored. See check.py.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"

echo "==> countersink (debug build)"
cargo build --quiet --locked --bin countersink

echo "==> Python datadog client ($here/requirements.txt)"
venv="$target/uds-venv"
if ! "$venv/bin/python" -c 'import sys
import importlib.metadata as m
pins = dict(l.strip().split("==") for l in open(sys.argv[1]) if "==" in l)
sys.exit(any(m.version(p) != v for p, v in pins.items()))' "$here/requirements.txt" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
fi

COUNTERSINK_BIN="$target/debug/countersink" "$venv/bin/python" "$here/check.py"
