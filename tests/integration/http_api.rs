//! The HTTP increment API end to end: a JSON array and NDJSON land exactly, a bad item
//! refuses its whole request naming its index, an `Idempotency-Key` makes a retried
//! request count once (the same body replayed, another body 422), and each refusal is
//! counted.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use countersink::config::Config;
use countersink::vocabulary::Transport;

use crate::common::{
    Store, Writer, assert_one_connection_held, config, http_post, metrics_when, sidecar_config,
    start_cqlsim, start_sidecar, start_sidecar_without_store, start_store,
};

/// A POST to `/v1/increments`: the status, the head (lower case) and the body.
fn post(addr: SocketAddr, headers: &[(&str, &str)], body: &[u8]) -> (u16, String, String) {
    let (status, head, body) = http_post(addr, "/v1/increments", headers, body);
    (
        status,
        head,
        String::from_utf8(body).expect("a UTF-8 answer"),
    )
}

const JSON: (&str, &str) = ("Content-Type", "application/json");
const NDJSON: (&str, &str) = ("Content-Type", "application/x-ndjson");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn increments_over_http_land_once_with_idempotency_keys() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = sidecar_config(dir.path());
    config.ingest.http.enabled = true;
    config.ingest.http.listen = "127.0.0.1:0".parse().unwrap();
    config.ingest.http.max_items = 100;
    config.ingest.http.max_request_bytes = 16 * 1024;
    let store = start_store(&mut config).await;
    let sidecar = start_sidecar(&config).await;
    let bound = sidecar.bound();
    let http = bound.inet(Transport::Http).unwrap();

    // A JSON array: a configured family (its key from the tags) and the generic family.
    let array = br#"[{"name":"page.views","tags":{"page_id":"home"},"value":3},
        {"name":"api.requests","tags":["route:/a","canary"],"value":4},
        {"name":"api.requests","tags":{"route":"/a","canary":""},"value":5}]"#;
    let (status, _, body) = post(http, &[JSON], array);
    assert_eq!(status, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["accepted"], 3, "{answer}");
    assert_eq!(answer["refused"], 0, "{answer}");

    // NDJSON with an idempotency key, sent three times: applied once, replayed twice.
    let lines = b"{\"name\":\"page.views\",\"tags\":{\"page_id\":\"home\"},\"value\":10}\n{\"name\":\"api.requests\",\"tags\":{\"route\":\"/b\"},\"value\":1}\n";
    let key = ("Idempotency-Key", "\"order-1\"");
    let first = post(http, &[NDJSON, key], lines);
    assert_eq!(first.0, 200, "{}", first.2);
    for _ in 0..2 {
        let again = post(http, &[NDJSON, key], lines);
        assert_eq!((again.0, &again.2), (200, &first.2));
        assert!(again.1.contains("idempotent-replayed: true"), "{}", again.1);
    }
    assert!(!first.1.contains("idempotent-replayed"));
    // The same key with another body: 422, nothing applied.
    let other = post(
        http,
        &[NDJSON, key],
        b"{\"name\":\"page.views\",\"tags\":{\"page_id\":\"home\"},\"value\":1000}\n",
    );
    assert_eq!(other.0, 422, "{}", other.2);

    // A bad item refuses its request whole, naming the item; a retry with the key after
    // a refusal is applied (a refusal keeps nothing).
    let bad = br#"[{"name":"page.views","tags":{"page_id":"home"},"value":100},
        {"name":"api.requests","tags":{"route":"/c,d"},"value":1}]"#;
    let refused = post(http, &[JSON, ("Idempotency-Key", "fix-me")], bad);
    assert_eq!(refused.0, 400, "{}", refused.2);
    let error: serde_json::Value = serde_json::from_str(&refused.2).unwrap();
    assert_eq!(error["index"], 1, "{error}");
    let fixed = br#"[{"name":"page.views","tags":{"page_id":"home"},"value":100}]"#;
    assert_eq!(
        post(http, &[JSON, ("Idempotency-Key", "fix-me")], fixed).0,
        200
    );

    // Other refusals: each its status, nothing applied.
    assert_eq!(
        post(http, &[("Content-Type", "text/plain")], b"a:1|c").0,
        415
    );
    assert_eq!(post(http, &[JSON], b"{\"name\":\"a\",\"value\":1}").0, 400);
    assert_eq!(post(http, &[JSON], &vec![b' '; 20 * 1024]).0, 413);
    let too_many = format!("[{}]", vec![r#"{"name":"x","value":1}"#; 101].join(","));
    assert_eq!(post(http, &[JSON], too_many.as_bytes()).0, 400);
    assert_eq!(post(http, &[JSON, ("Idempotency-Key", "")], b"[]").0, 400);

    let metrics = bound.metrics.unwrap();
    metrics_when(metrics, |text| {
        let has = |series: &str| text.lines().any(|l| l == series);
        has("countersink_idempotency_keys_total{result=\"applied\"} 2")
            && has("countersink_idempotency_keys_total{result=\"replayed\"} 2")
            && has("countersink_idempotency_keys_total{result=\"other_body\"} 1")
            && has("countersink_lines_received_total{transport=\"http\"} 6")
            && has("countersink_packets_dropped_total{reason=\"unsupported\",transport=\"http\"} 1")
            && has("countersink_packets_dropped_total{reason=\"oversized\",transport=\"http\"} 1")
            && has("countersink_packets_dropped_total{reason=\"malformed\",transport=\"http\"} 3")
    })
    .await;
    let report = sidecar.shutdown().await.unwrap();
    assert_eq!(
        report.spilled + report.unknown + report.rejected,
        0,
        "{report:?}"
    );

    for table in ["metrics.views_by_day", "metrics.views_by_minute"] {
        assert_eq!(
            store.table_sum(table, "views").await,
            3 + 10 + 100,
            "{table}"
        );
    }
    for table in ["countersink.counts_by_day", "countersink.counts_by_minute"] {
        let rows = store
            .select(&format!(
                "SELECT name, tags, value FROM {}",
                store.table(table)
            ))
            .await;
        let mut totals = BTreeMap::new();
        for i in 0..rows.len() {
            let key = (
                rows.text(i, "name").unwrap().to_string(),
                rows.text(i, "tags").unwrap().to_string(),
            );
            *totals.entry(key).or_insert(0) += rows.get_i64(i, "value").unwrap();
        }
        assert_eq!(
            totals,
            BTreeMap::from([
                (("api.requests".into(), "canary,route:/a".into()), 9),
                (("api.requests".into(), "route:/b".into()), 1),
            ]),
            "{table}"
        );
    }
    store.shutdown().await;
}

/// With the buffer full (no store to flush to), increments past the row limit are
/// refused and listed by index in a 200; the next request is refused whole with 429 and
/// `Retry-After`, its `Idempotency-Key` left free for the retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_buffer_lists_refused_items_then_answers_retry_later() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = sidecar_config(dir.path());
    config.ingest.http.enabled = true;
    config.ingest.http.listen = "127.0.0.1:0".parse().unwrap();
    config.limits.max_pending_rows = 8;
    let sidecar = start_sidecar_without_store(&mut config).await;
    let bound = sidecar.bound();
    let http = bound.inet(Transport::Http).unwrap();

    let fill = format!(
        "[{}]",
        (0..16)
            .map(|i| format!(r#"{{"name":"fill","tags":{{"n":"{i}"}},"value":1}}"#))
            .collect::<Vec<_>>()
            .join(",")
    );
    let (status, _, body) = post(http, &[JSON], fill.as_bytes());
    assert_eq!(status, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    let refused = answer["refused"].as_u64().unwrap();
    assert!(
        refused > 0 && answer["accepted"].as_u64().unwrap() + refused == 16,
        "{answer}"
    );
    let listed = answer["refused_items"].as_array().unwrap();
    assert_eq!(listed.len() as u64, refused, "{answer}");

    let next = br#"[{"name":"later","value":1}]"#;
    let key = ("Idempotency-Key", "retry-me");
    let (status, head, _) = post(http, &[JSON, key], next);
    assert_eq!(status, 429, "{head}");
    assert!(head.contains("retry-after: 2"), "{head}");
    // Still full: refused again, not replayed (a refusal keeps nothing).
    let (status, head, _) = post(http, &[JSON, key], next);
    assert_eq!(status, 429, "{head}");
    assert!(!head.contains("idempotent-replayed"), "{head}");
    metrics_when(bound.metrics.unwrap(), |text| {
        text.lines()
            .any(|l| l == "countersink_packets_dropped_total{reason=\"busy\",transport=\"http\"} 2")
    })
    .await;
    sidecar.shutdown().await;
}

/// `ingest.http.max_connections`, from the configuration: with its one connection held
/// open, one more is closed at once without an answer and counted as refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_increment_api_holds_at_most_its_configured_connections() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = sidecar_config(dir.path());
    config.ingest.http.enabled = true;
    config.ingest.http.listen = "127.0.0.1:0".parse().unwrap();
    config.ingest.http.max_connections = 1;
    let sidecar = start_sidecar_without_store(&mut config).await;
    let held = assert_one_connection_held(&sidecar.bound(), Transport::Http).await;
    drop(held);
    sidecar.shutdown().await;
}

/// `ingest.http.durable`: the increments are in the ingest log (synced) before the 200,
/// and land in the store exactly once, through the spill and its replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_requests_are_synced_before_the_answer_and_land_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = sidecar_config(dir.path());
    config.ingest.http.enabled = true;
    config.ingest.http.durable = true;
    config.ingest.http.listen = "127.0.0.1:0".parse().unwrap();
    let store = start_store(&mut config).await;
    let sidecar = start_sidecar(&config).await;
    let bound = sidecar.bound();
    let http = bound.inet(Transport::Http).unwrap();
    let mut posted = 0;
    for i in 1..=20 {
        let body = format!(
            r#"[{{"name":"page.views","tags":{{"page_id":"home"}},"value":{i}}},
                {{"name":"page.views","tags":{{"page_id":"p{i}"}},"value":1}},
                {{"name":"page.views","tags":{{}},"value":1}}]"#
        );
        let (status, _, answer) = post(http, &[JSON], body.as_bytes());
        assert_eq!(status, 200, "{answer}");
        let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
        // The item without its key tag is refused and never logged.
        assert_eq!(
            (answer["accepted"].as_u64(), answer["refused"].as_u64()),
            (Some(2), Some(1))
        );
        posted += i + 1;
    }
    let text = metrics_when(bound.metrics.unwrap(), |text| {
        text.lines()
            .any(|l| l.starts_with("countersink_ingest_log_syncs_total ") && !l.ends_with(" 0"))
            && text.lines().any(|l| l == "countersink_ingest_log_bytes 0")
            && text.lines().any(|l| l == "countersink_spill_bytes 0")
    })
    .await;
    assert!(
        text.lines()
            .any(|l| l == "countersink_lines_received_total{transport=\"http\"} 60"),
        "{text}"
    );
    let report = sidecar.shutdown().await.unwrap();
    assert_eq!(report.unknown + report.rejected, 0, "{report:?}");
    for table in ["metrics.views_by_day", "metrics.views_by_minute"] {
        assert_eq!(store.table_sum(table, "views").await, posted, "{table}");
    }
    let left: Vec<String> = std::fs::read_dir(&config.state.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sealed") || n.starts_with("spill.0"))
        .collect();
    assert!(left.is_empty(), "sealed files or segments left: {left:?}");
    store.shutdown().await;
}

/// A durable listener whose ingest log is full (its sealed files waiting for room in a
/// full spill) answers 429 before writing anything, and the log stays within its bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_ingest_log_answers_retry_later_and_stays_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = sidecar_config(dir.path());
    config.ingest.http.enabled = true;
    config.ingest.http.durable = true;
    config.ingest.http.listen = "127.0.0.1:0".parse().unwrap();
    config.state.max_ingest_log_bytes = 4096;
    config.state.max_spill_bytes = 64;
    let sidecar = start_sidecar_without_store(&mut config).await;
    let bound = sidecar.bound();
    let http = bound.inet(Transport::Http).unwrap();
    let body = br#"[{"name":"page.views","tags":{"page_id":"home"},"value":1}]"#;
    let mut answered = 0;
    let refused = loop {
        let (status, head, _) = post(http, &[JSON], body);
        match status {
            200 => answered += 1,
            429 => break head,
            other => panic!("unexpected status {other}: {head}"),
        }
        assert!(answered < 1000, "the ingest log never filled");
    };
    assert!(refused.contains("retry-after: 2"), "{refused}");
    assert!(answered > 10, "{answered}");
    let text = metrics_when(bound.metrics.unwrap(), |text| {
        text.lines()
            .any(|l| l.starts_with("countersink_ingest_log_bytes "))
    })
    .await;
    let bytes: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("countersink_ingest_log_bytes "))
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(bytes > 0 && bytes <= 4096, "{bytes}");
    sidecar.shutdown().await;
    // What was answered is still on disk, for the next start.
    let on_disk: u64 = std::fs::read_dir(&config.state.dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().starts_with("ingest."))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert!(on_disk >= bytes, "{on_disk} < {bytes}");
}

