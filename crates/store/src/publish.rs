//! After a commit: publishing what it made durable to the live recordings (readers first,
//! then the waiting producers), or, after a failed commit, ending every recording it touched as
//! `failed` and answering every waiter with the failure.
use std::collections::HashMap;
use std::sync::Arc;

use super::journal::JournalDelta;
use super::live::{Chunk, Live};
use super::ops::{AfterCommit, Op, Reply, Step, Waiter};
use super::pipeline::Writer;
use super::tables::Tables;
use super::wal::Redo;
use crate::error::{Error, Result};
use crate::status::Status;

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
    /// Makes a committed transaction visible: readers first, then the producers' acks, then
    /// the other answers. Each recording's new chunks are published once for the whole batch,
    /// and always before its end, so that no reader sees the end before the last chunks.
    pub(super) fn publish(&self, after: AfterCommit) {
        let steps = after.into_steps();
        let mut chunks = PendingChunks::default();
        let mut acks = Vec::with_capacity(steps.len());
        let mut answers: Vec<Box<dyn Reply>> = Vec::new();
        for step in steps {
            match step {
                Step::Chunk(live, chunk, done) => {
                    acks.push((done, chunk.end()));
                    chunks.push(live, chunk);
                }
                Step::End(live, status, message) => {
                    chunks.flush(&live);
                    live.publish_end(status, message);
                }
                Step::Answer(answer) => answers.push(answer),
                // Only a failed transaction needs them.
                Step::Touched(_) | Step::Aborted(_) => {}
            }
        }
        chunks.flush_all();
        for (done, end) in acks {
            let _ = done.send(Ok(end));
        }
        for answer in answers {
            answer.send();
        }
    }

    /// After a failed commit nothing of the batch is stored: every recording it touched is
    /// ended as `failed`, so that no later commit can leave a gap in it. `unapplied` are the
    /// ops the transaction never reached. As after a commit, the file and the readers learn
    /// the outcome before the waiters do.
    pub(super) fn fail(&self, after: AfterCommit, unapplied: Vec<Op>, err: Error) {
        // What the client reads is decided by the error; the detail was logged with the commit.
        let message = format!("storage failure: {}", err.client_message());
        let err = Arc::new(err);
        let mut failed: Vec<Live> = Vec::new();
        let steps = after.into_steps();
        let mut waiters: Vec<Box<dyn Waiter>> = Vec::with_capacity(steps.len() + unapplied.len());
        for step in steps {
            match step {
                Step::Chunk(live, _, done) => {
                    waiters.push(Box::new(done));
                    add_once(&mut failed, &live);
                }
                Step::End(live, ..) | Step::Touched(live) => add_once(&mut failed, &live),
                Step::Answer(answer) => waiters.push(answer),
                Step::Aborted(waiter) => waiters.push(waiter),
            }
        }
        let mut abandoned = Vec::new();
        unapplied
            .into_iter()
            .for_each(|op| op.abandon(&mut abandoned));
        for (waiter, live) in abandoned {
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
        if let Some(replicated) = &self.db.replicated {
            replicated.failed.send_modify(|failed| *failed += 1);
        }
        for waiter in waiters {
            waiter.fail(&err);
        }
    }

    /// Best effort: stores the `failed` status of recordings whose commit failed.
    ///
    /// Not on a node of a cluster: there a commit that failed may still be applied later (a
    /// proposal that timed out), or was decided on a state this node had not caught up with,
    /// so the progress it knows is no ground to end a recording on. The recordings stay
    /// `recording`: their producers resume them, or the next leader adopts them.
    fn record_failures(&self, lives: &[Live], message: &str) -> Result<()> {
        if lives.is_empty() || self.db.replicated.is_some() {
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
