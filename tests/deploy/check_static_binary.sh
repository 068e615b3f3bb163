#!/usr/bin/env bash
# Verifies the production binary of deploy/docker/Dockerfile without a container engine:
# builds it with the Dockerfile's own script (static musl, no test store), checks that it
# links nothing dynamically, then runs it the way a FROM scratch image would, chrooted
# into a directory holding only the binary and the pod's mounts (the ConfigMap's config,
# the Secret's password file, the socket and state directories), as user 10001, with a
# read-only root:
#   1. `countersink --version` prints the crate's version;
#   2. `serve` with the ConfigMap's contact point (a cluster DNS name that does not resolve
#      here) starts: /healthz 200, /readyz 503, sockets created with mode 0660; SIGTERM
#      exits 0;
#   3. `serve` against a cqlsim on loopback: /readyz 200, a line sent to the Unix socket
#      is read back from the store by `countersink get`; SIGTERM exits 0.
# What it cannot verify: the image build itself (FROM rust:..., COPY, USER) and the
# container runtime's own mounts. Needs root (chroot, mount namespace), as in CI.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
passed=0
failed=0
ok() { echo "ok   $*"; passed=$((passed + 1)); }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
finish() {
    echo "check_static_binary: $passed passed, $failed failed"
    [ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
}

[ "$(id -u)" -eq 0 ] || { fail "needs root (chroot, mount namespace)"; finish; exit 1; }
target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
work="$(mktemp -d)"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

echo "==> build (deploy/docker/build-static.sh)"
deploy/docker/build-static.sh "$work/out"
binary="$work/out/countersink"
cargo build --quiet --locked -p cqlsim --bin cqlsim
cargo build --quiet --locked --bin countersink

if readelf -l "$binary" | grep -q "INTERP" || readelf -d "$binary" 2>/dev/null | grep -q "(NEEDED)"; then
    fail "the binary links dynamically: $(readelf -d "$binary" | grep NEEDED | tr -s ' ')"
else
    ok "static: no program interpreter, no shared library needed ($(du -h "$binary" | cut -f1))"
fi
# The production build carries no test store: `dev` must be an unknown command there.
if "$binary" dev --help >/dev/null 2>&1; then
    fail "the production binary still has the dev command (and the embedded cqlsim)"
else
    ok "no dev command and no embedded test store"
fi

# The image's file system: the binary, and what the pod mounts (deploy/kubernetes).
rootfs="$work/rootfs"
mkdir -p "$rootfs/etc/countersink/secret" "$rootfs/run/countersink" "$rootfs/var/lib/countersink"
cp "$binary" "$rootfs/countersink"
"$(bash "$here/venv.sh")" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["data"]["countersink.toml"], end="")' \
    deploy/kubernetes/configmap.yaml > "$rootfs/etc/countersink/countersink.toml"
printf 'replace-me' > "$rootfs/etc/countersink/secret/password"
chown -R 10001:10001 "$rootfs/run/countersink" "$rootfs/var/lib/countersink"
chmod 0440 "$rootfs/etc/countersink/secret/password"
chgrp 10001 "$rootfs/etc/countersink/secret/password"
echo "==> image root: $(cd "$rootfs" && find . -mindepth 1 | sort | tr '\n' ' ')"

# Runs the chrooted binary as 10001:10001 in a private mount namespace where the root is
# read-only and only the socket and state directories are writable. It execs: call it in
# a subshell, whose process becomes countersink's.
in_image() {
    trap - EXIT
    exec unshare --mount --propagation private -- sh -c '
        set -e
        rootfs="$1"; shift
        mount --bind "$rootfs" "$rootfs"
        mount --bind "$rootfs/run/countersink" "$rootfs/run/countersink"
        mount --bind "$rootfs/var/lib/countersink" "$rootfs/var/lib/countersink"
        mount -o remount,bind,ro "$rootfs"
        exec chroot --userspec=10001:10001 "$rootfs" "$@"
    ' in_image "$rootfs" "$@"
}

free_port() { python3 -c 'import socket, sys; s = socket.socket(socket.AF_INET, getattr(socket, sys.argv[1])); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' "$1"; }
http_status() { python3 -c '
import sys, urllib.request, urllib.error
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=2).status)
except urllib.error.HTTPError as e:
    print(e.code)
