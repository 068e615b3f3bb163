//! The driver wrapper (`CounterSession`) through the real driver: the example service
//! plain and wrapped, every form that must pass through, a bound-literal mix and an
//! application COUNTER BATCH, and the flushed writes under every fault that decides
//! between "may be sent again" and "never again".

#[path = "../../examples/counter_session/service.rs"]
mod service;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use countersink::CounterSession;
use countersink::config::Config;
use countersink::sink::OutcomeClass;
use countersink::wrapper::PassthroughReason;
use countersink::wrapper::records::{WrapperOutcome, WrapperRecord};
use cqlsim::{FaultKind, FaultRule};
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::statement::Consistency;
use scylla::statement::batch::{Batch, BatchType};
use scylla::value::Counter;

use crate::common::{StoreOptions, cell, config, launch};

async fn connect(contact: &str) -> Session {
    SessionBuilder::new()
        .known_node(contact)
        .build()
        .await
        .expect("session")
}

/// A wrapper on a new session to `contact`, its state in `dir`; flushes are the test's.
async fn wrap(contact: &str, dir: &Path, tweak: impl FnOnce(&mut Config)) -> CounterSession {
    let mut config = config(dir);
    config.store.contact_points = vec![contact.to_owned()];
    config.flush.interval = Duration::from_secs(3600);
    tweak(&mut config);
    CounterSession::new(connect(contact).await, &config)
        .await
        .expect("wrapper")
}

fn unwrap_arc(session: Arc<CounterSession>) -> CounterSession {
    Arc::try_unwrap(session).unwrap_or_else(|_| panic!("the service still holds the session"))
}

/// Every row of a counter table read through `session`: key text → (views, bytes).
async fn counter_rows(session: &Session, table: &str) -> BTreeMap<String, (i64, i64)> {
    let rows = session
        .query_unpaged(format!("SELECT * FROM {table}"), ())
        .await
        .expect("select")
        .into_rows_result()
        .expect("rows");
    let mut out = BTreeMap::new();
    let columns: Vec<String> = rows
        .column_specs()
        .iter()
        .map(|c| c.name().to_owned())
        .collect();
    for row in rows.rows::<scylla::value::Row>().expect("rows") {
        let row = row.expect("row");
        let mut key = Vec::new();
        let (mut views, mut bytes) = (0, 0);
        for (name, value) in columns.iter().zip(row.columns) {
            match (name.as_str(), value) {
                ("views", Some(scylla::value::CqlValue::Counter(c))) => views = c.0,
                ("bytes", Some(scylla::value::CqlValue::Counter(c))) => bytes = c.0,
                (_, value) => key.push(format!("{value:?}")),
            }
        }
        out.insert(key.join("/"), (views, bytes));
    }
    out
}

/// The example service twice, plain in `plain_ks` and wrapped in `wrapped_ks`; returns the
/// wrapper's figures after its final flush.
async fn plain_and_wrapped(
    contact: &str,
    plain_ks: &str,
    wrapped_ks: &str,
) -> (service::Summary, service::Summary) {
    let dir = tempfile::tempdir().unwrap();
    let plain = Arc::new(connect(contact).await);
    for keyspace in [plain_ks, wrapped_ks] {
        for statement in service::schema(keyspace) {
            plain.query_unpaged(statement, ()).await.expect("schema");
        }
    }
    let plain_summary = service::run(Arc::clone(&plain), plain_ks)
        .await
        .expect("plain run");
    let wrapped = Arc::new(wrap(contact, dir.path(), |_| {}).await);
    let wrapped_summary = service::run(Arc::clone(&wrapped), wrapped_ks)
        .await
        .expect("wrapped run");
    // One flush in the middle of the service's life, as the interval would run it.
    let middle = wrapped.flush_now().await;
    assert!(
        middle.applied > 0 && middle.applied == middle.writes,
        "{middle:?}"
    );
    let wrapped = unwrap_arc(wrapped);
    let stats = wrapped.stats();
    assert_eq!(stats.buffered, 40_000);
    // 20 page inserts and 40 reads.
    assert_eq!(
        stats.passed_through(PassthroughReason::NotCounterUpdate),
        60
    );
    assert_eq!(stats.passed_through_total(), 60);
    assert!(stats.accounting.is_balanced(), "{:?}", stats.accounting);
    let collector = wrapped.collector();
    let report = wrapped.shutdown().await;
    assert_eq!(report.rows, 0, "everything went out with the earlier flush");
    // The Prometheus collector says the same.
    let registry = prometheus::Registry::new();
    registry.register(Box::new(collector)).expect("register");
    let text = prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .expect("encode");
    for line in [
        "countersink_wrapper_buffered_total 40000",
        "countersink_wrapper_passthrough_total{reason=\"not_counter_update\"} 60",
        "countersink_wrapper_passthrough_total{reason=\"buffer_full\"} 0",
        "countersink_wrapper_delta_sum{stage=\"pending\"} 0",
        "countersink_wrapper_pending_rows 0",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
    for table in ["views_by_minute", "views_by_day"] {
        let plain_rows = counter_rows(&plain, &format!("{plain_ks}.{table}")).await;
        let wrapped_rows = counter_rows(&plain, &format!("{wrapped_ks}.{table}")).await;
        assert_eq!(plain_rows, wrapped_rows, "{table}");
    }
    let (minutes, days) = service::expected();
    let day_rows = counter_rows(&plain, &format!("{wrapped_ks}.views_by_day")).await;
    let expected_views: i64 = days.values().map(|(v, _)| v).sum();
    assert_eq!(
        day_rows.values().map(|(v, _)| v).sum::<i64>(),
        expected_views
    );
    assert_eq!(
        counter_rows(&plain, &format!("{wrapped_ks}.views_by_minute"))
            .await
            .len(),
        minutes.len()
    );
    for keyspace in [plain_ks, wrapped_ks] {
        let pages = plain
            .query_unpaged(format!("SELECT page_id FROM {keyspace}.pages"), ())
            .await
            .expect("select")
            .into_rows_result()
            .expect("rows")
            .rows_num();
        assert_eq!(
            pages,
            service::PAGES,
            "{keyspace}: the regular inserts reached the store"
        );
    }
    (plain_summary, wrapped_summary)
}

/// The example service, plain and wrapped: the same counters, the same reads, the regular
/// insert stored, and at least 100x fewer counter write requests at the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wrapped_service_ends_with_the_plain_counters_in_100x_fewer_writes() {
    let store = launch(StoreOptions::cqlsim_only(
        "counts the counter write requests the store received",
    ))
    .await;
    let server = store.sim();
    let (plain, wrapped) =
        plain_and_wrapped(&store.contact_point(), "svc_plain", "svc_wrapped").await;
    assert_eq!(
        plain.increments,
        service::TASKS * service::VIEWS_PER_TASK * 2
    );
    assert_eq!(plain, wrapped, "the same calls, the same reads answered");
    assert_eq!(
        wrapped.titles_found, wrapped.reads,
        "reads reached the store"
    );
    let stats = server.stats();
    let requests = |ks: &str| {
        stats.table(ks, "views_by_minute").write_requests
            + stats.table(ks, "views_by_day").write_requests
    };
    let (plain_requests, wrapped_requests) = (requests("svc_plain"), requests("svc_wrapped"));
    assert_eq!(plain_requests, 40_000);
    assert!(
        wrapped_requests > 0 && wrapped_requests * 100 <= plain_requests,
        "plain {plain_requests}, wrapped {wrapped_requests}"
    );
    assert_eq!(
        stats.table("svc_plain", "pages").reads,
        stats.table("svc_wrapped", "pages").reads,
        "reads untouched"
    );
    assert_eq!(
        stats.table("svc_plain", "pages").write_requests,
        stats.table("svc_wrapped", "pages").write_requests,
        "regular inserts untouched"
    );
    store.shutdown().await;
}

