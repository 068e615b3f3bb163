//! Live reload of the sidecar's configuration (`POST /-/reload`, SIGHUP): a new mapping
//! takes effect after the rows pending under the old one reached their old table; an
//! invalid file, or one that changes a field needing a restart, is refused by name and
//! counted while the running configuration keeps working; new cardinality caps bind; and
//! under a steady stream of UDP lines, reloads back and forth lose and double nothing.

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use countersink::config::Config;
use countersink::flush::FlushReport;
use countersink::sidecar::Sidecar;
use countersink::sidecar::reload::ConfigSource;
use countersink::vocabulary::Transport;

use crate::common::{Serve, Store, http_get, http_post, metrics_when, start_store, wait_ready};

/// Two families of one shape, each with its own tables, and one rule sending
/// `api.<endpoint>.requests` to `family`. Both families list a name of their own in
/// `columns`, so each has its `requests` column whichever family the rule names.
fn config_text(state: &Path, family: &str, flush_interval: &str) -> String {
    format!(
        r#"
[store]
keyspace = "countersink"
request_timeout = "2s"

[flush]
interval = "{flush_interval}"
jitter = "10ms"
shutdown_deadline = "5s"

[state]
dir = "{state}"

[cardinality]
window = "1d"

[metrics]
listen = "127.0.0.1:0"

[ingest.udp]
listen = "127.0.0.1:0"

[[family]]
name = "api_a"
minute_table = "api_a_by_minute"
day_table = "api_a_by_day"
key = ["endpoint"]
[family.columns]
"api_a.requests" = "requests"

[[family]]
name = "api_b"
minute_table = "api_b_by_minute"
day_table = "api_b_by_day"
key = ["endpoint"]
[family.columns]
"api_b.requests" = "requests"

[[mapping]]
match = "api.*.requests"
family = "{family}"
column = "requests"
key = {{ endpoint = "$1" }}
"#,
        state = state.display(),
    )
}

/// A sidecar started from a file, as `countersink serve --config FILE` is: a reload
/// reads the file again.
struct Reloadable {
    sidecar: Sidecar,
    store: Store,
    file: PathBuf,
    state: PathBuf,
    metrics: SocketAddr,
    udp: SocketAddr,
}

impl Reloadable {
    /// The store with both families' tables, the file written (pointed at the store),
    /// the sidecar started from it and ready.
    async fn start(dir: &Path, flush_interval: &str) -> Reloadable {
        let state = dir.join("state");
        let (store, file) =
            store_and_file(dir, &config_text(&state, "api_a", flush_interval)).await;
        let config = Config::from_file(&file).unwrap();
        let path = file.clone();
        let source: ConfigSource =
            Arc::new(move || Config::from_file(&path).map_err(|e| e.to_string()));
        let sidecar = Sidecar::start_reloadable(&config, Some(source))
            .await
            .expect("the sidecar starts");
        wait_ready(&sidecar).await;
        let bound = sidecar.bound();
        Reloadable {
            metrics: bound.metrics.expect("metrics on"),
            udp: bound.inet(Transport::Udp).expect("UDP on"),
            sidecar,
            store,
            file,
            state,
        }
    }

    /// The file's text with the rule sending `api.*` to `family`.
    fn text(&self, family: &str, flush_interval: &str) -> String {
        config_text(&self.state, family, flush_interval)
    }

    /// Rewrites the file (`text` as the store sees it) and asks for a reload: the status
    /// and the body.
    fn reload(&self, text: &str) -> (u16, String) {
        std::fs::write(&self.file, self.store.config_file(text)).unwrap();
        post_reload(self.metrics)
    }

    /// Stops the sidecar (its final flush must run): the flush report and the store.
    async fn stop(self) -> (FlushReport, Store) {
        let report = self.sidecar.shutdown().await.expect("the final flush ran");
        (report, self.store)
    }

    /// Lines accepted so far.
    fn accepted(&self) -> u64 {
        self.sidecar.engine().aggregator().counters().accepted
    }

