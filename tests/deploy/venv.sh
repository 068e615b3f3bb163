#!/usr/bin/env bash
# Creates (or reuses) the virtualenv of the deployment checks, with the pinned
# kubernetes-validate (which brings PyYAML), and prints its python's path.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
version=1.37.0
target="$(cd "$root" && cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
venv="$target/deploy-venv"
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('kubernetes-validate') != '$version')" 2>/dev/null; then
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$version" >&2
fi
echo "$venv/bin/python"
