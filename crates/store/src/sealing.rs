//! The store's side of the object-store tier: what a seal copies (an ended recording whole, in
//! one read), the ended recordings not sealed yet, the sealed ones still kept locally, and the
//! op that marks a verified copy (dropping the local chunks, when asked).
use redb::ReadableTable;
use tokio::sync::oneshot;

use super::Store;
use super::live::Chunk;
use super::ops::Op;
use super::schema::{self, EXPIRY, RECORDINGS, RecordingMeta};
use super::seal_marks::{SEALED, SealMark, Sealing};
use super::stored_chunks::StoredChunks;
use super::stream_row::{STREAMS, StreamRow};
use crate::error::{Error, Result};
use crate::status::Status;

/// An ended recording as one read transaction saw it: what a seal uploads.
#[derive(Debug, Clone)]
pub struct RecordingCopy {
    /// Its row.
    pub meta: RecordingMeta,
    /// Every chunk, in order.
    pub chunks: Vec<Chunk>,
    /// Its `streams` row, when it was made over HTTP.
    pub stream_row: Option<StreamRow>,
}

/// Where a walk over the GC schedule goes on from.
pub type ScheduleCursor = (u64, u128);

impl Store {
    /// Conversation `key`'s recording, whole, if it has ended (and is not deleted) and its
    /// chunks are still local; `None` otherwise.
    ///
    /// Fails with a storage error.
    pub async fn recording_copy(&self, key: u128) -> Result<Option<RecordingCopy>> {
        let journal = self.inner.journal.view(key, 0, usize::MAX);
        self.read(move |txn| {
            let recordings = txn.open_table(RECORDINGS).map_err(Error::storage)?;
            let Some(bytes) = recordings.get(key).map_err(Error::storage)? else {
                return Ok(None);
            };
            let meta = schema::decode_meta(bytes.value())?;
            if meta.status.is_live() || meta.status == Status::Deleted {
                return Ok(None);
            }
            if read_mark(txn, key)?.is_some_and(|mark| !mark.local) {
                return Ok(None);
            }
            let chunks =
                StoredChunks::open(txn, key, &meta, journal)?.read_from(0, usize::MAX, None)?;
            let stream_row = match schema::optional_table(txn, STREAMS)? {
                Some(streams) => match streams.get(key).map_err(Error::storage)? {
                    Some(bytes) => Some(StreamRow::decode(bytes.value())?),
                    None => None,
                },
                None => None,
            };
            Ok(Some(RecordingCopy {
                meta,
                chunks,
                stream_row,
            }))
        })
        .await
    }

    /// The seal mark of `key`'s recording, if it is sealed.
    ///
    /// Fails with a storage error.
    pub async fn seal_mark(&self, key: u128) -> Result<Option<SealMark>> {
        self.read(move |txn| read_mark(txn, key)).await
    }

    /// The seal marks of `keys`, in order, in one read.
    ///
    /// Fails with a storage error.
    pub async fn seal_marks(&self, keys: Vec<u128>) -> Result<Vec<Option<SealMark>>> {
        self.read(move |txn| keys.into_iter().map(|key| read_mark(txn, key)).collect())
            .await
    }

    /// Up to `limit` ended recordings, in GC-schedule order after `after`, that are not
    /// sealed (deleted ones excepted); and where to go on from, `None` at the end.
    ///
    /// Fails with a storage error.
    pub async fn unsealed(
        &self,
        after: Option<ScheduleCursor>,
        limit: usize,
    ) -> Result<(Vec<u128>, Option<ScheduleCursor>)> {
        self.read(move |txn| {
            let expiry = txn.open_table(EXPIRY).map_err(Error::storage)?;
            let recordings = txn.open_table(RECORDINGS).map_err(Error::storage)?;
            let range = match after {
                Some((at, key)) => expiry.range((at, key)..).map_err(Error::storage)?,
                None => expiry.range::<(u64, u128)>(..).map_err(Error::storage)?,
            };
            let (mut keys, mut last) = (Vec::new(), None);
            for entry in range {
                let (entry, _) = entry.map_err(Error::storage)?;
                let (at, key) = entry.value();
                if Some((at, key)) == after {
                    continue;
                }
                if last.is_some() && keys.len() >= limit {
                    return Ok((keys, last));
                }
                last = Some((at, key));
                let Some(bytes) = recordings.get(key).map_err(Error::storage)? else {
                    continue;
                };
                let meta = schema::decode_meta(bytes.value())?;
                let sealed = read_mark(txn, key)?.is_some_and(|mark| {
                    mark.generation == meta.generation && Some(mark.finished_ms) == meta.finished_ms
                });
                if !sealed && !meta.status.is_live() && meta.status != Status::Deleted {
                    keys.push(key);
                }
            }
            Ok((keys, None))
        })
        .await
    }

    /// Every sealed recording whose chunks are still local, with its mark.
    ///
    /// Fails with a storage error.
    pub async fn sealed_locally(&self) -> Result<Vec<(u128, SealMark)>> {
        self.read(|txn| {
            let Some(sealed) = schema::optional_table(txn, SEALED)? else {
                return Ok(Vec::new());
            };
            let mut kept = Vec::new();
            for entry in sealed.iter().map_err(Error::storage)? {
                let (key, bytes) = entry.map_err(Error::storage)?;
                let mark = SealMark::decode(bytes.value())?;
                if mark.local {
                    kept.push((key.value(), mark));
                }
            }
            Ok(kept)
        })
        .await
    }

    /// Marks `key`'s recording, `generation` ended at `finished_ms`, sealed: its copy in the
    /// object store was verified. With `drop_local` its chunks go from local disk in the same
    /// commit. Answers [`Sealing::Stale`] when the row is no longer that recording.
    ///
    /// Fails with `ShuttingDown` when the store is closed, or a storage error.
    pub async fn seal(
        &self,
        key: u128,
        (generation, finished_ms): (u64, u64),
        drop_local: bool,
    ) -> Result<Sealing> {
        let (done, answer) = oneshot::channel();
        self.submit(Op::Seal {
            key,
            generation,
            finished_ms,
            drop_local,
            done,
        })
        .await?;
        answer.await.map_err(|_| Error::ShuttingDown)?
    }
}

fn read_mark(txn: &redb::ReadTransaction, key: u128) -> Result<Option<SealMark>> {
    // A file nothing was ever sealed in has no table.
    let Some(sealed) = schema::optional_table(txn, SEALED)? else {
        return Ok(None);
    };
    match sealed.get(key).map_err(Error::storage)? {
        Some(bytes) => Ok(Some(SealMark::decode(bytes.value())?)),
        None => Ok(None),
    }
}
