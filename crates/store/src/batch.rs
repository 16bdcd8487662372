//! Writes of the HTTP face that must be committed together: a request's chunks, the stream's
//! `streams` row (its producers' state) and, for a closing append, the recording's end, in one
//! transaction; and the `streams` row on its own.
use tokio::sync::oneshot;

use super::Store;
use super::live::{Chunk, Live};
use super::ops::{EndIf, Op};
use super::stream_row::{STREAMS, StreamRow};
use crate::error::{Error, Result};
use crate::status::Status;

/// What one batch writes.
pub struct Batch {
    /// Chunks to append, numbered and placed by the caller.
    pub chunks: Vec<Chunk>,
    /// The recording's new `streams` row, if it changes.
    pub row: Option<StreamRow>,
    /// End the recording with this status after the chunks.
    pub end: Option<Status>,
}

/// Resolves once a batch is committed (or refused).
pub struct BatchCommitted {
    appends: Vec<oneshot::Receiver<Result<u64>>>,
    flags: Vec<oneshot::Receiver<Result<bool>>>,
}

impl BatchCommitted {
    /// Waits for the commit.
    ///
    /// Fails with the first refusal (the recording ended, another session took over) or the
    /// commit's error.
    pub async fn wait(self) -> Result<()> {
        for append in self.appends {
            append.await.map_err(|_| Error::ShuttingDown)??;
        }
        for flag in self.flags {
            flag.await.map_err(|_| Error::ShuttingDown)??;
        }
        Ok(())
    }

    /// Each chunk's answer, in order: the recording's length once it is committed (a batch
    /// of chunks alone has no other answer to wait for).
    pub fn into_appends(self) -> Vec<super::Committed> {
        self.appends
    }
}

impl Store {
    /// Queues `batch` for live recording `live` from producer `session`, as one transaction.
    ///
    /// Fails with `ShuttingDown` when the store is closed, or when the row cannot be encoded.
    pub async fn write_batch(
        &self,
        live: Live,
        session: u64,
        batch: Batch,
    ) -> Result<BatchCommitted> {
        let mut ops = Vec::with_capacity(batch.chunks.len() + 2);
        let mut committed = BatchCommitted {
            appends: Vec::new(),
            flags: Vec::new(),
        };
        for chunk in batch.chunks {
            let (done, answer) = oneshot::channel();
            committed.appends.push(answer);
            let live = live.clone();
            ops.push(Op::Append {
                live,
                session,
                chunk,
                done,
            });
        }
        if let Some(row) = batch.row {
            let (done, answer) = oneshot::channel();
            committed.flags.push(answer);
            let row = Some(row.encode()?);
            let key = live.key();
            ops.push(Op::PutStreamRow { key, row, done });
        }
        if let Some(status) = batch.end {
            // Its answer says whether this batch ended it; a batch that lost the race to
            // another end fails on its chunks (or the caller reads the status). Either way it
            // arrives after the commit.
            let (done, answer) = oneshot::channel();
            committed.flags.push(answer);
            let only = EndIf::Holds(session);
            let message = None;
            ops.push(Op::Finish {
                live,
                status,
                message,
                only,
                done,
            });
        }
        self.submit(Op::Together(ops)).await?;
        Ok(committed)
    }

    /// Conversation `key`'s `streams` row, if it has one.
    ///
    /// Fails with a storage error.
    pub async fn stream_row(&self, key: u128) -> Result<Option<StreamRow>> {
        self.read(move |txn| {
            // A file no stream was ever written to has no table.
            let Some(streams) = super::schema::optional_table(txn, STREAMS)? else {
                return Ok(None);
            };
            match streams.get(key).map_err(Error::storage)? {
                Some(bytes) => Ok(Some(StreamRow::decode(bytes.value())?)),
                None => Ok(None),
            }
        })
        .await
    }
}
