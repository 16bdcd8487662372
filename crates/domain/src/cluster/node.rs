//! One node of a cluster, started: its log, its state machine (the store), the network to the
//! other nodes and the port they reach it on; then formed or joined (`formation`), led
//! (`leadership`), and the store's commits proposed through it (`proposer`).
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use openraft::SnapshotPolicy;
use tapedeck_store::{Files, RealFiles};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::TcpIncoming;

use super::answers::Answers;
use super::log::LogStore;
use super::machine::Machine;
use super::network::{Dialer, Network};
use super::rejoin::Rejoin;
use super::settings::ClusterConfig;
use super::snapshots::SnapshotFiles;
use super::types::{NodeId, Raft};
use crate::error::{Error, Result};
use crate::recorder::Recorder;

/// Heartbeats from the leader, in ms; a follower that hears none for an election timeout
/// (a random time between the two below) stands for election.
const HEARTBEAT_MS: u64 = 100;
/// How long a snapshot chunk's RPC may take; the last chunk's answer waits for the whole
/// snapshot to be installed.
const INSTALL_SNAPSHOT_TIMEOUT_MS: u64 = 120_000;
/// A follower that has known a leader stands for election once it has heard nothing for the
/// leader's lease (openraft makes it the maximum) plus a random timeout between the two: 550
/// to 700 ms, five heartbeats at least. A dead leader's producers are then acknowledged again
/// within a second; a leader whose heartbeats are late by a few intervals (a busy machine)
/// keeps its place.
const ELECTION_TIMEOUT_MIN_MS: u64 = 200;
pub(super) const ELECTION_TIMEOUT_MAX_MS: u64 = 350;

/// What a node runs on: the files its log lives on, how it dials the others, and its timers.
pub(super) struct Wiring {
    pub(super) files: Arc<dyn Files>,
    pub(super) dialer: Dialer,
    pub(super) timing: Timing,
}

/// How fast this node's Raft timers run against everyone else's: a clock that runs fast fires
/// its heartbeats and election timeouts early (the simulation skews each node's).
#[derive(Clone, Copy)]
pub(super) struct Timing {
    /// Every timeout, in ms, is multiplied by this.
    pub(super) scale: f64,
}

impl Default for Timing {
    fn default() -> Self {
        Timing { scale: 1.0 }
    }
}

impl Timing {
    fn scaled(self, ms: u64) -> u64 {
        ((ms as f64) * self.scale).round().max(1.0) as u64
    }
}

