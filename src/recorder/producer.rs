//! `Producer`: one producer's session on a live recording. Checks each incoming message
//! against the session's id and the size limits, and appends its content.
use std::sync::Arc;

use tokio::sync::watch;

use super::Limits;
use super::status::{Progress, Status};
use super::tape::{Tape, TapeWriter};
use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::store::Committed;

/// A producer's session on a live recording. Dropping it before it completes ends the
/// recording as `interrupted`.
#[derive(Debug)]
pub struct Producer {
    tape: Arc<Tape>,
    /// `None` once the session has completed.
    writer: Option<TapeWriter>,
    limits: Limits,
    progress: watch::Receiver<Progress>,
}

impl Producer {
    pub(super) fn new(writer: TapeWriter, limits: Limits) -> Self {
        let tape = writer.tape().clone();
        let progress = tape.subscribe();
        Self {
            tape,
            writer: Some(writer),
            limits,
            progress,
        }
    }

    /// The conversation being recorded.
    pub fn id(&self) -> &ConversationId {
        self.tape.id()
    }

    /// Bytes appended so far, committed or not.
    pub fn appended_bytes(&self) -> u64 {
        self.writer
            .as_ref()
            .map_or(self.tape.progress().bytes, TapeWriter::appended_bytes)
    }

    /// What is committed of the recording now, and its status.
    pub fn progress(&self) -> Progress {
        self.tape.progress()
    }

    /// A receiver that wakes whenever more of the recording is committed, or it ends.
    pub fn subscribe(&self) -> watch::Receiver<Progress> {
        self.tape.subscribe()
    }

    /// Why the recording ended, when there is more to say than its status; fit for clients.
    pub fn end_message(&self) -> Option<&str> {
        self.tape.end_message()
    }

    /// Checks a later message's id (empty, or the same conversation in any form) and appends
    /// its non-empty content as one chunk. Returns the commit receiver, or `None` for no content.
    ///
    /// Fails with `ConversationIdChanged`, `InvalidConversationId`, `ChunkTooLarge`,
    /// `RecordingTooLarge`, `RecordingEnded` after [`complete`](Self::complete), or
    /// `ShuttingDown`. A failed message appends nothing.
    pub async fn accept(
        &mut self,
        conversation_id: &[u8],
        content: &str,
    ) -> Result<Option<Committed>> {
        let id = self.tape.id();
        if !conversation_id.is_empty()
            && conversation_id != id.original()
            && ConversationId::parse(conversation_id)?.key() != id.key()
        {
            return Err(Error::ConversationIdChanged);
        }
        if content.is_empty() {
            return Ok(None);
        }
        if content.len() > self.limits.max_chunk_bytes {
            return Err(Error::ChunkTooLarge {
                size: content.len(),
                max: self.limits.max_chunk_bytes,
            });
        }
        let writer = self.writer.as_mut().ok_or(Error::RecordingEnded)?;
        let size = writer.appended_bytes() + content.len() as u64;
        if size > self.limits.max_recording_bytes {
            return Err(Error::RecordingTooLarge {
                size,
                max: self.limits.max_recording_bytes,
            });
        }
        writer.append(content).await.map(Some)
    }

    /// Waits until the recording ends by another hand (cancel, supersede, idle timeout,
    /// shutdown, storage failure) and returns its final progress.
    pub async fn ended(&mut self) -> Progress {
        match self.progress.wait_for(|p| !p.status.is_live()).await {
            Ok(progress) => *progress,
            // The sender lives in the tape we hold, so this cannot happen; report it as is.
            Err(_) => self.tape.progress(),
        }
    }

    /// Finishes the recording as `completed` once all its chunks are committed. The returned
    /// progress says how it really ended (it may have been cancelled or superseded first).
    ///
    /// Fails when the end cannot be committed, or was already asked for.
    pub async fn complete(&mut self) -> Result<Progress> {
        let writer = self.writer.take().ok_or(Error::RecordingEnded)?;
        writer.finish(Status::Completed, None).await
    }

    /// Ends the recording as `interrupted` because the producer failed with `reason`.
    pub async fn interrupt(mut self, reason: String) {
        let Some(writer) = self.writer.take() else {
            return;
        };
        if let Err(err) = writer.finish(Status::Interrupted, Some(reason)).await {
            tracing::warn!(conversation = %self.tape.id(), error = %err, "could not record an interrupted recording");
        }
    }
}
