//! The client side of traffic between nodes: one lazily connected tonic channel per peer, to
//! the address `--cluster-peers` gives it (membership is fixed by configuration, so this
//! node's own list is the truth about where a peer is).
use std::collections::BTreeMap;
use std::error::Error as StdError;
use std::sync::Arc;

use openraft::BasicNode;
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::de::DeserializeOwned;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use super::answers::Answers;
use super::types::{NodeId, TypeConfig};
use super::wire;
use crate::pb::cluster::Payload;
use crate::pb::cluster::cluster_client::ClusterClient;
use crate::trace_context;

/// How long a connection to a peer may take before it counts as unreachable.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// Makes a [`Peer`] for each node openraft talks to.
#[derive(Clone)]
pub(crate) struct Network {
    peers: Arc<BTreeMap<NodeId, String>>,
    tls: Option<ClientTlsConfig>,
    dialer: Dialer,
    answers: Answers,
}

impl Network {
    /// Dials the nodes at `peers` with `dialer`, with `tls` if given; notes in `answers` when
    /// each answers.
    pub(crate) fn new(
        peers: BTreeMap<NodeId, String>,
        tls: Option<ClientTlsConfig>,
        dialer: Dialer,
        answers: Answers,
    ) -> Self {
        Self {
            peers: Arc::new(peers),
            tls,
            dialer,
            answers,
        }
    }
}

/// How a node opens connections to the others: over TCP, or, in the cluster simulation, over
/// its simulated network.
#[derive(Clone)]
pub(crate) enum Dialer {
    /// The operating system's TCP.
    Tcp,
    /// The simulated network of the cluster simulation.
    #[cfg(test)]
    Simulated(super::sim::net::Connector),
}

impl Dialer {
    /// A channel to `endpoint`, connected at its first call (and again after a failure).
    pub(super) fn lazy(&self, endpoint: Endpoint) -> Channel {
        match self {
            Dialer::Tcp => endpoint.connect_lazy(),
            #[cfg(test)]
            Dialer::Simulated(connector) => endpoint.connect_with_connector_lazy(connector.clone()),
        }
    }

    /// A channel to `endpoint`, connected now.
    ///
    /// Fails when the connection cannot be made.
    pub(super) async fn connect(
        &self,
        endpoint: Endpoint,
    ) -> std::result::Result<Channel, tonic::transport::Error> {
        match self {
            Dialer::Tcp => endpoint.connect().await,
            #[cfg(test)]
            Dialer::Simulated(connector) => {
                endpoint.connect_with_connector(connector.clone()).await
            }
        }
    }
}

/// HTTP/2 flow-control windows of the connections between nodes: wide enough that an
/// AppendEntries of the most bytes the log hands out at once (see `log`) crosses in one
/// window. openraft gives each AppendEntries one heartbeat interval; one that takes longer is
/// dropped and sent again, so one that cannot fit would never get through.
const STREAM_WINDOW_BYTES: u32 = 8 * 1024 * 1024;
const CONNECTION_WINDOW_BYTES: u32 = 32 * 1024 * 1024;

/// How often a connection between nodes is pinged, from both ends, and how long a ping may go
/// unanswered before the connection counts as dead (the dialling end dials again). A
/// connection can stall without an error (a peer that lost power, a middlebox that dropped its
/// state, segments lost for good in a partition): without pings every RPC on it would time
/// out for as long as it lived, and a producer session forwarded over it would stay attached
/// on the leader, its recording live for ever.
const KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);
const KEEPALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// How this node dials another at `address` (TLS if `tls` is given).
pub(super) fn endpoint(
    address: &str,
    tls: Option<&ClientTlsConfig>,
) -> std::result::Result<Endpoint, tonic::transport::Error> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let endpoint = Endpoint::from_shared(format!("{scheme}://{address}"))?
        .connect_timeout(CONNECT_TIMEOUT)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true)
        .tcp_nodelay(true)
        .initial_stream_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(CONNECTION_WINDOW_BYTES);
    match tls {
        Some(tls) => endpoint.tls_config(tls.clone()),
        None => Ok(endpoint),
    }
}

