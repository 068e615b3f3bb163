#!/usr/bin/env python3
"""Ingest benchmark against peer StatsD servers: the measuring part.

Started by run.sh (which installs the peers, builds the binaries and sets/restores the
sysctl); it can also be run by hand with the same arguments. Standard library only.

For every repetition, every target (receiver) is started fresh, pinned to CPU 0, and
measured on each of its scenarios (transport x lines per datagram) with the load generator
pinned to CPU 1:

* zero-loss search: steps of --step-seconds at a fixed offered rate; a step passes when the
  receiver's own counters show every line offered (lines the generator handed to the kernel,
  plus, over a Unix socket, lines the non-blocking generator had refused with EAGAIN). The
  search doubles or halves from a start rate until it brackets the limit, then bisects
  (geometrically) until the bracket is within --resolution. Result: the highest passing
  offered rate (lines/s = increments/s: every line carries the value 1).
* full blast: the generator sends as fast as it can for --blast-seconds; absorbed lines/s
  and the loss fraction are recorded.

Each step uses its own metric name, so late datagrams of one step never count for another.
Per step the raw results are appended to results.jsonl (offered, absorbed, kernel drops from
/proc/net/snmp, receiver CPU time, CPU 0 and CPU 1 busy time, load average); summary.md gets
medians over the repetitions and ratios to the raw receive loop.
"""

import argparse
import glob
import json
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

RECV_CPU = "0"
SEND_CPU = "1"

# Scenario name -> (transport, lines per datagram).
SCENARIOS = {
    "udp1": ("udp", 1),
    "udp20": ("udp", 20),
    "uds1": ("uds", 1),
    "uds20": ("uds", 20),
}

# First-repetition start rates (lines/s) for the search; later repetitions start at the
# previous result. Only a starting point: the search goes up or down from it.
START_RATE = {
    ("raw", "udp1"): 400e3, ("raw", "udp20"): 4e6, ("raw", "uds1"): 400e3, ("raw", "uds20"): 4e6,
    ("countersink", "udp1"): 400e3, ("countersink", "udp20"): 4e6,
    ("countersink", "uds1"): 400e3, ("countersink", "uds20"): 4e6,
    ("etsy", "udp1"): 40e3, ("etsy", "udp20"): 400e3,
    ("netdata", "udp1"): 400e3, ("netdata", "udp20"): 4e6,
    ("netdata-plain", "udp1"): 400e3, ("netdata-plain", "udp20"): 4e6,
    ("collectd", "udp1"): 20e3, ("collectd", "udp20"): 100e3,
}
MIN_RATE = 1000.0
HZ = os.sysconf("SC_CLK_TCK")
# Receive buffer for the drain measurement: the largest SO_RCVBUF countersink accepts.
DRAIN_RCVBUF = (2**31 - 1) // 2


def nice(args):
    """Command prefix giving receivers and the generator the --nice priority."""
    return ["nice", "-n", str(args.nice)] if args.nice else []


def autogroup_nice(pid, args):
    """With kernel.sched_autogroup_enabled, nice only weighs within a session's autogroup;
    between sessions (our receiver vs. a neighbour's benchmark) the autogroups share a CPU
    equally. So --nice is also written to the autogroup of `pid` (root only)."""
    if not args.nice:
        return
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(args.nice))
    except OSError as e:
        log(f"cannot set the autogroup nice of {pid}: {e}")


def log(*parts):
    print(time.strftime("%H:%M:%S"), *parts, file=sys.stderr, flush=True)


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def cpu_busy():
    """Busy jiffies (everything but idle and iowait) of CPU 0 and CPU 1."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu0 ") or line.startswith("cpu1 "):
                v = [int(x) for x in line.split()[1:]]
                out[line.split()[0]] = sum(v[:8]) - v[3] - v[4]
    return out


def steal():
    with open("/proc/stat") as f:
        v = f.readline().split()
    return int(v[8])


def proc_cpu(pid):
    """CPU seconds used so far by a process's live threads (schedstat, ns resolution)."""
    total = 0
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(path) as f:
                total += int(f.read().split()[0])
        except (OSError, IndexError, ValueError):
            pass
    return total / 1e9


