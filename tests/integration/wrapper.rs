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
use countersink::state::{OutcomeLog, Target, WriteRecord};
use countersink::wrapper::PassthroughReason;
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
pub(crate) async fn wrap(
    contact: &str,
    dir: &Path,
    tweak: impl FnOnce(&mut Config),
) -> CounterSession {
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
        "countersink_wrapper_stage_delta{stage=\"pending\"} 0",
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

pub(crate) const SCHEMA: &str = "
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

/// The records of a log the wrapper wrote: every one of an application table.
pub(crate) fn records(path: &Path) -> Vec<WriteRecord> {
    let records: Vec<WriteRecord> = std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("record"))
        .collect();
    of_tables(records)
}

/// The records of the spill segments of a state directory the wrapper used (the
/// sidecar's segments: the wrapper spills into them), in replay order.
pub(crate) fn spilled(state: &Path) -> Vec<WriteRecord> {
    let records = crate::common::spilled_records(state)
        .into_iter()
        .map(|v| serde_json::from_value(v).expect("record"))
        .collect();
    of_tables(records)
}

fn of_tables(records: Vec<WriteRecord>) -> Vec<WriteRecord> {
    for record in &records {
        assert!(
            matches!(record.target(), Target::Table(_)),
            "a wrapper record names its table, not a family: {record:?}"
        );
    }
    records
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
    let unknown_path = session.log_path(OutcomeLog::Unknown).await;
    let rejected_path = session.log_path(OutcomeLog::Rejected).await;
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
    assert!(records(&rejected_path).is_empty());
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
