//! openraft's log storage over [`LogStore`]: the log's state, its reader, the vote (a small
//! file replaced atomically), appends (synced by the writer thread), truncation and purges
//! (the purged prefix reclaimed once it is long enough).
use std::io;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, StorageError, StorageIOError, Vote};

use super::files::{self, Entry, LogId};
use super::writer::Command;
use super::{COMPACT_MIN, LogReader, LogStore, VOTE};
use crate::cluster::types::{NodeId, TypeConfig};

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let state = self.lock();
        Ok(LogState {
            last_purged_log_id: state.purged,
            last_log_id: state.last_log_id(),
        })
    }

    async fn get_log_reader(&mut self) -> LogReader {
        LogReader {
            state: self.state.clone(),
        }
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        let path = self.dir.join(VOTE);
        let vote = *vote;
        let on = self.files.clone();
        tokio::task::spawn_blocking(move || files::write_atomic(&*on, &path, &vote))
            .await
            .map_err(|e| StorageIOError::write_vote(&io::Error::other(e)))?
            .map_err(|e| {
                tracing::error!(error = %e, "saving the Raft vote failed");
                StorageIOError::write_vote(&e).into()
            })
    }

    /// The vote as saved, but never committed: openraft makes a node whose committed vote
    /// names itself leader again at once, in the same term. Its log may have lost, in the
    /// crash, entries it had already sent to followers (they are sent before they are synced
    /// here); leading on in that term, it would append other entries at their indexes, two
    /// entries under one log id, which the followers take for the ones they hold. Read back
    /// uncommitted, the vote still binds this node to its candidate in that term, and the node
    /// starts as a follower: it leads again only after an election, in a later term.
    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        let vote: Option<Vote<NodeId>> = files::read_small(&*self.files, &self.dir.join(VOTE))
            .map_err(|e| StorageIOError::read_vote(&e))?;
        Ok(vote.map(|vote| Vote {
            committed: false,
            ..vote
        }))
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        self.append_then(
            entries,
            Box::new(move |result| callback.log_io_completed(result)),
        )
        .map_err(|e| StorageIOError::write_logs(&e).into())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError<NodeId>> {
        let offset = {
            let mut state = self.lock();
            let Some(keep) = log_id.index.checked_sub(state.first) else {
                return Ok(());
            };
            let keep = usize::try_from(keep).unwrap_or(usize::MAX);
            let Some(cut) = state.slots.get(keep).map(|slot| slot.offset) else {
                return Ok(());
            };
            state.slots.truncate(keep);
            let dropped = state.cache.split_off(&log_id.index);
            state.cache_bytes -= dropped
                .values()
                .map(|(_, len)| u64::from(*len))
                .sum::<u64>();
            state.end = cut;
            // Lowered now, not when the writer gets to the cut: the entries appended next go
            // where the cut ones were, and must stay in the cache until they are written, or a
            // read would find the cut ones' frames in the file instead.
            state.written = state.written.min(cut);
            cut
        };
        self.ask(|reply| Command::Truncate { offset, reply })
            .await
            .map_err(|e| StorageIOError::write_logs(&e).into())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError<NodeId>> {
        let keep_from = {
            let state = self.lock();
            let live = state
                .slots
                .iter()
                .find(|slot| slot.log_id.index > log_id.index)
                .map_or(state.end, |slot| slot.offset);
            let prefix = live - state.base;
            let size = state.end - state.base;
            let everything = live == state.end && prefix > 0;
            (everything || prefix >= COMPACT_MIN && prefix * 2 >= size).then_some(live)
        };
        self.ask(|reply| Command::Purge {
            purged: log_id,
            keep_from,
            reply,
        })
        .await
        .map_err(|e| StorageError::from(StorageIOError::write_logs(&e)))?;
        let mut state = self.lock();
        while state
            .slots
            .front()
            .is_some_and(|s| s.log_id.index <= log_id.index)
        {
            state.slots.pop_front();
            state.first += 1;
        }
        if state.slots.is_empty() {
            state.first = log_id.index + 1;
        }
        let kept = state.cache.split_off(&(log_id.index + 1));
        let dropped = std::mem::replace(&mut state.cache, kept);
        state.cache_bytes -= dropped
            .values()
            .map(|(_, len)| u64::from(*len))
            .sum::<u64>();
        state.purged = Some(state.purged.map_or(log_id, |p| p.max(log_id)));
        Ok(())
    }
}
