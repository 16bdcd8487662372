//! Deleting a stream, by request or because its time is up. The store decides between a soft
//! delete (forks still read from it: gone for clients, its data kept for them) and a delete
//! with its data, in the transaction that reads its fork count; a source whose last fork goes
//! is deleted then, up the lineage.
use super::handle::{Handle, StreamAt};
use super::{StreamRefused, Streams};
use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::recorder::Status;

impl Streams {
    /// Deletes stream `id` (or the recording made over gRPC at its path).
    ///
    /// Refused when there is none, when it was deleted already while forks read from it, or
    /// with `Failed(ShuttingDown)` once the server has begun to stop.
    pub async fn delete(&self, id: &ConversationId) -> std::result::Result<(), StreamRefused> {
        self.refuse_if_stopping()?;
        match self.find(id).await? {
            StreamAt::Stream(handle) => self.remove(&handle, false).await?,
            StreamAt::Recording => {
                self.recorder.delete(id).await?;
            }
            StreamAt::SoftDeleted => return Err(StreamRefused::Gone),
            StreamAt::Missing => return Err(StreamRefused::Missing),
        }
        tracing::info!(stream = %id, "stream deleted");
        Ok(())
    }

    /// Deletes `handle`'s stream: soft-deleted while forks read from it (unless it `expired`,
    /// when it goes for clients all the same), else deleted with its data.
    ///
    /// Fails with a storage error.
    pub(super) async fn remove(&self, handle: &Handle, expired: bool) -> Result<()> {
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
        self.recorder.delete(&handle.id).await?;
        let store = self.recorder.deck().store();
        if let Some(row) = store.stream_row(key).await?
            && row.soft_deleted
        {
            // Forks read from it: the store kept it, deleted for clients only.
            state.row.soft_deleted = true;
            state.row.forks = row.forks;
            if expired {
                state.gone = true;
            }
            return Ok(());
        }
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
        let row = self.recorder.deck().store().stream_row(key).await?;
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
}