/// The same comparison on the store `COUNTERSINK_TEST_STORE` names (a real Cassandra node
/// included): identical final counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wrapped_service_ends_with_the_plain_counters_on_the_chosen_store() {
    let store = launch(StoreOptions::default()).await;
    let (plain_ks, wrapped_ks) = (store.keyspace("svc_plain"), store.keyspace("svc_wrapped"));
    let (plain, wrapped) = plain_and_wrapped(&store.contact_point(), &plain_ks, &wrapped_ks).await;
    assert_eq!(plain, wrapped);
    store.shutdown().await;
}

const SCHEMA: &str = "
    CREATE KEYSPACE w WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1};
    CREATE TABLE w.c1 (k text PRIMARY KEY, c counter, d counter);
    CREATE TABLE w.c2 (k text, n int, m smallint, c counter, PRIMARY KEY ((k, n), m));
    CREATE TABLE w.reg (k text PRIMARY KEY, v text);
";

/// Each form the wrapper must not aggregate goes to the store unchanged, counted once under
/// its reason; nothing of it is buffered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_unsupported_form_passes_through_counted_by_reason() {
    let store = launch(StoreOptions::cqlsim_only(
        "reads the store's request counts per table",
    ))
    .await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let dir = tempfile::tempdir().unwrap();
    let session = wrap(&store.contact_point(), dir.path(), |_| {}).await;

    let mut expected: BTreeMap<&str, u64> = BTreeMap::new();
    let mut count = |reason: PassthroughReason| *expected.entry(reason.label()).or_default() += 1;

    // Reads, regular writes.
    let select = session
        .prepare("SELECT c FROM w.c1 WHERE k = ?")
        .await
        .unwrap();
    session.execute_unpaged(&select, ("a",)).await.unwrap();
    count(PassthroughReason::NotCounterUpdate);
    let insert = session
        .prepare("INSERT INTO w.reg (k, v) VALUES (?, ?)")
        .await
        .unwrap();
    session.execute_unpaged(&insert, ("a", "x")).await.unwrap();
    count(PassthroughReason::NotCounterUpdate);
    let update_regular = session
        .prepare("UPDATE w.reg SET v = ? WHERE k = ?")
        .await
        .unwrap();
    session
        .execute_unpaged(&update_regular, ("y", "a"))
        .await
        .unwrap();
    count(PassthroughReason::NotCounterUpdate);
    // IN on the key.
    let in_key = session
        .prepare("UPDATE w.c1 SET c = c + ? WHERE k IN ?")
        .await
        .unwrap();
    session
        .execute_unpaged(&in_key, (Counter(5), vec!["in1", "in2"]))
        .await
        .unwrap();
    count(PassthroughReason::InRelation);
    // A key column set by a literal, and a statement without markers at all.
    let literal_key = session
        .prepare("UPDATE w.c2 SET c = c + ? WHERE k = ? AND n = 5 AND m = ?")
        .await
        .unwrap();
    session
        .execute_unpaged(&literal_key, (Counter(7), "lit", 1_i16))
        .await
        .unwrap();
    count(PassthroughReason::UnboundKey);
    let no_markers = session
        .prepare("UPDATE w.c1 SET c = c + 1 WHERE k = 'nomark'")
        .await
        .unwrap();
    session.execute_unpaged(&no_markers, ()).await.unwrap();
    count(PassthroughReason::UnboundKey);
    // Unprepared.
    session
        .query_unpaged("UPDATE w.c1 SET c = c + 2 WHERE k = 'q'", ())
        .await
        .unwrap();
    count(PassthroughReason::Unprepared);
    // A statement of its own consistency.
    let mut all = session
        .prepare("UPDATE w.c1 SET c = c + ? WHERE k = ?")
        .await
        .unwrap();
    all.set_consistency(Consistency::All);
    session
        .execute_unpaged(&all, (Counter(3), "all"))
        .await
        .unwrap();
    count(PassthroughReason::StatementOptions);
    // A null key: the store refuses it, to the application, as without the wrapper.
    let plain = session
        .prepare("UPDATE w.c1 SET c = c + ? WHERE k = ?")
        .await
        .unwrap();
    assert!(
        session
            .execute_unpaged(&plain, (Counter(1), None::<&str>))
            .await
            .is_err()
    );
    count(PassthroughReason::NullOrUnsetValue);
    // Wrong values: the driver's own error.
    assert!(
        session
            .execute_unpaged(&plain, ("not a counter", "k"))
            .await
            .is_err()
    );
    count(PassthroughReason::InvalidValues);
    // A sum that would leave the i64 range: the second one goes straight to the store.
    session
        .execute_unpaged(&plain, (Counter(i64::MAX), "big"))
        .await
        .unwrap();
    session
        .execute_unpaged(&plain, (Counter(1), "big"))
        .await
        .unwrap();
    count(PassthroughReason::DeltaOverflow);
    // Batches: a logged batch of a regular write, a counter batch with a statement the
    // wrapper does not aggregate.
    let mut logged = Batch::new(BatchType::Logged);
    logged.append_statement(insert.clone());
    session.batch(&logged, (("b", "z"),)).await.unwrap();
    count(PassthroughReason::NotCounterUpdate);
    let mut mixed = Batch::new(BatchType::Counter);
    mixed.append_statement(plain.clone());
    mixed.append_statement(literal_key.clone());
    session
        .batch(
            &mixed,
            ((Counter(1), "mixed"), (Counter(1), "mixed", 2_i16)),
        )
        .await
        .unwrap();
    count(PassthroughReason::BatchUnsupported);
    // USING and IF on a counter table: the store refuses them at prepare, through the
    // wrapper as without it.
    for text in [
        "UPDATE w.c1 USING TTL 10 SET c = c + ? WHERE k = ?",
        "UPDATE w.c1 SET c = c + ? WHERE k = ? IF EXISTS",
    ] {
        assert!(session.prepare(text).await.is_err(), "{text}");
    }

    let stats = session.stats();
    for reason in PassthroughReason::ALL {
        assert_eq!(
            stats.passed_through(reason),
            expected.get(reason.label()).copied().unwrap_or(0),
            "{}",
            reason.label()
        );
    }
    assert_eq!(
        stats.buffered, 1,
        "only the first `big` increment was buffered"
    );
    // Each passed-through write reached the store itself, before any flush.
    assert_eq!(cell(server, "w.c1", "c", "k = 'in1'"), Some(5));
    assert_eq!(
        cell(server, "w.c2", "c", "k = 'lit' AND n = 5 AND m = 1"),
        Some(7)
    );
    assert_eq!(cell(server, "w.c1", "c", "k = 'nomark'"), Some(1));
    assert_eq!(cell(server, "w.c1", "c", "k = 'q'"), Some(2));
    assert_eq!(cell(server, "w.c1", "c", "k = 'all'"), Some(3));
    assert_eq!(cell(server, "w.c1", "c", "k = 'big'"), Some(1));
    assert_eq!(cell(server, "w.c1", "c", "k = 'mixed'"), Some(1));
    let report = session.shutdown().await;
    assert_eq!((report.rows, report.applied), (1, 1));
    // What the application's two writes make of the cell without the wrapper too: the
    // store's counter wraps.
    assert_eq!(
        cell(server, "w.c1", "c", "k = 'big'"),
        Some(i64::MAX.wrapping_add(1))
    );
    store.shutdown().await;
}

