//! This node's Raft log on disk, in `<data dir>/raft`: the entries in one file of frames
//! `[length: u32][crc32 of payload: u32][payload]` (little endian; the payload is the entry,
//! bincode), and the vote and the last purged log id each in a small file replaced
//! atomically. An append is written and `fdatasync`ed before openraft is told it is
//! persisted: an entry counts toward a majority only once it is on disk. A failed write or
//! sync is not retried: the error stops this node's Raft.
//!
//! Memory holds an index (log index → log id and place in the file), never the entries:
//! reads go to the file.
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::ops::{Bound, RangeBounds};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{LogId, LogState, RaftLogReader, StorageError, StorageIOError, Vote};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::types::{NodeId, TypeConfig};

type Entry = openraft::Entry<TypeConfig>;

/// Bytes of a frame before its payload.
const HEADER_BYTES: u64 = 8;
/// Largest entry a frame may hold; a longer length in a header is damage.
const MAX_ENTRY_BYTES: u32 = 1 << 30;

/// Where an entry is.
#[derive(Debug, Clone, Copy)]
struct Place {
    log_id: LogId<NodeId>,
    /// Offset of its frame.
    offset: u64,
    /// Length of its payload.
    len: u32,
}

struct Files {
    dir: PathBuf,
    entries: File,
    /// Where the next frame goes.
    end: u64,
    index: BTreeMap<u64, Place>,
    purged: Option<LogId<NodeId>>,
    vote: Option<Vote<NodeId>>,
}

/// The log; cheap to clone (a reader is a clone).
#[derive(Clone)]
pub(crate) struct LogStore {
    files: Arc<Mutex<Files>>,
}

impl LogStore {
    /// Opens (creating) the log in `dir`. A frame cut short or failing its check at the end of
    /// the file (a crash in the middle of a write) is cut off.
    ///
    /// Fails when the files cannot be read, or an entry before the last one is damaged.
    pub(crate) fn open(dir: &Path) -> std::io::Result<LogStore> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("entries");
        let mut entries = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)?;
        sync_dir(dir)?;
        let (index, end) = scan(&mut entries, &path)?;
        if end < entries.metadata()?.len() {
            tracing::warn!(path = %path.display(), at = end, "cut a torn entry off the end of the Raft log");
            entries.set_len(end)?;
            entries.sync_all()?;
        }
        let purged = read_small(&dir.join("purged"))?;
        let vote = read_small(&dir.join("vote"))?;
        let mut files = Files {
            dir: dir.to_path_buf(),
            entries,
            end,
            index,
            purged,
            vote,
        };
        if let Some(purged) = purged {
            files.index = files.index.split_off(&(purged.index + 1));
        }
        Ok(LogStore {
            files: Arc::new(Mutex::new(files)),
        })
    }

    /// Runs `work` on the files off the runtime's workers.
    async fn with_files<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Files) -> std::io::Result<T> + Send + 'static,
    ) -> std::io::Result<T> {
        let files = self.files.clone();
        tokio::task::spawn_blocking(move || {
            let mut files = files.lock().unwrap_or_else(|e| e.into_inner());
            work(&mut files)
        })
        .await
        .map_err(std::io::Error::other)?
    }
}

/// Reads every frame of `file`; returns the index and where the valid frames end.
fn scan(file: &mut File, path: &Path) -> std::io::Result<(BTreeMap<u64, Place>, u64)> {
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    let mut index = BTreeMap::new();
    let mut at = 0usize;
    while bytes.len() - at >= HEADER_BYTES as usize {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default());
        let crc = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap_or_default());
        let start = at + HEADER_BYTES as usize;
        let Some(payload) = bytes.get(start..start + len as usize) else {
            break;
        };
        if len > MAX_ENTRY_BYTES || crc32fast::hash(payload) != crc {
            // Damage at the end is a torn write; anywhere else the log cannot be trusted.
            if start + len as usize >= bytes.len() || len > MAX_ENTRY_BYTES {
                break;
            }
            return Err(std::io::Error::new(
                ErrorKind::InvalidData,
                format!("{}: the entry at byte {at} is damaged", path.display()),
            ));
        }
        let entry: Entry = decode(payload).map_err(|err| {
            std::io::Error::new(ErrorKind::InvalidData, format!("{}: {err}", path.display()))
        })?;
        let place = Place {
            log_id: entry.log_id,
            offset: at as u64,
            len,
        };
        // A later frame at an index replaces what followed a truncation that was not synced.
        index.split_off(&entry.log_id.index);
        index.insert(entry.log_id.index, place);
        at = start + len as usize;
    }
    Ok((index, at as u64))
}

