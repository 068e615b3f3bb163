//! Each injected fault surfaces to the Rust driver (FallthroughRetryPolicy, non-idempotent
//! statements) as the error research §3 lists, and the store holds exactly what the rule says
//! was applied. Also: every-Nth and seeded-probability triggers, opcode and table filters,
//! runtime changes, and the statistics tables readable over CQL.

use std::time::{Duration, Instant};

use scylla::client::session::Session;
use scylla::errors::{DbError, ExecutionError, RequestAttemptError, WriteType};
use scylla::statement::Consistency;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;
use scylla::value::Counter;

use cqlsim::{FaultKind, FaultRule, Op};

use crate::common::{counter, session, start};

async fn prepared(s: &Session) -> PreparedStatement {
    let mut upd = s
        .prepare("UPDATE ks.counts SET c = c + ? WHERE pk = ?")
        .await
        .expect("prepare");
    upd.set_is_idempotent(false);
    upd.set_request_timeout(Some(Duration::from_millis(500)));
    upd
}

fn db(e: ExecutionError) -> DbError {
    match e {
        ExecutionError::LastAttemptError(RequestAttemptError::DbError(db, _)) => db,
        other => panic!("expected a DbError, got {other:?}"),
    }
}

/// Retries `upd` until the driver has a working connection again (after closes and downtime).
async fn until_ok(s: &Session, upd: &PreparedStatement) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match s.execute_unpaged(upd, (Counter(0), "probe")).await {
            Ok(_) => return,
            Err(e) if Instant::now() > deadline => panic!("driver never recovered: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

#[tokio::test(flavor = "current_thread")]
async fn db_errors_carry_the_right_bodies_and_outcomes() {
    let server = start().await;
    let s = session(server.local_addr()).await;
    let upd = prepared(&s).await;
    let cases: [(&str, DbError); 8] = [
        (
            "write-timeout,applied=yes",
            DbError::WriteTimeout {
                consistency: Consistency::LocalQuorum,
                received: 0,
                required: 1,
                write_type: WriteType::Counter,
            },
        ),
        (
            "write-timeout,applied=no",
            DbError::WriteTimeout {
                consistency: Consistency::LocalQuorum,
                received: 0,
                required: 1,
                write_type: WriteType::Counter,
            },
        ),
        (
            "unavailable",
            DbError::Unavailable {
                consistency: Consistency::LocalQuorum,
                required: 1,
                alive: 0,
            },
        ),
        ("overloaded,applied=yes", DbError::Overloaded),
        ("overloaded", DbError::Overloaded),
        ("server-error,applied=yes", DbError::ServerError),
        ("bootstrapping", DbError::IsBootstrapping),
        (
            "write-failure,applied=yes",
            DbError::WriteFailure {
                consistency: Consistency::LocalQuorum,
                received: 0,
                required: 1,
                numfailures: 1,
                write_type: WriteType::Counter,
            },
        ),
    ];
    for (i, (spec, want)) in cases.into_iter().enumerate() {
        let rule: FaultRule = format!("{spec},table=ks.counts,max=1")
            .parse()
            .expect("spec");
        let applied = rule.applied;
        server.set_faults(vec![rule]);
        let pk = format!("k{i}");
        let e = s
            .execute_unpaged(&upd, (Counter(7), pk.as_str()))
            .await
            .expect_err(spec);
        assert_eq!(db(e), want, "{spec}");
        assert_eq!(
            counter(&server, &pk, "c"),
            applied.then_some(7),
            "{spec}: store holds what was applied"
        );
        s.execute_unpaged(&upd, (Counter(1), pk.as_str()))
            .await
            .expect("max=1: the next write passes");
    }
    let st = server.stats();
    assert_eq!(
        st.fault(FaultKind::WriteTimeout),
        cqlsim::FaultStats {
            fired: 2,
            applied: 1
        }
    );
    assert_eq!(
        st.fault(FaultKind::Unavailable),
        cqlsim::FaultStats {
            fired: 1,
            applied: 0
        }
    );
    assert_eq!(
        st.fault(FaultKind::Overloaded),
        cqlsim::FaultStats {
            fired: 2,
            applied: 1
        }
    );
    let t = st.table("ks", "counts");
    assert_eq!(t.write_requests, 16, "every request counts, faulted or not");
    assert_eq!(
        t.writes_applied,
        8 + 4,
        "eight follow-ups plus four applied faults"
    );
    assert_eq!(t.counter_delta_sum, 8 + 4 * 7);

    // A COUNTER BATCH times out with write_type COUNTER too; op= limits the rule to BATCH.
    server.set_faults(vec!["write-timeout,op=batch".parse().expect("spec")]);
    let mut batch = Batch::new(BatchType::Counter);
    batch.append_statement(upd.clone());
    batch.set_is_idempotent(false);
    let e = s
        .batch(&batch, ((Counter(1), "bt"),))
        .await
        .expect_err("batch fault");
    assert!(matches!(
        db(e),
        DbError::WriteTimeout {
            write_type: WriteType::Counter,
            ..
        }
    ));
    s.execute_unpaged(&upd, (Counter(1), "bt"))
        .await
        .expect("EXECUTE is not matched by op=batch");
    assert_eq!(counter(&server, "bt", "c"), Some(1));
}

#[tokio::test(flavor = "current_thread")]
async fn no_reply_times_out_on_the_client() {
    let server = start().await;
    let s = session(server.local_addr()).await;
    let upd = prepared(&s).await;
    for applied in [true, false] {
        server.set_faults(vec![
            FaultRule::new(FaultKind::NoReply).applied(applied).max(1),
        ]);
        let pk = format!("nr{applied}");
        let e = s
            .execute_unpaged(&upd, (Counter(3), pk.as_str()))
            .await
            .expect_err("no reply");
        assert!(matches!(e, ExecutionError::RequestTimeout(_)), "{e:?}");
        assert_eq!(counter(&server, &pk, "c"), applied.then_some(3));
    }
}

#[tokio::test(flavor = "current_thread")]
async fn close_breaks_the_connection_before_or_after_applying() {
    let server = start().await;
    let s = session(server.local_addr()).await;
    let upd = prepared(&s).await;
    for applied in [true, false] {
        server.set_faults(vec![
            FaultRule::new(FaultKind::Close).applied(applied).max(1),
        ]);
        let pk = format!("cl{applied}");
        let e = s
            .execute_unpaged(&upd, (Counter(4), pk.as_str()))
            .await
            .expect_err("closed");
        assert!(
            matches!(
                e,
                ExecutionError::LastAttemptError(RequestAttemptError::BrokenConnectionError(_))
            ),
            "{e:?}"
        );
        assert_eq!(counter(&server, &pk, "c"), applied.then_some(4));
        until_ok(&s, &upd).await;
    }
}

#[tokio::test(flavor = "current_thread")]
async fn node_down_refuses_connections_until_it_comes_back() {
    let server = start().await;
    let s = session(server.local_addr()).await;
    let upd = prepared(&s).await;
    server.node_down();
    // Until the driver notices the closed connections a request may still fail as "broken";
    // once it has, nothing is sent at all: ConnectionPoolError.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let e = s
            .execute_unpaged(&upd, (Counter(1), "down"))
            .await
            .expect_err("node is down");
        if matches!(e, ExecutionError::ConnectionPoolError(_)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never saw ConnectionPoolError: {e:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(counter(&server, "down", "c"), None);
    server.node_up();
    until_ok(&s, &upd).await;
    s.execute_unpaged(&upd, (Counter(1), "down"))
        .await
        .expect("back up; re-prepared");
    assert_eq!(counter(&server, "down", "c"), Some(1));

    // The same through a rule: down for 300 ms, triggered by a write.
    server.set_faults(vec!["down,for=300ms,max=1".parse().expect("spec")]);
    let e = s
        .execute_unpaged(&upd, (Counter(1), "down"))
        .await
        .expect_err("taken down");
    assert!(
        matches!(
            e,
            ExecutionError::LastAttemptError(RequestAttemptError::BrokenConnectionError(_))
        ),
        "{e:?}"
    );
    until_ok(&s, &upd).await;
    assert!(!server.is_down());
    assert_eq!(
        counter(&server, "down", "c"),
        Some(1),
        "the faulted write was not applied"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn unprepared_delay_and_triggers() {
    let server = start().await;
    let s = session(server.local_addr()).await;
    let upd = prepared(&s).await;
    server.set_faults(vec![
        FaultRule::new(FaultKind::Unprepared).op(Op::Execute).max(1),
    ]);
    s.execute_unpaged(&upd, (Counter(1), "u"))
        .await
        .expect("re-prepared transparently");
    assert_eq!(counter(&server, "u", "c"), Some(1), "applied exactly once");
    assert_eq!(server.stats().fault(FaultKind::Unprepared).fired, 1);

    server.set_faults(vec!["delay,for=200ms".parse().expect("spec")]);
    let t0 = Instant::now();
    s.execute_unpaged(&upd, (Counter(1), "u"))
        .await
        .expect("delayed");
    assert!(t0.elapsed() >= Duration::from_millis(200));

    // every=3 on one table only: requests 3 and 6 on ks.counts fail, ks.other never does.
    server
        .execute(
            Some("ks"),
            "CREATE TABLE other (pk text PRIMARY KEY, c counter)",
        )
        .expect("table");
    let other = s
        .prepare("UPDATE ks.other SET c = c + ? WHERE pk = ?")
        .await
        .expect("prepare");
    server.set_faults(vec![
        "overloaded,table=ks.counts,every=3".parse().expect("spec"),
    ]);
    let mut failed = Vec::new();
    for i in 1..=6 {
        s.execute_unpaged(&other, (Counter(1), "x"))
            .await
            .expect("other table untouched");
        if s.execute_unpaged(&upd, (Counter(1), "n")).await.is_err() {
            failed.push(i);
        }
    }
    assert_eq!(failed, vec![3, 6]);
    server.clear_faults();
    assert!(server.faults().is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn probability_is_reproducible_with_the_seed() {
    async fn run() -> Vec<bool> {
        let server = start().await; // seed 42
        server.set_faults(vec!["server-error,p=0.3".parse().expect("spec")]);
        let s = session(server.local_addr()).await;
        let upd = prepared(&s).await;
        let mut out = Vec::new();
        for _ in 0..40 {
            out.push(s.execute_unpaged(&upd, (Counter(1), "p")).await.is_err());
        }
        out
    }
    let (a, b) = (run().await, run().await);
    assert_eq!(a, b, "same seed, same faults");
    assert!(a.iter().any(|x| *x) && a.iter().any(|x| !*x));
}

#[tokio::test(flavor = "current_thread")]
async fn statistics_are_readable_over_cql() {
    let server = start().await;
    let s = session(server.local_addr()).await;
    let upd = prepared(&s).await;
    server.set_faults(vec![
        "write-timeout,applied=yes,max=1".parse().expect("spec"),
    ]);
    let _ = s.execute_unpaged(&upd, (Counter(5), "s")).await;
    let mut batch = Batch::new(BatchType::Counter);
    batch.append_statement(upd.clone());
    batch.append_statement(upd.clone());
    s.batch(&batch, ((Counter(2), "s"), (Counter(-1), "t")))
        .await
        .expect("batch");
    let row = s
        .query_unpaged("SELECT write_requests, writes_applied, batches, rows_mutated, reads FROM cqlsim.stats WHERE keyspace_name = 'ks' AND table_name = 'counts'", ())
        .await
        .expect("stats table")
        .into_rows_result()
        .expect("rows")
        .single_row::<(i64, i64, i64, i64, i64)>()
        .expect("one row");
    assert_eq!(row, (2, 2, 1, 3, 0), "a BATCH is one request with two rows");
    let rows = server.execute(None, "SELECT counter_delta_sum FROM cqlsim.stats WHERE keyspace_name = 'ks' AND table_name = 'counts'").expect("varint");
    assert_eq!(
        rows.get(0, "counter_delta_sum"),
        Some(&cqlsim::Value::Varint(6))
    );
    let faults = s
        .query_unpaged("SELECT kind, fired, applied FROM cqlsim.fault_stats", ())
        .await
        .expect("fault stats")
        .into_rows_result()
        .expect("rows")
        .rows::<(String, i64, i64)>()
        .expect("typed")
        .map(|r| r.expect("row"))
        .collect::<Vec<_>>();
    assert_eq!(faults, vec![("write-timeout".to_string(), 1, 1)]);
    let e = s
        .query_unpaged(
            "UPDATE cqlsim.stats SET reads = 1 WHERE keyspace_name = 'a' AND table_name = 'b'",
            (),
        )
        .await
        .expect_err("read-only");
    assert_eq!(db(e), DbError::Unauthorized);
}

#[tokio::test(flavor = "current_thread")]
async fn a_delayed_stream_does_not_hold_up_the_others() {
    let server = start().await;
    server
        .execute(
            Some("ks"),
            "CREATE TABLE fast (pk text PRIMARY KEY, c counter)",
        )
        .expect("table");
    let s = session(server.local_addr()).await;
    let slow = prepared(&s).await;
    let mut fast = s
        .prepare("UPDATE ks.fast SET c = c + ? WHERE pk = ?")
        .await
        .expect("prepare");
    fast.set_is_idempotent(false);
    server.set_faults(vec![
        "delay,for=300ms,table=ks.counts".parse().expect("spec"),
    ]);
    let t0 = Instant::now();
    let a = async {
        s.execute_unpaged(&slow, (Counter(1), "a"))
            .await
            .expect("slow");
        t0.elapsed()
    };
    let b = async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        s.execute_unpaged(&fast, (Counter(1), "b"))
            .await
            .expect("fast");
        t0.elapsed()
    };
    let (ta, tb) = tokio::join!(a, b);
    assert!(ta >= Duration::from_millis(300), "{ta:?}");
    assert!(
        tb < ta,
        "the later request on another stream answered first: {tb:?} vs {ta:?}"
    );
}

/// Every DELETE is logged per table with its scope and partition, so a test can prove what
/// a tool deleted (whole partitions only, say) and what it never touched.
#[tokio::test(flavor = "current_thread")]
async fn deletes_are_logged_with_their_scope_and_partition() {
    let server = start().await;
    server
        .execute_script(
            None,
            "CREATE TABLE ks.series (k text, day date, minute smallint, c counter, PRIMARY KEY ((k, day), minute));",
        )
        .unwrap();
    let s = session(server.local_addr()).await;
    for (k, minute) in [("a", 1), ("a", 2), ("b", 1)] {
        s.query_unpaged(
            format!("UPDATE ks.series SET c = c + 1 WHERE k = '{k}' AND day = '2025-01-02' AND minute = {minute}"),
            (),
        )
        .await
        .unwrap();
    }
    let mut delete = s
        .prepare("DELETE FROM ks.series WHERE k = ? AND day = ?")
        .await
        .unwrap();
    delete.set_is_idempotent(true);
    s.execute_unpaged(&delete, ("a", scylla::value::CqlDate((1 << 31) + 20_090)))
        .await
        .unwrap();
    s.query_unpaged(
        "DELETE FROM ks.series WHERE k = 'b' AND day = '2025-01-02' AND minute = 1",
        (),
    )
    .await
    .unwrap();
    s.query_unpaged(
        "DELETE c FROM ks.series WHERE k = 'b' AND day = '2025-01-02' AND minute = 1",
        (),
    )
    .await
    .unwrap();
    let deletes = server.stats().table("ks", "series").deletes;
    let seen: Vec<(cqlsim::DeleteScope, Vec<String>, Vec<String>)> = deletes
        .into_iter()
        .map(|d| (d.scope, d.partition, d.clustering))
        .collect();
    assert_eq!(
        seen,
        [
            (
                cqlsim::DeleteScope::Partition,
                vec!["'a'".to_string(), "'2025-01-02'".to_string()],
                vec![]
            ),
            (
                cqlsim::DeleteScope::Rows,
                vec!["'b'".to_string(), "'2025-01-02'".to_string()],
                vec!["1".to_string()]
            ),
            (
                cqlsim::DeleteScope::Cells,
                vec!["'b'".to_string(), "'2025-01-02'".to_string()],
                vec!["1".to_string()]
            ),
        ]
    );
    assert!(
        server
            .execute(
                None,
                "SELECT c FROM ks.series WHERE k = 'a' AND day = '2025-01-02'"
            )
            .unwrap()
            .is_empty()
    );
}

/// Replies held by a `delay` are counted while they wait: the peak is how many requests
/// the client had in flight together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peak_of_delayed_replies_counts_concurrent_requests() {
    let server = start().await;
    let s = session(server.local_addr()).await;
    server.set_faults(vec![
        "delay,for=200ms,on=reads,table=ks.counts".parse().unwrap(),
    ]);
    let select = s
        .prepare("SELECT c FROM ks.counts WHERE pk = ?")
        .await
        .unwrap();
    s.execute_unpaged(&select, ("one",)).await.unwrap();
    assert_eq!(server.stats().peak_delayed_replies, 1);
    let reads = (0..8).map(|i| {
        let (s, select) = (&s, &select);
        async move { s.execute_unpaged(select, (format!("k{i}"),)).await }
    });
    for result in futures::future::join_all(reads).await {
        result.unwrap();
    }
    let stats = server.stats();
    assert_eq!(stats.peak_delayed_replies, 8);
    assert_eq!(stats.delayed_replies, 0);
}