/// `SET c = c + 1 WHERE k = ?` (a literal delta), `c = c - ?`, `c -= ?` and two columns in
/// one statement, from several tasks, and application COUNTER BATCHes: summed per row and
/// column, one request per partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_literal_mix_and_counter_batches_are_aggregated_right() {
    let store = launch(StoreOptions::cqlsim_only(
        "counts the counter write requests the store received",
    ))
    .await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let dir = tempfile::tempdir().unwrap();
    let session = Arc::new(wrap(&store.contact_point(), dir.path(), |_| {}).await);
    let plus_one = session
        .prepare("UPDATE w.c1 SET c = c + 1 WHERE k = ?")
        .await
        .unwrap();
    let minus = session
        .prepare("UPDATE w.c1 SET c = c - ?, d = d + ? WHERE k = ?")
        .await
        .unwrap();
    let minus_eq = session
        .prepare("UPDATE w.c2 SET c -= ? WHERE k = ? AND n = ? AND m = ?")
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for task in 0..4 {
        let (session, plus_one, minus, minus_eq) = (
            Arc::clone(&session),
            plus_one.clone(),
            minus.clone(),
            minus_eq.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for i in 0..1_000_i64 {
                let key = format!("k{}", i % 5);
                session.execute_unpaged(&plus_one, (&key,)).await.unwrap();
                session
                    .execute_unpaged(&minus, (Counter(2), Counter(i), &key))
                    .await
                    .unwrap();
                session
                    .execute_unpaged(&minus_eq, (Counter(3), &key, task, (i % 2) as i16))
                    .await
                    .unwrap();
                if i % 100 == 0 {
                    let mut batch = Batch::new(BatchType::Counter);
                    batch.append_statement(plus_one.clone());
                    batch.append_statement(plus_one.clone());
                    session
                        .batch(&batch, ((&key,), ("batched",)))
                        .await
                        .unwrap();
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    // A statement prepared on the inner session directly is recognised at its first
    // execution through the wrapper.
    let elsewhere = session
        .inner()
        .prepare("UPDATE w.c1 SET d = d + ? WHERE k = ?")
        .await
        .unwrap();
    for _ in 0..10 {
        session
            .execute_unpaged(&elsewhere, (Counter(3), "elsewhere"))
            .await
            .unwrap();
    }
    server.reset_stats();
    let session = unwrap_arc(session);
    let stats = session.stats();
    assert_eq!(stats.passed_through_total(), 0, "{stats:?}");
    assert_eq!(stats.buffered, 4 * (3 * 1000 + 2 * 10) + 10);
    assert!(stats.accounting.is_balanced(), "{:?}", stats.accounting);
    let report = session.shutdown().await;
    // c1: k0..k4, `batched` and `elsewhere`; c2: (k, task) partitions, 5 keys x 4 tasks.
    assert_eq!(report.writes, 7 + 20, "{report:?}");
    assert_eq!(report.applied, report.writes);
    for k in 0..5 {
        let key = format!("k{k}");
        // Each task: 200 executions per key of +1 and -2; its ten batches all fall on k0
        // (i % 100 == 0).
        let batched = if k == 0 { 10 } else { 0 };
        let c = 4 * (200 * (1 - 2) + batched);
        assert_eq!(cell(server, "w.c1", "c", &format!("k = '{key}'")), Some(c));
        let d: i64 = 4 * (0..1_000).filter(|i| i % 5 == k).sum::<i64>();
        assert_eq!(cell(server, "w.c1", "d", &format!("k = '{key}'")), Some(d));
        for task in 0..4 {
            for m in 0..2 {
                assert_eq!(
                    cell(
                        server,
                        "w.c2",
                        "c",
                        &format!("k = '{key}' AND n = {task} AND m = {m}")
                    ),
                    Some(-3 * 100),
                );
            }
        }
    }
    assert_eq!(cell(server, "w.c1", "c", "k = 'batched'"), Some(40));
    assert_eq!(cell(server, "w.c1", "d", "k = 'elsewhere'"), Some(30));
    let written = server.stats();
    assert_eq!(
        written.table("w", "c1").write_requests + written.table("w", "c2").write_requests,
        27
    );
    store.shutdown().await;
}

fn records(path: &Path) -> Vec<WrapperRecord> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("record"))
        .collect()
}

/// The flushed writes under each fault that decides whether a write may be sent again,
/// at 10 % of requests over ten flushes, then healed: the accounting identity holds
/// exactly; an unknown write is never re-sent (with `applied=yes` every row ends exact,
/// so a re-send would show as a double count; with `applied=no` every row is short by
/// exactly its unknown records); a write that definitely did not apply is re-queued until
/// it applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushed_writes_under_faults_keep_the_guarantees() {
    let rules = [
        (FaultKind::WriteTimeout, true),
        (FaultKind::WriteTimeout, false),
        (FaultKind::Unavailable, false),
        (FaultKind::NoReply, true),
        (FaultKind::NoReply, false),
    ];
    for (kind, applied) in rules {
        fault_run(kind, applied).await;
    }
}

