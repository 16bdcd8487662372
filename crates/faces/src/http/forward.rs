//! Writes on a node of a cluster that does not lead: sent whole to the leader, whose face
//! answers them (the leader writes every stream), and its answer returned as this node's.
//! Reads are never forwarded: every node serves them from what it has applied.
use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::future::BoxFuture;
use http::Method;
use tower_service::Service;

use super::HttpFace;
use super::failure;
use crate::cluster::{Cluster, LocalHttp};

/// Marks a request a follower forwarded here: it is answered here, whoever leads by now.
#[derive(Clone, Copy)]
struct FromFollower;

impl HttpFace {
    /// The cluster to forward `request` through, if it is a write this node does not make.
    pub(super) fn forwards(&self, request: &Request) -> Option<&Cluster> {
        let cluster = self.cluster.as_ref()?;
        let write = matches!(
            *request.method(),
            Method::PUT | Method::POST | Method::DELETE
        );
        let forwarded = request.extensions().get::<FromFollower>().is_some();
        (write && !forwarded && !cluster.leads()).then_some(cluster)
    }

    /// The cluster whose leader this node may be behind, if it is a node of one that does not
    /// lead.
    pub(super) fn behind_a_leader(&self) -> Option<&Cluster> {
        self.cluster.as_ref().filter(|cluster| !cluster.leads())
    }

    /// Sends `request` to the leader's face and returns its answer.
    pub(super) async fn forward(&self, cluster: &Cluster, request: Request) -> Response {
        let (parts, body) = request.into_parts();
        let body = match self.read_body(body).await {
            Ok(body) => body,
            Err(reply) => return reply.into_response(),
        };
        match cluster
            .forward_http(http::Request::from_parts(parts, body))
            .await
        {
            Ok(answer) => answer.map(Body::from).into_response(),
            Err(err) => failure::failed(err).into_response(),
        }
    }
}

/// This node's face, answering the writes other nodes forward to it while it leads.
pub(super) struct Answering(pub(super) axum::Router);

impl LocalHttp for Answering {
    fn answer(&self, request: http::Request<Bytes>) -> BoxFuture<'_, http::Response<Bytes>> {
        let mut routes = self.0.clone();
        Box::pin(async move {
            let (mut parts, body) = request.into_parts();
            parts.extensions.insert(FromFollower);
            let response = match routes
                .call(Request::from_parts(parts, Body::from(body)))
                .await
            {
                Ok(response) => response,
                Err(never) => match never {},
            };
            let (parts, body) = response.into_parts();
            // A write's answer is a few headers and at most a line of text.
            let body = axum::body::to_bytes(body, super::MAX_BODY_BYTES)
                .await
                .unwrap_or_default();
            http::Response::from_parts(parts, body)
        })
    }
}

/// Answers the writes other nodes forward here with `face`'s routes.
pub(super) fn answer_forwarded(cluster: &Cluster, face: Arc<HttpFace>) {
    cluster.answer_http_with(Arc::new(Answering(super::router::routes(face))));
}