impl Files {
    fn read(&self, place: &Place) -> std::io::Result<Entry> {
        let mut payload = vec![0; place.len as usize];
        self.entries
            .read_exact_at(&mut payload, place.offset + HEADER_BYTES)?;
        decode(&payload).map_err(|err| std::io::Error::new(ErrorKind::InvalidData, err))
    }

    fn last_log_id(&self) -> Option<LogId<NodeId>> {
        self.index
            .last_key_value()
            .map(|(_, place)| place.log_id)
            .or(self.purged)
    }

    /// Cuts the file at `offset` and syncs it.
    fn cut(&mut self, offset: u64) -> std::io::Result<()> {
        self.entries.set_len(offset)?;
        self.entries.sync_all()?;
        self.end = offset;
        Ok(())
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError<NodeId>> {
        let range = (range.start_bound().cloned(), range.end_bound().cloned());
        self.with_files(move |files| {
            let places: Vec<Place> = files
                .index
                .range::<u64, (Bound<u64>, Bound<u64>)>(range)
                .map(|(_, place)| *place)
                .collect();
            places.iter().map(|place| files.read(place)).collect()
        })
        .await
        .map_err(|err| StorageError::from(StorageIOError::read_logs(&err)))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        self.with_files(|files| {
            Ok(LogState {
                last_purged_log_id: files.purged,
                last_log_id: files.last_log_id(),
            })
        })
        .await
        .map_err(|err| StorageError::from(StorageIOError::read_logs(&err)))
    }

    async fn get_log_reader(&mut self) -> LogStore {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
        let vote = *vote;
        self.with_files(move |files| {
            write_small(&files.dir, "vote", &vote)?;
            files.vote = Some(vote);
            Ok(())
        })
        .await
        .map_err(|err| StorageError::from(StorageIOError::write_vote(&err)))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
        self.with_files(|files| Ok(files.vote))
            .await
            .map_err(|err| StorageError::from(StorageIOError::read_vote(&err)))
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let written = self
            .with_files(move |files| {
                let mut frames = Vec::new();
                let mut places = Vec::with_capacity(entries.len());
                for entry in &entries {
                    let payload = encode(entry).map_err(std::io::Error::other)?;
                    let offset = files.end + frames.len() as u64;
                    frames.extend_from_slice(&(payload.len() as u32).to_le_bytes());
                    frames.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
                    frames.extend_from_slice(&payload);
                    places.push(Place {
                        log_id: entry.log_id,
                        offset,
                        len: payload.len() as u32,
                    });
                }
                files.entries.write_all_at(&frames, files.end)?;
                files.entries.sync_data()?;
                files.end += frames.len() as u64;
                for place in places {
                    files.index.insert(place.log_id.index, place);
                }
                Ok(())
            })
            .await;
        match written {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(err) => {
                // Not retried: what a failed sync left on disk is unknown.
                tracing::error!(error = %err, "could not write the Raft log; this node stops");
                callback.log_io_completed(Err(std::io::Error::new(err.kind(), err.to_string())));
                Err(StorageError::from(StorageIOError::write_logs(&err)))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.with_files(move |files| {
            let cut = files.index.split_off(&log_id.index);
            match cut.values().next() {
                Some(first) => files.cut(first.offset),
                None => Ok(()),
            }
        })
        .await
        .map_err(|err| StorageError::from(StorageIOError::write_logs(&err)))
    }

    async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
        self.with_files(move |files| {
            write_small(&files.dir, "purged", &log_id)?;
            files.purged = Some(log_id);
            files.index = files.index.split_off(&(log_id.index + 1));
            if files.index.is_empty() {
                // Nothing left to read: the file starts again empty.
                files.cut(0)?;
            }
            Ok(())
        })
        .await
        .map_err(|err| StorageError::from(StorageIOError::write_logs(&err)))
    }
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, bincode::error::EncodeError> {
    bincode::serde::encode_to_vec(value, bincode::config::standard())
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, bincode::error::DecodeError> {
    bincode::serde::decode_from_slice(bytes, bincode::config::standard()).map(|(value, _)| value)
}

/// The value in small file `path`, if there is one.
fn read_small<T: DeserializeOwned>(path: &Path) -> std::io::Result<Option<T>> {
    match std::fs::read(path) {
        Ok(bytes) => decode(&bytes).map(Some).map_err(|err| {
            std::io::Error::new(ErrorKind::InvalidData, format!("{}: {err}", path.display()))
        }),
        Err(err) if err.kind() == ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err),
    }
}

/// Replaces small file `name` in `dir` with `value`, durably: a temporary file written and
/// synced, renamed over it, and the directory synced.
fn write_small<T: Serialize>(dir: &Path, name: &str, value: &T) -> std::io::Result<()> {
    let bytes = encode(value).map_err(std::io::Error::other)?;
    let temporary = dir.join(format!("{name}.new"));
    let mut file = File::create(&temporary)?;
    file.write_all(&bytes)?;
    file.sync_all()?;
    std::fs::rename(&temporary, dir.join(name))?;
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, EntryPayload};

    fn entry(term: u64, index: u64, bytes: &[u8]) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
            payload: EntryPayload::Normal(super::super::Proposal {
                changes: bytes.to_vec(),
                ..Default::default()
            }),
        }
    }

