//! The CQL corpus: what countersink, cqlsh and the drivers send, and the mistakes users make
//! with counters. Cases run in this order against both stores, sharing keyspace `diff`, so
//! later cases read what earlier ones wrote; each case uses its own partition keys.
//!
//! A case marked `known` is one where cqlsim still differs from Cassandra on purpose; it must
//! have a row in the README's table of differences found by this test (checked by `known.rs`).

use scylla::statement::batch::BatchType;

use crate::outcome::Check;
use crate::step::{Step, Val};

/// A named sequence of steps.
pub(crate) struct Case {
    pub(crate) name: &'static str,
    pub(crate) steps: Vec<Step>,
    /// cqlsim differs here, and the README says how.
    pub(crate) known: bool,
}

fn case(name: &'static str, steps: Vec<Step>) -> Case {
    Case {
        name,
        steps,
        known: false,
    }
}

fn known(name: &'static str, steps: Vec<Step>) -> Case {
    Case {
        name,
        steps,
        known: true,
    }
}

fn q(cql: &'static str) -> Step {
    Step::Query(cql, Check::Exact)
}

fn shape(cql: &'static str) -> Step {
    Step::Query(cql, Check::Shape)
}

fn cols(cql: &'static str, columns: &'static [&'static str]) -> Step {
    Step::Query(cql, Check::Columns(columns))
}

fn p(cql: &'static str, values: Vec<Val>) -> Step {
    Step::Prepared(cql, values, Check::Exact)
}

fn batch(kind: BatchType, statements: Vec<(&'static str, Vec<Val>)>) -> Step {
    Step::Batch(kind, statements)
}

/// Statements run on both stores before the corpus, results not compared.
pub(crate) const SETUP: &[&str] = &[
    "DROP KEYSPACE IF EXISTS diff",
    "DROP KEYSPACE IF EXISTS diff_bad",
    "DROP KEYSPACE IF EXISTS diff_rf",
    "DROP KEYSPACE IF EXISTS diff_nts",
    "CREATE KEYSPACE diff WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
];

/// Every case, in order.
pub(crate) fn cases() -> Vec<Case> {
    use Val::*;
    vec![
        // ---- DDL
        case(
            "ddl_counter_tables",
            vec![
                q("CREATE TABLE diff.c (pk text PRIMARY KEY, c counter, d counter)"),
                q("CREATE TABLE diff.cc (pk text, ck int, c counter, PRIMARY KEY (pk, ck))"),
                q(
                    "CREATE TABLE diff.minutes (name text, day int, minute int, shard int, count counter, PRIMARY KEY ((name, day, shard), minute)) WITH CLUSTERING ORDER BY (minute DESC)",
                ),
                q("CREATE TABLE diff.r (k int PRIMARY KEY, v text, n int)"),
                q("CREATE TABLE diff.rc (k int, ck int, v text, PRIMARY KEY (k, ck))"),
            ],
        ),
        case(
            "ddl_if_not_exists_and_already_exists",
            vec![
                q("CREATE TABLE IF NOT EXISTS diff.c (pk text PRIMARY KEY, c counter, d counter)"),
                q("CREATE TABLE diff.c (pk text PRIMARY KEY, c counter)"),
                q(
                    "CREATE KEYSPACE diff WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
                ),
                q(
                    "CREATE KEYSPACE IF NOT EXISTS diff WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}",
                ),
            ],
        ),
        case(
            "ddl_counter_rules",
            vec![
                q("CREATE TABLE diff.bad (k int PRIMARY KEY, c counter, v int)"),
                q("CREATE TABLE diff.bad (k counter PRIMARY KEY, v counter)"),
                q(
                    "CREATE TABLE diff.bad (k int PRIMARY KEY, c counter) WITH default_time_to_live = 60",
                ),
                q("ALTER TABLE diff.c WITH default_time_to_live = 60"),
                q("ALTER TABLE diff.c ADD v int"),
                q("ALTER TABLE diff.c ADD e counter"),
                q("ALTER TABLE diff.r ADD e counter"),
                q("ALTER TABLE diff.c ADD c counter"),
                q("CREATE TABLE diff.bad (k int PRIMARY KEY, k text)"),
                q(
                    "CREATE TABLE diff.static_counter (k int, s counter STATIC, ck int, c counter, PRIMARY KEY (k, ck))",
                ),
            ],
        ),
        case(
            "ddl_counter_in_collection",
            vec![q(
                "CREATE TABLE diff.bad (k int PRIMARY KEY, l list<counter>)",
            )],
        ),
        case(
            "ddl_index_on_counter",
            vec![q("CREATE INDEX ON diff.c (c)")],
        ),
        case(
            "ddl_view_on_counter",
            vec![q(
                "CREATE MATERIALIZED VIEW diff.mv AS SELECT * FROM diff.c WHERE pk IS NOT NULL PRIMARY KEY (pk)",
            )],
        ),
        case(
            "ddl_missing_objects",
            vec![
                q("DROP TABLE diff.nope"),
                q("DROP TABLE IF EXISTS diff.nope"),
                q("DROP KEYSPACE nope_ks"),
                q("DROP KEYSPACE IF EXISTS nope_ks"),
                q("USE nope_ks"),
                q("SELECT * FROM diff.nope"),
                q("UPDATE nope_ks.c SET c = c + 1 WHERE pk = 'a'"),
                q("TRUNCATE diff.nope"),
                q("CREATE TABLE nope_ks.t (k int PRIMARY KEY)"),
                q("DROP TABLE nope_ks.t"),
                q("DROP TABLE IF EXISTS nope_ks.t"),
                q("ALTER TABLE diff.nope ADD v int"),
                q("ALTER TABLE diff.nope WITH comment = 'x'"),
                q("INSERT INTO diff.nope (k) VALUES (1)"),
                q("SELECT * FROM nope_ks.t"),
                q("USE diff"),
                q("SELECT * FROM nope"),
            ],
        ),
        case(
            "ddl_keyspace_options",
            vec![
                q("CREATE KEYSPACE diff_bad WITH replication = {'replication_factor': 1}"),
                q("CREATE KEYSPACE diff_rf WITH replication = {'class': 'SimpleStrategy'}"),
                q(
                    "SELECT keyspace_name, durable_writes, replication FROM system_schema.keyspaces WHERE keyspace_name = 'diff_rf'",
                ),
                q("DROP KEYSPACE diff_rf"),
                q(
                    "CREATE KEYSPACE diff_bad WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 'x'}",
                ),
                q(
                    "CREATE KEYSPACE diff_bad WITH replication = {'class': 'NoSuchStrategy', 'replication_factor': 1}",
                ),
                q(
                    "CREATE KEYSPACE diff_nts WITH replication = {'class': 'NetworkTopologyStrategy', 'datacenter1': 1} AND durable_writes = false",
                ),
                q(
                    "SELECT keyspace_name, durable_writes, replication FROM system_schema.keyspaces WHERE keyspace_name = 'diff_nts'",
                ),
                q("DROP KEYSPACE diff_nts"),
            ],
        ),
        known(
            "ddl_syntax_error",
            vec![q("CREATE TABEL diff.x (k int PRIMARY KEY)")],
        ),
        case(
            "ddl_use_and_truncate",
            vec![
                q("USE diff"),
                q("CREATE TABLE diff.t (k int PRIMARY KEY, c counter)"),
                q("UPDATE diff.t SET c = c + 1 WHERE k = 1"),
                q("TRUNCATE diff.t"),
                q("SELECT * FROM diff.t"),
                q("DROP TABLE diff.t"),
            ],
        ),
        // ---- counter UPDATE forms
        case(
            "counter_update_forms",
            vec![
                q("UPDATE diff.c SET c = c + 1 WHERE pk = 'forms'"),
                q("UPDATE diff.c SET c = c - 3 WHERE pk = 'forms'"),
                q("UPDATE diff.c SET c += 10 WHERE pk = 'forms'"),
                q("UPDATE diff.c SET c -= 2 WHERE pk = 'forms'"),
                q("UPDATE diff.c SET c = c -3 WHERE pk = 'forms'"),
                q("UPDATE diff.c SET c = c + 5, d = d - 5 WHERE pk = 'forms'"),
                q("UPDATE diff.c SET c = c + 1 WHERE pk IN ('forms', 'forms2')"),
                q("SELECT * FROM diff.c WHERE pk IN ('forms', 'forms2')"),
            ],
        ),
        case(
            "counter_update_prepared",
            vec![
                p(
                    "UPDATE diff.c SET c = c + ? WHERE pk = ?",
                    vec![Counter(7), Text("prep")],
                ),
                p(
                    "UPDATE diff.c SET c = c - ? WHERE pk = ?",
                    vec![Counter(2), Text("prep")],
                ),
                p(
                    "UPDATE diff.c SET c = c + ?, d = d + ? WHERE pk = ?",
                    vec![Counter(1), Unset, Text("prep")],
                ),
                p(
                    "UPDATE diff.c SET c = c + :inc WHERE pk = :key",
                    vec![Counter(4), Text("prep")],
                ),
                p(
                    "SELECT pk, c, d FROM diff.c WHERE pk = ?",
                    vec![Text("prep")],
                ),
            ],
        ),
        case(
            "counter_update_clustering",
            vec![
                p(
                    "UPDATE diff.minutes SET count = count + ? WHERE name = ? AND day = ? AND shard = ? AND minute = ?",
                    vec![Counter(3), Text("views"), Int(20000), Int(0), Int(61)],
                ),
                p(
                    "UPDATE diff.minutes SET count = count + ? WHERE name = ? AND day = ? AND shard = ? AND minute = ?",
                    vec![Counter(4), Text("views"), Int(20000), Int(0), Int(62)],
                ),
                p(
                    "UPDATE diff.minutes SET count = count + ? WHERE name = ? AND day = ? AND shard = ? AND minute = ?",
                    vec![Counter(5), Text("views"), Int(20000), Int(1), Int(61)],
                ),
                p(
                    "SELECT minute, count FROM diff.minutes WHERE name = ? AND day = ? AND shard = ? AND minute >= ? AND minute < ?",
                    vec![Text("views"), Int(20000), Int(0), Int(0), Int(1440)],
                ),
                q(
                    "SELECT shard, minute, count FROM diff.minutes WHERE name = 'views' AND day = 20000 AND shard IN (1, 0)",
                ),
            ],
        ),
        case(
            "counter_wraps_like_a_java_long",
            vec![
                p(
                    "UPDATE diff.c SET c = c + ? WHERE pk = ?",
                    vec![Counter(i64::MAX), Text("wrap")],
                ),
                p(
                    "UPDATE diff.c SET c = c + ? WHERE pk = ?",
                    vec![Counter(1), Text("wrap")],
                ),
                q("SELECT c FROM diff.c WHERE pk = 'wrap'"),
            ],
        ),
        // ---- invalid counter operations
        case(
            "counter_invalid_set_and_insert",
            vec![
                q("UPDATE diff.c SET c = 5 WHERE pk = 'bad'"),
                q("INSERT INTO diff.c (pk, c) VALUES ('bad', 1)"),
                q("UPDATE diff.c SET c = d + 1 WHERE pk = 'bad'"),
                q("UPDATE diff.r SET n = n + 1 WHERE k = 1"),
                q("UPDATE diff.c SET c = c + 1 WHERE pk = 'bad' IF EXISTS"),
                q("UPDATE diff.c USING TTL 10 SET c = c + 1 WHERE pk = 'bad'"),
                q("UPDATE diff.c USING TIMESTAMP 10 SET c = c + 1 WHERE pk = 'bad'"),
                q("UPDATE diff.c SET c = c + 1"),
                q("UPDATE diff.c SET c = c + 1 WHERE c = 1"),
                q("UPDATE diff.c SET c = c + 1 WHERE pk = 'bad' AND c = 1"),
                q("UPDATE diff.c SET nope = nope + 1 WHERE pk = 'bad'"),
                q("UPDATE diff.c SET c = c + 1 WHERE nope = 'bad'"),
                q("INSERT INTO diff.r (k, nope) VALUES (1, 1)"),
                q("DELETE nope FROM diff.r WHERE k = 1"),
                q("SELECT * FROM diff.c WHERE pk = 'bad'"),
            ],
        ),
        case(
            "counter_invalid_bound_values",
            vec![
                p(
                    "UPDATE diff.c SET c = c + ? WHERE pk = ?",
                    vec![Null, Text("bound")],
                ),
                p(
                    "UPDATE diff.c SET c = c + ? WHERE pk = ?",
                    vec![Unset, Text("bound")],
                ),
                p(
                    "UPDATE diff.c SET c = c - ? WHERE pk = ?",
                    vec![Counter(i64::MIN), Text("bound")],
                ),
                p(
                    "UPDATE diff.c SET c = c + ? WHERE pk = ?",
                    vec![Counter(1), Null],
                ),
                p(
                    "UPDATE diff.c SET c = c + ? WHERE pk = ?",
                    vec![Counter(1), Unset],
                ),
                q("UPDATE diff.c SET c = c + null WHERE pk = 'bound'"),
                q("SELECT * FROM diff.c WHERE pk = 'bound'"),
            ],
        ),
        // ---- batches
        case(
            "batch_counter_rules",
            vec![
                batch(
                    BatchType::Counter,
                    vec![
                        (
                            "UPDATE diff.c SET c = c + ? WHERE pk = ?",
                            vec![Counter(1), Text("b1")],
                        ),
                        ("UPDATE diff.c SET c = c + 2 WHERE pk = 'b2'", vec![]),
                    ],
                ),
                batch(
                    BatchType::Unlogged,
                    vec![(
                        "UPDATE diff.c SET c = c + ? WHERE pk = ?",
                        vec![Counter(10), Text("b1")],
                    )],
                ),
                batch(
                    BatchType::Logged,
                    vec![(
                        "UPDATE diff.c SET c = c + ? WHERE pk = ?",
                        vec![Counter(100), Text("b1")],
                    )],
                ),
                batch(
                    BatchType::Counter,
                    vec![
                        (
                            "UPDATE diff.c SET c = c + ? WHERE pk = ?",
                            vec![Counter(1000), Text("b1")],
                        ),
                        (
                            "INSERT INTO diff.r (k, v) VALUES (?, ?)",
                            vec![Int(1), Text("x")],
                        ),
                    ],
                ),
                batch(
                    BatchType::Unlogged,
                    vec![
                        (
                            "UPDATE diff.c SET c = c + ? WHERE pk = ?",
                            vec![Counter(1000), Text("b1")],
                        ),
                        (
                            "INSERT INTO diff.r (k, v) VALUES (?, ?)",
                            vec![Int(1), Text("x")],
                        ),
                    ],
                ),
                batch(
                    BatchType::Counter,
                    vec![(
                        "UPDATE diff.c SET c = c + ? WHERE pk = ?",
                        vec![Null, Text("b1")],
                    )],
                ),
                q("SELECT pk, c FROM diff.c WHERE pk IN ('b1', 'b2')"),
            ],
        ),
        case(
            "batch_text_forms",
            vec![
                q(
                    "BEGIN COUNTER BATCH UPDATE diff.c SET c = c + 1 WHERE pk = 'bt'; UPDATE diff.c SET d = d + 1 WHERE pk = 'bt'; APPLY BATCH",
                ),
                q("BEGIN BATCH UPDATE diff.c SET c = c + 1 WHERE pk = 'bt'; APPLY BATCH"),
                q(
                    "BEGIN COUNTER BATCH USING TIMESTAMP 5 UPDATE diff.c SET c = c + 1 WHERE pk = 'bt'; APPLY BATCH",
                ),
                q("BEGIN UNLOGGED BATCH UPDATE diff.c SET c = c + 1 WHERE pk = 'bt'; APPLY BATCH"),
                q(
                    "BEGIN BATCH INSERT INTO diff.r (k, v) VALUES (2, 'two'); UPDATE diff.r SET n = 2 WHERE k = 2; APPLY BATCH",
                ),
                q("SELECT * FROM diff.c WHERE pk = 'bt'"),
                q("SELECT * FROM diff.r WHERE k = 2"),
            ],
        ),
        // One partition's rows in one batch are applied with one lookup of the partition:
        // the write times still decide, whatever the order, across a deletion and with
        // another partition's row between them.
        case(
            "batch_rows_of_one_partition_reconcile_by_write_time",
            vec![
                q("BEGIN UNLOGGED BATCH \
                     INSERT INTO diff.rc (k, ck, v) VALUES (30, 1, 'one') USING TIMESTAMP 10; \
                     INSERT INTO diff.rc (k, ck, v) VALUES (30, 1, 'older') USING TIMESTAMP 5; \
                     INSERT INTO diff.rc (k, ck, v) VALUES (30, 2, 'two') USING TIMESTAMP 10; \
                     INSERT INTO diff.rc (k, ck, v) VALUES (31, 1, 'other') USING TIMESTAMP 10; \
                     INSERT INTO diff.rc (k, ck, v) VALUES (30, 3, 'three') USING TIMESTAMP 10; \
                     DELETE FROM diff.rc USING TIMESTAMP 11 WHERE k = 30 AND ck = 2; \
                     INSERT INTO diff.rc (k, ck, v) VALUES (30, 2, 'again') USING TIMESTAMP 12; \
                     DELETE FROM diff.rc USING TIMESTAMP 11 WHERE k = 30 AND ck = 3; \
                     APPLY BATCH"),
                q("SELECT * FROM diff.rc WHERE k = 30"),
                q("SELECT * FROM diff.rc WHERE k = 31"),
            ],
        ),
        case(
            "counter_delete_and_missing_rows",
            vec![
                q("UPDATE diff.c SET c = c + 1, d = d + 1 WHERE pk = 'del'"),
                q("DELETE d FROM diff.c WHERE pk = 'del'"),
                q("SELECT * FROM diff.c WHERE pk = 'del'"),
                q("DELETE FROM diff.c WHERE pk = 'del'"),
                q("SELECT * FROM diff.c WHERE pk = 'del'"),
                q("SELECT c FROM diff.c WHERE pk = 'never-written'"),
                q("SELECT COUNT(*) FROM diff.cc WHERE pk = 'never-written'"),
                q("UPDATE diff.c SET pk = pk + 1 WHERE pk = 'del'"),
                q("UPDATE diff.cc SET c = c + 1 WHERE pk = 'del'"),
                q("UPDATE diff.cc SET c = c + 1 WHERE pk = 'del' AND ck > 1"),
            ],
        ),
        case(
            "types_roundtrip",
            vec![
                q(
                    "CREATE TABLE diff.types (k int PRIMARY KEY, t text, a ascii, b bigint, s smallint, ti tinyint, vi varint, bo boolean, db double, f float, d date, ts timestamp, u uuid, tu timeuuid, bl blob, i inet, l list<int>, st set<text>, m map<text, int>, fl frozen<list<text>>)",
                ),
                q(
                    "INSERT INTO diff.types (k, t, a, b, s, ti, vi, bo, db, f, d, ts, u, tu, bl, i, l, st, m, fl) VALUES (1, 'tê', 'ascii', -9223372036854775808, -32768, 127, 170141183460469231731687303715884105727, true, 1.5, -0.25, '2024-02-29', '2024-02-29 12:00:00+0000', 6b0f1f6e-2f0a-4a7e-9d2e-0b6f1c1a2b3c, 50554d6e-29bb-11e5-b345-feff819cdc9f, 0xcafe, '::1', [3, 1, 2], {'b', 'a'}, {'z': 1, 'y': 2}, ['x'])",
                ),
                q("SELECT * FROM diff.types WHERE k = 1"),
                q("INSERT INTO diff.types (k, db, f) VALUES (2, NaN, -Infinity)"),
                q("SELECT k, db, f, t, l FROM diff.types WHERE k = 2"),
                q("INSERT INTO diff.types (k, ti) VALUES (3, 128)"),
                q("INSERT INTO diff.types (k, s) VALUES (3, 40000)"),
                q("INSERT INTO diff.types (k, b) VALUES (3, 9223372036854775808)"),
                q("INSERT INTO diff.types (k) VALUES (3000000000)"),
                q("UPDATE diff.c SET c = c + 9223372036854775808 WHERE pk = 'big'"),
                q("INSERT INTO diff.types (k, d) VALUES (3, '2023-02-29')"),
                q("INSERT INTO diff.types (k, d) VALUES (3, '2024-13-01')"),
                q("INSERT INTO diff.types (k, ts) VALUES (3, '2024-02-30 00:00:00+0000')"),
                q("SELECT ts FROM diff.types WHERE k = 3"),
                q("INSERT INTO diff.types (k, a) VALUES (4, 'a😀')"),
                q("INSERT INTO diff.types (k, i) VALUES (3, 'not-an-address')"),
                q("INSERT INTO diff.types (k, a) VALUES (3, 'é')"),
                q("INSERT INTO diff.types (k, d) VALUES (3, '2024-02-30')"),
                q("INSERT INTO diff.types (k, t) VALUES (3, 5)"),
            ],
        ),
        // ---- null and unset on regular tables
        case(
            "null_and_unset",
            vec![
                p(
                    "INSERT INTO diff.r (k, v, n) VALUES (?, ?, ?)",
                    vec![Int(10), Text("ten"), Int(10)],
                ),
                p(
                    "INSERT INTO diff.r (k, v, n) VALUES (?, ?, ?)",
                    vec![Int(10), Unset, Null],
                ),
                q("SELECT * FROM diff.r WHERE k = 10"),
                p("UPDATE diff.r SET v = ? WHERE k = ?", vec![Null, Int(10)]),
                q("SELECT k, v, n FROM diff.r WHERE k = 10"),
                p(
                    "INSERT INTO diff.r (k, v) VALUES (?, ?)",
                    vec![Null, Text("x")],
                ),
                p(
                    "INSERT INTO diff.r (k, v) VALUES (?, ?)",
                    vec![Unset, Text("x")],
                ),
                p("SELECT * FROM diff.r WHERE k = ?", vec![Null]),
                p("SELECT * FROM diff.r WHERE k = ?", vec![Unset]),
                q("INSERT INTO diff.r (k, v) VALUES (null, 'x')"),
                q("DELETE n FROM diff.r WHERE k = 10"),
                q("SELECT * FROM diff.r WHERE k = 10"),
            ],
        ),
        // ---- last write wins by write time (writer_totals relies on it)
        case(
            "regular_last_write_wins_by_write_time",
            vec![
                // An older write arriving after a newer one loses.
                q("INSERT INTO diff.r (k, n) VALUES (400, 20) USING TIMESTAMP 2000"),
                q("INSERT INTO diff.r (k, n) VALUES (400, 10) USING TIMESTAMP 1000"),
                q("SELECT n FROM diff.r WHERE k = 400"),
                // Equal times: the greater value wins, its bytes compared unsigned.
                q("INSERT INTO diff.r (k, n) VALUES (401, 7) USING TIMESTAMP 100"),
                q("INSERT INTO diff.r (k, n) VALUES (401, 5) USING TIMESTAMP 100"),
                q("INSERT INTO diff.r (k, n) VALUES (402, 5) USING TIMESTAMP 100"),
                q("INSERT INTO diff.r (k, n) VALUES (402, -1) USING TIMESTAMP 100"),
                q("SELECT n FROM diff.r WHERE k = 401"),
                q("SELECT n FROM diff.r WHERE k = 402"),
                // A row deleted at 15 stays deleted for writes at 12 and 15, and comes
                // back for a write at 16.
                q("INSERT INTO diff.r (k, n) VALUES (403, 1) USING TIMESTAMP 10"),
                q("DELETE FROM diff.r USING TIMESTAMP 15 WHERE k = 403"),
                q("INSERT INTO diff.r (k, n) VALUES (403, 2) USING TIMESTAMP 12"),
                q("INSERT INTO diff.r (k, n) VALUES (403, 3) USING TIMESTAMP 15"),
                q("SELECT n FROM diff.r WHERE k = 403"),
                q("INSERT INTO diff.r (k, n) VALUES (403, 4) USING TIMESTAMP 16"),
                q("SELECT n FROM diff.r WHERE k = 403"),
            ],
        ),
        // ---- SELECT forms
        case(
            "select_forms",
            vec![
                q("INSERT INTO diff.rc (k, ck, v) VALUES (1, 1, 'a')"),
                q("INSERT INTO diff.rc (k, ck, v) VALUES (1, 2, 'b')"),
                q("INSERT INTO diff.rc (k, ck, v) VALUES (1, 3, 'c')"),
                q("INSERT INTO diff.rc (k, ck, v) VALUES (2, 1, 'd')"),
                q("SELECT * FROM diff.rc WHERE k = 1"),
                q("SELECT v AS value, ck FROM diff.rc WHERE k = 1 AND ck > 1"),
                q("SELECT ck, v FROM diff.rc WHERE k = 1 AND ck >= 2 AND ck < 3"),
                q("SELECT ck, v FROM diff.rc WHERE k = 1 ORDER BY ck DESC LIMIT 2"),
                q("SELECT ck, v FROM diff.rc WHERE k = 1 AND ck IN (3, 1)"),
                q("SELECT COUNT(*) FROM diff.rc WHERE k = 1"),
                q("SELECT count(*) AS n FROM diff.rc"),
                q("SELECT * FROM diff.rc WHERE v = 'b' ALLOW FILTERING"),
                q("SELECT * FROM diff.rc WHERE v = 'b'"),
                q("SELECT * FROM diff.rc WHERE ck = 1"),
                q("SELECT nope FROM diff.rc WHERE k = 1"),
                q("SELECT * FROM diff.rc WHERE nope = 1"),
                q("SELECT * FROM diff.rc WHERE k = 1 ORDER BY nope"),
                p("SELECT nope FROM diff.rc WHERE k = ?", vec![Int(1)]),
                q("SELECT * FROM diff.rc WHERE k = 1 LIMIT 0"),
                Step::Paged("SELECT ck, v FROM diff.rc WHERE k = 1", 2, Check::Exact),
            ],
        ),
        case(
            "select_prepared_metadata",
            vec![
                p(
                    "SELECT pk, c, d FROM diff.c WHERE pk IN ?",
                    vec![TextList(&["forms", "prep"])],
                ),
                p(
                    "SELECT * FROM diff.rc WHERE k = ? AND ck > ? LIMIT ?",
                    vec![Int(1), Int(1), Int(5)],
                ),
                p(
                    "SELECT minute, count FROM diff.minutes WHERE name = ? AND day = ? AND shard = ? AND minute >= ? AND minute < ?",
                    vec![Text("views"), Int(20000), Int(1), Int(0), Int(1440)],
                ),
                p(
                    "UPDATE diff.minutes SET count = count + ? WHERE name = ? AND day = ? AND shard = ? AND minute = ?",
                    vec![Counter(1), Text("meta"), Int(1), Int(0), Int(0)],
                ),
                p("SELECT * FROM diff.r WHERE k = ?", vec![BigInt(1)]),
            ],
        ),
        // ---- what cqlsh and the drivers read
        case(
            "system_local_driver_queries",
            vec![
                cols(
                    "SELECT host_id, rpc_address, data_center, rack, tokens, cluster_name FROM system.local WHERE key='local'",
                    &["data_center", "rack"],
                ),
                shape("SELECT schema_version FROM system.local WHERE key='local'"),
                cols(
                    "SELECT cluster_name, data_center, rack, partitioner, cql_version, native_protocol_version FROM system.local",
                    &["data_center", "rack", "partitioner"],
                ),
            ],
        ),
        known(
            "system_local_star",
            vec![shape("SELECT * FROM system.local WHERE key='local'")],
        ),
        known(
            "system_local_versions",
            vec![q(
                "SELECT release_version, cql_version FROM system.local WHERE key='local'",
            )],
        ),
        case(
            "system_peers_driver_query",
            vec![shape(
                "SELECT host_id, rpc_address, data_center, rack, tokens FROM system.peers",
            )],
        ),
        known(
            "system_peers_v2",
            vec![shape("SELECT * FROM system.peers_v2")],
        ),
        case(
            "system_schema_keyspaces",
            vec![
                q(
                    "SELECT keyspace_name, replication, durable_writes FROM system_schema.keyspaces WHERE keyspace_name = 'diff'",
                ),
                p(
                    "SELECT keyspace_name, replication, durable_writes FROM system_schema.keyspaces where keyspace_name in ?",
                    vec![TextList(&["diff"])],
                ),
            ],
        ),
        case(
            "system_schema_tables_and_columns",
            vec![
                q(
                    "SELECT keyspace_name, table_name FROM system_schema.tables WHERE keyspace_name = 'diff'",
                ),
                q(
                    "SELECT keyspace_name, table_name, column_name, kind, position, type FROM system_schema.columns WHERE keyspace_name = 'diff'",
                ),
                q(
                    "SELECT column_name, clustering_order, kind, position, type FROM system_schema.columns WHERE keyspace_name = 'diff' AND table_name = 'minutes'",
                ),
                q(
                    "SELECT keyspace_name, view_name, base_table_name FROM system_schema.views WHERE keyspace_name = 'diff'",
                ),
                q(
                    "SELECT keyspace_name, type_name, field_names, field_types FROM system_schema.types WHERE keyspace_name = 'diff'",
                ),
            ],
        ),
        known(
            "system_schema_tables_star",
            vec![shape(
                "SELECT * FROM system_schema.tables WHERE keyspace_name = 'diff' AND table_name = 'c'",
            )],
        ),
        case(
            "system_schema_scylla_tables_absent",
            vec![
                q("SELECT keyspace_name, table_name, partitioner FROM system_schema.scylla_tables"),
                q("SELECT keyspace_name, initial_tablets FROM system_schema.scylla_keyspaces"),
            ],
        ),
        known(
            "system_virtual_schema",
            vec![shape("SELECT * FROM system_virtual_schema.keyspaces")],
        ),
    ]
}
