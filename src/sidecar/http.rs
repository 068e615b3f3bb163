//! `/metrics`, `/healthz` and `/readyz`, served by axum.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::telemetry::Metrics;

/// What the endpoints read.
#[derive(Clone)]
pub struct HttpState {
    /// The registry rendered by `/metrics`.
    pub metrics: Arc<Metrics>,
    /// Whether the sidecar is ready (session up, schema found, writes routable), or why
    /// not.
    pub ready: Arc<dyn Fn() -> Result<(), String> + Send + Sync>,
}

/// The router.
pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
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

/// Binds the listener (so a bad address is an error at start, not later).
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}
