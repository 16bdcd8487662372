//! After a commit: publishing what it made durable to the live recordings (readers first,
//! then the waiting producers), or, after a failed commit, ending every recording it touched as
//! `failed` and answering every waiter with the failure.
use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::journal::JournalDelta;
use super::live::{Chunk, Live, Resumed};
use super::pipeline::{Op, SweepReport, Writer};
use super::tables::Tables;
use super::wal::Redo;
use crate::error::{Error, Result};
use crate::status::Status;

/// Someone waiting for an op's outcome.
pub(super) enum Waiter {
    Started(oneshot::Sender<Result<()>>),
    Attached(oneshot::Sender<Result<Resumed>>),
    Appended(oneshot::Sender<Result<u64>>),
    /// An end, a delete or a purge.
    Flag(oneshot::Sender<Result<bool>>),
    Swept(oneshot::Sender<Result<SweepReport>>),
    Checkpointed(oneshot::Sender<Result<()>>),
}

impl Waiter {
    /// Answers with `err`.
    fn fail(self, err: &Arc<Error>) {
        let err = || Error::Shared(err.clone());
        match self {
            Waiter::Started(done) => drop(done.send(Err(err()))),
            Waiter::Attached(done) => drop(done.send(Err(err()))),
            Waiter::Appended(done) => drop(done.send(Err(err()))),
            Waiter::Flag(done) => drop(done.send(Err(err()))),
            Waiter::Swept(done) => drop(done.send(Err(err()))),
            Waiter::Checkpointed(done) => drop(done.send(Err(err()))),
        }
    }
}

/// What to do once a transaction is committed (or has failed).
pub(super) enum Effect {
    Started(Live, Option<Live>, oneshot::Sender<Result<()>>),
    Attached(Live, Resumed, oneshot::Sender<Result<Resumed>>),
    Appended(Live, Chunk, oneshot::Sender<Result<u64>>),
    Finished(Live, Status, Option<String>, oneshot::Sender<Result<bool>>),
    /// A delete or a purge, and its answer.
    Answered(oneshot::Sender<Result<bool>>, bool),
    Swept(SweepReport, oneshot::Sender<Result<SweepReport>>),
    /// The op whose storage error aborted the transaction: only its waiter is left.
    Refused(Waiter),
}

impl Effect {
    /// The op's waiter, and the live recordings the op touched.
    fn split(self) -> (Waiter, Vec<Live>) {
        match self {
            Effect::Started(live, replaced, done) => (
                Waiter::Started(done),
                std::iter::once(live).chain(replaced).collect(),
            ),
            Effect::Attached(live, _, done) => (Waiter::Attached(done), vec![live]),
            Effect::Appended(live, _, done) => (Waiter::Appended(done), vec![live]),
            Effect::Finished(live, _, _, done) => (Waiter::Flag(done), vec![live]),
            Effect::Answered(done, _) => (Waiter::Flag(done), Vec::new()),
            Effect::Swept(_, done) => (Waiter::Swept(done), Vec::new()),
            Effect::Refused(waiter) => (waiter, Vec::new()),
        }
    }
}

/// A committed op's answer other than an append's, sent once the batch is published.
enum Answer {
    Started(oneshot::Sender<Result<()>>),
    Attached(oneshot::Sender<Result<Resumed>>, Resumed),
    Flag(oneshot::Sender<Result<bool>>, bool),
    Swept(oneshot::Sender<Result<SweepReport>>, SweepReport),
}

/// Identity of a live recording: a superseded one shares its key with its successor.
fn identity(live: &Live) -> *const () {
    Arc::as_ptr(live).cast()
}

/// Committed chunks of one batch, gathered per recording so that each publishes once.
#[derive(Default)]
struct PendingChunks {
    lives: Vec<(Live, Vec<Chunk>)>,
    index: HashMap<*const (), usize>,
}

impl PendingChunks {
    fn push(&mut self, live: Live, chunk: Chunk) {
        let lives = &mut self.lives;
        let at = *self.index.entry(identity(&live)).or_insert_with(|| {
            lives.push((live, Vec::new()));
            lives.len() - 1
        });
        lives[at].1.push(chunk);
    }

    /// Publishes the chunks gathered for `live` so far.
    fn flush(&mut self, live: &Live) {
        if let Some(&at) = self.index.get(&identity(live)) {
            let chunks = std::mem::take(&mut self.lives[at].1);
            live.publish_chunks(chunks);
        }
    }

    fn flush_all(self) {
        for (live, chunks) in self.lives {
            live.publish_chunks(chunks);
        }
    }
}

