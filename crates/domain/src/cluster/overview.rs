//! What a node knows of its cluster, for `tapedeck cluster status` and the metrics: who leads,
//! the term, the log, and on the leader each node's progress.
use openraft::ServerState;

use super::Cluster;
use super::types::NodeId;
use crate::metrics as metric;

/// Entries a node may be behind the leader and still count as healthy.
const HEALTHY_LAG: u64 = 1_000;

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
    /// On the leader: whether it is within [`HEALTHY_LAG`] entries and answered within the
    /// last election timeout (the leader itself always is). Elsewhere false: unknown.
    pub healthy: bool,
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
                let healthy = leads
                    && quorum_fresh
                    && (id == self.config.node_id || lag.is_some_and(|lag| lag <= HEALTHY_LAG));
                NodeProgress {
                    id,
                    address: address.clone(),
                    matched_index,
                    lag,
                    healthy,
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
        }
    }

    /// Keeps the cluster's gauges up to date from this node's metrics, until `stop`.
    pub async fn export_metrics(self, stop: tokio_util::sync::CancellationToken) {
        let mut changes = self.raft.metrics();
        loop {
            let status = self.status();
            metrics::gauge!(metric::CLUSTER_LEADER)
                .set(status.leader_id.map_or(0.0, |id| id as f64));
            metrics::gauge!(metric::CLUSTER_TERM).set(status.term as f64);
            metrics::gauge!(metric::CLUSTER_LAST_LOG_INDEX).set(status.last_log_index as f64);
            metrics::gauge!(metric::CLUSTER_APPLIED_INDEX).set(status.applied_index as f64);
            for node in &status.nodes {
                if let Some(lag) = node.lag {
                    metrics::gauge!(metric::CLUSTER_NODE_LAG, "node" => node.id.to_string())
                        .set(lag as f64);
                }
            }
            tokio::select! {
                () = stop.cancelled() => return,
                changed = changes.changed() => if changed.is_err() { return },
            }
        }
    }
}
