#!/usr/bin/env bash
# Checks that the Python cassandra-driver and cqlsh, installed from PyPI into a virtualenv,
# work against the cqlsim binary: connect (with the drivers' protocol negotiation), create a
# counter table, increment, read back, and get Cassandra's errors for counter-rule violations.
# Builds and starts cqlsim on a free port, stops it cleanly, exits non-zero on any failure.
#
# The virtualenv comes from venv.sh (environment: CQLSIM_VENV).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
target="$(cd "$root" && cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
bin="$(bash "$here/venv.sh")"

(cd "$root" && cargo build --quiet --locked -p cqlsim --bin cqlsim)
work="$(mktemp -d)"
"$target/debug/cqlsim" --listen 127.0.0.1:0 >"$work/out" 2>"$work/err" &
pid=$!
cleanup() {
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

port=""
for _ in $(seq 1 100); do
    port="$(sed -n 's/^cqlsim listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$work/out")"
    [ -n "$port" ] && break
    sleep 0.1
done
if [ -z "$port" ]; then
    echo "cqlsim did not start:"; cat "$work/err"; exit 1
fi
grep -q "not for production" "$work/err" || { echo "banner missing"; exit 1; }
echo "==> cqlsim on port $port"

failed=0
echo "==> Python cassandra-driver"
"$bin/python" "$here/check_clients.py" 127.0.0.1 "$port" || failed=$((failed + 1))

echo "==> cqlsh"
cqlsh=("$bin/cqlsh" 127.0.0.1 "$port" --connect-timeout 10 --request-timeout 10)
out="$("${cqlsh[@]}" -e "CREATE KEYSPACE IF NOT EXISTS shks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1};
CREATE TABLE IF NOT EXISTS shks.c (pk text PRIMARY KEY, n counter);
UPDATE shks.c SET n = n + 10 WHERE pk = 'a';
update shks.c set n = n -3 where pk = 'a';
SELECT pk, n FROM shks.c WHERE pk = 'a';" 2>&1)" || { echo "$out"; failed=$((failed + 1)); }
if echo "$out" | grep -Eq "^ +a \| +7$"; then echo "ok   cqlsh read back a = 7"; else echo "FAIL cqlsh output:"; echo "$out"; failed=$((failed + 1)); fi

expect_error() { # cql, expected message
    local msg
    if msg="$("${cqlsh[@]}" -e "$1" 2>&1)"; then
        echo "FAIL cqlsh accepted: $1"; failed=$((failed + 1))
    elif echo "$msg" | grep -qF "$2"; then
        echo "ok   cqlsh refused: $1"
    else
        echo "FAIL cqlsh error for $1:"; echo "$msg"; failed=$((failed + 1))
    fi
}
expect_error "INSERT INTO shks.c (pk, n) VALUES ('z', 1);" "INSERT statements are not allowed on counter tables, use UPDATE instead"
expect_error "UPDATE shks.c USING TTL 10 SET n = n + 1 WHERE pk = 'z';" "Cannot provide custom TTL for counter updates"

kill -TERM "$pid"
if wait "$pid"; then echo "ok   cqlsim stopped cleanly"; else echo "FAIL cqlsim exit status $?"; failed=$((failed + 1)); fi
trap 'rm -rf "$work"' EXIT

echo "check_clients: $((failed == 0 ? 1 : 0)) passed, $((failed == 0 ? 0 : 1)) failed"
[ "$failed" -eq 0 ]
