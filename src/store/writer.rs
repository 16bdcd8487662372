//! The commit pipeline: one thread owns every write transaction. It takes all the work that is
//! waiting, applies it in one transaction, commits once (one fsync), and only then publishes the
//! new committed state to readers and answers the producers.
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex};

use redb::ReadableTable;
use tokio::sync::{mpsc, oneshot};

use super::database::DbHandle;
use super::journal::{DIRECT_CHUNK_BYTES, JournalDelta, JournalIndex, JournalTable};
use super::schema::{
    self, CHUNKS, EXPIRY, JOURNAL, RECORDINGS, RecordingMeta, Status, decode_meta, encode_meta,
};
use super::tape::{Chunk, Tape};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::id::ConversationId;

/// Most ops folded into one transaction; bounds the size and latency of a single commit.
const MAX_OPS_PER_COMMIT: usize = 4096;

/// Registry of live recordings by conversation key, shared with the read side.
pub(crate) type LiveTapes = Arc<Mutex<HashMap<u128, Arc<Tape>>>>;

/// Work for the writer thread.
pub(crate) enum Op {
    /// Starts a recording, replacing the conversation's previous one in the same commit.
    Start {
        id: ConversationId,
        done: oneshot::Sender<Result<Arc<Tape>>>,
    },
    Append {
        tape: Arc<Tape>,
        chunk: Chunk,
        done: oneshot::Sender<Result<u64>>,
    },
    /// Ends a recording; answers `true` if this op ended it, `false` if it had already ended.
    Finish {
        tape: Arc<Tape>,
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

/// What one sweep commit deleted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SweepReport {
    pub recordings_deleted: u64,
    pub chunks_deleted: u64,
    /// Expired data is left for the next commit because this one reached its chunk budget.
    pub more: bool,
}

/// Settings the writer applies to every op.
pub(crate) struct WriterSettings {
    pub retention_ms: u64,
    pub max_live: usize,
    pub clock: Arc<dyn Clock>,
}

pub(crate) struct Writer {
    db: Arc<DbHandle>,
    live: LiveTapes,
    journal: Arc<JournalIndex>,
    settings: WriterSettings,
    /// Sequence number of the next journal entry.
    next_seq: u64,
    /// Journal entries before this one are deleted.
    journal_pruned_to: u64,
}

/// What to do once a transaction is committed (or has failed).
enum Effect {
    Started(
        Arc<Tape>,
        Option<Arc<Tape>>,
        oneshot::Sender<Result<Arc<Tape>>>,
    ),
    Appended(Arc<Tape>, Chunk, oneshot::Sender<Result<u64>>),
    Finished(
        Arc<Tape>,
        Status,
        Option<String>,
        oneshot::Sender<Result<bool>>,
    ),
    Swept(SweepReport, oneshot::Sender<Result<SweepReport>>),
}

/// A committed op's answer other than an append's, sent once the batch is published.
enum Answer {
    Started(oneshot::Sender<Result<Arc<Tape>>>, Arc<Tape>),
    Finished(oneshot::Sender<Result<bool>>),
    Swept(oneshot::Sender<Result<SweepReport>>, SweepReport),
}

/// Committed chunks of one batch, gathered per tape so that each tape publishes once.
#[derive(Default)]
struct PendingChunks {
    tapes: Vec<(Arc<Tape>, Vec<Chunk>)>,
    /// Position in `tapes` by tape address: a superseded tape shares its key with the new one.
    index: HashMap<*const Tape, usize>,
}

impl PendingChunks {
    fn push(&mut self, tape: Arc<Tape>, chunk: Chunk) {
        let tapes = &mut self.tapes;
        let at = *self.index.entry(Arc::as_ptr(&tape)).or_insert_with(|| {
            tapes.push((tape, Vec::new()));
            tapes.len() - 1
        });
        tapes[at].1.push(chunk);
    }

    /// Publishes the chunks gathered for `tape` so far.
    fn flush(&mut self, tape: &Arc<Tape>) {
        if let Some(&at) = self.index.get(&Arc::as_ptr(tape)) {
            let chunks = std::mem::take(&mut self.tapes[at].1);
            tape.publish_chunks(chunks);
        }
    }

