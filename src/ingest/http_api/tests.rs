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

fn request(shared: &Arc<Shared<Gate>>, key: Option<&str>, body: &str) -> Response {
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
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(call)
}

/// While a request with a key is being applied on one handler, a request without one is
/// applied on another, the same key is refused with 409, and once the first is
/// answered the key replays its answer.
#[test]
fn workers_apply_at_once_and_share_the_idempotency_table() {
    let (entered, entered_rx) = mpsc::channel();
    let (release_tx, release) = mpsc::channel();
    let release = Arc::new(Mutex::new(release));
    let handlers = HandlerPool::new(2, || Gate {
        entered: entered.clone(),
        release: Arc::clone(&release),
    });
    let shared = Arc::new(Shared::new(
        handlers,
        &HttpApiConfig::default(),
        Arc::new(IngestStats::default()),
        None,
    ));
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
