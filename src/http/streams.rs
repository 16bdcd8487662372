//! The streams the HTTP face serves, by storage key: each stream made over HTTP has a handle
//! here holding its `streams` row and, while it is open, the producer session that writes it;
//! the handle's lock serializes a stream's writes (the protocol asks this per producer). A
//! recording made over gRPC has no handle: it is read-only here, `text/plain`.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::recorder::{Recorder, Status, TapeWriter};
use crate::store::{Lookup, StreamRow};

/// The content type of a recording made over gRPC, read here.
pub(crate) const GRPC_CONTENT_TYPE: &str = "text/plain; charset=utf-8";

/// A stream made over HTTP.
pub(crate) struct Handle {
    pub(crate) id: ConversationId,
    pub(crate) state: tokio::sync::Mutex<State>,
}

/// A stream's state, under its handle's lock.
pub(crate) struct State {
    pub(crate) row: StreamRow,
    /// Which of the conversation's recordings this stream is.
    pub(crate) generation: u64,
    /// The producer session writing it, while it is open.
    pub(crate) writer: Option<TapeWriter>,
    /// Bytes of its own recording: the tail is `base + own`.
    pub(crate) own: u64,
    /// Closed (or ended any other way): no more appends.
    pub(crate) closed: bool,
    /// Deleted or expired: this handle is stale.
    pub(crate) gone: bool,
    /// When it was last read or written, for its sliding TTL.
    pub(crate) touched_ms: u64,
}

impl State {
    /// Where its own bytes start: its fork offset, else 0.
    pub(crate) fn base(&self) -> u64 {
        self.row.fork.as_ref().map_or(0, |f| f.offset)
    }

    /// Its tail offset.
    pub(crate) fn tail(&self) -> u64 {
        self.base() + self.own
    }

    /// Whether its TTL or expiry time has passed at `now_ms`.
    pub(crate) fn expired(&self, now_ms: u64) -> bool {
        let ttl_passed = self
            .row
            .ttl_secs
            .is_some_and(|ttl| now_ms >= self.touched_ms.saturating_add(ttl.saturating_mul(1000)));
        let expiry_passed = self.row.expires_at_ms.is_some_and(|at| now_ms >= at);
        ttl_passed || expiry_passed
    }

    /// Notices an end it did not make (a gRPC cancel, a failed commit, a newer recording).
    pub(crate) fn refresh(&mut self) {
        if let Some(writer) = &self.writer {
            let progress = writer.tape().progress();
            self.own = progress.bytes;
            if !progress.status.is_live() {
                self.writer = None;
                self.closed = true;
            }
        }
    }
}

/// What a request finds at a stream's path.
pub(crate) enum Found {
    /// A stream made over HTTP.
    Stream(Arc<Handle>),
    /// A recording made over gRPC: read-only here.
    Recording,
    /// Deleted while forks read from it: 410 Gone.
    SoftDeleted,
    /// Nothing.
    Missing,
}

/// Every stream made over HTTP that this run has touched.
pub(crate) struct Streams {
    pub(crate) recorder: Recorder,
    handles: Mutex<HashMap<u128, Arc<Handle>>>,
}

