//! The HTTP increment API: `POST /v1/increments` on its own listener (`[ingest.http]`,
//! loopback by default), for clients that want an answer per request rather than
//! datagrams: a JSON array (`application/json`) or NDJSON (`application/x-ndjson`) of
//! increments (see [`body`]), mapped onto families exactly as StatsD lines are.
//!
//! | module | job |
//! | --- | --- |
//! | [`body`] | the body: framing, items, the checks a StatsD line gets, the offending index |
//! | [`idempotency`] | the `Idempotency-Key` table, bounded by age and count |
//!
//! Answers:
//!
//! | status | when | applied |
//! |---|---|---|
//! | 200 `{"accepted", "refused", "refused_items"}` | the request was applied; `refused` increments were dropped by a limit, the time window or an unconfigured name (counted like a line's), `refused_items` their first 100 indices | the accepted ones |
//! | 400 `{"error", "index"}` | a body that does not read, or an item that is not an increment (its index) | nothing |
//! | 408 | a body that did not arrive within 30 s (`async_listener::READ_TIMEOUT`) | nothing |
//! | 409 | a request with the same `Idempotency-Key` is being applied | nothing |
//! | 413 | a body over `max_request_bytes` | nothing |
//! | 415 | another content type | nothing |
//! | 422 | the `Idempotency-Key` was answered for another body | nothing |
//! | 429 with `Retry-After` | the buffer is near its limits (with `durable`: the ingest log is full) | nothing |
//! | 500 | with `durable`, no `Idempotency-Key`: written to the ingest log, but its sync failed (a retry could count it twice) | unknown |
//! | 503 | with `durable`: the ingest log took nothing (an earlier failure, or this write failed); or, with a key, its sync failed | nothing (with a key and a failed sync: unknown, and its retry counts once) |
//!
//! The listener runs a runtime of as many threads as the OTLP listeners (the cores, at
//! most 4), each request applied with a free handler of a pool of one per thread, so that
//! requests on several connections parse and record at the same time; the
//! `Idempotency-Key` table is one for all of them. It holds at most
//! `max_connections` connections (128 by default), and closes one whose request
//! headers take longer than 30 s (`async_listener::READ_TIMEOUT`).
//!
//! A 200 means the increments are in the buffer, like a datagram received: a crash before
//! the next flush loses them (the loss windows of docs/src/guarantees.md). With `durable = true` it means
//! they are on disk, in the ingest log ([`crate::state::ingest_log`]), and a SIGKILL loses
//! nothing answered. A client that retries a request whose answer it did not get counts
//! it twice, unless it sends an `Idempotency-Key`: the same key and body within
//! `idempotency_window` are answered with the first answer (`Idempotent-Replayed: true`)
//! and applied once. Without `durable` the keys live in memory and a restart forgets them;
//! with it they are written with the increments and read back at start.

pub mod body;
pub mod idempotency;

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use parking_lot::Mutex;

use self::body::{BadBody, Framing, Item};
use self::idempotency::{Begin, Idempotency, Kept};
use super::async_listener::{self, Gate, Stopped};
use super::handler_pool::{HandlerPool, workers};
use super::receivers::Receivers;
use super::stats::IngestStats;
use super::{ListenError, PacketHandler, Recorded};
use crate::config::ConfigError;
use crate::config::ingest::{HttpApiConfig, IngestConfig};
use crate::engine::Refusal;
use crate::state::ingest_log::{self, AppendError, IngestEntry, IngestLog, KeyLine};
use crate::vocabulary::Transport;

/// The path increments are posted to.
pub const PATH: &str = "/v1/increments";

/// The header that makes a request idempotent.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The header on a replayed answer.
pub const REPLAYED: &str = "idempotent-replayed";

/// What a client is told to wait before retrying a request refused as busy (seconds).
const RETRY_AFTER_SECS: u64 = 2;

/// Longest `Idempotency-Key` accepted, in bytes.
const MAX_KEY_BYTES: usize = 255;

/// Most refused indices listed in an answer.
const MAX_LISTED: usize = 100;

