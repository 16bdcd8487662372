//! A producer session this node holds for its client while the cluster's leader runs it: the
//! chunks go to the leader's `Produce`, and each is acknowledged once the leader says it is
//! committed. When the leader is lost, the session is opened again on the next one, resuming
//! from the last committed byte and sending again what was not acknowledged (the leader skips
//! what it had committed after all): the client sees no error and no gap, and nothing is
//! written twice.
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Status, Streaming};

use super::Cluster;
use crate::error::{Error, Kind, Result};
use crate::id::ConversationId;
use crate::pb::cluster::cluster_client::ClusterClient;
use crate::pb::cluster::{Ended, Open, Produced, Producing, Stop, produced, producing};
use crate::recorder::{Progress, Status as Lifecycle, Stopped};
use crate::store::Committed;

/// How long a session may look for a leader to go on with before it fails.
const FAILOVER_WAIT: Duration = Duration::from_secs(15);
/// Messages waiting for the leader.
const OUTGOING: usize = 256;

/// A forwarded producer session; see the module's doc.
pub struct Forwarded {
    id: ConversationId,
    commands: mpsc::Sender<Command>,
    /// How the session ended, once it has.
    ended: watch::Receiver<Option<Outcome>>,
    /// Byte offset after the last content accepted.
    appended: u64,
    /// What the leader last said is committed.
    committed: Arc<AtomicU64>,
    end_message: Option<String>,
}

enum Command {
    Content {
        content: String,
        end: u64,
        done: oneshot::Sender<Result<u64>>,
    },
    /// Completes (`Complete`) or lets go (`EndedWithoutComplete`) once everything sent is
    /// committed; answered with how the session ended.
    Finish(produced::Kind, oneshot::Sender<Result<Outcome>>),
    Detach(Produced),
}

/// How a session ended, as the leader told it.
#[derive(Debug, Clone)]
struct Outcome {
    stop: Stop,
    progress: Progress,
    message: Option<String>,
}

/// A content sent to the leader and not acknowledged yet.
struct Unacked {
    /// Byte offset just after it.
    end: u64,
    content: String,
    /// Told its end once it is committed.
    done: oneshot::Sender<Result<u64>>,
}

/// One open `Produce` call to the leader.
struct Connection {
    outgoing: mpsc::Sender<Produced>,
    incoming: Streaming<Producing>,
}

impl Cluster {
    /// Opens producer session `id` on the leader (a resume from `resume_from`, if given).
    ///
    /// Fails with the leader's refusal, or `NoQuorum` when no leader answers within
    /// [`FAILOVER_WAIT`].
    pub async fn forward_producer(
        &self,
        id: ConversationId,
        resume_from: Option<u64>,
        retention: Option<Duration>,
    ) -> Result<Forwarded> {
        let open = Open {
            conversation_id: id.original().to_vec(),
            resume_from,
            retention_ms: retention.map(|r| r.as_millis() as u64),
        };
        let (connection, committed) = self.open_session(&open).await?;
        let (commands, receiver) = mpsc::channel(OUTGOING);
        let (ended_tx, ended) = watch::channel(None);
        let start = resume_from.unwrap_or(0);
        let shared_acked = Arc::new(AtomicU64::new(committed));
        let session = Session {
            cluster: self.clone(),
            open,
            acked: committed,
            shared_acked: shared_acked.clone(),
            unacked: VecDeque::new(),
            finishing: None,
        };
        tokio::spawn(session.drive(connection, receiver, ended_tx));
        Ok(Forwarded {
            id,
            commands,
            ended,
            appended: start,
            committed: shared_acked,
            end_message: None,
        })
    }

