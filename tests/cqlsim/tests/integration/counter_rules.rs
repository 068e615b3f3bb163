//! Every Cassandra counter rule of research §4 returns the right error code and message to the
//! Rust driver, over plain QUERY, over PREPARE/EXECUTE (bound null, unset, i64::MIN) and in
//! batches of each type.

use scylla::client::session::Session;
use scylla::errors::{DbError, ExecutionError, PrepareError, RequestAttemptError};
use scylla::statement::batch::{Batch, BatchType};
use scylla::value::{Counter, MaybeUnset};

use crate::common::{counter, session, start};

pub(crate) fn db_error(e: &ExecutionError) -> (DbError, String) {
    match e {
        ExecutionError::LastAttemptError(RequestAttemptError::DbError(db, reason)) => {
            (db.clone(), reason.clone())
        }
        other => panic!("expected a DbError, got {other:?}"),
    }
}

async fn fails(s: &Session, cql: &str, code: DbError, msg: &str) {
    let e = s.query_unpaged(cql, ()).await.expect_err(cql);
    let (db, reason) = db_error(&e);
    assert_eq!((db, reason.as_str()), (code, msg), "{cql}");
}

async fn invalid(s: &Session, cql: &str, msg: &str) {
    fails(s, cql, DbError::Invalid, msg).await;
}

#[tokio::test(flavor = "current_thread")]
async fn ddl_rules() {
    let server = start().await;
    let s = session(server.local_addr()).await;
    invalid(
        &s,
        "CREATE TABLE ks.m (k int PRIMARY KEY, c counter, v int)",
        "Cannot mix counter and non counter columns in the same table",
    )
    .await;
    invalid(
        &s,
        "CREATE TABLE ks.m (k counter PRIMARY KEY, v counter)",
        "counter type is not supported for PRIMARY KEY column 'k'",
    )
    .await;
    invalid(
        &s,
        "CREATE TABLE ks.m (k int PRIMARY KEY, l list<counter>)",
        "Counters are not allowed inside collections: list<counter>",
    )
    .await;
    invalid(
        &s,
        "CREATE TABLE ks.m (k int PRIMARY KEY, c counter) WITH default_time_to_live = 60",
        "Cannot set default_time_to_live on a table with counters",
    )
    .await;
    invalid(
        &s,
        "ALTER TABLE ks.counts WITH default_time_to_live = 60",
        "Cannot set default_time_to_live on a table with counters",
    )
    .await;
    invalid(
        &s,
        "CREATE INDEX ON ks.counts (c)",
        "Secondary indexes on counter tables aren't supported",
    )
    .await;
    invalid(&s, "CREATE MATERIALIZED VIEW ks.mv AS SELECT * FROM ks.counts WHERE pk IS NOT NULL PRIMARY KEY (pk)", "Materialized views are disabled. Enable in cassandra.yaml to use.").await;
    s.query_unpaged("CREATE TABLE ks.ok (k int, s counter STATIC, ck int, c counter, PRIMARY KEY (k, ck)) WITH default_time_to_live = 0 AND comment = 'fine'", ())
        .await
        .expect("static counters and a zero TTL are allowed");
    fails(
        &s,
        "CREATE TABLE ks.ok (k int PRIMARY KEY, c counter)",
        DbError::AlreadyExists {
            keyspace: "ks".into(),
            table: "ok".into(),
        },
        "Cannot add already existing table \"ok\" to keyspace \"ks\"",
    )
    .await;
    s.query_unpaged(
        "CREATE TABLE IF NOT EXISTS ks.ok (k int PRIMARY KEY, c counter)",
        (),
    )
    .await
    .expect("IF NOT EXISTS");
}