def udp_snmp():
    with open("/proc/net/snmp") as f:
        lines = [l.split() for l in f if l.startswith("Udp:")]
    return dict(zip(lines[0][1:], (int(x) for x in lines[1][1:])))


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def tcp_query(addr, request=b"", end=None, timeout=5):
    with socket.create_connection(addr, timeout=timeout) as s:
        if request:
            s.sendall(request)
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                break
            chunks.append(data)
            if end and b"".join(chunks).endswith(end):
                break
    return b"".join(chunks).decode()


def wait_until(check, timeout, what):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            if check():
                return
        except Exception as e:  # noqa: BLE001 (not up yet)
            last = e
        time.sleep(0.1)
    raise RuntimeError(f"{what} not ready after {timeout}s: {last}")


class Target:
    """A receiver under test. Subclasses start it and read what it absorbed."""

    name = "?"
    dialect = "tags"
    transports = ("udp",)
    # Seconds between two reads that must agree before a step counts as settled.
    settle_poll = 0.25
    settle_min = 0.0

    def __init__(self, args, workdir):
        self.args = args
        self.workdir = workdir
        self.proc = None
        self.uds_path = os.path.join(workdir, f"{self.name}.sock")

    def popen(self, cmd, logname, **kw):
        logf = open(os.path.join(self.workdir, logname), "ab")
        self.proc = subprocess.Popen(
            nice(self.args) + ["taskset", "-c", RECV_CPU] + cmd, stdout=logf, stderr=subprocess.STDOUT,
            start_new_session=True, **kw)
        logf.close()
        autogroup_nice(self.proc.pid, self.args)

    def pid(self):
        return self.proc.pid

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def check_alive(self):
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited (see {self.workdir})")

    def address(self, transport):
        if transport == "udp":
            return ["--udp", f"127.0.0.1:{self.port}"]
        return ["--uds", self.uds_path]

    def counts(self, step_name):
        """Lines absorbed so far that matter for `step_name` (cumulative or per name)."""
        raise NotImplementedError

    def absorbed(self, before, after):
        return after - before


class Raw(Target):
    name = "raw"
    transports = ("udp", "uds")

    def start(self, transport, rcvbuf=None):
        self.port = self.args.base_port
        self.control = ("127.0.0.1", self.args.base_port + 1)
        bind = (["--udp", f"127.0.0.1:{self.port}"] if transport == "udp"
                else ["--uds", self.uds_path])
        self.popen([self.args.rawrecv] + bind + [
            "--control", "%s:%d" % self.control, "--rcvbuf", str(rcvbuf or self.args.rcvbuf)],
            "raw.log")
        wait_until(lambda: self.stats() is not None, 10, "raw receiver")

    def stats(self):
        return json.loads(tcp_query(self.control))

    def counts(self, step_name):
        return self.stats()["increments"]


