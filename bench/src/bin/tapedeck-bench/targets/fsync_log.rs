//! The disk's ceiling: every token appended to one file, each group of waiting tokens made
//! durable with one `fdatasync`, followers woken after it. Where each token landed is kept in
//! memory; reads are `pread`s of those extents. No index on disk, no compaction, no recovery.
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use anyhow::{Result, bail};
use tokio::sync::mpsc;

use super::live::{self, Follower, LiveProducer, Registry, Write};
use super::{Environment, Target, temp_dir};

/// Where a recording's tokens are in the log: `(payload offset, payload length)` in order.
type Extents = Mutex<Vec<(u64, u32)>>;

/// An append-only log file in a temp dir and its commit thread.
pub(crate) struct FsyncLog {
    writes: mpsc::Sender<Write<Extents>>,
    registry: Arc<Registry<Extents>>,
    file: Arc<File>,
    commit_thread: Option<JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl FsyncLog {
    /// Creates the log and starts its group-commit thread.
    pub(crate) fn start(env: &Environment) -> Result<FsyncLog> {
        let dir = temp_dir(&env.work_dir, "fsync-log-")?;
        let file = Arc::new(
            OpenOptions::new()
                .create(true)
                .read(true)
                .append(true)
                .open(dir.path().join("tokens.log"))?,
        );
        let (writes, receiver) = mpsc::channel(live::QUEUE_DEPTH);
        let writer = file.clone();
        let commit_thread = std::thread::Builder::new()
            .name("fsync-log-commit".into())
            .spawn(move || {
                let mut end = 0u64;
                let mut buffer = Vec::new();
                live::run_commits(receiver, true, |batch| {
                    append(&writer, &mut end, &mut buffer, batch)
                })
            })?;
        Ok(FsyncLog {
            writes,
            registry: Arc::new(Registry::new()),
            file,
            commit_thread: Some(commit_thread),
            _dir: dir,
        })
    }

    /// The payloads of tokens `range` of `name`, read with one `pread` per contiguous run.
    fn read_range(&self, name: &str, range: Range<u64>) -> Result<Vec<u8>> {
        let recording = self.registry.get(name);
        let extents: Vec<(u64, u32)> = {
            let all = recording.data.lock().unwrap_or_else(|e| e.into_inner());
            let end = (range.end as usize).min(all.len());
            all[(range.start as usize).min(end)..end].to_vec()
        };
        let mut out = Vec::new();
        let mut i = 0;
        while i < extents.len() {
            let (start, mut len) = (extents[i].0, extents[i].1 as u64);
            let mut j = i + 1;
            while j < extents.len() && extents[j].0 == start + len {
                len += extents[j].1 as u64;
                j += 1;
            }
            let at = out.len();
            out.resize(at + len as usize, 0);
            self.file.read_exact_at(&mut out[at..], start)?;
            i = j;
        }
        Ok(out)
    }
}

/// Appends a batch as records `[u32 payload len][u32 seq][u16 name len][name][payload]` (an end
/// marker has length 0 and seq `u32::MAX`), fdatasyncs once, then records the extents.
fn append(
    file: &File,
    end: &mut u64,
    buffer: &mut Vec<u8>,
    batch: &[Write<Extents>],
) -> Result<()> {
    buffer.clear();
    let mut placed = Vec::with_capacity(batch.len());
    for write in batch {
        let (recording, seq, payload) = match write {
            Write::Token {
                recording,
                seq,
                text,
                ..
            } => (recording, *seq as u32, text.as_bytes()),
            Write::End { recording, .. } => (recording, u32::MAX, &[][..]),
        };
        let name = recording.name.as_bytes();
        if name.len() > u16::MAX as usize {
            bail!("recording name too long");
        }
        buffer.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        buffer.extend_from_slice(&seq.to_le_bytes());
        buffer.extend_from_slice(&(name.len() as u16).to_le_bytes());
        buffer.extend_from_slice(name);
        let offset = *end + buffer.len() as u64;
        buffer.extend_from_slice(payload);
        if !payload.is_empty() {
            placed.push((recording, offset, payload.len() as u32));
        }
    }
    (&*file).write_all(buffer)?;
    file.sync_data()?;
    *end += buffer.len() as u64;
    for (recording, offset, len) in placed {
        recording
            .data
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((offset, len));
    }
    Ok(())
}

impl Drop for FsyncLog {
    fn drop(&mut self) {
        let (closed, _) = mpsc::channel(1);
        drop(std::mem::replace(&mut self.writes, closed));
        if let Some(thread) = self.commit_thread.take() {
            let _ = thread.join();
        }
    }
}

impl Target for Arc<FsyncLog> {
    type Producer = LiveProducer<Extents>;
    type Subscriber = FsyncLogSubscriber;

    async fn record(&self, _lane: usize, name: &str) -> Result<LiveProducer<Extents>> {
        Ok(LiveProducer {
            writes: self.writes.clone(),
            recording: self.registry.get(name),
            next_seq: 0,
        })
    }

    async fn subscribe(&self, _lane: usize, name: &str) -> Result<FsyncLogSubscriber> {
        let recording = self.registry.get(name);
        Ok(FsyncLogSubscriber {
            log: self.clone(),
            follower: Follower::new(&recording),
            name: name.to_string(),
        })
    }

    async fn replay(&self, _lane: usize, name: &str) -> Result<u64> {
        Ok(self.read_range(name, 0..u64::MAX)?.len() as u64)
    }

    fn data_pid(&self) -> Option<u32> {
        None
    }
}

/// A follower reading newly committed tokens from the log.
pub(crate) struct FsyncLogSubscriber {
    log: Arc<FsyncLog>,
    follower: Follower,
    name: String,
}

impl super::Subscriber for FsyncLogSubscriber {
    async fn next(&mut self) -> Result<Option<Vec<u8>>> {
        match self.follower.next_range().await {
            Some(range) => self.log.read_range(&self.name, range).map(Some),
            None => Ok(None),
        }
    }
}
