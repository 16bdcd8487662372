//! A live recording in memory: its committed high-water mark (a `watch` that readers wait on),
//! the most recent committed chunks (so live readers rarely touch the disk), and the producer's
//! handle that appends to it.
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::{oneshot, watch};

use super::Store;
use super::schema::Status;
use crate::error::Result;

/// Recent chunks kept in memory per live recording; older ones are read from the store.
const TAIL_MAX_CHUNKS: usize = 512;
/// Bytes of recent chunks kept in memory per live recording (the newest chunk is always kept).
const TAIL_MAX_BYTES: usize = 64 * 1024;

/// One committed piece of a recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Position in the recording, from 0.
    pub index: u64,
    /// UTF-8 byte offset of the chunk's first byte in the recording.
    pub offset: u64,
    pub text: Arc<str>,
}

impl Chunk {
    /// Byte offset just after this chunk.
    pub fn end(&self) -> u64 {
        self.offset + self.text.len() as u64
    }
}

/// The most recent committed chunks of a live recording, and their total text length.
#[derive(Debug, Default)]
struct Tail {
    chunks: VecDeque<Chunk>,
    bytes: usize,
}

/// What is committed of a recording, and whether it has ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Number of committed chunks.
    pub chunks: u64,
    /// Committed UTF-8 length.
    pub bytes: u64,
    /// `Recording` while live; otherwise how it ended.
    pub status: Status,
}

/// A live recording, shared by its producer, its readers and the commit pipeline. Only the
/// writer thread changes its committed state.
#[derive(Debug)]
pub struct Tape {
    key: u128,
    original_id: Vec<u8>,
    generation: u64,
    progress: watch::Sender<Progress>,
    tail: Mutex<Tail>,
    last_activity_ms: AtomicU64,
    /// Set by the writer when it accepts the op that ends the tape; later ops are refused.
    closed: AtomicBool,
    /// Why the tape ended, when there is more to say than its status.
    end_message: OnceLock<String>,
    /// `true` while a producer holds its `TapeWriter`.
    producer_attached: watch::Sender<bool>,
}

impl Tape {
    pub(crate) fn new(key: u128, original_id: Vec<u8>, generation: u64, now_ms: u64) -> Self {
        let progress = Progress {
            chunks: 0,
            bytes: 0,
            status: Status::Recording,
        };
        Self {
            key,
            original_id,
            generation,
            progress: watch::Sender::new(progress),
            tail: Mutex::new(Tail::default()),
            last_activity_ms: AtomicU64::new(now_ms),
            closed: AtomicBool::new(false),
            end_message: OnceLock::new(),
            producer_attached: watch::Sender::new(true),
        }
    }

    /// The conversation's storage key.
    pub fn key(&self) -> u128 {
        self.key
    }

    /// The conversation id as its producer sent it.
    pub fn original_id(&self) -> &[u8] {
        &self.original_id
    }

    /// Which of the conversation's recordings this is.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The committed state now.
    pub fn progress(&self) -> Progress {
        *self.progress.borrow()
    }

    /// A receiver that wakes whenever more is committed or the recording ends.
    pub fn subscribe(&self) -> watch::Receiver<Progress> {
        self.progress.subscribe()
    }

    /// Why the recording ended, if it has and there is a reason to give.
    pub fn end_message(&self) -> Option<&str> {
        self.end_message.get().map(String::as_str)
    }

    /// When the last chunk was accepted (or the recording started), in ms since the epoch.
    pub fn last_activity_ms(&self) -> u64 {
        self.last_activity_ms.load(Ordering::Relaxed)
    }

    /// Waits until the producer has let go of the recording.
    pub async fn producer_detached(&self) {
        let mut attached = self.producer_attached.subscribe();
        // Err means the tape itself is gone, so no producer can be attached either.
        let _ = attached.wait_for(|attached| !attached).await;
    }