class Countersink(Target):
    name = "countersink"
    transports = ("udp", "uds")

    def start(self, transport, rcvbuf=None):
        self.port = self.args.base_port
        self.metrics = f"127.0.0.1:{self.args.base_port + 1}"
        state = os.path.join(self.workdir, "countersink-state")
        shutil.rmtree(state, ignore_errors=True)
        cmd = [self.args.countersink, "dev", "--udp", f"127.0.0.1:{self.port}",
               "--metrics", self.metrics, "--cql-listen", f"127.0.0.1:{self.args.base_port + 2}",
               "--state-dir", state]
        if rcvbuf:
            # Everything else stays at the defaults; only the UDP receive buffer is raised.
            conf = os.path.join(self.workdir, "countersink-drain.toml")
            with open(conf, "w") as f:
                f.write(f"[ingest.udp]\nrecv_buffer_bytes = {rcvbuf}\n")
            cmd += ["--config", conf]
        if transport == "uds":
            cmd += ["--uds", self.uds_path]
        env = dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "warn"))
        self.popen(cmd, "countersink.log", env=env)
        wait_until(lambda: "countersink_increments_accepted_total" in self.scrape(), 30,
                   "countersink /metrics")
        wait_until(lambda: http_get(f"http://{self.metrics}/readyz") is not None, 30,
                   "countersink /readyz")

    def scrape(self):
        return http_get(f"http://{self.metrics}/metrics")

    def metric(self, text, name, labels=""):
        m = re.search(r"^%s%s (\S+)$" % (re.escape(name), re.escape(labels)), text, re.M)
        return float(m.group(1)) if m else 0.0

    def counts(self, step_name):
        return int(self.metric(self.scrape(), "countersink_increments_accepted_total"))

    def extra(self):
        text = self.scrape()
        out = {}
        for t in ("udp", "uds"):
            out[f"lines_{t}"] = self.metric(text, "countersink_lines_received_total",
                                            '{transport="%s"}' % t)
            out[f"kernel_drops_{t}"] = self.metric(
                text, "countersink_packets_dropped_total",
                '{reason="kernel",transport="%s"}' % t)
        out["rcvbuf_udp"] = self.metric(text, "countersink_socket_receive_buffer_bytes",
                                        '{transport="udp"}')
        return out


class Etsy(Target):
    name = "etsy"

    def start(self, transport):
        self.port = self.args.base_port
        self.mgmt = ("127.0.0.1", self.args.base_port + 1)
        with open(os.path.join(self.args.configs, "etsy-statsd.js")) as f:
            conf = f.read()
        conf = conf.replace("port: 8125", f"port: {self.port}").replace(
            "mgmt_port: 8126", f"mgmt_port: {self.mgmt[1]}")
        path = os.path.join(self.workdir, "etsy-statsd.js")
        with open(path, "w") as f:
            f.write(conf)
        self.popen(["node", os.path.join(self.args.etsy_dir, "node_modules/statsd/stats.js"),
                    path], "etsy.log")
        wait_until(lambda: "END" in tcp_query(self.mgmt, b"counters\n", b"END\n\n"), 20,
                   "etsy statsd management port")

    def counts(self, step_name):
        text = tcp_query(self.mgmt, b"counters\n", b"END\n\n")
        total = 0
        for key, value in re.findall(r"'([^']+)': (\d+)", text):
            if key == step_name or key.startswith(step_name + ";"):
                total += int(value)
        return total


class Netdata(Target):
    name = "netdata"
    settle_poll = 1.0
    settle_min = 2.5

    def start(self, transport):
        self.port = self.args.base_port
        self.web = f"127.0.0.1:{self.args.base_port + 1}"
        d = os.path.join(self.workdir, "netdata")
        shutil.rmtree(d, ignore_errors=True)
        for sub in ("cache", "lib", "log"):
            os.makedirs(os.path.join(d, sub))
        with open(os.path.join(self.args.configs, "netdata.conf")) as f:
            conf = f.read()
        conf = conf.replace("@DIR@", d).replace("@PORT@", f"127.0.0.1:{self.port}").replace(
            "@WEB@", self.web)
        path = os.path.join(d, "netdata.conf")
        with open(path, "w") as f:
            f.write(conf)
        self.popen(["/usr/sbin/netdata", "-D", "-c", path], "netdata.log")
        wait_until(lambda: "netdata.statsd_events" in http_get(f"http://{self.web}/api/v1/charts"),
                   30, "netdata API")

    def stop(self):
        # netdata forks a spawn server into its process group: end the whole group we made.
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None

    def counts(self, step_name):
        url = (f"http://{self.web}/api/v1/data?chart=statsd_{step_name}.counter"
               "&after=-3000&points=3000&group=sum&format=json")
        try:
            data = json.loads(http_get(url))
        except urllib.error.HTTPError:
            return 0  # no chart: nothing of this step arrived yet
        return int(round(sum((row[1] or 0) for row in data["data"])))


