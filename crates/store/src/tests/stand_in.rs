//! A stand-in for the recorder above the store: [`Recording`] implements the store's
//! [`LiveRecording`] hooks and keeps what the pipeline published to it; [`Recordings`] is
//! the registry of live ones (one per conversation, a limit, supersede) that a start's
//! admission decides with; [`Producer`] is one producer session's appends and end. Just enough
//! of a recorder for the store's tests, which so do not depend on the layer above.
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use bytes::Bytes;
use tokio::sync::watch;

use super::super::live::{Admission, Admit, Admitted, Chunk, Committed, LiveRecording};
use super::super::{EndIf, RecoveredLive, Store};
use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::status::Status;

/// What is published of a recording: its committed chunks and bytes, and its status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Progress {
    pub chunks: u64,
    pub bytes: u64,
    pub status: Status,
}

/// Which producer session holds a recording, and whether it is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Holder {
    pub session: u64,
    pub attached: bool,
}

/// A live recording as the store's tests see it: what the pipeline told it, and nothing else.
pub(crate) struct Recording {
    id: ConversationId,
    generation: u64,
    closed: AtomicBool,
    holder: Mutex<Holder>,
    last_activity_ms: AtomicU64,
    timed_chunks: bool,
    progress: watch::Sender<Progress>,
    end_message: OnceLock<String>,
    /// Every chunk published to it, in order.
    published: Mutex<Vec<Chunk>>,
    registry: Weak<Registry>,
}

impl Recording {
    fn new(
        id: ConversationId,
        generation: u64,
        (chunks, bytes): (u64, u64),
        holder: Holder,
        timed_chunks: bool,
        registry: Weak<Registry>,
    ) -> Arc<Self> {
        let progress = Progress {
            chunks,
            bytes,
            status: Status::Recording,
        };
        Arc::new(Recording {
            id,
            generation,
            closed: AtomicBool::new(false),
            holder: Mutex::new(holder),
            last_activity_ms: AtomicU64::new(0),
            timed_chunks,
            progress: watch::Sender::new(progress),
            end_message: OnceLock::new(),
            published: Mutex::new(Vec::new()),
            registry,
        })
    }

    pub(crate) fn progress(&self) -> Progress {
        *self.progress.borrow()
    }

    /// Changes of [`progress`](Self::progress), as a reader would follow them.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Progress> {
        self.progress.subscribe()
    }

    pub(crate) fn end_message(&self) -> Option<&str> {
        self.end_message.get().map(String::as_str)
    }

    pub(crate) fn holder(&self) -> Holder {
        *self.holder.lock().unwrap()
    }

    /// Every chunk the pipeline published to it, in order.
    pub(crate) fn published(&self) -> Vec<Chunk> {
        self.published.lock().unwrap().clone()
    }
}

impl LiveRecording for Recording {
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
        let mut holder = self.holder.lock().unwrap();
        holder.session += 1;
        holder.attached = true;
        holder.session
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
        self.published.lock().unwrap().extend(chunks);
        self.progress.send_modify(|p| {
            p.chunks = count;
            p.bytes = bytes;
        });
    }

    fn publish_end(&self, status: Status, message: Option<String>) {
        if let Some(registry) = self.registry.upgrade() {
            registry.unregister(self);
        }
        if let Some(message) = message {
            let _ = self.end_message.set(message);
        }
        self.progress.send_modify(|p| p.status = status);
    }
}

/// The live recordings, one per conversation, at most `max_live` of them.
struct Registry {
    live: Mutex<HashMap<u128, Arc<Recording>>>,
    max_live: usize,
}

impl Registry {
    fn unregister(&self, recording: &Recording) {
        let mut live = self.live.lock().unwrap();
        let key = recording.key();
        if live
            .get(&key)
            .is_some_and(|held| std::ptr::eq(Arc::as_ptr(held), recording))
        {
            live.remove(&key);
        }
    }
}

/// The store and the stand-in registry of its live recordings.
#[derive(Clone)]
pub(crate) struct Recordings {
    store: Store,
    registry: Arc<Registry>,
}

impl std::fmt::Debug for Recordings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recordings").finish_non_exhaustive()
    }
}

