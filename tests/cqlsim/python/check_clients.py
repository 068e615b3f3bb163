"""Checks the Python cassandra-driver against a running cqlsim (host and port as arguments).

Connects with the driver's default protocol negotiation (DSE_V2, DSE_V1, v5 are refused with
"unsupported protocol version", then v4), creates a counter table, increments it through a
prepared statement, a COUNTER batch and a literal `c = c -3`, reads it back, checks two
counter-rule violations and the store's own statistics. Prints one line per check; exits 1
if any failed.
"""

import sys

from cassandra import InvalidRequest
from cassandra.cluster import Cluster
from cassandra.query import BatchStatement, BatchType

host, port = sys.argv[1], int(sys.argv[2])
failed = 0


def check(ok, what):
    global failed
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failed += 1


def violation(session, cql, expected):
    try:
        session.execute(cql)
    except InvalidRequest as e:
        check(expected in str(e), f"InvalidRequest for {cql!r}: {e}")
        return
    check(False, f"{cql!r} should have been refused")


cluster = Cluster([host], port=port)
session = cluster.connect()
check(cluster.protocol_version == 4, f"negotiated protocol v{cluster.protocol_version}")
session.execute(
    "CREATE KEYSPACE IF NOT EXISTS pyks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}"
)
session.execute("CREATE TABLE IF NOT EXISTS pyks.hits (page text PRIMARY KEY, views counter, bytes counter)")
session.set_keyspace("pyks")
check("hits" in cluster.metadata.keyspaces["pyks"].tables, "table visible in driver metadata")

upd = session.prepare("UPDATE hits SET views = views + ?, bytes = bytes + ? WHERE page = ?")
session.execute(upd, (5, 100, "home"))
session.execute(upd, (-2, 50, "home"))
batch = BatchStatement(batch_type=BatchType.COUNTER)
batch.add(upd, (1, 1, "home"))
batch.add(upd, (7, 0, "about"))
session.execute(batch)
session.execute("UPDATE hits SET views = views -3 WHERE page = 'home'")
row = session.execute("SELECT views, bytes FROM hits WHERE page = %s", ("home",)).one()
check(row is not None and (row.views, row.bytes) == (1, 151), f"read back home = {row}")
check(session.execute("SELECT * FROM hits WHERE page = 'never'").one() is None, "unwritten row is absent")

violation(session, "INSERT INTO hits (page, views) VALUES ('x', 1)",
          "INSERT statements are not allowed on counter tables, use UPDATE instead")
violation(session, "UPDATE hits SET views = 5 WHERE page = 'x'",
          "Cannot set the value of counter column views")

stats = session.execute(
    "SELECT write_requests, batches, counter_delta_sum FROM cqlsim.stats "
    "WHERE keyspace_name = 'pyks' AND table_name = 'hits'"
).one()
# 2 EXECUTEs + 1 BATCH + 1 QUERY applied; the 2 refused writes still reached the store.
check((stats.write_requests, stats.batches, stats.counter_delta_sum) == (6, 1, 5 + 100 - 2 + 50 + 1 + 1 + 7 - 3),
      f"cqlsim.stats = {stats}")
cluster.shutdown()
print(f"python-driver: {0 if failed else 1} passed, {1 if failed else 0} failed")
sys.exit(1 if failed else 0)