    /// Waits until `n` lines were accepted (the receive thread runs on its own).
    async fn wait_accepted(&self, n: u64) {
        for _ in 0..400 {
            if self.accepted() >= n {
                assert_eq!(self.accepted(), n, "more lines accepted than sent");
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("{} lines accepted of {n}", self.accepted());
    }
}

/// The store with the tables `text` names, and `text` written (pointed at the store) to
/// `dir/countersink.toml`.
async fn store_and_file(dir: &Path, text: &str) -> (Store, PathBuf) {
    let mut schema = Config::from_toml(text).expect("the test's configuration parses");
    let store = start_store(&mut schema).await;
    let file = dir.join("countersink.toml");
    std::fs::write(&file, store.config_file(text)).unwrap();
    (store, file)
}

/// The sums of `requests` over a family's minute and day tables.
async fn sums(store: &Store, family: &str) -> (i128, i128) {
    (
        store
            .table_sum(&format!("countersink.{family}_by_minute"), "requests")
            .await,
        store
            .table_sum(&format!("countersink.{family}_by_day"), "requests")
            .await,
    )
}

/// `POST /-/reload`: the status and the body.
fn post_reload(addr: SocketAddr) -> (u16, String) {
    let (status, _, body) = http_post(addr, "/-/reload", &[], b"");
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// Sends `n` lines of `name`, each `|c` of 1, a few per datagram.
fn send(udp: SocketAddr, name: &str, n: u64) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut left = n;
    while left > 0 {
        let lines = left.min(10);
        let packet: String = (0..lines).map(|_| format!("{name}:1|c\n")).collect();
        socket.send_to(packet.as_bytes(), udp).unwrap();
        left -= lines;
    }
}

/// The value of an unlabelled metric in `/metrics` text.
fn metric(text: &str, name: &str) -> Option<i64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_mapping_takes_effect_after_the_old_rows_reach_their_old_table() {
    let dir = tempfile::tempdir().unwrap();
    // No scheduled flush during the test: only the reload's and the final one.
    let side = Reloadable::start(dir.path(), "1h").await;
    send(side.udp, "api.home.requests", 30);
    side.wait_accepted(30).await;
    assert_eq!(
        sums(&side.store, "api_a").await,
        (0, 0),
        "nothing flushed yet"
    );

    let (status, body) = side.reload(&side.text("api_b", "1h"));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("generation 1"), "{body}");
    // The rows pending under the old rule were flushed, to the old family's tables,
    // before the reload answered.
    assert_eq!(sums(&side.store, "api_a").await, (30, 30));
    assert_eq!(sums(&side.store, "api_b").await, (0, 0));

    send(side.udp, "api.home.requests", 12);
    side.wait_accepted(42).await;
    let text = metrics_when(side.metrics, |t| {
        metric(t, "countersink_config_reloads_total") == Some(1)
    })
    .await;
    assert_eq!(metric(&text, "countersink_config_generation"), Some(1));
    assert_eq!(
        metric(&text, "countersink_config_reload_failures_total"),
        Some(0)
    );
    let (report, store) = side.stop().await;
    assert_eq!(report.applied, report.writes);
    assert_eq!(sums(&store, "api_a").await, (30, 30));
    assert_eq!(sums(&store, "api_b").await, (12, 12));
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_file_is_refused_counted_and_the_old_configuration_keeps_working() {
    let dir = tempfile::tempdir().unwrap();
    let side = Reloadable::start(dir.path(), "1h").await;

    // A rule naming a family that does not exist: refused with the validation's reason.
    let (status, body) = side.reload(&side.text("api_c", "1h"));
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("api_c"), "{body}");
    // A file that does not parse.
    std::fs::write(&side.file, "[flush\ninterval = ").unwrap();
    let (status, body) = post_reload(side.metrics);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("invalid configuration"), "{body}");

    let text = metrics_when(side.metrics, |t| {
        metric(t, "countersink_config_reload_failures_total") == Some(2)
    })
    .await;
    assert_eq!(metric(&text, "countersink_config_reloads_total"), Some(0));
    assert_eq!(metric(&text, "countersink_config_generation"), Some(0));

