"""The Spark job of deploy/spark gives the report and exit code of `countersink reconcile`.

Arguments: COUNTERSINK_BINARY SPARK_BIN_DIR WORK_DIR [HOST:PORT]
With HOST:PORT (a real Cassandra node) the binary applies its schema to a keyspace of its
own and `countersink serve` is the writer; without it `countersink dev` is the writer and
its embedded store (cqlsim) the store.

1. The writer receives SPARK_TEST_KEYS keys (default 5000) of the generic family, exact,
   with the key index on, three lines each over three minutes of a day two days ago
   (`limits.timestamp_max_past = "3d"` lets it accept them); the run waits until
   reconcile finds every key ok.
2. Unknown outcomes, as a lost answer or a lost request makes them: a second writer
   (`countersink serve`, its own writer id and state directory, `store.request_timeout =
   "1s"`) writes to the store through a CQL fault proxy (fault_proxy.py) that, for one
   minute write at a time, drops the store's answer (applied) or the request (not
   applied). k:20 gets +5 applied and +3 not, k:30 +5 applied and +5 not; the writer logs
   each as unknown and writes its outcome row to the store.
3. Seeded drift, by outside writers through the Python cassandra-driver: +7 on one key's
   minute row, -4 on another key's day row.
4. `countersink reconcile --format json` (one process): the two outside writes
   unexplained, k:20's minute row resolved with the verdict per request the proxy's log
   gives (+5 applied, +3 not), k:30's ambiguous, every other key ok. Then the Spark job in
   local mode (`local[2,4]`: two task slots, a task tried up to 4 times), the binary and
   the configuration shipped with --files: the same JSON report (summary, listed keys with
   their verdicts, drift and resolutions) and the same exit code, 3.
5. Again, with one part's countersink killed (SIGKILL) on its first attempt
   (kill_once.sh): Spark runs the part again and the result is the same.
6. With SPARK_MEASURE_RUNS=N: N more runs of each on the same data, medians of keys/s.

Reconcile reads with the first writer's configuration but for `limits.timestamp_max_past`
("1h"), under which the day is long closed: every key gets a closed-day verdict. Neither
reads the second writer's state directory: its unknown requests reach both through the
store's outcomes table. Prints one line per check and the runs' keys/s; exits 1 if any
check failed. Drops its keyspace at the end (real node).
"""

import atexit
import datetime
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time

from cassandra.cluster import Cluster

from fault_proxy import ANSWER, OP_RESULT, REQUEST, FaultProxy

binary, spark_bin, work = sys.argv[1], sys.argv[2], sys.argv[3]
real = sys.argv[4] if len(sys.argv) > 4 else None
keys = int(os.environ.get("SPARK_TEST_KEYS", "5000"))
here = os.path.dirname(os.path.abspath(__file__))
job = os.path.join(os.path.dirname(os.path.dirname(here)), "deploy", "spark", "countersink_reconcile.py")
passed = failed = 0


def check(ok, what):
    global passed, failed
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if ok:
        passed += 1
    else:
        failed += 1


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if real:
    host, port = real.rsplit(":", 1)
    port = int(port)
else:
    host, port = "127.0.0.1", free_port()
keyspace = f"spark_{secrets.token_hex(4)}"
tcp = f"127.0.0.1:{free_port()}"
day = (datetime.datetime.now(datetime.timezone.utc).date() - datetime.timedelta(days=2)).isoformat()
ten = int(datetime.datetime.fromisoformat(day + "T10:00:00+00:00").timestamp())


def config(max_past, contact=None, state="state", timeout=None, writer_id=None):
    return f"""[store]
contact_points = ["{contact or f'{host}:{port}'}"]
keyspace = "{keyspace}"
{f'request_timeout = "{timeout}"' if timeout else ""}

[state]
dir = "{work}/{state}"
{f'writer_id = "{writer_id}"' if writer_id else ""}

[limits]
timestamp_max_past = "{max_past}"

[flush]
interval = "1s"

[generic]
exact = true

[key_index]
enabled = true
"""


writer_config, reconcile_config = os.path.join(work, "writer.toml"), os.path.join(work, "countersink.toml")
with open(writer_config, "w") as f:
    f.write(config("3d"))
