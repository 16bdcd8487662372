//! `Producer`: one producer's session on a live recording. Checks each incoming message
//! against the session's id and the size limits, skips what a resuming producer resends that
//! is already committed, and appends the rest.
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Limits;
use super::progress::{Progress, Status};
use super::tape::{Holder, Tape, TapeWriter};
use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::store::Committed;

/// Why a recording detached when its producer's stream ended without `complete=true`; the
/// end message says it if no producer resumes.
const STREAM_ENDED_WITHOUT_COMPLETE: &str = "its request stream ended without complete=true";

/// Why a producer's session stopped by another hand than its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// The recording ended (cancelled, deleted, superseded, idle, failed); its final progress.
    Ended(Progress),
    /// Another producer resumed the recording; this one may store nothing more.
    Fenced,
    /// The server is shutting down; the recording stays live for the producer to resume.
    ShuttingDown,
}

/// A producer's session on a live recording. Dropping it before it completes detaches the
/// producer: the recording waits the grace period for a resume.
#[derive(Debug)]
pub struct Producer {
    tape: Arc<Tape>,
    /// `None` once the session has completed or detached.
    writer: Option<TapeWriter>,
    session: u64,
    limits: Limits,
    holder: watch::Receiver<Holder>,
    stopping: CancellationToken,
    /// Bytes still to be resent that are already committed: skipped, not stored again.
    skip: u64,
}

impl Producer {
    /// A session writing with `writer` that will resend from byte `resume_from` (at most what
    /// is committed); `stopping` is cancelled at shutdown.
    pub(super) fn new(
        writer: TapeWriter,
        resume_from: u64,
        limits: Limits,
        stopping: CancellationToken,
    ) -> Self {
        let tape = writer.tape().clone();
        let skip = writer.appended_bytes().saturating_sub(resume_from);
        Self {
            holder: tape.watch_holder(),
            session: writer.session(),
            tape,
            writer: Some(writer),
            limits,
            stopping,
            skip,
        }
    }

    /// The conversation being recorded.
    pub fn id(&self) -> &ConversationId {
        self.tape.id()
    }

    /// Bytes this producer has sent so far, counting from the start of the recording: what it
    /// resent that was already committed included, and what is not committed yet.
    pub fn appended_bytes(&self) -> u64 {
        let appended = self
            .writer
            .as_ref()
            .map_or(self.tape.progress().bytes, TapeWriter::appended_bytes);
        appended - self.skip
    }

    /// What is committed of the recording now, and its status.
    pub fn progress(&self) -> Progress {
        self.tape.progress()
    }

    /// A receiver that wakes whenever more of the recording is committed, or it ends.
    pub fn subscribe(&self) -> watch::Receiver<Progress> {
        self.tape.subscribe()
    }

    /// Why the recording ended, when there is more to say than its status; fit for clients.
    pub fn end_message(&self) -> Option<&str> {
        self.tape.end_message()
    }

    /// Checks a later message's id (empty, or the same conversation in any form) and appends
    /// its non-empty content as one chunk, less what a resuming producer resent that is
    /// already committed. Returns the commit receiver, or `None` when nothing is appended.
    ///
    /// Fails with `ConversationIdChanged`, `InvalidConversationId`, `ChunkTooLarge`,
    /// `RecordingTooLarge`, `ResumeInsideCharacter`, `RecordingEnded` after
    /// [`complete`](Self::complete), or `ShuttingDown`. A failed message appends nothing.
    pub async fn accept(
        &mut self,
        conversation_id: &[u8],
        content: &str,
    ) -> Result<Option<Committed>> {
        let skip = self.skip;
        let Some(start) = self.admit(conversation_id, content, 0)? else {
            return Ok(None);
        };
        let writer = self.writer.as_mut().ok_or(Error::RecordingEnded)?;
        let appended = writer.append(&content[start..]).await;
        if appended.is_err() {
            self.skip = skip;
        }
        Ok(Some(appended?))
    }

    /// As [`accept`](Self::accept) for each of `messages` (conversation id, content) in
    /// order, all appended together: one place in the commit queue for all of them, so that a
    /// producer whose messages arrive together waits for room once, not once per token. Each
    /// content is kept as it is (not copied), and nothing else of the messages is kept while
    /// it waits. Does not wait for their commit.
    ///
    /// Fails as [`accept`](Self::accept) does, at the first message refused: the messages
    /// before it are appended, it and those after it are not.
    pub async fn accept_all(
        &mut self,
        messages: impl IntoIterator<Item = (Vec<u8>, String)>,
    ) -> Result<()> {
        self.accept_all_answered(messages).await.map(drop)
    }