    // The rule in force still sends these to `api_a`.
    send(side.udp, "api.home.requests", 7);
    side.wait_accepted(7).await;
    let (_, store) = side.stop().await;
    assert_eq!(sums(&store, "api_a").await, (7, 7));
    assert_eq!(sums(&store, "api_b").await, (0, 0));
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_that_needs_a_restart_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let side = Reloadable::start(dir.path(), "1h").await;
    let valid = side.text("api_b", "1h");
    let refused = |text: String, name: &str| {
        let (status, body) = side.reload(&text);
        assert_eq!(status, 400, "{body}");
        assert!(
            body.contains(name) && body.contains("cannot change without a restart"),
            "{name}: {body}"
        );
    };
    // Where the process listens, keeps its state, and writes.
    refused(
        valid.replace(
            "[ingest.udp]\nlisten = \"127.0.0.1:0\"",
            "[ingest.udp]\nlisten = \"127.0.0.1:9\"",
        ),
        "ingest.udp.listen",
    );
    refused(
        valid.replace(
            &format!("dir = \"{}\"", side.state.display()),
            "dir = \"/elsewhere\"",
        ),
        "state.dir",
    );
    refused(
        valid.replace("[state]\n", "[state]\nwriter_id = \"another\"\n"),
        "state.writer_id",
    );
    refused(
        valid.replace("[store]\n", "[store]\nusername = \"someone\"\n"),
        "store.username",
    );
    // The time columns of the generic family, which is always there.
    refused(
        valid.replace(
            "[cardinality]\n",
            "[generic]\nminute_table = \"other\"\n\n[cardinality]\n",
        ),
        "generic.minute_table",
    );
    // The contact points, as the file states them (the store's own address otherwise).
    std::fs::write(
        &side.file,
        side.store.config_file(&valid).replacen(
            "contact_points = [",
            "contact_points = [\"10.0.0.1:9042\", ",
            1,
        ),
    )
    .unwrap();
    let (status, body) = post_reload(side.metrics);
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("store.contact_points cannot change without a restart"),
        "{body}"
    );

    let text = metrics_when(side.metrics, |t| {
        metric(t, "countersink_config_reload_failures_total") == Some(6)
    })
    .await;
    assert_eq!(metric(&text, "countersink_config_generation"), Some(0));
    // The valid file, at last, is taken.
    let (status, body) = side.reload(&valid);
    assert_eq!(status, 200, "{body}");
    let (_, store) = side.stop().await;
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_cardinality_caps_bind_from_the_next_new_context() {
    let dir = tempfile::tempdir().unwrap();
    let side = Reloadable::start(dir.path(), "1h").await;
    send(side.udp, "api.e1.requests", 1);
    send(side.udp, "api.e2.requests", 1);
    side.wait_accepted(2).await;

    // `api_a`, uncapped and so untracked until now, may bring one context a window (a
    // day here) from the swap on.
    let capped = side.text("api_a", "1h").replacen(
        "key = [\"endpoint\"]\n",
        "key = [\"endpoint\"]\nmax_contexts = 1\n",
        1,
    );
    let (status, body) = side.reload(&capped);
    assert_eq!(status, 200, "{body}");
    // The first context after the swap passes, the next one is dropped and counted.
    send(side.udp, "api.e1.requests", 1);
    send(side.udp, "api.e3.requests", 1);
    side.wait_accepted(4).await;
    let dropped = |t: &str| {
        t.lines().find_map(|l| {
            l.strip_prefix(
                "countersink_cardinality_dropped_total{family=\"api_a\",reason=\"cardinality_family\"} ",
            )?
            .parse::<u64>()
            .ok()
        })
    };
    metrics_when(side.metrics, |t| dropped(t) == Some(1)).await;
    let (_, store) = side.stop().await;
    assert_eq!(sums(&store, "api_a").await, (3, 3));
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_limits_bind_from_the_next_line() {
    let dir = tempfile::tempdir().unwrap();
    let side = Reloadable::start(dir.path(), "1h").await;
    let tagged = |udp| {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket
            .send_to(b"api.e1.requests:1|c|#env:prod,zone:a\n", udp)
            .unwrap();
    };
    tagged(side.udp);
    side.wait_accepted(1).await;
    let tight = side.text("api_a", "1h").replacen(
        "[cardinality]\n",
        "[limits]\nmax_tags = 1\nmax_pending_rows = 2\n\n[cardinality]\n",
        1,
    );
    let (status, body) = side.reload(&tight);
    assert_eq!(status, 200, "{body}");
    // Two tags are one too many now; of three new rows, two fit (the reload's flush
    // emptied the buffer) and the third is dropped.
    tagged(side.udp);
    send(side.udp, "api.e1.requests", 1);
    send(side.udp, "api.e2.requests", 1);
    send(side.udp, "api.e3.requests", 1);
    let text = metrics_when(side.metrics, |t| {
        t.contains("countersink_lines_invalid_total{reason=\"too_many_tags\"} 1")
            && t.contains("countersink_dropped_total{reason=\"max_rows\"} 1")
    })
    .await;
    assert_eq!(metric(&text, "countersink_config_reloads_total"), Some(1));
    // A limit that cannot change live is still refused by name.
    let (status, body) =
        side.reload(&tight.replacen("[limits]\n", "[limits]\ntimestamp_max_past = \"2h\"\n", 1));
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("limits.timestamp_max_past cannot change without a restart"),
        "{body}"
    );
    let (_, store) = side.stop().await;
    assert_eq!(sums(&store, "api_a").await, (3, 3));
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_under_a_stream_of_lines_lose_and_double_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // Scheduled flushes run between and during the reloads.
    let side = Reloadable::start(dir.path(), "100ms").await;
    let stop = Arc::new(AtomicBool::new(false));
    let sender = send_until(&side, &stop);
    for round in 0..6 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let family = if round % 2 == 0 { "api_b" } else { "api_a" };
        let (status, body) = side.reload(&side.text(family, "100ms"));
        assert_eq!(status, 200, "round {round}: {body}");
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    stop.store(true, Ordering::Relaxed);
    let sent = sender.join().unwrap();
    side.wait_accepted(sent).await;
    let counters = side.sidecar.engine().aggregator().counters();
    assert_eq!(counters.received_for(Transport::Udp), sent);

    let (report, store) = side.stop().await;
    assert_eq!(report.unknown + report.rejected + report.spilled, 0);
    let mut total = [0_i128; 2];
    let mut per_family = Vec::new();
    for family in ["api_a", "api_b"] {
        let (minute, day) = sums(&store, family).await;
        assert_eq!(minute, day, "{family}: minute and day tables agree");
        per_family.push(minute);
        total[0] += minute;
        total[1] += day;
    }
    assert_eq!(
        total,
        [i128::from(sent); 2],
        "every line once, {per_family:?}"
    );
    assert!(
        per_family.iter().all(|&sum| sum > 0),
        "both rules were in force for a while: {per_family:?}"
    );
    store.shutdown().await;
}