impl Writer {
    /// Makes a committed transaction visible: readers first, then the producers' acks. Each
    /// recording's new chunks are published once for the whole batch, and always before its
    /// end, so that no reader sees the end before the last chunks.
    pub(super) fn publish(&self, effects: Vec<Effect>) {
        let mut chunks = PendingChunks::default();
        let mut appended = Vec::with_capacity(effects.len());
        let mut answers = Vec::new();
        for effect in effects {
            match effect {
                Effect::Appended(live, chunk, done) => {
                    appended.push((done, chunk.end()));
                    chunks.push(live, chunk);
                }
                Effect::Started(_, replaced, done) => {
                    if let Some(old) = replaced {
                        chunks.flush(&old);
                        old.publish_end(Status::Superseded, None);
                    }
                    answers.push(Answer::Started(done));
                }
                Effect::Attached(_, resumed, done) => answers.push(Answer::Attached(done, resumed)),
                Effect::Finished(live, status, message, done) => {
                    chunks.flush(&live);
                    live.publish_end(status, message);
                    answers.push(Answer::Flag(done, true));
                }
                Effect::Answered(done, answer) => answers.push(Answer::Flag(done, answer)),
                Effect::Swept(report, done) => answers.push(Answer::Swept(done, report)),
                // Only a failed transaction holds one.
                Effect::Refused(_) => {}
            }
        }
        chunks.flush_all();
        for (done, end) in appended {
            let _ = done.send(Ok(end));
        }
        for answer in answers {
            match answer {
                Answer::Started(done) => drop(done.send(Ok(()))),
                Answer::Attached(done, resumed) => drop(done.send(Ok(resumed))),
                Answer::Flag(done, answer) => drop(done.send(Ok(answer))),
                Answer::Swept(done, report) => drop(done.send(Ok(report))),
            }
        }
    }

    /// After a failed commit nothing of the batch is stored: every recording it touched is
    /// ended as `failed`, so that no later commit can leave a gap in it. `unapplied` are the
    /// ops the transaction never reached. As after a commit, the file and the readers learn
    /// the outcome before the waiters do.
    pub(super) fn fail(&self, effects: Vec<Effect>, unapplied: Vec<Op>, err: Error) {
        // What the client reads is decided by the error; the detail was logged with the commit.
        let message = format!("storage failure: {}", err.client_message());
        let err = Arc::new(err);
        let mut failed: Vec<Live> = Vec::new();
        let mut waiters = Vec::with_capacity(effects.len() + unapplied.len());
        for effect in effects {
            let (waiter, touched) = effect.split();
            waiters.push(waiter);
            touched.iter().for_each(|live| add_once(&mut failed, live));
        }
        for (waiter, live) in unapplied.into_iter().flat_map(Op::into_waiters) {
            waiters.push(waiter);
            // A recording that ended before this batch keeps the status it ended with.
            if let Some(live) = live.filter(|live| !live.is_closed()) {
                add_once(&mut failed, &live);
            }
        }
        if let Err(again) = self.record_failures(&failed, &message) {
            // They stay `recording` in the file: detached after the next open, and resumable.
            tracing::error!(error = %again, "could not record failed recordings");
        }
        for live in &failed {
            live.close();
            live.publish_end(Status::Failed, Some(message.clone()));
        }
        for waiter in waiters {
            waiter.fail(&err);
        }
    }

    /// Best effort: stores the `failed` status of recordings whose commit failed.
    fn record_failures(&self, lives: &[Live], message: &str) -> Result<()> {
        if lives.is_empty() {
            return Ok(());
        }
        let txn = self.begin_write()?;
        let mut delta = JournalDelta::default();
        let redo = Redo::default();
        let checkpoint = {
            let now = self.settings.clock.now_ms();
            let mut t = Tables::open(&txn, &self.journal, &mut delta, &redo, now)?;
            for live in lives {
                let current = t.meta(live.key())?;
                // Only a recording that is still this one and still live in the file.
                if current.is_some_and(|m| m.generation == live.generation() && m.status.is_live())
                {
                    let retention = self.settings.retention_ms;
                    // What the failed commits held is not stored: the committed progress is.
                    let stored = live.committed();
                    let message = Some(message.into());
                    t.finish_meta(live.key(), stored, Status::Failed, message, retention)?;
                }
            }
            t.finish(&self.db)?
        };
        self.db.commit(txn, &redo, checkpoint)?;
        delta.commit_to(&self.journal);
        Ok(())
    }
}

fn add_once(lives: &mut Vec<Live>, live: &Live) {
    if !lives.iter().any(|l| identity(l) == identity(live)) {
        lives.push(live.clone());
    }
}