    /// As [`accept_all`](Self::accept_all), returning each appended chunk's commit answer
    /// (the recording's length once it is committed), in order; none when nothing was
    /// appended.
    ///
    /// Fails as [`accept_all`](Self::accept_all) does.
    pub async fn accept_all_answered(
        &mut self,
        messages: impl IntoIterator<Item = (Vec<u8>, String)>,
    ) -> Result<Vec<Committed>> {
        let skip = self.skip;
        let mut contents = Vec::new();
        let mut pending = 0;
        let mut refused = None;
        for (conversation_id, content) in messages {
            match self.admit(&conversation_id, &content, pending) {
                Ok(Some(start)) => {
                    pending += (content.len() - start) as u64;
                    contents.push(Bytes::from(content.into_bytes()).slice(start..));
                }
                Ok(None) => {}
                Err(err) => {
                    refused = Some(err);
                    break;
                }
            }
        }
        let mut answers = Vec::new();
        if !contents.is_empty() {
            let writer = self.writer.as_mut().ok_or(Error::RecordingEnded)?;
            // A lone message (a producer's usual pace) goes as a plain append, not a group.
            let appended = match contents.len() {
                1 => writer
                    .append_bytes(contents.remove(0))
                    .await
                    .map(|one| vec![one]),
                _ => writer
                    .write_batch(contents, None, None)
                    .await
                    .map(|batch| batch.into_appends()),
            };
            match appended {
                Ok(appended) => answers = appended,
                Err(err) => {
                    self.skip = skip;
                    return Err(err);
                }
            }
        }
        refused.map_or(Ok(answers), Err)
    }

    /// Where in a message's `content` what is to be appended starts, after the `pending` bytes
    /// admitted but not yet appended: `None` when nothing is (empty, or all of it a resend of
    /// what is committed). Uses up as much of the resend skip as it covers.
    ///
    /// Fails as [`accept`](Self::accept) does; a refused message leaves the skip whole (and
    /// the caller puts it back if the append fails).
    fn admit(
        &mut self,
        conversation_id: &[u8],
        content: &str,
        pending: u64,
    ) -> Result<Option<usize>> {
        let id = self.tape.id();
        if !conversation_id.is_empty()
            && conversation_id != id.original()
            && ConversationId::parse(conversation_id)?.key() != id.key()
        {
            return Err(Error::ConversationIdChanged);
        }
        self.limits.check_chunk(content.len())?;
        let writer = self.writer.as_ref().ok_or(Error::RecordingEnded)?;
        let appended = writer.appended_bytes() + pending;
        let start = match usize::try_from(self.skip) {
            Ok(skip) if skip >= content.len() => {
                self.skip -= content.len() as u64;
                return Ok(None);
            }
            // The skip is used up only once the rest is admitted (below): a refused message
            // leaves it whole for the resend.
            Ok(skip) if skip > 0 => match content.is_char_boundary(skip) {
                true => skip,
                false => return Err(Error::ResumeInsideCharacter { offset: appended }),
            },
            _ => 0,
        };
        if start == content.len() {
            return Ok(None);
        }
        self.limits
            .check_recording(appended + (content.len() - start) as u64)?;
        self.skip = 0;
        Ok(Some(start))
    }

    /// A future that resolves once [`stopped`](Self::stopped) would: made once per session and
    /// polled beside each message, where making `stopped` anew for every message would
    /// register and drop three waiters per token.
    pub fn stop_signal(&self) -> impl Future<Output = ()> + Send + 'static {
        let (tape, mut holder) = (self.tape.clone(), self.holder.clone());
        let (stopping, session) = (self.stopping.clone(), self.session);
        async move {
            tokio::select! {
                _ = tape.ended() => {}
                _ = holder.wait_for(|h| h.session != session) => {}
                () = stopping.cancelled() => {}
            }
        }
    }

    /// Waits until the session is stopped by another hand: the recording ends (cancel,
    /// delete, supersede, idle timeout, storage failure), another producer resumes it, or the
    /// server shuts down.
    pub async fn stopped(&mut self) -> Stopped {
        let session = self.session;
        let holder = &mut self.holder;
        // Not the progress channel: it changes at every commit, and the session would wake
        // for each one.
        tokio::select! {
            progress = self.tape.ended() => Stopped::Ended(progress),
            _ = holder.wait_for(|h| h.session != session) => Stopped::Fenced,
            () = self.stopping.cancelled() => Stopped::ShuttingDown,
        }
    }

    /// Finishes the recording as `completed` once all its chunks are committed. The returned
    /// progress says how it really ended (it may have been cancelled or superseded first).
    ///
    /// Fails with `Fenced` when another producer has taken over, when the end cannot be
    /// committed, or was already asked for.
    pub async fn complete(&mut self) -> Result<Progress> {
        let writer = self.writer.take().ok_or(Error::RecordingEnded)?;
        writer.finish(Status::Completed, None).await
    }

    /// Lets go of the recording because its producer's request stream ended without a message
    /// with `complete=true`. A clean end of stream cannot be told from a cancelled or reset
    /// call (hyper reports a client's `RST_STREAM(CANCEL)` as a clean end), so it is not a
    /// completion: the producer detaches as on a lost connection. Returns what to tell a
    /// producer that is still listening.
    pub fn end_without_complete(self) -> String {
        let sent = self.appended_bytes();
        self.detach(STREAM_ENDED_WITHOUT_COMPLETE.into());
        not_completed_message(sent)
    }

    /// Lets go of the recording because of `reason`: it stays live for the grace period, for
    /// a producer to resume.
    pub fn detach(mut self, reason: String) {
        if let Some(writer) = self.writer.take() {
            writer.detach(reason);
        }
    }
}

/// What a producer whose stream ended without `complete=true`, after `sent` bytes, is told.
pub fn not_completed_message(sent: u64) -> String {
    format!(
        "not completed: the request stream ended without a message with complete=true. \
         The recording waits --producer-grace for its producer, then ends as interrupted; \
         either way, resume it with resume_from_offset={sent} and finish it with \
         complete=true"
    )
}