#[tokio::test(flavor = "current_thread")]
async fn dml_rules_over_query() {
    let server = start().await;
    let s = session(server.local_addr()).await;
    s.query_unpaged("CREATE TABLE ks.reg (k int PRIMARY KEY, a int)", ())
        .await
        .expect("table");
    invalid(
        &s,
        "INSERT INTO ks.counts (pk, c) VALUES ('a', 1)",
        "INSERT statements are not allowed on counter tables, use UPDATE instead",
    )
    .await;
    invalid(&s, "UPDATE ks.counts SET c = 5 WHERE pk = 'a'", "Cannot set the value of counter column c (counters can only be incremented/decremented, not set)").await;
    invalid(
        &s,
        "UPDATE ks.reg SET a = a + 1 WHERE k = 1",
        "Invalid operation (a = a + 1) for non counter column a",
    )
    .await;
    fails(
        &s,
        "UPDATE ks.counts SET c = d + 1 WHERE pk = 'a'",
        DbError::SyntaxError,
        "Only expressions of the form X = X +<value> are supported.",
    )
    .await;
    invalid(
        &s,
        "UPDATE ks.counts USING TIMESTAMP 5 SET c = c + 1 WHERE pk = 'a'",
        "Cannot provide custom timestamp for counter updates",
    )
    .await;
    invalid(
        &s,
        "UPDATE ks.counts USING TTL 5 SET c = c + 1 WHERE pk = 'a'",
        "Cannot provide custom TTL for counter updates",
    )
    .await;
    invalid(
        &s,
        "UPDATE ks.counts SET c = c + 1 WHERE pk = 'a' IF EXISTS",
        "Conditional updates are not supported on counter tables",
    )
    .await;
    invalid(
        &s,
        "UPDATE ks.counts SET c = c + null WHERE pk = 'a'",
        "Invalid null value for counter increment/decrement",
    )
    .await;
    invalid(
        &s,
        "UPDATE ks.counts SET c = c + 1 WHERE c = 1",
        "Some partition key parts are missing: pk",
    )
    .await;
    invalid(
        &s,
        "UPDATE ks.counts SET c = c + 1 WHERE pk = 'a' AND c = 1",
        // Cassandra's message ends with a space.
        "Non PRIMARY KEY columns found in where clause: c ",
    )
    .await;
    invalid(
        &s,
        "UPDATE ks.counts SET x = x + 1 WHERE pk = 'a'",
        "Undefined column name x in table ks.counts",
    )
    .await;
    invalid(
        &s,
        "UPDATE ks.counts SET pk = pk + 1 WHERE pk = 'a'",
        "PRIMARY KEY part pk found in SET part",
    )
    .await;
    invalid(
        &s,
        "UPDATE ks.nope SET c = c + 1 WHERE pk = 'a'",
        "table nope does not exist",
    )
    .await;
    invalid(
        &s,
        "UPDATE nokeyspace.counts SET c = c + 1 WHERE pk = 'a'",
        "keyspace nokeyspace does not exist",
    )
    .await;
    invalid(
        &s,
        "UPDATE counts SET c = c + 1 WHERE pk = 'a'",
        "No keyspace has been specified. USE a keyspace, or explicitly specify keyspace.tablename",
    )
    .await;
    invalid(
        &s,
        "SELECT * FROM system_schema.scylla_tables",
        "table scylla_tables does not exist",
    )
    .await;
    invalid(
        &s,
        "SELECT * FROM system.peers_v2",
        "table peers_v2 does not exist",
    )
    .await;

    // Every accepted form, with Cassandra's lexing of `-3` as one integer.
    for cql in [
        "UPDATE ks.counts SET c = c + 10, d = d - 1 WHERE pk = 'f'",
        "update ks.counts set c = c -3 where pk = 'f';",
        "UPDATE ks.counts SET c += 2, d -= 4 WHERE pk IN ('f', 'g')",
        "UPDATE ks.\"counts\" SET \"c\" = \"c\" - -1 WHERE pk = 'f'",
    ] {
        s.query_unpaged(cql, ())
            .await
            .unwrap_or_else(|e| panic!("{cql}: {e}"));
    }
    assert_eq!(counter(&server, "f", "c"), Some(10 - 3 + 2 + 1));
    assert_eq!(counter(&server, "f", "d"), Some(-5));
    assert_eq!(counter(&server, "g", "c"), Some(2));
}

