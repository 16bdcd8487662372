//! The console: a page for operators at `/console/` on the HTTP face. Its four files are
//! embedded in the binary (no network at run time, no build step) and served under a strict
//! Content-Security-Policy: scripts and styles from these files only, calls to this origin
//! only, never in a frame. The page reads `api`'s JSON under `/console/api/`, follows content
//! with the protocol's own SSE reads, and stops with `/v1/stop/`; every call carries the
//! credential entered in the tab, so it sees exactly what that credential may see.
mod api;

use std::sync::Arc;

use axum::Router;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};

use super::{HttpFace, StreamPrefix};

const PAGE: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/console.js");
const STYLE: &str = include_str!("assets/console.css");
const ICON: &str = include_str!("assets/icon.svg");

/// Nothing but this origin's own script, style and calls; no inline script, no frames, no
/// forms posting elsewhere.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

/// The console's routes: the page (told where streams are served), its three assets and its
/// JSON.
pub(super) fn routes(prefix: &StreamPrefix) -> Router<Arc<HttpFace>> {
    // The prefix holds only URL path characters (it is checked): nothing to escape in HTML.
    let page = Bytes::from(PAGE.replace("{{STREAM_PREFIX}}", prefix.as_str()));
    Router::new()
        .route(
            "/console",
            get(|| async { Redirect::permanent("/console/") }),
        )
        .route(
            "/console/",
            get(move || async move { asset(page, "text/html; charset=utf-8") }),
        )
        .route(
            "/console/console.js",
            get(|| async { asset(SCRIPT, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/console/console.css",
            get(|| async { asset(STYLE, "text/css; charset=utf-8") }),
        )
        .route(
            "/console/icon.svg",
            get(|| async { asset(ICON, "image/svg+xml") }),
        )
        .route("/console/api/recordings", get(api::list))
        .route(
            "/console/api/recordings/{*id}",
            get(api::one).delete(api::delete),
        )
        .route("/console/api/overview", get(api::overview))
        .route("/console/api/changes", get(api::changes))
}

fn asset(body: impl Into<Bytes>, content_type: &'static str) -> Response {
    (
        [
            (CONTENT_TYPE, content_type),
            (CACHE_CONTROL, "no-cache"),
            (http::header::CONTENT_SECURITY_POLICY, POLICY),
            (http::header::REFERRER_POLICY, "no-referrer"),
            (http::header::X_FRAME_OPTIONS, "DENY"),
        ],
        body.into(),
    )
        .into_response()
}
