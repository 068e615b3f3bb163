#!/usr/bin/env bash
# Validates deploy/kubernetes offline (check_kubernetes.py says what): the schemas come
# from the PyPI package kubernetes-validate, installed at a pinned version into a
# virtualenv (venv.sh); nothing else is fetched.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
python="$(bash "$here/venv.sh")"
cargo build --quiet --locked --bin countersink
"$python" "$here/check_kubernetes.py" "$target/debug/countersink"
