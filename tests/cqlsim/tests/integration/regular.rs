//! Regular tables (exact totals and leaderboards need them): INSERT/UPDATE/DELETE, null versus
//! unset, static columns, every supported type through the driver, and the SELECT forms
//! (IN, clustering equality and slices, ORDER BY, LIMIT, COUNT, column lists, full scans).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use scylla::value::{CqlDate, CqlTimestamp, CqlTimeuuid, MaybeUnset};
use uuid::Uuid;

use crate::common::{session, start};
use crate::counter_rules::db_error;
use scylla::errors::DbError;

#[tokio::test(flavor = "current_thread")]
async fn every_type_round_trips_through_the_driver() {
    let server = start().await;
    let s = session(server.local_addr()).await;
    s.query_unpaged(
        "CREATE TABLE ks.types (k int PRIMARY KEY, t text, v varchar, a ascii, b bigint, si smallint, ti tinyint, \
         bo boolean, d double, f float, dt date, ts timestamp, u uuid, tu timeuuid, bl blob, ip inet, \
         l list<int>, st set<text>, m map<text, bigint>, fm frozen<map<text, text>>)",
        (),
    )
    .await
    .expect("create");
    let ins = s
        .prepare("INSERT INTO ks.types (k, t, v, a, b, si, ti, bo, d, f) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
        .await
        .expect("prepare");
    let upd = s
        .prepare("UPDATE ks.types SET dt = ?, ts = ?, u = ?, tu = ?, bl = ?, ip = ?, l = ?, st = ?, m = ?, fm = ? WHERE k = ?")
        .await
        .expect("prepare");
    let u = Uuid::from_u128(0x1234_5678_9abc_4def_8123_4567_89ab_cdef);
    let tu = CqlTimeuuid::from(Uuid::from_u128(0x1ee0_0000_0000_1000_8000_0000_0000_0001));
    let ip: IpAddr = "::1".parse().expect("ip");
    let mut m = BTreeMap::new();
    m.insert("x".to_string(), -5i64);
    let mut fm = BTreeMap::new();
    fm.insert("k".to_string(), "v".to_string());
    let set: BTreeSet<String> = ["b".to_string(), "a".to_string()].into();
    s.execute_unpaged(
        &ins,
        (
            1i32,
            "tëxt",
            "vc",
            "asc",
            i64::MIN,
            -7i16,
            5i8,
            true,
            1.5f64,
            -2.25f32,
        ),
    )
    .await
    .expect("insert");
    s.execute_unpaged(
        &upd,
        (
            CqlDate((1u32 << 31) + 19_000),
            CqlTimestamp(1_700_000_000_123),
            u,
            tu,
            vec![0xcau8, 0xfe],
            ip,
            vec![3i32, 1, 2],
            set.clone(),
            m.clone(),
            fm.clone(),
            1i32,
        ),
    )
    .await
    .expect("update");
    let r = s
        .query_unpaged(
            "SELECT t, v, a, b, si, ti, bo, d, f, dt FROM ks.types WHERE k = 1",
            (),
        )
        .await
        .expect("select")
        .into_rows_result()
        .expect("rows");
    let row = r
        .single_row::<(
            String,
            String,
            String,
            i64,
            i16,
            i8,
            bool,
            f64,
            f32,
            CqlDate,
        )>()
        .expect("typed row");
    assert_eq!(
        row,
        (
            "tëxt".into(),
            "vc".into(),
            "asc".into(),
            i64::MIN,
            -7,
            5,
            true,
            1.5,
            -2.25,
            CqlDate((1u32 << 31) + 19_000)
        )
    );
    let r = s
        .query_unpaged(
            "SELECT ts, u, tu, bl, ip, l, st, m, fm FROM ks.types WHERE k = 1",
            (),
        )
        .await
        .expect("select")
        .into_rows_result()
        .expect("rows");
    type Rest = (
        CqlTimestamp,
        Uuid,
        CqlTimeuuid,
        Vec<u8>,
        IpAddr,
        Vec<i32>,
        BTreeSet<String>,
        BTreeMap<String, i64>,
        BTreeMap<String, String>,
    );
    let row = r.single_row::<Rest>().expect("typed row");
    assert_eq!(
        row,
        (
            CqlTimestamp(1_700_000_000_123),
            u,
            tu,
            vec![0xca, 0xfe],
            ip,
            vec![3, 1, 2],
            set,
            m,
            fm
        )
    );
    // Literals typed by cqlsh users.
    s.query_unpaged(
        "INSERT INTO ks.types (k, dt, ts, ip, u, bl, l, m) VALUES (2, '2024-02-29', '2024-02-29 12:00:00+0000', '10.0.0.1', 123e4567-e89b-12d3-a456-426614174000, 0xCAFE, [1, 2], {'a': 1})",
        (),
    )
    .await
    .expect("literal insert");
    let rows = server
        .execute(Some("ks"), "SELECT dt, ts FROM types WHERE k = 2")
        .expect("select");
    assert_eq!(
        rows.get(0, "dt").map(|v| format!("{v:?}")),
        Some(format!("Date({})", (1u32 << 31) + 19_782))
    );
    assert_eq!(
        rows.get(0, "ts").map(|v| format!("{v:?}")),
        Some("Timestamp(1709208000000)".into())
    );
}

#[tokio::test(flavor = "current_thread")]
async fn modifications_null_unset_statics_and_deletes() {
    let server = start().await;
    let s = session(server.local_addr()).await;
    s.query_unpaged("CREATE TABLE ks.lb (board text, score int, player text, note text, owner text STATIC, PRIMARY KEY (board, score, player)) WITH CLUSTERING ORDER BY (score DESC, player ASC)", ())
        .await
        .expect("create");
    let ins = s
        .prepare("INSERT INTO ks.lb (board, score, player, note) VALUES (?, ?, ?, ?)")
        .await
        .expect("prepare");
    for (score, player) in [(10, "ann"), (30, "bob"), (20, "cid"), (30, "abe")] {
        s.execute_unpaged(&ins, ("b1", score, player, Some("n")))
            .await
            .expect("insert");
    }
    s.execute_unpaged(&ins, ("b1", 20, "cid", MaybeUnset::<Option<&str>>::Unset))
        .await
        .expect("unset keeps the note");
    s.execute_unpaged(&ins, ("b1", 10, "ann", None::<&str>))
        .await
        .expect("null deletes the note");
    s.query_unpaged("UPDATE ks.lb SET owner = 'zed' WHERE board = 'b1'", ())
        .await
        .expect("static-only update");
    let rows = server
        .execute(
            Some("ks"),
            "SELECT score, player, note, owner FROM lb WHERE board = 'b1'",
        )
        .expect("select");
    let got: Vec<String> = rows.rows.iter().map(|r| format!("{:?}", r)).collect();
    assert_eq!(rows.len(), 4, "{got:?}");
    assert_eq!(
        rows.get(0, "player"),
        Some(&cqlsim::Value::Text("abe".into())),
        "score DESC then player ASC"
    );
    assert_eq!(rows.get(3, "note"), None, "null wrote a tombstone");
    assert_eq!(
        rows.get(2, "note"),
        Some(&cqlsim::Value::Text("n".into())),
        "unset left the note"
    );
    assert_eq!(
        rows.get(3, "owner"),
        Some(&cqlsim::Value::Text("zed".into())),
        "static seen on every row"
    );

    // Reads the leaderboard way: top N of a partition, a slice, ascending order, counts.
    let top: Vec<(i32, String)> = s
        .query_unpaged(
            "SELECT score, player FROM ks.lb WHERE board = 'b1' LIMIT 2",
            (),
        )
        .await
        .expect("top")
        .into_rows_result()
        .expect("rows")
        .rows::<(i32, String)>()
        .expect("typed")
        .map(|r| r.expect("row"))
        .collect();
    assert_eq!(top, vec![(30, "abe".into()), (30, "bob".into())]);
    let asc = server
        .execute(
            Some("ks"),
            "SELECT score FROM lb WHERE board = 'b1' AND score >= 20 ORDER BY score ASC",
        )
        .expect("slice");
    let scores: Vec<Option<i64>> = (0..asc.len())
        .map(|i| {
            asc.get(i, "score").map(|v| {
                if let cqlsim::Value::Int(n) = v {
                    i64::from(*n)
                } else {
                    -1
                }
            })
        })
        .collect();
    assert_eq!(scores, vec![Some(20), Some(30), Some(30)]);
    let n = server
        .execute(
            Some("ks"),
            "SELECT COUNT(*) FROM lb WHERE board IN ('b1', 'b2') AND score = 30",
        )
        .expect("count");
    assert_eq!(n.get_i64(0, "count"), Some(2));

    s.query_unpaged(
        "DELETE note FROM ks.lb WHERE board = 'b1' AND score = 30 AND player = 'bob'",
        (),
    )
    .await
    .expect("delete cell");
    s.query_unpaged("DELETE FROM ks.lb WHERE board = 'b1' AND score = 30", ())
        .await
        .expect("delete prefix");
    assert_eq!(
        server
            .execute(Some("ks"), "SELECT * FROM lb WHERE board = 'b1'")
            .expect("select")
            .len(),
        2
    );
    s.query_unpaged("DELETE FROM ks.lb WHERE board = 'b1'", ())
        .await
        .expect("delete partition");
    assert!(
        server
            .execute(Some("ks"), "SELECT * FROM lb")
            .expect("scan")
            .is_empty()
    );
    s.query_unpaged("TRUNCATE ks.counts", ())
        .await
        .expect("truncate");
}

#[tokio::test(flavor = "current_thread")]
async fn select_restrictions_follow_cassandra() {
    let server = start().await;
    let s = session(server.local_addr()).await;
    s.query_unpaged(
        "CREATE TABLE ks.e (a int, b int, c int, d int, v int, PRIMARY KEY ((a, b), c, d))",
        (),
    )
    .await
    .expect("create");
    for i in 0..4 {
        s.query_unpaged(
            format!("INSERT INTO ks.e (a, b, c, d, v) VALUES (1, 1, {i}, {i}, {i})"),
            (),
        )
        .await
        .expect("insert");
    }
    let cases = [
        (
            "SELECT * FROM ks.e WHERE a = 1",
            "Partition key parts: b must be restricted as other parts are",
        ),
        (
            "SELECT * FROM ks.e WHERE a = 1 AND b = 1 AND d = 1",
            "PRIMARY KEY column \"d\" cannot be restricted as preceding column \"c\" is not restricted",
        ),
        (
            "SELECT * FROM ks.e WHERE a = 1 AND b = 1 AND c > 1 AND d = 1",
            "Clustering column \"d\" cannot be restricted (preceding column \"c\" is restricted by a non-EQ relation)",
        ),
        (
            "SELECT * FROM ks.e WHERE v = 1",
            "Cannot execute this query as it might involve data filtering and thus may have unpredictable performance. If you want to execute this query despite the performance unpredictability, use ALLOW FILTERING",
        ),
        (
            "SELECT * FROM ks.e WHERE a = 1 AND b = 1 ORDER BY v",
            "Order by is currently only supported on the clustered columns of the PRIMARY KEY, got v",
        ),
        (
            "SELECT * FROM ks.e ORDER BY c",
            "ORDER BY is only supported when the partition key is restricted by an EQ or an IN.",
        ),
        (
            "SELECT * FROM ks.e WHERE a = 1 AND b = 1 LIMIT 0",
            "LIMIT must be strictly positive",
        ),
        (
            "SELECT nope FROM ks.e",
            "Undefined column name nope in table ks.e",
        ),
    ];
    for (cql, msg) in cases {
        let e = s.query_unpaged(cql, ()).await.expect_err(cql);
        assert_eq!(db_error(&e), (DbError::Invalid, msg.to_string()), "{cql}");
    }
    let filtered = server
        .execute(None, "SELECT v FROM ks.e WHERE v >= 2 ALLOW FILTERING")
        .expect("filtering");
    assert_eq!(filtered.len(), 2);
    let in_marker = s
        .prepare("SELECT v AS value FROM ks.e WHERE a = 1 AND b IN ? AND c IN (1, 3)")
        .await
        .expect("prepare IN ?");
    let r = s
        .execute_unpaged(&in_marker, (vec![1i32, 2],))
        .await
        .expect("IN ?")
        .into_rows_result()
        .expect("rows");
    assert_eq!(
        r.column_specs()
            .get_by_index(0)
            .map(|c| c.name().to_string()),
        Some("value".into())
    );
    let v: Vec<i32> = r
        .rows::<(i32,)>()
        .expect("typed")
        .map(|x| x.expect("row").0)
        .collect();
    assert_eq!(v, vec![1, 3]);
}