/// A durable request refused whole after its items were checked (the ingest log has
/// room for its body, not for its lines: 429) counts nothing: its retries are counted
/// once, when one is answered. `countersink_lines_received_total` holds the items of
/// the answered requests only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_requests_refused_after_their_check_are_not_counted_received() {
    const ANSWERED: u64 = 5;
    let dir = tempfile::tempdir().unwrap();
    let body = br#"[{"name":"page.views","tags":{"page_id":"home"},"value":1}]"#;
    // What one such request appends: its group line and its increment's line.
    let mut lines = b"{\"g\":1}\n".to_vec();
    let minute = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 60;
    countersink::state::ingest_log::IngestEntry::write_line(
        &mut lines,
        "page.views",
        &[("page_id", "home")],
        1,
        u32::try_from(minute).unwrap(),
    );
    assert!(lines.len() > body.len(), "the lines outgrow the body");
    let mut config = sidecar_config(dir.path());
    config.ingest.http.enabled = true;
    config.ingest.http.durable = true;
    config.ingest.http.listen = "127.0.0.1:0".parse().unwrap();
    // Room for ANSWERED requests, then for a body but not its lines.
    config.state.max_ingest_log_bytes = ANSWERED * lines.len() as u64 + body.len() as u64;
    // The sealed files wait for room in the spill: the log's bytes stay.
    config.state.max_spill_bytes = 64;
    let sidecar = start_sidecar_without_store(&mut config).await;
    let bound = sidecar.bound();
    let http = bound.inet(Transport::Http).unwrap();
    for n in 0..ANSWERED + 3 {
        let (status, head, _) = post(http, &[JSON], body);
        let expected = if n < ANSWERED { 200 } else { 429 };
        assert_eq!(status, expected, "request {n}: {head}");
    }
    let answered = format!("countersink_lines_received_total{{transport=\"http\"}} {ANSWERED}");
    let received = |text: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix("countersink_lines_received_total{transport=\"http\"} "))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let text = metrics_when(bound.metrics.unwrap(), |text| received(text) >= ANSWERED).await;
    assert!(
        text.lines().any(|l| l == answered),
        "only the answered requests' items: {}",
        text.lines()
            .filter(|l| l.contains("transport=\"http\""))
            .collect::<Vec<_>>()
            .join("\n")
    );
    sidecar.shutdown().await;
}

