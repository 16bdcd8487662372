//! The Raft log (`tapedeck::cluster::LogStore`) against openraft's own storage test suite,
//! with a state machine that keeps what it applies in memory.
use std::io::{Seek, SeekFrom, Write};
use std::sync::{Arc, Mutex};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, RaftSnapshotBuilder, SnapshotMeta, StorageError,
    StoredMembership,
};
use tapedeck::cluster::{LogStore, NodeId, TypeConfig};

/// What a node applied, shared with the test.
#[derive(Default)]
struct Applied {
    last: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, BasicNode>,
    proposals: Vec<Vec<u8>>,
    /// The last snapshot built or installed: its meta and data.
    snapshot: Option<(SnapshotMeta<NodeId, BasicNode>, Vec<u8>)>,
}

/// A state machine that keeps the applied proposals in memory.
#[derive(Clone, Default)]
struct Memory(Arc<Mutex<Applied>>);

impl Memory {
    fn snapshot(&self) -> Snapshot<TypeConfig> {
        let mut applied = self.0.lock().unwrap();
        let data = serde_json::to_vec(&applied.proposals).unwrap();
        let meta = SnapshotMeta {
            last_log_id: applied.last,
            last_membership: applied.membership.clone(),
            snapshot_id: format!("{:?}", applied.last),
        };
        applied.snapshot = Some((meta.clone(), data.clone()));
        Snapshot {
            meta,
            snapshot: file_of(&data),
        }
    }
}

/// A temporary file holding `data`, at its start.
fn file_of(data: &[u8]) -> Box<tokio::fs::File> {
    let mut file = tempfile::tempfile().unwrap();
    file.write_all(data).unwrap();
    file.seek(SeekFrom::Start(0)).unwrap();
    Box::new(tokio::fs::File::from_std(file))
}

impl RaftSnapshotBuilder<TypeConfig> for Memory {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        Ok(self.snapshot())
    }
}

impl RaftStateMachine<TypeConfig> for Memory {
    type SnapshotBuilder = Memory;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>), StorageError<NodeId>>
    {
        let applied = self.0.lock().unwrap();
        Ok((applied.last, applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<bool>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let mut applied = self.0.lock().unwrap();
        let mut answers = Vec::new();
        for entry in entries {
            applied.last = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Normal(proposal) => applied.proposals.push(proposal.changes.to_vec()),
                EntryPayload::Membership(membership) => {
                    applied.membership = StoredMembership::new(Some(entry.log_id), membership);
                }
                EntryPayload::Blank => {}
            }
            answers.push(true);
        }
        Ok(answers)
    }

    async fn get_snapshot_builder(&mut self) -> Memory {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<tokio::fs::File>, StorageError<NodeId>> {
        Ok(file_of(&[]))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        mut snapshot: Box<tokio::fs::File>,
    ) -> Result<(), StorageError<NodeId>> {
        use tokio::io::{AsyncReadExt, AsyncSeekExt};
        snapshot.seek(SeekFrom::Start(0)).await.unwrap();
        let mut data = Vec::new();
        snapshot.read_to_end(&mut data).await.unwrap();
        let mut applied = self.0.lock().unwrap();
        applied.proposals = serde_json::from_slice(&data).unwrap();
        applied.last = meta.last_log_id;
        applied.membership = meta.last_membership.clone();
        applied.snapshot = Some((meta.clone(), data));
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        let applied = self.0.lock().unwrap();
        Ok(applied.snapshot.clone().map(|(meta, data)| Snapshot {
            meta,
            snapshot: file_of(&data),
        }))
    }
}

/// Builds a fresh log in a temporary directory and an empty state machine, for openraft's
/// storage test suite.
struct Fresh;

impl StoreBuilder<TypeConfig, LogStore, Memory, tempfile::TempDir> for Fresh {
    async fn build(&self) -> Result<(tempfile::TempDir, LogStore, Memory), StorageError<NodeId>> {
        let dir = tempfile::tempdir().unwrap();
        let log = LogStore::open(&dir.path().join("raft")).unwrap();
        Ok((dir, log, Memory::default()))
    }
}

#[test]
fn the_log_passes_openraft_storage_suite() {
    Suite::test_all(Fresh).unwrap();
}
