//! One node of a cluster, started: its log, its state machine (the store), the network to the
//! other nodes and the port they reach it on; the cluster formed on first start; the store's
//! commits proposed through it.
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, SnapshotPolicy};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::log::LogStore;
use super::machine::{AppliedState, Machine};
use super::network::Network;
use super::rejoin::Rejoin;
use super::settings::ClusterConfig;
use super::snapshots::SnapshotFiles;
use super::types::{NodeId, Proposal, Raft};
use crate::error::{Error, Result};
use crate::pb::cluster::AppliedAsked;
use crate::pb::cluster::cluster_client::ClusterClient;
use crate::recorder::Recorder;
use crate::store::Replication;

/// Heartbeats from the leader, in ms; a follower that hears none for an election timeout
/// (a random time between the two below) stands for election.
const HEARTBEAT_MS: u64 = 100;
/// How long a snapshot chunk's RPC may take; the last chunk's answer waits for the whole
/// snapshot to be installed.
const INSTALL_SNAPSHOT_TIMEOUT_MS: u64 = 120_000;
const ELECTION_TIMEOUT_MIN_MS: u64 = 600;
pub(super) const ELECTION_TIMEOUT_MAX_MS: u64 = 1_200;
/// How long a node with an empty log waits to hear from a leader before it asks the others
/// whether the cluster is new (see [`Cluster::form`]).
const JOIN_WAIT: Duration = Duration::from_millis(3 * ELECTION_TIMEOUT_MAX_MS);
/// How long a node waits for another's answer to whether its log is empty.
const ASK_WAIT: Duration = Duration::from_secs(1);
/// How long a commit may wait for a majority before its producers are told there is none.
const PROPOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// A running node of a cluster; cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    pub(super) raft: Raft,
    pub(super) config: Arc<ClusterConfig>,
    /// How this node dials the others.
    tls: Option<tonic::transport::ClientTlsConfig>,
    /// The last log index applied here.
    pub(super) applied: tokio::sync::watch::Receiver<u64>,
    /// This node's HTTP face, which answers the writes other nodes forward while it leads.
    pub(super) http_face: super::http_writes::FaceSlot,
    /// The channel to the leader, kept while the same node leads: every call forwarded to
    /// it shares one connection.
    to_leader: Arc<std::sync::Mutex<Option<(NodeId, tonic::transport::Channel)>>>,
    /// Whether this node, having found its log empty, has no vote yet.
    pub(super) rejoin: Arc<Rejoin>,
    /// Whether this node leads and has applied everything the leaders before it committed:
    /// only then are its commits decided on the cluster's state (see `on_each_lead`).
    ready_to_lead: Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("node_id", &self.config.node_id)
            .finish_non_exhaustive()
    }
}

/// The cluster's port, served until the stop token is cancelled.
pub struct Served {
    /// The node.
    pub cluster: Cluster,
    /// The task serving the other nodes; ends after the stop token is cancelled.
    pub server: JoinHandle<Result<()>>,
}

impl Cluster {
    /// Starts this node: opens its log under `data_dir`, serves the other nodes on
    /// `listener`, joins or forms the cluster in the background (see [`Cluster::form`]), and
    /// sends `store`'s commits through the cluster from now on.
    ///
    /// Fails when the log cannot be opened or the network cannot be set up.
    pub async fn start(
        config: &ClusterConfig,
        listener: TcpListener,
        data_dir: &Path,
        recorder: &Recorder,
        tls: Option<&crate::config::TlsFiles>,
        stop: CancellationToken,
    ) -> Result<Served> {
        let store = recorder.deck().store();
        let log_dir = data_dir.join("raft");
        let log = LogStore::open(&log_dir).map_err(|err| Error::Cluster {
            reason: format!("cannot open the log in {}: {err}", log_dir.display()),
        })?;
        let rejoin = Rejoin::open(&log_dir, log.is_empty()).map_err(|err| Error::Cluster {
            reason: format!(
                "cannot mark the log in {} as rejoining: {err}",
                log_dir.display()
            ),
        })?;
        let (applied_tx, applied) = tokio::sync::watch::channel(0);
        let snapshots = SnapshotFiles::open(&log_dir).map_err(|err| Error::Cluster {
            reason: format!("cannot open the snapshots in {}: {err}", log_dir.display()),
        })?;
        let machine = Machine::open(store.clone(), applied_tx, snapshots, config.node_id)?;
        let raft_config = openraft::Config {
            cluster_name: "tapedeck".into(),
            heartbeat_interval: HEARTBEAT_MS,
            election_timeout_min: ELECTION_TIMEOUT_MIN_MS,
            election_timeout_max: ELECTION_TIMEOUT_MAX_MS,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(config.snapshot_every),
            max_in_snapshot_log_to_keep: config.snapshot_every,
            // A chunk's RPC; the last one's answer waits for the snapshot to be installed.
            install_snapshot_timeout: INSTALL_SNAPSHOT_TIMEOUT_MS,
            // A node rejoining with an empty log stands for election once it has caught up.
            enable_elect: !rejoin.pending(),
            ..Default::default()
        }
        .validate()
        .map_err(|err| Error::Cluster {
            reason: err.to_string(),
        })?;
        let client_tls = super::tls::client(tls)?;
        let network = Network::new(config.peers.clone(), client_tls.clone());
        let raft = Raft::new(config.node_id, Arc::new(raft_config), network, log, machine)
            .await
            .map_err(|err| Error::Cluster {
                reason: err.to_string(),
            })?;
        let cluster = Cluster {
            raft,
            config: Arc::new(config.clone()),
            tls: client_tls,
            applied,
            http_face: Arc::default(),
            to_leader: Arc::default(),
            rejoin: Arc::new(rejoin),
            ready_to_lead: Arc::default(),
        };
        let server = tokio::spawn(super::service::serve(
            listener,
            cluster.clone(),
            recorder.clone(),
            peer_ips(config).await,
            super::tls::server(tls)?,
            stop.cancelled_owned(),
        ));
        tokio::spawn(cluster.clone().join());
        store.replicate_through(Arc::new(Proposer {
            cluster: cluster.clone(),
            runtime: tokio::runtime::Handle::current(),
        }));
        recorder.end_on(Arc::new(super::ending::OnLeader {
            cluster: cluster.clone(),
        }));
        tracing::info!(node = config.node_id, listen = %config.listen, voters = config.peers.len(), "cluster node started");
        Ok(Served { cluster, server })
    }

