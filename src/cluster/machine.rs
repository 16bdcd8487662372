//! The state machine: the store. A committed entry is applied by
//! [`Store::apply_entry`](crate::store::Store::apply_entry), together with what the cluster
//! keeps of it (the last applied log id, the last commit applied, the membership), so that the
//! two can never disagree after a crash.
use std::io::Cursor;

use openraft::storage::RaftStateMachine;
use openraft::{
    BasicNode, EntryPayload, LogId, RaftSnapshotBuilder, Snapshot, SnapshotMeta, StorageError,
    StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};

use super::types::{NodeId, TypeConfig};
use crate::store::Store;

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

/// The store as openraft's state machine.
pub(crate) struct Machine {
    store: Store,
    state: AppliedState,
    /// The last applied log index, for the node's status and for readers waiting on it.
    applied: tokio::sync::watch::Sender<u64>,
}

impl Machine {
    /// The state machine over `store`, as its last applied entry left it.
    ///
    /// Fails when that state cannot be read.
    pub(crate) fn open(
        store: Store,
        applied: tokio::sync::watch::Sender<u64>,
    ) -> crate::Result<Self> {
        let state = match store.applied_state()? {
            Some(bytes) => AppliedState::decode(&bytes)?,
            None => AppliedState::default(),
        };
        applied.send_replace(state.last.map_or(0, |id| id.index));
        Ok(Self {
            store,
            state,
            applied,
        })
    }
}

impl RaftStateMachine<TypeConfig> for Machine {
    type SnapshotBuilder = NoSnapshots;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>>
    {
        Ok((self.state.last, self.state.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<bool>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = openraft::Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        let store = self.store.clone();
        let mut state = self.state.clone();
        let applied = tokio::task::spawn_blocking(move || {
            let mut answers = Vec::with_capacity(entries.len());
            for entry in entries {
                let log_id = entry.log_id;
                state.last = Some(log_id);
                let applied = match entry.payload {
                    EntryPayload::Blank => Applying::Nothing,
                    EntryPayload::Membership(membership) => {
                        state.membership = StoredMembership::new(Some(log_id), membership);
                        Applying::Nothing
                    }
                    // Changes made on another base than the last commit applied do not follow
                    // on from it: skipped, on every node alike.
                    EntryPayload::Normal(proposal) if proposal.base != state.last_commit => {
                        tracing::debug!(%log_id, "skipped a commit proposed on an older state");
                        Applying::Skipped
                    }
                    EntryPayload::Normal(proposal) => {
                        state.last_commit = Some(log_id);
                        Applying::Commit(proposal)
                    }
                };
                let encoded = state.encode().map_err(|err| (log_id, err))?;
                let result = match &applied {
                    Applying::Commit(proposal) => store.apply_entry(
                        Some(&proposal.changes),
                        proposal.checkpoint,
                        &encoded,
                    ),
                    Applying::Nothing | Applying::Skipped => {
                        store.apply_entry(None, false, &encoded)
                    }
                };
                if let Err(err) = result {
                    // The node cannot go on: its database no longer follows the log.
                    tracing::error!(%log_id, error = %err, "could not apply a committed entry; this node stops");
                    return Err((log_id, err));
                }
                answers.push(matches!(applied, Applying::Commit(_)));
            }
            Ok((state, answers))
        })
        .await
        .map_err(|err| StorageError::from(StorageIOError::write_state_machine(&err)))?;
        let (state, answers) = applied.map_err(|(log_id, err)| apply_error(log_id, err))?;
        self.applied
            .send_replace(state.last.map_or(0, |id| id.index));
        self.state = state;
        Ok(answers)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        NoSnapshots
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        _meta: &SnapshotMeta<NodeId, BasicNode>,
        _snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        Err(no_snapshots())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        Ok(None)
    }
}

/// What applying one entry does to the store.
enum Applying {
    /// Records it as applied only (a blank or membership entry).
    Nothing,
    /// Records it as applied, and its commit as not applied.
    Skipped,
    /// Applies its commit.
    Commit(super::Proposal),
}

/// The log is kept whole (no snapshot is ever built, so none is purged), and a node that
/// lost its disk catches up from it.
pub(crate) struct NoSnapshots;

impl RaftSnapshotBuilder<TypeConfig> for NoSnapshots {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        Err(no_snapshots())
    }
}

fn no_snapshots() -> StorageError<NodeId> {
    StorageError::from(StorageIOError::write_snapshot(
        None,
        &std::io::Error::other("this node keeps the whole log and builds no snapshots"),
    ))
}

fn apply_error(log_id: LogId<NodeId>, err: crate::Error) -> StorageError<NodeId> {
    StorageError::from(StorageIOError::apply(log_id, &err))
}
