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

use super::types::{NodeId, TypeConfig};
use super::wire;
use crate::pb::cluster::Payload;
use crate::pb::cluster::cluster_client::ClusterClient;

/// How long a connection to a peer may take before it counts as unreachable.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// Makes a [`Peer`] for each node openraft talks to.
#[derive(Clone)]
pub(crate) struct Network {
    peers: Arc<BTreeMap<NodeId, String>>,
    tls: Option<ClientTlsConfig>,
}

impl Network {
    /// Dials the nodes at `peers`, with `tls` if given.
    pub(crate) fn new(peers: BTreeMap<NodeId, String>, tls: Option<ClientTlsConfig>) -> Self {
        Self {
            peers: Arc::new(peers),
            tls,
        }
    }
}

/// HTTP/2 flow-control windows of the connections between nodes: wide enough that an
/// AppendEntries of the most bytes the log hands out at once (see `log`) crosses in one
/// window. openraft gives each AppendEntries one heartbeat interval; one that takes longer is
/// dropped and sent again, so one that cannot fit would never get through.
const STREAM_WINDOW_BYTES: u32 = 8 * 1024 * 1024;
const CONNECTION_WINDOW_BYTES: u32 = 32 * 1024 * 1024;

/// How this node dials another at `address` (TLS if `tls` is given).
pub(super) fn endpoint(
    address: &str,
    tls: Option<&ClientTlsConfig>,
) -> std::result::Result<Endpoint, tonic::transport::Error> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let endpoint = Endpoint::from_shared(format!("{scheme}://{address}"))?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .initial_stream_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(CONNECTION_WINDOW_BYTES);
    match tls {
        Some(tls) => endpoint.tls_config(tls.clone()),
        None => Ok(endpoint),
    }
}

/// The windows a node's cluster port grants (see [`STREAM_WINDOW_BYTES`]).
pub(super) fn serve_windows(server: tonic::transport::Server) -> tonic::transport::Server {
    server
        .initial_stream_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        let address = self
            .peers
            .get(&target)
            .cloned()
            .unwrap_or_else(|| node.addr.clone());
        let channel = endpoint(&address, self.tls.as_ref()).map(|endpoint| endpoint.connect_lazy());
        Peer { target, channel }
    }
}

/// One peer, as openraft sends it RPCs.
pub(crate) struct Peer {
    target: NodeId,
    /// `Err` when the peer's address is not a URI (each RPC then fails as unreachable).
    channel: Result<Channel, tonic::transport::Error>,
}

/// An RPC error whose remote part is `E`.
type Failure<E> = RPCError<NodeId, BasicNode, RaftError<NodeId, E>>;

impl Peer {
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
        F: FnOnce(ClusterClient<Channel>, Payload) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<Payload>, tonic::Status>>,
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
        let answer = tokio::time::timeout(option.hard_ttl(), call(client, payload))
            .await
            .map_err(|elapsed| RPCError::Unreachable(Unreachable::new(&elapsed)))?
            .map_err(|status| match status.code() {
                tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled => {
                    RPCError::Unreachable(Unreachable::new(&status))
                }
                _ => RPCError::Network(NetworkError::new(&status)),
            })?;
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