/// What durable requests left in the state directory while the store was away reaches
/// the store after a restart, even with the durable listener turned off since (the start
/// moves the log into the spill whatever the listener), and exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingest_log_left_behind_is_replayed_by_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = sidecar_config(dir.path());
    config.ingest.http.enabled = true;
    config.ingest.http.durable = true;
    config.ingest.http.listen = "127.0.0.1:0".parse().unwrap();
    let mut offline = config.clone();
    let sidecar = start_sidecar_without_store(&mut offline).await;
    let http = sidecar.bound().inet(Transport::Http).unwrap();
    let mut posted = 0;
    for i in 1..=10 {
        let body = format!(r#"[{{"name":"page.views","tags":{{"page_id":"p{i}"}},"value":{i}}}]"#);
        let (status, _, answer) = post(http, &[JSON], body.as_bytes());
        assert_eq!(status, 200, "{answer}");
        posted += i;
    }
    sidecar.shutdown().await;
    let left: u64 = std::fs::read_dir(&config.state.dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name == "ingest.log" || name.ends_with(".sealed") || name.starts_with("spill.0")
        })
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert!(left > 0, "the answered increments are on disk");

    config.ingest.http.durable = false;
    let store = start_store(&mut config).await;
    let sidecar = start_sidecar(&config).await;
    metrics_when(sidecar.bound().metrics.unwrap(), |text| {
        text.lines().any(|l| l == "countersink_spill_bytes 0")
            && text.lines().any(|l| l == "countersink_ingest_log_bytes 0")
            && text
                .lines()
                .any(|l| l.starts_with("countersink_flushes_total ") && !l.ends_with(" 0"))
    })
    .await;
    let report = sidecar.shutdown().await.unwrap();
    assert_eq!(report.unknown + report.rejected, 0, "{report:?}");
    for table in ["metrics.views_by_day", "metrics.views_by_minute"] {
        assert_eq!(store.table_sum(table, "views").await, posted, "{table}");
    }
    store.shutdown().await;
}

