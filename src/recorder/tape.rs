//! A live recording in memory: its committed high-water mark (a `watch` that readers wait on),
//! the most recent committed chunks (so live readers rarely touch the disk), and the producer's
//! handle that appends to it. The commit pipeline moves it on through [`LiveRecording`].
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Instant;

use tokio::sync::watch;

use super::registry::Registry;
use super::status::{Progress, Status};
use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::store::{Chunk, Committed, LiveRecording, Store};

/// Recent chunks kept in memory per live recording; older ones are read from the store.
const TAIL_MAX_CHUNKS: usize = 512;
/// Bytes of recent chunks kept in memory per live recording (the newest chunk is always kept).
const TAIL_MAX_BYTES: usize = 64 * 1024;

/// The most recent committed chunks of a live recording, and their total text length.
#[derive(Debug, Default)]
struct Tail {
    chunks: VecDeque<Chunk>,
    bytes: usize,
}

/// A live recording, shared by its producer, its readers and the commit pipeline. Only the
/// pipeline's thread changes its committed state.
#[derive(Debug)]
pub struct Tape {
    id: ConversationId,
    generation: u64,
    progress: watch::Sender<Progress>,
    tail: Mutex<Tail>,
    last_activity_ms: AtomicU64,
    /// Set by the pipeline when it accepts the op that ends the tape; later ops are refused.
    closed: AtomicBool,
    /// Why the tape ended, when there is more to say than its status.
    end_message: OnceLock<String>,
    /// `true` while a producer holds its `TapeWriter`.
    producer_attached: watch::Sender<bool>,
    /// The registry it is listed in while live; it leaves it when its end is published.
    registry: Weak<Registry>,
    started: Instant,
}

impl Tape {
    pub(super) fn new(
        id: ConversationId,
        generation: u64,
        now_ms: u64,
        registry: Weak<Registry>,
    ) -> Self {
        let progress = Progress {
            chunks: 0,
            bytes: 0,
            status: Status::Recording,
        };
        Self {
            id,
            generation,
            progress: watch::Sender::new(progress),
            tail: Mutex::new(Tail::default()),
            last_activity_ms: AtomicU64::new(now_ms),
            closed: AtomicBool::new(false),
            end_message: OnceLock::new(),
            producer_attached: watch::Sender::new(true),
            registry,
            started: Instant::now(),
        }
    }

    /// The conversation, as its producer named it.
    pub fn id(&self) -> &ConversationId {
        &self.id
    }

    /// The conversation's storage key.
    pub fn key(&self) -> u128 {
        self.id.key()
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

    /// Why the recording ended, if it has and there is a reason to give. The text is fit for
    /// clients: internal detail goes to the log only.
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
}

impl LiveRecording for Tape {
    fn key(&self) -> u128 {
        self.id.key()
    }

    fn generation(&self) -> u64 {
        self.generation
    }

    fn close(&self) -> bool {
        !self.closed.swap(true, Ordering::AcqRel)
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn ended_error(&self) -> Error {
        match self.progress().status {
            Status::Superseded => Error::Superseded,
            _ => Error::RecordingEnded,
        }
    }

    fn touch(&self, now_ms: u64) {
        self.last_activity_ms.store(now_ms, Ordering::Relaxed);
    }

    fn committed(&self) -> (u64, u64) {
        let progress = self.progress();
        (progress.chunks, progress.bytes)
    }

    fn publish_chunks(&self, chunks: Vec<Chunk>) {
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

    fn publish_end(&self, status: Status, message: Option<String>) {
        // Out of the registry first: a reader that finds no live tape reads the stored end.
        if let Some(registry) = self.registry.upgrade() {
            registry.unregister(self);
        }
        if let Some(message) = message {
            let _ = self.end_message.set(message);
        }
        self.progress.send_modify(|p| p.status = status);
        let progress = self.progress();
        tracing::info!(
            conversation = %self.id,
            status = %status,
            chunks = progress.chunks,
            bytes = progress.bytes,
            duration_ms = self.started.elapsed().as_millis() as u64,
            "recording ended"
        );
    }
}

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
    pub(super) fn new(store: Store, tape: Arc<Tape>) -> Self {
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
    ///
    /// Fails when the end cannot be committed.
    pub async fn finish(mut self, status: Status, message: Option<String>) -> Result<Progress> {
        self.finished = true;
        self.store.end(self.tape.clone(), status, message).await?;
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
