"""Measures the sidecar's resident memory against `limits.max_pending_bytes`, to size a
container's memory request and limit (deploy/kubernetes). A measurement, not a test: run
by hand, figures in docs/src/operations/deployment.md ("Kubernetes", memory).

    python3 tests/deploy/measure_memory.py --countersink BIN --cqlsim BIN [--limit-mib 64]
        [--keys 1500000] [--seconds 40] [--store-delay 20ms]

Starts cqlsim (optionally answering every request `--store-delay` late, like a remote
cluster under load) and `countersink serve` with the given pending-bytes limit, records
its RSS idle (connected, no traffic), then sends new distinct series over UDP as fast as
one Python process can for `--seconds` (each series about 40 bytes of key, like the
memory benchmark's 30-byte keys plus a tag), sampling RSS and countersink_pending_bytes
every 100 ms, and prints the idle RSS, the peak (VmHWM), the largest pending_bytes seen
and the drops by max_bytes.
"""

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "harness"))
from countersink_dev import free_port, parse_metrics  # noqa: E402


def status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
    return out


def metric(url, name, **labels):
    with urllib.request.urlopen(url, timeout=5) as r:
        m = parse_metrics(r.read().decode())
    return m.get((name, frozenset(labels.items())), 0.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--countersink", required=True)
    ap.add_argument("--cqlsim", required=True)
    ap.add_argument("--limit-mib", type=int, default=64)
    ap.add_argument("--keys", type=int, default=1_500_000)
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--store-delay", default=None)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="countersink-mem-")
    cql_args = [args.cqlsim, "--listen", "127.0.0.1:0"]
    if args.store_delay:
        cql_args += ["--fault", f"delay,for={args.store_delay},on=all"]
    cql_out = open(os.path.join(work, "cqlsim.out"), "w+")
    cql = subprocess.Popen(cql_args, stdout=cql_out, stderr=subprocess.DEVNULL)
    port = None
    for _ in range(100):
        cql_out.seek(0)
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", cql_out.read())
        if m:
            port = int(m.group(1))
            break
        time.sleep(0.1)
    contact = f"127.0.0.1:{port}"
    subprocess.run([args.countersink, "schema", "--apply", "--contact-point", contact], check=True,
                   capture_output=True, timeout=60)
    udp = free_port(socket.SOCK_DGRAM)
    metrics_addr = f"127.0.0.1:{free_port()}"
    config = os.path.join(work, "countersink.toml")
    with open(config, "w") as f:
        f.write(f"""[store]
contact_points = ["{contact}"]
[limits]
max_pending_rows = 100000000
max_pending_bytes = {args.limit_mib * 1024 * 1024}
[state]
dir = "{work}/state"
[ingest.udp]
listen = "127.0.0.1:{udp}"
[metrics]
listen = "{metrics_addr}"
""")
    sidecar = subprocess.Popen([args.countersink, "serve", "--config", config],
                               stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "countersink.err"), "w"))
    url = f"http://{metrics_addr}"
    try:
        for _ in range(300):
            try:
                with urllib.request.urlopen(url + "/readyz", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.1)
        time.sleep(3)
        idle = status(sidecar.pid)
        print(f"idle: RSS {idle['VmRSS'] / 2**20:.1f} MiB", flush=True)

        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        target = ("127.0.0.1", udp)
        started = time.monotonic()
        next_sample = started
        key = 0
        peak_pending = 0.0
        peak_rss = 0
        while time.monotonic() - started < args.seconds:
            lines = [f"mem.series.{(key + i) % args.keys:012d}:1|c|#page_id:p{(key + i) % args.keys:010d}" for i in range(20)]
            key += 20
            try:
                sock.sendto("\n".join(lines).encode(), target)
            except BlockingIOError:
                pass
            if time.monotonic() >= next_sample:
                next_sample += 0.1
                peak_rss = max(peak_rss, status(sidecar.pid)["VmRSS"])
                peak_pending = max(peak_pending, metric(url + "/metrics", "countersink_pending_bytes"))
        sent = key
        time.sleep(1)
        end = status(sidecar.pid)
        dropped = metric(url + "/metrics", "countersink_dropped_total", reason="max_bytes")
        flushes = metric(url + "/metrics", "countersink_flushes_total")
        print(f"load: {sent} lines in {args.seconds:.0f} s over {args.keys} distinct series, limit {args.limit_mib} MiB, "
              f"store delay {args.store_delay or 'none'}")
        print(f"peak RSS sampled {peak_rss / 2**20:.1f} MiB, VmHWM {end['VmHWM'] / 2**20:.1f} MiB, "
              f"largest pending_bytes {peak_pending / 2**20:.1f} MiB, dropped max_bytes {dropped:.0f}, flushes {flushes:.0f}")
        print(f"(VmHWM - idle) / limit = {(end['VmHWM'] - idle['VmRSS']) / (args.limit_mib * 2**20):.2f}")
    finally:
        sidecar.send_signal(signal.SIGTERM)
        try:
            sidecar.wait(timeout=60)
        except subprocess.TimeoutExpired:
            sidecar.kill()
        cql.terminate()
        cql.wait()


if __name__ == "__main__":
    main()
