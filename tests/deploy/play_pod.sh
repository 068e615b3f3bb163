#!/usr/bin/env bash
# Plays the shipped pod (deploy/kubernetes) with `podman kube play`: countersink's image
# beside an application container (tests/deploy/pod/app.rs, a static binary in a FROM
# scratch image) that sends DogStatsD lines over the Unix datagram socket in the shared
# volume, countersink flushing to a cqlsim on the host. The manifests are changed only where
# podman 4.3 cannot express them or this machine needs it (pod/podify.py prints each change:
# chiefly, the native sidecar becomes an ordinary container). Checks:
#   1. the application's increments are read back exactly from the store;
#   2. the state volume survives a restart of countersink's container: after SIGKILL the
#      pod's restart policy starts it again, on the same writer id, and it reports the
#      unclean stop (countersink_previous_stop_unclean 1) found in that directory;
#   3. with the store down, a stopped countersink spills its rows to the state volume;
#      started again (store back) it replays them once: exact totals, and the same after
#      one more start;
#   4. SIGTERM with the grace period (`podman pod stop -t`, as the kubelet stops a pod;
#      podman 4.3's `kube down` alone kills at once, see below): increments sent just
#      before are in the store after it (the final flush), countersink exits 0 within the
#      grace period; then `podman kube down` removes the pod.
# Needs root (podman with runc, vfs storage; rlimits lowered through a containers.conf).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
passed=0
failed=0
ok() { echo "ok   $*"; passed=$((passed + 1)); }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
finish() {
    echo "play_pod: $passed passed, $failed failed"
    [ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
}
[ "$(id -u)" -eq 0 ] || { fail "needs root (podman with runc)"; finish; exit 1; }

target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
image=registry.example.com/countersink:0.1.0
app_image=localhost/countersink-pod-app:check
increments=5000
late=321
# Scratch space under target/, not /tmp: a /tmp/tmp.* work directory vanished mid-run
# here once (cause not found).
mkdir -p "$target/tmp"
work="$(mktemp -d "$target/tmp/play_pod.XXXXXX")"
# kube play takes no --ulimit: the VM refuses raising rlimits, so every container of the
# pod (its infra container too) gets lowered ones from this file; runc, as crun fails here.
cat >"$work/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[engine]
runtime = "runc"
EOF
export CONTAINERS_CONF="$work/containers.conf"
pm() { podman --storage-driver vfs "$@"; }
pids=()
# podman 4.3 plays each emptyDir, ConfigMap and Secret volume as a volume named after it
# (removed with the pod): removed here too, before and after, should a run be cut short.
volumes=(countersink-sockets countersink-state web-countersink web-countersink-cassandra)
cleanup() {
    [ -f "$work/play.yaml" ] && pm kube down "$work/play.yaml" >/dev/null 2>&1 || true
    pm secret rm web-countersink-cassandra >/dev/null 2>&1 || true
    pm volume rm -f "${volumes[@]}" >/dev/null 2>&1 || true
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

echo "==> the images: countersink (build_image.sh), the application (pod/app.rs, static)"
bash "$here/build_image.sh" "$image" >/dev/null
rustup target list --installed | grep -qx x86_64-unknown-linux-musl || rustup target add x86_64-unknown-linux-musl
mkdir -p "$work/app"
rustc --edition 2021 -O --target "$(uname -m)-unknown-linux-musl" -o "$work/app/app" "$here/pod/app.rs"
pm build --quiet -t "$app_image" -f "$here/pod/Containerfile" "$work/app" >/dev/null
cargo build --quiet --locked -p cqlsim --bin cqlsim
cargo build --quiet --locked --bin countersink

free_port() { python3 -c 'import socket, sys; s = socket.socket(socket.AF_INET, getattr(socket, sys.argv[1])); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' "$1"; }
# cqlsim on a fixed port with a data directory: the store is stopped and started again
# (its snapshot kept) to make countersink spill, then replay.
cql="127.0.0.1:$(free_port SOCK_STREAM)"
start_store() {
    "$target/debug/cqlsim" --listen "$cql" --data-dir "$work/cqlsim-data" >"$work/cqlsim.out" 2>&1 &
    store_pid=$!
    pids+=("$store_pid")
    for _ in $(seq 1 100); do grep -q "^cqlsim listening on $cql\$" "$work/cqlsim.out" && return 0; sleep 0.1; done
    echo "cqlsim did not start on $cql:"; cat "$work/cqlsim.out"; return 1
}
if [ -n "${PLAY_POD_STORE:-}" ]; then
    # A store that is already running (the real Cassandra node of .ci/run's real-node
    # step): this script does not stop it, so the spill phase is left out.
    cql="$PLAY_POD_STORE"
    echo "==> store: $cql (PLAY_POD_STORE)"
else
    mkdir -p "$work/cqlsim-data"
    start_store
fi
"$target/debug/countersink" schema --apply --contact-point "$cql" >/dev/null
# The metric of this run: a real store keeps what earlier runs wrote.
metric_name="pod.app.r$(date +%s)x$$"
metrics="127.0.0.1:$(free_port SOCK_STREAM)"
udp="127.0.0.1:$(free_port SOCK_DGRAM)"

py="$(bash "$here/venv.sh")"
echo "==> the pod podman 4.3 can play, from deploy/kubernetes"
"$py" "$here/pod/podify.py" deploy/kubernetes "$work/play.yaml" "$work/secret.yaml" \
    "$cql" "$metrics" "$udp" "$app_image" "$increments" "$metric_name"
pm volume rm -f "${volumes[@]}" >/dev/null 2>&1 || true
pm secret rm web-countersink-cassandra >/dev/null 2>&1 || true
pm secret create web-countersink-cassandra "$work/secret.yaml" >/dev/null
pm kube play --network host "$work/play.yaml" >"$work/play.out" 2>&1 || { cat "$work/play.out"; fail "podman kube play"; finish; exit 1; }
pod="$(pm pod ps --filter name=web-pod --format '{{.Name}}' | head -1)"
sidecar="$pod-countersink"
app="$pod-app"
ok "podman kube play: pod $pod, containers $(pm ps --filter "pod=$pod" --format '{{.Names}}' | grep -v infra | tr '\n' ' ')"

http_ok() { "$py" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$1" 2>/dev/null; }
metric() { # name: its value on /metrics, empty when not answering
    "$py" -c '
import sys, urllib.request
try:
    text = urllib.request.urlopen(sys.argv[1], timeout=2).read().decode()
except Exception:
    sys.exit(0)
for line in text.splitlines():
    if line.split(" ")[0] == sys.argv[2]:
        print(line.split(" ")[1])' "http://$metrics/metrics" "$1"
}
wait_ready() { for _ in $(seq 1 150); do http_ok "http://$metrics/readyz" && return 0; sleep 0.2; done; return 1; }
if wait_ready; then ok "countersink in the pod: /readyz 200 (store $cql)"; else fail "countersink never ready"; pm logs "$sidecar" 2>&1 | tail -5; fi

read_back() { # expected, what
    local total=""
    for _ in $(seq 1 100); do
        total="$("$target/debug/countersink" get --contact-point "$cql" $metric_name --tag via:pod 2>/dev/null || true)"
        [ "$total" = "$1" ] && break
        sleep 0.2
    done
    [ "$total" = "$1" ] && ok "$2: $metric_name{via:pod} = $total in the store" || { fail "$2: $metric_name{via:pod} = '$total', expected $1"; pm logs "$sidecar" 2>&1 | tail -5; }
}
read_back "$increments" "the application's increments over the shared Unix socket"
pm logs "$app" 2>&1 | grep -q "sent $increments increments of $metric_name to unix:///run/countersink/dsd.sock" \
    && ok "the application sent them to unix:///run/countersink/dsd.sock" || { fail "application log"; pm logs "$app" 2>&1 | tail -3; }

echo "==> countersink's process killed (SIGKILL): its container restarted by the pod on its state volume"
writer="$(pm volume inspect countersink-state --format '{{.Mountpoint}}')/writer_id"
writer_before="$(cat "$writer")"
started_before="$(pm inspect "$sidecar" --format '{{.State.StartedAt}}')"
# From outside, as the OOM killer or a crash would: podman's restart policy does not
# restart a container that `podman kill` or `podman stop` stopped.
kill -KILL "$(pm inspect "$sidecar" --format '{{.State.Pid}}')"
restarted=0
for _ in $(seq 1 150); do
    if [ "$(pm inspect "$sidecar" --format '{{.State.Running}} {{.State.StartedAt}}')" != "true $started_before" ] \
        && [ "$(pm inspect "$sidecar" --format '{{.State.Running}}')" = true ] \
        && [ "$(metric countersink_previous_stop_unclean)" != "" ]; then
        restarted=1; break
    fi
    sleep 0.2
done
[ "$restarted" = 1 ] && ok "restarted by the restart policy ($(pm inspect "$sidecar" --format '{{.RestartCount}}') restart)" || fail "not restarted"
[ "$(cat "$writer")" = "$writer_before" ] && ok "same writer id after the restart: the state volume survived ($writer_before)" || fail "writer id changed: $(cat "$writer")"
[ "$(metric countersink_previous_stop_unclean)" = 1 ] && ok "the restarted countersink reports the unclean stop it found in the volume" \
    || fail "countersink_previous_stop_unclean = '$(metric countersink_previous_stop_unclean)'"
read_back "$increments" "after the restart, nothing counted twice"

spilled=0
if [ -z "${PLAY_POD_STORE:-}" ]; then
echo "==> the store stopped: countersink's container stopped spills, started again it replays once"
spilled=77
kill -TERM "$store_pid"
wait "$store_pid" 2>/dev/null || true
"$target/debug/countersink" send --udp "$udp" "$metric_name:$spilled|c|#via:pod" >/dev/null
sleep 0.5
pm stop -t 60 "$sidecar" >/dev/null
state="$(pm volume inspect countersink-state --format '{{.Mountpoint}}')"
final="$(pm logs "$sidecar" 2>&1 | grep '"Final flush done."' | tail -1)"
segments="$(cd "$state" && ls spill.*.jsonl 2>/dev/null | tr '\n' ' ')"
echo "$final" | grep -q '"spilled":[1-9]' && [ -n "$segments" ] \
    && ok "store down at SIGTERM: the final flush spilled ($(echo "$final" | grep -o '"rows".*"spilled":[0-9]*')) to $segments" \
    || { fail "no spill with the store down: $final; state: $(ls "$state" | tr '\n' ' ')"; pm logs "$sidecar" 2>&1 | tail -5; }
[ "$(pm inspect "$sidecar" --format '{{.State.ExitCode}}')" = 0 ] && ok "countersink exited 0 with its rows spilled" \
    || fail "countersink exit code $(pm inspect "$sidecar" --format '{{.State.ExitCode}}')"
start_store
total="$("$target/debug/countersink" get --contact-point "$cql" $metric_name --tag via:pod 2>/dev/null || true)"
[ "$total" = "$increments" ] && ok "the store restarted from its snapshot without the spilled rows: $total" || fail "store after restart: '$total', expected $increments"
pm start "$sidecar" >/dev/null
wait_ready || fail "countersink not ready after its start"
read_back $((increments + spilled)) "the spill replayed after the container's start"
# Started once more: the replayed spill must not be sent again.
pm stop -t 60 "$sidecar" >/dev/null
pm start "$sidecar" >/dev/null
wait_ready || fail "countersink not ready after its second start"
flushes=""
for _ in $(seq 1 100); do
    flushes="$(metric countersink_flushes_total)"
    [ "${flushes:-0}" -ge 2 ] && break
    sleep 0.2
done
total="$("$target/debug/countersink" get --contact-point "$cql" $metric_name --tag via:pod 2>/dev/null || true)"
[ "$total" = $((increments + spilled)) ] && [ "${flushes:-0}" -ge 2 ] \
    && ok "started again, $flushes flushes later: still $total (the spill replayed once)" \
    || fail "after a second start: '$total' after '$flushes' flushes, expected $((increments + spilled))"
[ -z "$(cd "$state" && ls spill.*.jsonl 2>/dev/null)" ] && ok "no spill segment left in the state volume" \
    || fail "spill segments left: $(cd "$state" && ls spill.*.jsonl | tr '\n' ' ')"
else
    echo "==> spill and replay left out: the store ($cql) is not this script's to stop"
fi

# podman 4.3's `kube down` stops the pod with a zero timeout (SIGTERM, then SIGKILL at
# once: its PodStopOptions{} leave Timeout at 0), which no final flush survives. So the
# pod is stopped first as the kubelet stops it, SIGTERM with the manifest's grace period
# (`podman pod stop -t`), then `kube down` removes it.
grace="$("$py" -c 'import sys, yaml; print([d for d in yaml.safe_load_all(open(sys.argv[1])) if d["kind"] == "Deployment"][0]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"])' deploy/kubernetes/deployment.yaml)"
echo "==> pod stop -t $grace (SIGTERM, the grace period) right after $late more increments, then kube down"
"$target/debug/countersink" send --udp "$udp" "$metric_name:$late|c|#via:pod" >/dev/null
started=$(date +%s.%N)
pm pod stop -t "$grace" "$pod" >/dev/null
took="$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$started" "$(date +%s.%N)")"
python3 -c "import sys; sys.exit(float(sys.argv[1]) >= float(sys.argv[2]))" "$took" "$grace" \
    && ok "the pod stopped in $took s (grace period $grace s)" || fail "the pod took $took s to stop (grace $grace s)"
code="$(pm inspect "$sidecar" --format '{{.State.ExitCode}}')"
[ "$code" = 0 ] && ok "countersink exited 0 on SIGTERM" || fail "countersink exit code $code"
final="$(pm logs "$sidecar" 2>&1 | grep '"Final flush done."' | tail -1)"
echo "$final" | grep -q '"spilled":0' && ok "countersink logged its final flush: $(echo "$final" | grep -o '"rows".*"spilled":[0-9]*')" \
    || { fail "no final flush in countersink's log"; pm logs "$sidecar" 2>&1 | tail -5; }
pm kube down "$work/play.yaml" >/dev/null && ok "podman kube down removed the pod" || fail "podman kube down"
total="$("$target/debug/countersink" get --contact-point "$cql" $metric_name --tag via:pod 2>/dev/null || true)"
[ "$total" = $((increments + spilled + late)) ] && ok "after the stop: $metric_name{via:pod} = $total (the $late sent just before SIGTERM were flushed)" \
    || fail "after the stop: '$total', expected $((increments + spilled + late))"
finish
