//! The request path with several handlers: requests are applied at the same time, and
//! one `Idempotency-Key` table serves them all.

use std::sync::mpsc;

use super::*;

/// Records `slow` only once let go (telling `entered` first); anything else at once.
struct Gate {
    entered: mpsc::Sender<()>,
    release: Arc<Mutex<mpsc::Receiver<()>>>,
}

impl PacketHandler for Gate {
    fn handle(&mut self, _packet: &[u8]) {}

    fn record(&mut self, name: &str, _: &[(&str, &str)], _: i64, _: Option<i64>) -> Recorded {
        if name == "slow" {
            self.entered.send(()).unwrap();
            self.release.lock().recv().unwrap();
        }
        Recorded::Accepted
    }
}

/// The shared state of a listener with `workers` gated handlers and `durable`'s log:
/// with the receiver told when a `slow` item is entered, and the sender that lets it go.
fn gated(
    workers: usize,
    durable: Option<Arc<crate::state::ingest_log::IngestLog>>,
) -> (Arc<Shared<Gate>>, mpsc::Receiver<()>, mpsc::Sender<()>) {
    let (entered, entered_rx) = mpsc::channel();
    let (release_tx, release) = mpsc::channel();
    let release = Arc::new(Mutex::new(release));
    let handlers = HandlerPool::new(workers, || Gate {
        entered: entered.clone(),
        release: Arc::clone(&release),
    });
    let shared = Arc::new(Shared::new(
        handlers,
        &HttpApiConfig::default(),
        Arc::new(IngestStats::default()),
        durable,
    ));
    (shared, entered_rx, release_tx)
}

fn request<H: PacketHandler>(shared: &Arc<Shared<H>>, key: Option<&str>, body: &str) -> Response {
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(key) = key {
        headers.insert(IDEMPOTENCY_KEY, HeaderValue::from_str(key).unwrap());
    }
    let call = increments(
        State(Arc::clone(shared)),
        headers,
        Body::from(body.to_owned()),
    );
    // With a timer, as the listener's runtime: the body is read within a timeout.
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(call)
}

