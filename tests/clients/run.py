"""Real StatsD/DogStatsD clients in five languages, and the Python OpenTelemetry SDK's
OTLP exporters, against `countersink dev`.

Each case sends COUNT increments (value i % 5 + 1, so the total is known) of its own
counter through one client, transport and option, and must land the exact total in both
the minute and the day table (read back by `countersink get`). The clients are built or
installed beforehand by tests/clients/run.sh (pinned versions); this script only runs them.

Phases:
  capture  each client's UDP cases against a plain UDP socket, 50 increments: what the
           client really sends (lines per datagram, extra fields, telemetry lines);
  qlen10   the Unix datagram cases with net.unix.max_dgram_qlen = 10 (Linux's default);
  main     every case with max_dgram_qlen = 512 (raised for the run and restored; needs
           root, as in CI).
Each case must achieve what Case says: exact totals for blocking senders; non-blocking
senders may lose datagrams on a full socket only as far as they report it.

Ends with `clients: N passed, N failed` and exits 1 on any failure.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "harness"))
from countersink_dev import DevServer, find_binary, free_port, utc_day  # noqa: E402

COUNT = int(os.environ.get("CLIENTS_COUNT", "20000"))
QLEN = "/proc/sys/net/unix/max_dgram_qlen"


def expected_total(count):
    return sum(i % 5 + 1 for i in range(count))


EXACT = "exact"
REPORTED = "loss reported"
SILENT = "may lose silently"
MISMATCH = "framing mismatch"


class Case:
    """One client, transport and option, and what it must achieve:

    - EXACT: the exact total lands in both tables;
    - REPORTED: a non-blocking sender may lose datagrams when the socket is full, but only
      as many as it reports itself (a shortfall with no reported drop fails);
    - SILENT: a documented client behaviour loses increments without reporting them
      (docs/src/guide/clients.md); the tables must still agree and never exceed what was sent;
    - MISMATCH: the client cannot speak countersink's framing; nothing may land, and
      countersink must count the refusal.
    """

    def __init__(self, language, client, option, transport, command, expect=EXACT):
        self.language = language
        self.client = client
        self.option = option
        self.transport = transport
        self.command = command
        self.expect = expect
        self.id = f"{language}-{client}-{option}-{transport}".replace("_", "-")
        self.name = "clients." + self.id.replace("-", "_")
        self.tags = [] if client == "statsd" else [f"client:{self.id}"]
        if "otlp" in transport:
            # The resource's service.name is kept as a tag by default.
            self.tags.append("service.name:clients")

    def argv(self, target, count):
        return self.command(self.transport, target, self.name, self.id, str(count))


def cases(tools):
    py = tools["python"]
    go = tools["go"]
    node = tools["node"]
    java = tools["java"]
    cadence = tools["cadence"]
    send_py = os.path.join(HERE, "python", "send.py")
    send_js = os.path.join(HERE, "node", "send.js")
    out = []

    def add(language, client, option, transport, command, expect=EXACT):
        out.append(Case(language, client, option, transport, command, expect))

    # Python datadog: Unix sockets are non-blocking unless socket_timeout is set.
    for option, flavour, transport, expect in (
        ("unbuffered", "datadog", "udp", EXACT),
        ("buffered", "datadog-buffered", "udp", EXACT),
        ("unbuffered", "datadog", "uds", REPORTED),
        ("buffered", "datadog-buffered", "uds", REPORTED),
        ("unbuffered", "datadog", "uds_stream", REPORTED),
        ("blocking", "datadog-blocking", "uds", EXACT),
        ("blocking", "datadog-blocking", "uds_stream", EXACT),
        ("plain", "statsd", "udp", EXACT),
        ("pipeline", "statsd-pipeline", "udp", EXACT),
        ("plain", "statsd", "tcp", EXACT),
        ("pipeline", "statsd-pipeline", "tcp", EXACT),
        # Newline-framed: the Unix stream socket's `auto` framing tells it from DogStatsD's.
        ("plain", "statsd", "uds_stream", EXACT),
        ("pipeline", "statsd-pipeline", "uds_stream", EXACT),
    ):
        client = "statsd" if flavour.startswith("statsd") else "datadog"
        add("python", client, option, transport,
            lambda t, target, n, c, k, f=flavour: [py, send_py, f, t, target, n, c, k], expect)
    # Python OpenTelemetry SDK, OTLP exporters (gzip), both temporalities.
    otlp_py = os.path.join(HERE, "python", "otlp_send.py")
    for protocol in ("http", "grpc"):
        for temporality in ("delta", "cumulative"):
            add("python", "opentelemetry-sdk", temporality, f"otlp_{protocol}",
                lambda t, target, n, c, k, p=protocol, tm=temporality: [py, otlp_py, p, tm, target, n, c, k])
    # The OpenTelemetry SDKs of Go, Java and Node, OTLP exporters (gzip), both protocols
    # and both temporalities. Node's HTTP exporter speaks OTLP/HTTP JSON, the others
    # protobuf.
    otlp_js = os.path.join(HERE, "node", "otlp_send.js")
    for protocol in ("http", "grpc"):
        for temporality in ("delta", "cumulative"):
            transport = f"otlp_{protocol}"
            add("go", "opentelemetry-go", temporality, transport,
                lambda t, target, n, c, k, p=protocol, tm=temporality: [tools["go_otel"], p, tm, target, n, c, k])
            add("java", "opentelemetry-java", temporality, transport,
                lambda t, target, n, c, k, p=protocol, tm=temporality: [*java, "SendOtlp", p, tm, target, n, c, k])
            add("node", "opentelemetry-js", temporality, transport,
                lambda t, target, n, c, k, p=protocol, tm=temporality: [node, otlp_js, p, tm, target, n, c, k])
    # Through an OpenTelemetry Collector (OTLP receiver, batch, OTLP exporter) in front of
    # countersink: the Python SDK sends to the collector, which forwards over gRPC.
    if tools.get("collector"):
        for protocol in ("http", "grpc"):
            for temporality in ("delta", "cumulative"):
                add("python", "opentelemetry-sdk-via-collector", temporality, f"collector_otlp_{protocol}",
                    lambda t, target, n, c, k, p=protocol, tm=temporality: [py, otlp_py, p, tm, target, n, c, k])
    # Go datadog-go: blocking writes with a 100 ms timeout. Channel mode drops on a full channel
    # (reported), and Close() stops its workers without draining their channels (not reported).
    for option, transport, expect in (
        ("default", "udp", EXACT), ("default", "uds", EXACT), ("default", "uds_stream", EXACT),
        ("no-aggregation", "udp", EXACT), ("no-aggregation", "uds", EXACT), ("channel", "uds", SILENT),
    ):
        add("go", "datadog-go", option, transport, lambda t, target, n, c, k, o=option: [go, o, t, target, n, c, k], expect)
    # Node hot-shots (UDS through unix-dgram, with retries on EAGAIN).
    for option, transport, expect in (
        ("plain", "udp", EXACT), ("buffered", "udp", EXACT), ("datadog", "udp", EXACT),
        ("plain", "uds", SILENT), ("buffered", "uds", EXACT),
    ):
        add("node", "hot-shots", option, transport,
            lambda t, target, n, c, k, o=option: [node, send_js, o, t, target, n, c, k], expect)
    # Java: non-blocking by default, and then stop() does not drain what is queued.
    for option, transport, expect in (
        ("default", "udp", SILENT), ("default", "uds", SILENT), ("default", "uds_stream", SILENT),
        ("blocking", "udp", EXACT), ("blocking", "uds", EXACT), ("blocking", "uds_stream", EXACT),
        ("blocking-no-aggregation", "uds", EXACT),
    ):
        add("java", "java-dogstatsd-client", option, transport,
            lambda t, target, n, c, k, o=option: [*java, "Send", o, t, target, n, c, k], expect)
    # Rust cadence: non-blocking sockets (as its docs recommend) except `blocking`.
    for option, transport, expect in (
        ("plain", "udp", EXACT), ("buffered", "udp", EXACT), ("queuing", "udp", EXACT),
        ("plain", "uds", REPORTED), ("buffered", "uds", REPORTED), ("queuing", "uds", REPORTED),
        ("blocking", "uds", EXACT),
    ):
        add("rust", "cadence", option, transport, lambda t, target, n, c, k, o=option: [cadence, o, t, target, n, c, k], expect)
    return out


def target_of(dev, collector, transport):
    if transport.startswith("collector_"):
        return collector.target(transport)
    return {"udp": f"127.0.0.1:{dev.udp_port}", "uds": dev.uds, "uds_stream": dev.uds_stream,
            "tcp": f"127.0.0.1:{dev.tcp_port}", "otlp_http": f"127.0.0.1:{dev.otlp_http_port}",
            "otlp_grpc": f"127.0.0.1:{dev.otlp_grpc_port}"}[transport]


class Collector:
    """The OpenTelemetry Collector of collector/ (built by run.sh), forwarding to `dev`'s
    OTLP/gRPC receiver; started only when a case needs it. `stop()` shuts it down
    gracefully (SIGTERM): the batch processor and the exporter's queue are drained first,
    so every point it took has reached countersink or failed loudly."""

    def __init__(self, binary, dev, workdir):
        self.grpc_port, self.http_port = free_port(), free_port()
        env = dict(os.environ, COLLECTOR_GRPC_PORT=str(self.grpc_port), COLLECTOR_HTTP_PORT=str(self.http_port),
                   COUNTERSINK_OTLP_GRPC=f"127.0.0.1:{dev.otlp_grpc_port}")
        self.log = open(os.path.join(workdir, "collector.log"), "w")
        config = os.path.join(ROOT, "tests", "otelcol", "forward.yaml")
        self.proc = subprocess.Popen([binary, "--config", config], env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not all(port_open(p) for p in (self.grpc_port, self.http_port)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the collector did not start; see {self.log.name}")
            time.sleep(0.1)

    def target(self, transport):
        return f"127.0.0.1:{self.grpc_port if transport == 'collector_otlp_grpc' else self.http_port}"

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        self.log.close()
        return code


def port_open(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def run_client(case, target, count):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DD_", "DATADOG_"))}
    started = time.monotonic()
    proc = subprocess.run(case.argv(target, count), capture_output=True, text=True, timeout=120, env=env)
    seconds = time.monotonic() - started
    report = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            report = json.loads(line)
    return proc, report, seconds


def receive_totals(dev):
    m = dev.metrics()

    def total(name, **labels):
        return sum(v for (n, ls), v in m.items() if n == name and all((k, x) in ls for k, x in labels.items()))

    return {
        "lines": total("countersink_lines_received_total"),
        "packets": total("countersink_packets_received_total"),
        "invalid": total("countersink_lines_invalid_total"),
        "refused": total("countersink_packets_dropped_total", reason="oversized") + total("countersink_packets_dropped_total", reason="truncated")
        + total("countersink_packets_dropped_total", reason="partial"),
        "accepted": total("countersink_increments_accepted_total"),
    }


def wait_quiet(dev, timeout=10):
    """Waits until the receivers saw no new packet for 300 ms (the kernel queue drained)."""
    last = receive_totals(dev)
    still_since = time.monotonic()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = receive_totals(dev)
        if now != last:
            last, still_since = now, time.monotonic()
        elif time.monotonic() - still_since > 0.3:
            break
    return last


class Results:
    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.rows = []

    def check(self, ok, what):
        if ok:
            self.passed += 1
            print(f"ok   {what}", flush=True)
        else:
            self.failed += 1
            print(f"FAIL {what}", flush=True)


def set_qlen(value):
    with open(QLEN, "w") as f:
        f.write(str(value))
    with open(QLEN) as f:
        return int(f.read())


def run_phase(label, binary, collector_binary, selected, results, count, config=None):
    """Runs `selected` against one fresh `countersink dev` and checks each case's totals
    against what it must achieve (Case). `config`: the text of a configuration file
    for it (the command line's addresses still apply)."""
    work = tempfile.mkdtemp(prefix=f"countersink-clients-{label}-")
    want = expected_total(count)
    extra = ()
    if config is not None:
        path = os.path.join(work, "countersink.toml")
        with open(path, "w") as f:
            f.write(config)
        extra = ("--config", path)
    try:
        with DevServer(binary, work, flush_interval="1s", extra_args=extra) as dev:
            day_first = utc_day()
            outcomes = []
            collector = None
            if any(case.transport.startswith("collector_") for case in selected):
                collector = Collector(collector_binary, dev, work)
            for case in selected:
                before = receive_totals(dev)
                proc, report, seconds = run_client(case, target_of(dev, collector, case.transport), count)
                after = wait_quiet(dev)
                delta = {k: after[k] - before[k] for k in after}
                if proc.returncode != 0 and case.expect != MISMATCH:
                    results.check(False, f"[{label}] {case.id}: exit {proc.returncode}: {proc.stderr.strip()[-400:]}")
                    continue
                outcomes.append((case, proc, report, seconds, delta))
            if collector is not None:
                code = collector.stop()
                results.check(code == 0, f"[{label}] the collector drained and stopped cleanly (exit {code})")
            settled = dev.wait_settled(0)
            for g in ("minute", "day"):
                results.check(settled[(g, "accepted")] == settled[(g, "applied")],
                              f"[{label}] every accepted {g} delta applied ({settled[(g, 'applied')]:.0f})")
            days = [day_first, utc_day()]
            for case, proc, report, seconds, delta in outcomes:
                day_total, minute_total = dev.get(case.name, case.tags, days)
                dropped = report.get("dropped")
                row = {"phase": label, "case": case.id, "language": case.language, "client": case.client,
                       "option": case.option, "transport": case.transport, "sent": want,
                       "day": day_total, "minutes": minute_total, "client_dropped": dropped,
                       "seconds": round(seconds, 2), **{f"cs_{k}": int(v) for k, v in delta.items()}}
                results.rows.append(row)
                row["expect"] = case.expect
                if case.expect == MISMATCH:
                    results.check(day_total == minute_total == 0 and (delta["refused"] > 0 or delta["invalid"] > 0),
                                  f"[{label}] {case.id}: newline framing refused and counted, nothing landed "
                                  f"(refused {delta['refused']:.0f}, invalid {delta['invalid']:.0f}, exit {proc.returncode})")
                    continue
                exact = day_total == minute_total == want
                detail = (f"day {day_total}, minutes {minute_total}, sent {want}; {delta['packets']:.0f} packets, "
                          f"{delta['lines']:.0f} lines; client dropped {dropped}; {seconds:.1f}s")
                if case.expect == EXACT or (case.expect == REPORTED and not dropped):
                    results.check(exact, f"[{label}] {case.id} ({case.expect}): {detail}")
                else:
                    # A shortfall is allowed, never an excess, and the tables must agree.
                    results.check(day_total == minute_total <= want, f"[{label}] {case.id} ({case.expect}): {detail}")
            if config is not None and "durable = true" in config:
                syncs = dev.value("countersink_ingest_log_syncs_total")
                results.check(syncs > 0, f"[{label}] the exports went through the ingest log ({syncs:.0f} fdatasyncs)")
            code = dev.stop()
            results.check(code == 0, f"[{label}] countersink dev stopped cleanly (exit {code})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def capture(selected, results):
    """Runs each UDP case with 50 increments against a bare UDP socket: what goes on the wire."""
    for case in selected:
        if case.transport != "udp":
            continue
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(0.5)
        target = f"127.0.0.1:{sock.getsockname()[1]}"
        proc, _, _ = run_client(case, target, 50)
        datagrams = []
        while True:
            try:
                datagrams.append(sock.recv(65536).decode(errors="replace"))
            except socket.timeout:
                break
        sock.close()
        lines = [line for d in datagrams for line in d.splitlines() if line]
        ours = [line for line in lines if line.startswith(case.name + ":")]
        others = sorted({line.split(":", 1)[0] for line in lines if not line.startswith(case.name + ":")})
        fields = sorted({f.split(":", 1)[0] if ":" in f else f[:1] for line in ours for f in line.split("|")[2:]})
        results.rows.append({"phase": "capture", "case": case.id, "datagrams": len(datagrams), "lines": len(ours),
                             "fields": fields, "other_names": others, "example": ours[0] if ours else None})
        results.check(proc.returncode == 0 and (len(ours) > 0 or case.expect == SILENT),
                      f"[capture] {case.id}: {len(datagrams)} datagrams, {len(ours)} lines of ours, fields {fields}, "
                      f"other names {others}, e.g. {ours[0] if ours else None!r}")


def main():
    binary = find_binary(ROOT)
    tools = json.loads(os.environ["CLIENT_TOOLS"])
    only = os.environ.get("CLIENTS_ONLY")
    all_cases = cases(tools)
    if only:
        all_cases = [c for c in all_cases if only in c.id]
    results = Results()
    capture(all_cases, results)

    uds_cases = [c for c in all_cases if c.transport == "uds"]
    original = None
    try:
        with open(QLEN) as f:
            original = int(f.read())
        print(f"net.unix.max_dgram_qlen is {original}", flush=True)
        if os.geteuid() == 0:
            set_qlen(10)
        if original == 10 or os.geteuid() == 0:
            run_phase("qlen10", binary, tools.get("collector"), uds_cases, results, COUNT)
        else:
            results.check(False, "qlen10 phase not run: max_dgram_qlen is not 10 and this is not root")
        if os.geteuid() == 0:
            results.check(set_qlen(512) == 512, "net.unix.max_dgram_qlen raised to 512 for the main phase")
            run_phase("main", binary, tools.get("collector"), all_cases, results, COUNT)
            # The OTLP exporters again, answered only once on disk (ingest.otlp.durable).
            otlp_cases = [c for c in all_cases if "otlp" in c.transport]
            if otlp_cases:
                run_phase("otlp-durable", binary, tools.get("collector"), otlp_cases, results, COUNT,
                          config="[ingest.otlp]\ndurable = true\n")
        else:
            results.check(False, "main phase not run: raising net.unix.max_dgram_qlen needs root")
    finally:
        if original is not None and os.geteuid() == 0:
            set_qlen(original)
            print(f"net.unix.max_dgram_qlen restored to {original}", flush=True)

    report = os.environ.get("CLIENTS_REPORT")
    if report:
        with open(report, "w") as f:
            json.dump(results.rows, f, indent=1)
    print(f"clients: {results.passed} passed, {results.failed} failed")
    return 1 if results.failed or not results.passed else 0


if __name__ == "__main__":
    sys.exit(main())
