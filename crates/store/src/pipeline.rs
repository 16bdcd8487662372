//! The commit pipeline: one thread owns every write transaction. It takes all the work that is
//! waiting, applies it in one transaction, commits once (one fsync), and only then publishes the
//! new committed state to readers and answers the producers (see `publish`). What each op
//! does is its own (see `ops`); this is the loop around them.
use std::sync::Arc;

use tokio::sync::mpsc;

use super::database::DbHandle;
use super::journal::{JournalDelta, JournalIndex};
use super::ops::{AfterCommit, Applying, Op, Queued};
use super::pacing::{Pacing, recv_until};
use super::tables::Tables;
use super::wal::Redo;
use crate::clock::Clock;
use crate::error::Result;
use crate::metrics as metric;

/// Most ops folded into one transaction (a `Together` counts its parts: a producer's tokens
/// queued as one op are still as many appends); bounds the size and latency of a single
/// commit.
const MAX_OPS_PER_COMMIT: usize = 4096;
/// The same bound on a node of a cluster, where a commit is a log entry. An entry's round
/// (proposed, written and fsynced by a majority, then applied on every node) costs far more
/// than a local commit, and the next one waits for it, so more ops share it: with 1,000
/// producers on a follower, four times as many ops an entry carried 1.5 times the tokens a
/// second (BENCHMARKS.md, "Round 4: larger cluster entries").
const MAX_OPS_PER_ENTRY: usize = 16 * 1024;

/// Settings the writer applies to every op.
pub(crate) struct WriterSettings {
    pub retention_ms: u64,
    pub tombstone_ms: u64,
    pub clock: Arc<dyn Clock>,
    /// Most time from a commit's start to the next one's, while commits hold several ops (see
    /// `pacing`).
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
        let limit = match self.db.replicated {
            Some(_) => MAX_OPS_PER_ENTRY,
            None => MAX_OPS_PER_COMMIT,
        };
        let mut batch = Batch::new(limit);
        let mut pacing = Pacing::new(self.settings.commit_interval);
        while let Some(op) = self.next_op(&mut ops) {
            // Group commit: whatever queued up during the previous commit goes in this one...
            let mut closing = push(&mut batch, op) | take_queued(&mut ops, &mut batch);
            // ...and, after a commit of several ops, what comes until it has as many, for no
            // longer than that commit took (see `pacing`).
            if let Some(wait) = pacing.wait() {
                let wanted = wait.ops.min(batch.limit);
                while !closing && batch.parts < wanted {
                    match recv_until(&mut ops, wait.until) {
                        Some(Some(op)) => {
                            closing |= push(&mut batch, op) | take_queued(&mut ops, &mut batch)
                        }
                        // Every sender is gone (the next receive ends the loop), or time is up.
                        Some(None) | None => break,
                    }
                }
            }
            pacing.started(batch.parts, std::time::Instant::now());
            let checkpoints: Vec<Op> = batch
                .ops
                .extract_if(.., |op| matches!(op, Op::Checkpoint { .. }))
                .collect();
            self.commit_batch(&mut batch);
            pacing.finished(std::time::Instant::now());
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
                    if batch.parts >= batch.limit {
                        self.commit_batch(&mut batch);
                    }
                }
                self.commit_batch(&mut batch);
                break;
            }
        }
        // So that the next start has no log to roll forward. A node of a cluster applies the
        // entries past its last checkpoint again instead.
        if self.db.replicated.is_some() {
            tracing::debug!("commit pipeline stopped");
            return;
        }
        if let Err(err) = self.checkpoint() {
            tracing::error!(error = %err, "could not checkpoint at shutdown; the next start rolls the write-ahead log forward");
        }
        tracing::debug!("commit pipeline stopped");
    }

    /// Waits for the next op. With none queued, the log's next stretch is zeroed first if it is
    /// due (see `DbHandle::zero_log_ahead`): the writer would only be waiting.
    fn next_op(&self, ops: &mut mpsc::Receiver<Queued>) -> Option<Queued> {
        if ops.is_empty() {
            self.db.zero_log_ahead();
        }
        ops.blocking_recv()
    }

    /// Commits `batch`, and empties it.
    fn commit_batch(&mut self, batch: &mut Batch) {
        self.commit(&mut batch.ops);
        batch.parts = 0;
    }

    fn commit(&mut self, batch: &mut Vec<Op>) {
        if let Some(err) = self.db.full_error() {
            // The disk is full: what would grow the file fails now, ending its recording.
            let (refused, rest): (Vec<Op>, Vec<Op>) = batch.drain(..).partition(Op::grows);
            *batch = rest;
            if !refused.is_empty() {
                self.fail(AfterCommit::default(), refused, err);
            }
        }
        if batch.is_empty() {
            return;
        }
        let (ops_in_batch, tokens, bytes) = appended(batch);
        let mut after = AfterCommit::with_capacity(batch.len());
        let mut ops = batch.drain(..);
        let mut delta = JournalDelta::default();
        let outcome = self.apply_all(&mut ops, &mut after, &mut delta);
        if outcome.is_ok() && after.has_collected() {
            self.db.collected();
        }
        match outcome {
            Ok(()) => {
                // On a node of a cluster, applying the entry changed the journal already.
                if self.db.replicated.is_none() {
                    delta.commit_to(&self.journal);
                }
                metrics::counter!(metric::COMMITS).increment(1);
                metrics::histogram!(metric::COMMIT_BATCH_OPS).record(ops_in_batch as f64);
                metrics::counter!(metric::APPENDED_TOKENS).increment(tokens);
                metrics::counter!(metric::APPENDED_BYTES).increment(bytes);
                let backlog = self.journal.chunks();
                metrics::gauge!(metric::JOURNAL_BACKLOG).set(backlog as f64);
                self.publish(after);
            }
            Err(err) => {
                // The ops after the one that failed were never applied; they fail too.
                let unapplied: Vec<Op> = ops.collect();
                let ops = after.callers() + unapplied.len();
                if matches!(err, crate::Error::NoQuorum { .. }) {
                    // Routine on a node of a cluster that does not lead, or during an
                    // election: its callers are told, and resume on the leader.
                    tracing::debug!(error = %err, ops, "commit not made: no quorum here");
                } else {
                    tracing::error!(error = %err, ops, "commit failed");
                }
                // The file first: it must be usable again before the failures are recorded. (A
                // node of a cluster wrote nothing: its transaction was dropped.)
                if self.db.replicated.is_none() {
                    self.db.recover(&err);
                }
                self.fail(after, unapplied, err);
            }
        }
    }

    /// Applies `ops` in one transaction and commits it; `delta` gathers its journal changes.
    /// Folds the recordings that are due at the end. (A sweep folds nothing first: a recording
    /// it collects loses its unfolded chunks with its row, see `Tables::purge`; folding every
    /// live recording's would only lengthen the commit.)
    fn apply_all(
        &self,
        ops: &mut impl Iterator<Item = Op>,
        after: &mut AfterCommit,
        delta: &mut JournalDelta,
    ) -> Result<()> {
        let txn = self.begin_write()?;
        let redo = Redo::default();
        let now = self.settings.clock.now_ms();
        let checkpoint = {
            let mut t = Tables::open(&txn, &self.journal, delta, &redo, now)?;
            let mut cx = Applying {
                tables: &mut t,
                settings: &self.settings,
                after,
            };
            for op in ops {
                op.apply(&mut cx)?;
            }
            t.fold_due()?;
            t.finish(&self.db)?
        };
        if after.has_deleted_chunks() {
            self.db.room_to_delete();
        }
        let started = std::time::Instant::now();
        let committed = self.db.commit(txn, &redo, checkpoint);
        metrics::histogram!(metric::COMMIT_FSYNC_SECONDS).record(started.elapsed().as_secs_f64());
        committed
    }

    /// Begins a write transaction. If the file had to be reopened (rolled forward through the
    /// log, which folds every chunk it holds), no chunk is unfolded any more.
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
        if self.db.replicated.is_none() {
            delta.commit_to(&self.journal);
        }
        Ok(())
    }
}

