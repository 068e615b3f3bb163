#!/usr/bin/env bash
# Builds the production image from deploy/docker/Dockerfile with podman and checks it:
#   1. `podman image inspect`: user 10001 (not root), OCI labels (version = the crate's,
#      licence, source, revision), entrypoint; the size is printed and bounded;
#   2. its files (`podman export`): exactly the binary and three empty directories, so no
#      shell and nothing else;
#   3. `countersink --version` in a container;
#   4. `serve` in a container with a read-only root file system, the ConfigMap's
#      configuration mounted, the socket and state directories as volumes, host network,
#      flushing to a cqlsim on the host: /readyz 200, lines sent to its Unix datagram
#      socket and over UDP are read back exactly from the store, `podman stop` (SIGTERM)
#      exits 0 and the state directory holds what the run wrote.
# No image registry is reachable here: build_image.sh builds the binary on the host with
# the Dockerfile's own scripts and gives it to the Dockerfile's `prebuilt` stage.
# Needs root (podman with runc, as this machine kind allows: vfs storage, lowered rlimits).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
passed=0
failed=0
ok() { echo "ok   $*"; passed=$((passed + 1)); }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
finish() {
    echo "check_image: $passed passed, $failed failed"
    [ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
}
[ "$(id -u)" -eq 0 ] || { fail "needs root (podman with runc)"; finish; exit 1; }

# vfs: no overlay in this VM; runc: crun fails here; the VM refuses raising rlimits, so
# every container gets lowered ones.
pm() { podman --storage-driver vfs --runtime runc "$@"; }
limits=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)

target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
version="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print([p for p in json.load(sys.stdin)["packages"] if p["name"] == "countersink"][0]["version"])')"
image="localhost/countersink:$version-check"
container="countersink-image-check-$$"
# Scratch space under target/, not /tmp: a /tmp/tmp.* work directory vanished mid-run
# here once (cause not found).
mkdir -p "$target/tmp"
work="$(mktemp -d "$target/tmp/check_image.XXXXXX")"
pids=()
cleanup() {
    pm rm -f -t 0 "$container" >/dev/null 2>&1 || true
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

started=$(date +%s)
arch="$(bash "$here/build_image.sh" "$image")"
ok "built $image ($arch) in $(($(date +%s) - started)) s"
binary_size="$(du -h "$target/$(uname -m)-unknown-linux-musl/release/countersink" | cut -f1)"

inspect() { pm image inspect --format "$1" "$image"; }
user="$(inspect '{{.Config.User}}')"
case "$user" in
    10001:10001) ok "runs as user $user (not root)" ;;
    *) fail "image user '$user', expected 10001:10001" ;;
esac
for label in version licenses source revision title; do
    value="$(inspect "{{index .Labels \"org.opencontainers.image.$label\"}}")"
    [ -n "$value" ] && [ "$value" != "<no value>" ] && ok "label org.opencontainers.image.$label=$value" \
        || fail "label org.opencontainers.image.$label missing"
done
[ "$(inspect '{{index .Labels "org.opencontainers.image.version"}}')" = "$version" ] \
    && ok "version label is the crate's ($version)" || fail "version label is not $version"
[ "$(inspect '{{index .Labels "org.opencontainers.image.revision"}}')" = "$(git rev-parse HEAD)" ] \
    && ok "revision label is this checkout's commit" || fail "revision label is not $(git rev-parse HEAD)"
[ "$(inspect '{{index .Labels "org.opencontainers.image.licenses"}}')" = "Apache-2.0" ] \
    && ok "licence label matches Cargo.toml (Apache-2.0)" || fail "licence label is not Apache-2.0"
entrypoint="$(inspect '{{json .Config.Entrypoint}} {{json .Config.Cmd}}')"
[ "$entrypoint" = '["/countersink"] ["serve","--config","/etc/countersink/countersink.toml"]' ] \
    && ok "entrypoint and command: $entrypoint" || fail "entrypoint and command: $entrypoint"
size="$(inspect '{{.Size}}')"
size_mib="$(awk -v b="$size" 'BEGIN { printf "%.1f", b / 1048576 }')"
echo "image size: $size bytes ($size_mib MiB; the binary alone $binary_size)"
[ "$size" -lt $((32 * 1048576)) ] && ok "image size $size_mib MiB (< 32 MiB)" || fail "image size $size_mib MiB (>= 32 MiB)"

# Every file of the image, with owner and mode.
pm create --name "$container" "$image" >/dev/null
pm export "$container" | tar -tvf - --numeric-owner >"$work/files"
pm rm "$container" >/dev/null
listing="$(awk '{print $1, $2, $NF}' "$work/files" | sed 's#\(^\| \)\./#\1#; s#/$##' | sort -k3)"
expected="-r-xr-xr-x 10001/10001 countersink
drwxr-xr-x 10001/10001 etc
drwxr-xr-x 10001/10001 etc/countersink
drwxr-xr-x 10001/10001 run
drwxr-xr-x 10001/10001 run/countersink
drwxr-xr-x 10001/10001 var
drwxr-xr-x 10001/10001 var/lib
drwxr-xr-x 10001/10001 var/lib/countersink"
[ "$listing" = "$expected" ] && ok "image files: only /countersink (0555) and the config, socket and state directories, owned by 10001" \
    || { fail "image files differ:"; echo "$listing"; }
executables="$(echo "$listing" | awk '$1 ~ /^-..x/ {print $3}')"
[ "$executables" = countersink ] && ok "the one executable is /countersink: no shell" || fail "executables: $executables"
if echo "$listing" | grep -Eq '(^| |/)(sh|bash|dash|ash|busybox)$'; then fail "a shell is in the image"; else ok "no sh, bash, dash, ash or busybox"; fi

run_version="$(pm run --rm "${limits[@]}" --read-only "$image" --version)"
[ "$run_version" = "countersink $version" ] && ok "podman run $image --version: $run_version" || fail "--version: '$run_version'"

echo "==> serve in the image, read-only root, flushing to cqlsim on the host"
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
# The pod's mounts: the ConfigMap's config and the Secret's password (read-only), the
# socket and state directories (writable by 10001).
mkdir -p "$work/config/secret" "$work/run" "$work/state"
"$(bash "$here/venv.sh")" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["data"]["countersink.toml"], end="")' \
    deploy/kubernetes/configmap.yaml >"$work/config/countersink.toml"
