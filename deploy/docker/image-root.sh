#!/usr/bin/env bash
# Lays out the file system of the countersink image in OUT_DIR: the binary as /countersink
# and the directories the process uses (config, sockets, state), empty. The Dockerfile
# copies OUT_DIR into a FROM scratch image owned by user 10001. Used by the Dockerfile's
# build stage and by CI (tests/deploy/check_image.sh), so both make the same tree.
set -euo pipefail
binary="${1:?usage: image-root.sh BINARY OUT_DIR}"
out="${2:?usage: image-root.sh BINARY OUT_DIR}"
mkdir -p "$out/etc/countersink" "$out/run/countersink" "$out/var/lib/countersink"
cp "$binary" "$out/countersink"
chmod 0555 "$out/countersink"