with open(reconcile_config, "w") as f:
    f.write(config("1h"))

# 1. The writer and its traffic.
listen = ["--udp", "off", "--metrics", "off", "--tcp", tcp, "--config", writer_config]
if real:
    out = subprocess.run([binary, "schema", "--apply", "--config", writer_config], capture_output=True, text=True)
    check(out.returncode == 0, f"schema --apply in {keyspace}" + (f": {out.stderr[-500:]}" if out.returncode else ""))
    writer = subprocess.Popen([binary, "serve", *listen], stderr=open(os.path.join(work, "writer.log"), "w"))
else:
    writer = subprocess.Popen([binary, "dev", "--cql-listen", f"{host}:{port}", *listen],
                              stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "writer.log"), "w"))


def stop_writer():
    if writer.poll() is None:
        writer.send_signal(signal.SIGTERM)
        writer.wait(60)


atexit.register(stop_writer)


def writer_log():
    with open(os.path.join(work, "writer.log")) as f:
        return f.read()


for _ in range(600):
    if "Connected to the store" in writer_log() or writer.poll() is not None:
        break
    time.sleep(0.1)
check("Connected to the store" in writer_log(), f"the writer ({'serve' if real else 'dev'}) connected to {host}:{port}")
lines = "".join(
    f"spark.test:{1 + (k + r) % 5}|c|#k:{k}|T{ten + 60 * r + k % 60}\n" for r in range(3) for k in range(keys)
)
out = subprocess.run([binary, "send", "--tcp", tcp], input=lines, capture_output=True, text=True)
check(out.returncode == 0, f"sent {3 * keys} lines {out.stderr[-300:]}")


def reconcile(*extra):
    started = time.monotonic()
    out = subprocess.run([binary, "reconcile", "--config", reconcile_config, "--day", day, "--format", "json", *extra],
                         capture_output=True, text=True)
    seconds = time.monotonic() - started
    try:
        return out.returncode, json.loads(out.stdout), seconds, out.stderr
    except ValueError:
        return out.returncode, None, seconds, out.stderr


settled = None
for _ in range(120):
    code, report, _, _ = reconcile()
    summary = report[0]["summary"] if report else {}
    if code == 0 and summary.get("keys") == keys and summary.get("statuses") == {"ok": 2 * keys}:
        settled = report
        break
    time.sleep(1)
check(settled is not None, f"every key written and ok before the drift: {summary}")
if real:
    stop_writer()
    check(writer.returncode == 0, "serve exits 0 after SIGTERM")

# 2. Unknown outcomes: a second writer (`countersink serve`, a writer id and a state
# directory of its own) whose store sits behind the fault proxy, with a client timeout of
# 1 s. Each of its writes below is one line, flushed alone, whose minute write the proxy
# makes unknown: the answer dropped (applied) or the request (not applied). k:20 gets +5
# applied and +3 not (one subset explains the drift of -3: resolved), k:30 +5 applied and
# +5 not (two do: ambiguous). Their day writes go through (ok). The writer is stopped
# before reconcile: its outcome rows in the store are all reconcile learns of them.
proxy = FaultProxy((host, port))
faulty_config = os.path.join(work, "faulty.toml")
with open(faulty_config, "w") as f:
    f.write(config("3d", contact=proxy.addr, state="state-faulty", timeout="1s", writer_id="faulty-writer"))
faulty_tcp = f"127.0.0.1:{free_port()}"
faulty_log = os.path.join(work, "faulty.log")
faulty = subprocess.Popen([binary, "serve", "--udp", "off", "--metrics", "off", "--tcp", faulty_tcp,
                           "--config", faulty_config], stderr=open(faulty_log, "w"))
atexit.register(lambda: faulty.poll() is None and faulty.kill())
for _ in range(600):
    if "Connected to the store" in open(faulty_log).read() or faulty.poll() is not None:
        break
    time.sleep(0.1)
check("Connected to the store" in open(faulty_log).read(), f"the faulty writer connected through the proxy {proxy.addr}")
unknown_log = os.path.join(work, "state-faulty", "unknown.jsonl")


def unknown_records():
    try:
        with open(unknown_log) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


