//! The leader's side of a forwarded producer session: a node holding a client's Record call
//! opens `Produce` here, and this runs the session as a local producer would, answering with
//! the committed length as its chunks commit (once for the contents that arrived together),
//! and with how the session ended.
use std::pin::Pin;
use std::time::Duration;

use futures::stream::FuturesOrdered;
use futures::{FutureExt, Stream, StreamExt};
use tokio::sync::mpsc;
use tokio::sync::oneshot::error::RecvError;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use crate::error::Error;
use crate::id::ConversationId;
use crate::pb::cluster::{Ended, Open, Produced, Producing, Stop, produced, producing};
use crate::recorder::{Found, Producer, Progress, Recorder, StartOptions, Stopped};
use crate::store::Committed;

/// Answers sent back to the forwarding node.
pub(super) type ProducingStream = Pin<Box<dyn Stream<Item = Result<Producing, Status>> + Send>>;

/// Answers waiting for the forwarding node to take them.
const ANSWERS: usize = 64;
/// Contents appended together: messages are read while fewer are in hand (as a local `Record`
/// call takes its messages), and each forwarded message holds at most this many too.
const MOST_CONTENTS_AT_ONCE: usize = 64;

/// Opens the session `open` asks for and runs it over `incoming` on a task of its own.
///
/// Fails with the recorder's refusal (the conversation is recording elsewhere, a resume past
/// the end, ...), as the client would get it from the leader itself.
pub(super) async fn produce(
    recorder: &Recorder,
    open: Open,
    incoming: Streaming<Produced>,
) -> Result<ProducingStream, Status> {
    let id = ConversationId::parse(&open.conversation_id)?;
    let resume_from = match (open.resume_from, open.retried_since_ms) {
        (None, Some(since_ms)) if started_by_a_lost_open(recorder, &id, since_ms).await => Some(0),
        (resume_from, _) => resume_from,
    };
    let options = StartOptions {
        resume_from,
        retention: open.retention_ms.map(Duration::from_millis),
    };
    let producer = recorder.start(id, options).await?;
    let (answers, stream) = mpsc::channel(ANSWERS);
    let opened = producing::Kind::Opened(producer.progress().bytes);
    let _ = answers.send(Ok(Producing { kind: Some(opened) })).await;
    tokio::spawn(run(producer, incoming, answers));
    Ok(Box::pin(ReceiverStream::new(stream)))
}

/// Most the forwarding node's clock and the clock of the leader that started a recording may
/// differ by, for [`started_by_a_lost_open`].
const CLOCK_SKEW_MS: u64 = 1_000;

/// Whether conversation `id`'s recording is one that an open first sent at `since_ms`, whose
/// answer was lost with its leader, may have started: live, started since, with nothing
/// committed. Such a recording is taken over (resumed from 0) rather than superseded, so
/// that readers following it see the session go on.
///
/// A recording with committed bytes is not taken for it: those might be another producer's,
/// which a resume from 0 would take as resent. Another producer's recording started in the
/// same second with nothing committed is taken over, fencing that producer, as a new
/// recording would have superseded it.
async fn started_by_a_lost_open(recorder: &Recorder, id: &ConversationId, since_ms: u64) -> bool {
    match recorder.get(id).await {
        Ok(Found::Recording(info)) => {
            let meta = &info.meta;
            meta.status.is_live()
                && meta.byte_len == 0
                && meta.created_ms + CLOCK_SKEW_MS >= since_ms
        }
        _ => false,
    }
}

/// The first message of a `Produce` call, which must open the session.
///
/// Fails with `INVALID_ARGUMENT` when it is not an `Open`, or the stream's error.
pub(super) async fn first_open(incoming: &mut Streaming<Produced>) -> Result<Open, Status> {
    match incoming.message().await? {
        Some(Produced {
            kind: Some(produced::Kind::Open(open)),
        }) => Ok(open),
        _ => Err(Status::invalid_argument(
            "a forwarded producer session opens with an Open message",
        )),
    }
}

/// The length committed after a batch of contents, once all of it is (see [`last_length`]).
type Answers = futures::future::BoxFuture<'static, Result<crate::Result<u64>, RecvError>>;

