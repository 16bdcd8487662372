//! The store as one node of a cluster. The writer decides each commit as it always does, but
//! instead of logging its changes locally and committing them, it proposes them to the
//! cluster's log ([`Replication`]) and drops its transaction; every committed entry, this
//! node's own included, is applied here by [`Store::apply_entry`], in log order. So every
//! node's database changes only by committed entries, and all of them make the same changes.
//!
//! The cluster's log is then the write-ahead log: entries are applied without a sync, and a
//! checkpoint entry (one the writer folded every unfolded chunk in) makes the file durable.
//! The `cluster` table holds the state the last applied entry left (its log id, the
//! membership), written in the same transaction as the entry's changes; after a crash redb is
//! back at its last durable commit and the entries after it are applied again.
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use redb::{Durability, ReadableTable, TableDefinition, WriteTransaction};

use super::Store;
use super::kept_unfolded;
use super::schema::optional_table;
use super::wal;
use crate::error::{Error, Result};

/// The cluster's state as the last applied entry left it, under [`APPLIED_KEY`]: opaque to
/// the store (the cluster module encodes it).
pub(crate) const CLUSTER: TableDefinition<&str, &[u8]> = TableDefinition::new("cluster");
pub(crate) const APPLIED_KEY: &str = "applied";

/// Where the writer's commits go on a node of a cluster.
pub trait Replication: Send + Sync + 'static {
    /// Proposes `changes` (one commit's, encoded as the write-ahead log encodes it) as a log
    /// entry, a checkpoint with `checkpoint`; returns once this node has applied it. `seen` is
    /// what the cluster kept of the last entry applied when the writer's transaction began
    /// (see [`Store::apply_entry`]): the changes follow on from that state. Called from the
    /// writer's thread, which it blocks.
    ///
    /// Fails with `NoQuorum` when this node is not the leader, a majority does not answer, or
    /// the entry was committed but not applied (another commit was applied since `seen`);
    /// an entry that was not committed in time may still be, and is then applied like any
    /// other.
    fn propose(&self, changes: Vec<u8>, checkpoint: bool, seen: Option<Vec<u8>>) -> Result<()>;

    /// Whether this node leads the cluster now (its commits may succeed).
    fn leads(&self) -> bool;
}

/// The writer's side of a replicated store.
#[derive(Default)]
pub(crate) struct Replicated {
    through: OnceLock<Arc<dyn Replication>>,
    /// Counts the commits that failed (see [`Store::failed_commits`]).
    pub(crate) failed: tokio::sync::watch::Sender<u64>,
    /// Bytes of changes proposed since the last checkpoint entry.
    since_checkpoint: AtomicU64,
}

