//! The state machine: the store. A committed entry is applied by
//! [`Store::apply_entry`](crate::store::Store::apply_entry), together with what the cluster
//! keeps of it (the last applied log id, the last commit applied, the membership), so that the
//! two can never disagree after a crash. Snapshots of it are files beside the log (see
//! `snapshots`).
use std::path::PathBuf;
use std::sync::Arc;

use openraft::storage::RaftStateMachine;
use openraft::{
    AnyError, BasicNode, EntryPayload, LogId, RaftSnapshotBuilder, Snapshot, SnapshotMeta,
    StorageError, StorageIOError, StoredMembership,
};

use super::applied::AppliedState;
use super::snapshots::SnapshotFiles;
use super::types::{NodeId, TypeConfig};
use crate::store::Store;

/// The store as openraft's state machine.
pub(crate) struct Machine {
    store: Store,
    state: AppliedState,
    /// The last applied log index, for the node's status and for readers waiting on it.
    applied: tokio::sync::watch::Sender<u64>,
    snapshots: Arc<SnapshotFiles>,
    /// The partial file of the snapshot being received, if one is.
    receiving: Option<PathBuf>,
    node_id: NodeId,
}

impl Machine {
    /// The state machine over `store`, as its last applied entry left it.
    ///
    /// Fails when that state cannot be read.
    pub(crate) fn open(
        store: Store,
        applied: tokio::sync::watch::Sender<u64>,
        snapshots: SnapshotFiles,
        node_id: NodeId,
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
            snapshots: Arc::new(snapshots),
            receiving: None,
            node_id,
        })
    }
}

impl RaftStateMachine<TypeConfig> for Machine {
    type SnapshotBuilder = Builder;

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
        let node = self.node_id;
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
                if tracing::enabled!(tracing::Level::TRACE) {
                    // A checksum of the changes, to compare what each node applied: only when
                    // it is logged, as it reads every byte of the entry.
                    let digest = match &applied {
                        Applying::Commit(proposal) => crc32fast::hash(&proposal.changes),
                        _ => 0,
                    };
                    tracing::trace!(node, %log_id, commit = matches!(applied, Applying::Commit(_)), digest, "applying an entry");
                }
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
        Builder {
            store: self.store.clone(),
            snapshots: self.snapshots.clone(),
            node_id: self.node_id,
        }
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<tokio::fs::File>, StorageError<NodeId>> {
        let path = self.snapshots.partial("received");
        let file = tokio::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .await
            .map_err(|err| StorageError::from(StorageIOError::write_snapshot(None, &err)))?;
        self.receiving = Some(path);
        Ok(Box::new(file))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<tokio::fs::File>,
    ) -> Result<(), StorageError<NodeId>> {
        let failed = |err: AnyError| {
            StorageError::from(StorageIOError::read_snapshot(Some(meta.signature()), err))
        };
        let Some(path) = self.receiving.take() else {
            return Err(failed(AnyError::error("no snapshot was being received")));
        };
        let file = snapshot.into_std().await;
        let (store, snapshots, owned_meta) =
            (self.store.clone(), self.snapshots.clone(), meta.clone());
        let installed = tokio::task::spawn_blocking(move || {
            snapshots.install(&store, &path, file, &owned_meta)
        })
        .await
        .map_err(|err| failed(AnyError::new(&err)))?;
        let state = installed.map_err(|err| {
            tracing::error!(snapshot = %meta.snapshot_id, error = %err, "could not install a snapshot");
            failed(AnyError::new(&err))
        })?;
        tracing::info!(snapshot = %meta.snapshot_id, last = ?state.last, "installed a snapshot of the leader's state");
        self.applied
            .send_replace(state.last.map_or(0, |id| id.index));
        self.state = state;
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        let snapshots = self.snapshots.clone();
        let current = tokio::task::spawn_blocking(move || snapshots.current())
            .await
            .map_err(|err| StorageError::from(StorageIOError::read_snapshot(None, &err)))?
            .map_err(|err| StorageError::from(StorageIOError::read_snapshot(None, &err)))?;
        Ok(current.map(|(meta, file)| Snapshot {
            meta,
            snapshot: Box::new(tokio::fs::File::from_std(file)),
        }))
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

/// Builds a snapshot of the store's state as it stands (see `snapshots`); openraft runs it
/// beside the applying of entries.
pub(crate) struct Builder {
    store: Store,
    snapshots: Arc<SnapshotFiles>,
    node_id: NodeId,
}

impl RaftSnapshotBuilder<TypeConfig> for Builder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let (store, snapshots, node_id) =
            (self.store.clone(), self.snapshots.clone(), self.node_id);
        let started = std::time::Instant::now();
        let built = tokio::task::spawn_blocking(move || snapshots.build(&store, node_id))
            .await
            .map_err(|err| StorageError::from(StorageIOError::write_snapshot(None, &err)))?;
        let (meta, file) = built.map_err(|err| {
            tracing::error!(error = %err, "could not build a snapshot");
            StorageError::from(StorageIOError::write_snapshot(None, &err))
        })?;
        tracing::info!(
            snapshot = %meta.snapshot_id,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "built a snapshot"
        );
        Ok(Snapshot {
            meta,
            snapshot: Box::new(tokio::fs::File::from_std(file)),
        })
    }
}

fn apply_error(log_id: LogId<NodeId>, err: crate::Error) -> StorageError<NodeId> {
    StorageError::from(StorageIOError::apply(log_id, &err))
}