    fn flush_all(self) {
        for (tape, chunks) in self.tapes {
            tape.publish_chunks(chunks);
        }
    }
}

/// A `recordings` row read within one transaction, and whether it has changed since.
struct CachedMeta {
    row: Option<RecordingMeta>,
    dirty: bool,
}

/// Rows of `recordings` read and changed within one transaction; written back once at the end.
#[derive(Default)]
struct MetaCache {
    rows: HashMap<u128, CachedMeta>,
}

impl Writer {
    /// A writer over `db`, whose journal was folded away on open.
    pub(crate) fn new(
        db: Arc<DbHandle>,
        live: LiveTapes,
        journal: Arc<JournalIndex>,
        settings: WriterSettings,
    ) -> Self {
        Self {
            db,
            live,
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
            let mut closing = self.push(&mut batch, op);
            // Natural batching: whatever queued up during the previous commit goes in this one.
            while batch.len() < MAX_OPS_PER_COMMIT {
                match ops.try_recv() {
                    Ok(op) => closing |= self.push(&mut batch, op),
                    Err(_) => break,
                }
            }
            self.commit(&mut batch);
            if closing {
                // Refuse new work, but commit what was already accepted.
                ops.close();
                while let Ok(op) = ops.try_recv() {
                    self.push(&mut batch, op);
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

    /// Adds `op` to the batch; true if it asks the pipeline to close.
    fn push(&self, batch: &mut Vec<Op>, op: Op) -> bool {
        match op {
            Op::Close => true,
            op => {
                batch.push(op);
                false
            }
        }
    }

    fn commit(&mut self, batch: &mut Vec<Op>) {
        if let Some(err) = self.db.full_error() {
            // The disk is full: what would grow the file fails now, ending its recording.
            let (refused, rest): (Vec<Op>, Vec<Op>) = batch
                .drain(..)
                .partition(|op| matches!(op, Op::Start { .. } | Op::Append { .. }));
            *batch = rest;
            if !refused.is_empty() {
                self.fail(Vec::new(), refused, &err);
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
                self.fail(effects, unapplied, &err);
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
                let tables = (&mut t.journal, &mut t.chunks);
                t.delta.fold_everything(tables, t.index, pruned_to)?;
            }
            for op in ops {
                self.apply(&mut t, op, effects)?;
            }
            t.delta
                .fold_due((&mut t.journal, &mut t.chunks), t.index, pruned_to)?;
            t.flush_metas()?;
        }
        txn.commit().map_err(Error::storage)
    }

    /// Applies one op to the open transaction, queueing what to do once it is committed.
    /// Refusals (a closed tape, too many live recordings) are answered at once; storage errors
    /// abort the whole transaction, after the failing op's waiter has been queued or answered.
    fn apply(&self, t: &mut Tables<'_, '_>, op: Op, effects: &mut Vec<Effect>) -> Result<()> {
        match op {
            Op::Start { id, done } => {
                let key = id.key();
                let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
                if !live.contains_key(&key) && live.len() >= self.settings.max_live {
                    let _ = done.send(Err(Error::TooManyLiveRecordings {
                        max: self.settings.max_live,
                    }));
                    return Ok(());
                }
                let generation = match t.delete_recording(key) {
                    Ok(old) => old.map_or(1, |old| old.generation + 1),
                    Err(err) => {
                        let _ = done.send(Err(copy_error(&err)));
                        return Err(err);
                    }
                };
                t.set_meta(
                    key,
                    Some(RecordingMeta {
                        original_id: id.original().to_vec(),
                        status: Status::Recording,
                        created_ms: t.now,
                        updated_ms: t.now,
                        finished_ms: None,
                        expires_at_ms: None,
                        chunk_count: 0,
                        byte_len: 0,
                        error: None,
                        generation,
                    }),
                );
                let tape = Arc::new(Tape::new(key, id.original().to_vec(), generation, t.now));
                // Registered before the commit so that a reader arriving now waits on this tape;
                // it shows nothing until chunks are committed.
                let replaced = live.insert(key, tape.clone()).filter(|old| old.close());
                effects.push(Effect::Started(tape, replaced, done));
                Ok(())
            }
            Op::Append { tape, chunk, done } => {
                if tape.is_closed() {
                    let _ = done.send(Err(ended_error(&tape)));
                    return Ok(());
                }
                tape.touch(t.now);
                let stored = t.append_chunk(tape.key(), &chunk);
                effects.push(Effect::Appended(tape, chunk, done));
                stored
            }
            Op::Finish {
                tape,
                status,
                message,
                done,
            } => {
                if !tape.close() {
                    let _ = done.send(Ok(false));
                    return Ok(());
                }
                let key = tape.key();
                let progress = tape.progress();
                let stored = t
                    .appended
                    .get(&key)
                    .copied()
                    .unwrap_or((progress.chunks, progress.bytes));
                effects.push(Effect::Finished(tape, status, message.clone(), done));
                let retention = self.settings.retention_ms;
                t.finish_meta(key, stored, status, message, retention)?;
                // Its last run, so that it does not hold the journal's dead prefix back.
                t.delta
                    .fold((&mut t.journal, &mut t.chunks), t.index, key)
                    .map(drop)
            }
            Op::Sweep { max_chunks, done } => match t.sweep_expired(max_chunks) {
                Ok(report) => {
                    effects.push(Effect::Swept(report, done));
                    Ok(())
                }
                Err(err) => {
                    let _ = done.send(Err(copy_error(&err)));
                    Err(err)
                }
            },
            Op::Close => Ok(()),
        }
    }

    /// Makes a committed transaction visible: readers first, then the producers' acks. Each
    /// tape's new chunks are published once for the whole batch, and always before an end of
    /// that tape, so that no reader sees the end before the last chunks.
    fn publish(&self, effects: Vec<Effect>) {
        let mut chunks = PendingChunks::default();
        let mut appended = Vec::with_capacity(effects.len());
        let mut answers = Vec::new();
        for effect in effects {
            match effect {
                Effect::Appended(tape, chunk, done) => {
                    appended.push((done, chunk.end()));
                    chunks.push(tape, chunk);
                }
                Effect::Started(tape, replaced, done) => {
                    if let Some(old) = replaced {
                        chunks.flush(&old);
                        old.publish_end(Status::Superseded, None);
                    }
                    answers.push(Answer::Started(done, tape));
                }
                Effect::Finished(tape, status, message, done) => {
                    chunks.flush(&tape);
                    self.unregister(&tape);
                    tape.publish_end(status, message);
                    answers.push(Answer::Finished(done));
                }
                Effect::Swept(report, done) => answers.push(Answer::Swept(done, report)),
            }
        }
        chunks.flush_all();
        for (done, end) in appended {
            let _ = done.send(Ok(end));
        }
        for answer in answers {
            match answer {
                Answer::Started(done, tape) => {
                    let _ = done.send(Ok(tape));
                }
                Answer::Finished(done) => {
                    let _ = done.send(Ok(true));
                }
                Answer::Swept(done, report) => {
                    let _ = done.send(Ok(report));
                }
            }
        }
    }

    /// After a failed commit nothing of the batch is stored: every recording it touched is
    /// ended as `failed`, so that no later commit can leave a gap in it. `unapplied` are the
    /// ops the transaction never reached. As after a commit, the file and the readers learn
    /// the outcome before the waiters do.
    fn fail(&self, effects: Vec<Effect>, unapplied: Vec<Op>, err: &Error) {
        let message = format!("storage failure: {err}");
        let mut failed: Vec<Arc<Tape>> = Vec::new();
        for effect in &effects {
            match effect {
                Effect::Started(tape, replaced, _) => {
                    if let Some(old) = replaced {
                        add_once(&mut failed, old);
                    }
                    add_once(&mut failed, tape);
                }
                Effect::Appended(tape, ..) | Effect::Finished(tape, ..) => {
                    add_once(&mut failed, tape)
                }
                Effect::Swept(..) => {}
            }
        }
        for op in &unapplied {
            match op {
                // A tape that ended before this batch keeps the status it ended with.
                Op::Append { tape, .. } | Op::Finish { tape, .. } if !tape.is_closed() => {
                    add_once(&mut failed, tape)
                }
                _ => {}
            }
        }
        if let Err(again) = self.record_failures(&failed, &message) {
            // Recovery on the next open marks them `interrupted` instead.
            tracing::error!(error = %again, "could not record failed recordings");
        }
        for tape in &failed {
            tape.close();
            self.unregister(tape);
            tape.publish_end(Status::Failed, Some(message.clone()));
        }
        for effect in effects {
            match effect {
                Effect::Started(_, _, done) => {
                    let _ = done.send(Err(copy_error(err)));
                }
                Effect::Appended(_, _, done) => {
                    let _ = done.send(Err(copy_error(err)));
                }
                Effect::Finished(_, _, _, done) => {
                    let _ = done.send(Err(copy_error(err)));
                }
                Effect::Swept(_, done) => {
                    let _ = done.send(Err(copy_error(err)));
                }
            }
        }
        for op in unapplied {
            match op {
                Op::Start { done, .. } => {
                    let _ = done.send(Err(copy_error(err)));
                }
                Op::Append { done, .. } => {
                    let _ = done.send(Err(copy_error(err)));
                }
                Op::Finish { done, .. } => {
                    let _ = done.send(Err(copy_error(err)));
                }
                Op::Sweep { done, .. } => {
                    let _ = done.send(Err(copy_error(err)));
                }
                Op::Close => {}
            }
        }
    }

    /// Best effort: stores the `failed` status of recordings whose commit failed.
    fn record_failures(&self, tapes: &[Arc<Tape>], message: &str) -> Result<()> {
        if tapes.is_empty() {
            return Ok(());
        }
        let txn = self.db.begin_write()?;
        // Nothing is appended here, so the journal and its index are left as they are.
        let mut delta = JournalDelta::new(self.next_seq);
        {
            let now = self.settings.clock.now_ms();
            let mut t = Tables::open(&txn, &self.journal, &mut delta, now)?;
            for tape in tapes {
                let current = t.meta(tape.key())?;
                // Only a recording that is still this tape's and still live in the file.
                if current.is_some_and(|m| m.generation == tape.generation() && m.status.is_live())
                {
                    let retention = self.settings.retention_ms;
                    // What the failed commits held is not stored: the committed progress is.
                    let progress = tape.progress();
                    let stored = (progress.chunks, progress.bytes);
                    let message = Some(message.into());
                    t.finish_meta(tape.key(), stored, Status::Failed, message, retention)?;
                }
            }
            t.flush_metas()?;
        }
        txn.commit().map_err(Error::storage)
    }

    fn unregister(&self, tape: &Arc<Tape>) {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        if live.get(&tape.key()).is_some_and(|t| Arc::ptr_eq(t, tape)) {
            live.remove(&tape.key());
        }
    }
}

fn add_once(tapes: &mut Vec<Arc<Tape>>, tape: &Arc<Tape>) {
    if !tapes.iter().any(|t| Arc::ptr_eq(t, tape)) {
        tapes.push(tape.clone());
    }
}

fn ended_error(tape: &Tape) -> Error {
    match tape.progress().status {
        Status::Superseded => Error::Superseded,
        _ => Error::RecordingEnded,
    }
}

/// Errors are not `Clone` (they wrap io errors); every waiter of a failed commit gets an
/// equivalent one.
fn copy_error(err: &Error) -> Error {
    match err {
        Error::DiskFull(m) => Error::DiskFull(m.clone()),
        other => Error::Storage(other.to_string()),
    }
}

/// The open tables of one write transaction, and what it has changed so far.
struct Tables<'a, 'txn> {
    chunks: redb::Table<'txn, (u128, u64), &'static [u8]>,
    journal: JournalTable<'txn>,
    recordings: redb::Table<'txn, u128, &'static [u8]>,
    expiry: redb::Table<'txn, (u64, u128), ()>,
    index: &'a JournalIndex,
    delta: &'a mut JournalDelta,
    metas: MetaCache,
    /// Chunk count and byte length of each recording appended to in this transaction.
    appended: HashMap<u128, (u64, u64)>,
    /// Reused for encoding journal entries.
    scratch: Vec<u8>,
    now: u64,
}

impl<'a, 'txn> Tables<'a, 'txn> {
    fn open(
        txn: &'txn redb::WriteTransaction,
        index: &'a JournalIndex,
        delta: &'a mut JournalDelta,
        now: u64,
    ) -> Result<Self> {
        Ok(Self {
            chunks: txn.open_table(CHUNKS).map_err(Error::storage)?,
            journal: txn.open_table(JOURNAL).map_err(Error::storage)?,
            recordings: txn.open_table(RECORDINGS).map_err(Error::storage)?,
            expiry: txn.open_table(EXPIRY).map_err(Error::storage)?,
            index,
            delta,
            metas: MetaCache::default(),
            appended: HashMap::new(),
            scratch: Vec::new(),
            now,
        })
    }

    /// The row of `key`, read from the table on its first use in this transaction.
    fn cached(&mut self, key: u128) -> Result<&mut CachedMeta> {
        match self.metas.rows.entry(key) {
            Entry::Occupied(entry) => Ok(entry.into_mut()),
            Entry::Vacant(entry) => {
                let row = match self.recordings.get(key).map_err(Error::storage)? {
                    Some(bytes) => Some(decode_meta(bytes.value())?),
                    None => None,
                };
                Ok(entry.insert(CachedMeta { row, dirty: false }))
            }
        }
    }

    fn meta(&mut self, key: u128) -> Result<Option<RecordingMeta>> {
        Ok(self.cached(key)?.row.clone())
    }

    fn set_meta(&mut self, key: u128, row: Option<RecordingMeta>) {
        self.metas.rows.insert(key, CachedMeta { row, dirty: true });
    }

    /// Stores one chunk: at the end of the journal, or straight into `chunks` when it is big
    /// and its recording has nothing unfolded (its folded chunks must stay a prefix).
    fn append_chunk(&mut self, key: u128, chunk: &Chunk) -> Result<()> {
        self.appended.insert(key, (chunk.index + 1, chunk.end()));
        if chunk.text.len() >= DIRECT_CHUNK_BYTES && !self.delta.holds(self.index, key) {
            schema::encode_chunk_into(&mut self.scratch, chunk.offset, &chunk.text);
            self.chunks
                .insert((key, chunk.index), self.scratch.as_slice())
                .map_err(Error::storage)?;
            Ok(())
        } else {
            let value = (chunk.offset, &*chunk.text);
            schema::encode_journal_into(&mut self.scratch, key, chunk.index, value);
            self.delta
                .append(&mut self.journal, key, chunk.index, &self.scratch)
        }
    }

    /// Ends a live recording's row: its status, its final `(chunk count, byte length)`, and
    /// its place in the GC schedule.
    fn finish_meta(
        &mut self,
        key: u128,
        (chunk_count, byte_len): (u64, u64),
        status: Status,
        error: Option<String>,
        retention_ms: u64,
    ) -> Result<()> {
        let now = self.now;
        let expires = now.saturating_add(retention_ms);
        let cached = self.cached(key)?;
        let meta = cached
            .row
            .as_mut()
            .ok_or_else(|| Error::Corrupt(format!("live recording {key:032x} has no meta row")))?;
        meta.status = status;
        meta.chunk_count = chunk_count;
        meta.byte_len = byte_len;
        meta.updated_ms = now;
        meta.finished_ms = Some(now);
        meta.expires_at_ms = Some(expires);
        meta.error = error;
        cached.dirty = true;
        self.expiry
            .insert((expires, key), ())
            .map_err(Error::storage)?;
        Ok(())
    }

    /// Deletes every chunk (folded or not), the expiry entry and the meta row of a
    /// conversation's recording; returns the meta it had.
    fn delete_recording(&mut self, key: u128) -> Result<Option<RecordingMeta>> {
        let Some(old) = self.meta(key)? else {
            return Ok(None);
        };
        self.chunks
            .retain_in((key, 0)..=(key, u64::MAX), |_, _| false)
            .map_err(Error::storage)?;
        self.delta.forget(&mut self.journal, self.index, key)?;
        self.appended.remove(&key);
        if let Some(expires) = old.expires_at_ms {
            self.expiry.remove((expires, key)).map_err(Error::storage)?;
        }
        self.set_meta(key, None);
        Ok(Some(old))
    }

    /// Deletes recordings whose expiry time has passed, oldest first, up to `max_chunks` folded
    /// chunks. A recording's unfolded chunks go with its row, in its last commit, so that a
    /// reader never meets a gap between the two.
    fn sweep_expired(&mut self, max_chunks: u64) -> Result<SweepReport> {
        let mut report = SweepReport::default();
        let due: Vec<(u64, u128)> = self
            .expiry
            .range(..=(self.now, u128::MAX))
            .map_err(Error::storage)?
            .take(1024)
            .map(|entry| entry.map(|(k, _)| k.value()))
            .collect::<std::result::Result<_, _>>()
            .map_err(Error::storage)?;
        for (expires, key) in due {
            let budget = max_chunks - report.chunks_deleted;
            let deleted = self
                .chunks
                .extract_from_if((key, 0)..=(key, u64::MAX), |_, _| true)
                .map_err(Error::storage)?
                .take(budget as usize)
                .try_fold(0u64, |n, entry| entry.map(|_| n + 1))
                .map_err(Error::storage)?;
            report.chunks_deleted += deleted;
            if deleted == budget && self.has_chunks(key)? {
                report.more = true;
                break;
            }
            report.chunks_deleted += self.delta.forget(&mut self.journal, self.index, key)?;
            self.expiry.remove((expires, key)).map_err(Error::storage)?;
            self.set_meta(key, None);
            report.recordings_deleted += 1;
        }
        Ok(report)
    }

    fn has_chunks(&self, key: u128) -> Result<bool> {
        let mut range = self
            .chunks
            .range((key, 0)..=(key, u64::MAX))
            .map_err(Error::storage)?;
        Ok(range.next().is_some())
    }

    fn flush_metas(&mut self) -> Result<()> {
        for (&key, cached) in &mut self.metas.rows {
            if !std::mem::take(&mut cached.dirty) {
                continue;
            }
            match &cached.row {
                Some(meta) => {
                    let bytes = encode_meta(meta)?;
                    self.recordings
                        .insert(key, bytes.as_slice())
                        .map_err(Error::storage)?;
                }
                None => {
                    self.recordings.remove(key).map_err(Error::storage)?;
                }
            }
        }
        Ok(())
    }
}