/// Appends durable increments of `page.views` (page `p{i}`, value `i`) to the writer's
/// ingest log, as answered requests leave them.
fn log_views(writer: &Writer, pages: std::ops::RangeInclusive<i64>) {
    let minute = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 60;
    let mut lines = Vec::new();
    for i in pages {
        countersink::state::ingest_log::IngestEntry::write_line(
            &mut lines,
            "page.views",
            &[("page_id", &format!("p{i}"))],
            i,
            u32::try_from(minute).unwrap(),
        );
    }
    let log = writer.flusher.ingest_log().expect("a durable listener");
    log.append(&lines).expect("logged");
}

/// A writer with a durable listener's ingest log and `max_spill_bytes`, on cqlsim
/// refusing every write as not applied (a transient error), with 20 answered increments
/// logged and one flush round run: the round moved them into the spill, and its replay,
/// refused, wrote them again. Returns the spill's bytes after the round too.
async fn refused_round(dir: &Path, max_spill_bytes: u64) -> (Config, Store, Writer, u64) {
    let mut config = config(dir);
    config.ingest.http.enabled = true;
    config.ingest.http.durable = true;
    config.state.max_spill_bytes = max_spill_bytes;
    let store = start_cqlsim(&mut config, "refuses every write for a while").await;
    store
        .sim()
        .add_fault(cqlsim::FaultRule::new(cqlsim::FaultKind::Unavailable));
    let mut writer = Writer::start(&config).await;
    log_views(&writer, 1..=20);
    writer.flusher.flush_now().await;
    let bytes = writer.ledger.spill_bytes();
    (config, store, writer, bytes)
}

