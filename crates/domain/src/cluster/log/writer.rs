//! The Raft log's writer thread: it writes every append queued while the previous fdatasync ran
//! and syncs them once (group commit), then tells openraft they are persisted. A failed write or
//! sync is never retried: the log refuses everything after it, which stops the node.
use std::io;
use std::path::PathBuf;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};

use tapedeck_store::{FileHandle, Files, OpenMode};
use tokio::sync::oneshot;

use super::State;
use super::files::{self, LogId};

/// Told whether an append is persisted (written and synced) or failed.
pub(crate) type Flushed = Box<dyn FnOnce(io::Result<()>) + Send>;

/// What the writer thread is asked to do, in the order openraft asked it.
pub(crate) enum Command {
    /// Write `frames` at logical `offset`, sync, then call back.
    Append {
        frames: Vec<u8>,
        offset: u64,
        callback: Flushed,
    },
    /// Cut the file at logical `offset` (removing the entries from there on), durably.
    Truncate {
        offset: u64,
        reply: oneshot::Sender<io::Result<()>>,
    },
    /// Record `purged` durably; if `keep_from` is set, rewrite the file without what lies before
    /// that logical offset.
    Purge {
        purged: LogId,
        keep_from: Option<u64>,
        reply: oneshot::Sender<io::Result<()>>,
    },
}

/// The writer's own state; it runs until every sender is dropped.
pub(crate) struct Writer {
    /// Where the log's files are.
    pub(crate) files: Arc<dyn Files>,
    /// The entries file.
    pub(crate) path: PathBuf,
    /// The file of the last purged log id.
    pub(crate) purged_path: PathBuf,
    /// What readers share with the writer.
    pub(crate) state: Arc<Mutex<State>>,
    /// The first failure, after which every command fails.
    pub(crate) failed: Option<String>,
}

impl Writer {
    /// Serves `commands` until the log store is dropped.
    pub(crate) fn run(mut self, commands: Receiver<Command>) {
        while let Ok(first) = commands.recv() {
            let mut batch = vec![first];
            while let Ok(next) = commands.try_recv() {
                batch.push(next);
            }
            self.serve(batch);
        }
    }

    fn serve(&mut self, batch: Vec<Command>) {
        let mut flushed = Vec::new();
        let mut written_to = None;
        for command in batch {
            match command {
                Command::Append {
                    frames,
                    offset,
                    callback,
                } => {
                    let result = self.check().and_then(|()| {
                        let (file, base) = self.file();
                        file.write(offset - base, &frames)
                    });
                    match result {
                        Ok(()) => {
                            written_to = Some(offset + frames.len() as u64);
                            flushed.push(callback);
                        }
                        Err(e) => {
                            let e = self.fail("write", e);
                            // Earlier appends of this batch are not synced either.
                            for earlier in flushed.drain(..) {
                                earlier(Err(self.error()));
                            }
                            written_to = None;
                            callback(Err(e));
                        }
                    }
                }
                Command::Truncate { offset, reply } => {
                    self.sync(&mut flushed, written_to.take());
                    let result = self.check().and_then(|()| {
                        let (file, base) = self.file();
                        file.set_len(offset - base)?;
                        file.sync_data()
                    });
                    let result = result.map_err(|e| self.fail("truncate", e));
                    if result.is_ok() {
                        let mut state = self.lock();
                        state.written = state.written.min(offset);
                    }
                    let _ = reply.send(result);
                }
                Command::Purge {
                    purged,
                    keep_from,
                    reply,
                } => {
                    self.sync(&mut flushed, written_to.take());
                    let result = self.check().and_then(|()| self.purge(purged, keep_from));
                    let result = result.map_err(|e| self.fail("purge", e));
                    let _ = reply.send(result);
                }
            }
        }
        self.sync(&mut flushed, written_to);
    }

    /// Syncs what this batch wrote and reports it persisted; an entry counts only after this.
    fn sync(&mut self, flushed: &mut Vec<Flushed>, written_to: Option<u64>) {
        if flushed.is_empty() {
            return;
        }
        let result = self.check().and_then(|()| self.file().0.sync_data());
        match result {
            Ok(()) => {
                if let Some(end) = written_to {
                    self.lock().written_up_to(end);
                }
                for callback in flushed.drain(..) {
                    callback(Ok(()));
                }
            }
            Err(e) => {
                // No retry: after a failed fsync the page cache may have dropped the dirty pages,
                // so a later "successful" fsync would prove nothing.
                self.fail("fdatasync", e);
                for callback in flushed.drain(..) {
                    callback(Err(self.error()));
                }
            }
        }
    }

    fn purge(&mut self, purged: LogId, keep_from: Option<u64>) -> io::Result<()> {
        files::write_atomic(&*self.files, &self.purged_path, &purged)?;
        let Some(keep_from) = keep_from else {
            return Ok(());
        };
        // Copy the live part to a new file and rename it over the old one; readers holding the
        // old file keep reading it until they are done.
        let (old, base) = self.file();
        let tmp = self.path.with_extension("compact");
        let new = files::create_empty(&*self.files, &tmp)?;
        let end = old.len()?;
        let mut from = keep_from - base;
        let mut buf = vec![0u8; 1 << 20];
        while from < end {
            let n = (end - from).min(buf.len() as u64) as usize;
            old.read(from, &mut buf[..n])?;
            new.write(from - (keep_from - base), &buf[..n])?;
            from += n as u64;
        }
        new.sync_data()?;
        self.files.rename(&tmp, &self.path)?;
        files::sync_dir(&*self.files, &self.path)?;
        let new = self.files.open(&self.path, OpenMode::Write)?;
        let mut state = self.lock();
        state.file = Arc::from(new);
        state.base = keep_from;
        Ok(())
    }

    fn file(&self) -> (Arc<dyn FileHandle>, u64) {
        let state = self.lock();
        (state.file.clone(), state.base)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock is a bug that already stopped the log.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn check(&self) -> io::Result<()> {
        match &self.failed {
            None => Ok(()),
            Some(_) => Err(self.error()),
        }
    }

    fn error(&self) -> io::Error {
        io::Error::other(format!(
            "the Raft log {} failed earlier ({}) and takes no more writes",
            self.path.display(),
            self.failed.as_deref().unwrap_or("unknown")
        ))
    }

    fn fail(&mut self, what: &str, e: io::Error) -> io::Error {
        if self.failed.is_none() {
            tracing::error!(file = %self.path.display(), error = %e, "the Raft log's {what} failed; the node stops");
            self.failed = Some(format!("{what}: {e}"));
            return io::Error::new(e.kind(), format!("{what} of {}: {e}", self.path.display()));
        }
        e
    }
}
