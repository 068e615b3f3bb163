#!/usr/bin/env bash
# Checks the Helm chart deploy/helm/countersink offline:
#   1. `helm lint` (strict) with each value set of tests/deploy/helm/*.yaml;
#   2. `helm template` with each value set, and of tests/deploy/helm/parent (an
#      application chart that adds the sidecar to its own Deployment through the chart's
#      named templates); every rendered manifest goes through check_kubernetes.py: the
#      Kubernetes OpenAPI schemas (strict), the rendered countersink.toml accepted by
#      `countersink schema --config`, and the pod agreeing with it (sockets, probes,
#      Secret, grace period, memory for max_pending_bytes, state volume for the bounds);
#   3. value sets that must not render (a username without a password, a config without
#      the bound the chart sizes memory from) fail with their message.
# Helm is built from the Go module proxy (helm.sh/helm/v4, go install) into
# target/helm/bin and reused from there (the first run took 159 s here); it needs Go
# 1.26 or later (helm's go.mod), which this machine kind has in /usr/local/go.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
helm_version=v4.3.2
target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
cache="$target/helm"
helm="$cache/bin/helm"
if [ ! -x "$helm" ] || [ "$(cat "$cache/bin/version" 2>/dev/null)" != "$helm_version" ]; then
    # helm v4.3.2's go.mod says go 1.26.0; Debian 12's golang-go is 1.19, too old to build it.
    go_minor="$(go env GOVERSION 2>/dev/null | sed -n 's/^go1\.\([0-9]*\).*/\1/p')"
    if [ "${go_minor:-0}" -lt 26 ]; then
        echo "FAIL building helm $helm_version needs Go 1.26 or later on the PATH (found: $(go env GOVERSION 2>/dev/null || echo none));"
        echo "     Debian's golang-go is 1.19. Install Go 1.26, or put a helm $helm_version binary at $helm"
        exit 1
    fi
    echo "==> build helm $helm_version from the Go module proxy (once; cached in $cache)"
    mkdir -p "$cache"
    GOBIN="$cache/bin" GOPATH="$cache/gopath" GOCACHE="$cache/gocache" GOFLAGS=-mod=mod \
        go install "helm.sh/helm/v4/cmd/helm@$helm_version"
    echo "$helm_version" >"$cache/bin/version"
    # Only the binary is kept: the module and build caches take some 2 GB.
    GOPATH="$cache/gopath" GOFLAGS=-mod=mod go clean -modcache
    rm -rf "$cache/gopath" "$cache/gocache"
fi
"$helm" version
cargo build --quiet --locked --bin countersink
python="$(bash "$here/venv.sh")"
# Scratch space under target/, not /tmp: a /tmp/tmp.* work directory vanished mid-run
# here once (cause not found).
mkdir -p "$target/tmp"
work="$(mktemp -d "$target/tmp/check_helm.XXXXXX")"
trap 'rm -rf "$work"' EXIT
chart=deploy/helm/countersink
failed=0

for values in tests/deploy/helm/*.yaml; do
    name="$(basename "$values" .yaml)"
    echo "==> value set $name"
    "$helm" lint --strict "$chart" -f "$values" || { echo "FAIL helm lint with $values"; failed=$((failed + 1)); continue; }
    "$helm" template "$name" "$chart" -f "$values" >"$work/$name.yaml" || { echo "FAIL helm template with $values"; failed=$((failed + 1)); continue; }
    "$python" "$here/check_kubernetes.py" "$target/debug/countersink" "$work/$name.yaml" || failed=$((failed + 1))
done

echo "==> an application chart including the sidecar (tests/deploy/helm/parent)"
cp -r tests/deploy/helm/parent "$work/parent"
mkdir -p "$work/parent/charts"
cp -r "$chart" "$work/parent/charts/countersink"
"$helm" lint --strict "$work/parent" || { echo "FAIL helm lint of the parent chart"; failed=$((failed + 1)); }
if "$helm" template shop "$work/parent" >"$work/parent.yaml"; then
    "$python" "$here/check_kubernetes.py" "$target/debug/countersink" "$work/parent.yaml" || failed=$((failed + 1))
else
    echo "FAIL helm template of the parent chart"; failed=$((failed + 1))
fi

echo "==> value sets that must not render"
must_fail() { # message, helm arguments...
    local message="$1"; shift
    if "$helm" template bad "$chart" "$@" >/dev/null 2>"$work/err"; then
        echo "FAIL rendered without an error: $*"; failed=$((failed + 1))
    elif grep -q "$message" "$work/err"; then
        echo "ok   refused ($*): $(grep -o "$message.*" "$work/err" | head -1)"
    else
        echo "FAIL refused for another reason ($*): $(cat "$work/err")"; failed=$((failed + 1))
    fi
}
must_fail "store.password (or store.existingSecret) is required" --set store.username=countersink
must_fail "config.limits.max_pending_bytes must be set" --set store.password=x --set config.limits=null

echo "check_helm: $failed failed"
[ "$failed" -eq 0 ]
