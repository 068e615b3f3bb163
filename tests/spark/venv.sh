#!/usr/bin/env bash
# Creates (or reuses) the virtualenv with PySpark 3.5.9 from PyPI (Spark's jars included;
# it runs on the machine's Java 17) and prints its bin directory. Skips the install when
# that version is there already.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
version=3.5.9
target="$(cd "$root" && cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
venv="$target/spark-venv"
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('pyspark') != '$version')" 2>/dev/null; then
    echo "==> virtualenv $venv: pyspark $version" >&2
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check "pyspark==$version" >&2
fi
echo "$venv/bin"
