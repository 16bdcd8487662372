//! The task that runs a forwarded producer session (see `forwarded`): it owns the call to the
//! leader, acknowledges the contents waited for once the leader says they are committed, and
//! when the leader is lost opens the session again on the next one and resends what was not
//! acknowledged.
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
    /// Told its end once it is committed, if anyone waits for it.
    done: Option<oneshot::Sender<Result<u64>>>,
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

    /// Takes what `commands` ask (emptying it) and sends it. Returns how serving ends, if one
    /// of them ends it.
    async fn send_commands(
        &mut self,
        commands: &mut Vec<Command>,
        connection: &Connection,
    ) -> Option<Option<Status>> {
        let taken = take_commands(
            commands,
            self.acked,
            &mut self.sent,
            &mut self.unacked,
            &mut self.finishing,
        );
        for message in taken.messages {
            if connection.outgoing.send(message).await.is_err() && !taken.detach {
                // What was not sent is waiting (`unacked`, `finishing`): it goes to the next
                // leader.
                return Some(Some(Status::unavailable("the leader's call closed")));
            }
        }
        taken.detach.then_some(None)
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
            let Some(acked) = self.unacked.pop_front() else {
                break;
            };
            if let Some(done) = acked.done {
                let _ = done.send(Ok(acked.end));
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
        for done in self.unacked.drain(..).filter_map(|unacked| unacked.done) {
            let _ = done.send(Err(Error::LeaderRefused {
                kind,
                message: message.clone(),
            }));
        }
        if let Some((_, done)) = self.finishing.take() {
            let _ = done.send(Err(err));
        }
    }
}

/// What [`take_commands`] made of a handle's commands.
struct Taken {
    /// To send to the leader, in order.
    messages: Vec<Produced>,
    /// The handle let go: the session ends once they are sent.
    detach: bool,
}