/// How many ops `batch` stands for (see [`Op::parts`]), and the chunks and bytes its appends
/// carry.
fn appended(batch: &[Op]) -> (usize, u64, u64) {
    let (tokens, bytes) = batch
        .iter()
        .map(Op::appends)
        .fold((0, 0), |(t, b), (more_t, more_b)| (t + more_t, b + more_b));
    (batch.iter().map(Op::parts).sum(), tokens, bytes)
}

/// Moves what is queued now into `batch`, up to its limit; returns whether that included
/// `Close`.
fn take_queued(ops: &mut mpsc::Receiver<Queued>, batch: &mut Batch) -> bool {
    let mut closing = false;
    while batch.parts < batch.limit {
        match ops.try_recv() {
            Ok(op) => closing |= push(batch, op),
            Err(_) => break,
        }
    }
    closing
}

/// Adds a queued op to `batch` (its room in the queue is given back); returns whether it is
/// `Close`.
fn push(batch: &mut Batch, queued: Queued) -> bool {
    match queued.op {
        Op::Close => true,
        op => {
            batch.parts += op.parts();
            batch.ops.push(op);
            false
        }
    }
}

/// The ops of the next commit, and how many they stand for (see [`Op::parts`]): what its
/// limit and the pacing count.
struct Batch {
    ops: Vec<Op>,
    parts: usize,
    /// Most parts one commit takes.
    limit: usize,
}

impl Batch {
    fn new(limit: usize) -> Self {
        Self {
            ops: Vec::new(),
            parts: 0,
            limit,
        }
    }
}
