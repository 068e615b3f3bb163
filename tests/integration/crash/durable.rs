//! Acknowledged ingest survives SIGKILL and a retry is never counted twice: `serve` with
//! a durable HTTP listener (`ingest.http.durable`) is killed at random moments and at the
//! ingest log's own crash points, under random store faults, while clients post
//! increments with an `Idempotency-Key` and retry every unanswered request with its key
//! until it is answered. The checker ([`super::check`]) then compares the store, its
//! request log and countersink's records with the answered requests: exactly equal, no
//! loss allowed (nothing answered was only in memory) and nothing counted twice.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::chaos::random_faults;
use super::check::check;
use super::harness::{Rig, Settings, metric};

/// Increments `(page, unix time, delta)`.
type Increments = Vec<(u32, i64, i64)>;

/// A request a client has not had answered yet: its key, its increments, its body.
#[derive(Clone)]
struct Pending {
    key: String,
    increments: Increments,
    body: String,
}

/// What the clients share across the runs.
#[derive(Default)]
struct Clients {
    /// Per client, its request waiting for an answer (kept across a kill).
    pending: Mutex<Vec<Option<Pending>>>,
    /// Every answered request's increments, once.
    answered: Mutex<Vec<Increments>>,
    /// Answers replayed for a key (`Idempotent-Replayed`): retries that counted nothing.
    replayed: Mutex<usize>,
}

