//! The Raft log on disk (openraft's storage v2): entry frames in one append-only file indexed
//! in memory by log index, the vote and the last purged log id beside it. Appends are made
//! durable by the writer thread (`log_writer`) before openraft hears they are persisted.
use std::collections::{BTreeMap, VecDeque};
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader, StorageError, StorageIOError, Vote};
use tokio::sync::oneshot;

use super::log_file::{self, Entry, LogId};
use super::log_writer::{Command, Flushed, Writer};
use super::types::{NodeId, TypeConfig};

/// The entries file's name in the log directory.
const ENTRIES: &str = "entries.log";
/// The vote's file.
const VOTE: &str = "vote";
/// The last purged log id's file.
const PURGED: &str = "purged";
/// How many bytes of the newest entries stay in memory for the leader's replication.
#[cfg(not(test))]
const CACHE_BYTES: u64 = 16 << 20;
/// A purged prefix at least this long, and at least half the file, is reclaimed.
#[cfg(not(test))]
const COMPACT_MIN: u64 = 8 << 20;
// Small in unit tests, so that they read evicted entries back and rewrite the file.
#[cfg(test)]
const CACHE_BYTES: u64 = 512;
#[cfg(test)]
const COMPACT_MIN: u64 = 1 << 10;

/// Where one entry's frame is.
#[derive(Clone, Copy)]
struct Slot {
    log_id: LogId,
    /// Logical offset: stays the same when the file is rewritten without its purged prefix.
    offset: u64,
    len: u32,
}

/// What the log store, its readers and the writer thread share.
pub(crate) struct State {
    /// The index of `slots[0]`.
    first: u64,
    slots: VecDeque<Slot>,
    purged: Option<LogId>,
    /// The logical offset the next frame goes to.
    end: u64,
    /// The newest entries, by index; an entry not yet written is always here.
    cache: BTreeMap<u64, (Entry, u32)>,
    cache_bytes: u64,
    /// The entries file, replaced when the purged prefix is reclaimed.
    pub(crate) file: Arc<File>,
    /// The logical offset of the file's first byte.
    pub(crate) base: u64,
    /// Every frame before this logical offset is written and synced.
    pub(crate) written: u64,
}

impl State {
    fn last_log_id(&self) -> Option<LogId> {
        self.slots.back().map(|slot| slot.log_id).or(self.purged)
    }

    /// Records that the frames before `end` are synced, and forgets cached entries beyond the
    /// cache's budget that can now be read back from the file.
    pub(crate) fn written_up_to(&mut self, end: u64) {
        self.written = self.written.max(end);
        self.evict();
    }

    fn evict(&mut self) {
        while self.cache_bytes > CACHE_BYTES {
            let Some((&index, &(_, len))) = self.cache.iter().next() else {
                break;
            };
            let synced = self
                .slot(index)
                .is_none_or(|slot| slot.offset + u64::from(slot.len) <= self.written);
            if !synced {
                break;
            }
            self.cache.remove(&index);
            self.cache_bytes -= u64::from(len);
        }
    }

    fn slot(&self, index: u64) -> Option<&Slot> {
        let at = index.checked_sub(self.first)?;
        self.slots.get(usize::try_from(at).ok()?)
    }
}

/// The durable Raft log of this node; openraft drives it.
pub struct LogStore {
    dir: PathBuf,
    state: Arc<Mutex<State>>,
    commands: Sender<Command>,
}

/// A cheap reader over the same log, for openraft's replication tasks.
#[derive(Clone)]
pub struct LogReader {
    state: Arc<Mutex<State>>,
}