async fn fault_run(kind: FaultKind, applied: bool) {
    const KEYS: usize = 60;
    let name = format!("{} applied={applied}", kind.name());
    let store = launch(StoreOptions::cqlsim_only("injects faults")).await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let dir = tempfile::tempdir().unwrap();
    let session = wrap(&store.contact_point(), dir.path(), |c| {
        c.store.request_timeout = Duration::from_millis(300);
        c.flush.max_in_flight = 16;
        c.flush.max_batch_rows = 4;
    })
    .await;
    let update = session
        .prepare("UPDATE w.c2 SET c = c + ? WHERE k = ? AND n = ? AND m = ?")
        .await
        .unwrap();
    let mut rule = FaultRule::new(kind).probability(0.1);
    rule.applied = applied;
    server.add_fault(rule);
    let mut expected: BTreeMap<(String, i32, i16), i64> = BTreeMap::new();
    for flush in 0..10 {
        for i in 0..2_000_usize {
            let key = format!("k{}", i % KEYS);
            let n = (i % 3) as i32;
            let m = (flush % 4) as i16;
            let delta = (i % 7) as i64 + 1;
            session
                .execute_unpaged(&update, (Counter(delta), &key, n, m))
                .await
                .unwrap();
            *expected.entry((key, n, m)).or_default() += delta;
        }
        session.flush_now().await;
    }
    server.clear_faults();
    for _ in 0..20 {
        if session.stats().pending_rows == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        session.flush_now().await;
    }
    let stats = session.stats();
    let unknown_path = session.log_path(WrapperOutcome::Unknown).await;
    let unsent_path = session.log_path(WrapperOutcome::Unsent).await;
    let rejected_path = session.log_path(WrapperOutcome::Rejected).await;
    let report = session.shutdown().await;
    assert_eq!(
        report.rows, 0,
        "{name}: healed, nothing left for the final flush"
    );
    let a = stats.accounting;
    assert!(a.is_balanced(), "{name}: {a:?}");
    assert_eq!(
        (a.pending, a.in_flight, a.unsent, a.rejected),
        (0, 0, 0, 0),
        "{name}"
    );
    assert_eq!(
        a.buffered,
        expected.values().map(|d| i128::from(*d)).sum::<i128>()
    );
    let unknown = records(&unknown_path);
    assert!(records(&unsent_path).is_empty() && records(&rejected_path).is_empty());
    let mut unknown_by_row: BTreeMap<(String, i32, i16), i64> = BTreeMap::new();
    for record in &unknown {
        let key = (
            record.key["k"].trim_matches('\'').to_owned(),
            record.key["n"].parse().unwrap(),
            record.key["m"].parse().unwrap(),
        );
        *unknown_by_row.entry(key).or_default() += record.deltas["c"];
    }
    assert_eq!(
        unknown_by_row
            .values()
            .map(|d| i128::from(*d))
            .sum::<i128>(),
        a.unknown,
        "{name}: the records hold exactly the unknown deltas"
    );
    match kind {
        FaultKind::Unavailable => {
            assert!(
                stats.writes_of(OutcomeClass::Requeued) > 0,
                "{name}: {stats:?}"
            );
            assert!(unknown.is_empty(), "{name}");
        }
        _ => assert!(
            !unknown.is_empty(),
            "{name}: the fault fired on flushed writes"
        ),
    }
    for ((k, n, m), fed) in &expected {
        let stored = cell(
            server,
            "w.c2",
            "c",
            &format!("k = '{k}' AND n = {n} AND m = {m}"),
        )
        .unwrap_or(0);
        let unknown = unknown_by_row
            .get(&(k.clone(), *n, *m))
            .copied()
            .unwrap_or(0);
        let should = if applied { *fed } else { fed - unknown };
        assert_eq!(
            stored, should,
            "{name}: row {k}/{n}/{m}, fed {fed}, unknown {unknown}"
        );
    }
    let store_sum = server.stats().table("w", "c2").counter_delta_sum;
    let expected_sum = a.applied + if applied { a.unknown } else { 0 };
    assert_eq!(store_sum, expected_sum, "{name}");
    store.shutdown().await;
}

