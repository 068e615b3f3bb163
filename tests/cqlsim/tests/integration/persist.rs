//! `--data-dir`: schema and data survive a clean shutdown and restart, exactly.

use crate::common::KEYSPACE;

fn dump(h: &cqlsim::Handle) -> Vec<String> {
    let mut out = Vec::new();
    for q in [
        "SELECT * FROM system_schema.columns WHERE keyspace_name = 'ks'",
        "SELECT keyspace_name, table_name, comment, flags FROM system_schema.tables WHERE keyspace_name = 'ks'",
        "SELECT * FROM ks.counts",
        "SELECT * FROM ks.lb",
        "SELECT * FROM ks.all_types",
    ] {
        out.push(format!("{:?}", h.execute(None, q).expect(q)));
    }
    out
}

#[tokio::test(flavor = "current_thread")]
async fn snapshot_on_shutdown_and_reload_on_start() {
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
                "{KEYSPACE};
                 CREATE TABLE ks.counts (pk text PRIMARY KEY, c counter, d counter);
                 CREATE TABLE ks.lb (board text, score int, \"Player\" text, note text, owner text STATIC,
                   PRIMARY KEY (board, score, \"Player\")) WITH CLUSTERING ORDER BY (score DESC, \"Player\" ASC)
                   AND comment = 'it''s a leaderboard';
                 CREATE TABLE ks.all_types (k int PRIMARY KEY, a ascii, b bigint, bl blob, bo boolean, d double,
                   dt date, f float, ip inet, l list<text>, m map<text, int>, s set<int>, si smallint, t text,
                   ti tinyint, ts timestamp, u uuid, tu timeuuid, v varint);
                 ALTER TABLE ks.all_types ADD extra text;
                 UPDATE ks.counts SET c = c + 9223372036854775807, d = d - 5 WHERE pk = 'a';
                 UPDATE ks.counts SET c = c + 1 WHERE pk = 'a';
                 UPDATE ks.counts SET d = d + 2 WHERE pk = 'only d';
                 INSERT INTO ks.lb (board, score, \"Player\", note) VALUES ('b', 10, 'Ann', 'x''y');
                 INSERT INTO ks.lb (board, score, \"Player\") VALUES ('b', 20, 'Bob');
                 UPDATE ks.lb SET note = 'no marker' WHERE board = 'b' AND score = 5 AND \"Player\" = 'Cy';
                 UPDATE ks.lb SET owner = 'zed' WHERE board = 'b';
                 INSERT INTO ks.all_types (k, a, b, bl, bo, d, dt, f, ip, l, m, s, si, t, ti, ts, u, tu, v, extra) VALUES
                   (1, 'asc', -9223372036854775808, 0xcafe, true, -1.5e300, '1969-12-31', 0.1, '::1', ['x', 'y'],
                    {{'k': -1}}, {{3, 1}}, -32768, 'tëxt \"q\"', -128, -5, 123e4567-e89b-12d3-a456-426614174000,
                    1ee00000-0000-1000-8000-000000000001, -170141183460469231731687303715884105728, 'e');
                 INSERT INTO ks.all_types (k, d, f) VALUES (2, NaN, -Infinity);"
            ),
        )
        .expect("setup");
    let before = dump(&server);
    server
        .shutdown()
        .await
        .expect("shutdown writes the snapshot");
    let snapshot =
        std::fs::read_to_string(dir.path().join("cqlsim-snapshot.cql")).expect("snapshot file");
    assert!(snapshot.contains("not for production"));

    let again = cqlsim::Server::start(config).await.expect("restart");
    assert_eq!(dump(&again), before, "snapshot:\n{snapshot}");
    assert_eq!(
        again
            .execute(None, "SELECT c FROM ks.counts WHERE pk = 'a'")
            .expect("c")
            .get_i64(0, "c"),
        Some(i64::MIN)
    );
    again.shutdown().await.expect("shutdown");
}
