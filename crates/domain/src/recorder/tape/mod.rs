//! A live recording in memory: its committed high-water mark (a `watch` that readers wait on),
//! the most recent committed chunks (so live readers rarely touch the disk), which producer
//! session holds it, and the producer's handle that appends to it ([`TapeWriter`], in
//! `writer`; the in-memory chunks in `tail`). The commit pipeline moves it on through
//! [`LiveRecording`].
//!
//! A producer that lets go without finishing *detaches*: the recording stays live, readers
//! keep following, and it ends as `interrupted` only if no producer resumes it within the
//! grace period. A resume starts a new producer session; the pipeline refuses appends of
//! older sessions from then on (fencing).
mod rendering;
mod tail;
mod writer;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::progress::{Progress, Status};
use super::registry::Registry;
use crate::error::Error;
use crate::id::ConversationId;
use crate::store::{Chunk, LiveRecording};
pub use rendering::Place;
pub(crate) use rendering::Rendering;
use tail::Tail;
pub use writer::TapeWriter;

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
    /// The last stretch a face rendered for its readers, for the others at the same place.
    rendering: Mutex<Option<Rendering>>,
    last_activity_ms: AtomicU64,
    /// Set by the pipeline when it accepts the op that ends the tape; later ops are refused.
    closed: AtomicBool,
    /// Set when its node of a cluster stopped leading: later ops are refused as not
    /// committable here (its counters may be behind what the next leader commits).
    deposed: AtomicBool,
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
    /// Wakes every reader waiting on this tape once, with nothing new: each looks again (at
    /// its own clock, say) and waits again.
    pub(crate) fn nudge_readers(&self) {
        self.progress.send_modify(|_| {});
    }

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
            rendering: Mutex::new(None),
            last_activity_ms: AtomicU64::new(now_ms),
            closed: AtomicBool::new(false),
            deposed: AtomicBool::new(false),
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

    /// Refuses every later op as not committable here: its node of a cluster stopped leading.
    pub(super) fn depose(&self) {
        self.deposed.store(true, Ordering::Release);
        self.closed.store(true, Ordering::Release);
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
        tail.from(index, || self.progress().chunks)
    }

    /// Leaves `rendering` for the readers at its start, in place of the last one.
    pub(crate) fn leave_rendering(&self, rendering: Rendering) {
        *self.rendering.lock().unwrap_or_else(|e| e.into_inner()) = Some(rendering);
    }

    /// The bytes of the rendering left as `kind` from `from`, and where it ends, if that is
    /// the one left.
    pub(crate) fn rendering(&self, kind: u8, from: Place) -> Option<(Bytes, Place)> {
        let rendering = self.rendering.lock().unwrap_or_else(|e| e.into_inner());
        rendering
            .as_ref()
            .filter(|r| r.kind == kind && r.from == from)
            .map(|r| (r.bytes.clone(), r.to))
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
        if self.deposed.load(Ordering::Acquire) {
            return Error::NoQuorum {
                leader: None,
                leader_address: None,
            };
        }
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
        self.tail
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(chunks);
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
