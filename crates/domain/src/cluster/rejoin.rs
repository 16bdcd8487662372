//! A node that starts with an empty log (a wiped disk, or a new machine under a dead node's id)
//! has no say in elections until it holds again everything the cluster had committed.
//!
//! Raft counts on every vote coming from a node that kept its log and its vote. A node that lost
//! them could otherwise help elect a leader that lacks entries which were acknowledged when this
//! node's lost copy made their majority, and the acknowledged bytes would be gone. So, from the
//! moment it finds its log empty until it has caught up, the node neither grants votes nor stands
//! for election. A marker file keeps that state across a restart in between. A brand-new
//! cluster, where every log is empty, clears it when it forms (`Cluster::form`).
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use openraft::RaftMetrics;
use tapedeck_store::{Files, OpenMode};

use super::types::NodeId;

type LogId = openraft::LogId<NodeId>;

/// The marker's file, in the log's directory.
const MARKER: &str = "rejoining";

/// Whether this node is still catching up after finding its log empty.
#[derive(Debug)]
pub(crate) struct Rejoin {
    files: Arc<dyn Files>,
    marker: PathBuf,
    pending: AtomicBool,
    /// How far this node must apply before it votes again.
    target: Mutex<Target>,
}

/// What a rejoining node has learnt of how far the cluster's log goes.
#[derive(Debug, Default)]
struct Target {
    /// The leader's commit index in the first append heard since this process started.
    heard: Option<Option<LogId>>,
    /// The last index of the leader's log, as the leader answered when asked.
    leader_log: Option<u64>,
}

impl Rejoin {
    /// Opens the state kept in `dir`; a log that is `empty` is marked as rejoining (durably,
    /// before anything is written to it).
    ///
    /// Fails when the marker cannot be read or written.
    pub(crate) fn open(files: Arc<dyn Files>, dir: &Path, empty: bool) -> io::Result<Rejoin> {
        let marker = dir.join(MARKER);
        let exists = match files.len(&marker) {
            Ok(_) => true,
            Err(err) if err.kind() == io::ErrorKind::NotFound => false,
            Err(err) => return Err(err),
        };
        if empty && !exists {
            files.open(&marker, OpenMode::Create)?.sync_all()?;
            super::log::files::sync_dir(&*files, &marker)?;
        }
        Ok(Rejoin {
            pending: AtomicBool::new(empty || exists),
            files,
            marker,
            target: Mutex::default(),
        })
    }

    /// Whether this node must not vote or stand for election yet.
    pub(crate) fn pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// Notes a leader's commit index from an append, if it is the first heard.
    pub(crate) fn heard(&self, leader_commit: Option<LogId>) {
        if self.pending() {
            self.lock().heard.get_or_insert(leader_commit);
        }
    }

    /// Whether the leader's last log index is still to be asked for.
    pub(crate) fn must_ask(&self) -> bool {
        self.lock().leader_log.is_none()
    }

    /// Notes the leader's last log index, as it answered.
    pub(crate) fn leader_log_ends_at(&self, index: u64) {
        self.lock().leader_log.get_or_insert(index);
    }

    /// Whether this node holds everything the cluster had committed: it has applied the first
    /// commit index it heard of and the leader's whole log as the leader first told it (every
    /// committed entry is in it, even when the leader itself has not applied them all yet,
    /// after a restart), and an entry of the current leader's term.
    pub(crate) fn caught_up(&self, metrics: &RaftMetrics<NodeId, openraft::BasicNode>) -> bool {
        let target = self.lock();
        let (Some(heard), Some(leader_log)) = (target.heard, target.leader_log) else {
            return false;
        };
        let applied = metrics.last_applied;
        applied >= heard
            && applied.is_some_and(|applied| {
                applied.index >= leader_log && applied.leader_id.get_term() == metrics.current_term
            })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Target> {
        self.target.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ends the rejoin: this node votes again from now on, also after a restart.
    ///
    /// Fails when the marker cannot be removed; the node then stays without a vote.
    pub(crate) fn finish(&self) -> io::Result<()> {
        match self.files.remove(&self.marker) {
            Err(err) if err.kind() != io::ErrorKind::NotFound => return Err(err),
            _ => {}
        }
        super::log::files::sync_dir(&*self.files, &self.marker)?;
        self.pending.store(false, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    fn log_id(term: u64, index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    fn metrics(term: u64, applied: Option<LogId>) -> RaftMetrics<NodeId, openraft::BasicNode> {
        let mut metrics = RaftMetrics::new_initial(2);
        metrics.current_term = term;
        metrics.last_applied = applied;
        metrics
    }

    #[test]
    fn an_empty_log_is_marked_and_the_mark_survives_a_restart_until_finished() {
        let dir = tempfile::tempdir().unwrap();
        let rejoin = Rejoin::open(Arc::new(tapedeck_store::RealFiles), dir.path(), true).unwrap();
        assert!(rejoin.pending());
        // A restart with a log partly caught up still has no vote.
        assert!(
            Rejoin::open(Arc::new(tapedeck_store::RealFiles), dir.path(), false)
                .unwrap()
                .pending()
        );
        rejoin.finish().unwrap();
        assert!(!rejoin.pending());
        assert!(
            !Rejoin::open(Arc::new(tapedeck_store::RealFiles), dir.path(), false)
                .unwrap()
                .pending()
        );
    }

    #[test]
    fn a_log_with_entries_and_no_mark_votes_at_once() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            !Rejoin::open(Arc::new(tapedeck_store::RealFiles), dir.path(), false)
                .unwrap()
                .pending()
        );
    }

    #[test]
    fn caught_up_needs_the_first_commit_heard_and_an_entry_of_the_current_term() {
        let dir = tempfile::tempdir().unwrap();
        let rejoin = Rejoin::open(Arc::new(tapedeck_store::RealFiles), dir.path(), true).unwrap();
        // Nothing heard from a leader yet.
        assert!(!rejoin.caught_up(&metrics(3, Some(log_id(3, 50)))));
        rejoin.heard(Some(log_id(3, 100)));
        // A later, lower commit index does not replace the first.
        rejoin.heard(Some(log_id(3, 10)));
        // Not asked the leader yet.
        assert!(!rejoin.caught_up(&metrics(3, Some(log_id(3, 100)))));
        rejoin.leader_log_ends_at(100);
        assert!(!rejoin.caught_up(&metrics(3, Some(log_id(3, 99)))));
        assert!(rejoin.caught_up(&metrics(3, Some(log_id(3, 100)))));
        // Past the index, but nothing of the leader's term applied yet.
        assert!(!rejoin.caught_up(&metrics(4, Some(log_id(3, 120)))));
        assert!(rejoin.caught_up(&metrics(4, Some(log_id(4, 121)))));
    }

    #[test]
    fn caught_up_needs_the_leaders_whole_log_even_past_its_commit_index() {
        let dir = tempfile::tempdir().unwrap();
        let rejoin = Rejoin::open(Arc::new(tapedeck_store::RealFiles), dir.path(), true).unwrap();
        // A leader restarted into its term: its commit index is behind its log.
        rejoin.heard(Some(log_id(5, 10)));
        rejoin.leader_log_ends_at(200);
        assert!(!rejoin.caught_up(&metrics(5, Some(log_id(5, 150)))));
        assert!(rejoin.caught_up(&metrics(5, Some(log_id(5, 200)))));
    }
}