const TRANSPORT: Transport = Transport::Http;

/// Starts the listener when `[ingest.http]` enables it.
pub(super) fn start<F, H>(
    config: &IngestConfig,
    receivers: &mut Receivers,
    factory: &Arc<F>,
) -> Result<(), ListenError>
where
    F: Fn(Transport) -> H + Send + Sync + 'static,
    H: PacketHandler,
{
    let http = &config.http;
    if !http.enabled {
        return Ok(());
    }
    let listener = async_listener::bind(TRANSPORT, http.listen)?;
    let local = receivers.listen_inet(TRANSPORT, http.listen, &listener)?;
    let handlers = HandlerPool::new(workers(), || factory(TRANSPORT));
    let durable = match (http.durable, handlers.take().ingest_log()) {
        (false, _) => None,
        (true, Some(log)) => Some(log),
        (true, None) => {
            return Err(ListenError::Config(ConfigError::invalid(
                "ingest.http.durable",
                "needs a pipeline that keeps an ingest log in its state directory (the sidecar's)",
            )));
        }
    };
    let shared = Arc::new(Shared::new(
        handlers,
        http,
        receivers.shared_stats(),
        durable,
    ));
    let stop = receivers.stop_flag();
    receivers.spawn(
        TRANSPORT,
        &http.listen.to_string(),
        "cs-http".into(),
        move || {
            // One worker per handler (see `HandlerPool`).
            let workers = (shared.handlers.len(), "cs-http-w");
            async_listener::serve(
                TRANSPORT,
                listener,
                stop,
                workers,
                |listener, stopped| async {
                    serve(listener, shared, stopped)
                        .await
                        .map_err(|e| e.to_string())
                },
            );
        },
    )?;
    tracing::info!(address = %local, "Listening for increments over HTTP (POST {PATH}).");
    Ok(())
}

async fn serve<H: PacketHandler>(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared<H>>,
    stopped: Stopped,
) -> std::io::Result<()> {
    let gate = Gate::new(TRANSPORT, Arc::clone(&shared.stats), shared.max_connections);
    let read_timeout = shared.read_timeout;
    let app = Router::new()
        .route(PATH, post(increments::<H>))
        .with_state(shared);
    async_listener::serve_http(listener, app, stopped, gate, read_timeout).await
}

/// What the listener's requests share: a handler per worker, and one table of
/// idempotency keys for all of them (a key in flight on one worker is in flight for
/// every other).
struct Shared<H> {
    handlers: HandlerPool<H>,
    /// The ingest log, when requests are answered only once their increments are on
    /// disk (`ingest.http.durable`).
    durable: Option<Arc<IngestLog>>,
    keys: Mutex<Idempotency>,
    stats: Arc<IngestStats>,
    max_request_bytes: usize,
    max_items: usize,
    /// Longest a request's headers, or its body, may take to arrive
    /// ([`async_listener::READ_TIMEOUT`]; shorter in tests).
    read_timeout: std::time::Duration,
    /// Most connections open at once (`max_connections`).
    max_connections: usize,
    /// The requests received and handled at once ([`async_listener::MAX_RECEIVING`]).
    receiving: async_listener::Receiving,
}

impl<H: PacketHandler> Shared<H> {
    fn new(
        handlers: HandlerPool<H>,
        config: &HttpApiConfig,
        stats: Arc<IngestStats>,
        durable: Option<Arc<IngestLog>>,
    ) -> Shared<H> {
        let keys = match &durable {
            None => Idempotency::new(config.idempotency_window, config.max_idempotency_keys),
            Some(log) => restored_keys(log, config),
        };
        Shared {
            handlers,
            durable,
            keys: Mutex::new(keys),
            stats,
            max_request_bytes: config.max_request_bytes,
            max_items: config.max_items,
            read_timeout: async_listener::READ_TIMEOUT,
            max_connections: config.max_connections,
            receiving: async_listener::Receiving::new(async_listener::MAX_RECEIVING),
        }
    }

