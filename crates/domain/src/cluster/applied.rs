//! [`AppliedState`]: what the cluster keeps of the entries applied to the store, written in the
//! same transaction as each entry's changes, and carried in snapshots.
use openraft::{BasicNode, LogId, StoredMembership};
use serde::{Deserialize, Serialize};

use super::types::NodeId;

/// What the cluster keeps of the last entry applied.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AppliedState {
    /// The last entry applied.
    pub last: Option<LogId<NodeId>>,
    /// The last entry whose commit was applied (see [`super::Proposal::base`]).
    pub last_commit: Option<LogId<NodeId>>,
    /// The membership in force.
    pub membership: StoredMembership<NodeId, BasicNode>,
}

impl AppliedState {
    pub(crate) fn encode(&self) -> crate::Result<Vec<u8>> {
        crate::store::schema::encode(self, "the cluster's applied state")
    }

    pub(crate) fn decode(bytes: &[u8]) -> crate::Result<Self> {
        crate::store::schema::decode(bytes, "the cluster's applied state")
    }
}