/// The final flush's deadline stops the sending: with every reply held past it and two
/// requests in flight at most, the two running at the deadline are given up as unknown
/// (`cancelled_at_deadline`; they did apply, and nothing sends them again), the other
/// eight never start and go to the spill, and every delta is in exactly one record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_final_deadline_requests_in_flight_are_unknown_and_the_rest_spilled() {
    let store = launch(StoreOptions::cqlsim_only(
        "holds every reply past the deadline",
    ))
    .await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let dir = tempfile::tempdir().unwrap();
    let session = wrap(&store.contact_point(), dir.path(), |c| {
        c.store.request_timeout = Duration::from_secs(30);
        c.flush.shutdown_deadline = Duration::from_secs(1);
        c.flush.max_in_flight = 2;
    })
    .await;
    let update = session
        .prepare("UPDATE w.c1 SET c = c + ? WHERE k = ?")
        .await
        .unwrap();
    // A first flush prepares the wrapper's own UPDATE while the store answers.
    session
        .execute_unpaged(&update, (Counter(1), "warm"))
        .await
        .unwrap();
    assert_eq!(session.flush_now().await.applied, 1);
    let mut fed = 0_i128;
    for i in 1..=10_i64 {
        session
            .execute_unpaged(&update, (Counter(i), format!("k{i}")))
            .await
            .unwrap();
        fed += i128::from(i);
    }
    let spill_path = dir.path().join(countersink::wrapper::spill::SPILL_FILE);
    let unknown_path = session.log_path(WrapperOutcome::Unknown).await;
    server.set_faults(vec!["delay,for=5s,table=w.c1".parse().unwrap()]);
    let report = session.shutdown().await;
    assert_eq!(report.writes, 10, "one request per key: {report:?}");
    assert_eq!(
        (report.applied, report.unknown, report.unsent),
        (0, 2, 8),
        "{report:?}"
    );
    let unknown = records(&unknown_path);
    assert_eq!(unknown.len(), 2, "{unknown:?}");
    assert!(
        unknown
            .iter()
            .all(|r| r.error_kind.as_deref() == Some("cancelled_at_deadline")),
        "{unknown:?}"
    );
    let spilled = records(&spill_path);
    assert_eq!(spilled.len(), 8, "{spilled:?}");
    let sum = |records: &[WrapperRecord]| -> i128 {
        records
            .iter()
            .flat_map(|r| r.deltas.values())
            .map(|d| i128::from(*d))
            .sum()
    };
    assert_eq!(
        sum(&unknown) + sum(&spilled),
        fed,
        "every delta in one record"
    );
    server.clear_faults();
    assert_eq!(
        server.stats().table("w", "c1").counter_delta_sum,
        1 + sum(&unknown),
        "the store holds the first flush and the two cut off in flight, nothing more"
    );
    store.shutdown().await;
}

/// A store that takes the wrapper's PREPARE and holds the answer: the final flush
/// prepares within its deadline, so the shutdown ends soon after it (not when the store
/// answers, two minutes later), and every row is spilled (never sent: not applied,
/// nothing unknown) with every delta in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepare_unanswered_at_shutdown_ends_at_the_deadline_with_every_row_spilled() {
    let store = launch(StoreOptions::cqlsim_only("holds PREPARE replies")).await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let dir = tempfile::tempdir().unwrap();
    let session = wrap(&store.contact_point(), dir.path(), |c| {
        c.store.request_timeout = Duration::from_secs(120);
        c.flush.shutdown_deadline = Duration::from_secs(1);
    })
    .await;
    let update = session
        .prepare("UPDATE w.c1 SET c = c + ? WHERE k = ?")
        .await
        .unwrap();
    let mut fed = 0_i128;
    for i in 1..=10_i64 {
        session
            .execute_unpaged(&update, (Counter(i), format!("k{i}")))
            .await
            .unwrap();
        fed += i128::from(i);
    }
    let spill_path = dir.path().join(countersink::wrapper::spill::SPILL_FILE);
    server.set_faults(vec![
        "delay,for=120s,op=prepare,table=w.c1".parse().unwrap(),
    ]);
    let report = tokio::time::timeout(Duration::from_secs(30), session.shutdown())
        .await
        .expect("the shutdown ends at its deadline, not when PREPARE is answered");
    assert_eq!(report.writes, 10, "{report:?}");
    assert_eq!(
        (report.applied, report.unknown, report.unsent),
        (0, 0, 10),
        "{report:?}"
    );
    let spilled: i128 = records(&spill_path)
        .iter()
        .flat_map(|r| r.deltas.values())
        .map(|d| i128::from(*d))
        .sum();
    assert_eq!(spilled, fed, "every delta in the spill");
    server.clear_faults();
    assert_eq!(server.stats().table("w", "c1").counter_delta_sum, 0);
    store.shutdown().await;
}

