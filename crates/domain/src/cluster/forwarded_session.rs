//! The task that runs a forwarded producer session (see `forwarded`): it owns the call to the
//! leader, acknowledges each content once the leader says it is committed, and when the
//! leader is lost opens the session again on the next one and resends what was not acknowledged.
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use super::Cluster;
use super::relay::{
    Command, FAILOVER_WAIT, OUTGOING, Outcome, leader_gave_up, outcome, refused, retriable,
};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::pb::cluster::cluster_client::ClusterClient;
use crate::pb::cluster::{Contents, Open, Produced, Producing, produced, producing};

/// Hand-overs to a next leader in a row that commit nothing before the session is given up.
const MAX_FRUITLESS_HANDOVERS: u32 = 10;
/// The longest wait between two attempts to open a session while no leader takes it.
const RETRY_PAUSE_MAX: Duration = Duration::from_millis(100);

/// Most contents sent in one message (as many as the leader appends together).
const MOST_CONTENTS_A_MESSAGE: usize = 64;

/// `contents` (at least one) as one message: a lone one as `Content`.
fn contents_message(mut contents: Vec<String>) -> Produced {
    let kind = if contents.len() == 1 {
        produced::Kind::Content(contents.pop().unwrap_or_default())
    } else {
        produced::Kind::Contents(Contents { content: contents })
    };
    Produced { kind: Some(kind) }
}

/// A content sent to the leader and not acknowledged yet.
pub(super) struct Unacked {
    /// Byte offset just after it.
    end: u64,
    content: String,
    /// Told its end once it is committed.
    done: oneshot::Sender<Result<u64>>,
}

/// One open `Produce` call to the leader.
pub(super) struct Connection {
    outgoing: mpsc::Sender<Produced>,
    incoming: Streaming<Producing>,
}

