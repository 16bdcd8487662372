//! Writes on the HTTP face of a node that does not lead (create, append, close, delete), run by
//! the leader's face: the node sends the whole request over the cluster port, the leader's face
//! answers it as if it had been made there, and the node answers its client once it has applied
//! as far as the leader had, so that the client's next read on it sees its write.
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use tonic::Status;

use super::Cluster;
use crate::error::{Error, Result};
use crate::pb::cluster::cluster_client::ClusterClient;
use crate::pb::cluster::{AppliedAsked, Header, HttpAnswered, HttpAsked};

/// How long a write may look for a leader before it is refused as unavailable.
const LEADER_WAIT: Duration = Duration::from_secs(10);
/// How long the answer may wait for this node to apply the write; past it the client is
/// answered anyway (the write is committed), and its next read here may not show it yet.
const APPLY_WAIT: Duration = Duration::from_secs(5);
/// How long a read that found nothing may wait for this node to catch up with the leader.
const CATCH_UP_WAIT: Duration = Duration::from_secs(2);

/// A node's own HTTP face, through which the leader answers the writes other nodes forward.
pub trait LocalHttp: Send + Sync {
    /// Answers `request` on this node, never forwarding it again.
    fn answer(&self, request: http::Request<Bytes>) -> BoxFuture<'_, http::Response<Bytes>>;
}

/// This node's face, once it serves one.
pub(super) type FaceSlot = Arc<OnceLock<Arc<dyn LocalHttp>>>;

impl Cluster {
    /// Answers the HTTP writes other nodes forward here with `face`.
    pub fn answer_http_with(&self, face: Arc<dyn LocalHttp>) {
        // Set once, when the face starts; a second face (there is none) would be ignored.
        let _ = self.http_face.set(face);
    }

    /// Whether this node leads the cluster now, ready to write (see `on_each_lead`), and so
    /// writes streams itself.
    pub fn leads(&self) -> bool {
        self.raft.metrics().borrow().current_leader == Some(self.config.node_id)
            && self.ready_to_lead()
    }