/// A POST that gives up on any failure (the process may be killed meanwhile): the
/// status and whether the answer was replayed, if an answer came.
fn try_post(addr: SocketAddr, key: &str, body: &str) -> Option<(u16, bool)> {
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let head = format!(
        "POST /v1/increments HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nIdempotency-Key: {key}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).ok()?;
    stream.write_all(body.as_bytes()).ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let text = String::from_utf8_lossy(&response).to_ascii_lowercase();
    let status = text.strip_prefix("http/1.1 ")?.get(..3)?.parse().ok()?;
    Some((status, text.contains("idempotent-replayed: true")))
}

fn request(client: usize, n: u64, base: i64, rng: &mut fastrand::Rng) -> Pending {
    let increments: Increments = (0..rng.usize(1..40))
        .map(|_| (rng.u32(0..30), base + rng.i64(0..30) * 60, rng.i64(1..100)))
        .collect();
    let items: Vec<String> = increments
        .iter()
        .map(|(page, at, delta)| {
            format!(
                r#"{{"name":"page.views","tags":{{"page_id":"p{page}"}},"value":{delta},"timestamp":{at}}}"#
            )
        })
        .collect();
    Pending {
        key: format!("c{client}-{n}-{}", rng.u64(..)),
        increments,
        body: format!("[{}]", items.join(",")),
    }
}

/// Four clients posting to `addr` until `stop`; with `drain`, each then goes on until
/// its pending request is answered.
fn start_clients(
    addr: SocketAddr,
    base: i64,
    seed: u64,
    stop: &Arc<AtomicBool>,
    drain: bool,
    shared: &Arc<Clients>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..4)
        .map(|client| {
            let (stop, shared) = (Arc::clone(stop), Arc::clone(shared));
            std::thread::spawn(move || {
                let mut rng = fastrand::Rng::with_seed(seed * 16 + client as u64);
                let mut n = 0;
                loop {
                    let waiting = shared.pending.lock().unwrap()[client].take();
                    if stop.load(Ordering::Relaxed) && (!drain || waiting.is_none()) {
                        shared.pending.lock().unwrap()[client] = waiting;
                        return;
                    }
                    let pending = waiting.unwrap_or_else(|| {
                        n += 1;
                        request(client, n, base, &mut rng)
                    });
                    match try_post(addr, &pending.key, &pending.body) {
                        Some((200, replayed)) => {
                            *shared.replayed.lock().unwrap() += usize::from(replayed);
                            shared.answered.lock().unwrap().push(pending.increments);
                        }
                        Some((429, _)) | None => {
                            // Busy, or the process is gone: the same request again later.
                            shared.pending.lock().unwrap()[client] = Some(pending);
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        Some((status, _)) => panic!("unexpected answer {status} to a retry"),
                    }
                }
            })
        })
        .collect()
}

/// Points of the ingest log's path a kill may hit, besides random moments.
const POINTS: [Option<&str>; 4] = [
    None,
    Some("ingest_sealed"),
    Some("ingest_segment_written"),
    Some("replay_loaded"),
];

/// Starts a run's senders: to `port`, for run `run`, until `stop`; with `drain`, each
/// goes on until its pending request is answered.
pub(super) type StartSenders<'a> =
    dyn FnMut(SocketAddr, u64, &Arc<AtomicBool>, bool) -> Vec<std::thread::JoinHandle<()>> + 'a;

/// The kill loop the durable tests share: `kills` runs of `serve` (its config from the
/// example's text by `configure`, given the listener's port), each under random store
/// faults, killed at a random moment or at one of the ingest log's crash points while
/// the senders run; then a last run without faults, the senders drained, until the
/// ingest log, the spill and the buffer are empty. `listening` is the line `serve` logs
/// once its listener is up.
pub(super) fn kill_runs(
    rig: &mut Rig,
    kills: usize,
    seed: u64,
    configure: &dyn Fn(&str, SocketAddr) -> String,
    listening: &str,
    start: &mut StartSenders<'_>,
) {
    let config = std::fs::read_to_string(rig.config_file()).unwrap();
    let mut rng = fastrand::Rng::with_seed(seed);
    for run in 0..=kills {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        std::fs::write(rig.config_file(), configure(&config, port)).unwrap();
        let last = run == kills;
        if last {
            rig.server().clear_faults();
        } else {
            rig.server().set_faults(random_faults(&mut rng));
        }
        let point = if last {
            None
        } else {
            POINTS[run % POINTS.len()]
        };
        let mut serve = rig.start_until(point, listening);
        let stop = Arc::new(AtomicBool::new(false));
        let senders = start(port, run as u64, &stop, last);
        if last {
            std::thread::sleep(Duration::from_millis(500));
            stop.store(true, Ordering::Relaxed);
            senders.into_iter().for_each(|t| t.join().unwrap());
            serve.wait_metric(|text| {
                metric(text, "countersink_ingest_log_bytes") == Some(0.0)
                    && metric(text, "countersink_spill_bytes") == Some(0.0)
                    && metric(text, "countersink_pending_rows") == Some(0.0)
            });
            rig.terminate(serve);
        } else {
            // A crash point stops the process itself; otherwise a SIGKILL at a random moment.
            match point {
                Some(point) => serve.wait_for(
                    &format!("crash point {point} reached"),
                    Duration::from_secs(20),
                ),
                None => std::thread::sleep(Duration::from_millis(rng.u64(100..900))),
            }
            rig.kill(serve);
            stop.store(true, Ordering::Relaxed);
            senders.into_iter().for_each(|t| t.join().unwrap());
        }
    }
}

/// `name` from the environment, else `default`: how many kills a test makes.
pub(super) fn kills_from(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(default)
}

#[test]
fn acknowledged_increments_survive_kills_and_retries_count_once() {
    let kills = kills_from("DURABLE_KILLS", 50);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut rig = runtime.block_on(Rig::new(Settings::default()));
    let shared = Arc::new(Clients {
        pending: Mutex::new(vec![None; 4]),
        ..Clients::default()
    });
    let base = rig.base;
    let configure = |config: &str, port: SocketAddr| {
        let durable = config
            .replace(
                "enabled = false\nlisten = \"127.0.0.1:9103\"",
                &format!("enabled = true\nlisten = \"{port}\""),
            )
            .replace("durable = false", "durable = true");
        assert_ne!(
            durable, config,
            "the example has an [ingest.http] to turn on"
        );
        durable
    };
    kill_runs(
        &mut rig,
        kills,
        29,
        &configure,
        "Listening for increments over HTTP",
        &mut |port, run, stop, drain| start_clients(port, base, run, stop, drain, &shared),
    );
    let answered = shared.answered.lock().unwrap();
    for increments in answered.iter() {
        for (page, at, delta) in increments {
            rig.model.feed(*page, *at, *delta);
        }
    }
    assert!(
        shared.pending.lock().unwrap().iter().all(Option::is_none),
        "every request was answered in the end"
    );
    assert!(
        answered.len() > 50,
        "too few requests answered: {}",
        answered.len()
    );
    // Nothing answered was only in memory: no loss is allowed.
    rig.lost_bound = [0, 0];
    let findings = check(&rig);
    assert_eq!(
        findings.unexplained,
        [0, 0],
        "answered increments are missing: {findings:?}"
    );
    eprintln!(
        "{} kills, {} requests answered ({} replayed after a lost answer), {findings:?}",
        rig.kills,
        answered.len(),
        shared.replayed.lock().unwrap()
    );
    runtime.block_on(rig.shutdown());
}