impl Streams {
    pub(crate) fn new(recorder: Recorder) -> Self {
        Self {
            recorder,
            handles: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn now_ms(&self) -> u64 {
        self.recorder.recordings().store().clock().now_ms()
    }

    fn handles(&self) -> std::sync::MutexGuard<'_, HashMap<u128, Arc<Handle>>> {
        self.handles.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every handle, for the expiry sweep and shutdown.
    pub(crate) fn all(&self) -> Vec<Arc<Handle>> {
        self.handles().values().cloned().collect()
    }

    /// `key`'s handle, if this run has loaded it.
    pub(crate) fn get(&self, key: u128) -> Option<Arc<Handle>> {
        self.handles().get(&key).cloned()
    }

    /// Forgets `key`'s handle (after a delete or an expiry).
    pub(crate) fn forget(&self, key: u128) {
        self.handles().remove(&key);
    }

    /// Registers a handle made by a create.
    pub(crate) fn insert(&self, handle: Arc<Handle>) {
        self.handles().insert(handle.id.key(), handle);
    }

    /// What is at stream `id`, loading its handle from the store if this run has not yet
    /// (and taking over its producer session if it is still open).
    ///
    /// Fails with a storage error.
    pub(crate) async fn find(&self, id: &ConversationId) -> Result<Found> {
        let cached = self.get(id.key());
        if let Some(handle) = cached {
            let mut state = handle.state.lock().await;
            state.refresh();
            if state.closed && !state.gone && !self.still_stored(id, state.generation).await? {
                // Collected by the sweeper, or replaced by a newer recording since.
                state.gone = true;
                self.forget(id.key());
            }
            if !state.gone {
                if state.row.soft_deleted {
                    return Ok(Found::SoftDeleted);
                }
                let expired = state.expired(self.now_ms());
                drop(state);
                if !expired {
                    return Ok(Found::Stream(handle));
                }
                // Its time is up: gone now, whatever the sweep's schedule.
                self.remove(&handle, true).await?;
                return Ok(Found::Missing);
            }
        }
        self.load(id).await
    }

    /// Whether recording `generation` of `id` is still the one stored.
    async fn still_stored(&self, id: &ConversationId, generation: u64) -> Result<bool> {
        let store = self.recorder.recordings().store();
        Ok(match store.lookup(id.key()).await? {
            Lookup::Stored(meta) => meta.generation == generation && meta.status != Status::Deleted,
            _ => false,
        })
    }

    async fn load(&self, id: &ConversationId) -> Result<Found> {
        let store = self.recorder.recordings().store();
        let meta = match store.lookup(id.key()).await? {
            Lookup::Stored(meta) if meta.status != Status::Deleted => meta,
            _ => return Ok(Found::Missing),
        };
        let Some(row) = store.stream_row(id.key()).await? else {
            return Ok(Found::Recording);
        };
        if row.soft_deleted {
            return Ok(Found::SoftDeleted);
        }
        let mut state = State {
            row,
            generation: meta.generation,
            writer: None,
            own: meta.byte_len,
            closed: !meta.status.is_live(),
            gone: false,
            touched_ms: self.now_ms(),
        };
        if !state.closed {
            match self.take_over(id, meta.byte_len).await {
                Ok(writer) => {
                    state.own = writer.appended_bytes();
                    state.writer = Some(writer);
                }
                // Not taken over because the server is stopping: still open in the file.
                Err(Error::ShuttingDown) => return Err(Error::ShuttingDown),
                Err(err) if !err.is_storage() => state.closed = true,
                Err(err) => return Err(err),
            }
        }
        let handle = Arc::new(Handle {
            id: id.clone(),
            state: tokio::sync::Mutex::new(state),
        });
        // Two loads may race: the first registered wins, and the other's session is fenced.
        let handle = self
            .handles()
            .entry(id.key())
            .or_insert_with(|| handle.clone())
            .clone();
        if handle.state.lock().await.expired(self.now_ms()) {
            self.remove(&handle, true).await?;
            return Ok(Found::Missing);
        }
        Ok(Found::Stream(handle))
    }

    /// A producer session on open stream `id`, whose `committed` bytes are stored.
    ///
    /// Fails with `ShuttingDown` once the server has begun to stop (the stream stays open in
    /// the file, for the next run), or as [`crate::recorder::Recordings::resume`] does.
    async fn take_over(&self, id: &ConversationId, committed: u64) -> Result<TapeWriter> {
        if self.recorder.is_shutting_down() {
            return Err(Error::ShuttingDown);
        }
        let committed = match self.recorder.recordings().live(id.key()) {
            Some(tape) => tape.progress().bytes,
            None => committed,
        };
        let writer = self
            .recorder
            .recordings()
            .resume(id, committed, None)
            .await?;
        writer.tape().hold_open();
        Ok(writer)
    }

    /// Takes over every open stream the store holds, so that none reaches the end of its
    /// grace period after a restart.
    ///
    /// Fails with a storage error.
    pub(crate) async fn adopt_open(&self) -> Result<usize> {
        let mut adopted = 0;
        for tape in self.recorder.recordings().live_tapes() {
            if tape.holder().attached {
                continue;
            }
            let store = self.recorder.recordings().store();
            if store.stream_row(tape.key()).await?.is_some() {
                self.load(tape.id()).await?;
                adopted += 1;
            }
        }
        Ok(adopted)
    }

    /// Ends and forgets every stream whose TTL or expiry time has passed.
    pub(crate) async fn expire(&self) {
        let now = self.now_ms();
        for handle in self.all() {
            let expired = {
                let state = handle.state.lock().await;
                !state.gone && state.expired(now)
            };
            if expired && let Err(err) = self.remove(&handle, true).await {
                tracing::warn!(stream = %handle.id, error = %err, "could not delete an expired stream");
            }
        }
    }

    /// Deletes `handle`'s stream: soft-deleted while forks read from it (unless it
    /// `expired`, when it goes for clients all the same), else deleted with its data.
    ///
    /// Fails with a storage error.
    pub(crate) async fn remove(&self, handle: &Handle, expired: bool) -> Result<()> {
        let mut state = handle.state.lock().await;
        if let Some(writer) = state.writer.take() {
            // Ended first: its readers stop, and a producer can no longer write to it.
            let message = Some("the stream was deleted".to_string());
            match writer.finish(Status::Cancelled, message).await {
                Ok(_) | Err(Error::Fenced) => {}
                Err(err) => return Err(err),
            }
        }
        state.closed = true;
        let key = handle.id.key();
        if state.row.forks > 0 {
            state.row.soft_deleted = true;
            let store = self.recorder.recordings().store();
            store.put_stream_row(key, Some(&state.row)).await?;
            if expired {
                state.gone = true;
            }
            return Ok(());
        }
        self.recorder.delete(&handle.id).await?;
        state.gone = true;
        let mut source = state.row.fork.as_ref().map(|f| f.source);
        drop(state);
        self.forget(key);
        // The store released the sources up the chain; their handles follow.
        while let Some(key) = source {
            source = self.reload_row(key).await?;
        }
        Ok(())
    }

    /// Reads `key`'s row again (the store changed its fork count). A source whose last fork
    /// went is gone; then returns its own source, whose count changed too.
    async fn reload_row(&self, key: u128) -> Result<Option<u128>> {
        let cached = self.get(key);
        let Some(handle) = cached else {
            return Ok(None);
        };
        let row = self.recorder.recordings().store().stream_row(key).await?;
        let mut state = handle.state.lock().await;
        match row {
            Some(row) if !(row.soft_deleted && row.forks == 0) => {
                state.row = row;
                Ok(None)
            }
            _ => {
                state.gone = true;
                let up = state.row.fork.as_ref().map(|f| f.source);
                drop(state);
                self.forget(key);
                Ok(up)
            }
        }
    }

    /// Lets go of every open stream's producer session (at shutdown): they stay open in the
    /// file, and are taken over again at the next start.
    pub(crate) async fn release_all(&self) {
        for handle in self.all() {
            let mut state = handle.state.lock().await;
            if let Some(writer) = state.writer.take() {
                writer.detach("server shutting down".into());
            }
            state.gone = true;
        }
        self.handles().clear();
    }
}