/// The windows a node's cluster port grants (see [`STREAM_WINDOW_BYTES`]), and its pings (see
/// [`KEEPALIVE_INTERVAL`]).
pub(super) fn serve_windows(server: tonic::transport::Server) -> tonic::transport::Server {
    server
        .initial_stream_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        let address = self
            .peers
            .get(&target)
            .cloned()
            .unwrap_or_else(|| node.addr.clone());
        let channel =
            endpoint(&address, self.tls.as_ref()).map(|endpoint| self.dialer.lazy(endpoint));
        Peer {
            target,
            channel,
            answers: self.answers.clone(),
            #[cfg(test)]
            dialer: self.dialer.clone(),
        }
    }
}

/// One peer, as openraft sends it RPCs.
pub(crate) struct Peer {
    target: NodeId,
    /// `Err` when the peer's address is not a URI (each RPC then fails as unreachable).
    channel: Result<Channel, tonic::transport::Error>,
    answers: Answers,
    /// In the simulation, what says which RPCs arrive twice.
    #[cfg(test)]
    dialer: Dialer,
}

/// An RPC error whose remote part is `E`.
type Failure<E> = RPCError<NodeId, BasicNode, RaftError<NodeId, E>>;

impl Peer {
    /// Notes that the peer could not be reached (`why`), and says so to openraft.
    fn unreachable<W: StdError + 'static, E: StdError>(&self, why: &W) -> Failure<E> {
        self.answers.unreachable(self.target, why);
        RPCError::Unreachable(Unreachable::new(why))
    }

    /// Sends `request` to the peer's `call` within `option`'s hard limit; decodes the answer.
    async fn send<Req, Res, E, F, Fut>(
        &self,
        request: &Req,
        option: &RPCOption,
        call: F,
    ) -> Result<Res, Failure<E>>
    where
        Req: serde::Serialize,
        Res: DeserializeOwned,
        E: StdError + DeserializeOwned,
        F: FnOnce(ClusterClient<Channel>, Payload) -> Fut + Clone + Send + 'static,
        Fut: std::future::Future<Output = Result<tonic::Response<Payload>, tonic::Status>>
            + Send
            + 'static,
    {
        let channel = self
            .channel
            .as_ref()
            .map_err(|err| RPCError::Unreachable(Unreachable::new(err)))?;
        let payload =
            wire::encode(request).map_err(|err| RPCError::Network(NetworkError::new(&err)))?;
        let client = ClusterClient::new(channel.clone())
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        // In the simulation, some RPCs arrive a second time, late; nobody hears the answer.
        #[cfg(test)]
        if let Dialer::Simulated(connector) = &self.dialer
            && let Some(after) = connector.duplicate()
        {
            let (client, payload, call) = (client.clone(), payload.clone(), call.clone());
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                let _ = call(client, payload).await;
            });
        }
        let answer = tokio::time::timeout(option.hard_ttl(), call(client, payload))
            .await
            .map_err(|elapsed| self.unreachable(&elapsed))?
            .map_err(|status| match status.code() {
                tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled => {
                    self.unreachable(&status)
                }
                _ => RPCError::Network(NetworkError::new(&status)),
            })?;
        self.answers.heard(self.target);
        let result: Result<Res, RaftError<NodeId, E>> = wire::decode(answer.get_ref())
            .map_err(|err| RPCError::Network(NetworkError::new(&err)))?;
        result.map_err(|err| {
            RPCError::RemoteError(openraft::error::RemoteError::new(self.target, err))
        })
    }
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, Failure<openraft::error::Infallible>> {
        self.send(&rpc, &option, |mut client, payload| async move {
            client.append_entries(payload).await
        })
        .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, Failure<InstallSnapshotError>> {
        self.send(&rpc, &option, |mut client, payload| async move {
            client.install_snapshot(payload).await
        })
        .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, Failure<openraft::error::Infallible>> {
        self.send(&rpc, &option, |mut client, payload| async move {
            client.vote(payload).await
        })
        .await
    }
}

/// `message` as a request that carries the current span's context (to the leader).
pub(super) fn with_trace_context<T>(message: T) -> tonic::Request<T> {
    let mut headers = tonic::codegen::http::HeaderMap::new();
    trace_context::inject_current(&mut headers);
    let mut request = tonic::Request::new(message);
    *request.metadata_mut() = tonic::metadata::MetadataMap::from_headers(headers);
    request
}
