//! The commit pipeline: one thread owns every write transaction. It takes all the work that is
//! waiting, applies it in one transaction, commits once (one fsync), and only then publishes the
//! new committed state to readers and answers the producers (see `publish`).
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, mpsc, oneshot};

use super::database::DbHandle;
use super::journal::{JournalDelta, JournalIndex};
use super::live::{Admission, Admit, Admitted, Chunk, Live, Resumed};
use super::pacing::Pacing;
use super::publish::{Effect, Waiter};
use super::schema::{ChunkLayout, RecordingMeta};
use super::stream_row::StreamRow;
use super::tables::Tables;
use super::wal::Redo;
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::metrics as metric;
use crate::status::Status;

/// Most ops folded into one transaction; bounds the size and latency of a single commit.
const MAX_OPS_PER_COMMIT: usize = 4096;

/// An op in the writer's queue, with the room its chunk bytes take there (given back as the
/// writer takes the op).
pub(crate) struct Queued {
    pub op: Op,
    /// Held until the writer takes the op; dropping it gives the room back.
    pub _room: Option<OwnedSemaphorePermit>,
}

impl From<Op> for Queued {
    /// An op that takes no room (it carries no chunk, or its room is not counted).
    fn from(op: Op) -> Self {
        Queued { op, _room: None }
    }
}

/// Work for the writer thread.
pub(crate) enum Op {
    /// Starts a recording, replacing the conversation's previous one in the same commit, or
    /// reopens the previous one, as `admit` decides.
    Start {
        id: ConversationId,
        /// The recording's own retention, if its producer chose one.
        retention_ms: Option<u64>,
        /// The new recording's `streams` row, when it is made over HTTP.
        stream_row: Option<Vec<u8>>,
        admit: Admit,
        done: oneshot::Sender<Result<()>>,
    },
    /// Hands a live recording to a new producer session, unless `resume_from` is past what is
    /// committed; later appends of older sessions are refused.
    Attach {
        live: Live,
        resume_from: u64,
        done: oneshot::Sender<Result<Resumed>>,
    },
    /// Appends one chunk to a live recording, if `session` still holds it.
    Append {
        live: Live,
        session: u64,
        chunk: Chunk,
        done: oneshot::Sender<Result<u64>>,
    },
    /// Ends a recording; answers `true` if this op ended it, `false` if it had already ended
    /// or `only` did not hold.
    Finish {
        live: Live,
        status: Status,
        message: Option<String>,
        only: EndIf,
        done: oneshot::Sender<Result<bool>>,
    },
    /// Marks an ended recording deleted, due now; answers whether there was one.
    Delete {
        key: u128,
        done: oneshot::Sender<Result<bool>>,
    },
    /// Deletes up to `max_chunks` chunks of a recording marked deleted; answers whether it is
    /// gone (or was not marked deleted).
    Purge {
        key: u128,
        max_chunks: u64,
        done: oneshot::Sender<Result<bool>>,
    },
    /// Deletes expired recordings, at most `max_chunks` chunks in this commit.
    Sweep {
        max_chunks: u64,
        done: oneshot::Sender<Result<SweepReport>>,
    },
    /// Writes (or removes, with `None`) the `streams` row of a recording; answers `true`.
    PutStreamRow {
        key: u128,
        row: Option<Vec<u8>>,
        done: oneshot::Sender<Result<bool>>,
    },
    /// Ops applied in order in one transaction: all of them are committed, or none.
    Together(Vec<Op>),
    /// Makes everything committed so far durable in redb and empties the write-ahead log.
    Checkpoint { done: oneshot::Sender<Result<()>> },
    /// Commits what is queued, then stops the pipeline; later submissions fail.
    Close,
}

impl Op {
    /// The op's waiters (a group has several), to answer them without applying the op.
    pub(super) fn into_waiters(self) -> Vec<(Waiter, Option<Live>)> {
        match self {
            Op::Start { done, .. } => vec![(Waiter::Started(done), None)],
            Op::Attach { live, done, .. } => vec![(Waiter::Attached(done), Some(live))],
            Op::Append { live, done, .. } => vec![(Waiter::Appended(done), Some(live))],
            Op::Finish { live, done, .. } => vec![(Waiter::Flag(done), Some(live))],
            Op::Delete { done, .. } | Op::Purge { done, .. } | Op::PutStreamRow { done, .. } => {
                vec![(Waiter::Flag(done), None)]
            }
            Op::Sweep { done, .. } => vec![(Waiter::Swept(done), None)],
            Op::Together(ops) => ops.into_iter().flat_map(Op::into_waiters).collect(),
            Op::Checkpoint { done } => vec![(Waiter::Checkpointed(done), None)],
            Op::Close => Vec::new(),
        }
    }

