//! Last write wins by write time on regular tables, as in Cassandra: `USING TIMESTAMP`, the
//! frame's client timestamp, or the server's clock; equal times broken like
//! `Cells.resolveRegular` (tombstone first, then the greater value bytes, unsigned); deletions
//! shadow what was written at or before them, whenever it arrives; and a write held back by
//! `delay,execute=late` reaches the store after a later one.

use std::time::Duration;

use cqlsim::{FaultKind, FaultRule};
use scylla::errors::DbError;
use scylla::statement::unprepared::Statement;

use crate::common::{session, start};
use crate::counter_rules::db_error;

const TABLE: &str = "CREATE TABLE ks.totals (k text, minute smallint, writer text, v bigint, PRIMARY KEY (k, minute, writer))";

fn value(server: &cqlsim::Server, condition: &str) -> Option<i64> {
    server
        .execute(None, &format!("SELECT v FROM ks.totals WHERE {condition}"))
        .expect("select")
        .get_i64(0, "v")
}

fn row(minute: i16) -> String {
    format!("k = 'a' AND minute = {minute} AND writer = 'w'")
}

#[tokio::test(flavor = "current_thread")]
async fn the_later_write_time_wins_whatever_the_arrival_order() {
    let server = start().await;
    server.execute(None, TABLE).expect("create");
    let s = session(server.local_addr()).await;
    let insert = s
        .prepare(
            "INSERT INTO ks.totals (k, minute, writer, v) VALUES (?, ?, ?, ?) USING TIMESTAMP ?",
        )
        .await
        .expect("prepare");
    s.execute_unpaged(&insert, ("a", 1i16, "w", 20i64, 2_000i64))
        .await
        .expect("newer");
    s.execute_unpaged(&insert, ("a", 1i16, "w", 10i64, 1_000i64))
        .await
        .expect("older, arriving later");
    assert_eq!(value(&server, &row(1)), Some(20), "the older write lost");
    s.execute_unpaged(&insert, ("a", 1i16, "w", 30i64, 2_001i64))
        .await
        .expect("newest");
    assert_eq!(value(&server, &row(1)), Some(30));
}

/// Equal write times: a tombstone beats a value, and of two values the greater bytes win,
/// compared unsigned (a negative bigint starts with `ff`), in either arrival order.
#[tokio::test(flavor = "current_thread")]
async fn equal_write_times_are_broken_like_cassandra() {
    let server = start().await;
    server.execute(None, TABLE).expect("create");
    let s = session(server.local_addr()).await;
    let cases: [(i16, i64, i64, i64); 4] =
        [(1, 5, 7, 7), (2, 7, 5, 7), (3, 5, -1, -1), (4, -1, 5, -1)];
    for (minute, first, second, expected) in cases {
        for v in [first, second] {
            s.query_unpaged(
                format!(
                    "INSERT INTO ks.totals (k, minute, writer, v) VALUES ('a', {minute}, 'w', {v}) USING TIMESTAMP 100"
                ),
                (),
            )
            .await
            .expect("insert");
        }
        assert_eq!(
            value(&server, &row(minute)),
            Some(expected),
            "{first} then {second}"
        );
    }
    s.query_unpaged(
        "UPDATE ks.totals USING TIMESTAMP 100 SET v = null WHERE k = 'a' AND minute = 1 AND writer = 'w'",
        (),
    )
    .await
    .expect("tombstone at the same time");
    assert_eq!(value(&server, &row(1)), None, "the tombstone won the tie");
    s.query_unpaged(
        "INSERT INTO ks.totals (k, minute, writer, v) VALUES ('a', 1, 'w', 9) USING TIMESTAMP 100",
        (),
    )
    .await
    .expect("value at the tombstone's time");
    assert_eq!(value(&server, &row(1)), None, "and keeps winning it");
}

