//! The probes, open to anyone: `GET /healthz` answers 200 while the process serves at all;
//! `GET /readyz` answers 200 while the server takes traffic and 503 with the reason while it
//! does not (see `readiness`), as gRPC health does.
use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{StatusCode, header};

use super::HttpFace;

pub(super) async fn healthz() -> Response {
    answer(StatusCode::OK, "ok\n".into())
}

pub(super) async fn readyz(State(face): State<Arc<HttpFace>>) -> Response {
    match face.host.readiness.unready() {
        None => answer(StatusCode::OK, "ready\n".into()),
        Some(why) => answer(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        ),
    }
}

/// A plain-text answer no cache keeps.
fn answer(status: StatusCode, text: String) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        text,
    )
        .into_response()
}
