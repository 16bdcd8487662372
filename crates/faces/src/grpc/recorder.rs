//! `memory.v1.ResponseRecorderService`: Record, Replay, Cancel, IsEnabled, CheckRecordings.
use futures::FutureExt;
use tonic::{Request, Response, Status, Streaming};

use super::instances::{self, OwnerAnswer, admit_producer, forward_cancel, live_anywhere};
use super::session::Session;
use super::{
    Lifecycle, ReplayStream, first_message, incoming_error, parse_id, parse_offset, principal,
    start_options, stream_replay,
};
use crate::access::{Guard, Operation};
use crate::locator::{Locator, Route};
use crate::pb::response_recorder_service_server::ResponseRecorderService;
use crate::pb::{
    CancelRecordRequest, CancelRecordResponse, CheckRecordingsRequest, CheckRecordingsResponse,
    IsEnabledResponse, RecordRequest, RecordResponse, RecordStatus, ReplayRequest, ReplayResponse,
};
use crate::recorder::{Progress, Recorder, Status as RecordingStatus, Stopped};

/// The current recorder API over a [`Recorder`].
#[derive(Clone, Debug)]
pub struct RecorderService {
    recorder: Recorder,
    guard: Guard,
    lifecycle: Lifecycle,
    locator: Option<Locator>,
    /// On a node of a cluster: producer sessions are run by its leader.
    cluster: Option<crate::cluster::Cluster>,
}

impl RecorderService {
    /// A service answering from `recorder`, stopping with `lifecycle`; with a `locator`, calls
    /// about recordings other instances hold are redirected or forwarded there.
    pub fn new(
        recorder: Recorder,
        guard: Guard,
        lifecycle: Lifecycle,
        locator: Option<Locator>,
    ) -> Self {
        Self {
            recorder,
            guard,
            lifecycle,
            locator,
            cluster: None,
        }
    }

    /// The same service on a node of `cluster`: producer sessions are forwarded to its leader.
    pub fn with_cluster(mut self, cluster: Option<crate::cluster::Cluster>) -> Self {
        self.cluster = cluster;
        self
    }
}

#[tonic::async_trait]
impl ResponseRecorderService for RecorderService {
    async fn record(
        &self,
        request: Request<Streaming<RecordRequest>>,
    ) -> Result<Response<RecordResponse>, Status> {
        let principal = principal(&self.guard, request.metadata())?;
        let mut stream = request.into_inner();
        let first = first_message(&mut stream, &self.lifecycle.stop).await?;
        let id = parse_id(&first.conversation_id)?;
        principal.authorize(Operation::Record, &id)?;
        let options = start_options(first.resume_from_offset, first.retention_seconds)?;
        if self.cluster.is_none() {
            let resume = options.resume_from.is_some();
            admit_producer(self.locator.as_ref(), &self.recorder, &id, resume, false).await?;
        }
        let session = Session::open(&self.recorder, self.cluster.as_ref(), id, options).await?;
        record_stream(session, first, stream)
            .await
            .map(Response::new)
    }

    type ReplayStream = ReplayStream<ReplayResponse>;

    async fn replay(
        &self,
        request: Request<ReplayRequest>,
    ) -> Result<Response<Self::ReplayStream>, Status> {
        let principal = principal(&self.guard, request.metadata())?;
        let request = request.into_inner();
        let id = parse_id(&request.conversation_id)?;
        let offset = parse_offset(request.resume_offset)?;
        principal.authorize(Operation::Replay, &id)?;
        if let Route::There(owner) =
            instances::route(self.locator.as_ref(), &self.recorder, &id).await
        {
            // Memory Service's redirect: one message naming the owner, then the end.
            let redirect = ReplayResponse {
                redirect_address: owner.address,
                ..ReplayResponse::default()
            };
            let stream = futures::stream::iter([Ok(redirect)]);
            return Ok(Response::new(Box::pin(stream)));
        }
        let replay = super::ReplayOf {
            id: &id,
            offset,
            chunked: request.chunked,
        };
        let stop = &self.lifecycle.stop;
        let stream = super::read_caught_up(self.cluster.as_ref(), || {
            stream_replay(&self.recorder, replay, stop, |piece| {
                let chunk = piece.chunk.unwrap_or_default();
                let end_offset = piece.end_offset;
                ReplayResponse {
                    content: piece.into_text(),
                    redirect_address: String::new(),
                    offset: end_offset as i64,
                    chunk_index: chunk.index,
                    committed_at_ms: chunk.committed_ms as i64,
                }
            })
        })
        .await;
        Ok(Response::new(super::empty_if_absent(stream)?))
    }

    async fn cancel(
        &self,
        request: Request<CancelRecordRequest>,
    ) -> Result<Response<CancelRecordResponse>, Status> {
        let principal = principal(&self.guard, request.metadata())?;
        let id = parse_id(&request.into_inner().conversation_id)?;
        principal.authorize(Operation::Cancel, &id)?;
        let locator = self.locator.as_ref();
        let accepted = match forward_cancel(locator, &self.recorder, &id, false).await {
            OwnerAnswer::NotNeeded => self.recorder.cancel(&id).await?,
            OwnerAnswer::Answered(accepted, _) => accepted,
            // The owner did not answer in time: the client is sent there.
            OwnerAnswer::Unanswered(redirect_address) => {
                return Ok(Response::new(CancelRecordResponse {
                    accepted: false,
                    redirect_address,
                }));
            }
        };
        Ok(Response::new(CancelRecordResponse {
            accepted,
            redirect_address: String::new(),
        }))
    }

    async fn is_enabled(&self, _: Request<()>) -> Result<Response<IsEnabledResponse>, Status> {
        Ok(Response::new(IsEnabledResponse { enabled: true }))
    }