/// A running node of a cluster; cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    pub(super) raft: Raft,
    pub(super) config: Arc<ClusterConfig>,
    /// How this node dials the others.
    pub(super) tls: Option<tonic::transport::ClientTlsConfig>,
    pub(super) dialer: Dialer,
    /// The last log index applied here.
    pub(super) applied: tokio::sync::watch::Receiver<u64>,
    /// This node's HTTP face, which answers the writes other nodes forward while it leads.
    pub(super) http_face: super::http_writes::FaceSlot,
    /// The channel to the leader, kept while the same node leads: every call forwarded to
    /// it shares one connection.
    pub(super) to_leader: Arc<std::sync::Mutex<Option<(NodeId, tonic::transport::Channel)>>>,
    /// Whether this node, having found its log empty, has no vote yet.
    pub(super) rejoin: Arc<Rejoin>,
    /// Whether this node leads and has applied everything the leaders before it committed:
    /// only then are its commits decided on the cluster's state (see `on_each_lead`).
    pub(super) ready_to_lead: Arc<std::sync::atomic::AtomicBool>,
    /// Wakes after each of the store's commits that failed (see `on_each_lead`).
    pub(super) failed_commits: Option<tokio::sync::watch::Receiver<u64>>,
    /// The leader's commit index in the first append heard (see `readiness`).
    pub(super) first_commit_heard: super::readiness::FirstCommitHeard,
    /// When each peer last answered this node.
    pub(super) answers: Answers,
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
        tls: Option<&crate::tls::TlsFiles>,
        stop: CancellationToken,
    ) -> Result<Served> {
        let wiring = Wiring {
            files: Arc::new(RealFiles),
            dialer: Dialer::Tcp,
            timing: Timing::default(),
        };
        let cluster = Cluster::open(config, data_dir, recorder, tls, wiring).await?;
        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
        let server = tokio::spawn(super::service::serve(
            incoming,
            cluster.clone(),
            recorder.clone(),
            peer_ips(config).await,
            super::tls::server(tls)?,
            stop.cancelled_owned(),
        ));
        tokio::spawn(cluster.clone().join());
        tracing::info!(node = config.node_id, listen = %config.listen, voters = config.peers.len(), "cluster node started");
        Ok(Served { cluster, server })
    }

    /// Opens this node as `wiring` says: its log under `data_dir`, its Raft, and `recorder`'s
    /// commits sent through the cluster from now on. It neither serves the other nodes nor
    /// joins the cluster yet (see [`Cluster::start`]).
    ///
    /// Fails when the log cannot be opened or Raft cannot be set up.
    pub(super) async fn open(
        config: &ClusterConfig,
        data_dir: &Path,
        recorder: &Recorder,
        tls: Option<&crate::tls::TlsFiles>,
        wiring: Wiring,
    ) -> Result<Cluster> {
        let store = recorder.deck().store();
        let log_dir = data_dir.join("raft");
        let setup = |what: &str, err: std::io::Error| {
            Error::Setup(crate::error::Setup::Cluster {
                reason: format!("cannot {what} in {}: {err}", log_dir.display()),
            })
        };
        let log = LogStore::open_on(wiring.files.clone(), &log_dir)
            .map_err(|err| setup("open the log", err))?;
        let rejoin = Rejoin::open(wiring.files, &log_dir, log.is_empty())
            .map_err(|err| setup("mark the log as rejoining", err))?;
        let (applied_tx, applied) = tokio::sync::watch::channel(0);
        // Snapshots are streamed as `tokio::fs` files: always the operating system's.
        std::fs::create_dir_all(&log_dir).map_err(|err| setup("make the directory", err))?;
        let snapshots =
            SnapshotFiles::open(&log_dir).map_err(|err| setup("open the snapshots", err))?;
        let machine = Machine::open(store.clone(), applied_tx, snapshots, config.node_id)?;
        let timing = wiring.timing;
        let raft_config = openraft::Config {
            cluster_name: "tapedeck".into(),
            heartbeat_interval: timing.scaled(HEARTBEAT_MS),
            election_timeout_min: timing.scaled(ELECTION_TIMEOUT_MIN_MS),
            election_timeout_max: timing.scaled(ELECTION_TIMEOUT_MAX_MS),
            snapshot_policy: SnapshotPolicy::LogsSinceLast(config.snapshot_every),
            max_in_snapshot_log_to_keep: config.snapshot_every,
            // A chunk's RPC; the last one's answer waits for the snapshot to be installed.
            install_snapshot_timeout: INSTALL_SNAPSHOT_TIMEOUT_MS,
            // A node rejoining with an empty log stands for election once it has caught up.
            enable_elect: !rejoin.pending(),
            ..Default::default()
        }
        .validate()
        .map_err(|err| {
            Error::Setup(crate::error::Setup::Cluster {
                reason: err.to_string(),
            })
        })?;
        let client_tls = super::tls::client(tls)?;
        let answers = Answers::default();
        let network = Network::new(
            config.peers.clone(),
            client_tls.clone(),
            wiring.dialer.clone(),
            answers.clone(),
        );
        let raft = Raft::new(config.node_id, Arc::new(raft_config), network, log, machine)
            .await
            .map_err(|err| {
                Error::Setup(crate::error::Setup::Cluster {
                    reason: err.to_string(),
                })
            })?;
        let cluster = Cluster {
            raft,
            config: Arc::new(config.clone()),
            tls: client_tls,
            dialer: wiring.dialer,
            applied,
            http_face: Arc::default(),
            to_leader: Arc::default(),
            rejoin: Arc::new(rejoin),
            ready_to_lead: Arc::default(),
            failed_commits: store.failed_commits(),
            first_commit_heard: Default::default(),
            answers,
        };
        cluster.propose_commits_of(store);
        recorder.end_on(Arc::new(super::ending::OnLeader {
            cluster: cluster.clone(),
        }));
        Ok(cluster)
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
