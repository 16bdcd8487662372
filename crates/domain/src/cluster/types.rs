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
    /// The commit's changes. Shared, not copied, when openraft clones an entry (once a
    /// follower it sends the entry to), and encoded as one byte string, not byte by byte: its
    /// encoding is the same as a `Vec<u8>`'s, so logs written before read the same.
    pub changes: bytes::Bytes,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A proposal as builds before this one declared it: the changes as a `Vec<u8>`.
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct EarlierProposal {
        changes: Vec<u8>,
        base: Option<openraft::LogId<NodeId>>,
        checkpoint: bool,
    }

    #[test]
    fn a_proposal_is_encoded_as_earlier_builds_encoded_it() {
        let changes: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
        let base = Some(openraft::LogId::new(
            openraft::CommittedLeaderId::new(3, 2),
            41,
        ));
        let now = Proposal {
            changes: changes.clone().into(),
            base,
            checkpoint: true,
        };
        let earlier = EarlierProposal {
            changes,
            base,
            checkpoint: true,
        };
        let config = bincode::config::standard();
        let encoded = bincode::serde::encode_to_vec(&now, config).expect("encode");
        let encoded_before = bincode::serde::encode_to_vec(&earlier, config).expect("encode");
        assert_eq!(encoded, encoded_before, "the log's and the wire's bytes");
        let (decoded, _): (Proposal, usize) =
            bincode::serde::decode_from_slice(&encoded_before, config).expect("decode");
        assert_eq!(decoded, now);
        let (decoded_before, _): (EarlierProposal, usize) =
            bincode::serde::decode_from_slice(&encoded, config).expect("decode");
        assert_eq!(decoded_before, earlier);
    }
}
