#!/usr/bin/env bash
# Builds the production countersink as a static musl binary that a FROM scratch image can
# carry, and copies it to OUT_DIR/countersink. Used by the Dockerfile and by CI
# (tests/deploy/check_static_binary.sh), so both verify the same build.
#
# The production build has no test store: `--no-default-features --features sidecar,otlp`
# leaves out the default feature `dev` (the `dev` command and cqlsim).
# The target is the machine's own architecture with musl (x86_64 or aarch64), or
# COUNTERSINK_TARGET (for example aarch64-unknown-linux-musl on an x86_64 host, with a
# linker for it set through CARGO_TARGET_<TRIPLE>_LINKER).
set -euo pipefail
out="${1:?usage: build-static.sh OUT_DIR}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
target="${COUNTERSINK_TARGET:-$(uname -m)-unknown-linux-musl}"
rustup target list --installed | grep -qx "$target" || rustup target add "$target"
cd "$root"
# Symbols stay (readable backtraces); the debug info of the release profile goes.
CARGO_PROFILE_RELEASE_STRIP=debuginfo \
    cargo build --release --locked --target "$target" --no-default-features --features sidecar,otlp --bin countersink
# No python3 here: the rust image of the Dockerfile's build stage may lack it.
target_dir="$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
mkdir -p "$out"
cp "$target_dir/$target/release/countersink" "$out/countersink"
