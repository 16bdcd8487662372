//! Finding what is at a stream's path: a handle this run holds, or one loaded from the store
//! (taking over its producer session if it is still open), noticing on the way a stream
//! collected, replaced or expired since.
//!
//! On a node of a cluster that does not lead, the store changes under it as the leader's
//! commits are applied: a stream there is read fresh from the store each time (a view), never
//! cached, and never taken over.
use std::sync::Arc;

use super::Streams;
use super::handle::{Handle, State, StreamAt};
use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::recorder::Status;
use crate::store::Lookup;
use crate::tier::Remote;

impl Streams {
    /// What is at stream `id`, loading its handle from the store if this run has not yet.
    ///
    /// Fails with a storage error.
    pub(crate) async fn find(&self, id: &ConversationId) -> Result<StreamAt> {
        if !self.writes_here() {
            return self.load_as(id, Holding::View).await;
        }
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
                    return Ok(StreamAt::SoftDeleted);
                }
                let expired = state.expired(self.now_ms());
                drop(state);
                if !expired {
                    return Ok(StreamAt::Stream(handle));
                }
                // Its time is up: gone now, whatever the sweep's schedule.
                self.remove(&handle, true).await?;
                return Ok(StreamAt::Missing);
            }
        }
        self.load(id).await
    }

    /// The handle of stream `id` when this run holds it and writes here (see `find`), without
    /// a look at its state.
    pub(super) fn open_here(&self, id: &ConversationId) -> Option<Arc<Handle>> {
        self.writes_here().then(|| self.get(id.key())).flatten()
    }

    /// Whether recording `generation` of `id` is still the one stored.
    async fn still_stored(&self, id: &ConversationId, generation: u64) -> Result<bool> {
        let store = self.recorder.deck().store();
        Ok(match store.lookup(id.key()).await? {
            Lookup::Stored(meta) => meta.generation == generation && meta.status != Status::Deleted,
            _ => false,
        })
    }

    pub(super) async fn load(&self, id: &ConversationId) -> Result<StreamAt> {
        // One load at a time: two would each take over the producer session, and the later
        // would supersede the one registered (a write arriving as the open streams are taken
        // over, on a node that has just come to lead its cluster).
        let _one_at_a_time = self.loading.lock().await;
        if let Some(handle) = self.get(id.key())
            && !handle.state.lock().await.gone
        {
            return Ok(StreamAt::Stream(handle));
        }
        self.load_as(id, Holding::Owned).await
    }

    /// Whether this node writes streams: a single node does, and a node of a cluster while it
    /// leads (the others forward their writes to it).
    pub(super) fn writes_here(&self) -> bool {
        let store = self.recorder.deck().store();
        !store.is_replicated() || store.leads()
    }

    async fn load_as(&self, id: &ConversationId, holding: Holding) -> Result<StreamAt> {
        let store = self.recorder.deck().store();
        let meta = match store.lookup(id.key()).await? {
            Lookup::Stored(meta) if meta.status != Status::Deleted => meta,
            Lookup::Unknown => return self.load_sealed(id, holding).await,
            _ => return Ok(StreamAt::Missing),
        };
        let Some(row) = store.stream_row(id.key()).await? else {
            return Ok(StreamAt::Recording);
        };
        if row.soft_deleted {
            return Ok(StreamAt::SoftDeleted);
        }
        let mut state = State {
            row,
            generation: meta.generation,
            writer: None,
            own: meta.byte_len,
            closed: !meta.status.is_live(),
            cancelled: meta.status == Status::Cancelled,
            gone: false,
            touched_ms: self.now_ms(),
        };
        if !state.closed && holding == Holding::Owned {
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
        self.register(id, state, holding).await
    }

    /// A stream that only the object store holds (sealed, so closed), loaded from its copy.
    async fn load_sealed(&self, id: &ConversationId, holding: Holding) -> Result<StreamAt> {
        let Some(Remote::Sealed(sealed)) = self.recorder.deck().remote(id.key()).await? else {
            return Ok(StreamAt::Missing);
        };
        let meta = &sealed.header.meta;
        let Some(row) = sealed.header.stream_row.clone() else {
            return Ok(StreamAt::Recording);
        };
        if row.soft_deleted {
            return Ok(StreamAt::SoftDeleted);
        }
        let state = State {
            row,
            generation: meta.generation,
            writer: None,
            own: meta.byte_len,
            closed: true,
            cancelled: meta.status == Status::Cancelled,
            gone: false,
            touched_ms: self.now_ms(),
        };
        self.register(id, state, holding).await
    }

    /// The handle of a stream just loaded as `state`; a view is not registered, and its
    /// expiry is the leader's to act on.
    async fn register(
        &self,
        id: &ConversationId,
        state: State,
        holding: Holding,
    ) -> Result<StreamAt> {
        let handle = Arc::new(Handle {
            id: id.clone(),
            state: tokio::sync::Mutex::new(state),
        });
        if holding == Holding::View {
            if handle.state.lock().await.expired(self.now_ms()) {
                return Ok(StreamAt::Missing);
            }
            return Ok(StreamAt::Stream(handle));
        }
        // Loads are one at a time: what this one read of the store is the stream now.
        self.handles().insert(id.key(), handle.clone());
        if handle.state.lock().await.expired(self.now_ms()) {
            self.remove(&handle, true).await?;
            return Ok(StreamAt::Missing);
        }
        Ok(StreamAt::Stream(handle))
    }
}

/// How a loaded stream is held.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Holding {
    /// Registered, its producer session taken over while it is open: this node writes it.
    Owned,
    /// Read from the store for one request, not registered: another node writes it.
    View,
}