/// Takes `commands` (emptying it) into a session's state before anything is sent, so that a
/// call that fails midway loses none of them: each content goes to `unacked` (unless it ends
/// at or before `acked`: resent by a resuming client and committed already, it is answered at
/// once) and moves `sent` on; a completion goes to `finishing`. The messages carry them in
/// order, the contents that come one after another together, up to
/// [`MOST_CONTENTS_A_MESSAGE`] a message. Nothing after a completion or a detach is taken: the
/// handle sends nothing more after either but a detach when its call goes away, which a
/// finishing session ignores.
fn take_commands(
    commands: &mut Vec<Command>,
    acked: u64,
    sent: &mut u64,
    unacked: &mut VecDeque<Unacked>,
    finishing: &mut Option<(produced::Kind, oneshot::Sender<Result<Outcome>>)>,
) -> Taken {
    let mut messages = Vec::new();
    let mut contents = Vec::new();
    let mut detach = false;
    for command in commands.drain(..) {
        let last = match command {
            Command::Contents {
                contents: more,
                mut done,
            } => {
                let count = more.len();
                for (at, (content, end)) in more.into_iter().enumerate() {
                    let done = if at + 1 == count { done.take() } else { None };
                    *sent = end;
                    if end <= acked {
                        if let Some(done) = done {
                            let _ = done.send(Ok(end));
                        }
                    } else {
                        let content = content.clone();
                        unacked.push_back(Unacked { end, content, done });
                    }
                    contents.push(content);
                    if contents.len() == MOST_CONTENTS_A_MESSAGE {
                        messages.push(contents_message(std::mem::take(&mut contents)));
                    }
                }
                continue;
            }
            Command::Finish(kind, done) => {
                let message = Produced {
                    kind: Some(kind.clone()),
                };
                *finishing = Some((kind, done));
                message
            }
            Command::Detach(message) => {
                detach = true;
                message
            }
        };
        if !contents.is_empty() {
            messages.push(contents_message(std::mem::take(&mut contents)));
        }
        messages.push(last);
        break;
    }
    if !contents.is_empty() {
        messages.push(contents_message(contents));
    }
    Taken { messages, detach }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command of `contents`, each ending where the one before it left off from `from`.
    fn contents(texts: &[&str], from: u64, done: Option<oneshot::Sender<Result<u64>>>) -> Command {
        let mut end = from;
        let contents = texts
            .iter()
            .map(|text| {
                end += text.len() as u64;
                (text.to_string(), end)
            })
            .collect();
        Command::Contents { contents, done }
    }

    /// The contents a message carries, or its kind's name.
    fn carried(message: &Produced) -> Vec<String> {
        match &message.kind {
            Some(produced::Kind::Content(content)) => vec![content.clone()],
            Some(produced::Kind::Contents(many)) => many.content.clone(),
            Some(produced::Kind::Complete(_)) => vec!["<complete>".into()],
            Some(produced::Kind::Detach(_)) => vec!["<detach>".into()],
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn every_content_taken_waits_for_its_ack_before_anything_is_sent() {
        let many: Vec<String> = (0..100).map(|i| format!("{i:02}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let (done, mut answer) = oneshot::channel();
        let mut commands = vec![
            contents(&many, 0, None),
            contents(&["end"], 200, Some(done)),
        ];
        let (mut sent, mut unacked, mut finishing) = (0, VecDeque::new(), None);

        let taken = take_commands(&mut commands, 0, &mut sent, &mut unacked, &mut finishing);

        assert!(commands.is_empty());
        assert!(!taken.detach);
        // All of them wait in `unacked` (so a call that fails midway sends them again), in
        // order, the last one's waiter with it.
        assert_eq!(sent, 203);
        assert_eq!(unacked.len(), 101);
        let ends: Vec<u64> = unacked.iter().map(|u| u.end).collect();
        assert_eq!(
            ends,
            (1..=100).map(|i| i * 2).chain([203]).collect::<Vec<_>>()
        );
        assert!(unacked.iter().take(100).all(|u| u.done.is_none()));
        assert!(unacked.back().is_some_and(|u| u.done.is_some()));
        assert!(
            answer.try_recv().is_err(),
            "answered before it is committed"
        );
        // Sent together, at most 64 a message, in order.
        let sizes: Vec<usize> = taken.messages.iter().map(|m| carried(m).len()).collect();
        assert_eq!(sizes, [64, 37]);
        let all: Vec<String> = taken.messages.iter().flat_map(carried).collect();
        assert_eq!(
            all,
            many.iter()
                .map(|s| s.to_string())
                .chain(["end".into()])
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn nothing_after_a_completion_or_a_detach_is_taken() {
        let (done, _answer) = oneshot::channel();
        let complete = produced::Kind::Complete(true);
        let mut commands = vec![
            contents(&["a", "b"], 0, None),
            Command::Finish(complete, done),
            contents(&["c"], 2, None),
        ];
        let (mut sent, mut unacked, mut finishing) = (0, VecDeque::new(), None);
        let taken = take_commands(&mut commands, 0, &mut sent, &mut unacked, &mut finishing);
        let all: Vec<String> = taken.messages.iter().flat_map(carried).collect();
        assert_eq!(all, ["a", "b", "<complete>"]);
        assert!(finishing.is_some() && !taken.detach);
        assert_eq!((sent, unacked.len()), (2, 2));

        let detach = Produced {
            kind: Some(produced::Kind::Detach("gone".into())),
        };
        let mut commands = vec![contents(&["d"], 2, None), Command::Detach(detach)];
        let taken = take_commands(&mut commands, 0, &mut sent, &mut unacked, &mut finishing);
        let all: Vec<String> = taken.messages.iter().flat_map(carried).collect();
        assert_eq!(all, ["d", "<detach>"]);
        assert!(taken.detach);
    }

    #[test]
    fn a_content_committed_already_is_answered_at_once_and_still_sent() {
        let (done, mut answer) = oneshot::channel();
        let mut commands = vec![
            contents(&["ab", "cd"], 0, Some(done)),
            contents(&["ef"], 4, None),
        ];
        let (mut sent, mut unacked, mut finishing) = (0, VecDeque::new(), None);
        let taken = take_commands(&mut commands, 4, &mut sent, &mut unacked, &mut finishing);
        assert_eq!(answer.try_recv().ok().map(|r| r.ok()), Some(Some(4)));
        let waiting: Vec<&str> = unacked.iter().map(|u| u.content.as_str()).collect();
        assert_eq!(waiting, ["ef"]);
        assert_eq!(sent, 6);
        let all: Vec<String> = taken.messages.iter().flat_map(carried).collect();
        assert_eq!(all, ["ab", "cd", "ef"]);
    }
}
