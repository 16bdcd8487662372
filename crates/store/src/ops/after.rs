//! What the ops of one transaction leave to do once it is committed: the vocabulary an op's
//! apply speaks (a chunk to publish and acknowledge, an end to publish, an answer to send, a
//! live recording it changed), kept in the order the ops were applied. `publish` carries it
//! out after the commit, or fails it after a failed one.
use std::sync::Arc;

use tokio::sync::oneshot;

use super::super::live::{Chunk, Live};
use crate::error::{Error, Result};
use crate::status::Status;

/// The caller waiting for an op's answer.
pub(crate) type Done<A> = oneshot::Sender<Result<A>>;

/// A caller that can be answered with a failed commit's error, whatever its answer's type.
pub(crate) trait Waiter: Send {
    /// Answers with `err`.
    fn fail(self: Box<Self>, err: &Arc<Error>);
}

impl<A: Send + 'static> Waiter for Done<A> {
    fn fail(self: Box<Self>, err: &Arc<Error>) {
        let _ = self.send(Err(Error::Shared(err.clone())));
    }
}

/// An answer decided in the transaction, sent once it is published.
pub(crate) trait Reply: Waiter {
    /// Sends the answer.
    fn send(self: Box<Self>);
}

/// A caller and its answer.
struct Answer<A>(Done<A>, A);

impl<A: Send + 'static> Waiter for Answer<A> {
    fn fail(self: Box<Self>, err: &Arc<Error>) {
        Box::new(self.0).fail(err)
    }
}

impl<A: Send + 'static> Reply for Answer<A> {
    fn send(self: Box<Self>) {
        let Answer(done, answer) = *self;
        let _ = done.send(Ok(answer));
    }
}

/// One thing to do after the commit.
pub(crate) enum Step {
    /// A chunk appended to `Live`: published with the recording's other new chunks, then
    /// acknowledged with the recording's length after it. Unboxed: one per token.
    Chunk(Live, Chunk, Done<u64>),
    /// A live recording's end, published after its new chunks.
    End(Live, Status, Option<String>),
    /// A live recording the op changed, with nothing to publish: ended as failed if the
    /// commit fails.
    Touched(Live),
    /// An answer, sent after every chunk of the batch is acknowledged.
    Answer(Box<dyn Reply>),
    /// The caller of the op whose storage error aborted the transaction.
    Aborted(Box<dyn Waiter>),
}

/// What the ops of one transaction leave to do after its commit, in the order they were
/// applied.
#[derive(Default)]
pub(crate) struct AfterCommit {
    steps: Vec<Step>,
    collected: bool,
    deletes_chunks: bool,
}

impl AfterCommit {
    /// Room for about `ops` ops.
    pub(crate) fn with_capacity(ops: usize) -> Self {
        Self {
            steps: Vec::with_capacity(ops),
            collected: false,
            deletes_chunks: false,
        }
    }

    /// `chunk` of `live` is stored: publish it, then acknowledge it to `done`.
    pub(crate) fn chunk(&mut self, live: Live, chunk: Chunk, done: Done<u64>) {
        self.steps.push(Step::Chunk(live, chunk, done));
    }

    /// `live` has ended with `status`: publish its end after its chunks.
    pub(crate) fn end(&mut self, live: Live, status: Status, message: Option<String>) {
        self.steps.push(Step::End(live, status, message));
    }

    /// `live` was changed by the op, with nothing to publish.
    pub(crate) fn touched(&mut self, live: Live) {
        self.steps.push(Step::Touched(live));
    }

    /// Answer `done` with `answer` once the commit is published.
    pub(crate) fn answer<A: Send + 'static>(&mut self, done: Done<A>, answer: A) {
        self.steps
            .push(Step::Answer(Box::new(Answer(done, answer))));
    }

    /// The op failed with storage error `err`, which aborts the transaction: its caller is
    /// answered with the commit's failure. Returns `Err(err)`.
    pub(crate) fn abort<A: Send + 'static>(&mut self, done: Done<A>, err: Error) -> Result<()> {
        self.unapplied(Box::new(done));
        Err(err)
    }

    /// The caller of an op the transaction never reached: answered with its failure.
    pub(crate) fn unapplied(&mut self, waiter: Box<dyn Waiter>) {
        self.steps.push(Step::Aborted(waiter));
    }

    /// The commit deletes the last of the expired data: the file may be compacted after it.
    pub(crate) fn collected(&mut self) {
        self.collected = true;
    }

    /// Whether [`collected`](Self::collected) was called.
    pub(crate) fn has_collected(&self) -> bool {
        self.collected
    }

    /// The commit deletes chunks: on a full disk, it is given the rest of the reserve.
    pub(crate) fn deletes_chunks(&mut self) {
        self.deletes_chunks = true;
    }

    /// Whether [`deletes_chunks`](Self::deletes_chunks) was called.
    pub(crate) fn has_deleted_chunks(&self) -> bool {
        self.deletes_chunks
    }

    /// How many callers wait on the commit.
    pub(crate) fn callers(&self) -> usize {
        let waits = |step: &&Step| !matches!(step, Step::End(..) | Step::Touched(_));
        self.steps.iter().filter(waits).count()
    }

    /// The steps, in order.
    pub(crate) fn into_steps(self) -> Vec<Step> {
        self.steps
    }
}

/// Answers `done` at once with `refusal`: the op was refused and changed nothing.
pub(crate) fn refuse<A>(done: Done<A>, refusal: Error) -> Result<()> {
    let _ = done.send(Err(refusal));
    Ok(())
}