    /// Applies checked items; the answer and whether anything was applied.
    fn apply(&self, items: &[Item]) -> Applied {
        let mut handler = self.handlers.take();
        if handler.busy() {
            self.stats.get(TRANSPORT).busy.fetch_add(1, Relaxed);
            return Applied::Busy;
        }
        let mut refused = Vec::new();
        for (index, item) in items.iter().enumerate() {
            let recorded =
                handler.record(&item.name, &item.tag_pairs(), item.value, item.timestamp);
            if recorded == Recorded::Refused {
                refused.push(index);
            }
        }
        Applied::Done {
            accepted: items.len() - refused.len(),
            refused,
        }
    }

    /// Checks the items of a durable request without keeping or counting them: their
    /// ingest-log lines, the indices of the refused ones, and why each was refused.
    fn check(&self, items: &[Item]) -> (Vec<u8>, Vec<usize>, Vec<Refusal>) {
        let mut handler = self.handlers.take();
        let (mut lines, mut refused, mut why) = (Vec::new(), Vec::new(), Vec::new());
        for (index, item) in items.iter().enumerate() {
            let tags = item.tag_pairs();
            match handler.check(&item.name, &tags, item.value, item.timestamp) {
                Ok(minute) => {
                    IngestEntry::write_line(&mut lines, &item.name, &tags, item.value, minute.0)
                }
                Err(refusal) => {
                    refused.push(index);
                    why.push(refusal);
                }
            }
        }
        (lines, refused, why)
    }

    /// Counts the items of an answered durable request (see
    /// [`PacketHandler::count_checked`]).
    fn count_checked(&self, accepted: usize, refused: &[Refusal]) {
        self.handlers.take().count_checked(accepted as u64, refused);
    }

    /// Counts `n` requests with a key under `result` (a label of
    /// [`super::IDEMPOTENCY_RESULTS`]).
    fn count_idempotency(&self, result: &str, n: u64) {
        if let Some(index) = super::IDEMPOTENCY_RESULTS.iter().position(|r| *r == result)
            && n > 0
        {
            self.stats.count_idempotency(index, n);
        }
    }
}

/// The key table of a durable listener: hashing with the ingest log's seed, holding the
/// keys answered before the last stop (see [`crate::state::ingest_log`]).
fn restored_keys(log: &IngestLog, config: &HttpApiConfig) -> Idempotency {
    let mut keys = Idempotency::with_seed(
        config.idempotency_window,
        config.max_idempotency_keys,
        log.seed(),
    );
    let (now, unix_now) = (Instant::now(), ingest_log::unix_now());
    let restored = log.take_recovered_keys();
    if !restored.is_empty() {
        tracing::info!(
            keys = restored.len(),
            "Idempotency keys answered before the last stop are kept: retries of those requests are answered again, not counted."
        );
    }
    for line in restored {
        let age = u64::try_from(unix_now.saturating_sub(line.at)).unwrap_or(0);
        let answer = Kept {
            status: line.status,
            body: line.answer.into_bytes(),
        };
        keys.restore(
            &line.key,
            line.body_hash,
            answer,
            std::time::Duration::from_secs(age),
            now,
        );
    }
    keys
}

/// What applying a request did.
enum Applied {
    /// Nothing: the buffer is near its limits.
    Busy,
    /// Every item is in the buffer or counted as refused.
    Done {
        accepted: usize,
        refused: Vec<usize>,
    },
}

