//! A producer session this node holds for its client while the cluster's leader runs it: the
//! chunks go to the leader's `Produce`, and each is acknowledged once the leader says it is
//! committed. When the leader is lost, the session is opened again on the next one, resuming
//! from the last committed byte and sending again what was not acknowledged (the leader skips
//! what it had committed after all): the client sees no error and no gap, and nothing is
//! written twice.
//!
//! The handle is here; the task that runs the session over its call to the leader is in
//! `forwarded_session`.
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use super::Cluster;
use super::forwarded_session::Session;
use super::relay::{Command, OUTGOING, Outcome};
use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::pb::cluster::{Open, Produced, Stop, produced};
use crate::recorder::{Progress, Stopped};
use crate::store::Committed;

/// A forwarded producer session; see the module's doc.
pub struct ForwardedProducer {
    id: ConversationId,
    commands: mpsc::Sender<Command>,
    /// How the session ended, once it has.
    ended: watch::Receiver<Option<Outcome>>,
    /// Byte offset after the last content accepted.
    appended: u64,
    /// What the leader last said is committed.
    committed: Arc<AtomicU64>,
    /// Why the session was given up, when it was: set before its task ends without an end.
    lost: Arc<OnceLock<Error>>,
    end_message: Option<String>,
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
    ) -> Result<ForwardedProducer> {
        let open = Open {
            conversation_id: id.original().to_vec(),
            resume_from,
            retention_ms: retention.map(|r| r.as_millis() as u64),
            retried_since_ms: None,
        };
        let (connection, committed) = self.open_session(&open).await?;
        let (commands, receiver) = mpsc::channel(OUTGOING);
        let (ended_tx, ended) = watch::channel(None);
        let start = resume_from.unwrap_or(0);
        let shared_acked = Arc::new(AtomicU64::new(committed));
        let lost = Arc::new(OnceLock::new());
        let session = Session {
            cluster: self.clone(),
            open,
            acked: committed,
            shared_acked: shared_acked.clone(),
            unacked: VecDeque::new(),
            sent: start,
            finishing: None,
            lost: lost.clone(),
        };
        tokio::spawn(session.drive(connection, receiver, ended_tx));
        Ok(ForwardedProducer {
            id,
            commands,
            ended,
            appended: start,
            committed: shared_acked,
            lost,
            end_message: None,
        })
    }
}

impl ForwardedProducer {
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
        self.check_id(conversation_id)?;
        if content.is_empty() {
            return Ok(None);
        }
        self.appended += content.len() as u64;
        let (done, committed) = oneshot::channel();
        let command = Command::Contents {
            contents: vec![(content.to_string(), self.appended)],
            done: Some(done),
        };
        self.commands.send(command).await.map_err(|_| self.over())?;
        Ok(Some(committed))
    }

    /// Sends the content of each of `messages` (conversation id, content) to the leader, in
    /// order and together; does not wait for their commit.
    ///
    /// Fails at the first message refused, as [`accept`](Self::accept) does, once the
    /// contents before it are sent.
    pub async fn accept_all(
        &mut self,
        messages: impl IntoIterator<Item = (Vec<u8>, String)>,
    ) -> Result<()> {
        let mut contents = Vec::new();
        let mut refused = Ok(());
        for (conversation_id, content) in messages {
            if let Err(err) = self.check_id(&conversation_id) {
                refused = Err(err);
                break;
            }
            if !content.is_empty() {
                self.appended += content.len() as u64;
                contents.push((content, self.appended));
            }
        }
        if !contents.is_empty() {
            let command = Command::Contents {
                contents,
                done: None,
            };
            self.commands.send(command).await.map_err(|_| self.over())?;
        }
        refused
    }

    /// Fails with `ConversationIdChanged` when `conversation_id` (if given) names another
    /// conversation than the session's.
    fn check_id(&self, conversation_id: &[u8]) -> Result<()> {
        let id = &self.id;
        if !conversation_id.is_empty()
            && conversation_id != id.original()
            && ConversationId::parse(conversation_id)?.key() != id.key()
        {
            return Err(Error::ConversationIdChanged);
        }
        Ok(())
    }

    /// A future that resolves once [`stopped`](Self::stopped) would, polled beside each
    /// message of the session (see [`Producer::stop_signal`](crate::recorder::Producer::stop_signal)).
    pub fn stop_signal(&self) -> impl Future<Output = ()> + Send + 'static {
        let (mut ended, lost) = (self.ended.clone(), self.lost.clone());
        async move {
            loop {
                if ended.borrow_and_update().is_some() {
                    return;
                }
                if ended.changed().await.is_err() {
                    // As `stopped`: a task over without an end stops the session only if it
                    // gave the session up.
                    if lost.get().is_some() {
                        return;
                    }
                    std::future::pending::<()>().await;
                }
            }
        }
    }

    /// Resolves when the session is stopped by another hand (cancel, delete, supersede,
    /// another producer, the leader shutting down).
    ///
    /// Fails when this node gave the session up: the leader refused its contents, or no
    /// leader took it up again within [`FAILOVER_WAIT`]. The recording stays live there, for
    /// the producer to resume.
    pub async fn stopped(&mut self) -> Result<Stopped> {
        let outcome = loop {
            if let Some(outcome) = self.ended.borrow_and_update().clone() {
                break outcome;
            }
            if self.ended.changed().await.is_err() {
                // The task is over without an end from the leader; it says why first, if it
                // gave up (else the handle let go, and nobody waits here).
                match self.lost.get() {
                    Some(err) => {
                        return Err(Error::LeaderRefused {
                            kind: err.kind(),
                            message: err.client_message(),
                        });
                    }
                    None => std::future::pending::<()>().await,
                }
            }
        };
        self.end_message = outcome.message.clone();
        Ok(match outcome.stop {
            Stop::Fenced => Stopped::Fenced,
            Stop::ShuttingDown => Stopped::ShuttingDown,
            _ => Stopped::Ended(outcome.progress),
        })
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