    /// The committed chunks from `index` on that are still held in memory, or `None` when some
    /// of them have already left the in-memory tail (read them from the store instead).
    pub fn tail_from(&self, index: u64) -> Option<Vec<Chunk>> {
        let tail = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        match tail.chunks.front() {
            Some(first) if first.index <= index => {
                let skip = (index - first.index) as usize;
                Some(tail.chunks.iter().skip(skip).cloned().collect())
            }
            Some(_) => None,
            None => (index >= self.progress().chunks).then(Vec::new),
        }
    }

    // The methods below are called by the writer thread only.

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Marks the tape as accepting no more ops; false if it already was.
    pub(crate) fn close(&self) -> bool {
        !self.closed.swap(true, Ordering::AcqRel)
    }

    pub(crate) fn touch(&self, now_ms: u64) {
        self.last_activity_ms.store(now_ms, Ordering::Relaxed);
    }

    /// Publishes newly committed chunks to the tail and to every waiting reader.
    pub(crate) fn publish_chunks(&self, chunks: Vec<Chunk>) {
        let Some(last) = chunks.last() else { return };
        let (count, bytes) = (last.index + 1, last.end());
        {
            let mut tail = self.tail.lock().unwrap_or_else(|e| e.into_inner());
            let tail = &mut *tail;
            for chunk in chunks {
                tail.bytes += chunk.text.len();
                tail.chunks.push_back(chunk);
            }
            while tail.chunks.len() > 1
                && (tail.chunks.len() > TAIL_MAX_CHUNKS || tail.bytes > TAIL_MAX_BYTES)
            {
                if let Some(old) = tail.chunks.pop_front() {
                    tail.bytes -= old.text.len();
                }
            }
        }
        self.progress.send_modify(|p| {
            p.chunks = count;
            p.bytes = bytes;
        });
    }

    /// Publishes the end of the recording to every waiting reader and its producer.
    pub(crate) fn publish_end(&self, status: Status, message: Option<String>) {
        if let Some(message) = message {
            let _ = self.end_message.set(message);
        }
        self.progress.send_modify(|p| p.status = status);
    }
}

/// Resolves once an appended chunk is committed, with the recording's committed length.
pub type Committed = oneshot::Receiver<Result<u64>>;

/// The producer's handle on a live recording: assigns each chunk its index and offset.
/// Dropping it without [`finish`](Self::finish) ends the recording as `interrupted`.
#[derive(Debug)]
pub struct TapeWriter {
    store: Store,
    tape: Arc<Tape>,
    next_index: u64,
    next_offset: u64,
    finished: bool,
}

impl TapeWriter {
    pub(crate) fn new(store: Store, tape: Arc<Tape>) -> Self {
        Self {
            store,
            tape,
            next_index: 0,
            next_offset: 0,
            finished: false,
        }
    }

    /// The recording being written.
    pub fn tape(&self) -> &Arc<Tape> {
        &self.tape
    }

    /// Bytes appended so far, committed or not.
    pub fn appended_bytes(&self) -> u64 {
        self.next_offset
    }

    /// Queues `text` as the next chunk. The returned receiver resolves after the commit that
    /// holds it; dropping it is fine (readers see the chunk once committed either way).
    ///
    /// Fails with `ShuttingDown` when the store is closed.
    pub async fn append(&mut self, text: &str) -> Result<Committed> {
        let chunk = Chunk {
            index: self.next_index,
            offset: self.next_offset,
            text: Arc::from(text),
        };
        let committed = self.store.append(self.tape.clone(), chunk).await?;
        self.next_index += 1;
        self.next_offset += text.len() as u64;
        Ok(committed)
    }

    /// Ends the recording with `status` once everything appended is committed. Returns the
    /// final progress; its status differs from `status` when the recording had already ended
    /// (cancelled, superseded, failed) before this call.
    pub async fn finish(mut self, status: Status, message: Option<String>) -> Result<Progress> {
        self.finished = true;
        self.store.end(&self.tape, status, message).await?;
        Ok(self.tape.progress())
    }
}

impl Drop for TapeWriter {
    fn drop(&mut self) {
        if !self.finished {
            self.store.end_in_background(
                self.tape.clone(),
                Status::Interrupted,
                "the producer went away".into(),
            );
        }
        self.tape.producer_attached.send_replace(false);
    }
}
