//! A producer session from the client's side: chunks go out through a bounded queue (so a
//! producer faster than the server waits), and the server's answer comes at the end.
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use super::Calls;
use crate::pb::response_recorder_service_client::ResponseRecorderServiceClient;
use crate::pb::{RecordRequest, RecordResponse, RecordStatus};

/// Chunks queued ahead of the transport, at most.
const QUEUE: usize = 64;

/// How a producer session opens.
#[derive(Clone, Copy, Debug, Default)]
pub struct RecordOptions {
    /// Resume the conversation's recording: the byte length the producer believes is
    /// committed; what it resends that is already committed is skipped.
    pub resume_from: Option<u64>,
    /// Keep the recording this long once it has ended (at most the server's
    /// `--max-retention`) instead of the server's `--retention`.
    pub retention: Option<Duration>,
}

/// An open producer session. Only [`complete`](Self::complete) completes the recording:
/// dropping the session ends its request stream without `complete=true`, which the server
/// takes as a producer that went away (the recording waits `--producer-grace` for a resume).
#[derive(Debug)]
pub struct Recording {
    tx: mpsc::Sender<RecordRequest>,
    answer: JoinHandle<Result<RecordResponse, Status>>,
}

impl Recording {
    pub(super) async fn open(
        mut client: ResponseRecorderServiceClient<Calls>,
        id: &[u8],
        options: RecordOptions,
    ) -> Result<Recording, Status> {
        let (tx, rx) = mpsc::channel(QUEUE);
        let first = RecordRequest {
            conversation_id: id.to_vec(),
            resume_from_offset: options.resume_from.map(|o| o as i64),
            retention_seconds: options.retention.map_or(0, |r| r.as_secs().max(1)),
            ..RecordRequest::default()
        };
        tx.send(first)
            .await
            .map_err(|_| Status::internal("the request queue closed at once"))?;
        let answer = tokio::spawn(async move {
            let call = client.record(ReceiverStream::new(rx)).await;
            call.map(tonic::Response::into_inner)
        });
        Ok(Recording { tx, answer })
    }

    /// Sends one chunk; waits while the queue is full.
    ///
    /// Fails with the status that ended the call (a refusal, another producer taking over, a
    /// cancel, a lost connection).
    pub async fn send(&self, content: &str) -> Result<(), Status> {
        let message = RecordRequest {
            content: content.to_string(),
            ..RecordRequest::default()
        };
        if self.tx.send(message).await.is_ok() {
            return Ok(());
        }
        // The call has ended: its answer says why.
        Err(Status::aborted(
            "the recording's call has ended; complete() gives its answer",
        ))
    }

    /// Marks the recording complete and waits for the server's answer: `Ok` once it is
    /// committed as completed.
    ///
    /// Fails with the call's status, or `ABORTED` (with the server's message) when the
    /// recording ended otherwise (cancelled, superseded, …).
    pub async fn complete(self) -> Result<(), Status> {
        let last = RecordRequest {
            complete: true,
            ..RecordRequest::default()
        };
        let _ = self.tx.send(last).await;
        drop(self.tx);
        let answer = self
            .answer
            .await
            .map_err(|err| Status::internal(format!("the recording task failed: {err}")))??;
        match RecordStatus::try_from(answer.status) {
            Ok(RecordStatus::Success) => Ok(()),
            Ok(RecordStatus::Cancelled) => Err(Status::cancelled(answer.error_message)),
            _ => Err(Status::aborted(answer.error_message)),
        }
    }
}
