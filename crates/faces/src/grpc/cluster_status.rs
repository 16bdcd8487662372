//! `tapedeck.v1.Cluster`: a node's view of its cluster, for `tapedeck cluster status`.
use tonic::{Request, Response, Status};

use super::principal;
use crate::access::Guard;
use crate::cluster::Cluster;
use crate::pb::tapedeck::cluster_server;
use crate::pb::tapedeck::{ClusterStatus, ClusterStatusRequest, NodeStatus};

/// The status service of a node; a single node answers FAILED_PRECONDITION.
#[derive(Clone)]
pub struct ClusterService {
    cluster: Option<Cluster>,
    guard: Guard,
}

impl ClusterService {
    /// The service of `cluster` (none on a single node), checking calls with `guard`.
    pub fn new(cluster: Option<Cluster>, guard: Guard) -> Self {
        Self { cluster, guard }
    }
}

#[tonic::async_trait]
impl cluster_server::Cluster for ClusterService {
    async fn status(
        &self,
        request: Request<ClusterStatusRequest>,
    ) -> Result<Response<ClusterStatus>, Status> {
        principal(&self.guard, request.metadata())?;
        let Some(cluster) = &self.cluster else {
            return Err(Status::failed_precondition(
                "this node is not part of a cluster; start it with --node-id, --cluster-listen \
                 and --cluster-peers",
            ));
        };
        let status = cluster.status_as_the_leader_sees_it().await;
        Ok(Response::new(ClusterStatus {
            node_id: status.node_id,
            leader_id: status.leader_id,
            term: status.term,
            role: status.role.to_string(),
            last_log_index: status.last_log_index,
            applied_index: status.applied_index,
            rejoining: status.rejoining,
            progress_from: status.progress_from,
            nodes: status
                .nodes
                .into_iter()
                .map(|node| NodeStatus {
                    id: node.id,
                    address: node.address,
                    matched_index: node.matched_index,
                    lag: node.lag,
                    healthy: node.healthy,
                    silent_ms: node.silent_ms,
                })
                .collect(),
        }))
    }
}