    /// Bytes of chunk data it carries.
    pub(super) fn chunk_bytes(&self) -> usize {
        match self {
            Op::Append { chunk, .. } => chunk.data.len(),
            Op::Together(ops) => ops.iter().map(Op::chunk_bytes).sum(),
            _ => 0,
        }
    }

    /// Whether applying it grows the file (refused while the disk is full).
    fn grows(&self) -> bool {
        match self {
            Op::Start { .. } | Op::Append { .. } => true,
            Op::Together(ops) => ops.iter().any(Op::grows),
            _ => false,
        }
    }
}

/// When an end goes ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndIf {
    /// Whatever the producers do.
    Always,
    /// Only while this producer session holds the recording.
    Holds(u64),
    /// Only if this producer session is the last one and has let go.
    Detached(u64),
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
    /// Tombstones forgotten, their `--tombstone-retention` having passed.
    pub tombstones_forgotten: u64,
}

/// Settings the writer applies to every op.
pub(crate) struct WriterSettings {
    pub retention_ms: u64,
    pub tombstone_ms: u64,
    pub clock: Arc<dyn Clock>,
    /// Least time between the starts of commits that hold several ops (see `pacing`).
    pub commit_interval: std::time::Duration,
}

/// The commit pipeline's state; lives on its thread.
pub(crate) struct Writer {
    pub(super) db: Arc<DbHandle>,
    pub(super) journal: Arc<JournalIndex>,
    pub(super) settings: WriterSettings,
}

impl Writer {
    /// A writer over `db`, whose journal was folded into `chunks` on open.
    pub(crate) fn new(
        db: Arc<DbHandle>,
        journal: Arc<JournalIndex>,
        settings: WriterSettings,
    ) -> Self {
        Self {
            db,
            journal,
            settings,
        }
    }

