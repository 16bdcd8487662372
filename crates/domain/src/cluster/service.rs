//! The server side of traffic between nodes, on `--cluster-listen`: openraft's RPCs, decoded,
//! handed to this node's Raft, and answered. Calls from anything but a configured peer are
//! refused.
use std::collections::BTreeSet;
use std::future::Future;
use std::net::IpAddr;

use openraft::error::RaftError;
use openraft::raft::{AppendEntriesRequest, VoteRequest, VoteResponse};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tonic::transport::{Server, ServerTlsConfig};
use tonic::{Request, Response, Status, Streaming};

use tracing::Instrument;

use super::produce::ProducingStream;
use crate::id::ConversationId;
use crate::pb::cluster::{
    AppliedAsked, AppliedIndex, Conversation, Done, HttpAnswered, HttpAsked, Produced,
};
use crate::recorder::Recorder;
use crate::trace_context;

use super::types::{NodeId, Raft, TypeConfig};
use super::wire;
use crate::error::{Error, Result};
use crate::pb::cluster::Payload;
use crate::pb::cluster::cluster_server::{Cluster, ClusterServer};

/// The addresses the peers connect from.
pub(crate) type Allowed = BTreeSet<IpAddr>;

/// This node's side of the cluster's RPCs.
struct Service {
    raft: Raft,
    /// This node: its applied index and HTTP face, for the HTTP writes forwarded here.
    cluster: super::Cluster,
    /// Runs the producer sessions other nodes forward here.
    recorder: Recorder,
    allowed: Allowed,
}

impl Service {
    /// Refuses a call that does not come from a configured peer.
    fn check<T>(&self, request: &Request<T>) -> std::result::Result<(), Status> {
        match request.remote_addr() {
            Some(addr) if self.allowed.contains(&addr.ip()) => Ok(()),
            Some(addr) => Err(Status::permission_denied(format!(
                "{} is not one of this cluster's nodes; only the addresses in --cluster-peers \
                 (TAPEDECK_CLUSTER_PEERS) may call this port",
                addr.ip()
            ))),
            None => Err(Status::permission_denied(
                "the caller's address is unknown; only this cluster's nodes may call this port",
            )),
        }
    }
}

/// Decodes a request, runs it, encodes its result.
async fn relay<Req, Res, E, Fut>(
    request: Request<Payload>,
    run: impl FnOnce(Req) -> Fut,
) -> std::result::Result<Response<Payload>, Status>
where
    Req: DeserializeOwned,
    Res: Serialize,
    E: Serialize,
    Fut: Future<Output = std::result::Result<Res, E>>,
{
    let request: Req = wire::decode(request.get_ref())
        .map_err(|err| Status::invalid_argument(format!("the payload does not decode: {err}")))?;
    let result = run(request).await;
    let payload = wire::encode(&result)
        .map_err(|err| Status::internal(format!("the answer does not encode: {err}")))?;
    Ok(Response::new(payload))
}

#[tonic::async_trait]
impl Cluster for Service {
    async fn append_entries(
        &self,
        request: Request<Payload>,
    ) -> std::result::Result<Response<Payload>, Status> {
        self.check(&request)?;
        relay(request, |rpc: AppendEntriesRequest<TypeConfig>| {
            self.cluster.heard_commit(rpc.leader_commit);
            self.raft.append_entries(rpc)
        })
        .await
    }

    async fn vote(
        &self,
        request: Request<Payload>,
    ) -> std::result::Result<Response<Payload>, Status> {
        self.check(&request)?;
        if self.cluster.rejoin.pending() {
            // Rejoining with a log that was lost: this node's vote could elect a leader that
            // lacks acknowledged entries (see `rejoin`).
            return relay(request, |rpc: VoteRequest<NodeId>| async move {
                tracing::debug!(candidate = %rpc.vote, "refused a vote: still catching up after starting with an empty log");
                let vote = self.raft.metrics().borrow().vote;
                Ok::<_, RaftError<NodeId>>(VoteResponse {
                    vote,
                    vote_granted: false,
                    last_log_id: None,
                })
            })
            .await;
        }
        relay(request, |rpc| self.raft.vote(rpc)).await
    }

    async fn install_snapshot(
        &self,
        request: Request<Payload>,
    ) -> std::result::Result<Response<Payload>, Status> {
        self.check(&request)?;
        relay(request, |rpc| self.raft.install_snapshot(rpc)).await
    }

