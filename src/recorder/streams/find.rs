//! Finding what is at a stream's path: a handle this run holds, or one loaded from the store
//! (taking over its producer session if it is still open), noticing on the way a stream
//! collected, replaced or expired since.
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

    /// Whether recording `generation` of `id` is still the one stored.
    async fn still_stored(&self, id: &ConversationId, generation: u64) -> Result<bool> {
        let store = self.recorder.deck().store();
        Ok(match store.lookup(id.key()).await? {
            Lookup::Stored(meta) => meta.generation == generation && meta.status != Status::Deleted,
            _ => false,
        })
    }

    pub(super) async fn load(&self, id: &ConversationId) -> Result<StreamAt> {
        let store = self.recorder.deck().store();
        let meta = match store.lookup(id.key()).await? {
            Lookup::Stored(meta) if meta.status != Status::Deleted => meta,
            Lookup::Unknown => return self.load_sealed(id).await,
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
        self.register(id, state).await
    }

    /// A stream that only the object store holds (sealed, so closed), loaded from its copy.
    async fn load_sealed(&self, id: &ConversationId) -> Result<StreamAt> {
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
            gone: false,
            touched_ms: self.now_ms(),
        };
        self.register(id, state).await
    }

    /// The handle of a stream just loaded as `state`, unless another load registered one.
    async fn register(&self, id: &ConversationId, state: State) -> Result<StreamAt> {
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
            return Ok(StreamAt::Missing);
        }
        Ok(StreamAt::Stream(handle))
    }
}
