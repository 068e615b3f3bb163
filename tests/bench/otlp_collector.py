"""OTLP/gRPC points absorbed per second: countersink's receiver side by side with the
OpenTelemetry Collector's (OTLP receiver straight into the no-op exporter), the same
load from the same generator, in one run. Not part of `cargo test`.

    bash tests/bench/otlp_collector.sh            # 5 rounds, 8 connections, 10 s each
    bash tests/bench/otlp_collector.sh 3 4 5      # rounds, connections, seconds

The load (tests/otelcol/cmd/otlp-load): every request holds 100 delta points of one
monotonic sum over 50 attribute sets, sent back to back on each connection; a point
counts once its request was answered OK (a partial success counts as a failure). Each
round runs both receivers, in alternating order, each freshly started: countersink is
the release build's `countersink dev` (the embedded store; 50 rows per flush, so the
store costs next to nothing), the collector is tests/otelcol's build with nop.yaml.
countersink must also have counted every answered point as accepted (the run fails
otherwise: a fast receiver that loses points is no result).

Reported: points/s per receiver per round, their medians, and the ratio
countersink / collector per round and its median. Both receivers and the generator
share the machine's cores, as they would on a node.
"""

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "harness"))
from countersink_dev import DevServer, free_port  # noqa: E402

POINTS_PER_REQUEST = 100
SERIES = 50


def load(tools, port, connections, seconds):
    out = subprocess.run([tools["load"], f"127.0.0.1:{port}", str(connections), str(POINTS_PER_REQUEST),
                          str(SERIES), str(seconds)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def port_open(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def run_collector(tools, work, connections, seconds):
    port = free_port()
    env = dict(os.environ, COLLECTOR_GRPC_PORT=str(port))
    with open(os.path.join(work, "collector.log"), "w") as log:
        proc = subprocess.Popen([tools["collector"], "--config", os.path.join(ROOT, "tests", "otelcol", "nop.yaml")],
                                env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while not port_open(port):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the collector did not start; see " + log.name)
                time.sleep(0.05)
            return load(tools, port, connections, seconds)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


def run_countersink(tools, work, connections, seconds):
    with DevServer(tools["countersink"], work, flush_interval="2s") as dev:
        result = load(tools, dev.otlp_grpc_port, connections, seconds)
        accepted = 0.0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            accepted = sum(v for (name, _), v in dev.metrics().items()
                           if name == "countersink_increments_accepted_total")
            if accepted >= result["points"]:
                break
            time.sleep(0.2)
        if accepted != result["points"]:
            raise RuntimeError(f"countersink answered {result['points']} points OK but accepted {accepted:.0f}")
        code = dev.stop()
        if code != 0:
            raise RuntimeError(f"countersink dev exited with {code}")
        return result


def main():
    args = [int(a) for a in sys.argv[1:]]
    rounds, connections, seconds = (args + [5, 8, 10][len(args):])[:3]
    tools = json.loads(os.environ["OTLP_BENCH_TOOLS"])
    print(f"{rounds} rounds; {connections} connections, {POINTS_PER_REQUEST} points per request "
          f"over {SERIES} series, {seconds} s per receiver", flush=True)
    rates = {"countersink": [], "collector": []}
    ratios = []
    for r in range(rounds):
        order = ["countersink", "collector"] if r % 2 == 0 else ["collector", "countersink"]
        this = {}
        for receiver in order:
            with tempfile.TemporaryDirectory(prefix="otlp-bench-") as work:
                run = run_countersink if receiver == "countersink" else run_collector
                result = run(tools, work, connections, seconds)
            if result["failures"]:
                raise RuntimeError(f"{receiver}: {result['failures']} failed requests: {result.get('first_error')}")
            this[receiver] = result["points_per_sec"]
            rates[receiver].append(result["points_per_sec"])
        ratios.append(this["countersink"] / this["collector"])
        print(f"round {r + 1}: countersink {this['countersink']:,.0f} points/s, collector "
              f"{this['collector']:,.0f} points/s, ratio {ratios[-1]:.2f}", flush=True)
    print(f"median: countersink {statistics.median(rates['countersink']):,.0f} points/s, collector "
          f"{statistics.median(rates['collector']):,.0f} points/s; ratio countersink/collector "
          f"{statistics.median(ratios):.2f} (per round: {', '.join(f'{x:.2f}' for x in ratios)})")


if __name__ == "__main__":
    main()