    /// Opens `open` on the leader; returns the call and what is committed of the recording.
    /// Tries again while no leader answers, up to [`FAILOVER_WAIT`].
    ///
    /// Fails with the leader's refusal (at once), or `NoQuorum`.
    async fn open_session(&self, open: &Open) -> Result<(Connection, u64)> {
        let deadline = tokio::time::Instant::now() + FAILOVER_WAIT;
        let mut pause = Duration::from_millis(20);
        loop {
            match self.try_open(open).await {
                Ok(opened) => return Ok(opened),
                Err(status) if retriable(&status) && tokio::time::Instant::now() < deadline => {
                    tracing::debug!(%status, "no leader took the producer session yet");
                }
                Err(status) if !retriable(&status) => return Err(refused(status)),
                Err(_) => return Err(self.no_quorum()),
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }

    async fn try_open(&self, open: &Open) -> std::result::Result<(Connection, u64), Status> {
        let channel = self
            .leader_channel()
            .await
            .ok_or_else(|| Status::unavailable("no leader is known"))?;
        let (outgoing, receiver) = mpsc::channel(OUTGOING);
        let first = Produced {
            kind: Some(produced::Kind::Open(open.clone())),
        };
        let _ = outgoing.send(first).await;
        let mut client = ClusterClient::new(channel).max_decoding_message_size(usize::MAX);
        let mut incoming = client
            .produce(ReceiverStream::new(receiver))
            .await?
            .into_inner();
        match incoming.message().await? {
            Some(Producing {
                kind: Some(producing::Kind::Opened(committed)),
            }) => Ok((Connection { outgoing, incoming }, committed)),
            _ => Err(Status::unavailable("the leader did not open the session")),
        }
    }
}

/// The task that runs a forwarded session: it owns the call to the leader.
struct Session {
    cluster: Cluster,
    open: Open,
    /// What the leader last said is committed (shared with the handle).
    acked: u64,
    shared_acked: Arc<AtomicU64>,
    /// Contents sent and not yet acknowledged, in order, each with its end offset and its
    /// waiter: exactly those that end after `acked`.
    unacked: VecDeque<Unacked>,
    /// The producer asked to complete or let go: how, and who to answer when the leader says
    /// how the session ended.
    finishing: Option<(produced::Kind, oneshot::Sender<Result<Outcome>>)>,
}

impl Session {
    async fn drive(
        mut self,
        mut connection: Connection,
        mut commands: mpsc::Receiver<Command>,
        ended: watch::Sender<Option<Outcome>>,
    ) {
        loop {
            let lost = self.serve(&mut connection, &mut commands, &ended).await;
            let Some(status) = lost else {
                // Ended: what was sent and not committed never will be, here.
                self.fail(self.cluster.no_quorum());
                return;
            };
            if !retriable(&status) {
                self.fail(refused(status));
                return;
            }
            tracing::info!(%status, "lost the leader of a forwarded producer session; resuming on the next one");
            // Resume where the contents not acknowledged begin, and send them again: the
            // leader skips what of them it had committed after all.
            self.open.resume_from = Some(self.resend_from());
            match self.cluster.open_session(&self.open).await {
                Ok((next, committed)) => {
                    connection = next;
                    let resent = self.resend(&connection).await;
                    self.commit(committed);
                    if !resent {
                        continue;
                    }
                }
                Err(err) => {
                    self.fail(err);
                    return;
                }
            }
        }
    }

    /// Serves the session over `connection` until it ends (`None`) or the call fails.
    async fn serve(
        &mut self,
        connection: &mut Connection,
        commands: &mut mpsc::Receiver<Command>,
        ended: &watch::Sender<Option<Outcome>>,
    ) -> Option<Status> {
        loop {
            tokio::select! {
                command = commands.recv(), if self.finishing.is_none() => {
                    let Some(command) = command else {
                        // The handle is gone without a word: let go, the client may resume.
                        let detach = produced::Kind::Detach("the producer's call went away".into());
                        let _ = connection.outgoing.send(Produced { kind: Some(detach) }).await;
                        return None;
                    };
                    match command {
                        Command::Content { content, end, done } => {
                            let message = Produced { kind: Some(produced::Kind::Content(content.clone())) };
                            if end <= self.acked {
                                // Resent by a resuming client and committed already: the
                                // leader skips it.
                                let _ = done.send(Ok(end));
                            } else {
                                self.unacked.push_back(Unacked { end, content, done });
                            }
                            if connection.outgoing.send(message).await.is_err() {
                                return Some(Status::unavailable("the leader's call closed"));
                            }
                        }
                        Command::Finish(kind, done) => {
                            let message = Produced { kind: Some(kind.clone()) };
                            self.finishing = Some((kind, done));
                            if connection.outgoing.send(message).await.is_err() {
                                return Some(Status::unavailable("the leader's call closed"));
                            }
                        }
                        Command::Detach(message) => {
                            let _ = connection.outgoing.send(message).await;
                            return None;
                        }
                    }
                }
                answer = connection.incoming.message() => match answer {
                    Ok(Some(Producing { kind: Some(producing::Kind::Committed(length)) })) => self.commit(length),
                    Ok(Some(Producing { kind: Some(producing::Kind::Ended(end)) })) => {
                        let outcome = outcome(&end);
                        // Everything in the recording as it ended is committed.
                        self.commit(outcome.progress.bytes);
                        if let Some((_, done)) = self.finishing.take() {
                            let _ = done.send(Ok(outcome.clone()));
                        }
                        let _ = ended.send(Some(outcome));
                        return None;
                    }
                    Ok(Some(_)) => {}
                    Ok(None) => return Some(Status::unavailable("the leader ended the call")),
                    Err(status) => return Some(status),
                }
            }
        }
    }

    /// Where the contents not acknowledged begin (they follow one another).
    fn resend_from(&self) -> u64 {
        match self.unacked.front() {
            Some(first) => first.end - first.content.len() as u64,
            None => self.acked,
        }
    }

    /// The leader says everything up to `length` is committed.
    fn commit(&mut self, length: u64) {
        self.acked = self.acked.max(length);
        self.shared_acked.store(self.acked, Ordering::Relaxed);
        while let Some(first) = self.unacked.front() {
            if first.end > self.acked {
                break;
            }
            if let Some(Unacked { end, done, .. }) = self.unacked.pop_front() {
                let _ = done.send(Ok(end));
            }
        }
    }

    /// Sends the unacknowledged contents (and the completion, if asked) on a new call; false
    /// when the call failed already.
    async fn resend(&mut self, connection: &Connection) -> bool {
        for unacked in &self.unacked {
            let message = Produced {
                kind: Some(produced::Kind::Content(unacked.content.clone())),
            };
            if connection.outgoing.send(message).await.is_err() {
                return false;
            }
        }
        if let Some((kind, _)) = &self.finishing {
            let message = Produced {
                kind: Some(kind.clone()),
            };
            return connection.outgoing.send(message).await.is_ok();
        }
        true
    }

    /// Fails every waiter with `err`.
    fn fail(&mut self, err: Error) {
        let message = err.client_message();
        let kind = err.kind();
        for unacked in self.unacked.drain(..) {
            let _ = unacked.done.send(Err(Error::LeaderRefused {
                kind,
                message: message.clone(),
            }));
        }
        if let Some((_, done)) = self.finishing.take() {
            let _ = done.send(Err(err));
        }
    }
}

impl Forwarded {
    /// The conversation.
    pub fn id(&self) -> &ConversationId {
        &self.id
    }

    /// Byte offset after the last content accepted.
    pub fn appended_bytes(&self) -> u64 {
        self.appended
    }

    /// What the leader last said is committed of the recording.
    pub fn committed_bytes(&self) -> u64 {
        self.committed.load(Ordering::Relaxed)
    }

    /// Sends `content` to the leader; the receiver resolves once it is committed.
    ///
    /// Fails with `ConversationIdChanged` when `conversation_id` names another conversation,
    /// or `NoQuorum` when the session is over.
    pub async fn accept(
        &mut self,
        conversation_id: &[u8],
        content: &str,
    ) -> Result<Option<Committed>> {
        let id = &self.id;
        if !conversation_id.is_empty()
            && conversation_id != id.original()
            && ConversationId::parse(conversation_id)?.key() != id.key()
        {
            return Err(Error::ConversationIdChanged);
        }
        if content.is_empty() {
            return Ok(None);
        }
        self.appended += content.len() as u64;
        let (done, committed) = oneshot::channel();
        let command = Command::Content {
            content: content.to_string(),
            end: self.appended,
            done,
        };
        self.commands.send(command).await.map_err(|_| self.over())?;
        Ok(Some(committed))
    }

    /// Resolves when the session is stopped by another hand (cancel, delete, supersede,
    /// another producer, the leader shutting down).
    pub async fn stopped(&mut self) -> Stopped {
        let outcome = loop {
            if let Some(outcome) = self.ended.borrow_and_update().clone() {
                break outcome;
            }
            if self.ended.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        self.end_message = outcome.message.clone();
        match outcome.stop {
            Stop::Fenced => Stopped::Fenced,
            Stop::ShuttingDown => Stopped::ShuttingDown,
            _ => Stopped::Ended(outcome.progress),
        }
    }

    /// Completes the recording once everything sent is committed.
    ///
    /// Fails with the leader's refusal, or `NoQuorum`.
    pub async fn complete(&mut self) -> Result<Progress> {
        let outcome = self.finish(produced::Kind::Complete(true)).await?;
        self.end_message = outcome.message;
        Ok(outcome.progress)
    }

    /// Sends `kind` once everything before it is committed; how the session ended.
    async fn finish(&mut self, kind: produced::Kind) -> Result<Outcome> {
        let (done, answer) = oneshot::channel();
        self.commands
            .send(Command::Finish(kind, done))
            .await
            .map_err(|_| self.over())?;
        answer.await.map_err(|_| self.over())?
    }

    /// The recording's end message, once it ended.
    pub fn end_message(&self) -> Option<&str> {
        self.end_message.as_deref()
    }

    /// Lets go of the recording because the client's stream ended without completing, once
    /// what it sent is committed (so that a resume anywhere finds it); what to tell the client.
    pub async fn end_without_complete(mut self) -> String {
        let sent = self.appended;
        match self
            .finish(produced::Kind::EndedWithoutComplete(true))
            .await
        {
            Ok(Outcome {
                message: Some(message),
                ..
            }) => message,
            Ok(_) => crate::recorder::not_completed_message(sent),
            Err(err) => err.client_message(),
        }
    }

    /// Lets go of the recording (the client may resume it), for `reason`.
    pub fn detach(self, reason: String) {
        let message = Produced {
            kind: Some(produced::Kind::Detach(reason)),
        };
        let _ = self.commands.try_send(Command::Detach(message));
    }

    fn over(&self) -> Error {
        Error::NoQuorum {
            leader: None,
            leader_address: None,
        }
    }
}

/// Whether a failed call to the leader may go on with the next one.
pub(super) fn retriable(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unavailable | Code::Unknown | Code::Cancelled | Code::DeadlineExceeded
    )
}

/// The leader's refusal, as this node's error.
pub(super) fn refused(status: Status) -> Error {
    let kind = match status.code() {
        Code::InvalidArgument => Kind::InvalidArgument,
        Code::OutOfRange => Kind::OutOfRange,
        Code::NotFound => Kind::NotFound,
        Code::AlreadyExists => Kind::AlreadyExists,
        Code::FailedPrecondition => Kind::FailedPrecondition,
        Code::Aborted => Kind::Aborted,
        Code::ResourceExhausted => Kind::TooLarge,
        Code::Unavailable | Code::Cancelled | Code::DeadlineExceeded | Code::Unknown => {
            Kind::Unavailable
        }
        Code::Unauthenticated => Kind::Unauthenticated,
        Code::PermissionDenied => Kind::PermissionDenied,
        _ => Kind::Internal,
    };
    Error::LeaderRefused {
        kind,
        message: status.message().to_string(),
    }
}

fn outcome(end: &Ended) -> Outcome {
    let status = [
        Lifecycle::Recording,
        Lifecycle::Completed,
        Lifecycle::Cancelled,
        Lifecycle::Interrupted,
        Lifecycle::Failed,
        Lifecycle::Superseded,
        Lifecycle::Deleted,
    ]
    .into_iter()
    .find(|status| status.as_str() == end.status)
    .unwrap_or(Lifecycle::Failed);
    Outcome {
        stop: Stop::try_from(end.stop).unwrap_or(Stop::Ended),
        progress: Progress {
            chunks: end.chunks,
            bytes: end.bytes,
            status,
        },
        message: end.message.clone(),
    }
}