/// The file's text with `api_a` writing to `api_a<suffix>_by_minute` and `_by_day`.
fn moved(text: &str, suffix: &str) -> String {
    text.replace("\"api_a_by_", &format!("\"api_a{suffix}_by_"))
}

/// Creates the tables `text` names that the store lacks.
async fn create_tables(store: &Store, text: &str) {
    let config = Config::from_toml(&store.config_file(text)).expect("the test's file parses");
    store.create_schema(&config).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_family_moved_to_new_tables_sends_what_came_before_to_the_old_ones() {
    let dir = tempfile::tempdir().unwrap();
    // No scheduled flush: only the reload's and the final one.
    let side = Reloadable::start(dir.path(), "1h").await;
    send(side.udp, "api.home.requests", 30);
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .send_to(b"api_a.requests:5|c|#endpoint:e9\n", side.udp)
        .unwrap();
    side.wait_accepted(31).await;
    let text = moved(&side.text("api_a", "1h"), "_v2");
    create_tables(&side.store, &text).await;
    let (status, body) = side.reload(&text);
    assert_eq!(status, 200, "{body}");
    // Answered once the barrier passed: what came before is in the old tables already,
    // by the reload's own flush.
    assert_eq!(sums(&side.store, "api_a").await, (35, 35));
    assert_eq!(sums(&side.store, "api_a_v2").await, (0, 0));
    // After it, both the rule and the family's own name lead to the new tables.
    send(side.udp, "api.home.requests", 7);
    socket
        .send_to(b"api_a.requests:1|c|#endpoint:e9\n", side.udp)
        .unwrap();
    side.wait_accepted(39).await;
    // And a family added live takes its own names.
    let added = format!(
        "{text}\n[[family]]\nname = \"api_c\"\nminute_table = \"api_c_by_minute\"\nday_table = \"api_c_by_day\"\nkey = [\"endpoint\"]\n[family.columns]\n\"api_c.requests\" = \"requests\"\n"
    );
    create_tables(&side.store, &added).await;
    let (status, body) = side.reload(&added);
    assert_eq!(status, 200, "{body}");
    assert_eq!(sums(&side.store, "api_a_v2").await, (8, 8));
    socket
        .send_to(b"api_c.requests:4|c|#endpoint:e1\n", side.udp)
        .unwrap();
    side.wait_accepted(40).await;
    // The same file once more: a flush round, and nothing changes.
    let (status, body) = side.reload(&added);
    assert_eq!(status, 200, "{body}");
    assert_eq!(sums(&side.store, "api_c").await, (4, 4));
    // What names families beside the engine knows the new one.
    let (_, hot) = http_get(side.metrics, "/debug/hot");
    assert!(hot.contains("\"api_c\""), "{hot}");
    let text = metrics_when(side.metrics, |t| {
        metric(t, "countersink_config_reloads_total") == Some(3)
    })
    .await;
    assert!(
        text.lines().any(
            |l| l.starts_with("countersink_cql_write_duration_seconds_count{table=")
                && l.contains("api_c_by_minute")
        ),
        "the new table is labelled"
    );
    // Back to the first tables: two definitions of `api_a` now name them, and their
    // writes are still counted once (one write a table: the first reload's flush).
    let back = added.replace("\"api_a_v2_by_", "\"api_a_by_");
    let (status, body) = side.reload(&back);
    assert_eq!(status, 200, "{body}");
    let applied = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| {
                l.starts_with("countersink_cql_writes_total{")
                    && l.contains("api_a_by_minute")
                    && l.contains("outcome=\"applied\"")
            })
            .map(str::to_owned)
            .collect()
    };
    let text = metrics_when(side.metrics, |t| {
        metric(t, "countersink_config_reloads_total") == Some(4)
    })
    .await;
    let lines = applied(&text);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].ends_with(" 2"), "{lines:?}");
    assert_eq!(
        metric(&text, "countersink_config_reload_failures_total"),
        Some(0)
    );
    let (report, store) = side.stop().await;
    assert_eq!(report.unknown + report.rejected + report.spilled, 0);
    assert_eq!(sums(&store, "api_a").await, (35, 35));
    assert_eq!(sums(&store, "api_a_v2").await, (8, 8));
    assert_eq!(sums(&store, "api_c").await, (4, 4));
    assert_eq!(sums(&store, "api_b").await, (0, 0));
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_family_counts_its_cardinality_drops_once() {
    let dir = tempfile::tempdir().unwrap();
    let side = Reloadable::start(dir.path(), "1h").await;
    let capped = side.text("api_a", "1h").replacen(
        "key = [\"endpoint\"]\n",
        "key = [\"endpoint\"]\nmax_contexts = 1\n",
        1,
    );
    let (status, body) = side.reload(&capped);
    assert_eq!(status, 200, "{body}");
    send(side.udp, "api.e1.requests", 1);
    send(side.udp, "api.e2.requests", 1);
    side.wait_accepted(2).await;
    let dropped = |t: &str| {
        t.lines().find_map(|l| {
            l.strip_prefix(
                "countersink_cardinality_dropped_total{family=\"api_a\",reason=\"cardinality_family\"} ",
            )?
            .parse::<u64>()
            .ok()
        })
    };
    metrics_when(side.metrics, |t| dropped(t) == Some(1)).await;
    let moved_text = moved(&capped, "_v2");
    create_tables(&side.store, &moved_text).await;
    let (status, body) = side.reload(&moved_text);
    assert_eq!(status, 200, "{body}");
    let text = metrics_when(side.metrics, |t| {
        metric(t, "countersink_config_reloads_total") == Some(2)
    })
    .await;
    assert_eq!(dropped(&text), Some(1), "the drop before the move, once");
    // The new definition counts its window afresh: one context passes, the next is
    // dropped, and the family's count goes on from where it was.
    send(side.udp, "api.e3.requests", 1);
    send(side.udp, "api.e4.requests", 1);
    side.wait_accepted(4).await;
    metrics_when(side.metrics, |t| dropped(t) == Some(2)).await;
    let (_, store) = side.stop().await;
    assert_eq!(sums(&store, "api_a").await, (1, 1));
    assert_eq!(sums(&store, "api_a_v2").await, (1, 1));
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_tables_that_do_not_match_refuse_the_reload_whole() {
    let dir = tempfile::tempdir().unwrap();
    let side = Reloadable::start(dir.path(), "1h").await;
    send(side.udp, "api.home.requests", 3);
    side.wait_accepted(3).await;
    // No such tables.
    let (status, body) = side.reload(&moved(&side.text("api_a", "1h"), "_none"));
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("the new families' tables") && body.contains("does not exist"),
        "{body}"
    );
    // Tables of another shape: no `endpoint` column, `requests` not a counter.
    for table in ["api_a_bad_by_minute", "api_a_bad_by_day"] {
        let name = side.store.table(&format!("countersink.{table}"));
        side.store
            .execute(&format!(
                "CREATE TABLE {name} (page text, day date, requests bigint, PRIMARY KEY ((page, day)))"
            ))
            .await;
    }
    let (status, body) = side.reload(&moved(&side.text("api_a", "1h"), "_bad"));
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("api_a_bad_by_minute"), "{body}");
    let text = metrics_when(side.metrics, |t| {
        metric(t, "countersink_config_reload_failures_total") == Some(2)
    })
    .await;
    assert_eq!(metric(&text, "countersink_config_generation"), Some(0));
    // The running families stay: the next lines go where the first ones did.
    send(side.udp, "api.home.requests", 2);
    side.wait_accepted(5).await;
    let (report, store) = side.stop().await;
    assert_eq!(report.unknown + report.rejected + report.spilled, 0);
    assert_eq!(sums(&store, "api_a").await, (5, 5));
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_moved_back_and_forth_under_a_stream_of_lines_lose_and_double_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // Scheduled flushes run between and during the reloads.
    let side = Reloadable::start(dir.path(), "100ms").await;
    let versions = ["", "_v2", "_v3"];
    for suffix in versions {
        create_tables(&side.store, &moved(&side.text("api_a", "100ms"), suffix)).await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let sender = send_until(&side, &stop);
    for round in 0..6 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let suffix = versions[(round + 1) % versions.len()];
        let (status, body) = side.reload(&moved(&side.text("api_a", "100ms"), suffix));
        assert_eq!(status, 200, "round {round}: {body}");
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    stop.store(true, Ordering::Relaxed);
    let sent = sender.join().unwrap();
    side.wait_accepted(sent).await;

    let (report, store) = side.stop().await;
    assert_eq!(report.unknown + report.rejected + report.spilled, 0);
    let mut total = [0_i128; 2];
    let mut per_table = Vec::new();
    for suffix in versions {
        let (minute, day) = sums(&store, &format!("api_a{suffix}")).await;
        assert_eq!(minute, day, "api_a{suffix}: minute and day tables agree");
        per_table.push(minute);
        total[0] += minute;
        total[1] += day;
    }
    assert_eq!(
        total,
        [i128::from(sent); 2],
        "every line once, {per_table:?}"
    );
    assert!(
        per_table.iter().all(|&sum| sum > 0),
        "each table was written for a while: {per_table:?}"
    );
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_file_serve_was_started_with() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let (store, file) = store_and_file(dir.path(), &config_text(&state, "api_a", "1h")).await;
    let mut serve = Serve::start([std::ffi::OsStr::new("--config"), file.as_os_str()]);

    std::fs::write(
        &file,
        store.config_file(&config_text(&state, "api_b", "1h")),
    )
    .unwrap();
    serve.signal("HUP");
    let line = serve.log_until("Configuration reload");
    assert!(line.contains("Configuration reloaded"), "{line}");
    assert!(line.contains("SIGHUP"), "{line}");

    let moved = config_text(&dir.path().join("elsewhere"), "api_b", "1h");
    std::fs::write(&file, store.config_file(&moved)).unwrap();
    serve.signal("HUP");
    let line = serve.log_until("Configuration reload");
    assert!(
        line.contains("refused") && line.contains("state.dir cannot change without a restart"),
        "{line}"
    );
    // Still running, and it stops cleanly.
    let (status, _) = serve.terminate();
    assert!(status.success(), "{status}");
    store.shutdown().await;
}

