//! The Rust driver's whole life cycle against cqlsim: session start with the default full
//! metadata fetch (and no warnings), DDL with schema agreement, prepared UPDATE, COUNTER
//! BATCH, SELECT, paging, re-prepare after a lost cache, and the statistics that result.

use std::time::Duration;

use futures::TryStreamExt;
use scylla::statement::batch::{Batch, BatchType};
use scylla::value::Counter;

use crate::common::{capture_warnings, counter, session, start};

#[tokio::test(flavor = "current_thread")]
async fn session_fetches_full_metadata_without_warnings() {
    let (logs, _guard) = capture_warnings();
    let server = start().await;
    let session = session(server.local_addr()).await;
    // DDL over the wire: SCHEMA_CHANGE result, schema agreement, metadata refresh.
    session
        .query_unpaged("CREATE TABLE ks.views (page text, day date, minute smallint, views counter, PRIMARY KEY ((page, day), minute)) WITH CLUSTERING ORDER BY (minute DESC)", ())
        .await
        .expect("create table");
    session.refresh_metadata().await.expect("metadata refresh");
    let state = session.get_cluster_state();
    let ks = state
        .get_keyspace("ks")
        .expect("keyspace ks in driver metadata");
    let views = ks
        .tables
        .get("views")
        .expect("table views in driver metadata");
    assert_eq!(
        views.partition_key,
        vec!["page".to_string(), "day".to_string()]
    );
    assert_eq!(views.clustering_key, vec!["minute".to_string()]);
    assert!(ks.tables.contains_key("counts"));
    // Give the control connection's background refreshes time to log anything they would.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let text = logs.text();
    assert!(!text.contains("Initial metadata read failed"), "{text}");
    assert!(
        !text.contains("WARN") && !text.contains("ERROR"),
        "driver logged:\n{text}"
    );
    // The capture itself works: an event from this runtime's thread is recorded.
    tracing::warn!(target: "scylla", "capture probe");
    assert!(logs.text().contains("capture probe"));
    drop(session);
    server.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "current_thread")]
async fn prepared_update_counter_batch_and_select_round_trip() {
    let server = start().await;
    let session = session(server.local_addr()).await;
    let mut upd = session
        .prepare("UPDATE ks.counts SET c = c + ? WHERE pk = ?")
        .await
        .expect("prepare");
    upd.set_is_idempotent(false);
    assert!(upd.is_token_aware(), "pk_indexes reported");
    session
        .execute_unpaged(&upd, (Counter(5), "a"))
        .await
        .expect("update");
    session
        .execute_unpaged(&upd, (Counter(-2), "a"))
        .await
        .expect("update");

    let mut batch = Batch::new(BatchType::Counter);
    batch.append_statement(upd.clone());
    batch.append_statement(upd.clone());
    batch.set_is_idempotent(false);
    session
        .batch(&batch, ((Counter(10), "a"), (Counter(-7), "b")))
        .await
        .expect("counter batch");

    let sel = session
        .prepare("SELECT pk, c, d FROM ks.counts WHERE pk = ?")
        .await
        .expect("prepare select");
    let row = session
        .execute_unpaged(&sel, ("a",))
        .await
        .expect("select")
        .into_rows_result()
        .expect("rows")
        .single_row::<(String, Option<Counter>, Option<Counter>)>()
        .expect("one row");
    assert_eq!(
        row,
        ("a".to_string(), Some(Counter(13)), None),
        "untouched counters are null"
    );
    let none = session
        .execute_unpaged(&sel, ("never",))
        .await
        .expect("select")
        .into_rows_result()
        .expect("rows");
    assert_eq!(none.rows_num(), 0, "a never-written partition has no row");
    assert_eq!(counter(&server, "b", "c"), Some(-7));

    let st = server.stats().table("ks", "counts");
    assert_eq!(st.write_requests, 3, "two EXECUTEs and one BATCH");
    assert_eq!(st.batches, 1);
    assert_eq!(st.rows_mutated, 4);
    assert_eq!(st.counter_delta_sum, 5 - 2 + 10 - 7);
    assert_eq!(st.reads, 2);
    server.shutdown().await.expect("clean shutdown");
}

#[tokio::test(flavor = "current_thread")]
async fn paging_and_unpaged_selects() {
    let server = start().await;
    server
        .execute_script(
            Some("ks"),
            "CREATE TABLE ev (k int, seq int, v text, PRIMARY KEY (k, seq));",
        )
        .expect("table");
    for i in 0..25 {
        server
            .execute(
                Some("ks"),
                &format!("INSERT INTO ev (k, seq, v) VALUES (1, {i}, 'v{i}')"),
            )
            .expect("insert");
    }
    let session = session(server.local_addr()).await;
    let mut q = scylla::statement::unprepared::Statement::new("SELECT seq FROM ks.ev WHERE k = 1");
    q.set_page_size(10);
    let seqs: Vec<(i32,)> = session
        .query_iter(q, ())
        .await
        .expect("paged query")
        .rows_stream::<(i32,)>()
        .expect("typed")
        .try_collect()
        .await
        .expect("all pages");
    assert_eq!(
        seqs.iter().map(|r| r.0).collect::<Vec<_>>(),
        (0..25).collect::<Vec<_>>()
    );
    let all = session
        .query_unpaged(
            "SELECT seq FROM ks.ev WHERE k = 1 ORDER BY seq DESC LIMIT 3",
            (),
        )
        .await
        .expect("unpaged")
        .into_rows_result()
        .expect("rows");
    let got: Vec<i32> = all
        .rows::<(i32,)>()
        .expect("typed")
        .map(|r| r.expect("row").0)
        .collect();
    assert_eq!(got, vec![24, 23, 22]);
}