minute_table = f"{keyspace}.counts_by_minute"
seeded = [(20, ANSWER, 5), (20, REQUEST, 3), (30, ANSWER, 5), (30, REQUEST, 5)]
for n, (k, swallow, delta) in enumerate(seeded, 1):
    proxy.swallow(minute_table, swallow)
    out = subprocess.run([binary, "send", "--tcp", faulty_tcp], input=f"spark.test:{delta}|c|#k:{k}|T{ten + 3600}\n",
                         capture_output=True, text=True)
    for _ in range(300):
        if len(unknown_records()) >= n:
            break
        time.sleep(0.1)
    swallowed = proxy.log()
    check(out.returncode == 0 and len(swallowed) == n and len(unknown_records()) == n,
          f"k:{k} +{delta}: the minute write's {swallow} dropped, logged unknown ({len(swallowed)} swallowed, "
          f"{len(unknown_records())} unknown records)")
proxy.clear()
swallowed = proxy.log()
check([e["swallow"] for e in swallowed] == [s for _, s, _ in seeded]
      and all(minute_table in e["query"] for e in swallowed)
      and [e["answer_opcode"] for e in swallowed if e["swallow"] == ANSWER] == [OP_RESULT, OP_RESULT],
      f"the proxy swallowed the four minute writes, the store answered the two it received: {swallowed}")
faulty.send_signal(signal.SIGTERM)
faulty.wait(60)
check(faulty.returncode == 0, "the faulty writer exits 0 after SIGTERM")
proxy.close()
# What the store did with each unknown request, by request id: applied when its answer was
# dropped, not when the request was (the records are in the order of the writes); k:20's
# are the verdicts reconcile must give.
records = unknown_records()
resolved = {r["request_id"]: swallow == ANSWER for r, (k, swallow, _) in zip(records, seeded) if k == 20}
check(len(records) == 4 and all(r["deltas"]["value"] == d and r["key"] == {"name": "spark.test", "tags": f"k:{k}"}
                                for r, (k, _, d) in zip(records, seeded)),
      f"the unknown records are the four writes, in order: {records}")

# 3. Outside writers.
cluster = Cluster([host], port=port)
session = cluster.connect()


def finish():
    """Drops the keyspace (real node) and stops the writer; also when a step raised (not
    from atexit: the driver's threads are gone by then)."""
    if real:
        session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}")
    cluster.shutdown()
    stop_writer()


def finish_on_error(kind, value, traceback):
    finish()
    sys.__excepthook__(kind, value, traceback)


sys.excepthook = finish_on_error
session.execute(f"UPDATE {keyspace}.counts_by_minute SET value = value + 7 "
                f"WHERE name = 'spark.test' AND tags = 'k:3' AND day = '{day}' AND minute = 600")
session.execute(f"UPDATE {keyspace}.counts_by_day SET value = value - 4 "
                f"WHERE name = 'spark.test' AND tags = 'k:11' AND month = '{day[:7]}' AND day = '{day}'")

# 4. One process, then the Spark job.
code, whole, seconds, stderr = reconcile()
check(code == 3 and whole is not None, f"one process: exit {code} (3: unexplained drift)" + ("" if whole else f": {stderr[-300:]}"))
summary = whole[0]["summary"] if whole else {}
listed = {(tuple(k["key"]), k["granularity"]): (k["status"], k["drift"]["value"], k["unknown_requests"], k["resolution"])
          for k in (whole[0]["keys"] if whole else [])}
check(summary.get("keys") == keys
      and summary.get("statuses") == {"ok": 2 * keys - 4, "unexplained": 2, "resolved": 1, "ambiguous": 1}
      and whole[0]["closed"], f"one process: {keys} keys, two unexplained, one resolved, one ambiguous, the day closed: {summary}")
check(listed == {(("spark.test", "k:3"), "minute"): ("unexplained", 7, 0, {}),
                 (("spark.test", "k:11"), "day"): ("unexplained", -4, 0, {}),
                 (("spark.test", "k:20"), "minute"): ("resolved", -3, 2, resolved),
                 (("spark.test", "k:30"), "minute"): ("ambiguous", -5, 2, {})},
      f"one process names the two outside writes, and resolves k:20's unknown requests as the store did them "
      f"({resolved}): {listed}")
print(f"one process: {keys} keys in {seconds:.2f} s ({keys / seconds:.0f} keys/s)", flush=True)

