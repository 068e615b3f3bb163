"""What countersink wrote to a real Cassandra node, read back by the Python cassandra-driver and cqlsh.

Arguments: HOST PORT COUNTERSINK_BINARY CQLSH. In a keyspace of its own, the real binary applies
its schema (`schema --apply`), `serve` receives counter lines from `countersink send` over its
Unix stream socket (timestamps in two minutes, a configured family and the generic tables,
a negative delta, a multi-value line), and SIGTERM flushes them. Then every row of the four
tables is read with the driver (plain and prepared SELECTs, the tables' metadata) and with
cqlsh, and compared with the totals computed here from the lines sent. The keyspace is
dropped at the end. Prints one line per check; exits 1 if any failed.
"""

import atexit
import datetime
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time

from cassandra.cluster import Cluster

host, port, binary, cqlsh = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
keyspace = f"readback_{secrets.token_hex(4)}"
failed = 0


def check(ok, what):
    global failed
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failed += 1


def day_minute(unix):
    moment = datetime.datetime.fromtimestamp(unix, datetime.timezone.utc)
    return moment.date().isoformat(), moment.hour * 60 + moment.minute


# Two whole minutes in the past hour (the accepted window), so each key has two minute rows.
base = int(time.time()) // 60 * 60 - 120
t1, t2 = base + 10, base + 70
lines = (
    [f"page.views:3|c|#page_id:home|T{t1}"] * 2
    + [f"page.views:1|c|#page_id:home|T{t2}"] * 4
    + [f"page.bytes:1500|c|#page_id:home|T{t1}", f"page.views:7|c|#page_id:about|T{t2}"]
    + [f"api.calls:5|c|#route:/x,env:prod|T{t1}"] * 3
    + [f"api.calls:-2|c|#env:prod,route:/x|T{t2}", f"api.calls:1:1:1|c|#route:/x,env:prod|T{t2}"]
)
# What the tables must hold: (key..., day, minute) -> value(s), summed from the lines above.
views_minute, views_day, generic_minute, generic_day = {}, {}, {}, {}


def add(table, key, values):
    old = table.get(key, (0,) * len(values))
    table[key] = tuple(a + b for a, b in zip(old, values))


for page, views, nbytes, t in [
    ("home", 6, 1500, t1), ("home", 4, 0, t2), ("about", 7, 0, t2),
]:
    day, minute = day_minute(t)
    add(views_minute, (page, day, minute), (views, nbytes))
    add(views_day, (page, day[:7], day), (views, nbytes))
for value, t in [(15, t1), (1, t2)]:
    day, minute = day_minute(t)
    add(generic_minute, ("api.calls", "env:prod,route:/x", day, minute), (value,))
    add(generic_day, ("api.calls", "env:prod,route:/x", day[:7], day), (value,))

work = tempfile.mkdtemp(prefix="countersink-readback-")
config = os.path.join(work, "countersink.toml")
with open(config, "w") as f:
    f.write(f"""[store]
contact_points = ["{host}:{port}"]
keyspace = "{keyspace}"

[[family]]
name = "views"
minute_table = "{keyspace}.views_by_minute"
day_table = "{keyspace}.views_by_day"
key = ["page_id"]
[family.columns]
"page.views" = "views"
"page.bytes" = "bytes"
""")


def run(*args, stdin=None):
    out = subprocess.run([binary, *args], input=stdin, capture_output=True, text=True)
    check(out.returncode == 0, f"countersink {args[0]} exits 0" + (f": {out.stderr}" if out.returncode else ""))
    return out.stdout


run("schema", "--apply", "--config", config)
sock = os.path.join(work, "stream.sock")
serve = subprocess.Popen(
    [binary, "serve", "--config", config, "--udp", "off", "--uds-stream", sock, "--metrics", "off",
     "--flush-interval", "1h", "--state-dir", os.path.join(work, "state")],
    stderr=subprocess.PIPE, text=True,
)
atexit.register(lambda: serve.poll() is None and serve.kill())
log = []
connected = threading.Event()