    /// Runs an HTTP write on the leader's face and returns its answer, once this node has
    /// applied what the leader had when it answered.
    ///
    /// Fails with `NoQuorum` (UNAVAILABLE, naming the leader if known) when no leader is
    /// reached within [`LEADER_WAIT`], or the call to it fails: the write may or may not
    /// have been made, as when any connection drops before its answer.
    pub async fn forward_http(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>> {
        let asked = asked(request);
        let channel = self.wait_for_leader().await?;
        let answered = ClusterClient::new(channel)
            .http(super::network::with_trace_context(asked))
            .await
            .map_err(|status| self.not_answered(status))?
            .into_inner();
        self.wait_applied(answered.applied).await;
        answer(answered)
    }

    /// Waits, up to [`LEADER_WAIT`], while this node leads but is still applying what the
    /// leaders before it committed: a write forwarded to it then is answered once it can be
    /// made on the cluster's state.
    pub(super) async fn until_ready_if_leading(&self) {
        let deadline = tokio::time::Instant::now() + LEADER_WAIT;
        while self.raft.metrics().borrow().current_leader == Some(self.config.node_id)
            && !self.ready_to_lead()
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A channel to the leader, looking for one up to [`LEADER_WAIT`]. Nothing has been
    /// sent yet, so looking again is safe.
    async fn wait_for_leader(&self) -> Result<tonic::transport::Channel> {
        let deadline = tokio::time::Instant::now() + LEADER_WAIT;
        let mut pause = Duration::from_millis(20);
        loop {
            if let Some(channel) = self.leader_channel().await {
                return Ok(channel);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(self.no_quorum());
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }

    /// Applies, up to [`CATCH_UP_WAIT`], as far as the leader has: a read that found no
    /// stream, or not as much of it as the client asks for, looks again after it, as the
    /// client may have written it through another node a moment ago. Best effort: without a
    /// leader to ask, it returns at once.
    pub async fn catch_up(&self) {
        if self.leads() {
            return;
        }
        let Some(channel) = self.leader_channel().await else {
            return;
        };
        let mut client = ClusterClient::new(channel);
        let asked = client.applied(AppliedAsked {});
        if let Ok(Ok(index)) = tokio::time::timeout(CATCH_UP_WAIT, asked).await {
            let index = index.into_inner().index;
            let mut applied = self.applied.clone();
            let _ = tokio::time::timeout(CATCH_UP_WAIT, applied.wait_for(|at| *at >= index)).await;
        }
    }

    fn not_answered(&self, status: Status) -> Error {
        if super::relay::retriable(&status) {
            tracing::debug!(%status, "the leader did not answer a forwarded HTTP write");
            self.no_quorum()
        } else {
            super::relay::refused(status)
        }
    }

    /// Waits, up to [`APPLY_WAIT`], until this node has applied log index `index`.
    async fn wait_applied(&self, index: u64) {
        let mut applied = self.applied.clone();
        let reached = applied.wait_for(|at| *at >= index);
        if tokio::time::timeout(APPLY_WAIT, reached).await.is_err() {
            tracing::warn!(
                index,
                applied = *applied.borrow(),
                "a forwarded HTTP write is answered before this node applied it"
            );
        }
    }
}

/// Answers a write forwarded here with this node's face, with how far this node had applied.
pub(super) async fn answer_here(
    face: &FaceSlot,
    applied: &tokio::sync::watch::Receiver<u64>,
    asked: HttpAsked,
) -> std::result::Result<HttpAnswered, Status> {
    let face = face
        .get()
        .cloned()
        .ok_or_else(|| Status::unavailable("the leader serves no HTTP face (--http-listen off)"))?;
    let request = request(asked)?;
    let response = face.answer(request).await;
    // Read after the answer: the write it made is applied here by then.
    let applied = *applied.borrow();
    let (parts, body) = response.into_parts();
    Ok(HttpAnswered {
        status: u32::from(parts.status.as_u16()),
        headers: headers_out(&parts.headers),
        body: body.to_vec(),
        applied,
    })
}

fn asked(request: http::Request<Bytes>) -> HttpAsked {
    let (parts, body) = request.into_parts();
    HttpAsked {
        method: parts.method.to_string(),
        uri: parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_string(), |p| p.as_str().to_string()),
        headers: headers_out(&parts.headers),
        body: body.to_vec(),
    }
}

fn headers_out(headers: &http::HeaderMap) -> Vec<Header> {
    headers
        .iter()
        .map(|(name, value)| Header {
            name: name.as_str().to_string(),
            value: value.as_bytes().to_vec(),
        })
        .collect()
}

/// The request a node forwarded, as its face would have received it.
fn request(asked: HttpAsked) -> std::result::Result<http::Request<Bytes>, Status> {
    let bad =
        |what: &str| Status::invalid_argument(format!("a forwarded HTTP write has a bad {what}"));
    let mut request = http::Request::builder()
        .method(http::Method::from_bytes(asked.method.as_bytes()).map_err(|_| bad("method"))?)
        .uri(asked.uri);
    for header in asked.headers {
        request = request.header(header.name, header.value);
    }
    request
        .body(Bytes::from(asked.body))
        .map_err(|_| bad("head"))
}

/// The leader's answer, as this node's.
fn answer(answered: HttpAnswered) -> Result<http::Response<Bytes>> {
    let status = u16::try_from(answered.status).unwrap_or(500);
    let mut response = http::Response::builder().status(status);
    for header in answered.headers {
        response = response.header(header.name, header.value);
    }
    response.body(Bytes::from(answered.body)).map_err(|err| {
        Error::Setup(crate::error::Setup::Cluster {
            reason: format!("the leader's answer to an HTTP write does not parse: {err}"),
        })
    })
}