#[tokio::test(flavor = "current_thread")]
async fn deletions_shadow_older_writes_that_arrive_after_them() {
    let server = start().await;
    server.execute(None, TABLE).expect("create");
    let s = session(server.local_addr()).await;
    let run = |cql: String| {
        let s = &s;
        async move { s.query_unpaged(cql, ()).await.expect("statement") }
    };
    let insert = |minute: i16, v: i64, at: i64| {
        format!(
            "INSERT INTO ks.totals (k, minute, writer, v) VALUES ('a', {minute}, 'w', {v}) USING TIMESTAMP {at}"
        )
    };
    run(insert(1, 1, 10)).await;
    run(format!(
        "DELETE FROM ks.totals USING TIMESTAMP 15 WHERE {}",
        row(1)
    ))
    .await;
    assert_eq!(value(&server, &row(1)), None);
    run(insert(1, 2, 12)).await;
    assert_eq!(
        value(&server, &row(1)),
        None,
        "a row deleted at 15 stays deleted for 12"
    );
    run(insert(1, 3, 15)).await;
    assert_eq!(
        value(&server, &row(1)),
        None,
        "and for 15 (a deletion wins ties)"
    );
    run(insert(1, 4, 16)).await;
    assert_eq!(value(&server, &row(1)), Some(4), "16 comes after it");

    run(insert(2, 1, 10)).await;
    run("DELETE FROM ks.totals USING TIMESTAMP 100 WHERE k = 'a' AND minute = 3".into()).await;
    run(insert(3, 1, 50)).await;
    assert_eq!(
        value(&server, &row(3)),
        None,
        "under a deleted clustering prefix"
    );
    run("DELETE FROM ks.totals USING TIMESTAMP 200 WHERE k = 'a'".into()).await;
    run(insert(9, 1, 150)).await;
    let rows = server
        .execute(None, "SELECT * FROM ks.totals WHERE k = 'a'")
        .expect("select");
    assert!(
        rows.is_empty(),
        "the partition deletion at 200 covers everything: {rows:?}"
    );
    run(insert(9, 7, 201)).await;
    assert_eq!(value(&server, &row(9)), Some(7));
    run(format!(
        "DELETE v FROM ks.totals USING TIMESTAMP 300 WHERE {}",
        row(9)
    ))
    .await;
    run(format!(
        "UPDATE ks.totals USING TIMESTAMP 299 SET v = 8 WHERE {}",
        row(9)
    ))
    .await;
    assert_eq!(
        value(&server, &row(9)),
        None,
        "a deleted column shadows an older value"
    );
}