/// The final flush with the store down: nothing is lost silently. Every buffered delta is
/// in the spill (definitely not applied) or `wrapper_unknown.jsonl`, the identity holds in
/// the collector's last figures, and the store holds nothing. The next start on the same
/// state directory replays the spilled rows once: the store then holds exactly them, per
/// row and column, and a third start sends nothing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_flush_with_the_store_down_spills_every_row_and_the_next_start_replays_them_once() {
    let store = launch(StoreOptions::cqlsim_only("takes the node down")).await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let dir = tempfile::tempdir().unwrap();
    let session = wrap(&store.contact_point(), dir.path(), |c| {
        c.store.request_timeout = Duration::from_millis(300);
        c.flush.shutdown_deadline = Duration::from_secs(3);
    })
    .await;
    let update = session
        .prepare("UPDATE w.c1 SET c = c + ?, d = d - ? WHERE k = ?")
        .await
        .unwrap();
    let mut fed = 0_i128;
    for i in 0..500_i64 {
        let key = format!("k{}", i % 50);
        session
            .execute_unpaged(&update, (Counter(i + 1), Counter(1), &key))
            .await
            .unwrap();
        fed += i128::from(i + 1) - 1;
    }
    let spill_path = dir.path().join(countersink::wrapper::spill::SPILL_FILE);
    let unsent_path = session.log_path(WrapperOutcome::Unsent).await;
    let unknown_path = session.log_path(WrapperOutcome::Unknown).await;
    let collector = session.collector();
    server.node_down();
    let report = session.shutdown().await;
    assert_eq!(report.rows, 50);
    assert_eq!(report.applied, 0, "{report:?}");
    // Each request ended unsent (refused, or never started before the deadline) or
    // unknown (no answer in time): nothing re-queued after the final flush.
    assert_eq!(report.unsent + report.unknown, report.writes, "{report:?}");
    assert!(report.unsent > 0, "{report:?}");
    let spilled = records(&spill_path);
    assert!(records(&unsent_path).is_empty(), "all fit in the spill");
    let recorded: i128 = spilled
        .iter()
        .chain(&records(&unknown_path))
        .flat_map(|r| r.deltas.values())
        .map(|d| i128::from(*d))
        .sum();
    assert_eq!(recorded, fed, "every delta is in a record");
    let registry = prometheus::Registry::new();
    registry.register(Box::new(collector)).expect("register");
    let text = prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .expect("encode");
    for stage in ["pending", "in_flight", "applied"] {
        assert!(
            text.contains(&format!(
                "countersink_wrapper_delta_sum{{stage=\"{stage}\"}} 0"
            )),
            "{stage} in\n{text}"
        );
    }
    assert!(
        text.contains(&format!(
            "countersink_wrapper_delta_sum{{stage=\"buffered\"}} {fed}"
        )),
        "{text}"
    );
    server.node_up();
    assert_eq!(server.stats().table("w", "c1").counter_delta_sum, 0);

    // The next start replays the spilled rows, once.
    let mut expected: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for record in &spilled {
        let key = record.key["k"].trim_matches('\'').to_owned();
        let row = expected.entry(key).or_default();
        row.0 += record.deltas.get("c").copied().unwrap_or(0);
        row.1 += record.deltas.get("d").copied().unwrap_or(0);
    }
    let tweak = |c: &mut Config| c.store.request_timeout = Duration::from_secs(5);
    let session = wrap(&store.contact_point(), dir.path(), tweak).await;
    let report = session.flush_now().await;
    assert_eq!(report.replayed_rows, spilled.len() as u64, "{report:?}");
    assert_eq!(report.applied, report.writes, "{report:?}");
    session.shutdown().await;
    let check = |what: &str| {
        for (key, (c, d)) in &expected {
            let condition = format!("k = '{key}'");
            assert_eq!(
                cell(server, "w.c1", "c", &condition),
                Some(*c),
                "{what}: c of {key}"
            );
            assert_eq!(
                cell(server, "w.c1", "d", &condition),
                Some(*d),
                "{what}: d of {key}"
            );
        }
        let total: i128 = expected.values().map(|(c, d)| i128::from(*c + *d)).sum();
        assert_eq!(
            server.stats().table("w", "c1").counter_delta_sum,
            total,
            "{what}: nothing but the spilled rows"
        );
    };
    check("after the replay");
    // A third start: nothing left to replay.
    let session = wrap(&store.contact_point(), dir.path(), tweak).await;
    let report = session.flush_now().await;
    assert_eq!(report.replayed_rows, 0, "{report:?}");
    session.shutdown().await;
    check("after a third start");
    store.shutdown().await;
}

/// A table created after the session read the schema, its UPDATE prepared on the inner
/// session: it passes through (`unknown_table`) until the driver's metadata has the
/// table, then is aggregated, without preparing it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_the_driver_learns_of_later_is_aggregated_once_known() {
    let store = launch(StoreOptions::cqlsim_only(
        "creates a table behind the driver's back",
    ))
    .await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let dir = tempfile::tempdir().unwrap();
    let session = wrap(&store.contact_point(), dir.path(), |_| {}).await;
    server
        .execute_script(None, "CREATE TABLE w.late (k text PRIMARY KEY, c counter);")
        .expect("late table");
    let update = session
        .inner()
        .prepare("UPDATE w.late SET c = c + ? WHERE k = ?")
        .await
        .unwrap();
    session
        .execute_unpaged(&update, (Counter(1), "a"))
        .await
        .unwrap();
    let before = session.stats();
    session.inner().refresh_metadata().await.unwrap();
    for _ in 0..10 {
        session
            .execute_unpaged(&update, (Counter(1), "a"))
            .await
            .unwrap();
    }
    let after = session.stats();
    assert_eq!(
        after.buffered - before.buffered,
        10,
        "aggregated once the table is known: {after:?}"
    );
    assert!(after.passed_through(PassthroughReason::UnknownTable) <= 1);
    session.shutdown().await;
    assert_eq!(cell(server, "w.late", "c", "k = 'a'"), Some(11));
    store.shutdown().await;
}

/// The per-key sum of column `c` over `records` (a key literal's quotes removed).
fn sums_by_key(records: &[WrapperRecord]) -> BTreeMap<String, i64> {
    let mut sums = BTreeMap::new();
    for record in records {
        let key = record.key["k"].trim_matches('\'').to_owned();
        *sums.entry(key).or_default() += record.deltas.get("c").copied().unwrap_or(0);
    }
    sums
}

/// Spill records of `w.c1`, one per key, delta `c` each, as an earlier process leaves them.
fn spill_lines(rows: &BTreeMap<String, i64>) -> String {
    rows.iter()
        .enumerate()
        .map(|(i, (key, delta))| {
            let record = WrapperRecord {
                time: "2026-01-01T00:00:00Z".into(),
                request_id: format!("earlier/1/w9/{i}"),
                row: 0,
                outcome: WrapperOutcome::Unsent,
                table: "w.c1".into(),
                key: [("k".to_owned(), format!("'{key}'"))].into(),
                key_hex: Some(vec![countersink::wrapper::records::hex(key.as_bytes())]),
                deltas: [("c".to_owned(), *delta)].into(),
                error_kind: None,
                error: None,
            };
            format!("{}\n", serde_json::to_string(&record).unwrap())
        })
        .collect()
}

