#!/usr/bin/env bash
# Builds the production countersink as a static musl binary that a FROM scratch image can
# carry, and copies it to OUT_DIR/countersink. Used by the Dockerfile and by CI
# (tests/deploy/check_static_binary.sh), so both verify the same build.
#
# The production build has no test store: `--no-default-features --features sidecar,otlp`
# leaves out the default feature `dev` (the `dev` command and cqlsim).
set -euo pipefail
out="${1:?usage: build-static.sh OUT_DIR}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
target=x86_64-unknown-linux-musl
rustup target list --installed | grep -qx "$target" || rustup target add "$target"
cd "$root"
# Symbols stay (readable backtraces); the debug info of the release profile goes.
CARGO_PROFILE_RELEASE_STRIP=debuginfo \
    cargo build --release --locked --target "$target" --no-default-features --features sidecar,otlp --bin countersink
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
mkdir -p "$out"
cp "$target_dir/$target/release/countersink" "$out/countersink"
