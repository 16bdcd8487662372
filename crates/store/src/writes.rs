//! The writes of one recording's life, each queued to the commit pipeline: its start, a
//! producer taking it over, its chunks, its end.
use tokio::sync::{mpsc, oneshot};

use super::Store;
use super::live::{Admit, Chunk, Committed, Live, Resumed};
use super::ops::{EndIf, Op};
use super::stream_row::StreamRow;
use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::status::Status;

impl Store {
    /// Starts a recording of `id`: a new one replacing (and deleting, in the same commit)
    /// whatever the conversation held before, or the stored one made live again, as `admit`
    /// decides in queue order; a live recording it replaces is told it was superseded after
    /// the commit. A new recording is kept for `retention_ms` once finished, when given, and
    /// gets `stream_row` as its `streams` row in the same commit.
    /// Returns once the start is committed.
    ///
    /// Fails with `admit`'s refusal, `ShuttingDown`, or a storage error.
    pub async fn start(
        &self,
        id: &ConversationId,
        retention_ms: Option<u64>,
        stream_row: Option<&StreamRow>,
        admit: Admit,
    ) -> Result<()> {
        let (done, answer) = oneshot::channel();
        let id = id.clone();
        let stream_row = stream_row.map(StreamRow::encode).transpose()?;
        let op = Op::Start {
            id,
            retention_ms,
            stream_row,
            admit,
            done,
        };
        self.submit(op).await?;
        answer.await.map_err(|_| Error::ShuttingDown)?
    }

    /// Hands live recording `live` to a new producer session, once everything queued before
    /// is committed; returns the session and what is committed before it.
    ///
    /// Fails with `ResumePastEnd` when `resume_from` is past what is committed (nothing
    /// changes then), the recording's end error if it has ended, `ShuttingDown`, or a
    /// storage error.
    pub async fn attach(&self, live: Live, resume_from: u64) -> Result<Resumed> {
        let (done, answer) = oneshot::channel();
        let op = Op::Attach {
            live,
            resume_from,
            done,
        };
        self.submit(op).await?;
        answer.await.map_err(|_| Error::ShuttingDown)?
    }

    /// Queues `chunk` for `live` from producer `session`. The receiver resolves after the
    /// commit that holds it, or with `Fenced` if another session has taken over.
    ///
    /// Fails with `ShuttingDown` when the store is closed.
    pub async fn append(&self, live: Live, session: u64, chunk: Chunk) -> Result<Committed> {
        let (done, committed) = oneshot::channel();
        let op = Op::Append {
            live,
            session,
            chunk,
            done,
        };
        self.submit(op).await?;
        Ok(committed)
    }

    /// Ends a live recording with `status` once everything queued before is committed.
    /// Returns `false` if it had already ended (the first end wins).
    ///
    /// Fails with `ShuttingDown` when the store is closed, or a storage error.
    pub async fn end(&self, live: Live, status: Status, message: Option<String>) -> Result<bool> {
        self.end_if(live, EndIf::Always, status, message).await
    }

    /// As [`end`](Self::end), only if `only` holds when the end is applied; `false` if not.
    ///
    /// Fails as [`end`](Self::end) does.
    pub async fn end_if(
        &self,
        live: Live,
        only: EndIf,
        status: Status,
        message: Option<String>,
    ) -> Result<bool> {
        let (done, answer) = oneshot::channel();
        let op = Op::Finish {
            live,
            status,
            message,
            only,
            done,
        };
        self.submit(op).await?;
        answer.await.map_err(|_| Error::ShuttingDown)?
    }

    /// As [`end_if`](Self::end_if), from a context that cannot wait (a `Drop`). When the
    /// queue is full, the op is handed to a task the store owns and [`close`](Self::close)
    /// waits for.
    pub fn end_in_background(&self, live: Live, only: EndIf, status: Status, message: String) {
        let (done, _) = oneshot::channel();
        let op = Op::Finish {
            live,
            status,
            message: Some(message),
            only,
            done,
        };
        match self.inner.ops.try_send(op.into()) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(op)) => {
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    let ops = self.inner.ops.clone();
                    let send = async move { ops.send(op).await };
                    runtime.spawn(self.inner.background.track_future(send));
                }
            }
            // The store is closed; the recording stays live in the file and is detached on the
            // next open.
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }
}