/// A replay whose spill cursor cannot be written (the disk is full: the cursor's
/// temporary file is `/dev/full`), then the process ends without a shutdown (a kill
/// between flushes): the next start must not replay the rows the first one applied.
/// Each row is in the store once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_spill_whose_cursor_could_not_be_written_is_not_replayed_again() {
    let store = launch(StoreOptions::cqlsim_only("counts what a replay applies")).await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let dir = tempfile::tempdir().unwrap();
    let spilled: BTreeMap<String, i64> = (0..5).map(|i| (format!("s{i}"), 10 + i)).collect();
    std::fs::write(
        dir.path().join(countersink::wrapper::spill::SPILL_FILE),
        spill_lines(&spilled),
    )
    .unwrap();
    let cursor_tmp = dir.path().join("wrapper_spill.tmp");
    std::os::unix::fs::symlink("/dev/full", &cursor_tmp).unwrap();
    // Room for three rows: the replay consumes part of the file, so the cursor is written
    // (a file consumed whole is removed instead).
    let small = |c: &mut Config| c.limits.max_pending_rows = 3;
    let session = wrap(&store.contact_point(), dir.path(), small).await;
    let report = session.flush_now().await;
    assert_eq!(report.replayed_rows, 3, "{report:?}");
    assert_eq!(report.applied, report.writes, "{report:?}");
    // Ended without a shutdown, as a kill between flushes would; the disk heals.
    drop(session);
    tokio::time::sleep(Duration::from_millis(200)).await;
    std::fs::remove_file(&cursor_tmp).unwrap();

    let session = wrap(&store.contact_point(), dir.path(), small).await;
    let mut replayed = 0;
    for _ in 0..3 {
        replayed += session.flush_now().await.replayed_rows;
    }
    session.shutdown().await;
    for (key, delta) in &spilled {
        assert_eq!(
            cell(server, "w.c1", "c", &format!("k = '{key}'")),
            Some(*delta),
            "row {key}: spilled once, applied once"
        );
    }
    assert_eq!(
        replayed, 2,
        "only the two rows the first start did not load"
    );
    store.shutdown().await;
}

/// Two committed wrapper flushes the journal holds unended (the first one's end could not
/// be written): the first re-queued k's +5 (not applied), the second sent the re-queued
/// +5 and it applied. Recovery must not spill the first one's +5: the later flush re-sent
/// it, and a replay would apply it a second time. As the sidecar's recovery does, a
/// not-applied request of a flush that is not the last is logged unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_spills_nothing_a_later_unended_flush_already_sent() {
    use countersink::state::{FlushId, Settled, StateDir, WrapperTable};
    let store = launch(StoreOptions::cqlsim_only("reads the wrapper's recovery")).await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let dir = tempfile::tempdir().unwrap();
    {
        let mut state = StateDir::open(&config(dir.path()).state).expect("state");
        let table = WrapperTable {
            id: 1,
            keyspace: "w".into(),
            name: "c1".into(),
            key_columns: vec!["k".into()],
            counters: vec!["c".into(), "d".into()],
        };
        let mut key = 1_u32.to_le_bytes().to_vec();
        countersink::wrapper::statement::push_key_value(&mut key, b"k");
        let deltas = [5_i64, 0];
        let outcomes = [
            Settled::NotApplied {
                kind: "unavailable".into(),
                text: "not enough replicas".into(),
            },
            Settled::Applied,
        ];
        for (seq, outcome) in (1..).zip(outcomes) {
            let flush = FlushId {
                writer: state.writer_id().to_owned(),
                incarnation: state.incarnation(),
                flush_seq: seq,
            };
            let intents = [(1, vec![(&key[..], &deltas[..])])];
            state
                .wrapper_journal_begin(
                    &flush,
                    "2026-01-01T00:00:00Z",
                    None,
                    std::slice::from_ref(&table),
                    &intents,
                )
                .expect("group commit");
            state.journal_outcome(0, &outcome);
            state.journal_flush();
        }
    }
    let session = wrap(&store.contact_point(), dir.path(), |_| {}).await;
    let recovery = session.recovery().clone();
    let spill_path = dir.path().join(countersink::wrapper::spill::SPILL_FILE);
    assert_eq!(
        sums_by_key(&records(&spill_path)),
        BTreeMap::new(),
        "nothing spilled: {recovery:?}"
    );
    let unknown_path = session.log_path(WrapperOutcome::Unknown).await;
    let report = session.flush_now().await;
    session.shutdown().await;
    assert_eq!(report.replayed_rows, 0, "{report:?}");
    assert_eq!(
        sums_by_key(&records(&unknown_path)),
        BTreeMap::from([("k".to_owned(), 5)]),
        "the first flush's +5 is unknown: {recovery:?}"
    );
    assert_eq!(cell(server, "w.c1", "c", "k = 'k'"), None, "nothing sent");
    store.shutdown().await;
}

