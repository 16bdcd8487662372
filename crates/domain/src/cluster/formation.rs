//! Forming the cluster on first start, or rejoining it: a node with an empty log forms it only
//! with a majority of empty voters; one that started with an empty log votes again only once
//! it has caught up with the leader.
use std::collections::BTreeMap;
use std::time::Duration;

use openraft::BasicNode;
use openraft::error::RaftError;

use super::node::{Cluster, ELECTION_TIMEOUT_MAX_MS};
use super::types::NodeId;
use crate::error::{Error, Result};
use crate::pb::cluster::AppliedAsked;
use crate::pb::cluster::cluster_client::ClusterClient;

/// How long a node with an empty log waits to hear from a leader before it asks the others
/// whether the cluster is new (see [`Cluster::form`]).
const JOIN_WAIT: Duration = Duration::from_millis(3 * ELECTION_TIMEOUT_MAX_MS);
/// How long a node waits for another's answer to whether its log is empty.
const ASK_WAIT: Duration = Duration::from_secs(1);

impl Cluster {
    /// Forms the cluster or rejoins it, then gives this node its vote back once it has
    /// caught up, if it started with an empty log.
    pub(super) async fn join(self) {
        if let Err(err) = self.form().await {
            tracing::error!(error = %err, "cannot form the cluster");
            return;
        }
        self.vote_when_caught_up().await;
    }

    /// Forms the cluster with every configured voter when this node's log is empty, no leader
    /// contacts it within [`JOIN_WAIT`], a majority of the voters (this one included) have
    /// empty logs too (the cluster is new), and no voter with a lower id answered among them.
    /// A node that hears from a leader, or of another node with a log, is rejoining a cluster
    /// already formed, and waits to be sent the log.
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
            let empty_peers = self.peers_with_empty_logs().await;
            // This node's log is empty too.
            let empty = 1 + empty_peers.len();
            if empty <= self.config.peers.len() / 2 {
                tracing::info!(
                    "no leader yet, and no majority of the voters with an empty log: waiting to rejoin the cluster"
                );
                continue;
            }
            // The cluster is new: nothing committed can be lost through this node's empty
            // log, so it votes. One node forms it: the lowest id among the empty voters that
            // answer. Several forming at once stand against each other in the same term,
            // which openraft's own checks catch as two leaders at once. If that node goes
            // before it forms the cluster, it stops answering, and the next one forms it.
            self.vote_again()?;
            match empty_peers.iter().min() {
                Some(lowest) if *lowest < self.config.node_id => {
                    tracing::info!(
                        node = lowest,
                        "a new cluster: waiting for node {lowest} to form it"
                    );
                }
                _ => break,
            }
        }
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

    /// The other voters that answer, within [`ASK_WAIT`], that their log is empty.
    async fn peers_with_empty_logs(&self) -> Vec<NodeId> {
        let asks = self
            .config
            .peers
            .iter()
            .filter(|(id, _)| **id != self.config.node_id)
            .map(|(id, address)| async move {
                let endpoint = super::network::endpoint(address, self.tls.as_ref()).ok()?;
                let asked = async {
                    let channel = self.dialer.connect(endpoint).await.ok()?;
                    let answer = ClusterClient::new(channel).applied(AppliedAsked {}).await;
                    Some(answer.ok()?.into_inner().empty)
                };
                let empty = tokio::time::timeout(ASK_WAIT, asked).await.ok()??;
                empty.then_some(*id)
            });
        futures::future::join_all(asks)
            .await
            .into_iter()
            .flatten()
            .collect()
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
        self.rejoin.finish().map_err(|err| {
            Error::Setup(crate::error::Setup::Cluster {
                reason: format!("cannot clear the rejoin mark: {err}"),
            })
        })?;
        self.raft.runtime_config().elect(true);
        Ok(())
    }
}

fn fatal(err: openraft::error::Fatal<NodeId>) -> Error {
    Error::Setup(crate::error::Setup::Cluster {
        reason: err.to_string(),
    })
}
