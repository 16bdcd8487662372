//! The commit pipeline's ops. An op is a plain value (what to change) and the caller waiting
//! for its answer; its module holds all of its code: what it does in the write transaction,
//! what it leaves to do after the commit (`after`), and what it answers. A new op is a variant
//! here, one arm in [`Op::apply`] and one in [`Op::abandon`], and its module.
mod after;
mod append;
mod attach;
mod delete;
mod finish;
mod purge;
mod put_row;
mod seal;
mod start;
mod sweep;

use tokio::sync::OwnedSemaphorePermit;

pub(crate) use after::{AfterCommit, Done, Reply, Step, Waiter};
pub use finish::EndIf;
pub use sweep::SweepReport;

use super::live::{Admit, Chunk, Live, Resumed};
use super::pipeline::WriterSettings;
use super::seal_marks::Sealing;
use super::tables::Tables;
use crate::error::Result;
use crate::id::ConversationId;
use crate::status::Status;

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
        done: Done<()>,
    },
    /// Hands a live recording to a new producer session, unless `resume_from` is past what is
    /// committed; later appends of older sessions are refused.
    Attach {
        live: Live,
        resume_from: u64,
        done: Done<Resumed>,
    },
    /// Appends one chunk to a live recording, if `session` still holds it.
    Append {
        live: Live,
        session: u64,
        chunk: Chunk,
        done: Done<u64>,
    },
    /// Ends a recording; answers `true` if this op ended it, `false` if it had already ended
    /// or `only` did not hold.
    Finish {
        live: Live,
        status: Status,
        message: Option<String>,
        only: EndIf,
        done: Done<bool>,
    },
    /// Marks an ended recording deleted, due now; answers whether there was one.
    Delete { key: u128, done: Done<bool> },
    /// Deletes up to `max_chunks` chunks of a recording marked deleted; answers whether it is
    /// gone (or was not marked deleted).
    Purge {
        key: u128,
        max_chunks: u64,
        done: Done<bool>,
    },
    /// Deletes expired recordings, at most `max_chunks` chunks in this commit.
    Sweep {
        max_chunks: u64,
        done: Done<SweepReport>,
    },
    /// Writes (or removes, with `None`) the `streams` row of a recording; answers `true`.
    PutStreamRow {
        key: u128,
        row: Option<Vec<u8>>,
        done: Done<bool>,
    },
    /// Marks an ended recording (`generation`, ended at `finished_ms`) sealed in the object
    /// store, dropping its local chunks with `drop_local`; answers whether the copy is still
    /// the recording's.
    Seal {
        key: u128,
        generation: u64,
        finished_ms: u64,
        drop_local: bool,
        done: Done<Sealing>,
    },
    /// Ops applied in order in one transaction: all of them are committed, or none.
    Together(Vec<Op>),
    /// Makes everything committed so far durable in redb and empties the write-ahead log.
    /// Not applied: the writer runs it after the batch it came with (see `pipeline`).
    Checkpoint { done: Done<()> },
    /// Commits what is queued, then stops the pipeline; later submissions fail.
    Close,
}

/// What an op is applied with: the open tables of the transaction, the writer's settings, and
/// what is left to do after the commit.
pub(crate) struct Applying<'x, 'a, 'txn> {
    pub tables: &'x mut Tables<'a, 'txn>,
    pub settings: &'x WriterSettings,
    pub after: &'x mut AfterCommit,
}