#[tokio::test(flavor = "current_thread")]
async fn bound_null_unset_min_and_wrapping() {
    let server = start().await;
    let s = session(server.local_addr()).await;
    let add = s
        .prepare("UPDATE ks.counts SET c = c + ? WHERE pk = ?")
        .await
        .expect("prepare");
    let sub = s
        .prepare("UPDATE ks.counts SET c = c - ? WHERE pk = ?")
        .await
        .expect("prepare");
    let e = s
        .execute_unpaged(&add, (None::<Counter>, "n"))
        .await
        .expect_err("null increment");
    assert_eq!(
        db_error(&e),
        (
            DbError::Invalid,
            "Invalid null value for counter increment".into()
        )
    );
    s.execute_unpaged(&add, (MaybeUnset::<Counter>::Unset, "u"))
        .await
        .expect("unset is a no-op");
    assert_eq!(counter(&server, "u", "c"), None, "unset created nothing");
    let e = s
        .execute_unpaged(&sub, (Counter(i64::MIN), "m"))
        .await
        .expect_err("negation overflow");
    assert_eq!(
        db_error(&e),
        (DbError::Invalid, "The negation of -9223372036854775808 overflows supported counter precision (signed 8 bytes integer)".into())
    );
    s.execute_unpaged(&add, (Counter(i64::MAX), "w"))
        .await
        .expect("max");
    s.execute_unpaged(&add, (Counter(1), "w"))
        .await
        .expect("wraps");
    assert_eq!(
        counter(&server, "w", "c"),
        Some(i64::MIN),
        "wraps like a Java long"
    );
    let st = server.stats().table("ks", "counts");
    assert_eq!(
        st.counter_delta_sum,
        i128::from(i64::MAX) + 1,
        "the i128 sum does not wrap"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn prepare_fails_like_cassandra() {
    let server = start().await;
    let s = session(server.local_addr()).await;
    for (cql, msg) in [
        (
            "INSERT INTO ks.counts (pk, c) VALUES (?, ?)",
            "INSERT statements are not allowed on counter tables, use UPDATE instead",
        ),
        (
            "UPDATE ks.counts SET c = ? WHERE pk = ?",
            "Cannot set the value of counter column c (counters can only be incremented/decremented, not set)",
        ),
        (
            "UPDATE ks.counts USING TTL ? SET c = c + ? WHERE pk = ?",
            "Cannot provide custom TTL for counter updates",
        ),
        (
            "SELECT * FROM ks.counts WHERE c = ?",
            "Cannot execute this query as it might involve data filtering and thus may have unpredictable performance. If you want to execute this query despite the performance unpredictability, use ALLOW FILTERING",
        ),
    ] {
        match s.prepare(cql).await {
            Err(PrepareError::AllAttemptsFailed {
                first_attempt: RequestAttemptError::DbError(db, reason),
            }) => {
                assert_eq!((db, reason.as_str()), (DbError::Invalid, msg), "{cql}");
            }
            other => panic!("{cql}: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn batch_rules() {
    let server = start().await;
    let s = session(server.local_addr()).await;
    s.query_unpaged("CREATE TABLE ks.reg (k text PRIMARY KEY, a int)", ())
        .await
        .expect("table");
    let cu = "UPDATE ks.counts SET c = c + 1 WHERE pk = 'b'";
    let ru = "UPDATE ks.reg SET a = 1 WHERE k = 'b'";
    invalid(
        &s,
        &format!("BEGIN COUNTER BATCH {cu}; {ru}; APPLY BATCH"),
        "Cannot include non-counter statement in a counter batch",
    )
    .await;
    invalid(
        &s,
        &format!("BEGIN BATCH {cu}; APPLY BATCH"),
        "Cannot include a counter statement in a logged batch",
    )
    .await;
    invalid(
        &s,
        &format!("BEGIN UNLOGGED BATCH {cu}; {ru}; APPLY BATCH"),
        "Counter and non-counter mutations cannot exist in the same batch",
    )
    .await;
    invalid(
        &s,
        &format!("BEGIN COUNTER BATCH USING TIMESTAMP 1 {cu}; APPLY BATCH"),
        "Cannot provide custom timestamp for counter BATCH",
    )
    .await;
    invalid(
        &s,
        &format!("BEGIN UNLOGGED BATCH USING TTL 1 {ru}; APPLY BATCH"),
        "Global TTL on the BATCH statement is not supported.",
    )
    .await;
    s.query_unpaged(format!("BEGIN UNLOGGED BATCH {cu}; {cu}; APPLY BATCH"), ())
        .await
        .expect("unlogged counter-only batch is accepted");
    s.query_unpaged(format!("BEGIN COUNTER BATCH {cu} APPLY BATCH"), ())
        .await
        .expect("counter batch");
    assert_eq!(counter(&server, "b", "c"), Some(3));

    let upd = s
        .prepare("UPDATE ks.counts SET c = c + ? WHERE pk = ?")
        .await
        .expect("prepare");
    let reg = s
        .prepare("UPDATE ks.reg SET a = ? WHERE k = ?")
        .await
        .expect("prepare");
    let mut logged = Batch::new(BatchType::Logged);
    logged.append_statement(upd.clone());
    let e = s
        .batch(&logged, ((Counter(1), "x"),))
        .await
        .expect_err("logged counter batch");
    assert_eq!(
        db_error(&e),
        (
            DbError::Invalid,
            "Cannot include a counter statement in a logged batch".into()
        )
    );
    let mut counter_batch = Batch::new(BatchType::Counter);
    counter_batch.append_statement(upd.clone());
    counter_batch.append_statement(reg.clone());
    let e = s
        .batch(&counter_batch, ((Counter(1), "x"), (1i32, "x")))
        .await
        .expect_err("mixed");
    assert_eq!(
        db_error(&e),
        (
            DbError::Invalid,
            "Cannot include non-counter statement in a counter batch".into()
        )
    );
    let mut unlogged = Batch::new(BatchType::Unlogged);
    unlogged.append_statement(upd.clone());
    unlogged.append_statement(upd);
    s.batch(&unlogged, ((Counter(2), "x"), (Counter(3), "x")))
        .await
        .expect("unlogged counter batch");
    assert_eq!(
        counter(&server, "x", "c"),
        Some(5),
        "failed batches applied nothing"
    );
}
