//! The real file system, watched, for the tests of the seam under the store: every call
//! through it is counted, and each file is kept in memory as the writes through it made it and
//! as it was at its last sync (what a power cut would leave).
use std::collections::HashMap;
use std::io;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use redb::{BackendError, StorageBackend};

use crate::files::{FileHandle, Files, OpenMode, RealFiles};
/// Which of the store's files a call was about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Kind {
    Database,
    Log,
    /// The disk reserve and its temporary files.
    Reserve,
    /// The data directory.
    Dir,
}

fn kind(path: &Path) -> Kind {
    match path.extension().and_then(|e| e.to_str()) {
        Some("redb") => Kind::Database,
        Some("wal") => Kind::Log,
        _ => Kind::Reserve,
    }
}

/// An operation through the seam.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Call {
    Open,
    Read,
    Write,
    /// A write of zeros only (the log zeroed ahead of its frames).
    WriteZeros,
    SetLen,
    SyncData,
    SyncAll,
    Rename,
    Remove,
    SyncDir,
    Available,
}

/// What went through the seam.
#[derive(Debug, Default)]
pub(super) struct Seen {
    pub(super) calls: HashMap<(Kind, Call), u64>,
    /// Each file as its writes through the seam made it.
    pub(super) written: HashMap<PathBuf, Vec<u8>>,
    /// Each file as it was at its last sync: what a power cut leaves of it.
    synced: HashMap<PathBuf, Vec<u8>>,
    /// How long each sync of the log takes at least (a slow disk).
    log_sync_delay: std::time::Duration,
}

/// The real file system, watched: it counts every call, and keeps a copy of each file as the
/// writes through it made it, and as it was at its last sync.
#[derive(Debug, Clone, Default)]
pub(super) struct Watched(Arc<Mutex<Seen>>);

impl Watched {
    pub(super) fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.0.lock().unwrap()
    }

    /// The real file system, watched, on which every sync of the log takes at least `delay`.
    pub(super) fn with_slow_log_syncs(delay: std::time::Duration) -> Self {
        let watched = Self::default();
        watched.seen().log_sync_delay = delay;
        watched
    }

    fn count(&self, kind: Kind, call: Call) {
        *self.seen().calls.entry((kind, call)).or_default() += 1;
    }

    pub(super) fn calls(&self, kind: Kind, call: Call) -> u64 {
        self.seen().calls.get(&(kind, call)).copied().unwrap_or(0)
    }

    /// Starts a copy of `path` unless one is kept (a file that was there before).
    fn opened(&self, path: &Path) {
        let mut seen = self.seen();
        if !seen.written.contains_key(path) {
            let bytes = std::fs::read(path).unwrap_or_default();
            seen.written.insert(path.to_path_buf(), bytes);
        }
    }

    fn write(&self, path: &Path, offset: u64, data: &[u8]) {
        let mut seen = self.seen();
        let bytes = seen.written.get_mut(path).unwrap();
        let end = offset as usize + data.len();
        if bytes.len() < end {
            bytes.resize(end, 0);
        }
        bytes[offset as usize..end].copy_from_slice(data);
    }

    fn set_len(&self, path: &Path, len: u64) {
        self.seen()
            .written
            .get_mut(path)
            .unwrap()
            .resize(len as usize, 0);
    }

    fn synced(&self, path: &Path) {
        let mut seen = self.seen();
        let bytes = seen.written[path].clone();
        seen.synced.insert(path.to_path_buf(), bytes);
    }

    /// The files as a power cut now would leave them: as they were at their last sync.
    pub(super) fn power_cut(&self) -> HashMap<PathBuf, Vec<u8>> {
        self.seen().synced.clone()
    }
}

