//! What a node knows of its cluster, for `tapedeck cluster status` and the metrics: who leads,
//! the term, the log, and each node's progress as the leader sees it (a follower asks it).
use std::time::Duration;

use openraft::ServerState;

use super::Cluster;
use super::types::NodeId;
use crate::metrics as metric;
use crate::pb::cluster::cluster_client::ClusterClient;
use crate::pb::cluster::{AppliedAsked, PeerProgress};

/// Entries a node may be behind the leader and still count as healthy.
const HEALTHY_LAG: u64 = 1_000;
/// How long a node may go without answering the leader and still count as healthy: the
/// leader sends it something every heartbeat (100 ms).
const HEALTHY_SILENCE_MS: u64 = 2 * super::node::ELECTION_TIMEOUT_MAX_MS;
/// How long a follower waits for the leader's view of the nodes.
const ASK_LEADER_WAIT: Duration = Duration::from_secs(1);

/// One node's view of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterStatus {
    /// The node that answered.
    pub node_id: NodeId,
    /// The leader it follows (or is), if known.
    pub leader_id: Option<NodeId>,
    /// The current term.
    pub term: u64,
    /// `leader`, `follower`, `candidate` or `learner`.
    pub role: &'static str,
    /// The last entry in its log.
    pub last_log_index: u64,
    /// The last entry applied to its database.
    pub applied_index: u64,
    /// Every voter, by id.
    pub nodes: Vec<NodeProgress>,
    /// Whether it started with an empty log and has not caught up yet (it has no vote).
    pub rejoining: bool,
    /// Whose view `nodes`' progress is: this node's when it leads, the leader's when a
    /// follower asked it ([`Cluster::status_as_the_leader_sees_it`]); `None`: unknown.
    pub progress_from: Option<NodeId>,
}

/// A voter, as the answering node knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeProgress {
    /// Its id.
    pub id: NodeId,
    /// Its cluster address.
    pub address: String,
    /// The last entry the leader knows it holds (on the leader only).
    pub matched_index: Option<u64>,
    /// How many entries it is behind the leader's log (on the leader only).
    pub lag: Option<u64>,
    /// Whether it is within [`HEALTHY_LAG`] entries and answered the leader within
    /// [`HEALTHY_SILENCE_MS`] (the leader itself is, while a majority answers it). False when
    /// unknown.
    pub healthy: bool,
    /// How long since it last answered the leader, in milliseconds (`None`: not since the
    /// leader started, or unknown).
    pub silent_ms: Option<u64>,
}

impl Cluster {
    /// This node's view of the cluster now.
    pub fn status(&self) -> ClusterStatus {
        let metrics = self.raft.metrics().borrow().clone();
        let last_log_index = metrics.last_log_index.unwrap_or(0);
        let leads = metrics.state == ServerState::Leader;
        let quorum_fresh = metrics
            .millis_since_quorum_ack
            .is_some_and(|ms| ms < super::node::ELECTION_TIMEOUT_MAX_MS);
        let nodes = self
            .config
            .peers
            .iter()
            .map(|(&id, address)| {
                let matched_index = metrics
                    .replication
                    .as_ref()
                    .and_then(|replication| replication.get(&id).copied())
                    .map(|matched| matched.map_or(0, |log_id| log_id.index));
                let lag = matched_index.map(|matched| last_log_index.saturating_sub(matched));
                let itself = id == self.config.node_id;
                let silent_ms = (leads && !itself)
                    .then(|| self.answers.silent_ms(id))
                    .flatten();
                let answers = silent_ms.is_some_and(|ms| ms <= HEALTHY_SILENCE_MS);
                let healthy = leads
                    && quorum_fresh
                    && (itself || answers && lag.is_some_and(|lag| lag <= HEALTHY_LAG));
                NodeProgress {
                    id,
                    address: address.clone(),
                    matched_index,
                    lag,
                    healthy,
                    silent_ms,
                }
            })
            .collect();
        ClusterStatus {
            node_id: self.config.node_id,
            leader_id: metrics.current_leader,
            term: metrics.current_term,
            role: match metrics.state {
                ServerState::Leader => "leader",
                ServerState::Follower => "follower",
                ServerState::Candidate => "candidate",
                ServerState::Learner | ServerState::Shutdown => "learner",
            },
            last_log_index,
            applied_index: metrics.last_applied.map_or(0, |id| id.index),
            nodes,
            rejoining: self.rejoin.pending(),
            progress_from: leads.then_some(self.config.node_id),
        }
    }