async fn run(
    mut producer: Producer,
    mut incoming: Streaming<Produced>,
    answers: mpsc::Sender<Result<Producing, Status>>,
) {
    let mut pending: FuturesOrdered<Answers> = FuturesOrdered::new();
    // A message read past a batch of contents, handled next.
    let mut held = None;
    loop {
        let message = match held.take() {
            Some(message) => message,
            None => tokio::select! {
                stopped = producer.stopped() => {
                    let _ = answers.send(Ok(stopped_answer(stopped, &producer))).await;
                    return;
                }
                Some(committed) = pending.next(), if !pending.is_empty() => {
                    if !ack(committed, &answers).await {
                        producer.detach("its chunks could not be committed".into());
                        return;
                    }
                    continue;
                }
                message = incoming.message() => message,
            },
        };
        let kind = match message {
            Ok(Some(Produced { kind: Some(kind) })) => kind,
            // The forwarding node went away: it resumes elsewhere, or its client will.
            _ => {
                producer.detach("the node forwarding its producer went away".into());
                return;
            }
        };
        match kind {
            kind @ (produced::Kind::Content(_) | produced::Kind::Contents(_)) => {
                // The contents already here go with it, in one append and one answer: the
                // forwarding node only needs the length committed after the last of them.
                let mut contents = Vec::new();
                add_contents(kind, &mut contents);
                while contents.len() < MOST_CONTENTS_AT_ONCE {
                    match incoming.message().now_or_never() {
                        Some(Ok(Some(Produced {
                            kind:
                                Some(
                                    more @ (produced::Kind::Content(_)
                                    | produced::Kind::Contents(_)),
                                ),
                        }))) => add_contents(more, &mut contents),
                        Some(other) => {
                            held = Some(other);
                            break;
                        }
                        None => break,
                    }
                }
                match producer.accept_all_answered(contents).await {
                    Ok(appended) if appended.is_empty() => {}
                    Ok(appended) => pending.push_back(Box::pin(last_length(appended))),
                    Err(err) => {
                        producer.detach(err.client_message());
                        let _ = answers.send(Err(err.into())).await;
                        return;
                    }
                }
            }
            produced::Kind::Complete(_) => {
                while let Some(committed) = pending.next().await {
                    if !ack(committed, &answers).await {
                        producer.detach("its chunks could not be committed".into());
                        return;
                    }
                }
                let answer = match producer.complete().await {
                    Ok(progress) => Ok(ended(Stop::Ended, progress, producer.end_message())),
                    Err(err) => Err(err.into()),
                };
                let _ = answers.send(answer).await;
                return;
            }
            produced::Kind::Detach(reason) => {
                producer.detach(reason);
                return;
            }
            produced::Kind::EndedWithoutComplete(_) => {
                // What it sent is committed first, so that a resume finds it.
                while let Some(committed) = pending.next().await {
                    if !ack(committed, &answers).await {
                        producer.detach("its chunks could not be committed".into());
                        return;
                    }
                }
                let progress = producer.progress();
                let message = producer.end_without_complete();
                let answer = ended(Stop::Detached, progress, Some(&message));
                let _ = answers.send(Ok(answer)).await;
                return;
            }
            produced::Kind::Open(_) => {
                producer.detach("a second Open in one session".into());
                let refused = Status::invalid_argument("a session opens once");
                let _ = answers.send(Err(refused)).await;
                return;
            }
        }
    }
}

/// Adds the contents a `Content` or `Contents` message carries to `contents`, as a producer's
/// accepts them (with no conversation id of their own).
fn add_contents(kind: produced::Kind, contents: &mut Vec<(Vec<u8>, String)>) {
    match kind {
        produced::Kind::Content(content) => contents.push((Vec::new(), content)),
        produced::Kind::Contents(more) => contents.extend(
            more.content
                .into_iter()
                .map(|content| (Vec::new(), content)),
        ),
        _ => {}
    }
}

/// The recording's length once every chunk of `appended` is committed: the last answer,
/// after each one before it (the first that is not a length ends the wait).
async fn last_length(appended: Vec<Committed>) -> Result<crate::Result<u64>, RecvError> {
    let mut last = Ok(Ok(0));
    for answer in appended {
        last = answer.await;
        if !matches!(last, Ok(Ok(_))) {
            break;
        }
    }
    last
}

/// Sends the committed length a batch's commit gave; false when it failed (the failure
/// is sent instead) or the forwarding node is gone.
async fn ack(
    committed: Result<crate::Result<u64>, RecvError>,
    answers: &mpsc::Sender<Result<Producing, Status>>,
) -> bool {
    let answer = match committed {
        Ok(Ok(length)) => Ok(Producing {
            kind: Some(producing::Kind::Committed(length)),
        }),
        Ok(Err(err)) => {
            tracing::warn!(error = %err, "a forwarded producer's chunk was not committed");
            Err(Status::from(err))
        }
        // The commit's waiter went away unanswered: its commit did not happen here.
        Err(_) => Err(Status::from(Error::NoQuorum {
            leader: None,
            leader_address: None,
        })),
    };
    let ok = answer.is_ok();
    answers.send(answer).await.is_ok() && ok
}

fn stopped_answer(stopped: Stopped, producer: &Producer) -> Producing {
    match stopped {
        Stopped::Ended(progress) => ended(Stop::Ended, progress, producer.end_message()),
        Stopped::Fenced => ended(Stop::Fenced, producer.progress(), None),
        Stopped::ShuttingDown => ended(Stop::ShuttingDown, producer.progress(), None),
    }
}

fn ended(stop: Stop, progress: Progress, message: Option<&str>) -> Producing {
    Producing {
        kind: Some(producing::Kind::Ended(Ended {
            stop: stop as i32,
            status: progress.status.as_str().to_string(),
            chunks: progress.chunks,
            bytes: progress.bytes,
            message: message.map(str::to_string),
        })),
    }
}
