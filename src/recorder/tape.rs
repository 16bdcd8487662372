//! A live recording in memory: its committed high-water mark (a `watch` that readers wait on),
//! the most recent committed chunks (so live readers rarely touch the disk), which producer
//! session holds it, and the producer's handle that appends to it. The commit pipeline moves
//! it on through [`LiveRecording`].
//!
//! A producer that lets go without finishing *detaches*: the recording stays live, readers
//! keep following, and it ends as `interrupted` only if no producer resumes it within the
//! grace period. A resume starts a new producer session; the pipeline refuses appends of
//! older sessions from then on (fencing).
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::registry::Registry;
use super::status::{Progress, Status};
use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::store::{
    Batch, BatchCommitted, Chunk, Committed, EndIf, LiveRecording, Resumed, Store, StreamRow,
};

/// Recent chunks kept in memory per live recording; older ones are read from the store.
const TAIL_MAX_CHUNKS: usize = 64;
/// Bytes of recent chunks kept in memory per live recording (the newest chunk is always kept).
const TAIL_MAX_BYTES: usize = 16 * 1024;

/// The most recent committed chunks of a live recording, and their total text length.
#[derive(Debug, Default)]
struct Tail {
    chunks: VecDeque<Chunk>,
    bytes: usize,
}

/// Which producer session may append to a live recording, and whether it is still there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder {
    /// The session whose appends are accepted; 0 before any (a recording adopted after a
    /// restart).
    pub session: u64,
    /// Whether that session's producer is still connected.
    pub attached: bool,
}

/// A live recording, shared by its producer, its readers and the commit pipeline. Only the
/// pipeline's thread changes its committed state, and hands it to a new producer session.
#[derive(Debug)]
pub struct Tape {
    id: ConversationId,
    generation: u64,
    progress: watch::Sender<Progress>,
    /// Cancelled once its end is published (after `progress` shows it): for those that wait
    /// for the end only, and should not wake at every commit.
    ended: CancellationToken,
    tail: Mutex<Tail>,
    last_activity_ms: AtomicU64,
    /// Set by the pipeline when it accepts the op that ends the tape; later ops are refused.
    closed: AtomicBool,
    /// Why the tape ended, when there is more to say than its status.
    end_message: OnceLock<String>,
    /// The producer session that holds it.
    holder: watch::Sender<Holder>,
    /// Whether its chunks carry their commit time.
    timed_chunks: bool,
    /// Replays following it now.
    readers: AtomicU64,
    /// Held open by the HTTP face: it ends when closed or expired, never for being idle.
    held_open: AtomicBool,
    /// The registry it is listed in while live; it leaves it when its end is published.
    registry: Weak<Registry>,
    started: Instant,
}

/// How a tape comes to be live.
#[derive(Debug, Clone, Copy)]
pub(super) struct Opening {
    pub(super) generation: u64,
    pub(super) now_ms: u64,
    /// What is committed of it already: nothing for a new recording.
    pub(super) chunks: u64,
    pub(super) bytes: u64,
    /// Held by producer session 1 from the start, or by nobody yet (adopted, reopened).
    pub(super) attached: bool,
    pub(super) timed_chunks: bool,
}

