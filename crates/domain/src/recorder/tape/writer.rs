//! `TapeWriter`: one producer session's handle on a live recording. It numbers each chunk
//! (index and byte offset), hands appends, batches and the end to the commit pipeline, and
//! detaches the producer when dropped unfinished, starting the grace period.
use std::sync::Arc;

use bytes::Bytes;

use super::Tape;
use crate::error::{Error, Result};
use crate::recorder::progress::{Progress, Status};
use crate::store::{Batch, BatchCommitted, Chunk, Committed, EndIf, Resumed, Store, StreamRow};

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
    pub(in crate::recorder) fn new(store: Store, tape: Arc<Tape>) -> Self {
        let resumed = Resumed {
            session: tape.holder().session,
            chunks: 0,
            bytes: 0,
        };
        Self::resumed(store, tape, resumed)
    }

    /// The handle of a producer session that took over after `resumed.bytes` committed bytes.
    pub(in crate::recorder) fn resumed(store: Store, tape: Arc<Tape>, resumed: Resumed) -> Self {
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
