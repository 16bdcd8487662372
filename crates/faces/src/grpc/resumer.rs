//! `memory.v1.ResponseResumerService`, the legacy API: per-token acknowledgements carrying the
//! committed byte length, and replay from a byte position. Same recordings as the current API.
use std::collections::VecDeque;
use std::time::Duration;
use tracing::Instrument;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::instances::{self, OwnerAnswer, admit_producer, forward_cancel, live_anywhere};
use super::session::Session;
use super::{
    Lifecycle, ReplayOf, ReplayStream, first_message, incoming_error, parse_id, parse_offset,
    principal, start_options, stream_replay,
};
use crate::access::{Guard, Operation};
use crate::error::Error;
use crate::locator::{Locator, Route};
use crate::pb::response_resumer_service_server::ResponseResumerService;
use crate::pb::{
    CancelResponseRequest, CancelResponseResponse, CheckConversationsRequest,
    CheckConversationsResponse, IsEnabledResponse, ReplayResponseTokensRequest,
    ReplayResponseTokensResponse, StreamResponseTokenRequest, StreamResponseTokenResponse,
};
use crate::recorder::Committed;
use crate::recorder::{Recorder, Status as RecordingStatus, Stopped};

/// How long `CancelResponse` waits for the producer's stream to end.
const CANCEL_WAIT: Duration = Duration::from_secs(30);
/// Responses queued for a producer that reads them slowly.
const RESPONSE_BUFFER: usize = 64;

/// The legacy resumer API over a [`Recorder`].
#[derive(Clone, Debug)]
pub struct ResumerService {
    recorder: Recorder,
    guard: Guard,
    lifecycle: Lifecycle,
    locator: Option<Locator>,
    /// On a node of a cluster: producer sessions are run by its leader.
    cluster: Option<crate::cluster::Cluster>,
}

impl ResumerService {
    /// A service answering from `recorder`, its producer sessions owned by `lifecycle`; with a
    /// `locator`, calls about recordings other instances hold are redirected (UNAVAILABLE with
    /// `x-resumer-redirect-host` / `-port`) or forwarded there.
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

type TokenResponses = ReceiverStream<Result<StreamResponseTokenResponse, Status>>;

#[tonic::async_trait]
impl ResponseResumerService for ResumerService {
    type StreamResponseTokensStream = TokenResponses;