    async fn cancel(
        &self,
        request: Request<Conversation>,
    ) -> std::result::Result<Response<Done>, Status> {
        self.check(&request)?;
        let id = ConversationId::parse(&request.get_ref().conversation_id)?;
        let done = self.recorder.cancel_here(&id).await?;
        Ok(Response::new(Done { done }))
    }

    async fn delete(
        &self,
        request: Request<Conversation>,
    ) -> std::result::Result<Response<Done>, Status> {
        self.check(&request)?;
        let id = ConversationId::parse(&request.get_ref().conversation_id)?;
        let done = self.recorder.delete_here(&id).await?;
        Ok(Response::new(Done { done }))
    }

    async fn http(
        &self,
        request: Request<HttpAsked>,
    ) -> std::result::Result<Response<HttpAnswered>, Status> {
        self.check(&request)?;
        let span = forwarded_span("tapedeck.cluster.Cluster/Http", request.metadata());
        async {
            self.cluster.until_ready_if_leading().await;
            let answered = super::http_writes::answer_here(
                &self.cluster.http_face,
                &self.cluster.applied,
                request.into_inner(),
            )
            .await?;
            Ok(Response::new(answered))
        }
        .instrument(span)
        .await
    }

    async fn applied(
        &self,
        request: Request<AppliedAsked>,
    ) -> std::result::Result<Response<AppliedIndex>, Status> {
        self.check(&request)?;
        let index = self.cluster.applied_index();
        let empty = self.cluster.log_is_empty();
        let last_log_index = self.raft.metrics().borrow().last_log_index.unwrap_or(0);
        Ok(Response::new(AppliedIndex {
            index,
            empty,
            last_log_index,
            peers: self.cluster.peers_progress(),
        }))
    }

    type ProduceStream = ProducingStream;

    async fn produce(
        &self,
        request: Request<Streaming<Produced>>,
    ) -> std::result::Result<Response<ProducingStream>, Status> {
        self.check(&request)?;
        let span = forwarded_span("tapedeck.cluster.Cluster/Produce", request.metadata());
        let mut incoming = request.into_inner();
        async {
            let open = super::produce::first_open(&mut incoming).await?;
            let answers = super::produce::produce(&self.recorder, open, incoming).await?;
            Ok(Response::new(answers))
        }
        .instrument(span)
        .await
    }
}

/// The span for traces of a call another node forwarded here for its client: its parent is
/// the context that node sent (its own call's span).
fn forwarded_span(rpc: &'static str, metadata: &tonic::metadata::MetadataMap) -> tracing::Span {
    let span = tracing::info_span!(
        target: trace_context::SPAN_TARGET,
        "cluster call",
        otel.name = rpc,
        otel.kind = "server",
        rpc.system.name = "grpc",
        rpc.method = rpc,
    );
    trace_context::adopt_parent(&span, metadata.as_ref());
    span
}

/// Serves the cluster's RPCs on the connections of `incoming` to the addresses in `allowed`,
/// with `tls` if given, until `shutdown` resolves.
///
/// Fails when TLS cannot be set up or the server fails.
pub(crate) async fn serve<I, IO, IE>(
    incoming: I,
    cluster: super::Cluster,
    recorder: Recorder,
    allowed: Allowed,
    tls: Option<ServerTlsConfig>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()>
where
    I: tokio_stream::Stream<Item = std::result::Result<IO, IE>> + Send + 'static,
    IO: tokio::io::AsyncRead
        + tokio::io::AsyncWrite
        + tonic::transport::server::Connected
        + Unpin
        + Send
        + 'static,
    IE: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    let service = ClusterServer::new(Service {
        raft: cluster.raft.clone(),
        cluster,
        recorder,
        allowed,
    })
    .max_decoding_message_size(usize::MAX)
    .max_encoding_message_size(usize::MAX);
    let mut server = super::network::serve_windows(Server::builder());
    if let Some(tls) = tls {
        server = server
            .tls_config(tls)
            .map_err(|err| crate::tls::error(&err))?;
    }
    server
        .add_service(service)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
        .map_err(|err| {
            Error::Setup(crate::error::Setup::Cluster {
                reason: format!("the cluster port failed: {err}"),
            })
        })
}
