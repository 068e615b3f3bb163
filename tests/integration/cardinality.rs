//! Cardinality caps: a family's distinct contexts and a tag's distinct values per window,
//! the drops they count (by reason and family), the window that starts afresh, and the
//! view (`/debug/contexts`, `countersink contexts`) that names the tag that exploded.

use std::sync::Arc;
use std::time::Duration;

use countersink::aggregate::cardinality::ContextsReport;
use countersink::config::Config;
use countersink::telemetry::{Accounting, Metrics};
use countersink::vocabulary::{DropReason, Transport};

use crate::common::{
    T0, Writer, cli_stdout, config, http_get, metrics_when, sidecar_config, start_sidecar,
    start_store,
};

/// The generic family caps `user_id` at 3 values, the views family at 2 keys.
fn capped(mut config: Config) -> Config {
    config.cardinality.window = Duration::from_secs(60);
    config.generic.max_tag_values = [("user_id".to_string(), 3)].into();
    config.families[0].max_contexts = Some(2);
    config
}

/// Five users and four pages in one window, sent twice with a flush between (the second
/// time every line comes from the engine's line cache and creates its row again): the
/// store holds exactly the admitted rows, the drops are counted by reason and family and
/// in the accounting identity, and the next window admits what the first refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caps_admit_exactly_their_contexts_and_count_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = capped(config(dir.path()));
    let store = start_store(&mut config).await;
    let mut writer = Writer::start(&config).await;
    let now = T0 - 3600; // a minute boundary: the window of 60 s starts here
    let mut packet = String::new();
    for user in 1..=5 {
        packet.push_str(&format!("req:1|c|#env:prod,user_id:u{user}\n"));
    }
    for page in 1..=4 {
        packet.push_str(&format!("page.views:1|c|#page_id:p{page}\n"));
    }
    for round in 0..2 {
        writer
            .engine
            .ingest_packet(packet.as_bytes(), Transport::Udp, now + 10 * round);
        writer.flusher.flush_now().await;
    }
    let generic = store
        .select(&format!(
            "SELECT tags, value FROM {}.counts_by_minute",
            config.store.keyspace
        ))
        .await;
    let mut users: Vec<String> = (0..generic.len())
        .map(|i| match generic.get(i, "tags") {
            Some(scylla::value::CqlValue::Text(tags)) => tags.clone(),
            other => panic!("tags: {other:?}"),
        })
        .collect();
    users.sort();
    assert_eq!(
        users,
        [
            "env:prod,user_id:u1",
            "env:prod,user_id:u2",
            "env:prod,user_id:u3"
        ]
    );
    assert!((0..generic.len()).all(|i| generic.get_i64(i, "value") == Some(2)));
    let views = store
        .select(&format!(
            "SELECT page_id, views FROM {}",
            store.table("metrics.views_by_minute")
        ))
        .await;
    assert_eq!(views.len(), 2, "p1 and p2 only");
    assert_eq!(store.table_sum("metrics.views_by_minute", "views").await, 4);

    let counters = writer.engine.aggregator().counters();
    assert_eq!(counters.dropped_for(DropReason::CardinalityTag), 4);
    assert_eq!(counters.dropped_for(DropReason::CardinalityFamily), 4);
    let accounting: Accounting = writer.accounting();
    assert!(accounting.is_balanced(), "{accounting:?}");
    // The next window starts from zero: u4 and p3 get in.
    let next = now + 60;
    writer.engine.ingest_packet(
        b"req:1|c|#env:prod,user_id:u4\npage.views:1|c|#page_id:p3",
        Transport::Udp,
        next,
    );
    writer.flusher.flush_now().await;
    assert_eq!(store.table_sum("metrics.views_by_minute", "views").await, 5);
    let generic = store
        .select(&format!(
            "SELECT value FROM {}.counts_by_minute",
            config.store.keyspace
        ))
        .await;
    let sum: i64 = (0..generic.len())
        .filter_map(|i| generic.get_i64(i, "value"))
        .sum();
    assert_eq!((generic.len(), sum), (4, 7), "u4's row in the next minute");
    let counters = writer.engine.aggregator().counters();
    assert_eq!(counters.dropped_total(), 8, "nothing more dropped");
    let report = writer.engine.aggregator().cardinality().report(next);
    let generic = &report.families[0];
    assert_eq!(generic.current.contexts, 1);
    let previous = generic.previous.as_ref().expect("the first window");
    assert_eq!((previous.contexts, previous.dropped_tag), (3, 4));
    // Last: a scrape reads the trackers at the wall clock's window, later than `next`.
    let metrics = Metrics::new(writer.engine.clone(), writer.ledger.clone())
        .unwrap()
        .render();
    for line in [
        "countersink_cardinality_dropped_total{family=\"generic\",reason=\"cardinality_tag\"} 4",
        "countersink_cardinality_dropped_total{family=\"generic\",reason=\"cardinality_family\"} 0",
        "countersink_cardinality_dropped_total{family=\"views\",reason=\"cardinality_family\"} 4",
        "countersink_dropped_total{reason=\"cardinality_tag\"} 4",
        "countersink_dropped_total{reason=\"cardinality_family\"} 4",
    ] {
        assert!(metrics.contains(line), "missing {line} in\n{metrics}");
    }

    store.shutdown().await;
}