    /// This node's view, with each node's progress as the leader sees it: on a follower,
    /// asked of the leader (within a second; else unknown, as `progress_from` says).
    pub async fn status_as_the_leader_sees_it(&self) -> ClusterStatus {
        let mut status = self.status();
        if status.progress_from.is_some() {
            return status;
        }
        let Some(leader) = status.leader_id else {
            return status;
        };
        if let Some(peers) = self.leaders_view().await {
            for node in &mut status.nodes {
                if let Some(seen) = peers.iter().find(|peer| peer.id == node.id) {
                    node.matched_index = seen.matched_index;
                    node.lag = seen.lag;
                    node.healthy = seen.healthy;
                    node.silent_ms = seen.silent_ms;
                }
            }
            status.progress_from = Some(leader);
        }
        status
    }

    /// Each node's progress as the leader answers it.
    async fn leaders_view(&self) -> Option<Vec<PeerProgress>> {
        let channel = self.leader_channel().await?;
        let mut client = ClusterClient::new(channel);
        let asked = client.applied(AppliedAsked {});
        let answer = tokio::time::timeout(ASK_LEADER_WAIT, asked)
            .await
            .ok()?
            .ok()?;
        Some(answer.into_inner().peers)
    }

    /// Each node's progress, if this node leads (for a follower that asks).
    pub(super) fn peers_progress(&self) -> Vec<PeerProgress> {
        let status = self.status();
        if status.progress_from.is_none() {
            return Vec::new();
        }
        status
            .nodes
            .into_iter()
            .map(|node| PeerProgress {
                id: node.id,
                matched_index: node.matched_index,
                lag: node.lag,
                healthy: node.healthy,
                silent_ms: node.silent_ms,
            })
            .collect()
    }

    /// Keeps the cluster's gauges up to date from this node's metrics, until `stop`.
    pub async fn export_metrics(self, stop: tokio_util::sync::CancellationToken) {
        let mut changes = self.raft.metrics();
        loop {
            let status = self.status();
            metrics::gauge!(metric::CLUSTER_LEADER)
                .set(status.leader_id.map_or(0.0, |id| id as f64));
            metrics::gauge!(metric::CLUSTER_TERM).set(status.term as f64);
            let leading = status.progress_from == Some(status.node_id);
            metrics::gauge!(metric::CLUSTER_LEADING).set(if leading { 1.0 } else { 0.0 });
            metrics::gauge!(metric::CLUSTER_LAST_LOG_INDEX).set(status.last_log_index as f64);
            metrics::gauge!(metric::CLUSTER_APPLIED_INDEX).set(status.applied_index as f64);
            for node in &status.nodes {
                if let Some(lag) = node.lag {
                    metrics::gauge!(metric::CLUSTER_NODE_LAG, "node" => node.id.to_string())
                        .set(lag as f64);
                }
                if status.progress_from.is_some() {
                    let healthy = if node.healthy { 1.0 } else { 0.0 };
                    metrics::gauge!(metric::CLUSTER_NODE_HEALTHY, "node" => node.id.to_string())
                        .set(healthy);
                }
            }
            // Also every second: a node that died changes nothing in the leader's metrics.
            tokio::select! {
                () = stop.cancelled() => return,
                changed = changes.changed() => if changed.is_err() { return },
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }
}