env = dict(os.environ, PATH=f"{spark_bin}:{os.environ['PATH']}", PYSPARK_PYTHON=os.path.join(spark_bin, "python"),
           SPARK_LOCAL_IP="127.0.0.1")


def spark(binary_name, shipped, name, extra_env=None):
    started = time.monotonic()
    command = [os.path.join(spark_bin, "spark-submit"), "--master", "local[2,4]",
               "--conf", "spark.ui.enabled=false",
               "--files", f"{shipped},{reconcile_config}",
               job, "--binary", binary_name, "--config", "countersink.toml", "--day", day, "--format", "json"]
    log = os.path.join(work, f"{name}.log")
    # Spark's log (and the job's lines in it) on stderr, the merged report alone on stdout.
    with open(log, "w") as err:
        out = subprocess.run(command, stdout=subprocess.PIPE, stderr=err, text=True, env=dict(env, **(extra_env or {})))
    seconds = time.monotonic() - started
    with open(log) as f:
        text = f.read()
    try:
        report = json.loads(out.stdout)
    except ValueError:
        report = None
        print(out.stdout[-2000:], text[-3000:])
    return out.returncode, report, seconds, text


code, report, seconds, log = spark("countersink", binary, "spark")
check(code == 3, f"Spark job: exit {code}, the one process's 3")
check(report == whole, "Spark job: the one process's report, key by key (summary, verdicts, drift)")
rate = [line.split("INFO reconcile: ", 1)[1] for line in log.splitlines() if "keys/s" in line]
print(f"Spark job (local[2,4], 16 parts): {rate[-1] if rate else '?'}; spark-submit {seconds:.1f} s in all", flush=True)

# 5. One part's countersink killed on its first attempt.
marker = os.path.join(work, "killed")
code, report, seconds, log = spark(
    "kill_once.sh", os.path.join(here, "kill_once.sh"), "spark-killed",
    {"COUNTERSINK_REAL": binary, "KILL_PART": "5/16", "KILL_MARKER": marker},
)
how = open(os.path.join(marker, "how")).read().strip() if os.path.exists(marker) else None
check(how is not None, f"part 5/16's countersink was killed on its first attempt ({how})")
check("part 5/16 (attempt 0)" in log and "exited with 137" in log, "Spark saw the task fail")
check(any("part 5/16:" in line and "attempt 1" in line for line in log.splitlines()), "Spark ran part 5/16 again (attempt 1)")
check(code == 3, f"Spark job with a killed task: exit {code}, the one process's 3")
check(report == whole, "Spark job with a killed task: the one process's report")

# 6. With SPARK_MEASURE_RUNS=N (N > 1): N more runs of each, alternating, on the same data;
# the medians of keys/s (the Spark job's from its parts' start to their collection, and
# from spark-submit's start to its exit) and their ratio to the one process's.
runs = int(os.environ.get("SPARK_MEASURE_RUNS", "1"))
if runs > 1:
    import statistics

    single, doubled, collected, submit = [], [], [], []
    for _ in range(runs):
        code, _, seconds, _ = reconcile()
        single.append(keys / seconds)
        # As many reads in flight as the job's two task slots have (2 x 64).
        code, _, seconds, _ = reconcile("--concurrency", "128")
        doubled.append(keys / seconds)
        code, _, seconds, log = spark("countersink", binary, "spark-measure")
        rate = [line for line in log.splitlines() if "keys/s" in line and "INFO reconcile:" in line]
        collected.append(float(rate[-1].rsplit("(", 1)[1].split()[0]) if rate else 0.0)
        submit.append(keys / seconds)
    one, two, parts, whole_submit = (statistics.median(v) for v in (single, doubled, collected, submit))
    print(f"measure: {keys} keys, {runs} runs each, medians: one process {one:.0f} keys/s; "
          f"one process with --concurrency 128 {two:.0f} keys/s ({two / one:.2f}x); "
          f"Spark job (local[2,4], 16 parts) {parts:.0f} keys/s ({parts / one:.2f}x), "
          f"with spark-submit's start and stop {whole_submit:.0f} keys/s ({whole_submit / one:.2f}x)", flush=True)

finish()
print(f"spark: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