    fn written(store: &LogStore, entries: Vec<Entry>) {
        let mut files = store.files.lock().unwrap();
        let end = files.end;
        let mut frames = Vec::new();
        for entry in &entries {
            let payload = encode(entry).unwrap();
            let offset = end + frames.len() as u64;
            frames.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            frames.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
            frames.extend_from_slice(&payload);
            files.index.insert(
                entry.log_id.index,
                Place {
                    log_id: entry.log_id,
                    offset,
                    len: payload.len() as u32,
                },
            );
        }
        files.entries.write_all_at(&frames, end).unwrap();
        files.end += frames.len() as u64;
    }

    async fn read_all(store: &mut LogStore) -> Vec<Entry> {
        store.try_get_log_entries(0..).await.unwrap()
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn entries_survive_reopening_and_a_torn_tail_is_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let store = LogStore::open(dir.path()).unwrap();
        written(
            &store,
            vec![entry(1, 0, b"a"), entry(1, 1, b"bb"), entry(2, 2, b"ccc")],
        );
        drop(store);
        // Half a frame more: a crash in the middle of a write.
        let path = dir.path().join("entries");
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(&[9, 0, 0, 0, 1, 2]).unwrap();
        let mut store = LogStore::open(dir.path()).unwrap();
        let entries = read_all(&mut store).await;
        assert_eq!(
            entries,
            vec![entry(1, 0, b"a"), entry(1, 1, b"bb"), entry(2, 2, b"ccc")]
        );
        let state = store.get_log_state().await.unwrap();
        assert_eq!(state.last_log_id, Some(entry(2, 2, b"").log_id));
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn truncate_then_append_replaces_the_tail() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::open(dir.path()).unwrap();
        written(
            &store,
            vec![entry(1, 0, b"a"), entry(1, 1, b"b"), entry(1, 2, b"c")],
        );
        store.truncate(entry(1, 1, b"").log_id).await.unwrap();
        written(&store, vec![entry(2, 1, b"x")]);
        drop(store);
        let mut store = LogStore::open(dir.path()).unwrap();
        assert_eq!(
            read_all(&mut store).await,
            vec![entry(1, 0, b"a"), entry(2, 1, b"x")]
        );
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn the_vote_and_the_purged_id_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = LogStore::open(dir.path()).unwrap();
        written(
            &store,
            vec![entry(1, 0, b"a"), entry(1, 1, b"b"), entry(1, 2, b"c")],
        );
        let vote = Vote::new(3, 2);
        store.save_vote(&vote).await.unwrap();
        store.purge(entry(1, 1, b"").log_id).await.unwrap();
        drop(store);
        let mut store = LogStore::open(dir.path()).unwrap();
        assert_eq!(store.read_vote().await.unwrap(), Some(vote));
        assert_eq!(read_all(&mut store).await, vec![entry(1, 2, b"c")]);
        let state = store.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(entry(1, 1, b"").log_id));
    }

    #[test]
    fn damage_before_the_last_entry_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let store = LogStore::open(dir.path()).unwrap();
        written(&store, vec![entry(1, 0, b"aaaa"), entry(1, 1, b"b")]);
        drop(store);
        let path = dir.path().join("entries");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[HEADER_BYTES as usize + 1] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
        let err = LogStore::open(dir.path()).err().unwrap();
        assert!(err.to_string().contains("damaged"), "{err}");
    }
}
