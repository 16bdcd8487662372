//! The store's commits proposed to the cluster, from the writer's thread: refused at once when
//! this node cannot commit (it does not lead, is still catching up, or is cut off), else
//! waited for until a majority has them.
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};

use super::applied::AppliedState;
use super::node::{Cluster, ELECTION_TIMEOUT_MAX_MS};
use super::types::Proposal;
use crate::error::{Error, Result};
use crate::store::Replication;

/// How long a commit may wait for a majority before its producers are told there is none.
const PROPOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Proposes the store's commits to the cluster, from the writer's thread.
struct Proposer {
    cluster: Cluster,
    runtime: tokio::runtime::Handle,
}

impl Cluster {
    /// Makes every commit of `store` a proposal to this cluster from now on. Called on a
    /// runtime, whose handle the writer's thread then uses.
    pub(super) fn propose_commits_of(&self, store: &crate::store::Store) {
        store.replicate_through(std::sync::Arc::new(Proposer {
            cluster: self.clone(),
            runtime: tokio::runtime::Handle::current(),
        }));
    }
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
            changes: changes.into(),
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
