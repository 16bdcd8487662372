//! Whether a node of a cluster is ready for traffic (`/readyz` and gRPC health): a leader is
//! known, and this node has applied what that leader had committed when this process first
//! heard from it (leading, what the leaders before it committed).
use std::sync::OnceLock;

use super::Cluster;
use super::types::NodeId;

/// The leader's commit index in the first append this process heard.
pub(super) type FirstCommitHeard = std::sync::Arc<OnceLock<Option<openraft::LogId<NodeId>>>>;

impl Cluster {
    /// Notes the leader's commit index carried by an append, if it is the first heard.
    pub(super) fn heard_commit(&self, leader_commit: Option<openraft::LogId<NodeId>>) {
        let _ = self.first_commit_heard.set(leader_commit);
        self.rejoin.heard(leader_commit);
    }

    /// `None` when this node is ready for traffic; else why not, in words for a probe's answer.
    pub fn unready(&self) -> Option<String> {
        let metrics = self.raft.metrics();
        let metrics = metrics.borrow();
        let Some(leader) = metrics.current_leader else {
            return Some("no leader is known (an election, or this node is cut off)".into());
        };
        let applied = metrics.last_applied;
        if leader == self.config.node_id {
            return (!self.ready_to_lead()).then(|| {
                format!(
                    "leading, still applying what the leaders before it committed (applied {})",
                    applied.map_or(0, |id| id.index)
                )
            });
        }
        match self.first_commit_heard.get() {
            None => Some(format!("nothing heard from the leader, node {leader}, yet")),
            Some(commit) if applied < *commit => Some(format!(
                "applying the leader's log: {} of {}",
                applied.map_or(0, |id| id.index),
                commit.map_or(0, |id| id.index)
            )),
            Some(_) => None,
        }
    }
}