    async fn stream_response_tokens(
        &self,
        request: Request<Streaming<StreamResponseTokenRequest>>,
    ) -> Result<Response<TokenResponses>, Status> {
        // Answer with headers at once: a bidirectional client may wait for them before it
        // sends its first token. Errors in the first message end the stream instead.
        let principal = principal(&self.guard, request.metadata())?;
        let recorder = self.recorder.clone();
        let locator = self.locator.clone();
        let cluster = self.cluster.clone();
        let stop = self.lifecycle.stop.clone();
        let (tx, rx) = mpsc::channel(RESPONSE_BUFFER);
        // Owned by the server's tracker: shutdown ends the recording, which ends this session.
        // In the call's span for traces: a session forwarded to the leader carries it on.
        self.lifecycle.tasks.spawn(
            async move {
                let mut requests = request.into_inner();
                let started = start_producer(
                    &recorder,
                    locator.as_ref(),
                    cluster.as_ref(),
                    &principal,
                    &mut requests,
                    &stop,
                );
                match started.await {
                    Ok((producer, first)) => stream_tokens(producer, first, requests, tx).await,
                    Err(status) => {
                        let _ = tx.send(Err(status)).await;
                    }
                }
            }
            .in_current_span(),
        );
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    type ReplayResponseTokensStream = ReplayStream<ReplayResponseTokensResponse>;

    async fn replay_response_tokens(
        &self,
        request: Request<ReplayResponseTokensRequest>,
    ) -> Result<Response<Self::ReplayResponseTokensStream>, Status> {
        let principal = principal(&self.guard, request.metadata())?;
        let request = request.into_inner();
        let id = parse_id(&request.conversation_id)?;
        let offset = parse_offset(request.resume_position)?;
        principal.authorize(Operation::Replay, &id)?;
        redirect_if_elsewhere(self.locator.as_ref(), &self.recorder, &id).await?;
        let replay = ReplayOf {
            id: &id,
            offset,
            chunked: false,
        };
        let stop = &self.lifecycle.stop;
        let stream = super::read_caught_up(self.cluster.as_ref(), || {
            stream_replay(&self.recorder, replay, stop, |piece| {
                ReplayResponseTokensResponse {
                    offset: piece.end_offset as i64,
                    token: piece.into_text(),
                }
            })
        })
        .await;
        Ok(Response::new(super::empty_if_absent(stream)?))
    }

    async fn cancel_response(
        &self,
        request: Request<CancelResponseRequest>,
    ) -> Result<Response<CancelResponseResponse>, Status> {
        let principal = principal(&self.guard, request.metadata())?;
        let id = parse_id(&request.into_inner().conversation_id)?;
        principal.authorize(Operation::Cancel, &id)?;
        let locator = self.locator.as_ref();
        let accepted = match forward_cancel(locator, &self.recorder, &id, true).await {
            OwnerAnswer::NotNeeded => self.recorder.cancel_and_wait(&id, CANCEL_WAIT).await?,
            OwnerAnswer::Answered(accepted, _) => accepted,
            // The owner did not answer in time: the client is sent there.
            OwnerAnswer::Unanswered(address) => {
                let id = id.to_string();
                return Err(Error::Redirect { id, address }.into());
            }
        };
        Ok(Response::new(CancelResponseResponse { accepted }))
    }

    async fn is_enabled(&self, _: Request<()>) -> Result<Response<IsEnabledResponse>, Status> {
        Ok(Response::new(IsEnabledResponse { enabled: true }))
    }

    async fn check_conversations(
        &self,
        request: Request<CheckConversationsRequest>,
    ) -> Result<Response<CheckConversationsResponse>, Status> {
        let principal = principal(&self.guard, request.metadata())?;
        let ids = request.into_inner().conversation_ids;
        let visible = |id: &_| principal.may(Operation::Replay, id);
        let elsewhere = live_anywhere(self.locator.as_ref(), &self.recorder, &ids).await;
        let conversation_ids = self.recorder.check_live(&ids, visible, &elsewhere)?;
        Ok(Response::new(CheckConversationsResponse {
            conversation_ids,
        }))
    }
}

/// The legacy redirect (UNAVAILABLE with `x-resumer-redirect-host` / `-port`) when another
/// instance holds conversation `id`'s recording.
async fn redirect_if_elsewhere(
    locator: Option<&Locator>,
    recorder: &Recorder,
    id: &crate::id::ConversationId,
) -> Result<(), Status> {
    match instances::route(locator, recorder, id).await {
        Route::Here => Ok(()),
        Route::There(owner) => Err(Error::Redirect {
            id: id.to_string(),
            address: owner.address,
        }
        .into()),
    }
}

/// Reads the first request and starts the recording it names.
async fn start_producer(
    recorder: &Recorder,
    locator: Option<&Locator>,
    cluster: Option<&crate::cluster::Cluster>,
    principal: &crate::access::Principal,
    requests: &mut Streaming<StreamResponseTokenRequest>,
    stop: &tokio_util::sync::CancellationToken,
) -> Result<(Session, StreamResponseTokenRequest), Status> {
    let first = first_message(requests, stop).await?;
    let id = parse_id(&first.conversation_id)?;
    principal.authorize(Operation::Record, &id)?;
    let options = start_options(first.resume_from_offset, first.retention_seconds)?;
    if cluster.is_none() {
        let resume = options.resume_from.is_some();
        admit_producer(locator, recorder, &id, resume, true).await?;
    }
    Ok((Session::open(recorder, cluster, id, options).await?, first))
}

/// The response owed for one request: ready, or once its token is committed.
enum OwedResponse {
    Ready(StreamResponseTokenResponse),
    /// The token's commit, and the length the recording reaches with it (for a refusal).
    Committing {
        committed: Committed,
        reached: u64,
    },
}

/// The oldest response owed, once it is ready; `None` when nothing is owed. Cancel-safe: a
/// response leaves `owed` only when it is returned.
async fn next_owed(owed: &mut VecDeque<OwedResponse>) -> Option<StreamResponseTokenResponse> {
    if let OwedResponse::Committing { committed, reached } = owed.front_mut()? {
        let response = match committed.await {
            Ok(Ok(offset)) => success(offset),
            Ok(Err(err)) => refusal(&err.client_message(), *reached),
            Err(_) => refusal("the server is shutting down", *reached),
        };
        owed[0] = OwedResponse::Ready(response);
    }
    let Some(OwedResponse::Ready(response)) = owed.pop_front() else {
        unreachable!("the oldest response owed was made ready above");
    };
    Some(response)
}

/// The producer session of the legacy API. Every request is answered, in order: a token once
/// it is committed, with the committed length (a resent token that was already committed, at
/// once, with the length it reaches); a refused message at once with `success=false` (the
/// stream goes on). When the session is stopped by another hand the producer gets one last
/// response (`cancel_requested=true` for a cancel or delete) and the stream closes. A request
/// stream that ends without `complete=true` detaches the producer, and gets a last
/// `success=false` saying how to resume or finish.
async fn stream_tokens(
    mut producer: Session,
    first: StreamResponseTokenRequest,
    mut requests: Streaming<StreamResponseTokenRequest>,
    responses: mpsc::Sender<Result<StreamResponseTokenResponse, Status>>,
) {
    let mut pending = VecDeque::new();
    let mut next = Some(first);
    let mut input_open = true;
    let mut stop_signal = producer.stop_signal();
    loop {
        if let Some(message) = next.take() {
            let complete = message.complete;
            pending.push_back(accept(&mut producer, message).await);
            if complete {
                break;
            }
            continue;
        }
        if !input_open && pending.is_empty() {
            // Only complete=true completes: a bare end may be a cancelled call.
            let bytes = producer.committed_bytes();
            let message = producer.end_without_complete().await;
            let _ = responses.send(Ok(refusal(&message, bytes))).await;
            return;
        }
        tokio::select! {
            biased;
            Some(response) = next_owed(&mut pending) => {
                if responses.send(Ok(response)).await.is_err() {
                    producer.detach("the producer went away".into());
                    return;
                }
            }
            () = &mut stop_signal => {
                let stopped = producer.stopped().await;
                // Acks already owed come first; refused ones report the end themselves.
                while let Some(response) = next_owed(&mut pending).await {
                    let _ = responses.send(Ok(response)).await;
                }
                let last = match stopped {
                    Ok(stopped) => stopped_response(stopped, &producer),
                    // Given up: why, and where it stands, for the producer to resume.
                    Err(err) => refusal(&err.client_message(), producer.committed_bytes()),
                };
                let _ = responses.send(Ok(last)).await;
                return;
            }
            message = requests.message(), if input_open => match message {
                Ok(Some(message)) => next = Some(message),
                Ok(None) => input_open = false,
                Err(status) => {
                    let status = incoming_error(status);
                    producer.detach(format!("producer stream failed: {}", status.message()));
                    // If the producer is still there to hear it: the acks it is owed, then why
                    // its stream ended.
                    while let Some(response) = next_owed(&mut pending).await {
                        let _ = responses.send(Ok(response)).await;
                    }
                    let _ = responses.send(Err(status)).await;
                    return;
                }
            },
        }
    }
    // Completed: answer what is owed, then finish the recording.
    while let Some(response) = next_owed(&mut pending).await {
        let _ = responses.send(Ok(response)).await;
    }
    match producer.complete().await {
        Ok(progress) if progress.status == RecordingStatus::Completed => {}
        Ok(progress) => {
            let end = end_response(progress.bytes, progress.status, producer.end_message());
            let _ = responses.send(Ok(end)).await;
        }
        Err(err) => {
            let bytes = producer.committed_bytes();
            let _ = responses
                .send(Ok(refusal(&err.client_message(), bytes)))
                .await;
        }
    }
}

/// Appends one request's token; returns the response it is owed, to be delivered in order.
/// Responses that commit nothing report the length reached once every earlier token of this
/// producer is committed, which is when they are delivered.
async fn accept(producer: &mut Session, message: StreamResponseTokenRequest) -> OwedResponse {
    let result = producer
        .accept(&message.conversation_id, &message.token)
        .await;
    let reached = producer.appended_bytes();
    match result {
        Ok(Some(committed)) => OwedResponse::Committing { committed, reached },
        Ok(None) => OwedResponse::Ready(success(reached)),
        Err(err) => OwedResponse::Ready(refusal(&err.client_message(), reached)),
    }
}

fn success(offset: u64) -> StreamResponseTokenResponse {
    StreamResponseTokenResponse {
        success: true,
        error_message: String::new(),
        current_offset: offset as i64,
        cancel_requested: false,
    }
}

fn refusal(message: &str, offset: u64) -> StreamResponseTokenResponse {
    StreamResponseTokenResponse {
        success: false,
        error_message: message.to_string(),
        current_offset: offset as i64,
        cancel_requested: false,
    }
}

/// The last response of a producer whose session was stopped by another hand.
fn stopped_response(stopped: Stopped, producer: &Session) -> StreamResponseTokenResponse {
    let bytes = producer.committed_bytes();
    match stopped {
        Stopped::Ended(ended) => end_response(ended.bytes, ended.status, producer.end_message()),
        Stopped::Fenced => refusal(&crate::Error::Fenced.client_message(), bytes),
        Stopped::ShuttingDown => refusal(&crate::Error::ShuttingDown.client_message(), bytes),
    }
}

/// The last response of a producer whose recording was ended by someone else.
fn end_response(
    bytes: u64,
    status: RecordingStatus,
    message: Option<&str>,
) -> StreamResponseTokenResponse {
    if matches!(
        status,
        RecordingStatus::Cancelled | RecordingStatus::Deleted
    ) {
        return StreamResponseTokenResponse {
            success: true,
            error_message: String::new(),
            current_offset: bytes as i64,
            cancel_requested: true,
        };
    }
    let reason = match message {
        Some(message) => message.to_string(),
        None => format!("the recording ended: {}", status.as_str()),
    };
    refusal(&reason, bytes)
}