    async fn check_recordings(
        &self,
        request: Request<CheckRecordingsRequest>,
    ) -> Result<Response<CheckRecordingsResponse>, Status> {
        let principal = principal(&self.guard, request.metadata())?;
        let ids = request.into_inner().conversation_ids;
        let visible = |id: &_| principal.may(Operation::Replay, id);
        let elsewhere = live_anywhere(self.locator.as_ref(), &self.recorder, &ids).await;
        let conversation_ids = self.recorder.check_live(&ids, visible, &elsewhere)?;
        Ok(Response::new(CheckRecordingsResponse { conversation_ids }))
    }
}

/// Most messages of one Record call appended together (see `record_stream`).
const MOST_MESSAGES_AT_ONCE: usize = 64;

/// Appends each message's content until the producer completes (`complete=true`), its stream
/// ends without that or fails (the producer detaches: it may resume), or the session is
/// stopped by another hand (cancel, delete, supersede, idle, another producer resuming,
/// shutdown).
async fn record_stream(
    mut producer: Session,
    first: RecordRequest,
    mut stream: Streaming<RecordRequest>,
) -> Result<RecordResponse, Status> {
    let mut next = Some(Ok(Some(first)));
    let mut stop_signal = producer.stop_signal();
    let mut messages = Vec::new();
    let mut waited_for_room = false;
    loop {
        let (received, waited) = match next.take() {
            Some(received) => (received, false),
            None => {
                let woke = async {
                    tokio::select! {
                        () = &mut stop_signal => None,
                        received = stream.message() => Some(received),
                    }
                };
                match and_whether_it_waited(woke).await {
                    (Some(received), waited) => (received, waited),
                    (None, _) => match producer.stopped().await {
                        Ok(stopped) => return Ok(stopped_response(stopped, &producer)),
                        // Given up by this node (the leader refused what it was sent): failed
                        // as a refused message fails on a single node.
                        Err(err) => return Err(err.into()),
                    },
                }
            }
        };
        let message = match received {
            Ok(Some(message)) => message,
            // Only complete=true completes: a bare end may be a cancelled call.
            Ok(None) => return Ok(error_response(producer.end_without_complete().await)),
            Err(status) => {
                let status = incoming_error(status);
                producer.detach(format!("producer stream failed: {}", status.message()));
                return Err(status);
            }
        };
        // The messages already here go with it, in one append: a producer whose tokens
        // arrive together (or pile up while the commit queue is full) takes one place in the
        // queue for them all, and waits for room once, not once per token. Looked for only
        // when this message was here before it was asked for, or the last append had to
        // wait for room: looking costs a poll of the stream, and a producer at its own pace
        // sends one token at a time.
        let mut complete = message.complete;
        messages.push(message);
        let piling_up = !waited || waited_for_room;
        while piling_up && !complete && messages.len() < MOST_MESSAGES_AT_ONCE {
            match stream.message().now_or_never() {
                Some(Ok(Some(message))) => {
                    complete = message.complete;
                    messages.push(message);
                }
                // The end or a failure, seen once the messages before it are appended.
                Some(other) => {
                    next = Some(other);
                    break;
                }
                None => break,
            }
        }
        let accepted = and_whether_it_waited(producer.accept_all(&mut messages)).await;
        waited_for_room = accepted.1;
        if let Err(err) = accepted.0 {
            producer.detach(err.client_message());
            return Err(err.into());
        }
        if complete {
            break;
        }
    }
    Ok(match producer.complete().await {
        Ok(progress) => response(progress, producer.end_message()),
        // Nothing could be committed (a node of a cluster cut off from its majority): the
        // call fails as unavailable, to be retried elsewhere.
        Err(err) if err.kind() == crate::error::Kind::Unavailable => return Err(err.into()),
        Err(err) => error_response(err.client_message()),
    })
}

/// Runs `future` to its end, and says whether it had to wait (was pending at least once).
async fn and_whether_it_waited<F: Future>(future: F) -> (F::Output, bool) {
    let mut future = std::pin::pin!(future);
    let mut waited = false;
    let output = std::future::poll_fn(|cx| {
        let poll = future.as_mut().poll(cx);
        waited |= poll.is_pending();
        poll
    })
    .await;
    (output, waited)
}

/// The answer to a producer whose session was stopped by another hand.
fn stopped_response(stopped: Stopped, producer: &Session) -> RecordResponse {
    match stopped {
        Stopped::Ended(progress) => response(progress, producer.end_message()),
        Stopped::Fenced => error_response(crate::Error::Fenced.client_message()),
        Stopped::ShuttingDown => error_response(crate::Error::ShuttingDown.client_message()),
    }
}

fn error_response(message: String) -> RecordResponse {
    RecordResponse {
        status: RecordStatus::Error as i32,
        error_message: message,
    }
}

/// The answer to a producer whose recording ended as `progress` says.
fn response(progress: Progress, message: Option<&str>) -> RecordResponse {
    let (status, default_message) = match progress.status {
        RecordingStatus::Completed => (RecordStatus::Success, ""),
        RecordingStatus::Cancelled => (RecordStatus::Cancelled, "the recording was cancelled"),
        RecordingStatus::Deleted => (RecordStatus::Cancelled, "the recording was deleted"),
        RecordingStatus::Superseded => (
            RecordStatus::Error,
            "superseded: a newer recording of this conversation replaced this one",
        ),
        RecordingStatus::Interrupted => (RecordStatus::Error, "the recording was interrupted"),
        RecordingStatus::Failed | RecordingStatus::Recording => {
            (RecordStatus::Error, "the recording failed")
        }
    };
    RecordResponse {
        status: status as i32,
        error_message: message.unwrap_or(default_message).to_string(),
    }
}
