#!/usr/bin/env bash
# Ingest benchmark: countersink against a raw receive loop and peer StatsD servers
# (Etsy statsd, netdata, collectd), side by side in one run. Not part of `cargo test`.
#
#   bash tests/bench/peers/run.sh                      # everything, 5 repetitions
#   bash tests/bench/peers/run.sh --reps 1 --targets raw,countersink --scenarios udp1
#
# Extra arguments go to driver.py (see `python3 tests/bench/peers/driver.py --help`).
# Needs root (apt, sysctl, SO_RCVBUFFORCE), 2+ CPUs, taskset, python3, node/npm.
#
# What it does to the machine:
# - installs Etsy statsd 0.9.0 from npm under $PEERS_DIR (default /tmp/peers), and the Debian
#   packages collectd-core and netdata-core (their services are kept from starting with a
#   temporary /usr/sbin/policy-rc.d, removed again if this script created it);
# - sets net.unix.max_dgram_qlen to $UDS_QLEN (default 512) for the whole run, because the
#   default of 10 makes a Unix datagram receiver's queue overflow after 10 datagrams, and
#   restores the previous value on exit (also on Ctrl-C). No other sysctl is changed;
#   countersink and the raw loop get their 8 MiB receive buffers with SO_RCVBUFFORCE.
# Results: $OUT (default target/peers-bench/) results.jsonl (every step) and summary-RUN.md.
set -euo pipefail
cd "$(dirname "$0")/../../.."
REPO=$(pwd)
PEERS_DIR=${PEERS_DIR:-/tmp/peers}
OUT=${OUT:-$REPO/target/peers-bench}
UDS_QLEN=${UDS_QLEN:-512}

step() { printf '\n==> %s\n' "$*" >&2; }

if [ "$(id -u)" != 0 ]; then
    echo "run as root (apt-get, sysctl, SO_RCVBUFFORCE)" >&2
    exit 1
fi
if [ "$(nproc)" -lt 2 ]; then
    echo "needs 2 CPUs: the receiver runs on CPU 0, the sender on CPU 1" >&2
    exit 1
fi

step "peers"
if [ ! -f "$PEERS_DIR/etsy/node_modules/statsd/stats.js" ]; then
    mkdir -p "$PEERS_DIR/etsy"
    # 11 packages; the optional modern-syslog native build is skipped.
    npm install --no-audit --no-fund --prefix "$PEERS_DIR/etsy" statsd@0.9.0 >&2
fi
if [ ! -x /usr/sbin/collectd ] || [ ! -x /usr/sbin/netdata ]; then
    created_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        created_policy=1
    fi
    apt-get update >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        collectd-core netdata-core >&2
    if [ "$created_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
fi

step "build (release): countersink, load generator, raw receive loop"
cargo build --release --locked --bin countersink --example peers_loadgen --example peers_rawrecv >&2

step "sysctl net.unix.max_dgram_qlen"
old_qlen=$(sysctl -n net.unix.max_dgram_qlen)
restore() { sysctl -qw net.unix.max_dgram_qlen="$old_qlen"; echo "restored net.unix.max_dgram_qlen=$old_qlen" >&2; }
trap restore EXIT
sysctl -qw net.unix.max_dgram_qlen="$UDS_QLEN"
echo "net.unix.max_dgram_qlen: $old_qlen -> $UDS_QLEN (restored on exit)" >&2

step "measure (load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
mkdir -p "$OUT"
# The driver itself mostly sleeps; keep it off the receiver's CPU.
taskset -c 1 python3 tests/bench/peers/driver.py \
    --out "$OUT" \
    --loadgen target/release/examples/peers_loadgen \
    --rawrecv target/release/examples/peers_rawrecv \
    --countersink target/release/countersink \
    --etsy-dir "$PEERS_DIR/etsy" \
    "$@"