/// `log.filter` changes live: turned to `warn`, the reload's own info line is no longer
/// written (the new filter is in force before it); an error still is; turned back to
/// `info`, the next reload's line is written again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_the_log_filter() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    // A known metrics port: the reload that turns the filter to `warn` logs nothing, so
    // the test sees it take effect in `countersink_config_generation`.
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let listen_on = |text: String| {
        text.replacen(
            "listen = \"127.0.0.1:0\"",
            &format!("listen = \"{metrics}\""),
            1,
        )
    };
    let text = listen_on(config_text(&state, "api_a", "1h"));
    let mut schema = Config::from_toml(&text).unwrap();
    let store = start_store(&mut schema).await;
    let file = dir.path().join("countersink.toml");
    let with_filter = |text: &str, filter: &str| {
        store.config_file(&format!("[log]\nfilter = \"{filter}\"\n{text}"))
    };
    std::fs::write(&file, with_filter(&text, "info")).unwrap();
    let mut serve = Serve::start([std::ffi::OsStr::new("--config"), file.as_os_str()]);

    std::fs::write(&file, with_filter(&text, "warn")).unwrap();
    serve.signal("HUP");
    metrics_when(metrics, |m| {
        metric(m, "countersink_config_generation") == Some(1)
    })
    .await;
    // A change that needs a restart: refused, and logged at error level.
    let moved = listen_on(config_text(&dir.path().join("elsewhere"), "api_a", "1h"));
    std::fs::write(&file, with_filter(&moved, "warn")).unwrap();
    serve.signal("HUP");
    let line = serve.log_until("Configuration reload");
    assert!(
        line.contains("refused") && line.contains("state.dir"),
        "the first reload's info line is filtered out: {line}"
    );
    std::fs::write(&file, with_filter(&text, "countersink=loud")).unwrap();
    serve.signal("HUP");
    let line = serve.log_until("Configuration reload");
    assert!(
        line.contains("refused") && line.contains("log.filter"),
        "a filter that does not parse is refused: {line}"
    );
    std::fs::write(&file, with_filter(&text, "info")).unwrap();
    serve.signal("HUP");
    let line = serve.log_until("Configuration reload");
    assert!(line.contains("Configuration reloaded"), "{line}");
    let (status, _) = serve.terminate();
    assert!(status.success(), "{status}");
    store.shutdown().await;
}

/// A thread sending `api.e<N>.requests:1|c` lines over UDP to `side`, five endpoints,
/// five lines a datagram, until `stop`: how many it sent. Never more than 40 datagrams
/// ahead of the receiver, so that the kernel's receive buffer never overflows (a
/// datagram lost there would not be the reload's doing).
fn send_until(side: &Reloadable, stop: &Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let (stop, udp, engine) = (stop.clone(), side.udp, side.sidecar.engine().clone());
    std::thread::spawn(move || {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut sent = 0_u64;
        let mut i = 0_u64;
        while !stop.load(Ordering::Relaxed) {
            let received = engine.aggregator().counters().received_for(Transport::Udp);
            if sent - received > 200 {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            let packet: String = (0..5)
                .map(|k| format!("api.e{}.requests:1|c\n", (i + k) % 5))
                .collect();
            socket.send_to(packet.as_bytes(), udp).unwrap();
            sent += 5;
            i += 1;
        }
        sent
    })
}
