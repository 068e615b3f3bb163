#!/usr/bin/env bash
# The image for two architectures, x86_64 (amd64) and aarch64 (arm64), in one manifest
# list. build_image.sh builds each from deploy/docker/Dockerfile (the aarch64 binary
# cross-compiled: rustup's aarch64-unknown-linux-musl target, linked by rust-lld). Checks:
#   1. each image says its architecture (`podman image inspect`);
#   2. the binary inside the arm64 image is a static AArch64 executable, and run under
#      Debian's qemu-user-static it prints its version, and `serve` flushes a line sent
#      over UDP into a cqlsim on the host, read back exactly, then exits 0 on SIGTERM;
#   3. `podman manifest create/add`: one list naming linux/amd64 and linux/arm64 (removed
#      at the end; `podman manifest push --all` would send it to a registry).
# The arm64 image itself is not run: that needs qemu registered in the kernel's
# binfmt_misc, a machine-wide setting this check leaves alone. Needs root (podman).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
passed=0
failed=0
ok() { echo "ok   $*"; passed=$((passed + 1)); }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
finish() {
    echo "check_multiarch: $passed passed, $failed failed"
    [ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
}
[ "$(id -u)" -eq 0 ] || { fail "needs root (podman)"; finish; exit 1; }
if ! command -v qemu-aarch64-static >/dev/null; then
    echo "==> install qemu-user-static (Debian)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-user-static >/dev/null
fi
pm() { podman --storage-driver vfs --runtime runc "$@"; }
target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
version="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print([p for p in json.load(sys.stdin)["packages"] if p["name"] == "countersink"][0]["version"])')"
list="localhost/countersink:$version-multiarch"
# Scratch space under target/, not /tmp: a /tmp/tmp.* work directory vanished mid-run
# here once (cause not found).
mkdir -p "$target/tmp"
work="$(mktemp -d "$target/tmp/check_multiarch.XXXXXX")"
pids=()
cleanup() {
    pm rm -f "countersink-multiarch-$$" >/dev/null 2>&1 || true
    # The list names its images by digest: left behind, a later rebuild or prune of them
    # would leave it dangling (and `podman images` failing on it).
    pm manifest rm "$list" >/dev/null 2>&1 || true
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

for arch in amd64 arm64; do
    started=$(date +%s)
    bash "$here/build_image.sh" "$list-$arch" "$arch" >/dev/null
    said="$(pm image inspect --format '{{.Os}}/{{.Architecture}}' "$list-$arch")"
    [ "$said" = "linux/$arch" ] && ok "$list-$arch built in $(($(date +%s) - started)) s: $said, $(pm image inspect --format '{{.Size}}' "$list-$arch") bytes" \
        || fail "$list-$arch says $said"
done

pm create --name "countersink-multiarch-$$" "$list-arm64" >/dev/null
pm export "countersink-multiarch-$$" | tar -xOf - countersink >"$work/countersink-arm64"
pm rm "countersink-multiarch-$$" >/dev/null
chmod +x "$work/countersink-arm64"
machine="$(readelf -h "$work/countersink-arm64" | sed -n 's/^ *Machine: *//p')"
[ "$machine" = AArch64 ] && ok "the arm64 image's /countersink is an $machine executable" || fail "machine '$machine'"
if readelf -l "$work/countersink-arm64" | grep -q INTERP || readelf -d "$work/countersink-arm64" 2>/dev/null | grep -q NEEDED; then
    fail "the aarch64 binary links dynamically"
else
    ok "static: no program interpreter, no shared library"
fi
said="$(qemu-aarch64-static "$work/countersink-arm64" --version)"
[ "$said" = "countersink $version" ] && ok "under qemu-aarch64-static: $said" || fail "--version under qemu: '$said'"

echo "==> the aarch64 binary under qemu serving, flushing to cqlsim"
cargo build --quiet --locked -p cqlsim --bin cqlsim
cargo build --quiet --locked --bin countersink
"$target/debug/cqlsim" --listen 127.0.0.1:0 >"$work/cqlsim.out" 2>/dev/null &
pids+=("$!")
cql=""
for _ in $(seq 1 100); do
    cql="$(sed -n 's/^cqlsim listening on \(127\.0\.0\.1:[0-9]*\)$/\1/p' "$work/cqlsim.out")"
    [ -n "$cql" ] && break
    sleep 0.1
done
"$target/debug/countersink" schema --apply --contact-point "$cql" >/dev/null
free_port() { python3 -c 'import socket, sys; s = socket.socket(socket.AF_INET, getattr(socket, sys.argv[1])); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' "$1"; }
metrics="127.0.0.1:$(free_port SOCK_STREAM)"
udp="127.0.0.1:$(free_port SOCK_DGRAM)"
qemu-aarch64-static "$work/countersink-arm64" serve --udp "$udp" --metrics "$metrics" --contact-point "$cql" \
    --local-dc datacenter1 --state-dir "$work/state" --flush-interval 1s >"$work/serve.out" 2>"$work/serve.err" &
serve_pid=$!
pids+=("$serve_pid")
ready=0
for _ in $(seq 1 300); do
    python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "http://$metrics/readyz" 2>/dev/null && { ready=1; break; }
    sleep 0.1
done
[ "$ready" = 1 ] && ok "aarch64 serve ready (store $cql)" || { fail "aarch64 serve never ready"; tail -5 "$work/serve.err"; }
"$target/debug/countersink" send --udp "$udp" 'arch.check:40|c|#arch:arm64' 'arch.check:2|c|#arch:arm64' >/dev/null
total=""
for _ in $(seq 1 100); do
    total="$("$target/debug/countersink" get --contact-point "$cql" arch.check --tag arch:arm64 2>/dev/null || true)"
    [ "$total" = 42 ] && break
    sleep 0.2
done
[ "$total" = 42 ] && ok "lines sent to the aarch64 sidecar read back from the store: $total" || fail "read back '$total', expected 42"
kill -TERM "$serve_pid"
code=0
wait "$serve_pid" || code=$?
[ "$code" = 0 ] && ok "aarch64 serve: SIGTERM, exit 0" || { fail "aarch64 serve exit $code"; tail -5 "$work/serve.err"; }

echo "==> one manifest list"
pm manifest rm "$list" >/dev/null 2>&1 || true
pm manifest create "$list" >/dev/null
for arch in amd64 arm64; do
    pm manifest add "$list" "containers-storage:$list-$arch" >/dev/null
done
platforms="$(pm manifest inspect "$list" | python3 -c 'import json, sys; print(" ".join(sorted(m["platform"]["os"] + "/" + m["platform"]["architecture"] for m in json.load(sys.stdin)["manifests"])))')"
[ "$platforms" = "linux/amd64 linux/arm64" ] && ok "manifest list $list: $platforms" || fail "manifest list platforms: '$platforms'"
finish