async fn increments<H: PacketHandler>(
    State(shared): State<Arc<Shared<H>>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let stats = shared.stats.get(TRANSPORT);
    let Some(framing) = framing(&headers) else {
        stats.packets.fetch_add(1, Relaxed);
        stats.unsupported.fetch_add(1, Relaxed);
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "content type must be application/json (an array) or application/x-ndjson",
            None,
        );
    };
    // Held until answered; by the durable task below until it ends, which may be after
    // its client went away.
    let receiving = shared.receiving.enter().await;
    let read = async_listener::read_body(body, shared.max_request_bytes, shared.read_timeout);
    let body = match read.await {
        Some(Ok(body)) => body,
        None => {
            stats.packets.fetch_add(1, Relaxed);
            stats.timed_out.fetch_add(1, Relaxed);
            let message = format!(
                "the request body did not arrive within {:?}",
                shared.read_timeout
            );
            let mut response = error(StatusCode::REQUEST_TIMEOUT, &message, None);
            // The rest of the body may still come: the connection cannot carry another
            // request.
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return response;
        }
        Some(Err(read)) => {
            stats.packets.fetch_add(1, Relaxed);
            let too_large = std::error::Error::source(&read)
                .is_some_and(|e| e.is::<http_body_util::LengthLimitError>());
            if too_large {
                stats.oversized.fetch_add(1, Relaxed);
                let message = format!("request body over {} bytes", shared.max_request_bytes);
                return error(StatusCode::PAYLOAD_TOO_LARGE, &message, None);
            }
            stats.malformed.fetch_add(1, Relaxed);
            return error(
                StatusCode::BAD_REQUEST,
                "the request body could not be read",
                None,
            );
        }
    };
    stats.packets.fetch_add(1, Relaxed);
    stats.bytes.fetch_add(body.len() as u64, Relaxed);
    let key = match idempotency_key(&headers) {
        Ok(key) => key,
        Err(message) => return error(StatusCode::BAD_REQUEST, message, None),
    };
    if let Some(key) = &key {
        let begun = shared.keys.lock().begin(key, &body, Instant::now());
        match begun {
            Begin::Apply => {}
            Begin::Replay(kept) => {
                shared.count_idempotency("replayed", 1);
                let mut response = json(status(kept.status), Bytes::from(kept.body));
                response
                    .headers_mut()
                    .insert(REPLAYED, HeaderValue::from_static("true"));
                return response;
            }
            Begin::InFlight => {
                shared.count_idempotency("in_flight", 1);
                return error(
                    StatusCode::CONFLICT,
                    "a request with this Idempotency-Key is being applied",
                    None,
                );
            }
            Begin::OtherBody => {
                shared.count_idempotency("other_body", 1);
                return error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "this Idempotency-Key was used for another request body",
                    None,
                );
            }
        }
    }
    // From here the key is in flight until `in_flight` ends, however the request ends.
    let mut in_flight = KeyInFlight {
        shared: Arc::clone(&shared),
        key,
        durable: None,
    };
    match shared.durable.clone() {
        None => {
            let (response, kept) = answer(&shared, &body, framing);
            in_flight.finish(kept);
            response
        }
        Some(log) => {
            // Run to its end even when the client goes away while the append waits for
            // its sync (the server then drops this future): the lines may be in the log
            // already, their count must be taken, and the request's Idempotency-Key must
            // leave "in flight" (its answer kept, or forgotten when nothing was
            // applied), or every retry with it would get 409 until a restart. A panic
            // in the task ends it too: `in_flight`, dropped, releases the key, and the
            // request is answered 500.
            let durable = async move {
                let _receiving = receiving;
                let (response, kept) =
                    answer_durably(&shared, &body, framing, &mut in_flight, log).await;
                in_flight.finish(kept);
                response
            };
            tokio::spawn(durable).await.unwrap_or_else(|failed| {
                tracing::error!(error = %failed, "A durable request failed while it was applied.");
                error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the request failed while it was applied: it may or may not have been applied",
                    None,
                )
            })
        }
    }
}

/// The `Idempotency-Key` (if any) of a request that [`Begin::Apply`] let through, until
/// the request ends: [`KeyInFlight::finish`] keeps its answer for the window, or forgets
/// the key when nothing was applied. Dropped unfinished (its request's task panicked, or
/// was dropped with the runtime), it does the same with what it knows: the answer of
/// increments already on disk ([`KeyInFlight::durable`]), else nothing (the key is
/// forgotten). Either way the key leaves "in flight", where it would answer every retry
/// 409 until a restart.
struct KeyInFlight<H: PacketHandler> {
    shared: Arc<Shared<H>>,
    key: Option<String>,
    /// The answer of a durable request whose increments (and key line) are on disk.
    durable: Option<Kept>,
}