impl Files for Watched {
    fn open_database(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageBackend>> {
        self.count(kind(path), Call::Open);
        let inner = RealFiles.open_database(path, mode)?;
        self.opened(path);
        Ok(Box::new(WatchedDatabase(WatchedFile {
            watched: self.clone(),
            path: path.to_path_buf(),
            inner: Inner::Database(inner),
        })))
    }

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn FileHandle>> {
        self.count(kind(path), Call::Open);
        let inner = RealFiles.open(path, mode)?;
        self.opened(path);
        Ok(Box::new(WatchedFile {
            watched: self.clone(),
            path: path.to_path_buf(),
            inner: Inner::File(inner),
        }))
    }

    fn len(&self, path: &Path) -> io::Result<u64> {
        RealFiles.len(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.count(kind(from), Call::Rename);
        RealFiles.rename(from, to)?;
        let seen = &mut *self.seen();
        for copies in [&mut seen.written, &mut seen.synced] {
            if let Some(bytes) = copies.remove(from) {
                copies.insert(to.to_path_buf(), bytes);
            }
        }
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.count(kind(path), Call::Remove);
        RealFiles.remove(path)?;
        let mut seen = self.seen();
        seen.written.remove(path);
        seen.synced.remove(path);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.count(Kind::Dir, Call::SyncDir);
        RealFiles.sync_dir(dir)
    }

    fn available(&self, dir: &Path) -> io::Result<u64> {
        self.count(Kind::Dir, Call::Available);
        RealFiles.available(dir)
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        RealFiles.create_dir_all(dir)
    }
}

#[derive(Debug)]
enum Inner {
    Database(Box<dyn StorageBackend>),
    File(Box<dyn FileHandle>),
}

/// A file opened through [`Watched`].
#[derive(Debug)]
struct WatchedFile {
    watched: Watched,
    path: PathBuf,
    inner: Inner,
}

impl WatchedFile {
    fn count(&self, call: Call) {
        self.watched.count(kind(&self.path), call);
    }
}

impl FileHandle for WatchedFile {
    fn len(&self) -> io::Result<u64> {
        match &self.inner {
            Inner::Database(inner) => inner.len(),
            Inner::File(inner) => inner.len(),
        }
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.count(Call::Read);
        match &self.inner {
            Inner::Database(inner) => inner.read(offset, out),
            Inner::File(inner) => inner.read(offset, out),
        }
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let zeros = !data.is_empty() && data.iter().all(|&b| b == 0);
        self.count(if zeros { Call::WriteZeros } else { Call::Write });
        match &self.inner {
            Inner::Database(inner) => inner.write(offset, data)?,
            Inner::File(inner) => inner.write(offset, data)?,
        }
        self.watched.write(&self.path, offset, data);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.count(Call::SetLen);
        match &self.inner {
            Inner::Database(inner) => inner.set_len(len)?,
            Inner::File(inner) => inner.set_len(len)?,
        }
        self.watched.set_len(&self.path, len);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        self.count(Call::SyncData);
        if kind(&self.path) == Kind::Log {
            let delay = self.watched.seen().log_sync_delay;
            std::thread::sleep(delay);
        }
        match &self.inner {
            Inner::Database(inner) => inner.sync_data()?,
            Inner::File(inner) => inner.sync_data()?,
        }
        self.watched.synced(&self.path);
        Ok(())
    }

    fn sync_all(&self) -> io::Result<()> {
        self.count(Call::SyncAll);
        match &self.inner {
            Inner::Database(inner) => inner.sync_data()?,
            Inner::File(inner) => inner.sync_all()?,
        }
        self.watched.synced(&self.path);
        Ok(())
    }
}

/// The database file opened through [`Watched`], as redb's storage.
#[derive(Debug)]
struct WatchedDatabase(WatchedFile);

impl WatchedDatabase {
    fn backend(&self) -> &dyn StorageBackend {
        match &self.0.inner {
            Inner::Database(inner) => &**inner,
            Inner::File(_) => unreachable!("opened as a database"),
        }
    }
}

impl StorageBackend for WatchedDatabase {
    fn len(&self) -> io::Result<u64> {
        FileHandle::len(&self.0)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        FileHandle::read(&self.0, offset, out)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        FileHandle::set_len(&self.0, len)
    }

    fn sync_data(&self) -> io::Result<()> {
        FileHandle::sync_data(&self.0)
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        FileHandle::write(&self.0, offset, data)
    }

    fn close(&self) -> io::Result<()> {
        self.backend().close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.backend().try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.backend().try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.backend().lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.backend().lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.backend().unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.backend().query_lock_range(start, end)
    }
}