/// Answered increments that a refused replay read back go back to the spill even when
/// it has no room for a second copy of them: they are on disk already, so the replay
/// moves them rather than asking for new room. None is dropped, and each reaches the
/// store once when it answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_replay_moves_answered_increments_through_a_nearly_full_spill() {
    const SUM: i64 = 20 * 21 / 2;
    // One round's segment, as a refused replay writes it again.
    let sized = tempfile::tempdir().unwrap();
    let (_, store, writer, segment) = refused_round(sized.path(), 1 << 30).await;
    assert!(segment > 0);
    drop(writer);
    store.shutdown().await;

    // Room for that segment and half another: before the replay's end, its rows are
    // on disk twice.
    let dir = tempfile::tempdir().unwrap();
    let (config, store, mut writer, _) = refused_round(dir.path(), segment * 3 / 2).await;
    for _ in 0..3 {
        writer.flusher.flush_now().await;
    }
    let a = writer.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        (
            a.minute.dropped,
            a.minute.spilled,
            a.day.dropped,
            a.day.spilled
        ),
        (0, SUM.into(), 0, SUM.into()),
        "every answered increment on disk, none dropped: {a:?}"
    );
    let on_disk: i64 = crate::common::spilled_records(&config.state.dir)
        .iter()
        .filter(|r| r["granularity"] == "minute")
        .filter_map(|r| r["deltas"]["views"].as_i64())
        .sum();
    assert_eq!(on_disk, SUM);

    store.sim().clear_faults();
    for _ in 0..3 {
        writer.flusher.flush_now().await;
    }
    for table in ["metrics.views_by_day", "metrics.views_by_minute"] {
        assert_eq!(store.table_sum(table, "views").await, SUM.into(), "{table}");
    }
    let a = writer.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!((a.minute.applied, a.day.applied), (SUM.into(), SUM.into()));
    store.shutdown().await;
}