    /// Forms the cluster or rejoins it, then gives this node its vote back once it has
    /// caught up, if it started with an empty log.
    async fn join(self) {
        if let Err(err) = self.form().await {
            tracing::error!(error = %err, "cannot form the cluster");
            return;
        }
        self.vote_when_caught_up().await;
    }

    /// Forms the cluster with every configured voter when this node's log is empty, no leader
    /// contacts it within [`JOIN_WAIT`], and a majority of the voters (this one included) have
    /// empty logs too: the cluster is new. Every node of a new cluster forms it with the same
    /// voters, which is safe. A node that hears from a leader, or of another node with a log,
    /// is rejoining a cluster already formed, and waits to be sent the log.
    async fn form(&self) -> Result<()> {
        let initialized = self.raft.is_initialized().await.map_err(fatal)?;
        if initialized {
            return Ok(());
        }
        let mut metrics = self.raft.metrics();
        loop {
            let contacted = tokio::time::timeout(JOIN_WAIT, async {
                while metrics.borrow().current_leader.is_none() {
                    if metrics.changed().await.is_err() {
                        break;
                    }
                }
            })
            .await;
            if contacted.is_ok() {
                return Ok(());
            }
            let empty = 1 + self.peers_with_empty_logs().await;
            if empty > self.config.peers.len() / 2 {
                break;
            }
            tracing::info!(
                "no leader yet, and no majority of the voters with an empty log: waiting to rejoin the cluster"
            );
        }
        self.vote_again()?;
        let voters: BTreeMap<NodeId, BasicNode> = self
            .config
            .peers
            .iter()
            .map(|(id, addr)| (*id, BasicNode::new(addr)))
            .collect();
        match self.raft.initialize(voters).await {
            Ok(()) => tracing::info!("formed the cluster"),
            // Another node formed it first and this one has heard from it.
            Err(RaftError::APIError(err)) => {
                tracing::debug!(%err, "the cluster was formed already")
            }
            Err(RaftError::Fatal(err)) => return Err(fatal(err)),
        }
        Ok(())
    }

    /// How many of the other voters answer, within [`ASK_WAIT`], that their log is empty.
    async fn peers_with_empty_logs(&self) -> usize {
        let asks = self
            .config
            .peers
            .iter()
            .filter(|(id, _)| **id != self.config.node_id)
            .map(|(_, address)| async move {
                let endpoint = super::network::endpoint(address, self.tls.as_ref()).ok()?;
                let asked = async {
                    let channel = endpoint.connect().await.ok()?;
                    let answer = ClusterClient::new(channel).applied(AppliedAsked {}).await;
                    Some(answer.ok()?.into_inner().empty)
                };
                tokio::time::timeout(ASK_WAIT, asked).await.ok()?
            });
        futures::future::join_all(asks)
            .await
            .into_iter()
            .filter(|empty| *empty == Some(true))
            .count()
    }

    /// Whether this node's log holds nothing the cluster ever committed: no entry, or only
    /// the founding membership, which is the same on every node.
    pub(super) fn log_is_empty(&self) -> bool {
        self.raft
            .metrics()
            .borrow()
            .last_log_index
            .is_none_or(|index| index == 0)
    }

