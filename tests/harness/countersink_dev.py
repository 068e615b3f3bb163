"""Starts `countersink dev` on free loopback ports and reads it back, for the end-to-end
checks of tests/deploy and tests/clients (standard library only).

    with DevServer(binary, workdir) as dev:
        dev.udp, dev.uds, dev.uds_stream, dev.tcp, dev.metrics_url, dev.cql
        dev.wait_settled(n)           # n deltas accepted, none pending, the identity balanced
        dev.get("name", ["k:v"])      # (day total, sum of the minute rows) via `countersink get`
"""

import datetime
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request


def free_port(kind=socket.SOCK_STREAM):
    """A port the kernel just handed out on 127.0.0.1 (closed again at once)."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_binary(root):
    """COUNTERSINK_BIN, else the debug build of the workspace (built by `cargo test`)."""
    path = os.environ.get("COUNTERSINK_BIN") or os.path.join(root, "target", "debug", "countersink")
    if not os.access(path, os.X_OK):
        raise SystemExit(f"countersink binary not found at {path}: build it (cargo build) or set COUNTERSINK_BIN")
    return path


def parse_metrics(text):
    """Prometheus text format to {(name, frozenset(labels.items())): value}."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})? (\S+)$", line)
        if not m:
            raise ValueError(f"unparsable metrics line: {line!r}")
        labels = frozenset(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


class DevServer:
    """`countersink dev` with UDP, a Unix datagram and a Unix stream socket, TCP, OTLP
    (HTTP and gRPC), metrics and the embedded store on free ports, its state under
    `workdir`."""

    def __init__(self, binary, workdir, flush_interval="1s", extra_args=()):
        self.binary = binary
        self.workdir = workdir
        self.udp_port = free_port(socket.SOCK_DGRAM)
        self.udp = ("127.0.0.1", self.udp_port)
        self.uds = os.path.join(workdir, "dsd.sock")
        self.uds_stream = os.path.join(workdir, "dsd-stream.sock")
        self.tcp_port = free_port()
        self.tcp = ("127.0.0.1", self.tcp_port)
        self.otlp_http_port = free_port()
        self.otlp_grpc_port = free_port()
        self.metrics_addr = f"127.0.0.1:{free_port()}"
        self.metrics_url = f"http://{self.metrics_addr}"
        self.cql = f"127.0.0.1:{free_port()}"
        self.args = [
            binary, "dev",
            "--udp", f"127.0.0.1:{self.udp_port}",
            "--uds", self.uds,
            "--uds-stream", self.uds_stream,
            "--tcp", f"127.0.0.1:{self.tcp_port}",
            "--otlp-http", f"127.0.0.1:{self.otlp_http_port}",
            "--otlp-grpc", f"127.0.0.1:{self.otlp_grpc_port}",
            "--metrics", self.metrics_addr,
            "--cql-listen", self.cql,
            "--state-dir", os.path.join(workdir, "state"),
            "--flush-interval", flush_interval,
            *extra_args,
        ]
        self.process = None

    def __enter__(self):
        self.out = open(os.path.join(self.workdir, "countersink.out"), "w")
        self.err = open(os.path.join(self.workdir, "countersink.err"), "w")
        env = {k: v for k, v in os.environ.items() if not k.startswith("COUNTERSINK_")}
        self.process = subprocess.Popen(self.args, stdout=self.out, stderr=self.err, stdin=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"countersink dev exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.metrics_url + "/readyz", timeout=2) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"countersink dev not ready after 60 s:\n{self.log_tail()}")

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        """SIGTERM, then the exit code (0 after a clean shutdown)."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self.out.close()
        self.err.close()
        return code

    def log_tail(self, lines=30):
        self.err.flush()
        with open(self.err.name) as f:
            return "".join(f.readlines()[-lines:])

    def metrics(self):
        with urllib.request.urlopen(self.metrics_url + "/metrics", timeout=5) as r:
            return parse_metrics(r.read().decode())

    def value(self, name, **labels):
        """One sample of the sidecar's own /metrics (0 when absent)."""
        key = (name, frozenset(labels.items()))
        return self.metrics().get(key, 0.0)

    def wait_settled(self, accepted_at_least, timeout=60):
        """Waits until at least `accepted_at_least` deltas were accepted, nothing is
        pending, nothing waits on disk (the ingest log of durable receivers, the spill)
        and the accounting identity balances for both granularities; returns
        {(granularity, stage): sum}. Raises when that does not happen in time.

        The disk matters for durable receivers: an export answered once its lines are in
        the ingest log reaches the stages only when a flush moves the log into the spill
        and replays it, so until then the stages balance without it."""
        stages = ("accepted", "applied", "unknown", "rejected", "dropped", "spilled", "pending")
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            m = self.metrics()
            last = {
                (g, s): m.get(("countersink_stage_delta", frozenset({("stage", s), ("granularity", g)})), 0.0)
                for g in ("minute", "day") for s in stages
            }
            on_disk = sum(m.get((name, frozenset()), 0.0)
                          for name in ("countersink_ingest_log_bytes", "countersink_spill_bytes"))
            if on_disk == 0 and all(
                last[(g, "accepted")] >= accepted_at_least
                and last[(g, "pending")] == 0
                and last[(g, "accepted")] == sum(last[(g, s)] for s in stages[1:])
                for g in ("minute", "day")
            ):
                return last
            time.sleep(0.2)
        raise RuntimeError(f"not settled after {timeout} s: {last}")

    def get(self, name, tags, days):
        """(sum of the day rows, sum of the minute rows) of one generic counter over
        `days`, read back through the driver by `countersink get`."""
        day_total = minute_total = 0
        for day in sorted(set(days)):
            base = [self.binary, "get", "--contact-point", self.cql, name, "--day", day]
            for tag in tags:
                base += ["--tag", tag]
            out = subprocess.run(base, capture_output=True, text=True, timeout=60, check=True).stdout
            day_total += int(out.strip() or 0)
            out = subprocess.run(base + ["--minutes"], capture_output=True, text=True, timeout=60, check=True).stdout
            for line in out.splitlines():
                if line.strip():
                    minute_total += int(line.split()[-1])
        return day_total, minute_total


def utc_day():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