/// A round's answered increments whose segment alone is larger than
/// `state.max_spill_bytes` go into an empty spill all the same: waiting could never make
/// room for them, and they would hold the ingest log's room (refusing every durable
/// request) for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_file_larger_than_the_spill_limit_still_reaches_the_store() {
    const SUM: i64 = 20 * 21 / 2;
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.ingest.http.enabled = true;
    config.ingest.http.durable = true;
    config.state.max_spill_bytes = 512;
    let store = start_cqlsim(&mut config, "reads its request counts").await;
    let mut writer = Writer::start(&config).await;
    log_views(&writer, 1..=20);
    // The precondition, measured where the next round seals the log: the file it seals
    // (the active file, whole: nothing is sealed yet) is larger than the limit, and so is
    // the segment it becomes (two records per logged increment, each naming the series
    // and delta its line names, and more), going into an empty spill.
    let to_seal = writer
        .flusher
        .ingest_log()
        .expect("a durable listener")
        .bytes();
    assert!(
        to_seal > config.state.max_spill_bytes,
        "the file to seal ({to_seal} bytes) must pass state.max_spill_bytes ({})",
        config.state.max_spill_bytes
    );
    assert_eq!(writer.ledger.spill_bytes(), 0, "an empty spill");
    for _ in 0..3 {
        writer.flusher.flush_now().await;
    }
    for table in ["metrics.views_by_day", "metrics.views_by_minute"] {
        assert_eq!(store.table_sum(table, "views").await, SUM.into(), "{table}");
    }
    let left: Vec<String> = std::fs::read_dir(&config.state.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sealed") || n.starts_with("spill.0"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let a = writer.accounting();
    assert!(a.is_balanced(), "{a:?}");
    store.shutdown().await;
}

/// A sealed file of the ingest log that waited (its segment did not fit the spill) while
/// the replay moved past where its own segment would sort: it is given a number after
/// the replay cursor, so its rows are replayed rather than taken as consumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_file_the_replay_passed_is_renumbered_not_lost() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = sidecar_config(dir.path());
    let state = config.state.dir.clone();
    std::fs::create_dir_all(&state).unwrap();
    let minute = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 60;
    // Left by an earlier incarnation (0: the directory's first start is 1): sealed as its
    // flush 5, the replay cursor in its flush 9's segment.
    let lines: String = (1..=4)
        .map(|i| {
            format!(
                "{{\"n\":\"page.views\",\"t\":[[\"page_id\",\"p{i}\"]],\"d\":{i},\"m\":{minute}}}\n"
            )
        })
        .collect();
    std::fs::write(state.join("ingest.0000000000.000000000005.sealed"), lines).unwrap();
    std::fs::write(
        state.join("spill.cursor"),
        r#"{"segment":{"incarnation":0,"flush_seq":9,"recovered":false},"offset":0}"#,
    )
    .unwrap();
    let store = start_store(&mut config).await;
    let sidecar = start_sidecar(&config).await;
    metrics_when(sidecar.bound().metrics.unwrap(), |text| {
        text.lines().any(|l| l == "countersink_spill_bytes 0")
            && text.lines().any(|l| l == "countersink_ingest_log_bytes 0")
            && text
                .lines()
                .any(|l| l.starts_with("countersink_flushes_total ") && !l.ends_with(" 0"))
    })
    .await;
    sidecar.shutdown().await.unwrap();
    for table in ["metrics.views_by_day", "metrics.views_by_minute"] {
        assert_eq!(
            store.table_sum(table, "views").await,
            1 + 2 + 3 + 4,
            "{table}"
        );
    }
    store.shutdown().await;
}
