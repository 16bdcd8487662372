//! Leading: whether this node leads and has applied what the leaders before it committed
//! (only then are its commits decided on the cluster's state), what it does each time it comes
//! to lead or stops, and the channel to whichever node leads.
use tokio_util::sync::CancellationToken;

use super::node::Cluster;
use super::types::NodeId;
use crate::error::Error;

/// Resolves after the next failed commit; never without a store that counts them.
async fn failed(commits: &mut Option<tokio::sync::watch::Receiver<u64>>) -> Option<()> {
    match commits {
        Some(commits) => commits.changed().await.ok(),
        None => std::future::pending().await,
    }
}

impl Cluster {
    /// Whether this node leads and has applied everything committed before it came to.
    pub(super) fn ready_to_lead(&self) -> bool {
        self.ready_to_lead
            .load(std::sync::atomic::Ordering::Acquire)
    }

    fn set_ready_to_lead(&self, ready: bool) {
        self.ready_to_lead
            .store(ready, std::sync::atomic::Ordering::Release);
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
        let channel = self.dialer.connect(endpoint).await.ok()?;
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
    /// leaders before it committed, and again after each commit of its own that failed while
    /// it leads; `depose` each time it stops; until `stop` is cancelled.
    ///
    /// A failed commit lets go of the recordings it touched but leaves them `recording` (it
    /// may yet be applied): the next leader adopts them, but if this node goes on leading,
    /// nobody else will, and they would stay live for ever.
    pub async fn on_each_lead<F, Fut>(self, stop: CancellationToken, adopt: F, depose: impl Fn())
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let mut metrics = self.raft.metrics();
        let mut failed_commits = self.failed_commits.clone();
        let mut leading_term = None;
        // After a failed commit: adopt again once this log index is applied. The failed
        // proposal may be in the log (it timed out) and be applied yet; a tape adopted before
        // would count the recording's chunks without it, and its next append would not follow
        // on from what every node holds.
        let mut readopt_at: Option<u64> = None;
        let mut was_leading = false;
        // The last log index when this node came to lead in the current term: once it has
        // applied that far, it has applied everything the leaders before it committed (its
        // own blank entry, after them, included).
        let mut took_over_at: Option<(u64, u64)> = None;
        loop {
            let (term, leads, ready, readopt_due) = {
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
                let readopt = readopt_at.is_some_and(|index| applied >= Some(index));
                (m.current_term, leads, ready, readopt)
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
                readopt_at = None;
                tracing::info!(term, "this node leads the cluster");
                // Its commits are decided on the cluster's state from now on; the adoption
                // itself commits (open streams are taken over).
                self.set_ready_to_lead(true);
                adopt().await;
            } else if ready && readopt_due {
                readopt_at = None;
                tracing::info!(term, "adopting what a failed commit left live");
                adopt().await;
            }
            tokio::select! {
                () = stop.cancelled() => return,
                changed = metrics.changed() => if changed.is_err() { return },
                Some(()) = failed(&mut failed_commits) => {
                    let last = metrics.borrow().last_log_index.unwrap_or(0);
                    readopt_at = Some(readopt_at.map_or(last, |at| at.max(last)));
                }
            }
        }
    }
}