impl Cluster {
    /// Opens `open` on the leader; returns the call and what is committed of the recording.
    /// Tries again while no leader answers, up to [`FAILOVER_WAIT`].
    ///
    /// Fails with the leader's refusal (at once), or `NoQuorum`.
    pub(super) async fn open_session(&self, open: &Open) -> Result<(Connection, u64)> {
        let deadline = tokio::time::Instant::now() + FAILOVER_WAIT;
        let mut pause = Duration::from_millis(10);
        let mut open = open.clone();
        let first_sent_ms = crate::clock::SystemClock.now_ms();
        let mut metrics = self.raft.metrics();
        loop {
            let tried = metrics.borrow_and_update().current_leader;
            match self.try_open(&open).await {
                Ok(opened) => return Ok(opened),
                Err(status) if retriable(&status) && tokio::time::Instant::now() < deadline => {
                    tracing::debug!(%status, "no leader took the producer session yet");
                }
                Err(status) if !retriable(&status) => return Err(refused(status)),
                Err(_) => return Err(self.no_quorum()),
            }
            // The leader that failed may have started the recording before it could answer:
            // the next one takes that over rather than supersede it, so that readers already
            // following it see no end.
            if open.resume_from.is_none() {
                open.retried_since_ms = Some(first_sent_ms);
            }
            // Tried again as soon as this node hears of another leader, else after the pause:
            // a new leader that is still applying what its predecessors committed says so at
            // once, and is asked again shortly.
            let stopped = tokio::time::timeout(
                pause,
                metrics.wait_for(|metrics| metrics.current_leader != tried),
            )
            .await
            .is_ok_and(|heard| heard.is_err());
            if stopped {
                // This node's Raft has stopped: no news of a leader will come, so the pause is
                // all there is (without it, this loop would spin until the deadline).
                tokio::time::sleep(pause).await;
            }
            pause = (pause * 2).min(RETRY_PAUSE_MAX);
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
            .produce(super::network::with_trace_context(ReceiverStream::new(
                receiver,
            )))
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
pub(super) struct Session {
    pub(super) cluster: Cluster,
    pub(super) open: Open,
    /// What the leader last said is committed (shared with the handle).
    pub(super) acked: u64,
    pub(super) shared_acked: Arc<AtomicU64>,
    /// Contents sent and not yet acknowledged, in order, each with its end offset and its
    /// waiter: exactly those that end after `acked`.
    pub(super) unacked: VecDeque<Unacked>,
    /// Where the producer's next content begins: the end of the last one sent, or where it
    /// resumed from. Below `acked` while a resuming producer resends what is committed.
    pub(super) sent: u64,
    /// The producer asked to complete or let go: how, and who to answer when the leader says
    /// how the session ended.
    pub(super) finishing: Option<(produced::Kind, oneshot::Sender<Result<Outcome>>)>,
    /// Why the session was given up (shared with the handle, which stops on it).
    pub(super) lost: Arc<OnceLock<Error>>,
}

impl Session {
    /// Runs the session over `connection`, and over the calls to the next leaders, until it
    /// ends; `commands` come from the handle, `ended` tells it how the session ended.
    pub(super) async fn drive(
        mut self,
        mut connection: Connection,
        mut commands: mpsc::Receiver<Command>,
        ended: watch::Sender<Option<Outcome>>,
    ) {
        // Hand-overs in a row that committed nothing of what waited: a leader that takes the
        // session and gives it up again at once is not tried for ever. (A session with nothing
        // to commit, its producer quiet, may move through any number of leaders.)
        let mut fruitless = 0;
        loop {
            let acked_before = self.acked;
            let lost = self.serve(&mut connection, &mut commands, &ended).await;
            fruitless = if self.acked > acked_before || self.unacked.is_empty() {
                0
            } else {
                fruitless + 1
            };
            if fruitless > MAX_FRUITLESS_HANDOVERS {
                self.give_up(self.cluster.no_quorum());
                return;
            }
            let Some(status) = lost else {
                // Ended: what was sent and not committed never will be, here.
                self.fail(self.cluster.no_quorum());
                return;
            };
            if !retriable(&status) {
                self.give_up(refused(status));
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
                    self.give_up(err);
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
        let mut taken = Vec::with_capacity(MOST_CONTENTS_A_MESSAGE);
        loop {
            tokio::select! {
                received = commands.recv_many(&mut taken, MOST_CONTENTS_A_MESSAGE), if self.finishing.is_none() => {
                    if received == 0 {
                        // The handle is gone without a word: let go, the client may resume.
                        let detach = produced::Kind::Detach("the producer's call went away".into());
                        let _ = connection.outgoing.send(Produced { kind: Some(detach) }).await;
                        return None;
                    }
                    if let Some(ended) = self.send_commands(&mut taken, connection).await {
                        return ended;
                    }
                }
                answer = connection.incoming.message() => match answer {
                    Ok(Some(Producing { kind: Some(producing::Kind::Committed(length)) })) => self.commit(length),
                    Ok(Some(Producing { kind: Some(producing::Kind::Ended(end)) })) => {
                        let outcome = outcome(&end);
                        if self.finishing.is_none() && leader_gave_up(&outcome) {
                            return Some(Status::unavailable("the leader gave the session up"));
                        }
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

    /// Sends what `commands` ask (emptying it), in order; the contents among them that come
    /// one after another go in one message. Returns how serving ends, if one of them ends it.
    async fn send_commands(
        &mut self,
        commands: &mut Vec<Command>,
        connection: &Connection,
    ) -> Option<Option<Status>> {
        let closed = || Some(Some(Status::unavailable("the leader's call closed")));
        let mut contents = Vec::new();
        for command in commands.drain(..) {
            let (message, detach) = match command {
                Command::Content { content, end, done } => {
                    self.sent = end;
                    if end <= self.acked {
                        // Resent by a resuming client and committed already: the leader
                        // skips it.
                        let _ = done.send(Ok(end));
                    } else {
                        let content = content.clone();
                        self.unacked.push_back(Unacked { end, content, done });
                    }
                    contents.push(content);
                    continue;
                }
                Command::Finish(kind, done) => {
                    let message = Produced {
                        kind: Some(kind.clone()),
                    };
                    self.finishing = Some((kind, done));
                    (message, false)
                }
                Command::Detach(message) => (message, true),
            };
            // The contents before it go first.
            if !contents.is_empty() {
                let sent = connection.outgoing.send(contents_message(contents)).await;
                if sent.is_err() {
                    return closed();
                }
            }
            let sent = connection.outgoing.send(message).await;
            if detach {
                return Some(None);
            }
            if sent.is_err() {
                return closed();
            }
            // Finishing: what came after it is dropped unread, as the handle sends nothing
            // more but a detach when its call goes away, which a finishing session ignores.
            return None;
        }
        if !contents.is_empty()
            && connection
                .outgoing
                .send(contents_message(contents))
                .await
                .is_err()
        {
            return closed();
        }
        None
    }

    /// Where the next leader's session resumes: where the contents not acknowledged begin
    /// (they follow one another), else where the producer's next content begins. Not at
    /// `acked` when nothing waits: a resuming producer still resending what is committed would
    /// have its resent bytes appended again by a leader told the session resumes at `acked`.
    fn resend_from(&self) -> u64 {
        match self.unacked.front() {
            Some(first) => first.end - first.content.len() as u64,
            None => self.sent,
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
        let contents: Vec<String> = self.unacked.iter().map(|u| u.content.clone()).collect();
        for contents in contents.chunks(MOST_CONTENTS_A_MESSAGE) {
            let message = contents_message(contents.to_vec());
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

    /// Gives the session up for `err`: every waiter fails with it, and the handle's
    /// `stopped` says it, so a producer waiting on nothing else is answered too.
    fn give_up(&mut self, err: Error) {
        let id = crate::id::ConversationId::parse(&self.open.conversation_id);
        let conversation = id.map(|id| id.to_string()).unwrap_or_default();
        tracing::warn!(%conversation, error = %err, "gave up a forwarded producer session; its producer may resume");
        let _ = self.lost.set(Error::LeaderRefused {
            kind: err.kind(),
            message: err.client_message(),
        });
        self.fail(err);
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