class NetdataPlain(Netdata):
    """netdata fed `NAME.pJ:1|c`: 100 distinct metric names per step, like the 100 keys the
    others aggregate separately (with tags, netdata folds every tag value of a name into one
    chart). Counted from its own `netdata.statsd_events` chart (counter events per second,
    summed over its whole retention), before and after each step."""

    name = "netdata-plain"
    dialect = "plain"

    def counts(self, step_name):
        url = (f"http://{self.web}/api/v1/data?chart=netdata.statsd_events"
               "&dimensions=counters&after=-3000&points=3000&group=sum&format=json")
        data = json.loads(http_get(url))
        return int(round(sum((row[1] or 0) for row in data["data"])))


class Collectd(Target):
    name = "collectd"
    dialect = "plain"
    settle_poll = 1.0
    settle_min = 2.5

    def start(self, transport):
        self.port = self.args.base_port
        self.dir = os.path.join(self.workdir, "collectd")
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        with open(os.path.join(self.args.configs, "collectd.conf")) as f:
            conf = f.read()
        conf = conf.replace("@DIR@", self.dir).replace("@PORT@", str(self.port))
        path = os.path.join(self.dir, "collectd.conf")
        with open(path, "w") as f:
            f.write(conf)
        self.popen(["/usr/sbin/collectd", "-f", "-C", path], "collectd.log")
        log_path = os.path.join(self.dir, "collectd.log")
        wait_until(lambda: "Initialization complete" in open(log_path).read(), 20,
                   "collectd")

    def counts(self, step_name):
        total = 0
        for key in range(self.args.keys):
            files = glob.glob(os.path.join(
                self.dir, "csv", "bench", "statsd", f"derive-{step_name}.p{key}-*"))
            best = 0
            for path in files:
                with open(path, "rb") as f:
                    f.seek(0, os.SEEK_END)
                    f.seek(max(0, f.tell() - 256))
                    tail = f.read().decode().strip().splitlines()
                if tail and "," in tail[-1] and not tail[-1].startswith("epoch"):
                    best = max(best, int(float(tail[-1].split(",")[1])))
            total += best
        return total


TARGETS = {"raw": Raw, "countersink": Countersink, "etsy": Etsy, "netdata": Netdata,
           "netdata-plain": NetdataPlain, "collectd": Collectd}