impl Recordings {
    /// Over `store`, taking the recordings its last run left live as detached ones.
    pub(crate) fn new(store: Store, max_live: usize) -> Self {
        let registry = Arc::new(Registry {
            live: Mutex::new(HashMap::new()),
            max_live,
        });
        for RecoveredLive {
            id,
            generation,
            chunks,
            bytes,
            timed_chunks,
            ..
        } in store.take_recovered()
        {
            let key = id.key();
            let detached = Holder {
                session: 0,
                attached: false,
            };
            let weak = Arc::downgrade(&registry);
            let recording = Recording::new(
                id,
                generation,
                (chunks, bytes),
                detached,
                timed_chunks,
                weak,
            );
            registry.live.lock().unwrap().insert(key, recording);
        }
        Self { store, registry }
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// Starts a recording of `id`, superseding a live one of it, within the live limit.
    pub(crate) async fn start(&self, id: &ConversationId) -> Result<Producer> {
        let registry = self.registry.clone();
        let starting = id.clone();
        let (made, recording) = tokio::sync::oneshot::channel();
        let admit: Admit = Box::new(move |admission: Admission<'_>| {
            let generation = admission.previous.map_or(1, |p| p.generation + 1);
            let mut live = registry.live.lock().unwrap();
            let key = starting.key();
            if !live.contains_key(&key) && live.len() >= registry.max_live {
                return Err(Error::TooManyLiveRecordings {
                    max: registry.max_live,
                });
            }
            let holder = Holder {
                session: 1,
                attached: true,
            };
            let weak = Arc::downgrade(&registry);
            let recording = Recording::new(starting, generation, (0, 0), holder, true, weak);
            // The replaced one takes no more ops from now on (an ended one is not replaced).
            let replaced = live
                .insert(key, recording.clone())
                .filter(|old| old.close());
            let _ = made.send(recording.clone());
            Ok(Admitted {
                live: recording,
                replaced: replaced.map(|old| old as _),
                reopen: false,
            })
        });
        self.store.start(id, None, None, admit).await?;
        let recording = recording.await.map_err(|_| Error::ShuttingDown)?;
        Ok(Producer {
            store: self.store.clone(),
            recording,
            session: 1,
            next_index: 0,
            next_offset: 0,
        })
    }

    /// Ends `recording` with `status`; whether this call ended it.
    pub(crate) async fn end(
        &self,
        recording: &Arc<Recording>,
        status: Status,
        message: Option<String>,
    ) -> Result<bool> {
        self.store.end(recording.clone(), status, message).await
    }

    pub(crate) fn live(&self, key: u128) -> Option<Arc<Recording>> {
        self.registry.live.lock().unwrap().get(&key).cloned()
    }

    pub(crate) fn live_recordings(&self) -> Vec<Arc<Recording>> {
        self.registry
            .live
            .lock()
            .unwrap()
            .values()
            .cloned()
            .collect()
    }
}

/// One producer session of a recording: its appends, numbered and placed, and its end.
pub(crate) struct Producer {
    store: Store,
    recording: Arc<Recording>,
    session: u64,
    next_index: u64,
    next_offset: u64,
}

impl Producer {
    pub(crate) fn recording(&self) -> &Arc<Recording> {
        &self.recording
    }

    pub(crate) fn session(&self) -> u64 {
        self.session
    }

    /// Queues `text` as the next chunk; the receiver resolves after its commit.
    pub(crate) async fn append(&mut self, text: &str) -> Result<Committed> {
        let data = Bytes::copy_from_slice(text.as_bytes());
        let len = data.len() as u64;
        let chunk = Chunk {
            index: self.next_index,
            offset: self.next_offset,
            data,
            committed_ms: 0,
        };
        let recording = self.recording.clone();
        let committed = self.store.append(recording, self.session, chunk).await?;
        self.next_index += 1;
        self.next_offset += len;
        Ok(committed)
    }

    /// Ends the recording with `status` while this session holds it; its progress after.
    /// Fails with `Fenced` if another session holds it and it is still live.
    pub(crate) async fn finish(self, status: Status, message: Option<String>) -> Result<Progress> {
        let only = EndIf::Holds(self.session);
        let recording = self.recording.clone();
        let ended = self.store.end_if(recording, only, status, message).await?;
        if !ended && self.recording.progress().status.is_live() {
            return Err(Error::Fenced);
        }
        Ok(self.recording.progress())
    }
}