impl Replicated {
    /// Proposes the changes of `txn`, which it drops (see [`Replication::propose`]).
    pub(crate) fn propose(
        &self,
        txn: WriteTransaction,
        changes: Vec<u8>,
        checkpoint: bool,
    ) -> Result<()> {
        let seen = applied_in(&txn)?;
        txn.abort().map_err(Error::storage)?;
        let Some(through) = self.through.get() else {
            // The cluster has not started yet.
            return Err(Error::NoQuorum {
                leader: None,
                leader_address: None,
            });
        };
        let bytes = changes.len() as u64;
        through.propose(changes, checkpoint, seen)?;
        if checkpoint {
            self.since_checkpoint.store(0, Ordering::Relaxed);
        } else {
            self.since_checkpoint.fetch_add(bytes, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Whether a commit of `changes` more bytes is to be a checkpoint entry.
    pub(crate) fn checkpoint_due(&self, changes: u64, checkpoint_bytes: u64) -> bool {
        self.since_checkpoint.load(Ordering::Relaxed) + changes >= checkpoint_bytes
    }

    /// Whether anything was proposed since the last checkpoint entry.
    pub(crate) fn has_log(&self) -> bool {
        self.since_checkpoint.load(Ordering::Relaxed) > 0
    }
}

impl Store {
    /// On a node of a cluster: a receiver that wakes after each commit that failed, once the
    /// recordings it touched have let go of their producers. Their rows stay `recording`
    /// (see `publish`); a node still leading then adopts them again, or nobody would end them.
    /// `None` for a single node.
    pub fn failed_commits(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        let replicated = self.inner.db.replicated.as_ref()?;
        Some(replicated.failed.subscribe())
    }

    /// Sends the writer's commits to `replication` from now on. Only for a store opened with
    /// `StoreOptions::replicated`; until this is called its commits fail with `NoQuorum`.
    pub fn replicate_through(&self, replication: Arc<dyn Replication>) {
        if let Some(replicated) = &self.inner.db.replicated {
            let _ = replicated.through.set(replication);
        }
    }

    /// Whether this store's commits may succeed: always for a single node; on a node of a
    /// cluster, while it leads. Background work (the sweeper) runs only then.
    pub fn leads(&self) -> bool {
        match &self.inner.db.replicated {
            None => true,
            Some(replicated) => replicated
                .through
                .get()
                .is_some_and(|through| through.leads()),
        }
    }

    /// Whether this store is a node of a cluster.
    pub fn is_replicated(&self) -> bool {
        self.inner.db.replicated.is_some()
    }

    /// Changes after every entry applied here (see [`apply_entry`](Self::apply_entry)).
    pub fn applied_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.applied.subscribe()
    }

    /// Wakes every waiter on [`applied_changes`](Self::applied_changes) once, with nothing
    /// applied: they look again, and wait again.
    pub fn nudge_applied_waiters(&self) {
        self.inner.applied.send_modify(|_| {});
    }

    /// Applies one committed log entry: its `changes`, if it carries a commit, and `state`,
    /// what the cluster keeps of it, in one transaction; made durable with `checkpoint`.
    /// Blocking: call it from `spawn_blocking`.
    ///
    /// Fails when the changes do not decode or follow on from what is applied, or redb fails:
    /// the node cannot go on then.
    pub fn apply_entry(
        &self,
        changes: Option<&[u8]>,
        checkpoint: bool,
        state: &[u8],
    ) -> Result<()> {
        // The write transaction before the index: the writer holds its own transaction while
        // it looks at the index, so the other order could wait on it for ever.
        let mut txn = self.inner.db.begin_write()?;
        // Readers take a view of the unfolded chunks before their read transaction; holding the
        // index until the commit keeps every view either before this entry or after it.
        let applied = self
            .inner
            .journal
            .apply_with(|unfolded: &mut HashMap<_, _>| {
                if let Some(changes) = changes {
                    wal::apply_changes(&txn, changes, unfolded)?;
                }
                {
                    let mut table = txn.open_table(CLUSTER).map_err(Error::storage)?;
                    table.insert(APPLIED_KEY, state).map_err(Error::storage)?;
                }
                if checkpoint {
                    kept_unfolded::keep(&txn, unfolded)?;
                    commit_durably(txn)
                } else {
                    txn.set_durability(Durability::None)
                        .map_err(Error::storage)?;
                    txn.commit().map_err(Error::storage)
                }
            });
        if applied.is_ok() {
            self.inner.applied.send_modify(|count| *count += 1);
        }
        applied
    }

    /// Keeps the unfolded chunks in the file, in a durable commit: the next start finds them
    /// there (see `kept_unfolded`). For a stop, once no entry is applied any more. Blocking.
    ///
    /// Fails with a storage error.
    pub(crate) fn keep_unfolded(&self) -> Result<()> {
        let txn = self.inner.db.begin_write()?;
        self.inner.journal.apply_with(|unfolded| {
            kept_unfolded::keep(&txn, unfolded)?;
            commit_durably(txn)
        })
    }

    /// What the cluster kept of the last entry applied here (see
    /// [`apply_entry`](Self::apply_entry)), if any was.
    ///
    /// Fails with a storage error.
    pub fn applied_state(&self) -> Result<Option<Vec<u8>>> {
        self.inner.db.read(|txn| {
            let Some(table) = optional_table(txn, CLUSTER)? else {
                return Ok(None);
            };
            let state = table.get(APPLIED_KEY).map_err(Error::storage)?;
            Ok(state.map(|state| state.value().to_vec()))
        })
    }
}

/// Commits `txn` durably, with quick repair (reopening the file after a crash is then quick).
pub(super) fn commit_durably(mut txn: WriteTransaction) -> Result<()> {
    txn.set_quick_repair(true);
    txn.set_durability(Durability::Immediate)
        .map_err(Error::storage)?;
    txn.commit().map_err(Error::storage)
}

/// What the cluster kept of the last entry applied, as `txn` sees it.
fn applied_in(txn: &WriteTransaction) -> Result<Option<Vec<u8>>> {
    let table = match txn.open_table(CLUSTER) {
        Ok(table) => table,
        Err(err) => return Err(Error::storage(err)),
    };
    let state = table.get(APPLIED_KEY).map_err(Error::storage)?;
    Ok(state.map(|state| state.value().to_vec()))
}
