//! The face's routes (the streams under the prefix, the stop route, the console), and the
//! layers every response passes through: CORS, security headers, the body limit, telemetry.
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, Method, StatusCode};
use tower_http::cors::{AllowOrigin, CorsLayer};

use super::dispatch::dispatch;
use super::reply::{self, Reply};
use super::{HttpFace, MAX_BODY_BYTES, console, stop, telemetry};

/// The face's routes, without the layers every response passes through.
pub(super) fn routes(face: Arc<HttpFace>) -> Router {
    let streams = format!("{}/{{*path}}", face.prefix);
    Router::new()
        .route(&streams, axum::routing::any(dispatch))
        .route("/v1/stop/{*path}", axum::routing::post(stop::stop))
        .merge(console::routes(&face.prefix))
        .fallback(not_a_stream)
        .with_state(face)
}

/// The face's routes, with the layers every response passes through.
pub(super) fn router(face: Arc<HttpFace>) -> Router {
    let exposed: Vec<http::HeaderName> = reply::EXPOSED
        .iter()
        .map(|h| http::HeaderName::from_static(h))
        .collect();
    let allowed: Vec<http::HeaderName> = reply::READ_FROM_REQUESTS
        .iter()
        .map(|h| http::HeaderName::from_static(h))
        .collect();
    let cors = CorsLayer::new()
        .allow_origin(AllowOrigin::any())
        .allow_methods([
            Method::GET,
            Method::HEAD,
            Method::POST,
            Method::PUT,
            Method::DELETE,
            Method::OPTIONS,
        ])
        .allow_headers(allowed)
        .expose_headers(exposed);
    routes(face.clone())
        .layer(axum::middleware::map_response(security_headers))
        .layer(cors)
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(
            face.prefix.clone(),
            telemetry::observe,
        ))
}

/// Headers every response carries, refusals included.
async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("cross-origin"),
    );
    response
}

async fn not_a_stream(State(face): State<Arc<HttpFace>>) -> Response {
    Reply::refuse(
        StatusCode::NOT_FOUND,
        format!("streams are served under {}/{{path}}", face.prefix),
    )
    .into_response()
}
