#!/usr/bin/env bash
# Builds the production image IMAGE from deploy/docker/Dockerfile with podman, the way CI
# can without an image registry: the binary by the Dockerfile's own scripts
# (build-static.sh, image-root.sh) on the host, given to the Dockerfile's `prebuilt`
# stage; the rust stage is skipped. Installs podman, runc and catatonit (Debian) when
# missing.
# Used by check_image.sh, play_pod.sh and check_multiarch.sh. ARCH (amd64 or arm64)
# defaults to this machine's; another one is cross-compiled (the musl target from rustup,
# linked by rust-lld). Prints the image's architecture last.
set -euo pipefail
image="${1:?usage: build_image.sh IMAGE [ARCH]}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v catatonit >/dev/null; then
    echo "==> install podman, runc and catatonit (Debian)" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends podman runc catatonit >/dev/null
fi
case "$(uname -m)" in
    x86_64) host_arch=amd64 ;;
    aarch64) host_arch=arm64 ;;
    *) echo "no image architecture for $(uname -m)" >&2; exit 1 ;;
esac
arch="${2:-$host_arch}"
case "$arch" in
    amd64) triple=x86_64-unknown-linux-musl ;;
    arm64) triple=aarch64-unknown-linux-musl ;;
    *) echo "no Rust target for the image architecture $arch" >&2; exit 1 ;;
esac
if [ "$arch" != "$host_arch" ]; then
    # Pure Rust (no C in the production build's tree): rust-lld from the toolchain links it.
    linker_var="CARGO_TARGET_$(echo "$triple" | tr 'a-z-' 'A-Z_')_LINKER"
    export "$linker_var=${!linker_var:-rust-lld}"
fi
export COUNTERSINK_TARGET="$triple"
version="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print([p for p in json.load(sys.stdin)["packages"] if p["name"] == "countersink"][0]["version"])')"
target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
mkdir -p "$target/tmp"
work="$(mktemp -d "$target/tmp/build_image.XXXXXX")"
trap 'rm -rf "$work"' EXIT
echo "==> the binary (deploy/docker/build-static.sh) and the image root (image-root.sh)" >&2
deploy/docker/build-static.sh "$work/bin" >&2
deploy/docker/image-root.sh "$work/bin/countersink" "$work/context/$arch"
# The labels: the source is the repository's remote where it has one (Cargo.toml names no
# repository yet), else this checkout.
source_url="$(git config --get remote.origin.url 2>/dev/null || true)"
echo "==> podman build -f deploy/docker/Dockerfile (BINARY_FROM=prebuilt, $arch)" >&2
previous="$(podman --storage-driver vfs image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
# --no-cache: podman 4.3 reused a cached image whose labels held an older revision.
podman --storage-driver vfs build --quiet --no-cache --platform "linux/$arch" --build-arg BINARY_FROM=prebuilt \
    --build-arg VERSION="$version" --build-arg SOURCE_URL="${source_url:-git+file://$root}" \
    --build-arg REVISION="$(git rev-parse HEAD)" \
    -t "$image" -f deploy/docker/Dockerfile "$work/context" >/dev/null
# The image this tag named before and the build stages' untagged images (vfs storage
# copies every layer, some 15 MB each): removed, so reruns do not pile them up.
if [ -n "$previous" ] && [ "$previous" != "$(podman --storage-driver vfs image inspect --format '{{.Id}}' "$image")" ]; then
    podman --storage-driver vfs rmi "$previous" >/dev/null 2>&1 || true
fi
podman --storage-driver vfs image prune -f >/dev/null
echo "$arch"
