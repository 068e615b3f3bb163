"""The Spark job of deploy/spark gives the report and exit code of `countersink reconcile`.

Arguments: COUNTERSINK_BINARY SPARK_BIN_DIR WORK_DIR [HOST:PORT]
With HOST:PORT (a real Cassandra node) the binary applies its schema to a keyspace of its
own and `countersink serve` is the writer; without it `countersink dev` is the writer and
its embedded store (cqlsim) the store.

1. The writer receives SPARK_TEST_KEYS keys (default 5000) of the generic family, exact,
   with the key index on, three lines each over three minutes of a day two days ago
   (`limits.timestamp_max_past = "3d"` lets it accept them); the run waits until
   reconcile finds every key ok.
2. Seeded drift, by outside writers through the Python cassandra-driver: +7 on one key's
   minute row, -4 on another key's day row.
3. `countersink reconcile --format json` (one process) and the Spark job in local mode
   (`local[2,4]`: two task slots, a task tried up to 4 times), the binary and the
   configuration shipped with --files: the same JSON report (summary, listed keys with
   their verdicts and drift) and the same exit code, 3.
4. Again, with one part's countersink killed (SIGKILL) on its first attempt
   (kill_once.sh): Spark runs the part again and the result is the same.
5. With SPARK_MEASURE_RUNS=N: N more runs of each on the same data, medians of keys/s.

Reconcile reads with a configuration that differs from the writer's in
`limits.timestamp_max_past` only ("1h"), under which the day is long closed: every key
gets a closed-day verdict. Prints one line per check and the runs' keys/s; exits 1 if any
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


def config(max_past):
    return f"""[store]
contact_points = ["{host}:{port}"]
keyspace = "{keyspace}"

[state]
dir = "{work}/state"

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

# 2. Outside writers.
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

# 3. One process, then the Spark job.
code, whole, seconds, stderr = reconcile()
check(code == 3 and whole is not None, f"one process: exit {code} (3: unexplained drift)" + ("" if whole else f": {stderr[-300:]}"))
summary = whole[0]["summary"] if whole else {}
listed = {(tuple(k["key"]), k["granularity"]): (k["status"], k["drift"]["value"]) for k in (whole[0]["keys"] if whole else [])}
check(summary.get("keys") == keys and summary.get("statuses") == {"ok": 2 * keys - 2, "unexplained": 2}
      and whole[0]["closed"], f"one process: {keys} keys, two unexplained, the day closed: {summary}")
check(listed == {(("spark.test", "k:3"), "minute"): ("unexplained", 7), (("spark.test", "k:11"), "day"): ("unexplained", -4)},
      f"one process names the two outside writes: {listed}")
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

# 4. One part's countersink killed on its first attempt.
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

# 5. With SPARK_MEASURE_RUNS=N (N > 1): N more runs of each, alternating, on the same data;
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