    /// Waits until a node that started with an empty log has caught up, then lets it vote
    /// and stand for election again.
    async fn vote_when_caught_up(&self) {
        let mut metrics = self.raft.metrics();
        while self.rejoin.pending() {
            if self.rejoin.must_ask()
                && let Some(index) = self.leader_last_log_index().await
            {
                self.rejoin.leader_log_ends_at(index);
            }
            if self.rejoin.caught_up(&metrics.borrow_and_update()) {
                match self.vote_again() {
                    Ok(()) => tracing::info!("caught up with the cluster: this node votes again"),
                    Err(err) => {
                        tracing::error!(error = %err, "caught up, but still without a vote")
                    }
                }
                return;
            }
            // The first commit index heard comes with no change to the metrics: look again
            // after a while too.
            let changed = tokio::time::timeout(Duration::from_millis(200), metrics.changed());
            if let Ok(Err(_)) = changed.await {
                return;
            }
        }
    }

    /// The last index of the leader's log, if a leader is known and answers within
    /// [`ASK_WAIT`].
    async fn leader_last_log_index(&self) -> Option<u64> {
        let channel = self.leader_channel().await?;
        let mut client = ClusterClient::new(channel);
        let asked = client.applied(AppliedAsked {});
        let answer = tokio::time::timeout(ASK_WAIT, asked).await.ok()?.ok()?;
        Some(answer.into_inner().last_log_index)
    }

    /// Ends this node's rejoin: it votes and stands for election from now on.
    fn vote_again(&self) -> Result<()> {
        self.rejoin.finish().map_err(|err| Error::Cluster {
            reason: format!("cannot clear the rejoin mark: {err}"),
        })?;
        self.raft.runtime_config().elect(true);
        Ok(())
    }

    /// Whether this node leads and has applied everything committed before it came to.
    pub(super) fn ready_to_lead(&self) -> bool {
        self.ready_to_lead
            .load(std::sync::atomic::Ordering::Acquire)
    }

    fn set_ready_to_lead(&self, ready: bool) {
        self.ready_to_lead
            .store(ready, std::sync::atomic::Ordering::Release);
    }

    /// The Raft handle, for status and tests.
    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        self.config.node_id
    }

    /// The last log index applied here.
    pub fn applied_index(&self) -> u64 {
        *self.applied.borrow()
    }

    /// A channel to the leader's cluster port, if a leader is known, ready to write, and can
    /// be reached. (This node, while it leads but is still applying what the leaders before
    /// it committed, is no leader to send work to yet.)
    pub(super) async fn leader_channel(&self) -> Option<tonic::transport::Channel> {
        let leader = self.raft.metrics().borrow().current_leader?;
        if leader == self.config.node_id && !self.ready_to_lead() {
            return None;
        }
        let kept = self.kept_leader_channel();
        if let Some((id, channel)) = kept
            && id == leader
        {
            return Some(channel);
        }
        let address = self.config.peers.get(&leader)?;
        let endpoint = super::network::endpoint(address, self.tls.as_ref()).ok()?;
        let channel = endpoint.connect().await.ok()?;
        *self.to_leader.lock().unwrap_or_else(|e| e.into_inner()) = Some((leader, channel.clone()));
        Some(channel)
    }

    fn kept_leader_channel(&self) -> Option<(NodeId, tonic::transport::Channel)> {
        self.to_leader
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Why this node cannot commit, naming the leader if it knows one.
    pub(super) fn no_quorum(&self) -> Error {
        let leader = self.raft.metrics().borrow().current_leader;
        let leader = leader.filter(|id| *id != self.config.node_id);
        Error::NoQuorum {
            leader,
            leader_address: leader.and_then(|id| self.config.peers.get(&id).cloned()),
        }
    }

    /// Runs `adopt` each time this node comes to lead, once it has applied every entry the
    /// leaders before it committed, and `depose` each time it stops; until `stop` is
    /// cancelled.
    pub async fn on_each_lead<F, Fut>(self, stop: CancellationToken, adopt: F, depose: impl Fn())
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let mut metrics = self.raft.metrics();
        let mut leading_term = None;
        let mut was_leading = false;
        // The last log index when this node came to lead in the current term: once it has
        // applied that far, it has applied everything the leaders before it committed (its
        // own blank entry, after them, included).
        let mut took_over_at: Option<(u64, u64)> = None;
        loop {
            let (term, leads, ready) = {
                let m = metrics.borrow_and_update();
                let leads = m.current_leader == Some(self.config.node_id)
                    && m.state == openraft::ServerState::Leader;
                if !leads {
                    took_over_at = None;
                } else if took_over_at.is_none_or(|(term, _)| term != m.current_term) {
                    took_over_at = Some((m.current_term, m.last_log_index.unwrap_or(0)));
                }
                // Not "an entry of this term is applied": a leader restarted into the same
                // term has entries of it from before, far from the end of its log.
                let applied = m.last_applied.map(|id| id.index);
                let ready = took_over_at.is_some_and(|(_, index)| applied >= Some(index));
                (m.current_term, leads, ready)
            };
            was_leading |= leads;
            if !(leads && ready) {
                self.set_ready_to_lead(false);
            }
            if !leads {
                leading_term = None;
                if std::mem::take(&mut was_leading) {
                    tracing::info!(term, "this node no longer leads the cluster");
                    depose();
                }
            } else if ready && leading_term != Some(term) {
                leading_term = Some(term);
                tracing::info!(term, "this node leads the cluster");
                // Its commits are decided on the cluster's state from now on; the adoption
                // itself commits (open streams are taken over).
                self.set_ready_to_lead(true);
                adopt().await;
            }
            tokio::select! {
                () = stop.cancelled() => return,
                changed = metrics.changed() => if changed.is_err() { return },
            }
        }
    }

    /// Resolves when this node's Raft has stopped on its own (a write or sync of its log
    /// failed, which is never retried), with why.
    pub async fn stopped(&self) -> String {
        let mut metrics = self.raft.metrics();
        loop {
            if let Some(reason) = self.failure() {
                return reason;
            }
            if metrics.changed().await.is_err() {
                return "the Raft task ended".to_string();
            }
        }
    }

    /// Why this node's Raft stopped on its own, if it did.
    pub fn failure(&self) -> Option<String> {
        let metrics = self.raft.metrics();
        let running = metrics.borrow().running_state.clone();
        running.err().map(|fatal| fatal.to_string())
    }

    /// Stops the node's Raft.
    pub async fn shutdown(&self) {
        let _ = self.raft.shutdown().await;
    }
}

