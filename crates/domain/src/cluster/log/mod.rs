//! The Raft log on disk (openraft's storage v2): entry frames in one append-only file indexed
//! in memory by log index, the vote and the last purged log id beside it. Appends are made
//! durable by the writer thread (`writer`) before openraft hears they are persisted.
//!
//! # Layout
//! - this file: [`LogStore`] and [`LogReader`], the index in memory, opening, appending.
//! - `storage`: openraft's log storage over it (vote, append, truncate, purge).
//! - `reader`: reading entries back, from memory or the file, and what one AppendEntries
//!   carries.
//! - `files`: the on-disk formats; `writer`: the writer thread (group commit, one fdatasync
//!   per batch).
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use tapedeck_store::{FileHandle, Files, OpenMode, RealFiles};
use tokio::sync::oneshot;

use files::{Entry, LogId};
use writer::{Command, Flushed, Writer};

pub(super) mod files;
mod reader;
mod storage;
#[cfg(test)]
mod tests;
mod writer;

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
    pub(crate) file: Arc<dyn FileHandle>,
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
    files: Arc<dyn Files>,
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
        Self::open_on(Arc::new(RealFiles), dir)
    }

    /// Opens the log in `dir` on `files`, as [`open`](Self::open) does.
    ///
    /// Fails as [`open`](Self::open) does.
    pub fn open_on(files: Arc<dyn Files>, dir: &Path) -> io::Result<LogStore> {
        files.create_dir_all(dir)?;
        let path = dir.join(ENTRIES);
        let purged_path = dir.join(PURGED);
        let purged: Option<LogId> = files::read_small(&*files, &purged_path)?;
        // Leftovers of a rewrite or a vote a crash interrupted; the renamed-over files hold.
        for leftover in [
            path.with_extension("compact"),
            dir.join(VOTE).with_extension("tmp"),
        ] {
            match files.remove(&leftover) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        let file = files.open(&path, OpenMode::Create)?;
        file.sync_all()?;
        files::sync_dir(&*files, &path)?;
        let mut slots: VecDeque<Slot> = VecDeque::new();
        let floor = purged.map_or(0, |p| p.index + 1);
        let end = files::scan(&*files, &path, |found| {
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
            file: Arc::from(file),
            base: 0,
            written: end,
        }));
        let (commands, receiver) = std::sync::mpsc::channel();
        let writer = Writer {
            files: files.clone(),
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
            files,
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
                let len = files::encode(&entry, &mut frames)?;
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