impl<H: PacketHandler> KeyInFlight<H> {
    /// The key, while in flight.
    fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The request's increments, and its key with `answer`, are on disk: kept for the
    /// key whatever happens next.
    fn durable(&mut self, answer: &Kept) {
        if self.key.is_some() {
            self.durable = Some(answer.clone());
        }
    }

    /// Ends the request with `kept`, its answer (`None`: nothing was applied).
    fn finish(mut self, kept: Option<Kept>) {
        self.durable = kept;
    }
}

impl<H: PacketHandler> Drop for KeyInFlight<H> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            finish_key(&self.shared, &key, self.durable.take());
        }
    }
}

/// Ends the request that [`Begin::Apply`] let through with `key`: its answer kept for
/// the window, or the key forgotten when nothing was applied.
fn finish_key<H: PacketHandler>(shared: &Shared<H>, key: &str, kept: Option<Kept>) {
    let mut keys = shared.keys.lock();
    let evicted = keys.evicted();
    if kept.is_some() {
        shared.count_idempotency("applied", 1);
    }
    keys.finish(key, kept, Instant::now());
    shared.count_idempotency("evicted", keys.evicted() - evicted);
}

/// Reads, checks and applies a body: the response, and the answer to keep for its
/// `Idempotency-Key` when something was applied.
fn answer<H: PacketHandler>(
    shared: &Shared<H>,
    body: &[u8],
    framing: Framing,
) -> (Response, Option<Kept>) {
    let items = match body::parse(body, framing, shared.max_items) {
        Ok(items) => items,
        Err(bad) => {
            shared.stats.get(TRANSPORT).malformed.fetch_add(1, Relaxed);
            return (bad_body(&bad), None);
        }
    };
    match shared.apply(&items) {
        Applied::Busy => (busy(), None),
        Applied::Done { accepted, refused } => done(accepted, &refused),
    }
}

/// As [`answer`], for a durable listener: the accepted items' lines go to the ingest
/// log, and the answer waits for them to be on disk (the log's group commit: concurrent
/// requests share one fsync).
///
/// A request with an `Idempotency-Key` writes the key and its answer after its
/// increments, in the same append: a retry after a restart is answered again, not
/// counted (the key is in the log exactly when the increments are).
async fn answer_durably<H: PacketHandler>(
    shared: &Shared<H>,
    body: &[u8],
    framing: Framing,
    in_flight: &mut KeyInFlight<H>,
    log: Arc<IngestLog>,
) -> (Response, Option<Kept>) {
    let key = in_flight.key();
    if log.would_overflow(body.len() as u64) {
        shared.stats.get(TRANSPORT).busy.fetch_add(1, Relaxed);
        return (busy(), None);
    }
    let items = match body::parse(body, framing, shared.max_items) {
        Ok(items) => items,
        Err(bad) => {
            shared.stats.get(TRANSPORT).malformed.fetch_add(1, Relaxed);
            return (bad_body(&bad), None);
        }
    };
    let (mut lines, refused, why) = shared.check(&items);
    let accepted = items.len() - refused.len();
    let (response, kept) = done(accepted, &refused);
    if let (Some(key), Some(kept)) = (key, &kept) {
        KeyLine {
            key: key.to_owned(),
            body_hash: shared.keys.lock().body_hash(body),
            status: kept.status,
            answer: String::from_utf8_lossy(&kept.body).into_owned(),
            at: ingest_log::unix_now(),
        }
        .write_line(&mut lines);
    }
    // Counted once answered: a request refused whole (above, or its append below) is
    // retried, and counts then. One whose task is dropped while its lines wait for their
    // sync (the listener's runtime drops it at the shutdown deadline) is counted too: its
    // lines are in the log, to be applied.
    let mut count = CountWhenDone {
        shared,
        checked: Some((accepted, why)),
    };
    if !lines.is_empty() {
        match log.append_async(&lines).await {
            Ok(()) => {
                if let Some(kept) = &kept {
                    in_flight.durable(kept);
                }
            }
            Err(AppendError::Full { .. }) => {
                count.checked = None;
                shared.stats.get(TRANSPORT).busy.fetch_add(1, Relaxed);
                return (busy(), None);
            }
            // Written, but not synced: a restart may or may not count it. With a key,
            // the key is in the same append, so a retry after the restart is answered
            // again or counted, once; without one a retry could count it twice.
            Err(AppendError::NotSynced) if key.is_none() => {
                count.checked = None;
                tracing::error!(
                    "A durable request was written to the ingest log but could not be made durable: a restart may or may not count it; the client is told not to retry."
                );
                return (outcome_unknown(), None);
            }
            Err(error) => {
                count.checked = None;
                tracing::error!(%error, "A durable request could not be made durable.");
                return (not_durable(), None);
            }
        }
    }
    (response, kept)
}

