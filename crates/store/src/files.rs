//! The seam under the store: every read, write, sync, resize, rename and removal of the
//! database file, its write-ahead log and the disk reserve goes through one [`Files`], so a
//! test can put a simulated disk under the store. [`RealFiles`], the default, is the operating
//! system's file system, at the cost of one dynamic call per operation.
//!
//! The database file is redb's own [`StorageBackend`]; every other file the store writes is a
//! [`FileHandle`], shaped the same way. A write is durable once its file is synced; a file
//! created, renamed or removed, once its directory is ([`Files::sync_dir`]).
use std::fs::OpenOptions;
use std::io;
use std::ops::Bound;
use std::os::unix::fs::FileExt;
use std::path::Path;

use redb::backends::FileBackend;
use redb::{BackendError, Builder, Database, DatabaseError, StorageBackend, StorageError};

/// The file system the store's files live on.
pub trait Files: std::fmt::Debug + Send + Sync + 'static {
    /// Opens the database file at `path` as redb's storage, locks and all.
    ///
    /// Fails as opening the file does (`NotFound` for a missing one unless `mode` creates it).
    fn open_database(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageBackend>>;

    /// Opens the file at `path` (the write-ahead log, the disk reserve).
    ///
    /// Fails as opening the file does (`NotFound` for a missing one unless `mode` creates it).
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn FileHandle>>;

    /// The length of the file at `path`, in bytes.
    ///
    /// Fails with `NotFound` when there is none.
    fn len(&self, path: &Path) -> io::Result<u64>;

    /// Renames the file `from` to `to`, replacing any file there; durable once their directory
    /// is synced.
    ///
    /// Fails as the rename does.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;

    /// Removes the file at `path`; durable once its directory is synced.
    ///
    /// Fails with `NotFound` when there is none, or as the removal does.
    fn remove(&self, path: &Path) -> io::Result<()>;

    /// Makes the entries of directory `dir` durable: the files created, renamed or removed in it.
    ///
    /// Fails as opening or syncing the directory does.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;

    /// Bytes an unprivileged writer may still write on the file system holding `dir`.
    ///
    /// Fails as asking the file system does.
    fn available(&self, dir: &Path) -> io::Result<u64>;

    /// Creates directory `dir` and its parents where missing.
    ///
    /// Fails as creating a directory does.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
}

/// One open file the store writes itself (not redb's): read and written at offsets, as redb's
/// [`StorageBackend`] is.
pub trait FileHandle: std::fmt::Debug + Send + Sync {
    /// The file's length, in bytes.
    ///
    /// Fails as asking the file system does.
    fn len(&self) -> io::Result<u64>;

    /// Whether the file holds no bytes.
    ///
    /// Fails as [`len`](Self::len) does.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Fills `out` with the bytes at `offset`.
    ///
    /// Fails with `UnexpectedEof` when the file ends first, or as the read does.
    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()>;

    /// Writes all of `data` at `offset`, growing the file if it ends before; not durable until
    /// [`sync_data`](Self::sync_data).
    ///
    /// Fails as the write does (`StorageFull` on a full disk); part of `data` may be written.
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()>;

    /// Cuts or grows the file to `len` bytes (new bytes read as zeros); not durable until
    /// synced.
    ///
    /// Fails as the resize does.
    fn set_len(&self, len: u64) -> io::Result<()>;

    /// Makes the file's bytes, and its length, durable (`fdatasync`).
    ///
    /// Fails as the sync does (`EIO`: what was written since the last sync may be lost).
    fn sync_data(&self) -> io::Result<()>;

    /// Makes the file's bytes and all its metadata durable (`fsync`).
    ///
    /// Fails as the sync does.
    fn sync_all(&self) -> io::Result<()>;
}

/// How a file is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// An existing file, for reading only.
    Read,
    /// An existing file, for reading and writing.
    Write,
    /// For reading and writing, created empty if it is missing (its bytes kept if not).
    Create,
}

/// The operating system's file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealFiles;

impl RealFiles {
    fn open_file(path: &Path, mode: OpenMode) -> io::Result<std::fs::File> {
        let mut options = OpenOptions::new();
        options.read(true);
        match mode {
            OpenMode::Read => {}
            OpenMode::Write => {
                options.write(true);
            }
            OpenMode::Create => {
                options.write(true).create(true).truncate(false);
            }
        }
        options.open(path)
    }
}

impl Files for RealFiles {
    fn open_database(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageBackend>> {
        let file = Self::open_file(path, mode)?;
        // `new` cannot fail (redb keeps a `Result` for a future API).
        let backend = FileBackend::new(file).map_err(io::Error::other)?;
        Ok(Box::new(backend))
    }

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn FileHandle>> {
        Ok(Box::new(RealFile(Self::open_file(path, mode)?)))
    }

    fn len(&self, path: &Path) -> io::Result<u64> {
        Ok(std::fs::metadata(path)?.len())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::File::open(dir)?.sync_all()
    }

    fn available(&self, dir: &Path) -> io::Result<u64> {
        let fs = rustix::fs::statvfs(dir)?;
        Ok(fs.f_bavail.saturating_mul(fs.f_frsize))
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }
}

/// A file of the operating system's: each call is the one system call it names.
#[derive(Debug)]
struct RealFile(std::fs::File);

impl FileHandle for RealFile {
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.0.read_exact_at(out, offset)
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.0.write_all_at(data, offset)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.0.sync_all()
    }
}

/// Opens the database file at `path` on `files` (in `mode`), as `builder` says.
///
/// Fails as opening the file does (as redb's own `create` would report it), or as redb's open
/// does.
pub(crate) fn database_on(
    files: &dyn Files,
    builder: &Builder,
    path: &Path,
    mode: OpenMode,
) -> Result<Database, DatabaseError> {
    let storage = files
        .open_database(path, mode)
        .map_err(|io| DatabaseError::Storage(StorageError::Io(io)))?;
    builder.create_with_backend(Storage(storage))
}

/// The backend a [`Files`] opened, as redb takes it (redb wants a sized backend).
#[derive(Debug)]
pub(crate) struct Storage(pub(crate) Box<dyn StorageBackend>);

impl StorageBackend for Storage {
    fn len(&self) -> io::Result<u64> {
        self.0.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.0.read(offset, out)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.0.write(offset, data)
    }

    fn close(&self) -> io::Result<()> {
        self.0.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.0.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.0.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.0.query_lock_range(start, end)
    }
}

/// Reads a [`FileHandle`] from its start, up to the length it had when the reader was made.
pub(crate) struct Reader<'f> {
    file: &'f dyn FileHandle,
    at: u64,
    len: u64,
}

impl<'f> Reader<'f> {
    /// A reader of `file` from its start.
    ///
    /// Fails as reading the file's length does.
    pub(crate) fn new(file: &'f dyn FileHandle) -> io::Result<Self> {
        Ok(Self {
            file,
            at: 0,
            len: file.len()?,
        })
    }
}

impl io::Read for Reader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = (self.len - self.at).min(buf.len() as u64) as usize;
        if n == 0 {
            return Ok(0);
        }
        self.file.read(self.at, &mut buf[..n])?;
        self.at += n as u64;
        Ok(n)
    }
}