#[tokio::test(flavor = "current_thread")]
async fn driver_reprepares_transparently_after_cache_loss() {
    let server = start().await;
    let session = session(server.local_addr()).await;
    let upd = session
        .prepare("UPDATE ks.counts SET c = c + ? WHERE pk = ?")
        .await
        .expect("prepare");
    session
        .execute_unpaged(&upd, (Counter(1), "r"))
        .await
        .expect("update");
    server.clear_prepared_cache();
    session
        .execute_unpaged(&upd, (Counter(1), "r"))
        .await
        .expect("re-prepared and executed");
    let mut batch = Batch::new(BatchType::Counter);
    batch.append_statement(upd.clone());
    server.clear_prepared_cache();
    session
        .batch(&batch, ((Counter(1), "r"),))
        .await
        .expect("batch re-prepared");
    assert_eq!(
        counter(&server, "r", "c"),
        Some(3),
        "each write applied exactly once"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn keyspace_filtered_metadata_and_use_keyspace() {
    let (logs, _guard) = capture_warnings();
    let server = start().await;
    // `keyspaces_to_fetch` makes every schema query `... where keyspace_name in ?`, whose marker
    // must be described as `in(keyspace_name)` of type list<text>.
    let session = scylla::client::session_builder::SessionBuilder::new()
        .known_node_addr(server.local_addr())
        .keyspaces_to_fetch(["ks"])
        .fetch_full_schema_metadata(false)
        .use_keyspace("ks", false)
        .build()
        .await
        .expect("session");
    let state = session.get_cluster_state();
    assert!(
        state
            .get_keyspace("ks")
            .is_some_and(|k| k.tables.contains_key("counts"))
    );
    assert!(
        state.get_keyspace("system").is_none(),
        "only the requested keyspace was fetched"
    );
    let upd = session
        .prepare("UPDATE counts SET c = c + ? WHERE pk = ?")
        .await
        .expect("unqualified prepare");
    session
        .execute_unpaged(&upd, (Counter(2), "uk"))
        .await
        .expect("update");
    assert_eq!(counter(&server, "uk", "c"), Some(2));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let text = logs.text();
    assert!(
        !text.contains("WARN") && !text.contains("ERROR"),
        "driver logged:\n{text}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn stats_list_only_user_tables() {
    let server = start().await;
    let session = session(server.local_addr()).await;
    session
        .refresh_metadata()
        .await
        .expect("metadata queries hit system tables");
    session
        .query_unpaged("SELECT * FROM ks.counts", ())
        .await
        .expect("read");
    let tables: Vec<(String, String)> = server.stats().tables.into_keys().collect();
    assert_eq!(tables, vec![("ks".to_string(), "counts".to_string())]);
}

/// Every page size gives the rows of the unpaged query, in order, once: one partition,
/// a scan over partitions, and a filtered scan (the pages are built alone, rows before
/// them counted, not materialized).
#[tokio::test(flavor = "current_thread")]
async fn paged_scans_return_the_unpaged_rows_once() {
    let server = start().await;
    server
        .execute_script(
            Some("ks"),
            "CREATE TABLE pg (k int, seq int, v int, PRIMARY KEY (k, seq));",
        )
        .expect("table");
    for k in 0..4 {
        for i in 0..23 {
            server
                .execute(
                    Some("ks"),
                    &format!("INSERT INTO pg (k, seq, v) VALUES ({k}, {i}, {})", i % 3),
                )
                .expect("insert");
        }
    }
    let session = session(server.local_addr()).await;
    for text in [
        "SELECT k, seq FROM ks.pg WHERE k = 2",
        "SELECT k, seq FROM ks.pg",
        "SELECT k, seq FROM ks.pg WHERE v = 1 ALLOW FILTERING",
    ] {
        let unpaged: Vec<(i32, i32)> = session
            .query_unpaged(text, ())
            .await
            .expect("unpaged")
            .into_rows_result()
            .expect("rows")
            .rows::<(i32, i32)>()
            .expect("typed")
            .map(|r| r.expect("row"))
            .collect();
        assert!(!unpaged.is_empty(), "{text}");
        for size in [1, 5, 7, 23, 92, 1000] {
            let mut q = scylla::statement::unprepared::Statement::new(text);
            q.set_page_size(size);
            let paged: Vec<(i32, i32)> = session
                .query_iter(q, ())
                .await
                .expect("paged query")
                .rows_stream::<(i32, i32)>()
                .expect("typed")
                .try_collect()
                .await
                .expect("all pages");
            assert_eq!(paged, unpaged, "{text} page size {size}");
        }
    }
}