/// Counts a durable request's checked items when dropped: once it is answered, or when
/// its task is dropped while its lines wait for their sync (they are written).
struct CountWhenDone<'s, H: PacketHandler> {
    shared: &'s Shared<H>,
    /// The items accepted and why the others were refused; `None`: nothing to count
    /// (refused whole, or not made durable).
    checked: Option<(usize, Vec<Refusal>)>,
}

impl<H: PacketHandler> Drop for CountWhenDone<'_, H> {
    fn drop(&mut self) {
        if let Some((accepted, why)) = self.checked.take() {
            self.shared.count_checked(accepted, &why);
        }
    }
}

/// 429 with `Retry-After`: nothing was applied.
fn busy() -> Response {
    let mut response = error(
        StatusCode::TOO_MANY_REQUESTS,
        "the buffer is near its limits; nothing was applied, retry later",
        None,
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
    response
}

/// 503 for a durable request the ingest log did not take (it failed earlier, or this
/// write failed, which a reader skips whole), or that carries an `Idempotency-Key`
/// (whose retry is answered again if the request counts after a restart): retry later.
fn not_durable() -> Response {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "the ingest log could not take the request; retry later with the same Idempotency-Key, if it has one",
        None,
    )
}

/// 500 for a durable request without an `Idempotency-Key` whose increments were written
/// but not synced: a restart may or may not count them, and a retry could count them
/// twice.
fn outcome_unknown() -> Response {
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "the request was written to the ingest log but could not be synced: a restart may or may not count it; do not send it again",
        None,
    )
}

/// The 200 answer, and what is kept for its `Idempotency-Key`.
fn done(accepted: usize, refused: &[usize]) -> (Response, Option<Kept>) {
    let listed = &refused[..refused.len().min(MAX_LISTED)];
    let text = serde_json::json!({
        "accepted": accepted,
        "refused": refused.len(),
        "refused_items": listed,
    })
    .to_string();
    let kept = Kept {
        status: 200,
        body: text.clone().into_bytes(),
    };
    (json(StatusCode::OK, Bytes::from(text)), Some(kept))
}

/// The body's framing from its content type; `None` for another type.
fn framing(headers: &HeaderMap) -> Option<Framing> {
    let value = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let media = value.split(';').next()?.trim().to_ascii_lowercase();
    match media.as_str() {
        "application/json" => Some(Framing::JsonArray),
        "application/x-ndjson" | "application/ndjson" | "application/jsonl" => {
            Some(Framing::Ndjson)
        }
        _ => None,
    }
}

/// The request's `Idempotency-Key` (a structured-field string, quotes optional), if any.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, &'static str> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| "the Idempotency-Key must be visible ASCII")?
        .trim();
    let key = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err("the Idempotency-Key must be 1 to 255 characters");
    }
    Ok(Some(key.to_owned()))
}

fn status(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::OK)
}

fn json(status: StatusCode, body: Bytes) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

fn error(status: StatusCode, message: &str, index: Option<usize>) -> Response {
    let body = match index {
        Some(index) => serde_json::json!({ "error": message, "index": index }),
        None => serde_json::json!({ "error": message }),
    };
    json(status, Bytes::from(body.to_string()))
}

fn bad_body(bad: &BadBody) -> Response {
    error(StatusCode::BAD_REQUEST, &bad.message, bad.index)
}

#[cfg(test)]
mod tests;
