//! The commit pipeline: one thread owns every write transaction. It takes all the work that is
//! waiting, applies it in one transaction, commits once (one fsync), and only then publishes the
//! new committed state to readers and answers the producers (see `publish`).
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::database::DbHandle;
use super::journal::{JournalDelta, JournalIndex};
use super::live::{Admit, Admitted, Chunk, Live};
use super::publish::{Effect, Waiter};
use super::schema::RecordingMeta;
use super::tables::Tables;
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::recorder::Status;

/// Most ops folded into one transaction; bounds the size and latency of a single commit.
const MAX_OPS_PER_COMMIT: usize = 4096;

/// Work for the writer thread.
pub(crate) enum Op {
    /// Starts a recording, replacing the conversation's previous one in the same commit.
    Start {
        id: ConversationId,
        admit: Admit,
        done: oneshot::Sender<Result<()>>,
    },
    /// Appends one chunk to a live recording.
    Append {
        live: Live,
        chunk: Chunk,
        done: oneshot::Sender<Result<u64>>,
    },
    /// Ends a recording; answers `true` if this op ended it, `false` if it had already ended.
    Finish {
        live: Live,
        status: Status,
        message: Option<String>,
        done: oneshot::Sender<Result<bool>>,
    },
    /// Deletes expired recordings, at most `max_chunks` chunks in this commit.
    Sweep {
        max_chunks: u64,
        done: oneshot::Sender<Result<SweepReport>>,
    },
    /// Commits what is queued, then stops the pipeline; later submissions fail.
    Close,
}

impl Op {
    /// The op's waiter, to answer it without applying it.
    pub(super) fn into_waiter(self) -> Option<(Waiter, Option<Live>)> {
        match self {
            Op::Start { done, .. } => Some((Waiter::Started(done), None)),
            Op::Append { live, done, .. } => Some((Waiter::Appended(done), Some(live))),
            Op::Finish { live, done, .. } => Some((Waiter::Finished(done), Some(live))),
            Op::Sweep { done, .. } => Some((Waiter::Swept(done), None)),
            Op::Close => None,
        }
    }
}

/// What one sweep commit deleted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SweepReport {
    /// Recordings deleted whole.
    pub recordings_deleted: u64,
    /// Chunks deleted, of those recordings and of ones left for a later commit.
    pub chunks_deleted: u64,
    /// Expired data is left for the next commit because this one reached its chunk budget.
    pub more: bool,
}

/// Settings the writer applies to every op.
pub(crate) struct WriterSettings {
    pub retention_ms: u64,
    pub clock: Arc<dyn Clock>,
}

/// The commit pipeline's state; lives on its thread.
pub(crate) struct Writer {
    pub(super) db: Arc<DbHandle>,
    pub(super) journal: Arc<JournalIndex>,
    pub(super) settings: WriterSettings,
    /// Sequence number of the next journal entry.
    pub(super) next_seq: u64,
    /// Journal entries before this one are deleted.
    journal_pruned_to: u64,
}

impl Writer {
    /// A writer over `db`, whose journal was folded away on open.
    pub(crate) fn new(
        db: Arc<DbHandle>,
        journal: Arc<JournalIndex>,
        settings: WriterSettings,
    ) -> Self {
        Self {
            db,
            journal,
            settings,
            next_seq: 0,
            journal_pruned_to: 0,
        }
    }

    /// Serves ops until told to close or every sender is gone.
    pub(crate) fn run(mut self, mut ops: mpsc::Receiver<Op>) {
        let mut batch = Vec::with_capacity(MAX_OPS_PER_COMMIT);
        while let Some(op) = ops.blocking_recv() {
            let mut closing = push(&mut batch, op);
            // Natural batching: whatever queued up during the previous commit goes in this one.
            while batch.len() < MAX_OPS_PER_COMMIT {
                match ops.try_recv() {
                    Ok(op) => closing |= push(&mut batch, op),
                    Err(_) => break,
                }
            }
            self.commit(&mut batch);
            if closing {
                // Refuse new work, but commit what was already accepted.
                ops.close();
                while let Ok(op) = ops.try_recv() {
                    push(&mut batch, op);
                    if batch.len() == MAX_OPS_PER_COMMIT {
                        self.commit(&mut batch);
                    }
                }
                self.commit(&mut batch);
                break;
            }
        }
        tracing::debug!("commit pipeline stopped");
    }