/// Without `USING TIMESTAMP`, the client timestamp of the frame decides; without either, the
/// server's clock, always increasing (so the last write to arrive wins); a statement's own
/// `USING TIMESTAMP` beats the frame's.
#[tokio::test(flavor = "current_thread")]
async fn client_timestamps_and_the_server_clock() {
    let server = start().await;
    server.execute(None, TABLE).expect("create");
    let s = session(server.local_addr()).await;
    let insert =
        |v: i64| format!("INSERT INTO ks.totals (k, minute, writer, v) VALUES ('a', 1, 'w', {v})");
    let at = |v: i64, ts: i64| {
        let mut st = Statement::new(insert(v));
        st.set_timestamp(Some(ts));
        st
    };
    s.query_unpaged(at(1, 5_000), ())
        .await
        .expect("client time 5000");
    s.query_unpaged(at(2, 4_000), ())
        .await
        .expect("client time 4000");
    assert_eq!(
        value(&server, &row(1)),
        Some(1),
        "the frame's client timestamp decides"
    );
    let mut own = Statement::new(format!("{} USING TIMESTAMP 6000", insert(3)));
    own.set_timestamp(Some(1));
    s.query_unpaged(own, ()).await.expect("own timestamp");
    assert_eq!(
        value(&server, &row(1)),
        Some(3),
        "USING TIMESTAMP beats the frame's"
    );
    for v in 10..20 {
        s.query_unpaged(insert(v), ()).await.expect("server time");
    }
    assert_eq!(
        value(&server, &row(1)),
        Some(19),
        "server times increase: the last one wins"
    );
    let future = i64::MAX / 2;
    s.query_unpaged(format!("{} USING TIMESTAMP {future}", insert(99)), ())
        .await
        .expect("far future");
    s.query_unpaged(insert(100), ()).await.expect("server time");
    assert_eq!(
        value(&server, &row(1)),
        Some(99),
        "the server's clock is behind it"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn batch_timestamps_follow_cassandras_rules() {
    let server = start().await;
    server.execute(None, TABLE).expect("create");
    let s = session(server.local_addr()).await;
    let e = s
        .query_unpaged(
            "BEGIN UNLOGGED BATCH USING TIMESTAMP 10 \
             INSERT INTO ks.totals (k, minute, writer, v) VALUES ('a', 1, 'w', 1) USING TIMESTAMP 20; \
             APPLY BATCH",
            (),
        )
        .await
        .expect_err("two timestamps");
    assert_eq!(
        db_error(&e),
        (
            DbError::Invalid,
            "Timestamp must be set either on BATCH or individual statements".into()
        )
    );
    s.query_unpaged(
        "BEGIN UNLOGGED BATCH USING TIMESTAMP 50 \
         INSERT INTO ks.totals (k, minute, writer, v) VALUES ('a', 1, 'w', 1); \
         INSERT INTO ks.totals (k, minute, writer, v) VALUES ('a', 2, 'w', 1); \
         APPLY BATCH",
        (),
    )
    .await
    .expect("batch at 50");
    s.query_unpaged(
        "BEGIN UNLOGGED BATCH \
         INSERT INTO ks.totals (k, minute, writer, v) VALUES ('a', 1, 'w', 2) USING TIMESTAMP 40; \
         INSERT INTO ks.totals (k, minute, writer, v) VALUES ('a', 2, 'w', 2) USING TIMESTAMP 60; \
         APPLY BATCH",
        (),
    )
    .await
    .expect("own timestamps");
    assert_eq!(
        (value(&server, &row(1)), value(&server, &row(2))),
        (Some(1), Some(2))
    );
    let insert = s
        .prepare("INSERT INTO ks.totals (k, minute, writer, v) VALUES ('a', 3, 'w', ?) USING TIMESTAMP ?")
        .await
        .expect("prepare");
    let e = s
        .execute_unpaged(&insert, (1i64, None::<i64>))
        .await
        .expect_err("null timestamp");
    assert_eq!(
        db_error(&e),
        (DbError::Invalid, "Invalid null value of timestamp".into())
    );
}

/// `delay,execute=late`: the first write is held and runs after the second. With server
/// times the late one wins (it is written last); with the writer's own timestamps the
/// newer one stays, which is what per-writer totals rely on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_write_loses_only_to_a_later_write_time() {
    let server = start().await;
    server.execute(None, TABLE).expect("create");
    let s = session(server.local_addr()).await;
    for (minute, timestamps, expected) in [(1i16, false, 1i64), (2, true, 2)] {
        server.set_faults(vec![
            FaultRule::new(FaultKind::Delay)
                .duration(Duration::from_millis(400))
                .late(true)
                .table("ks.totals")
                .max(1),
        ]);
        let text = |v: i64, at: i64| {
            let using = if timestamps {
                format!(" USING TIMESTAMP {at}")
            } else {
                String::new()
            };
            format!(
                "INSERT INTO ks.totals (k, minute, writer, v) VALUES ('a', {minute}, 'w', {v}){using}"
            )
        };
        let older = s.query_unpaged(text(1, 1_000), ());
        let newer = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            s.query_unpaged(text(2, 2_000), ()).await.expect("newer");
            assert_eq!(
                value(&server, &row(minute)),
                Some(2),
                "the newer write is there first"
            );
        };
        let (older, ()) = tokio::join!(older, newer);
        older.expect("the late write is answered");
        assert_eq!(
            server.stats().fault(FaultKind::Delay).fired,
            u64::from(minute as u16)
        );
        assert_eq!(
            value(&server, &row(minute)),
            Some(expected),
            "timestamps: {timestamps}"
        );
    }
    let bad = "delay,for=1s,execute=soon".parse::<FaultRule>();
    assert!(bad.is_err());
    assert!("write-timeout,execute=late".parse::<FaultRule>().is_err());
    assert!(
        "delay,for=1s,execute=late"
            .parse::<FaultRule>()
            .expect("spec")
            .late
    );
}

/// The `--data-dir` snapshot keeps every cell's write time: after a restart an older write
/// still loses.
#[tokio::test(flavor = "current_thread")]
async fn write_times_survive_a_snapshot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = cqlsim::Config {
        listen: "127.0.0.1:0".parse().expect("address"),
        data_dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    let server = cqlsim::Server::start(config.clone()).await.expect("start");
    server
        .execute_script(
            None,
            &format!(
                "{};\n{TABLE};\nINSERT INTO ks.totals (k, minute, writer, v) VALUES ('a', 1, 'w', 5) USING TIMESTAMP 100;",
                crate::common::KEYSPACE
            ),
        )
        .expect("schema and row");
    server.shutdown().await.expect("shutdown");
    let server = cqlsim::Server::start(config).await.expect("restart");
    server
        .execute(
            None,
            "INSERT INTO ks.totals (k, minute, writer, v) VALUES ('a', 1, 'w', 4) USING TIMESTAMP 99",
        )
        .expect("older");
    assert_eq!(value(&server, &row(1)), Some(5));
    server
        .execute(
            None,
            "INSERT INTO ks.totals (k, minute, writer, v) VALUES ('a', 1, 'w', 6) USING TIMESTAMP 101",
        )
        .expect("newer");
    assert_eq!(value(&server, &row(1)), Some(6));
}