impl Tape {
    pub(super) fn new(id: ConversationId, opening: Opening, registry: Weak<Registry>) -> Self {
        let progress = Progress {
            chunks: opening.chunks,
            bytes: opening.bytes,
            status: Status::Recording,
        };
        let holder = Holder {
            session: u64::from(opening.attached),
            attached: opening.attached,
        };
        let (generation, now_ms) = (opening.generation, opening.now_ms);
        Self {
            id,
            generation,
            progress: watch::Sender::new(progress),
            ended: CancellationToken::new(),
            tail: Mutex::new(Tail::default()),
            last_activity_ms: AtomicU64::new(now_ms),
            closed: AtomicBool::new(false),
            end_message: OnceLock::new(),
            holder: watch::Sender::new(holder),
            timed_chunks: opening.timed_chunks,
            readers: AtomicU64::new(0),
            held_open: AtomicBool::new(false),
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

    /// Resolves once the recording's end is published, with its final progress.
    pub async fn ended(&self) -> Progress {
        self.ended.cancelled().await;
        self.progress()
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

    /// Waits until no producer is attached.
    pub async fn producer_detached(&self) {
        let mut holder = self.holder.subscribe();
        // Err means the tape itself is gone, so no producer can be attached either.
        let _ = holder.wait_for(|holder| !holder.attached).await;
    }

    /// Which producer session holds it now.
    pub fn holder(&self) -> Holder {
        *self.holder.borrow()
    }

    /// A receiver that wakes whenever another producer session takes over, or the producer
    /// lets go.
    pub fn watch_holder(&self) -> watch::Receiver<Holder> {
        self.holder.subscribe()
    }

    /// Marks producer `session` as gone; `false` if it did not hold the recording (another
    /// session took over) or had let go already.
    fn detach(&self, session: u64) -> bool {
        self.holder.send_if_modified(|holder| {
            let detaching = holder.session == session && holder.attached;
            if detaching {
                holder.attached = false;
            }
            detaching
        })
    }

    /// Exempts it from the idle timeout: a Durable Streams stream stays open until closed.
    pub fn hold_open(&self) {
        self.held_open.store(true, Ordering::Relaxed);
    }

    /// Whether [`hold_open`](Self::hold_open) was called.
    pub fn is_held_open(&self) -> bool {
        self.held_open.load(Ordering::Relaxed)
    }

    /// Replays following it now.
    pub fn readers(&self) -> u64 {
        self.readers.load(Ordering::Relaxed)
    }

    /// Counts a replay following it, until the returned guard is dropped.
    pub fn follow(self: &Arc<Self>) -> Following {
        self.readers.fetch_add(1, Ordering::Relaxed);
        Following { tape: self.clone() }
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

/// A replay's presence on a live tape: counted in [`Tape::readers`] while it lives.
#[derive(Debug)]
pub struct Following {
    tape: Arc<Tape>,
}

impl Drop for Following {
    fn drop(&mut self) {
        self.tape.readers.fetch_sub(1, Ordering::Relaxed);
    }
}

impl LiveRecording for Tape {
    fn key(&self) -> u128 {
        self.id.key()
    }

    fn name(&self) -> String {
        self.id.to_string()
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

    fn timed_chunks(&self) -> bool {
        self.timed_chunks
    }

    fn producer_session(&self) -> u64 {
        self.holder().session
    }

    fn attach_producer(&self) -> u64 {
        let mut session = 0;
        self.holder.send_modify(|holder| {
            holder.session += 1;
            holder.attached = true;
            session = holder.session;
        });
        session
    }

    fn detached_as(&self, session: u64) -> bool {
        let holder = self.holder();
        holder.session == session && !holder.attached
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
                tail.bytes += chunk.data.len();
                tail.chunks.push_back(chunk);
            }
            while tail.chunks.len() > 1
                && (tail.chunks.len() > TAIL_MAX_CHUNKS || tail.bytes > TAIL_MAX_BYTES)
            {
                if let Some(old) = tail.chunks.pop_front() {
                    tail.bytes -= old.data.len();
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
        self.ended.cancel();
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

/// The producer's handle on a live recording, for one producer session: assigns each chunk
/// its index and offset. Dropping it without [`finish`](Self::finish) detaches the producer:
/// the recording stays live for the grace period, for a producer to resume.
#[derive(Debug)]
pub struct TapeWriter {
    store: Store,
    tape: Arc<Tape>,
    session: u64,
    next_index: u64,
    next_offset: u64,
    finished: bool,
    /// Why the producer let go, for the log and the end message if nobody resumes.
    detach_reason: Option<String>,
}

impl TapeWriter {
    /// The handle of producer session 1 of a new recording.
    pub(super) fn new(store: Store, tape: Arc<Tape>) -> Self {
        let resumed = Resumed {
            session: tape.holder().session,
            chunks: 0,
            bytes: 0,
        };
        Self::resumed(store, tape, resumed)
    }

    /// The handle of a producer session that took over after `resumed.bytes` committed bytes.
    pub(super) fn resumed(store: Store, tape: Arc<Tape>, resumed: Resumed) -> Self {
        Self {
            store,
            tape,
            session: resumed.session,
            next_index: resumed.chunks,
            next_offset: resumed.bytes,
            finished: false,
            detach_reason: None,
        }
    }

    /// The recording being written.
    pub fn tape(&self) -> &Arc<Tape> {
        &self.tape
    }

    /// This producer session.
    pub fn session(&self) -> u64 {
        self.session
    }

    /// Bytes appended so far (before this session too), committed or not.
    pub fn appended_bytes(&self) -> u64 {
        self.next_offset
    }

    /// Queues `text` as the next chunk. The returned receiver resolves after the commit that
    /// holds it, or with `Fenced` once another session has taken over; dropping it is fine
    /// (readers see the chunk once committed either way).
    ///
    /// Fails with `ShuttingDown` when the store is closed.
    pub async fn append(&mut self, text: &str) -> Result<Committed> {
        self.append_bytes(Bytes::copy_from_slice(text.as_bytes()))
            .await
    }

    /// As [`append`](Self::append), for any bytes (a byte stream's).
    ///
    /// Fails as [`append`](Self::append) does.
    pub async fn append_bytes(&mut self, data: Bytes) -> Result<Committed> {
        let len = data.len() as u64;
        let chunk = Chunk {
            index: self.next_index,
            offset: self.next_offset,
            data,
            committed_ms: 0,
        };
        let committed = self
            .store
            .append(self.tape.clone(), self.session, chunk)
            .await?;
        self.next_index += 1;
        self.next_offset += len;
        Ok(committed)
    }

    /// Queues `data` as the next chunks, with the recording's new `streams` row and, if
    /// `end` is given, its end, all in one commit. The returned handle resolves after it.
    ///
    /// Fails with `ShuttingDown` when the store is closed.
    pub async fn write_batch(
        &mut self,
        data: Vec<Bytes>,
        row: Option<StreamRow>,
        end: Option<Status>,
    ) -> Result<BatchCommitted> {
        let mut chunks = Vec::with_capacity(data.len());
        let (mut index, mut offset) = (self.next_index, self.next_offset);
        for data in data {
            let len = data.len() as u64;
            chunks.push(Chunk {
                index,
                offset,
                data,
                committed_ms: 0,
            });
            index += 1;
            offset += len;
        }
        let batch = Batch { chunks, row, end };
        let committed = self
            .store
            .write_batch(self.tape.clone(), self.session, batch)
            .await?;
        (self.next_index, self.next_offset) = (index, offset);
        if end.is_some() {
            self.finished = true;
        }
        Ok(committed)
    }

    /// Ends the recording with `status` once everything appended is committed, if this session
    /// still holds it. Returns the final progress; its status differs from `status` when the
    /// recording had already ended (cancelled, superseded, deleted, failed) before this call.
    ///
    /// Fails with `Fenced` when another session has taken over, or when the end cannot be
    /// committed.
    pub async fn finish(mut self, status: Status, message: Option<String>) -> Result<Progress> {
        self.finished = true;
        let only = EndIf::Holds(self.session);
        let ended = self
            .store
            .end_if(self.tape.clone(), only, status, message)
            .await?;
        if !ended && self.tape.progress().status.is_live() {
            return Err(Error::Fenced);
        }
        Ok(self.tape.progress())
    }

    /// Lets go of the recording without finishing it, because of `reason`.
    pub fn detach(mut self, reason: String) {
        self.detach_reason = Some(reason);
    }
}

impl Drop for TapeWriter {
    fn drop(&mut self) {
        if self.finished || !self.tape.detach(self.session) {
            return;
        }
        let reason = self
            .detach_reason
            .take()
            .unwrap_or_else(|| "the producer went away".into());
        tracing::info!(conversation = %self.tape.id, session = self.session, reason = %reason, "producer detached");
        if let Some(registry) = self.tape.registry.upgrade() {
            registry.start_grace(&self.store, &self.tape, self.session, reason);
        }
    }
}