impl Op {
    /// Applies the op to the open transaction, leaving what is to be done once it is
    /// committed in `cx.after`. Refusals (a closed recording, the live limit) are answered at
    /// once and change nothing; a storage error aborts the whole transaction, after the op's
    /// caller has been left in `cx.after` to be answered with the failure.
    pub(crate) fn apply(self, cx: &mut Applying<'_, '_, '_>) -> Result<()> {
        match self {
            Op::Start {
                id,
                retention_ms,
                stream_row,
                admit,
                done,
            } => start::apply(cx, &id, retention_ms, stream_row, admit, done),
            Op::Attach {
                live,
                resume_from,
                done,
            } => attach::apply(cx, live, resume_from, done),
            Op::Append {
                live,
                session,
                chunk,
                done,
            } => append::apply(cx, live, session, chunk, done),
            Op::Finish {
                live,
                status,
                message,
                only,
                done,
            } => finish::apply(cx, live, (status, message), only, done),
            Op::Delete { key, done } => delete::apply(cx, key, done),
            Op::Purge {
                key,
                max_chunks,
                done,
            } => purge::apply(cx, key, max_chunks, done),
            Op::Sweep { max_chunks, done } => sweep::apply(cx, max_chunks, done),
            Op::PutStreamRow { key, row, done } => put_row::apply(cx, key, row, done),
            Op::Seal {
                key,
                generation,
                finished_ms,
                drop_local,
                done,
            } => seal::apply(cx, key, (generation, finished_ms), drop_local, done),
            Op::Together(ops) => {
                let mut ops = ops.into_iter();
                while let Some(op) = ops.next() {
                    if let Err(err) = op.apply(cx) {
                        // The rest were never applied: the whole transaction fails with them.
                        let mut rest = Vec::new();
                        ops.for_each(|op| op.abandon(&mut rest));
                        for (waiter, _) in rest {
                            cx.after.unapplied(waiter);
                        }
                        return Err(err);
                    }
                }
                Ok(())
            }
            // Taken out of the batch before it is applied (see `pipeline`).
            Op::Checkpoint { .. } | Op::Close => Ok(()),
        }
    }

    /// Gives up the op without applying it: its callers (a group has several), to answer with
    /// a failure, each with the live recording it would have changed.
    pub(crate) fn abandon(self, into: &mut Vec<(Box<dyn Waiter>, Option<Live>)>) {
        match self {
            Op::Start { done, .. } => into.push((Box::new(done), None)),
            Op::Attach { live, done, .. } => into.push((Box::new(done), Some(live))),
            Op::Append { live, done, .. } => into.push((Box::new(done), Some(live))),
            Op::Finish { live, done, .. } => into.push((Box::new(done), Some(live))),
            Op::Delete { done, .. } | Op::Purge { done, .. } | Op::PutStreamRow { done, .. } => {
                into.push((Box::new(done), None))
            }
            Op::Sweep { done, .. } => into.push((Box::new(done), None)),
            Op::Seal { done, .. } => into.push((Box::new(done), None)),
            Op::Together(ops) => ops.into_iter().for_each(|op| op.abandon(into)),
            Op::Checkpoint { done } => into.push((Box::new(done), None)),
            Op::Close => {}
        }
    }

    /// How many ops it stands for: a `Together`'s parts, else one.
    pub(crate) fn parts(&self) -> usize {
        match self {
            Op::Together(ops) => ops.len(),
            _ => 1,
        }
    }

    /// Bytes of chunk data it carries.
    pub(crate) fn chunk_bytes(&self) -> usize {
        match self {
            Op::Append { chunk, .. } => chunk.data.len(),
            Op::Together(ops) => ops.iter().map(Op::chunk_bytes).sum(),
            _ => 0,
        }
    }

    /// The chunks it appends, and their bytes.
    pub(crate) fn appends(&self) -> (u64, u64) {
        match self {
            Op::Append { chunk, .. } => (1, chunk.data.len() as u64),
            Op::Together(ops) => ops
                .iter()
                .map(Op::appends)
                .fold((0, 0), |(a, b), (c, d)| (a + c, b + d)),
            _ => (0, 0),
        }
    }

    /// Whether applying it grows the file (refused while the disk is full).
    pub(crate) fn grows(&self) -> bool {
        match self {
            Op::Start { .. } | Op::Append { .. } => true,
            Op::Together(ops) => ops.iter().any(Op::grows),
            _ => false,
        }
    }
}
