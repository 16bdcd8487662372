//! Cancels and deletes made on the leader, for the clients of any node: the leader runs every
//! producer session, so a cancel reaches the producer wherever it is connected.
use std::time::Duration;

use futures::future::BoxFuture;
use tonic::Status;

use super::Cluster;
use crate::error::Result;
use crate::id::ConversationId;
use crate::pb::cluster::Conversation;
use crate::pb::cluster::cluster_client::ClusterClient;
use crate::recorder::Leader;

/// How long a cancel or delete may look for a leader before it fails.
const LEADER_WAIT: Duration = Duration::from_secs(10);

/// This node's way to the leader, for the recorder.
#[derive(Debug)]
pub(crate) struct OnLeader {
    pub(crate) cluster: Cluster,
}

/// Which call to make on the leader.
#[derive(Clone, Copy)]
enum Call {
    Cancel,
    Delete,
}

impl OnLeader {
    /// Makes `call` for `id` on the leader, trying again while none answers, up to
    /// [`LEADER_WAIT`].
    async fn call(&self, call: Call, id: &ConversationId) -> Result<bool> {
        let deadline = tokio::time::Instant::now() + LEADER_WAIT;
        let mut pause = Duration::from_millis(20);
        loop {
            match self.try_call(call, id).await {
                Ok(done) => return Ok(done),
                Err(status) if !super::relay::retriable(&status) => {
                    return Err(super::relay::refused(status));
                }
                Err(_) if tokio::time::Instant::now() >= deadline => {
                    return Err(self.cluster.no_quorum());
                }
                Err(_) => {}
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }

    async fn try_call(&self, call: Call, id: &ConversationId) -> std::result::Result<bool, Status> {
        let channel = self
            .cluster
            .leader_channel()
            .await
            .ok_or_else(|| Status::unavailable("no leader is known"))?;
        let mut client = ClusterClient::new(channel);
        let request = Conversation {
            conversation_id: id.original().to_vec(),
        };
        let answer = match call {
            Call::Cancel => client.cancel(request).await?,
            Call::Delete => client.delete(request).await?,
        };
        Ok(answer.into_inner().done)
    }
}

impl Leader for OnLeader {
    fn cancel<'a>(&'a self, id: &'a ConversationId) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.call(Call::Cancel, id))
    }

    fn delete<'a>(&'a self, id: &'a ConversationId) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.call(Call::Delete, id))
    }
}
