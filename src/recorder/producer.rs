//! `Producer`: one producer's session on a live recording. Checks each incoming message
//! against the session's id and the size limits, and appends its content.
use std::sync::Arc;

use tokio::sync::watch;

use super::Limits;
use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::store::{Committed, Progress, Status, Tape, TapeWriter};

/// A producer's session on a live recording. Dropping it ends the recording as `interrupted`.
#[derive(Debug)]
pub struct Producer {
    id: ConversationId,
    writer: TapeWriter,
    limits: Limits,
    progress: watch::Receiver<Progress>,
}

impl Producer {
    pub(super) fn new(id: ConversationId, writer: TapeWriter, limits: Limits) -> Self {
        let progress = writer.tape().subscribe();
        Self {
            id,
            writer,
            limits,
            progress,
        }
    }

    /// The conversation being recorded.
    pub fn id(&self) -> &ConversationId {
        &self.id
    }

    /// The live recording.
    pub fn tape(&self) -> &Arc<Tape> {
        self.writer.tape()
    }

    /// Bytes appended so far, committed or not.
    pub fn appended_bytes(&self) -> u64 {
        self.writer.appended_bytes()
    }

    /// Checks a later message's id (empty, or the same conversation in any form) and appends
    /// its non-empty content as one chunk. Returns the commit receiver, or `None` for no content.
    ///
    /// Fails with `ConversationIdChanged`, `InvalidConversationId`, `ChunkTooLarge`,
    /// `RecordingTooLarge`, or `ShuttingDown`. A failed message appends nothing.
    pub async fn accept(
        &mut self,
        conversation_id: &[u8],
        content: &str,
    ) -> Result<Option<Committed>> {
        if !conversation_id.is_empty()
            && conversation_id != self.id.original()
            && ConversationId::parse(conversation_id)?.key() != self.id.key()
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
        let size = self.writer.appended_bytes() + content.len() as u64;
        if size > self.limits.max_recording_bytes {
            return Err(Error::RecordingTooLarge {
                size,
                max: self.limits.max_recording_bytes,
            });
        }
        self.writer.append(content).await.map(Some)
    }

    /// Waits until the recording ends by another hand (cancel, supersede, idle timeout,
    /// shutdown, storage failure) and returns its final progress.
    pub async fn ended(&mut self) -> Progress {
        match self.progress.wait_for(|p| !p.status.is_live()).await {
            Ok(progress) => *progress,
            // The sender lives in the tape we hold, so this cannot happen; report it as is.
            Err(_) => self.writer.tape().progress(),
        }
    }

    /// Finishes the recording as `completed` once all its chunks are committed. The returned
    /// progress says how it really ended (it may have been cancelled or superseded first).
    pub async fn complete(self) -> Result<Progress> {
        self.writer.finish(Status::Completed, None).await
    }

    /// Ends the recording as `interrupted` because the producer failed with `reason`.
    pub async fn interrupt(self, reason: String) {
        if let Err(err) = self.writer.finish(Status::Interrupted, Some(reason)).await {
            tracing::warn!(error = %err, "could not record an interrupted recording");
        }
    }
}