/// `shutdown()` while a periodic flush hangs (the store takes every write and never
/// answers, the request timeout is a minute): one `flush.shutdown_deadline` covers the
/// running flush and the final flush. The two requests in flight at the deadline are
/// logged unknown, the rest never started and are spilled, and every delta fed is in one
/// of the two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_during_a_hanging_periodic_flush_ends_within_one_deadline() {
    let store = launch(StoreOptions::cqlsim_only("never answers writes")).await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let dir = tempfile::tempdir().unwrap();
    let deadline = Duration::from_secs(2);
    let session = wrap(&store.contact_point(), dir.path(), |c| {
        c.store.request_timeout = Duration::from_secs(60);
        c.flush.interval = Duration::from_millis(300);
        c.flush.jitter = Duration::ZERO;
        c.flush.shutdown_deadline = deadline;
        c.flush.max_in_flight = 2;
    })
    .await;
    let update = session
        .prepare("UPDATE w.c1 SET c = c + ? WHERE k = ?")
        .await
        .unwrap();
    // A first flush prepares the wrapper's own UPDATE while the store answers.
    session
        .execute_unpaged(&update, (Counter(1), "warm"))
        .await
        .unwrap();
    session.flush_now().await;
    server.set_faults(vec!["no-reply,table=w.c1".parse().unwrap()]);
    let mut fed = BTreeMap::new();
    for i in 1..=10_i64 {
        let key = format!("k{i}");
        session
            .execute_unpaged(&update, (Counter(i), &key))
            .await
            .unwrap();
        fed.insert(key, i);
    }
    for _ in 0..100 {
        if session.stats().accounting.in_flight != 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_ne!(
        session.stats().accounting.in_flight,
        0,
        "a periodic flush is sending"
    );
    // Not `session.log_path`: it waits for the flusher, which the hanging flush holds.
    let spill_path = dir.path().join(countersink::wrapper::spill::SPILL_FILE);
    let unknown_path = dir.path().join(WrapperOutcome::Unknown.file_name());
    let started = std::time::Instant::now();
    tokio::time::timeout(deadline + Duration::from_secs(3), session.shutdown())
        .await
        .expect("shutdown ends within one deadline (and a margin)");
    let took = started.elapsed();
    let unknown = records(&unknown_path);
    let spilled = records(&spill_path);
    assert_eq!(
        unknown.len(),
        2,
        "the two in flight: {unknown:?} ({took:?})"
    );
    assert!(
        unknown
            .iter()
            .all(|r| r.error_kind.as_deref() == Some("cancelled_at_deadline")),
        "{unknown:?}"
    );
    assert_eq!(spilled.len(), 8, "never started: {spilled:?}");
    let mut recorded = sums_by_key(&unknown);
    for (key, sum) in sums_by_key(&spilled) {
        assert!(recorded.insert(key, sum).is_none(), "a row in two records");
    }
    assert_eq!(recorded, fed, "every delta fed is in exactly one record");
    server.clear_faults();
    assert_eq!(
        server.stats().table("w", "c1").counter_delta_sum,
        1,
        "the store holds the first flush only (no reply means not applied here)"
    );
    store.shutdown().await;
}

/// A transient outage (the Cassandra persona answers every write `Unavailable`: not
/// applied) while the application creates a new key every millisecond: the rows the
/// wrapper holds never pass `limits.max_pending_rows` (a re-queued row keeps the room it
/// had; past the limit, calls are sent unchanged), the flush loop backs off instead of
/// re-sending the backlog every interval, and once the store heals every increment the
/// application was told succeeded is in the store, exactly, or in a record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_keeps_the_wrapper_within_its_row_limit_and_loses_nothing() {
    const LIMIT: usize = 100;
    let store = launch(StoreOptions::cqlsim_only("answers every write unavailable")).await;
    let server = store.sim();
    server.execute_script(None, SCHEMA).expect("schema");
    let dir = tempfile::tempdir().unwrap();
    let session = wrap(&store.contact_point(), dir.path(), |c| {
        c.limits.max_pending_rows = LIMIT;
        c.store.request_timeout = Duration::from_secs(2);
        c.flush.interval = Duration::from_millis(20);
        c.flush.jitter = Duration::ZERO;
        c.flush.max_backoff = Duration::from_millis(500);
    })
    .await;
    let update = session
        .prepare("UPDATE w.c1 SET c = c + ? WHERE k = ?")
        .await
        .unwrap();
    server.set_faults(vec!["unavailable,table=w.c1".parse().unwrap()]);
    let flushes_before = session.stats().flushes;
    let mut acknowledged: BTreeMap<String, i64> = BTreeMap::new();
    let mut most_rows = 0;
    let outage = std::time::Instant::now();
    for i in 0..2_000_i64 {
        let key = format!("k{i}");
        let delta = i % 7 + 1;
        // Past the limit the call is sent unchanged and the store refuses it: the
        // application sees the error, and the increment is its own to retry.
        if session
            .execute_unpaged(&update, (Counter(delta), &key))
            .await
            .is_ok()
        {
            *acknowledged.entry(key).or_default() += delta;
        }
        most_rows = most_rows.max(session.stats().pending_rows);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let outage = outage.elapsed();
    let flushes = session.stats().flushes - flushes_before;
    assert!(
        most_rows <= LIMIT as u64,
        "held {most_rows} rows, limit {LIMIT}"
    );
    let every_interval = (outage.as_millis() / 20) as u64;
    assert!(
        flushes * 4 <= every_interval,
        "{flushes} flushes in {outage:?}: backing off, not one every 20 ms"
    );
    server.clear_faults();
    for _ in 0..50 {
        if session.stats().pending_rows == 0 {
            break;
        }
        session.flush_now().await;
    }
    let unknown_path = session.log_path(WrapperOutcome::Unknown).await;
    let unsent_path = session.log_path(WrapperOutcome::Unsent).await;
    let rejected_path = session.log_path(WrapperOutcome::Rejected).await;
    let spill_path = dir.path().join(countersink::wrapper::spill::SPILL_FILE);
    session.shutdown().await;
    let mut recorded: BTreeMap<String, i64> = BTreeMap::new();
    for path in [&unknown_path, &unsent_path, &rejected_path, &spill_path] {
        for (key, sum) in sums_by_key(&records(path)) {
            *recorded.entry(key).or_default() += sum;
        }
    }
    assert!(!acknowledged.is_empty());
    for (key, fed) in &acknowledged {
        let stored = cell(server, "w.c1", "c", &format!("k = '{key}'")).unwrap_or(0);
        let in_records = recorded.get(key).copied().unwrap_or(0);
        assert_eq!(
            stored + in_records,
            *fed,
            "row {key}: fed {fed}, stored {stored}, in records {in_records}"
        );
    }
    store.shutdown().await;
}