    /// Serves ops until told to close or every sender is gone.
    pub(crate) fn run(mut self, mut ops: mpsc::Receiver<Queued>) {
        let mut batch = Vec::with_capacity(MAX_OPS_PER_COMMIT);
        let mut pacing = Pacing::new(self.settings.commit_interval);
        while let Some(op) = ops.blocking_recv() {
            pacing.wait();
            let mut closing = push(&mut batch, op);
            // Group commit: whatever queued up during the previous commit (and the pacing wait)
            // goes in this one.
            while batch.len() < MAX_OPS_PER_COMMIT {
                match ops.try_recv() {
                    Ok(op) => closing |= push(&mut batch, op),
                    Err(_) => break,
                }
            }
            pacing.started(batch.len());
            let checkpoints: Vec<Op> = batch
                .extract_if(.., |op| matches!(op, Op::Checkpoint { .. }))
                .collect();
            self.commit(&mut batch);
            for op in checkpoints {
                if let Op::Checkpoint { done } = op {
                    let _ = done.send(self.checkpoint());
                }
            }
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
        // So that the next start has no log to replay.
        if let Err(err) = self.checkpoint() {
            tracing::error!(error = %err, "could not checkpoint at shutdown; the next start replays the write-ahead log");
        }
        tracing::debug!("commit pipeline stopped");
    }

    fn commit(&mut self, batch: &mut Vec<Op>) {
        if let Some(err) = self.db.full_error() {
            // The disk is full: what would grow the file fails now, ending its recording.
            let (refused, rest): (Vec<Op>, Vec<Op>) = batch.drain(..).partition(Op::grows);
            *batch = rest;
            if !refused.is_empty() {
                self.fail(Vec::new(), refused, err);
            }
        }
        if batch.is_empty() {
            return;
        }
        let sweeping = batch.iter().any(|op| matches!(op, Op::Sweep { .. }));
        let (ops_in_batch, tokens, bytes) = appended(batch);
        let mut effects = Vec::with_capacity(batch.len());
        let mut ops = batch.drain(..);
        let mut delta = JournalDelta::default();
        let outcome = self.apply_all(&mut ops, &mut effects, &mut delta, sweeping);
        if outcome.is_ok()
            && effects
                .iter()
                .any(|e| matches!(e, Effect::Swept(r, _) if !r.more && r.chunks_deleted > 0))
        {
            self.db.collected();
        }
        match outcome {
            Ok(()) => {
                delta.commit_to(&self.journal);
                metrics::counter!(metric::COMMITS).increment(1);
                metrics::histogram!(metric::COMMIT_BATCH_OPS).record(ops_in_batch as f64);
                metrics::counter!(metric::APPENDED_TOKENS).increment(tokens);
                metrics::counter!(metric::APPENDED_BYTES).increment(bytes);
                let backlog = self.journal.chunks();
                metrics::gauge!(metric::JOURNAL_BACKLOG).set(backlog as f64);
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
        let txn = self.begin_write()?;
        let redo = Redo::default();
        let now = self.settings.clock.now_ms();
        let checkpoint = {
            let mut t = Tables::open(&txn, &self.journal, delta, &redo, now)?;
            if sweeping {
                // Sweeps delete folded chunks in bounded commits; unfolded ones would all have
                // to go at once, with their recording's row.
                t.fold_everything()?;
            }
            for op in ops {
                self.apply(&mut t, op, effects)?;
            }
            t.fold_due()?;
            t.finish(&self.db)?
        };
        let started = std::time::Instant::now();
        let committed = self.db.commit(txn, &redo, checkpoint);
        metrics::histogram!(metric::COMMIT_FSYNC_SECONDS).record(started.elapsed().as_secs_f64());
        committed
    }

    /// Begins a write transaction. If the file had to be reopened (replaying the log, which
    /// folds every chunk it holds), no chunk is unfolded any more.
    pub(super) fn begin_write(&self) -> Result<redb::WriteTransaction> {
        let txn = self.db.begin_write();
        if self.db.take_reopened() {
            self.journal.clear();
        }
        txn
    }

    /// Makes everything committed so far durable in redb and empties the log: every unfolded
    /// chunk is folded, in a commit that is a checkpoint.
    fn checkpoint(&self) -> Result<()> {
        if !self.db.has_log() && self.journal.chunks() == 0 {
            return Ok(());
        }
        let txn = self.begin_write()?;
        let redo = Redo::default();
        let mut delta = JournalDelta::default();
        {
            let now = self.settings.clock.now_ms();
            let mut t = Tables::open(&txn, &self.journal, &mut delta, &redo, now)?;
            t.fold_everything()?;
            t.flush_metas()?;
        }
        self.db.commit(txn, &redo, true)?;
        delta.commit_to(&self.journal);
        Ok(())
    }

    /// Applies one op to the open transaction, queueing what to do once it is committed.
    /// Refusals (a closed recording, the live limit) are answered at once; storage errors
    /// abort the whole transaction, after the failing op's waiter has been queued.
    fn apply(&self, t: &mut Tables<'_, '_>, op: Op, effects: &mut Vec<Effect>) -> Result<()> {
        match op {
            Op::Start {
                id,
                retention_ms,
                stream_row,
                admit,
                done,
            } => {
                let key = id.key();
                let previous = match t.meta(key) {
                    Ok(previous) => previous,
                    Err(err) => {
                        effects.push(Effect::Refused(Waiter::Started(done)));
                        return Err(err);
                    }
                };
                // A fork is counted in its source's row in this same commit; a source gone
                // since the fork was asked (deleted, replaced) refuses it before any change.
                let fork = match stream_row.as_deref().map(StreamRow::decode).transpose() {
                    Ok(row) => row.and_then(|row| row.fork),
                    Err(err) => {
                        let _ = done.send(Err(err));
                        return Ok(());
                    }
                };
                if let Some(fork) = &fork {
                    match t.fork_source_stands(fork) {
                        Ok(true) => {}
                        Ok(false) => {
                            let _ = done.send(Err(Error::RecordingNotFound {
                                id: uuid::Uuid::from_u128(fork.source).to_string(),
                                why: crate::error::Absence::Unknown,
                            }));
                            return Ok(());
                        }
                        Err(err) => {
                            effects.push(Effect::Refused(Waiter::Started(done)));
                            return Err(err);
                        }
                    }
                }
                let admission = Admission {
                    previous: previous.as_ref(),
                    now_ms: t.now,
                };
                // Decided before anything is deleted, so that a refused start deletes nothing.
                let Admitted {
                    live,
                    replaced,
                    reopen,
                } = match admit(admission) {
                    Ok(admitted) => admitted,
                    Err(refusal) => {
                        let _ = done.send(Err(refusal));
                        return Ok(());
                    }
                };
                let generation = live.generation();
                effects.push(Effect::Started(live, replaced, done));
                if reopen {
                    return t.reopen_recording(key);
                }
                t.delete_recording(key)?;
                let mut meta = RecordingMeta::started(&id, generation, t.now);
                meta.retention_ms = retention_ms;
                t.start_recording(key, meta)?;
                if let Some(row) = stream_row {
                    t.put_stream_row(key, Some(&row))?;
                }
                match fork {
                    Some(fork) => t.count_fork(fork.source),
                    None => Ok(()),
                }
            }
            Op::Attach {
                live,
                resume_from,
                done,
            } => {
                if live.is_closed() {
                    let _ = done.send(Err(live.ended_error()));
                    return Ok(());
                }
                let (chunks, bytes) = t.appended(live.key()).unwrap_or_else(|| live.committed());
                if resume_from > bytes {
                    let _ = done.send(Err(Error::ResumePastEnd {
                        id: live.name(),
                        offset: resume_from,
                        committed: bytes,
                    }));
                    return Ok(());
                }
                let session = live.attach_producer();
                let resumed = Resumed {
                    session,
                    chunks,
                    bytes,
                };
                effects.push(Effect::Attached(live, resumed, done));
                Ok(())
            }
            Op::Append {
                live,
                session,
                mut chunk,
                done,
            } => {
                if live.is_closed() {
                    let _ = done.send(Err(live.ended_error()));
                    return Ok(());
                }
                if live.producer_session() != session {
                    let _ = done.send(Err(Error::Fenced));
                    return Ok(());
                }
                live.touch(t.now);
                chunk.committed_ms = t.now;
                let layout = ChunkLayout::of(live.timed_chunks());
                let recording = (live.key(), live.generation());
                let stored = t.append_chunk(recording, layout, &chunk);
                effects.push(Effect::Appended(live, chunk, done));
                stored
            }
            Op::Finish {
                live,
                status,
                message,
                only,
                done,
            } => {
                let allowed = match only {
                    EndIf::Always => true,
                    EndIf::Holds(session) => live.producer_session() == session,
                    EndIf::Detached(session) => live.detached_as(session),
                };
                if !allowed || !live.close() {
                    // Answered after this batch is published, like the end that came first:
                    // the caller then reads the recording's real end, not a state this
                    // batch is about to change.
                    effects.push(Effect::Answered(done, false));
                    return Ok(());
                }
                let key = live.key();
                let stored = t.appended(key).unwrap_or_else(|| live.committed());
                effects.push(Effect::Finished(live, status, message.clone(), done));
                let retention = self.settings.retention_ms;
                t.finish_meta(key, stored, status, message, retention)?;
                // Its last run: only live recordings keep chunks in memory.
                t.fold_recording(key)
            }
            Op::Delete { key, done } => match t.mark_deleted(key) {
                Ok(existed) => {
                    effects.push(Effect::Answered(done, existed));
                    Ok(())
                }
                Err(err) => {
                    effects.push(Effect::Refused(Waiter::Flag(done)));
                    Err(err)
                }
            },
            Op::Purge {
                key,
                max_chunks,
                done,
            } => {
                let purged = match t.meta(key) {
                    Ok(Some(meta)) if meta.status == Status::Deleted => t
                        .purge(key, max_chunks, self.settings.tombstone_ms)
                        .map(|(_, gone)| gone),
                    Ok(_) => Ok(true),
                    Err(err) => Err(err),
                };
                match purged {
                    Ok(gone) => {
                        effects.push(Effect::Answered(done, gone));
                        Ok(())
                    }
                    Err(err) => {
                        effects.push(Effect::Refused(Waiter::Flag(done)));
                        Err(err)
                    }
                }
            }
            Op::Sweep { max_chunks, done } => {
                match t.sweep_expired(max_chunks, self.settings.tombstone_ms) {
                    Ok(report) => {
                        effects.push(Effect::Swept(report, done));
                        Ok(())
                    }
                    Err(err) => {
                        effects.push(Effect::Refused(Waiter::Swept(done)));
                        Err(err)
                    }
                }
            }
            Op::PutStreamRow { key, row, done } => match t.put_stream_row(key, row.as_deref()) {
                Ok(()) => {
                    effects.push(Effect::Answered(done, true));
                    Ok(())
                }
                Err(err) => {
                    effects.push(Effect::Refused(Waiter::Flag(done)));
                    Err(err)
                }
            },
            Op::Together(ops) => {
                let mut ops = ops.into_iter();
                while let Some(op) = ops.next() {
                    if let Err(err) = self.apply(t, op, effects) {
                        // The rest were never applied: the whole transaction fails with them.
                        for (waiter, _) in ops.flat_map(Op::into_waiters) {
                            effects.push(Effect::Refused(waiter));
                        }
                        return Err(err);
                    }
                }
                Ok(())
            }
            // Taken out of the batch before it is applied (see `run`).
            Op::Checkpoint { .. } | Op::Close => Ok(()),
        }
    }
}

/// How many ops `batch` holds, and the chunks and bytes its appends carry.
fn appended(batch: &[Op]) -> (usize, u64, u64) {
    let (tokens, bytes) = batch.iter().fold((0, 0), |(tokens, bytes), op| match op {
        Op::Append { chunk, .. } => (tokens + 1, bytes + chunk.data.len() as u64),
        Op::Together(ops) => {
            let (_, more_tokens, more_bytes) = appended(ops);
            (tokens + more_tokens, bytes + more_bytes)
        }
        _ => (tokens, bytes),
    });
    (batch.len(), tokens, bytes)
}

/// Adds a queued op to `batch` (its room in the queue is given back); returns whether it is
/// `Close`.
fn push(batch: &mut Vec<Op>, queued: Queued) -> bool {
    match queued.op {
        Op::Close => true,
        op => {
            batch.push(op);
            false
        }
    }
}