except OSError:
    print(0)' "$1"; }
wait_status() { # url status
    for _ in $(seq 1 100); do [ "$(http_status "$1")" = "$2" ] && return 0; sleep 0.1; done
    return 1
}

version="$(in_image /countersink --version)"
expected="countersink $(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print([p for p in json.load(sys.stdin)["packages"] if p["name"] == "countersink"][0]["version"])')"
[ "$version" = "$expected" ] && ok "countersink --version in the image root: $version" || fail "--version: '$version', expected '$expected'"

start_serve() { # contact point and local DC (empty: the ConfigMap's); sets serve_pid, metrics, udp
    metrics="127.0.0.1:$(free_port SOCK_STREAM)"
    udp="127.0.0.1:$(free_port SOCK_DGRAM)"
    (
        trap - EXIT
        export COUNTERSINK_METRICS="$metrics" COUNTERSINK_UDP="$udp"
        [ -z "$1" ] || export COUNTERSINK_CONTACT_POINTS="$1" COUNTERSINK_LOCAL_DC="$2"
        in_image /countersink serve --config /etc/countersink/countersink.toml
    ) >"$work/serve.out" 2>"$work/serve.err" &
    serve_pid=$!
    pids+=("$serve_pid")
}
stop_serve() {
    kill -TERM "$serve_pid" 2>/dev/null || true
    local code=0
    wait "$serve_pid" || code=$?
    [ "$code" -eq 0 ] && ok "$1: SIGTERM, clean exit" || { fail "$1: exit $code"; tail -5 "$work/serve.err"; }
}
echo "==> serve with the ConfigMap's contact point (not resolvable here)"
start_serve "" ""
if wait_status "http://$metrics/healthz" 200; then ok "unreachable store: /healthz 200"; else fail "unreachable store: /healthz"; tail -5 "$work/serve.err"; fi
[ "$(http_status "http://$metrics/readyz")" = 503 ] && ok "unreachable store: /readyz 503" || fail "unreachable store: /readyz $(http_status "http://$metrics/readyz")"
for sock in dsd.sock dsd-stream.sock; do
    mode="$(stat -c '%a %u:%g %F' "$rootfs/run/countersink/$sock" 2>/dev/null || echo missing)"
    [ "$mode" = "660 10001:10001 socket" ] && ok "/run/countersink/$sock: $mode" || fail "/run/countersink/$sock: $mode"
done
stop_serve "unreachable store"

echo "==> serve against cqlsim on loopback"
"$target/debug/cqlsim" --listen 127.0.0.1:0 >"$work/cqlsim.out" 2>/dev/null &
pids+=("$!")
cql=""
for _ in $(seq 1 100); do
    cql="$(sed -n 's/^cqlsim listening on \(127\.0\.0\.1:[0-9]*\)$/\1/p' "$work/cqlsim.out")"
    [ -n "$cql" ] && break
    sleep 0.1
done
"$target/debug/countersink" schema --apply --contact-point "$cql" >/dev/null
# cqlsim's one node is in datacenter1; the ConfigMap names the production DC.
start_serve "$cql" datacenter1
if wait_status "http://$metrics/readyz" 200; then ok "store on $cql: /readyz 200"; else fail "store on $cql: /readyz"; tail -5 "$work/serve.err"; fi
"$target/debug/countersink" send --uds "$rootfs/run/countersink/dsd.sock" 'image.check:7|c|#via:scratch' 'image.check:5|c|#via:scratch' >/dev/null
total=""
for _ in $(seq 1 100); do
    total="$("$target/debug/countersink" get --contact-point "$cql" image.check --tag via:scratch 2>/dev/null || true)"
    [ "$total" = 12 ] && break
    sleep 0.2
done
[ "$total" = 12 ] && ok "a line sent to the image's Unix socket is in the day table: $total" || { fail "read back '$total', expected 12"; tail -5 "$work/serve.err"; }
stop_serve "store reachable"
[ -s "$rootfs/var/lib/countersink/writer_id" ] && ok "state written to /var/lib/countersink: $(ls "$rootfs/var/lib/countersink" | tr '\n' ' ')" \
    || fail "no state in /var/lib/countersink"

finish