    fn commit(&mut self, batch: &mut Vec<Op>) {
        if let Some(err) = self.db.full_error() {
            // The disk is full: what would grow the file fails now, ending its recording.
            let (refused, rest): (Vec<Op>, Vec<Op>) = batch
                .drain(..)
                .partition(|op| matches!(op, Op::Start { .. } | Op::Append { .. }));
            *batch = rest;
            if !refused.is_empty() {
                self.fail(Vec::new(), refused, err);
            }
        }
        if batch.is_empty() {
            return;
        }
        let sweeping = batch.iter().any(|op| matches!(op, Op::Sweep { .. }));
        let mut effects = Vec::with_capacity(batch.len());
        let mut ops = batch.drain(..);
        let mut delta = JournalDelta::new(self.next_seq);
        let outcome = self.apply_all(&mut ops, &mut effects, &mut delta, sweeping);
        self.next_seq = delta.next_seq();
        if outcome.is_ok()
            && effects
                .iter()
                .any(|e| matches!(e, Effect::Swept(r, _) if !r.more && r.chunks_deleted > 0))
        {
            self.db.collected();
        }
        match outcome {
            Ok(()) => {
                self.journal_pruned_to = delta.commit_to(&self.journal, self.journal_pruned_to);
                self.publish(effects);
            }
            Err(err) => {
                // The ops after the one that failed were never applied; they fail too.
                let unapplied: Vec<Op> = ops.collect();
                tracing::error!(
                    error = %err,
                    ops = effects.len() + unapplied.len(),
                    "commit failed"
                );
                // The file first: it must be usable again before the failures are recorded.
                self.db.recover(&err);
                self.fail(effects, unapplied, err);
            }
        }
    }

    /// Applies `ops` in one transaction and commits it; `delta` gathers its journal changes.
    /// Folds the recordings that are due at the end, or the whole journal first when `ops`
    /// include a sweep.
    fn apply_all(
        &self,
        ops: &mut impl Iterator<Item = Op>,
        effects: &mut Vec<Effect>,
        delta: &mut JournalDelta,
        sweeping: bool,
    ) -> Result<()> {
        let txn = self.db.begin_write()?;
        let now = self.settings.clock.now_ms();
        let pruned_to = self.journal_pruned_to;
        {
            let mut t = Tables::open(&txn, &self.journal, delta, now)?;
            if sweeping {
                // Sweeps delete folded chunks in bounded commits; unfolded ones would all have
                // to go at once, with their recording's row.
                t.fold_everything(pruned_to)?;
            }
            for op in ops {
                self.apply(&mut t, op, effects)?;
            }
            t.fold_due(pruned_to)?;
            t.flush_metas()?;
        }
        txn.commit().map_err(Error::storage)
    }

    /// Applies one op to the open transaction, queueing what to do once it is committed.
    /// Refusals (a closed recording, the live limit) are answered at once; storage errors
    /// abort the whole transaction, after the failing op's waiter has been queued.
    fn apply(&self, t: &mut Tables<'_, '_>, op: Op, effects: &mut Vec<Effect>) -> Result<()> {
        match op {
            Op::Start { id, admit, done } => {
                let key = id.key();
                let generation = match t.meta(key) {
                    Ok(old) => old.map_or(1, |old| old.generation + 1),
                    Err(err) => {
                        effects.push(Effect::Refused(Waiter::Started(done)));
                        return Err(err);
                    }
                };
                // Decided before anything is deleted, so that a refused start deletes nothing.
                let Admitted { live, replaced } = match admit(generation, t.now) {
                    Ok(admitted) => admitted,
                    Err(refusal) => {
                        let _ = done.send(Err(refusal));
                        return Ok(());
                    }
                };
                effects.push(Effect::Started(live, replaced, done));
                t.delete_recording(key)?;
                t.set_meta(key, Some(RecordingMeta::started(&id, generation, t.now)));
                Ok(())
            }
            Op::Append { live, chunk, done } => {
                if live.is_closed() {
                    let _ = done.send(Err(live.ended_error()));
                    return Ok(());
                }
                live.touch(t.now);
                let stored = t.append_chunk(live.key(), &chunk);
                effects.push(Effect::Appended(live, chunk, done));
                stored
            }
            Op::Finish {
                live,
                status,
                message,
                done,
            } => {
                if !live.close() {
                    let _ = done.send(Ok(false));
                    return Ok(());
                }
                let key = live.key();
                let stored = t.appended(key).unwrap_or_else(|| live.committed());
                effects.push(Effect::Finished(live, status, message.clone(), done));
                let retention = self.settings.retention_ms;
                t.finish_meta(key, stored, status, message, retention)?;
                // Its last run, so that it does not hold the journal's dead prefix back.
                t.fold_recording(key)
            }
            Op::Sweep { max_chunks, done } => match t.sweep_expired(max_chunks) {
                Ok(report) => {
                    effects.push(Effect::Swept(report, done));
                    Ok(())
                }
                Err(err) => {
                    effects.push(Effect::Refused(Waiter::Swept(done)));
                    Err(err)
                }
            },
            Op::Close => Ok(()),
        }
    }
}

/// Adds `op` to the batch; true if it asks the pipeline to close.
fn push(batch: &mut Vec<Op>, op: Op) -> bool {
    match op {
        Op::Close => true,
        op => {
            batch.push(op);
            false
        }
    }
}
