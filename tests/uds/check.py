"""The real Python `datadog` client over countersink's Unix datagram socket.

DogStatsd(socket_path=...) opens its Unix socket non-blocking (as it ships): when the
socket's queue is full, a send fails and the client drops the datagram, counting it in
`packets_dropped`. How many datagrams may wait is net.unix.max_dgram_qlen (Linux: 10),
read when countersink creates its socket. Two phases, each against a fresh
`countersink dev --uds`:

  qlen 10   countersink warns at start, in its log (WARN, with the exact sysctl) and in
            the dev banner; 1000 increments sent at once may lose datagrams, but only as
            many as the client reports dropped, and if any were lost countersink's own
            countersink_uds_queue_full_total shows the queue was full;
  qlen 512  no warning; 1000 increments in bursts of 200 (within the queue, and within
            the sender's own send buffer, which also bounds a non-blocking burst) land
            exactly, in both tables.

The client keeps its telemetry on (as it ships): it counts drops only then.

Needs root to set the sysctl (CI runs as root); the previous value is restored. Exits 1 on
any failure (or when the sysctl cannot be set), printing `uds: N passed, N failed`.
"""

import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from datadog.dogstatsd import DogStatsd

QLEN = "/proc/sys/net/unix/max_dgram_qlen"
BIN = os.environ["COUNTERSINK_BIN"]
COUNT = 1000
SYSCTL = "sysctl -w net.unix.max_dgram_qlen=512"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def set_qlen(value):
    with open(QLEN, "w") as f:
        f.write(f"{value}\n")
    with open(QLEN) as f:
        if int(f.read()) != value:
            raise SystemExit(f"could not set {QLEN} to {value}")


class Dev:
    """`countersink dev` with the Unix datagram socket only."""

    def __init__(self, workdir):
        self.socket = os.path.join(workdir, "dsd.sock")
        self.metrics = f"127.0.0.1:{free_port()}"
        self.log = open(os.path.join(workdir, "countersink.log"), "w+")
        self.proc = subprocess.Popen(
            [BIN, "dev", "--udp", "off", "--uds", self.socket, "--metrics", self.metrics,
             "--cql-listen", f"127.0.0.1:{free_port()}", "--flush-interval", "1s",
             "--state-dir", os.path.join(workdir, "state")],
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.banner = []
        for line in self.proc.stdout:
            self.banner.append(line)
            if line.startswith("Ctrl-C"):
                break
        self.banner = "".join(self.banner)
        match = re.search(r"CQL store:\s+(\S+)", self.banner)
        if not match:
            raise SystemExit(f"no banner:\n{self.banner}")
        self.cql = match.group(1)

    def log_text(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def metric(self, series):
        text = urllib.request.urlopen(f"http://{self.metrics}/metrics").read().decode()
        for line in text.splitlines():
            if line.startswith(series + " "):
                return float(line.split()[-1])
        raise SystemExit(f"{series} not exported")

    def total(self, name, minutes=False):
        """The day total (or the sum of the minute rows) read back from the store."""
        args = [BIN, "get", "--contact-point", self.cql, name, "--tag", "client:uds"]
        out = subprocess.run(args + (["--minutes"] if minutes else []),
                             check=True, capture_output=True, text=True).stdout
        if minutes:
            return sum(int(l.split()[-1]) for l in out.splitlines() if l.strip())
        return int(out.strip())

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.log.close()


def send(dev, name, burst):
    """COUNT increments, `burst` at a time with a pause between; what the client dropped."""
    client = DogStatsd(socket_path="unixgram://" + dev.socket)
    for i in range(COUNT):
        client.increment(name, 1, tags=["client:uds"])
        if (i + 1) % burst == 0:
            time.sleep(0.05)
    client.flush()
    client.close_socket()
    return client.packets_dropped


def settle(dev, name, expected):
    """Waits for the flushes: until the minute and day tables agree on `expected`, or 20 s."""
    for _ in range(40):
        time.sleep(0.5)
        day, minute = dev.total(name), dev.total(name, minutes=True)
        if day == minute == expected:
            break
    return day, minute


def main():
    results = []

    def check(what, ok, detail=""):
        results.append(ok)
        print(f"{'ok  ' if ok else 'FAIL'} {what} {detail}")

    if os.geteuid() != 0:
        raise SystemExit("needs root to set net.unix.max_dgram_qlen (CI runs as root)")
    with open(QLEN) as f:
        previous = int(f.read())
    try:
        for qlen in (10, 512):
            set_qlen(qlen)
            with tempfile.TemporaryDirectory() as workdir:
                dev = Dev(workdir)
                try:
                    name = f"uds.qlen{qlen}"
                    time.sleep(0.5)
                    warned = [l for l in dev.log_text().splitlines() if SYSCTL in l]
                    if qlen < 512:
                        check(f"qlen {qlen}: WARN with the sysctl in the log",
                              any("WARN" in l for l in warned), f"{warned}")
                        check(f"qlen {qlen}: the warning in the dev banner",
                              "WARNING" in dev.banner and SYSCTL in dev.banner)
                    else:
                        check(f"qlen {qlen}: no warning", not warned and "WARNING" not in dev.banner,
                              f"{warned}")
                    dropped = send(dev, name, COUNT if qlen < 512 else 200)
                    accepted = None
                    for _ in range(40):
                        time.sleep(0.25)
                        accepted = dev.metric("countersink_increments_accepted_total")
                        if accepted + dropped >= COUNT:
                            break
                    full = dev.metric("countersink_uds_queue_full_total")
                    limit = dev.metric("countersink_uds_max_dgram_qlen")
                    day, minute = settle(dev, name, COUNT - dropped)
                    print(f"     qlen {qlen}: sent {COUNT}, client dropped {dropped}, "
                          f"accepted {accepted:.0f}, day {day}, minutes {minute}, "
                          f"queue_full reads {full:.0f}, high water "
                          f"{dev.metric('countersink_uds_queue_high_water'):.0f}")
                    check(f"qlen {qlen}: the socket's limit is exported", limit == qlen, f"{limit}")
                    check(f"qlen {qlen}: lost only what the client reports",
                          day == minute == COUNT - dropped, f"{day} {minute} {dropped}")
                    if qlen < 512:
                        check(f"qlen {qlen}: a loss shows as reads of a full queue",
                              dropped == 0 or full > 0, f"{full}")
                    else:
                        check(f"qlen {qlen}: exact totals", day == minute == COUNT and dropped == 0,
                              f"{day} {minute} {dropped}")
                finally:
                    dev.stop()
    finally:
        set_qlen(previous)
    failed = results.count(False)
    print(f"uds: {len(results) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
