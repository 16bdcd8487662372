//! The types openraft is run with: what a log entry carries (one commit of the leader's
//! writer), the node ids and addresses of the voters.
use serde::{Deserialize, Serialize};

openraft::declare_raft_types!(
    /// tapedeck's Raft: entries carry [`Proposal`]s, nodes are `u64` ids at `host:port`
    /// cluster addresses; applying an entry answers whether its commit was applied (see
    /// [`Proposal::base`]).
    pub TypeConfig:
        D = Proposal,
        R = bool,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = tokio::fs::File,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A node's id in the cluster, as `--node-id` names it.
pub type NodeId = u64;

/// The Raft handle of this node.
pub type Raft = openraft::Raft<TypeConfig>;

/// One log entry's payload: the changes of one commit of the leader's writer, encoded as the
/// write-ahead log encodes a commit (see `store::wal::redo`). Every node, the leader included,
/// changes its database only by applying these, in log order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    /// The commit's changes.
    pub changes: Vec<u8>,
    /// The last entry with a commit that the writer's transaction saw applied: the changes
    /// follow on from the state it left. An entry whose base is not the last commit applied
    /// (one proposed after an earlier proposal timed out, and that one was committed after
    /// all) is skipped on every node, and its proposer told so.
    pub base: Option<openraft::LogId<NodeId>>,
    /// Whether every node makes its database durable once it has applied this entry, and
    /// records the entry as applied there (a checkpoint: the writer folded every unfolded
    /// chunk in it).
    pub checkpoint: bool,
}

impl std::fmt::Display for Proposal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "commit of {} bytes", self.changes.len())?;
        if self.checkpoint {
            f.write_str(" (checkpoint)")?;
        }
        Ok(())
    }
}