/// Proposes the store's commits to the cluster, from the writer's thread.
struct Proposer {
    cluster: Cluster,
    runtime: tokio::runtime::Handle,
}

impl Replication for Proposer {
    fn propose(&self, changes: Vec<u8>, checkpoint: bool, seen: Option<Vec<u8>>) -> Result<()> {
        // Decided on a state behind the cluster's (a leader still applying what the leaders
        // before it committed), a commit would be skipped at best.
        if self.cut_off() || !self.cluster.ready_to_lead() {
            return Err(self.cluster.no_quorum());
        }
        let base = match seen {
            Some(bytes) => AppliedState::decode(&bytes)?.last_commit,
            None => None,
        };
        let proposal = Proposal {
            changes,
            checkpoint,
            base,
        };
        let write = self.cluster.raft.client_write(proposal);
        // The timer is made inside the runtime: this thread is not one of its workers.
        let written = self
            .runtime
            .block_on(async { tokio::time::timeout(PROPOSE_TIMEOUT, write).await });
        match written {
            Ok(Ok(written)) if written.data => Ok(()),
            // Committed, but on an older state than the last commit applied: not applied.
            Ok(Ok(_)) => Err(self.cluster.no_quorum()),
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(to)))) => {
                Err(Error::NoQuorum {
                    leader: to.leader_id,
                    leader_address: to.leader_node.map(|node| node.addr),
                })
            }
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "a commit was not replicated");
                Err(self.cluster.no_quorum())
            }
            Err(_) => Err(self.cluster.no_quorum()),
        }
    }

    fn leads(&self) -> bool {
        if self.cut_off() || !self.cluster.ready_to_lead() {
            return false;
        }
        let metrics = self.cluster.raft.metrics();
        let leader = metrics.borrow().current_leader;
        leader == Some(self.cluster.config.node_id)
    }
}

impl Proposer {
    /// Whether this node leads but has heard from no majority for longer than an election
    /// takes: it is cut off, and its proposals would only wait out their timeout.
    fn cut_off(&self) -> bool {
        let metrics = self.cluster.raft.metrics();
        let metrics = metrics.borrow();
        metrics.state == openraft::ServerState::Leader
            && metrics
                .millis_since_quorum_ack
                .is_some_and(|ms| ms > 2 * ELECTION_TIMEOUT_MAX_MS)
    }
}

/// The addresses the other nodes connect from: those their configured hosts resolve to.
async fn peer_ips(config: &ClusterConfig) -> BTreeSet<IpAddr> {
    let mut ips = BTreeSet::new();
    for addr in config.peers.values() {
        match tokio::net::lookup_host(addr.as_str()).await {
            Ok(found) => ips.extend(found.map(|addr| addr.ip())),
            Err(err) => {
                tracing::warn!(peer = %addr, error = %err, "cannot resolve a peer's address; calls from it are refused until restart")
            }
        }
    }
    ips
}

fn fatal(err: openraft::error::Fatal<NodeId>) -> Error {
    Error::Cluster {
        reason: err.to_string(),
    }
}
