//! One recording's committed chunks as a read transaction sees them: the folded prefix in
//! `chunks` (segments of consecutive chunks), the rest in the journal, as a [`JournalView`]
//! taken before the transaction began copied them.
use redb::{ReadOnlyTable, ReadTransaction};

use super::journal::JournalView;
use super::live::Chunk;
use super::schema::RecordingMeta;
use super::schema::{self, CHUNKS, ChunkLayout};
use super::segment::Segment;
use crate::error::{Error, Result};

/// A value read from `chunks`.
type StoredValue<'t> = redb::AccessGuard<'t, &'static [u8]>;

pub(crate) struct StoredChunks {
    chunks: ReadOnlyTable<(u128, u64), &'static [u8]>,
    key: u128,
    layout: ChunkLayout,
    view: JournalView,
}

impl StoredChunks {
    /// The chunks of `key`'s recording `meta`, laid out as its row says.
    pub(crate) fn open(
        txn: &ReadTransaction,
        key: u128,
        meta: &RecordingMeta,
        view: JournalView,
    ) -> Result<Self> {
        Ok(Self {
            chunks: txn.open_table(CHUNKS).map_err(Error::storage)?,
            key,
            layout: ChunkLayout::of(meta.timed_chunks),
            view: view.of_generation(meta.generation),
        })
    }

    /// The start offset of chunk `index`, if it is stored.
    pub(crate) fn offset_of(&self, index: u64) -> Result<Option<u64>> {
        if let Some((first, value)) = self.segment_holding(index)? {
            let segment = Segment::parse(value.value())?;
            let position = (index - first) as usize;
            let chunk = segment
                .value(position)
                .expect("the segment holds the chunk");
            return schema::chunk_offset(chunk).map(Some);
        }
        match self.view.value(index) {
            Some(value) => schema::chunk_offset(value).map(Some),
            None => Ok(None),
        }
    }

    /// Chunks from `from` on, stopping after `max_bytes` of text (at least one chunk is
    /// returned when any is stored; none when `from` is past the last).
    ///
    /// Fails with `RecordingNotFound` when chunk `from` is gone but later ones are not: the
    /// sweeper is deleting the recording, oldest chunks first.
    pub(crate) fn read_from(&self, from: u64, max_bytes: usize) -> Result<Vec<Chunk>> {
        let mut out = Batch {
            from,
            layout: self.layout,
            max_bytes,
            chunks: Vec::new(),
            bytes: 0,
        };
        let start = match self.segment_holding(from)? {
            Some((first, _)) => first,
            None => from,
        };
        for entry in self
            .chunks
            .range((self.key, start)..=(self.key, u64::MAX))
            .map_err(Error::storage)?
        {
            let (key, value) = entry.map_err(Error::storage)?;
            let first = key.value().1;
            // Only the segment holding `from` starts before the next chunk wanted.
            let Some(skip) = out.next_index().checked_sub(first) else {
                return Err(being_collected(self.key));
            };
            for chunk in Segment::parse(value.value())?.values().skip(skip as usize) {
                if !out.push(chunk)? {
                    return Ok(out.chunks);
                }
            }
        }
        while let Some(value) = self.view.value(out.next_index()) {
            if !out.push(value)? {
                break;
            }
        }
        Ok(out.chunks)
    }

    /// The segment holding chunk `index`, with the index of its first chunk, if `index` is
    /// folded.
    fn segment_holding(&self, index: u64) -> Result<Option<(u64, StoredValue<'_>)>> {
        let mut range = self
            .chunks
            .range((self.key, 0)..=(self.key, index))
            .map_err(Error::storage)?;
        let Some(entry) = range.next_back() else {
            return Ok(None);
        };
        let (key, value) = entry.map_err(Error::storage)?;
        let first = key.value().1;
        let count = Segment::parse(value.value())?.len() as u64;
        Ok((index < first + count).then_some((first, value)))
    }

    /// How many chunks are stored and their total length; the view need only hold the newest.
    pub(crate) fn progress(&self) -> Result<(u64, u64)> {
        if let Some((index, value)) = self.view.last() {
            return Ok((index + 1, schema::chunk_end(value, self.layout)?));
        }
        // No unfolded chunk: the newest is here.
        let mut range = self
            .chunks
            .range((self.key, 0)..=(self.key, u64::MAX))
            .map_err(Error::storage)?;
        match range.next_back() {
            Some(entry) => {
                let (key, value) = entry.map_err(Error::storage)?;
                let segment = Segment::parse(value.value())?;
                Ok((
                    key.value().1 + segment.len() as u64,
                    schema::chunk_end(segment.last(), self.layout)?,
                ))
            }
            None => Ok((0, 0)),
        }
    }
}

/// Chunks gathered for one read, up to a byte budget.
struct Batch {
    from: u64,
    layout: ChunkLayout,
    max_bytes: usize,
    chunks: Vec<Chunk>,
    bytes: usize,
}

impl Batch {
    fn next_index(&self) -> u64 {
        self.from + self.chunks.len() as u64
    }

    /// Adds the chunk stored as `value`; false once the budget is spent.
    fn push(&mut self, value: &[u8]) -> Result<bool> {
        let stored = schema::decode_chunk(value, self.layout)?;
        let data = stored.data;
        if !self.chunks.is_empty() && self.bytes + data.len() > self.max_bytes {
            return Ok(false);
        }
        self.bytes += data.len();
        self.chunks.push(Chunk {
            index: self.next_index(),
            offset: stored.offset,
            data: bytes::Bytes::copy_from_slice(data),
            committed_ms: stored.committed_ms,
        });
        Ok(self.bytes < self.max_bytes)
    }
}

/// A recording's chunks are stored without gaps, except while the sweeper deletes an expired
/// one over several commits (oldest chunks first): then it is as good as gone.
pub(crate) fn being_collected(key: u128) -> Error {
    Error::RecordingNotFound {
        id: uuid::Uuid::from_u128(key).to_string(),
        why: crate::error::Absence::Unknown,
    }
}