def read_log():
    for line in serve.stderr:
        log.append(line)
        if "Connected to the store" in line:
            connected.set()


threading.Thread(target=read_log, daemon=True).start()
check(connected.wait(60), "serve connected to the store")
run("send", "--uds-stream", sock, stdin="\n".join(lines) + "\n")
time.sleep(0.5)  # let the receiver read the stream before the signal
serve.send_signal(signal.SIGTERM)
check(serve.wait(60) == 0, "serve exits 0 after SIGTERM (the final flush)")
check(not any(" ERROR " in line or " WARN " in line for line in log), "serve logged no warning or error")

cluster = Cluster([host], port=port)
session = cluster.connect()
tables = cluster.metadata.keyspaces[keyspace].tables
for table, counters in [("views_by_minute", ["views", "bytes"]), ("views_by_day", ["views", "bytes"]),
                        ("counts_by_minute", ["value"]), ("counts_by_day", ["value"])]:
    kinds = {c: tables[table].columns[c].cql_type for c in counters}
    check(set(kinds.values()) == {"counter"}, f"{table}: counter columns in the driver's metadata {kinds}")


# Each table: its SELECT, the types of its key columns, and what it must hold.
TABLES = [
    ("views_by_minute", "page_id, day, minute", "views, bytes", (str, str, int), views_minute),
    ("views_by_day", "page_id, month, day", "views, bytes", (str, str, str), views_day),
    ("counts_by_minute", "name, tags, day, minute", "value", (str, str, str, int), generic_minute),
    ("counts_by_day", "name, tags, month, day", "value", (str, str, str, str), generic_day),
]


def keyed(cells, types):
    """{key: counters} from one row; a counter column never incremented reads null, taken as 0."""
    key = tuple(t(c) for t, c in zip(types, cells))
    return key, tuple(0 if c in (None, "null") else int(c) for c in cells[len(types):])


for table, key, counters, types, expected in TABLES:
    got = dict(keyed(list(row), types) for row in session.execute(f"SELECT {key}, {counters} FROM {keyspace}.{table}"))
    check(got == expected, f"driver: {table} holds {got}" + ("" if got == expected else f", expected {expected}"))

# As an application reads one cell: prepared, with the date bound as a date.
day, minute = day_minute(t1)
prepared = session.prepare(f"SELECT views FROM {keyspace}.views_by_minute WHERE page_id = ? AND day = ? AND minute = ?")
row = session.execute(prepared, ("home", datetime.date.fromisoformat(day), minute)).one()
check(row is not None and row.views == 6, f"driver: prepared read of home at {day} minute {minute} = {row}")

for table, key, counters, types, expected in TABLES:
    select = f"SELECT {key}, {counters} FROM {keyspace}.{table};"
    out = subprocess.run([cqlsh, host, str(port), "--connect-timeout", "20", "--request-timeout", "20", "-e", select],
                         capture_output=True, text=True)
    check(out.returncode == 0, f"cqlsh exits 0: {select}" + (f" {out.stderr}" if out.returncode else ""))
    header = [c.strip() for c in f"{key}, {counters}".split(",")]
    got = {}
    for line in out.stdout.splitlines():
        cells = [c.strip() for c in line.split("|")]
        # Skip the header, the rule under it, the "(N rows)" line and anything else.
        if len(cells) == len(header) and cells != header:
            k, v = keyed(cells, types)
            got[k] = v
    check(got == expected, f"cqlsh: {table} holds {got}" + ("" if got == expected else f", expected {expected}"))

session.execute(f"DROP KEYSPACE {keyspace}")
cluster.shutdown()
print(f"readback: {1 if failed == 0 else 0} passed, {1 if failed else 0} failed")
sys.exit(1 if failed else 0)
