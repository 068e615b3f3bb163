#!/usr/bin/env bash
# Validates deploy/kubernetes offline (check_kubernetes.py says what): the schemas come
# from the PyPI package kubernetes-validate, installed at a pinned version into a
# virtualenv; nothing else is fetched.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
version=1.37.0
target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
venv="$target/deploy-venv"
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('kubernetes-validate') != '$version')" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$version"
fi
cargo build --quiet --locked --bin countersink
"$venv/bin/python" "$here/check_kubernetes.py" "$target/debug/countersink"