/// A sidecar whose generic family caps `user_id` at 2 values: `/debug/contexts` and
/// `countersink contexts` name the tag, its count, its cap, its drops and samples.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_view_names_the_tag_that_exploded() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = sidecar_config(dir.path());
    // An hour-long window: the lines below land in one window however slow the run.
    config.cardinality.window = Duration::from_secs(3600);
    config.generic.max_tag_values = [("user_id".to_string(), 2)].into();
    let store = start_store(&mut config).await;
    let sidecar = start_sidecar(&config).await;
    let bound = sidecar.bound();
    let addr = bound.metrics.unwrap();
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let lines: String = (1..=5)
        .map(|u| format!("checkout:1|c|#region:eu,user_id:user-{u}\n"))
        .collect();
    socket
        .send_to(lines.as_bytes(), bound.inet(Transport::Udp).unwrap())
        .unwrap();
    metrics_when(addr, |text| {
        text.contains(
            "countersink_cardinality_dropped_total{family=\"generic\",reason=\"cardinality_tag\"} 3",
        )
    })
    .await;
    let (status, body) = http_get(addr, "/debug/contexts");
    assert_eq!(status, 200);
    let report: ContextsReport = serde_json::from_str(&body).unwrap();
    assert_eq!(report.window_secs, 3600);
    let generic = &report.families[0];
    assert_eq!(generic.family, "generic");
    assert_eq!(generic.dropped_tag_total, 3);
    // The window may have just ended on a slow run: the tag is in one of the two.
    let window = if generic.current.tags.is_empty() {
        generic.previous.as_ref().unwrap()
    } else {
        &generic.current
    };
    let user = window.tags.iter().find(|t| t.tag == "user_id").unwrap();
    assert_eq!(
        (user.values, user.max_values, user.dropped),
        (2, Some(2), 3)
    );
    assert_eq!(user.samples.len(), 2);
    assert!(user.samples.iter().all(|s| s.starts_with("user-")));

    let table = cli_stdout(["contexts", "--metrics-addr", &addr.to_string()]);
    assert!(table.contains("family generic"), "{table}");
    let row = table
        .lines()
        .find(|l| l.trim_start().starts_with("user_id"))
        .unwrap_or_else(|| panic!("no user_id row in\n{table}"));
    assert!(row.ends_with("<- full") && row.contains("user-"), "{row}");
    let json = cli_stdout([
        "contexts",
        "--metrics-addr",
        &format!("http://{addr}"),
        "--format",
        "json",
    ]);
    let again: ContextsReport = serde_json::from_str(&json).unwrap();
    assert_eq!(again.families[0].dropped_tag_total, 3);
    sidecar.shutdown().await.unwrap();
    store.shutdown().await;
}

/// The engine's trackers are shared by every thread: a context admitted by one stripe
/// is admitted by another, and the cap holds across them.
#[test]
fn the_cap_holds_across_threads() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.generic.max_contexts = Some(50);
    let engine = Arc::new(countersink::engine::Engine::with_seed(&config, Some(1)).unwrap());
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                for i in 0..100 {
                    // Every thread sends the same 100 contexts, in another order.
                    let n = (i * 7 + t * 13) % 100;
                    let line = format!("m{n}:1|c");
                    engine.ingest_packet(line.as_bytes(), Transport::Udp, T0);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let snapshot = engine.aggregator().snapshot();
    let names: std::collections::BTreeSet<String> = snapshot
        .to_string()
        .lines()
        .map(|l| l.split(" = ").next().unwrap().to_owned())
        .collect();
    // Rows of one context in several stripes appear once per context in the snapshot.
    assert_eq!(names.len(), 50);
    let counters = engine.aggregator().counters();
    assert_eq!(counters.accepted, 400);
    assert_eq!(
        counters.dropped_for(DropReason::CardinalityFamily),
        400 - snapshot_total(&snapshot)
    );
}

/// Sum of every pending delta of a snapshot (one column each here).
fn snapshot_total(snapshot: &countersink::aggregate::Snapshot) -> u64 {
    snapshot
        .to_string()
        .lines()
        .map(|l| {
            let columns = l.split(" = ").nth(1).unwrap();
            columns
                .trim_matches(|c| c == '[' || c == ']')
                .parse::<u64>()
                .unwrap()
        })
        .sum()
}

/// The in-process path (`Recorder::incr`, OTLP points) is capped as lines are, and says
/// why an increment was dropped; a configured family's cap names its key column.
#[test]
fn in_process_increments_are_capped_and_told_why() {
    use countersink::engine::RecordError;
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.families[0].max_tag_values = [("page_id".to_string(), 1)].into();
    let engine = countersink::engine::Engine::with_seed(&config, Some(1)).unwrap();
    let views = |page| engine.record("page.views", &[("page_id", page)][..], 1, T0, None);
    assert_eq!(views("home"), Ok(()));
    assert_eq!(views("home"), Ok(()), "the row exists: no check");
    assert_eq!(
        views("about"),
        Err(RecordError::Dropped(DropReason::CardinalityTag))
    );
    let report = engine.aggregator().cardinality().report(T0);
    let family = report
        .families
        .iter()
        .find(|f| f.family == "views")
        .unwrap();
    let page = &family.current.tags[0];
    assert_eq!(
        (page.tag.as_str(), page.values, page.dropped),
        ("page_id", 1, 1)
    );
    assert_eq!(page.samples, ["home"]);
}