printf 'replace-me' >"$work/config/secret/password"
chmod 0440 "$work/config/secret/password"
chgrp 10001 "$work/config/secret/password"
chown 10001:10001 "$work/run" "$work/state"
free_port() { python3 -c 'import socket, sys; s = socket.socket(socket.AF_INET, getattr(socket, sys.argv[1])); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' "$1"; }
http_status() { python3 -c '
import sys, urllib.request, urllib.error
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=2).status)
except urllib.error.HTTPError as e:
    print(e.code)
except OSError:
    print(0)' "$1"; }
metrics="127.0.0.1:$(free_port SOCK_STREAM)"
udp="127.0.0.1:$(free_port SOCK_DGRAM)"
# cqlsim's one node is in datacenter1; the ConfigMap names the production DC.
pm run -d --name "$container" "${limits[@]}" --read-only --network host \
    -v "$work/config:/etc/countersink:ro" -v "$work/run:/run/countersink" -v "$work/state:/var/lib/countersink" \
    -e COUNTERSINK_CONTACT_POINTS="$cql" -e COUNTERSINK_LOCAL_DC=datacenter1 \
    -e COUNTERSINK_METRICS="$metrics" -e COUNTERSINK_UDP="$udp" "$image" >/dev/null
[ "$(pm inspect --format '{{.HostConfig.ReadonlyRootfs}}' "$container")" = true ] && ok "container root file system is read-only" || fail "root file system writable"
ready=0
for _ in $(seq 1 150); do [ "$(http_status "http://$metrics/readyz")" = 200 ] && { ready=1; break; }; sleep 0.1; done
[ "$ready" = 1 ] && ok "store on $cql: /readyz 200" || { fail "/readyz never 200"; pm logs "$container" 2>&1 | tail -5; }
"$target/debug/countersink" send --uds "$work/run/dsd.sock" 'image.check:7|c|#via:uds' 'image.check:5|c|#via:uds' >/dev/null
"$target/debug/countersink" send --udp "$udp" 'image.check:3:4|c|#via:udp' >/dev/null
read_back() { # tag expected
    local total=""
    for _ in $(seq 1 100); do
        total="$("$target/debug/countersink" get --contact-point "$cql" image.check --tag "$1" 2>/dev/null || true)"
        [ "$total" = "$2" ] && break
        sleep 0.2
    done
    [ "$total" = "$2" ] && ok "image.check{$1} read back from the store: $total" || fail "image.check{$1}: '$total', expected $2"
}
read_back via:uds 12
read_back via:udp 7
started=$(date +%s)
pm stop -t 30 "$container" >/dev/null
code="$(pm inspect --format '{{.State.ExitCode}}' "$container")"
[ "$code" = 0 ] && ok "podman stop (SIGTERM): exit 0 after $(($(date +%s) - started)) s" || { fail "exit code $code"; pm logs "$container" 2>&1 | tail -5; }
[ ! -e "$work/run/dsd.sock" ] && ok "the socket file was removed on shutdown" || fail "socket file left behind"
[ -s "$work/state/writer_id" ] && ok "state written to the volume: $(ls "$work/state" | tr '\n' ' ')" || fail "no state in the volume"
pm rm "$container" >/dev/null

echo "image $image: $size_mib MiB, $arch"
finish
