//! CORS for the requests that ask for it: those that carry `Origin`.
//!
//! A browser sends `Origin` on every cross-origin request and every preflight, and reads the
//! CORS headers only there; an agent's or a server's request never reads them. So a request
//! without `Origin` skips the CORS layer, and its response is about 400 bytes shorter
//! (`Access-Control-Expose-Headers` alone names 15 headers): bytes every append's answer paid
//! to write and its client paid to parse. Such a response says `Vary: Origin` instead, so a
//! cache keeps it apart from the answer to a CORS request, which the CORS layer marks with its
//! own `Vary`.
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::FutureExt;
use futures::future::{Either, Map};
use http::header::{ORIGIN, VARY};
use http::{HeaderValue, Request, Response};
use tower_http::cors::{Cors, CorsLayer};
use tower_layer::Layer;
use tower_service::Service;

/// Applies `CorsLayer` to requests with `Origin`, and `Vary: Origin` to the others.
#[derive(Clone)]
pub(super) struct CorsWhenAsked(Arc<CorsLayer>);

impl CorsWhenAsked {
    pub(super) fn new(cors: CorsLayer) -> Self {
        Self(Arc::new(cors))
    }
}

impl<S> Layer<S> for CorsWhenAsked {
    type Service = CorsWhenAskedService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CorsWhenAskedService {
            cors: self.0.clone(),
            inner,
        }
    }
}

/// The service `CorsWhenAsked` makes: the inner service, wrapped in CORS for a request that
/// asks for it. Cloned for every request, so it holds the CORS settings shared: copying them
/// (lists of header names) cost every request, most of which never read them.
#[derive(Clone)]
pub(super) struct CorsWhenAskedService<S> {
    cors: Arc<CorsLayer>,
    inner: S,
}

/// What the plain path's answer becomes: the same, saying it varies by `Origin`.
type Marked<R, E> = fn(Result<Response<R>, E>) -> Result<Response<R>, E>;

impl<S, B, R> Service<Request<B>> for CorsWhenAskedService<S>
where
    S: Service<Request<B>, Response = Response<R>> + Clone,
    R: Default,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future =
        Either<<Cors<S> as Service<Request<B>>>::Future, Map<S::Future, Marked<R, S::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if request.headers().contains_key(ORIGIN) {
            // The service made ready takes the request; its clone waits for the next one.
            let next = self.inner.clone();
            let ready = std::mem::replace(&mut self.inner, next);
            Either::Left(self.cors.layer(ready).call(request))
        } else {
            Either::Right(
                self.inner
                    .call(request)
                    .map(vary_by_origin as Marked<R, S::Error>),
            )
        }
    }
}

fn vary_by_origin<R, E>(answer: Result<Response<R>, E>) -> Result<Response<R>, E> {
    answer.map(|mut response| {
        response
            .headers_mut()
            .append(VARY, HeaderValue::from_static("origin"));
        response
    })
}
