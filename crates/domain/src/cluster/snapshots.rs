//! Snapshots of the state machine, as files beside the log. The current one is
//! `raft/snapshot`: the store's snapshot stream (see `store::snapshot`), then openraft's
//! metadata of it (bincode), then that metadata's length (u32, little-endian). A snapshot is
//! built or received under a `.partial` name, synced, and renamed into place, so the current
//! file is always whole; leftovers of an interrupted one are removed at start.
//!
//! A snapshot's state was made durable in the store as it was built (or installed), so the log
//! up to it may be purged: a crash takes redb back no further than that.
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use openraft::{BasicNode, SnapshotMeta};

use super::applied::AppliedState;
use super::types::NodeId;
use crate::store::Store;

/// The current snapshot's file name in the log's directory.
const CURRENT: &str = "snapshot";
const PARTIAL: &str = ".partial";

pub(crate) type Meta = SnapshotMeta<NodeId, BasicNode>;

/// This node's snapshot files.
#[derive(Debug)]
pub(crate) struct SnapshotFiles {
    dir: PathBuf,
    /// Held while the current file is replaced, so that an older snapshot never replaces a
    /// newer one (one built while another was installed).
    replacing: Mutex<()>,
    /// Names partial files apart.
    next: AtomicU64,
}

impl SnapshotFiles {
    /// The snapshot files in `dir`, without the leftovers of one interrupted.
    ///
    /// Fails when `dir` cannot be listed or a leftover removed.
    pub(crate) fn open(dir: &Path) -> io::Result<Self> {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.to_string_lossy().ends_with(PARTIAL) {
                std::fs::remove_file(&path)?;
            }
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            replacing: Mutex::new(()),
            next: AtomicU64::new(0),
        })
    }

    fn current_path(&self) -> PathBuf {
        self.dir.join(CURRENT)
    }

    /// A new partial file's path, for a snapshot `what` ("built", "received").
    pub(crate) fn partial(&self, what: &str) -> PathBuf {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.dir.join(format!("{CURRENT}.{n}.{what}{PARTIAL}"))
    }

    /// The current snapshot's metadata, and its file opened at the start, if there is one.
    ///
    /// Fails when it cannot be read.
    pub(crate) fn current(&self) -> io::Result<Option<(Meta, File)>> {
        let mut file = match File::open(self.current_path()) {
            Ok(file) => file,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(err),
        };
        let meta = read_meta(&mut file)?;
        file.seek(SeekFrom::Start(0))?;
        Ok(Some((meta, file)))
    }

    /// Builds a snapshot of `store`'s state (blocking) and makes it the current one; returns
    /// its metadata and its file opened at the start.
    ///
    /// Fails when the store cannot write it, or the file cannot be written.
    pub(crate) fn build(&self, store: &Store, node_id: NodeId) -> crate::Result<(Meta, File)> {
        let path = self.partial("built");
        let outcome = (|| {
            let mut out = BufWriter::new(File::create(&path).map_err(written)?);
            let state = match store.write_snapshot(&mut out)? {
                Some(bytes) => AppliedState::decode(&bytes)?,
                None => AppliedState::default(),
            };
            let meta = Meta {
                snapshot_id: snapshot_id(&state, node_id),
                last_log_id: state.last,
                last_membership: state.membership,
            };
            write_meta(&mut out, &meta).map_err(written)?;
            let file = out.into_inner().map_err(|err| written(err.into_error()))?;
            file.sync_all().map_err(written)?;
            Ok(meta)
        })();
        let meta = match outcome {
            Ok(meta) => meta,
            Err(err) => {
                let _ = std::fs::remove_file(&path);
                return Err(err);
            }
        };
        let file = File::open(&path).map_err(written)?;
        self.replace(&path, &meta).map_err(written)?;
        Ok((meta, file))
    }

    /// Installs the snapshot received into the partial file `path` (`file`) in `store`
    /// (blocking), and makes it the current one. Returns the state it left.
    ///
    /// Fails when the file is not a snapshot of `meta`, or the store cannot install it; the
    /// store's state is then as it was.
    pub(crate) fn install(
        &self,
        store: &Store,
        path: &Path,
        mut file: File,
        meta: &Meta,
    ) -> crate::Result<AppliedState> {
        file.sync_all().map_err(read)?;
        file.seek(SeekFrom::Start(0)).map_err(read)?;
        let installed = store.install_snapshot(&mut BufReader::new(&mut file))?;
        let state = match installed {
            Some(bytes) => AppliedState::decode(&bytes)?,
            None => AppliedState::default(),
        };
        if state.last != meta.last_log_id {
            return Err(crate::Error::Corrupt {
                detail: format!(
                    "the snapshot {} holds the state after entry {:?}, not after {:?}",
                    meta.snapshot_id, state.last, meta.last_log_id
                ),
            });
        }
        self.replace(path, meta).map_err(read)?;
        Ok(state)
    }

    /// Makes the whole, synced file at `path` (of `meta`) the current snapshot, unless the
    /// current one is as new; removes it then.
    fn replace(&self, path: &Path, meta: &Meta) -> io::Result<()> {
        let _replacing = self.replacing.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((current, _)) = self.current()?
            && current.last_log_id >= meta.last_log_id
        {
            return std::fs::remove_file(path);
        }
        std::fs::rename(path, self.current_path())?;
        File::open(&self.dir)?.sync_all()
    }
}

/// A name for the snapshot of `state` built on `node_id` now: snapshots of the same state built
/// at different times are told apart.
fn snapshot_id(state: &AppliedState, node_id: NodeId) -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis());
    match state.last {
        Some(last) => format!("{}-{}-{node_id}-{millis}", last.leader_id, last.index),
        None => format!("empty-{node_id}-{millis}"),
    }
}

fn write_meta(out: &mut impl Write, meta: &Meta) -> io::Result<()> {
    let bytes = bincode::serde::encode_to_vec(meta, bincode::config::standard())
        .map_err(io::Error::other)?;
    out.write_all(&bytes)?;
    out.write_all(&(bytes.len() as u32).to_le_bytes())
}

fn read_meta(file: &mut File) -> io::Result<Meta> {
    let len = file.seek(SeekFrom::End(-4))?;
    let mut tail = [0; 4];
    file.read_exact(&mut tail)?;
    let meta_len = u64::from(u32::from_le_bytes(tail));
    let start = len.checked_sub(meta_len).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "a snapshot's metadata is cut short",
        )
    })?;
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = vec![0; meta_len as usize];
    file.read_exact(&mut bytes)?;
    let (meta, _) = bincode::serde::decode_from_slice(&bytes, bincode::config::standard())
        .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))?;
    Ok(meta)
}

fn written(source: io::Error) -> crate::Error {
    crate::Error::Snapshot {
        action: "written",
        source,
    }
}

fn read(source: io::Error) -> crate::Error {
    crate::Error::Snapshot {
        action: "read",
        source,
    }
}
