//! `/metrics`, `/healthz` and `/readyz`, the debug views `/debug/hot` and
//! `/debug/contexts`, and `POST /-/reload` (see [`super::reload`]), served by axum.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};

use crate::aggregate::cardinality::ContextsReport;
use crate::telemetry::{HotKeys, Metrics};

use super::reload::Reloader;

/// What the endpoints read.
#[derive(Clone)]
pub struct HttpState {
    /// The registry rendered by `/metrics`.
    pub metrics: Arc<Metrics>,
    /// Whether the sidecar is ready (session up, schema found, writes routable), or why
    /// not.
    pub ready: Arc<dyn Fn() -> Result<(), String> + Send + Sync>,
    /// The hot-key tracker of `/debug/hot`.
    pub hot: Arc<HotKeys>,
    /// What `/debug/contexts` shows: the cardinality trackers' report now.
    pub contexts: Arc<dyn Fn() -> ContextsReport + Send + Sync>,
    /// What `POST /-/reload` runs.
    pub reloader: Arc<Reloader>,
}

/// Rows per ranking of `/debug/hot` unless `?k=` says otherwise, and the most it gives.
const HOT_DEFAULT_K: usize = 20;
const HOT_MAX_K: usize = 1000;

/// The router.
pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .route("/debug/hot", get(hot))
        .route("/debug/contexts", get(contexts))
        .route("/-/reload", post(reload))
        .with_state(state)
}

async fn metrics(State(state): State<HttpState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
}

async fn ready(State(state): State<HttpState>) -> impl IntoResponse {
    match (state.ready)() {
        Ok(()) => (StatusCode::OK, "ready\n".to_owned()),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        ),
    }
}

/// The top rows by delta and by writes per minute, as JSON; `?k=N` rows each.
async fn hot(State(state): State<HttpState>, RawQuery(query): RawQuery) -> impl IntoResponse {
    let k = query
        .as_deref()
        .unwrap_or("")
        .split('&')
        .find_map(|pair| pair.strip_prefix("k="))
        .and_then(|k| k.parse::<usize>().ok())
        .unwrap_or(HOT_DEFAULT_K)
        .min(HOT_MAX_K);
    let body = serde_json::to_string(&state.hot.report(k)).unwrap_or_else(|_| "{}".into());
    ([(header::CONTENT_TYPE, "application/json")], body)
}

/// Per family with a cardinality cap, its distinct contexts in the window now and the
/// one before, and the tags of the most distinct values (with samples), as JSON: which
/// tag exploded. `countersink contexts` prints it as a table.
async fn contexts(State(state): State<HttpState>) -> impl IntoResponse {
    let body = serde_json::to_string(&(state.contexts)()).unwrap_or_else(|_| "{}".into());
    ([(header::CONTENT_TYPE, "application/json")], body)
}

/// Re-reads the configuration: 200 once it took effect, 400 with the reason when it was
/// refused (the running configuration stays), 503 while shutting down.
async fn reload(State(state): State<HttpState>) -> impl IntoResponse {
    match state.reloader.reload("POST /-/reload").await {
        Ok(done) => (
            StatusCode::OK,
            format!(
                "reloaded: generation {}, {} pending rows flushed first\n",
                done.generation, done.flushed_rows
            ),
        ),
        Err(error @ super::reload::ReloadError::Stopping) => {
            (StatusCode::SERVICE_UNAVAILABLE, format!("{error}\n"))
        }
        Err(error) => (StatusCode::BAD_REQUEST, format!("refused: {error}\n")),
    }
}

/// Binds the listener (so a bad address is an error at start, not later).
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}