class Bench:
    def __init__(self, args):
        self.args = args
        self.seq = 0
        self.out = open(os.path.join(args.out, "results.jsonl"), "a")

    def step_name(self):
        self.seq += 1
        return f"{self.args.run_id}s{self.seq}"

    def settle(self, target, name):
        """Waits until the receiver's count stops moving; returns it."""
        time.sleep(target.settle_min)
        last = target.counts(name)
        deadline = time.time() + 15
        while time.time() < deadline:
            time.sleep(target.settle_poll)
            now = target.counts(name)
            if now == last:
                return now
            last = now
        return last

    def run_step(self, target, scenario, rate, seconds, kind, rep, nonblocking=True):
        """One step at a fixed offered rate (0: full blast); returns its record."""
        transport, k = SCENARIOS[scenario]
        name = self.step_name()
        target.check_alive()
        before = target.counts(name)
        snmp0, cpu0, steal0, p0 = udp_snmp(), cpu_busy(), steal(), proc_cpu(target.pid())
        load = loadavg()
        t0 = time.time()
        cmd = nice(self.args) + ["taskset", "-c", SEND_CPU, self.args.loadgen] + target.address(transport) + [
            "--lines-per-packet", str(k), "--rate", str(rate), "--seconds", str(seconds),
            "--name", name, "--keys", str(self.args.keys), "--dialect", target.dialect]
        if transport == "uds" and nonblocking:
            cmd.append("--nonblocking")
        gen = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        wall = time.time() - t0
        p1, cpu1, steal1, snmp1 = proc_cpu(target.pid()), cpu_busy(), steal(), udp_snmp()
        after = self.settle(target, name)
        absorbed = target.absorbed(before, after)
        offered_lines = gen["lines"] + gen["refused_lines"]
        rec = {
            "run": self.args.run_id, "rep": rep, "target": target.name, "scenario": scenario,
            "kind": kind, "name": name, "rate": rate, "seconds": gen["seconds"],
            "sent_lines": gen["lines"], "refused_lines": gen["refused_lines"],
            "send_errors": gen["errors"], "offered_lines": offered_lines,
            "offered_rate": offered_lines / gen["seconds"],
            "absorbed": absorbed, "absorbed_rate": absorbed / gen["seconds"],
            "loss": 1 - absorbed / offered_lines if offered_lines else 0.0,
            "max_lag_ms": gen["max_lag_ms"],
            "rcvbuf_errors": snmp1["RcvbufErrors"] - snmp0["RcvbufErrors"],
            "udp_in_errors": snmp1["InErrors"] - snmp0["InErrors"],
            "receiver_cpu": (p1 - p0) / wall,
            "cpu0_busy": (cpu1["cpu0"] - cpu0["cpu0"]) / HZ / wall,
            "cpu1_busy": (cpu1["cpu1"] - cpu0["cpu1"]) / HZ / wall,
            "steal": (steal1 - steal0) / HZ / wall, "loadavg": load, "nice": self.args.nice,
        }
        if hasattr(target, "extra"):
            rec["extra"] = target.extra()
        self.out.write(json.dumps(rec) + "\n")
        self.out.flush()
        flag = ""
        if kind == "search" and rate and rec["offered_rate"] < 0.97 * rate:
            flag = " (generator behind)"
        log(f"  {target.name:11} {scenario:5} {kind:6} rate {rate/1e3:9.1f}k "
            f"offered {rec['offered_rate']/1e3:9.1f}k absorbed {rec['absorbed_rate']/1e3:9.1f}k "
            f"loss {rec['loss']*100:7.3f}% rcvbuf_err {rec['rcvbuf_errors']} "
            f"cpu {rec['receiver_cpu']:.2f} load {load[0]:.2f}{flag}")
        return rec

    def search(self, target, scenario, start, rep):
        """Highest offered rate with zero loss; returns (rate, note)."""
        secs = self.args.step_seconds

        def ok(rate):
            rec = self.run_step(target, scenario, rate, secs, "search", rep)
            behind = rec["offered_rate"] < 0.97 * rate
            return rec["absorbed"] >= rec["offered_lines"] and rec["offered_lines"] > 0, behind, rec

        lo = hi = None
        lo_rate = None
        rate = start
        passed, behind, rec = ok(rate)
        if passed and behind:
            return rec["offered_rate"], "generator-bound"
        if passed:
            lo, lo_rate = rate, rec["offered_rate"]
            while True:
                rate = lo * 2
                passed, behind, rec = ok(rate)
                if passed and behind:
                    return rec["offered_rate"], "generator-bound"
                if passed:
                    lo, lo_rate = rate, rec["offered_rate"]
                else:
                    hi = rate
                    break
        else:
            hi = rate
            while True:
                rate = hi / 2
                if rate < MIN_RATE:
                    return 0.0, f"lost lines even at {hi:.0f}/s"
                passed, behind, rec = ok(rate)
                if passed:
                    lo, lo_rate = rate, rec["offered_rate"]
                    break
                hi = rate
        while hi / lo > self.args.resolution:
            rate = math.sqrt(lo * hi)
            passed, behind, rec = ok(rate)
            if passed and behind:
                return rec["offered_rate"], "generator-bound"
            if passed:
                lo, lo_rate = rate, rec["offered_rate"]
            else:
                hi = rate
        return lo_rate, ""

    def drain(self, target, scenario, rep):
        """Receive capacity without a live sender: the receiver is stopped (SIGSTOP) while
        --drain-datagrams datagrams are queued in its 1 GiB socket buffer, then resumed and
        timed until its own counters show them all (polled every 10 ms)."""
        transport, k = SCENARIOS[scenario]
        n = self.args.drain_datagrams if k == 1 else self.args.drain_datagrams // 4
        name = self.step_name()
        target.check_alive()
        before = target.counts(name)
        snmp0 = udp_snmp()
        load = loadavg()
        os.kill(target.pid(), signal.SIGSTOP)
        try:
            cmd = nice(self.args) + ["taskset", "-c", SEND_CPU, self.args.loadgen] + target.address(transport) + [
                "--lines-per-packet", str(k), "--rate", "0", "--seconds", "60",
                "--datagrams", str(n), "--name", name, "--keys", str(self.args.keys),
                "--dialect", target.dialect]
            gen = json.loads(subprocess.run(cmd, check=True, capture_output=True,
                                            text=True).stdout)
            time.sleep(0.2)
        finally:
            t0 = time.perf_counter()
            p0 = proc_cpu(target.pid())
            os.kill(target.pid(), signal.SIGCONT)
        dropped = udp_snmp()["RcvbufErrors"] - snmp0["RcvbufErrors"]
        want = gen["lines"] - dropped * k
        done = None
        last, since = None, time.perf_counter()
        while time.perf_counter() - t0 < 60:
            time.sleep(0.01)
            now = target.counts(name) - before
            t = time.perf_counter()
            if now >= want:
                done = t
                break
            if now != last:
                last, since = now, t
            elif t - since > 1.0:
                break
        absorbed = target.counts(name) - before
        p1 = proc_cpu(target.pid())
        seconds = (done or since) - t0
        rec = {"run": self.args.run_id, "rep": rep, "target": target.name, "scenario": scenario,
               "kind": "drain", "name": name, "queued_lines": gen["lines"],
               "kernel_dropped_datagrams": dropped, "absorbed": absorbed,
               "seconds": seconds, "absorbed_rate": absorbed / seconds if seconds else 0,
               "complete": done is not None,
               "receiver_cpu_seconds": p1 - p0, "loadavg": load, "nice": self.args.nice}
        self.out.write(json.dumps(rec) + "\n")
        self.out.flush()
        log(f"  {target.name:11} {scenario:5} drain  {gen['lines']} lines queued "
            f"(kernel drops {dropped}) absorbed {absorbed} in {seconds:.3f}s = "
            f"{rec['absorbed_rate'] / 1e3:.1f}k lines/s load {load[0]:.2f}")
        return rec

    def warm_up(self, target, scenario):
        transport, k = SCENARIOS[scenario]
        cmd = nice(self.args) + ["taskset", "-c", SEND_CPU, self.args.loadgen] + target.address(transport) + [
            "--lines-per-packet", str(k), "--rate", "20000", "--seconds", "1",
            "--name", "warmup", "--keys", str(self.args.keys), "--dialect", target.dialect]
        subprocess.run(cmd, check=True, capture_output=True)
        time.sleep(max(0.5, target.settle_min))

    def run(self):
        args = self.args
        names = args.targets.split(",")
        scenarios = args.scenarios.split(",")
        starts = {}
        for rep in range(args.reps):
            # Rotate the target order every repetition so none always runs first.
            order = names[rep % len(names):] + names[:rep % len(names)]
            for tname in order:
                cls = TARGETS[tname]
                for scenario in scenarios:
                    transport, _ = SCENARIOS[scenario]
                    if transport not in cls.transports:
                        continue
                    workdir = os.path.join(args.out, "work", f"{tname}-{scenario}-{rep}")
                    os.makedirs(workdir, exist_ok=True)
                    target = cls(args, workdir)
                    log(f"rep {rep + 1}/{args.reps} {tname} {scenario}: start "
                        f"(load {loadavg()[0]:.2f})")
                    try:
                        target.start(transport)
                        self.warm_up(target, scenario)
                        start = starts.get((tname, scenario), START_RATE[(tname, scenario)])
                        rate, note = self.search(target, scenario, start, rep)
                        if rate > 0:
                            starts[(tname, scenario)] = rate
                        rec = {"run": args.run_id, "rep": rep, "target": tname,
                               "scenario": scenario, "kind": "zero_loss_rate",
                               "rate": rate, "note": note, "loadavg": loadavg()}
                        self.out.write(json.dumps(rec) + "\n")
                        log(f"  => {tname} {scenario} zero-loss {rate/1e3:.1f}k lines/s {note}")
                        for _ in range(args.blasts):
                            self.run_step(target, scenario, 0, args.blast_seconds, "blast", rep)
                        if transport == "uds":
                            # Blocking sender: no loss possible, the queue pushes back.
                            self.run_step(target, scenario, 0, args.blast_seconds,
                                          "blast_blocking", rep, nonblocking=False)
                    except Exception as e:  # noqa: BLE001 (record and go on)
                        log(f"  !! {tname} {scenario} failed: {e}")
                        self.out.write(json.dumps({"run": args.run_id, "rep": rep,
                                                   "target": tname, "scenario": scenario,
                                                   "kind": "error", "error": str(e)}) + "\n")
                    finally:
                        target.stop()
                    self.out.flush()
                    if (self.args.drain_datagrams and tname in ("raw", "countersink")
                            and transport == "udp"):
                        target = cls(args, workdir)
                        try:
                            target.start(transport, rcvbuf=DRAIN_RCVBUF)
                            self.warm_up(target, scenario)
                            for _ in range(args.drains):
                                self.drain(target, scenario, rep)
                        except Exception as e:  # noqa: BLE001 (record and go on)
                            log(f"  !! {tname} {scenario} drain failed: {e}")
                        finally:
                            target.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="results directory")
    p.add_argument("--loadgen", required=True)
    p.add_argument("--rawrecv", required=True)
    p.add_argument("--countersink", required=True)
    p.add_argument("--etsy-dir", default="/tmp/peers/etsy")
    p.add_argument("--configs", default=os.path.join(os.path.dirname(__file__), "configs"))
    p.add_argument("--targets", default="raw,countersink,etsy,netdata,collectd")
    p.add_argument("--scenarios", default="udp1,udp20,uds1")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--step-seconds", type=float, default=3.0)
    p.add_argument("--blast-seconds", type=float, default=3.0)
    p.add_argument("--blasts", type=int, default=1, help="full-blast runs per repetition")
    p.add_argument("--resolution", type=float, default=1.2,
                   help="stop bisecting when the bracket's upper/lower ratio is below this")
    p.add_argument("--keys", type=int, default=100)
    p.add_argument("--drain-datagrams", type=int, default=400000,
                   help="datagrams queued for the drain measurement of raw and countersink "
                        "(20-line datagrams: a quarter of it); 0 skips it")
    p.add_argument("--drains", type=int, default=2, help="drain runs per repetition")
    p.add_argument("--rcvbuf", type=int, default=8 << 20,
                   help="SO_RCVBUF of the raw receiver (countersink's default is 8 MiB)")
    p.add_argument("--base-port", type=int, default=18125)
    p.add_argument("--nice", type=int, default=0,
                   help="run receivers and the generator at this nice level, also as their "
                        "autogroup's nice (e.g. -10 on a machine shared with CPU-bound jobs, "
                        "so that they get most of their cores, at the neighbours' expense; "
                        "root only for negative values)")
    p.add_argument("--run-id", default="b" + time.strftime("%H%M%S"))
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for tool in ("taskset",):
        if not shutil.which(tool):
            sys.exit(f"{tool} is needed")
    # The load generator runs in this process's session (autogroup).
    autogroup_nice(os.getpid(), args)
    Bench(args).run()
    import summarize  # noqa: E402 (same directory)
    summarize.write(args.out)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