/// While a request with a key is being applied on one handler, a request without one is
/// applied on another, the same key is refused with 409, and once the first is
/// answered the key replays its answer.
#[test]
fn workers_apply_at_once_and_share_the_idempotency_table() {
    let (shared, entered_rx, release_tx) = gated(2, None);
    let slow = r#"[{"name":"slow","value":1}]"#;

    let first = std::thread::spawn({
        let shared = Arc::clone(&shared);
        move || request(&shared, Some("k"), slow).status()
    });
    entered_rx.recv().unwrap();
    // Another request, on another thread, while the first holds its handler: it must
    // finish (a lone handler would keep it waiting until the first is let go).
    let (done_tx, done) = mpsc::channel();
    std::thread::spawn({
        let shared = Arc::clone(&shared);
        move || {
            let other = request(&shared, None, r#"[{"name":"fast","value":1}]"#);
            let _ = done_tx.send(other.status());
        }
    });
    let other = done
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("another handler was free");
    assert_eq!(other, StatusCode::OK);
    let same_key = request(&shared, Some("k"), slow);
    assert_eq!(same_key.status(), StatusCode::CONFLICT);

    release_tx.send(()).unwrap();
    assert_eq!(first.join().unwrap(), StatusCode::OK);
    let replayed = request(&shared, Some("k"), slow);
    assert_eq!(replayed.status(), StatusCode::OK);
    assert_eq!(replayed.headers()[REPLAYED], "true");
}

/// A durable request whose client goes away while its lines wait for their sync (the
/// server drops the request's future then): the request still runs to its end, and its
/// `Idempotency-Key` is answered rather than left "in flight", so a retry with it gets
/// the kept answer, not 409 until a restart.
#[test]
fn a_durable_request_dropped_while_syncing_still_answers_its_key() {
    use crate::state::ingest_log::{IngestLog, Retention};
    let dir = tempfile::tempdir().unwrap();
    let retention = Retention {
        window_secs: 600,
        max_keys: 16,
        max_streams: 16,
    };
    let log = Arc::new(IngestLog::open(dir.path(), 1 << 20, 1, retention).unwrap());
    let (shared, _entered, _release) = gated(1, Some(Arc::clone(&log)));
    let body = r#"[{"name":"fast","value":1}]"#;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    // Polled once, then dropped, as a server drops a request whose client went away:
    // until one is dropped while it waits.
    let mut dropped = None;
    for attempt in 0..50 {
        let key = format!("k{attempt}");
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(IDEMPOTENCY_KEY, HeaderValue::from_str(&key).unwrap());
        let call = increments(
            State(Arc::clone(&shared)),
            headers,
            Body::from(body.to_owned()),
        );
        // Polled exactly once (a zero timeout parks until the timer's next tick, which
        // a fast sync beats).
        let gone = runtime.block_on(async { futures_util::FutureExt::now_or_never(call) });
        if gone.is_none() {
            dropped = Some(key);
            break;
        }
    }
    let key = dropped.expect("no request was still waiting for its sync when dropped");
    let mut retried = request(&shared, Some(&key), body);
    for _ in 0..500 {
        if retried.status() != StatusCode::CONFLICT {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        retried = request(&shared, Some(&key), body);
    }
    assert_eq!(retried.status(), StatusCode::OK, "the key left in flight");
    assert_eq!(retried.headers()[REPLAYED], "true");
    assert!(
        log.appended_bytes() > 0,
        "the first request's lines are in the log"
    );
}

/// A handler that panics checking an item named `boom`, and counting a request of two
/// accepted items (after its lines are on disk); accepts anything else.
struct Panics;

impl PacketHandler for Panics {
    fn handle(&mut self, _packet: &[u8]) {}

    fn check(
        &mut self,
        name: &str,
        _: &[(&str, &str)],
        _: i64,
        _: Option<i64>,
    ) -> Result<crate::bucket::Minute, crate::engine::Refusal> {
        assert_ne!(name, "boom", "a handler's bug");
        Ok(crate::bucket::Minute(1))
    }

    fn count_checked(&mut self, accepted: u64, _: &[crate::engine::Refusal]) {
        assert_ne!(accepted, 2, "a handler's bug");
    }
}

/// A durable listener's shared state over a fresh ingest log in `dir`, with one
/// handler, `handler`'s; and the log.
fn durable<H: PacketHandler>(
    dir: &std::path::Path,
    handler: impl FnMut() -> H,
) -> (Arc<Shared<H>>, Arc<crate::state::ingest_log::IngestLog>) {
    use crate::state::ingest_log::{IngestLog, Retention};
    let retention = Retention {
        window_secs: 600,
        max_keys: 16,
        max_streams: 16,
    };
    let log = Arc::new(IngestLog::open(dir, 1 << 20, 1, retention).unwrap());
    let shared = Arc::new(Shared::new(
        HandlerPool::new(1, handler),
        &HttpApiConfig::default(),
        Arc::new(IngestStats::default()),
        Some(Arc::clone(&log)),
    ));
    (shared, log)
}

/// [`durable`], its handler [`Panics`].
fn panicking(dir: &std::path::Path) -> Arc<Shared<Panics>> {
    durable(dir, || Panics).0
}

fn post(shared: &Arc<Shared<Panics>>, key: &str, body: &str) -> Response {
    request(shared, Some(key), body)
}

/// A durable request whose task panics before anything is on disk is answered 500, and
/// its `Idempotency-Key` is forgotten rather than left "in flight": a retry with it is
/// applied, not refused 409 until a restart.
#[test]
fn a_durable_request_that_panics_releases_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let shared = panicking(dir.path());
    let failed = post(&shared, "k", r#"[{"name":"boom","value":1}]"#);
    assert_eq!(failed.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let retried = post(&shared, "k", r#"[{"name":"fine","value":1}]"#);
    assert_eq!(retried.status(), StatusCode::OK, "the key left in flight");
    assert!(!retried.headers().contains_key(REPLAYED), "applied anew");
}

/// A durable request whose task panics once its increments are on disk is answered
/// 500, and its key keeps the answer those increments were logged with: a retry is
/// answered again, not applied a second time.
#[test]
fn a_durable_request_that_panics_once_logged_keeps_its_answer() {
    let dir = tempfile::tempdir().unwrap();
    let shared = panicking(dir.path());
    let body = r#"[{"name":"a","value":1},{"name":"b","value":2}]"#;
    let failed = post(&shared, "k", body);
    assert_eq!(failed.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let retried = post(&shared, "k", body);
    assert_eq!(retried.status(), StatusCode::OK, "the key left in flight");
    assert_eq!(retried.headers()[REPLAYED], "true");
}

/// A key guard dropped unfinished, as a panicking or dropped task drops it, releases
/// its key.
#[test]
fn a_key_in_flight_dropped_unfinished_is_released() {
    let dir = tempfile::tempdir().unwrap();
    let shared = panicking(dir.path());
    let now = Instant::now();
    assert_eq!(shared.keys.lock().begin("k", b"x", now), Begin::Apply);
    let in_flight = KeyInFlight {
        shared: Arc::clone(&shared),
        key: Some("k".to_owned()),
        durable: None,
    };
    assert_eq!(shared.keys.lock().begin("k", b"x", now), Begin::InFlight);
    drop(in_flight);
    assert_eq!(shared.keys.lock().begin("k", b"x", now), Begin::Apply);
}

/// Accepts anything, and sums the items it is told to count.
#[derive(Default)]
struct Counts {
    counted: u64,
}

impl PacketHandler for Counts {
    fn handle(&mut self, _packet: &[u8]) {}

    fn check(
        &mut self,
        _: &str,
        _: &[(&str, &str)],
        _: i64,
        _: Option<i64>,
    ) -> Result<crate::bucket::Minute, crate::engine::Refusal> {
        Ok(crate::bucket::Minute(1))
    }

    fn count_checked(&mut self, accepted: u64, _: &[crate::engine::Refusal]) {
        self.counted += accepted;
    }
}

/// A durable request whose task is dropped while its lines wait for their sync (as the
/// listener's runtime drops it at the shutdown deadline) is counted all the same: its
/// lines are in the log, to be applied.
#[test]
fn a_durable_request_dropped_while_syncing_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let (shared, log) = durable(dir.path(), Counts::default);
    let body = br#"[{"name":"a","value":1}]"#;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Polled once, then dropped: until one was dropped while it waited (a sync may end
    // between its request and the check that follows it).
    let (mut dropped, mut requests) = (false, 0_u64);
    for _ in 0..50 {
        requests += 1;
        let mut in_flight = KeyInFlight {
            shared: Arc::clone(&shared),
            key: None,
            durable: None,
        };
        let answer = answer_durably(
            &shared,
            body,
            Framing::JsonArray,
            &mut in_flight,
            Arc::clone(&log),
        );
        // Polled exactly once (a zero timeout parks until the timer's next tick, which
        // a fast sync beats): pending means it waits for its sync, and it is dropped.
        let waited = runtime.block_on(async { futures_util::FutureExt::now_or_never(answer) });
        if waited.is_none() {
            dropped = true;
            break;
        }
    }
    assert!(
        dropped,
        "no request was still waiting for its sync when dropped"
    );
    assert_eq!(
        shared.handlers.slot(0).lock().counted,
        requests,
        "every request counted, the dropped one too"
    );
}

/// A listener of the increment API on a loopback port, with `gated`'s handlers, the
/// given read timeout and connection bound.
fn listening(
    read_timeout: std::time::Duration,
    max_connections: usize,
) -> (async_listener::testing::Running, Arc<IngestStats>) {
    let (shared, _entered, _release) = gated(1, None);
    let mut shared = Arc::into_inner(shared).unwrap();
    shared.read_timeout = read_timeout;
    shared.max_connections = max_connections;
    let stats = Arc::clone(&shared.stats);
    let shared = Arc::new(shared);
    let running = async_listener::testing::Running::start(move |listener, stopped| {
        serve(listener, shared, stopped)
    });
    (running, stats)
}

/// A request whose body stops coming is answered 408 once the read timeout has passed,
/// counted as timed out, nothing applied, and its connection closed.
#[test]
fn a_stalled_body_is_answered_408_and_counted() {
    use std::io::Write;
    let (running, stats) = listening(std::time::Duration::from_millis(200), 4);
    let mut client = running.connect();
    client
        .write_all(
            b"POST /v1/increments HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n[{\"name\":\"fast\",",
        )
        .unwrap();
    let answer = async_listener::testing::read_to_close(&mut client);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("did not arrive"), "{answer}");
    let counters = stats.transport(TRANSPORT);
    assert_eq!(
        (counters.timed_out, counters.packets, counters.bytes),
        (1, 1, 0)
    );
}

/// With its most connections open, the listener closes a new one at once and counts it.
#[test]
fn the_connection_over_the_bound_is_refused_and_counted() {
    let (running, stats) = listening(async_listener::READ_TIMEOUT, 1);
    let mut first = running.connect();
    let ok = async_listener::testing::post(
        &mut first,
        PATH,
        "application/json",
        br#"[{"name":"fast","value":1}]"#,
    );
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    let mut second = running.connect();
    assert_eq!(async_listener::testing::read_to_close(&mut second), b"");
    async_listener::testing::wait_until("the refusal counted", || {
        stats.transport(TRANSPORT).connections_refused == 1
    });
    let counters = stats.transport(TRANSPORT);
    assert_eq!(
        (counters.connections_accepted, counters.connections_open),
        (1, 1)
    );
}
