#!/usr/bin/env bash
# Creates (or reuses) the virtualenv with the pinned Python cassandra-driver and cqlsh from
# PyPI, and prints its bin directory. Used by check_clients.sh (against cqlsim) and by
# tests/cassandra/readback.sh (against a real node).
#
# Environment: CQLSIM_VENV (virtualenv to create or reuse; default target/cqlsim-venv).
set -euo pipefail

root="$(cd "$(dirname "$0")/../../.." && pwd)"
driver_version=3.30.1
cqlsh_version=6.2.2

target="$(cd "$root" && cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
venv="${CQLSIM_VENV:-$target/cqlsim-venv}"

if ! "$venv/bin/python" -c "import cassandra; assert cassandra.__version__ == '$driver_version'" 2>/dev/null \
    || [ ! -x "$venv/bin/cqlsh" ]; then
    echo "==> virtualenv $venv: cassandra-driver $driver_version, cqlsh $cqlsh_version" >&2
    python3 -m venv "$venv" >&2
    # Pure-Python install: no C toolchain needed, and the driver works the same.
    CASS_DRIVER_NO_EXTENSIONS=1 CASS_DRIVER_NO_CYTHON=1 "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "cassandra-driver==$driver_version" "cqlsh==$cqlsh_version" >&2
fi
echo "$venv/bin"
