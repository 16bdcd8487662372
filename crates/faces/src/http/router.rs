//! The face's routes (the streams under the prefix, the stop route, the console, the probes),
//! and the layers every response passes through: CORS (for requests that carry `Origin`),
//! security headers, the body limit, telemetry.
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, Method, StatusCode};
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_layer::Layer;

use super::cors::CorsWhenAsked;
use super::dispatch::dispatch;
use super::reply::{self, Reply};
use super::{HttpFace, MAX_BODY_BYTES, console, probes, stop, telemetry};

/// The face's routes, without the layers every response passes through.
pub(super) fn routes(face: Arc<HttpFace>) -> Router {
    let streams = format!("{}/{{*path}}", face.prefix);
    Router::new()
        .route(&streams, axum::routing::any(dispatch))
        .route("/v1/stop/{*path}", axum::routing::post(stop::stop))
        .route("/healthz", axum::routing::get(probes::healthz))
        .route("/readyz", axum::routing::get(probes::readyz))
        .merge(console::routes(&face.prefix))
        .fallback(not_a_stream)
        .with_state(face)
}

/// The face's routes, with the layers every response passes through.
///
/// The layers wrap the routes once, from outside, not each route (`Router::layer`): a route
/// clones its service for every request, and each layer applied to it there is one more box
/// to allocate and one more layer's state (CORS's lists of headers, the prefix) to copy.
/// Here a request pays for one clone of the stack, whose layers hold only shared state.
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
    let observed = telemetry::Observed::of(&face.prefix);
    let routes = routes(face);
    let secured = axum::middleware::map_response(security_headers).layer(routes);
    let with_cors = CorsWhenAsked::new(cors).layer(secured);
    let limited = axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES).layer(with_cors);
    let stack = axum::middleware::from_fn_with_state(observed, telemetry::observe).layer(limited);
    Router::new().fallback_service(stack)
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

async fn not_a_stream(State(face): State<Arc<HttpFace>>, request: Request) -> Response {
    let grpc = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|kind| kind.as_bytes().starts_with(b"application/grpc"));
    if grpc {
        return not_grpc(&face);
    }
    Reply::refuse(
        StatusCode::NOT_FOUND,
        format!("streams are served under {}/{{path}}", face.prefix),
    )
    .into_response()
}

/// A gRPC call dialled at this face (`tapedeck --server` given the HTTP port): answered as
/// gRPC answers, so that the client shows what to dial instead.
fn not_grpc(face: &HttpFace) -> Response {
    let instead = match face.host.grpc_address {
        Some(addr) => format!("gRPC is served on {addr}"),
        None => "gRPC is served on the server's --listen address".into(),
    };
    let message = format!("this is tapedeck's HTTP face (Durable Streams); {instead}");
    let mut response = StatusCode::OK.into_response();
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    // UNIMPLEMENTED, in a trailers-only answer; the message is ASCII (a socket address).
    headers.insert("grpc-status", HeaderValue::from_static("12"));
    if let Ok(message) = HeaderValue::from_str(&message) {
        headers.insert("grpc-message", message);
    }
    response
}