impl LogStore {
    /// Opens the log in `dir`, creating it if needed, and starts its writer thread. A torn tail
    /// a crash left is cut off.
    ///
    /// Fails if the directory cannot be made or read, or a file in it is damaged (the error
    /// names the file).
    pub fn open(dir: &Path) -> io::Result<LogStore> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(ENTRIES);
        let purged_path = dir.join(PURGED);
        let purged: Option<LogId> = log_file::read_small(&purged_path)?;
        // Leftovers of a rewrite or a vote a crash interrupted; the renamed-over files hold.
        for leftover in [
            path.with_extension("compact"),
            dir.join(VOTE).with_extension("tmp"),
        ] {
            match std::fs::remove_file(&leftover) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        file.sync_all()?;
        log_file::sync_dir(&path)?;
        let mut slots: VecDeque<Slot> = VecDeque::new();
        let floor = purged.map_or(0, |p| p.index + 1);
        let end = log_file::scan(&path, |found| {
            if found.log_id.index < floor {
                return Ok(());
            }
            let expected = slots.back().map_or(floor, |s| s.log_id.index + 1);
            if !slots.is_empty() && found.log_id.index != expected
                || slots.is_empty() && purged.is_some() && found.log_id.index != floor
            {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "the Raft log {} holds entry {} where {expected} should be",
                        path.display(),
                        found.log_id.index
                    ),
                ));
            }
            slots.push_back(Slot {
                log_id: found.log_id,
                offset: found.offset,
                len: found.len,
            });
            Ok(())
        })?;
        let first = slots.front().map_or(floor, |s| s.log_id.index);
        let state = Arc::new(Mutex::new(State {
            first,
            slots,
            purged,
            end,
            cache: BTreeMap::new(),
            cache_bytes: 0,
            file: Arc::new(file),
            base: 0,
            written: end,
        }));
        let (commands, receiver) = std::sync::mpsc::channel();
        let writer = Writer {
            path,
            purged_path,
            state: state.clone(),
            failed: None,
        };
        // The thread ends when this store (the only sender) is dropped.
        std::thread::Builder::new()
            .name("raft-log".into())
            .spawn(move || writer.run(receiver))?;
        Ok(LogStore {
            dir: dir.to_path_buf(),
            state,
            commands,
        })
    }

    /// Whether the log holds nothing: no entry, none purged.
    pub fn is_empty(&self) -> bool {
        self.lock().last_log_id().is_none()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Queues `entries` for the writer thread, which calls `flushed` once they are synced (or
    /// failed). Readers see them at once.
    fn append_then(
        &self,
        entries: impl IntoIterator<Item = Entry>,
        flushed: Flushed,
    ) -> io::Result<()> {
        let mut frames = Vec::new();
        let offset = {
            let mut state = self.lock();
            let offset = state.end;
            for entry in entries {
                let len = log_file::encode(&entry, &mut frames)?;
                let index = entry.log_id.index;
                if state.slots.is_empty() {
                    state.first = index;
                }
                let slot = Slot {
                    log_id: entry.log_id,
                    offset: state.end,
                    len,
                };
                state.slots.push_back(slot);
                state.end += u64::from(len);
                state.cache_bytes += u64::from(len);
                state.cache.insert(index, (entry, len));
            }
            state.evict();
            offset
        };
        self.commands
            .send(Command::Append {
                frames,
                offset,
                callback: flushed,
            })
            .map_err(|_| io::Error::other("the Raft log's writer thread is gone"))
    }

    async fn ask(
        &self,
        command: impl FnOnce(oneshot::Sender<io::Result<()>>) -> Command,
    ) -> io::Result<()> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(command(reply))
            .map_err(|_| io::Error::other("the Raft log's writer thread is gone"))?;
        answer
            .await
            .map_err(|_| io::Error::other("the Raft log's writer thread is gone"))?
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    // A panic while holding this lock is a bug that already stopped the log.
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reads the entries of `range`: the cached ones from memory, the others from the file.
async fn read_range<RB: RangeBounds<u64>>(
    state: &Arc<Mutex<State>>,
    range: RB,
) -> Result<Vec<Entry>, StorageError<NodeId>> {
    let (cached, wanted, file, base) = {
        let state = lock(state);
        let start = match range.start_bound() {
            Bound::Included(&i) => i,
            Bound::Excluded(&i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        }
        .max(state.first);
        let stop = match range.end_bound() {
            Bound::Included(&i) => i.saturating_add(1),
            Bound::Excluded(&i) => i,
            Bound::Unbounded => u64::MAX,
        }
        .min(state.first + state.slots.len() as u64);
        let mut cached = Vec::new();
        let mut wanted = Vec::new();
        for index in start..stop {
            match state.cache.get(&index) {
                Some((entry, _)) => cached.push(entry.clone()),
                None => {
                    // `index` lies in [first, first + slots.len()).
                    if let Some(slot) = state.slot(index) {
                        wanted.push(*slot);
                    }
                }
            }
        }
        (cached, wanted, state.file.clone(), state.base)
    };
    if wanted.is_empty() {
        return Ok(cached);
    }
    // Uncached entries are older than every cached one: they come first.
    let read = tokio::task::spawn_blocking(move || {
        wanted
            .iter()
            .map(|slot| log_file::read_frame(&file, slot.offset - base, slot.len))
            .collect::<io::Result<Vec<Entry>>>()
    })
    .await
    .map_err(|e| StorageIOError::read_logs(&io::Error::other(e)))?
    .map_err(|e| StorageIOError::read_logs(&e))?;
    let mut entries = read;
    entries.extend(cached);
    Ok(entries)
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError<NodeId>> {
        read_range(&self.state, range).await
    }

    /// What one AppendEntries carries: the entries from `start`, up to [`MAX_PAYLOAD_BYTES`]
    /// of them (always at least one).
    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, StorageError<NodeId>> {
        let end = payload_end(&lock(&self.state), start, end);
        read_range(&self.state, start..end).await
    }
}

/// Most bytes of entries one AppendEntries carries. openraft gives each one heartbeat
/// interval to be sent, decoded and fsynced by the follower, and sends it again from the
/// start if it takes longer: a follower far behind (a wiped one) must be sent its log in
/// pieces that fit, or it never catches up.
const MAX_PAYLOAD_BYTES: u64 = 1024 * 1024;

/// Where a payload from `start` ends: before `end`, after at most [`MAX_PAYLOAD_BYTES`] of
/// entries, and after at least one.
fn payload_end(state: &State, start: u64, end: u64) -> u64 {
    let mut bytes = 0;
    let mut index = start;
    while index < end {
        let Some(slot) = state.slot(index) else {
            break;
        };
        bytes += u64::from(slot.len);
        if bytes > MAX_PAYLOAD_BYTES && index > start {
            break;
        }
        index += 1;
    }
    index.max(start.saturating_add(1)).min(end)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError<NodeId>> {
        read_range(&self.state, range).await
    }
}

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
        tokio::task::spawn_blocking(move || log_file::write_atomic(&path, &vote))
            .await
            .map_err(|e| StorageIOError::write_vote(&io::Error::other(e)))?
            .map_err(|e| {
                tracing::error!(error = %e, "saving the Raft vote failed");
                StorageIOError::write_vote(&e).into()
            })
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        log_file::read_small(&self.dir.join(VOTE)).map_err(|e| StorageIOError::read_vote(&e).into())
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

#[cfg(test)]
#[path = "log_tests.rs"]
mod tests;
