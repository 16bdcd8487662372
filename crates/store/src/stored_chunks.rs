//! One recording's committed chunks as a read transaction sees them: the folded prefix in
//! `chunks` (segments of consecutive chunks), the rest in the journal, as a [`JournalView`]
//! taken before the transaction began copied them. Large chunks read lately are found in the
//! store's [`ReadCache`] first.
use bytes::Bytes;
use redb::{ReadOnlyTable, ReadTransaction};

use super::journal::JournalView;
use super::live::Chunk;
use super::read_cache::{CACHED_FROM_BYTES, ChunkKey, Kept, ReadCache};
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
    /// Which recording of the conversation (see [`ChunkKey`]).
    generation: u64,
    created_ms: u64,
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
            generation: meta.generation,
            created_ms: meta.created_ms,
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
    /// returned when any is stored; none when `from` is past the last). With a `cache`, the
    /// chunks it holds are taken from it, and large chunks read are kept in it.
    ///
    /// Fails with `RecordingNotFound` when chunk `from` is gone but later ones are not: the
    /// sweeper is deleting the recording, oldest chunks first.
    pub(crate) fn read_from(
        &self,
        from: u64,
        max_bytes: usize,
        cache: Option<&ReadCache>,
    ) -> Result<Vec<Chunk>> {
        let mut out = Batch {
            from,
            layout: self.layout,
            max_bytes,
            chunks: Vec::new(),
            bytes: 0,
            cache,
            recording: self,
        };
        if !out.push_kept() {
            return Ok(out.chunks);
        }
        let start = match self.segment_holding(out.next_index())? {
            Some((first, _)) => first,
            None => out.next_index(),
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

    /// The cache's name for chunk `index`.
    fn chunk_key(&self, index: u64) -> ChunkKey {
        ChunkKey {
            key: self.key,
            generation: self.generation,
            created_ms: self.created_ms,
            index,
        }
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
struct Batch<'r> {
    from: u64,
    layout: ChunkLayout,
    max_bytes: usize,
    chunks: Vec<Chunk>,
    bytes: usize,
    cache: Option<&'r ReadCache>,
    recording: &'r StoredChunks,
}

impl Batch<'_> {
    fn next_index(&self) -> u64 {
        self.from + self.chunks.len() as u64
    }

    /// Adds the chunks the cache holds from the next one on, as far as they run unbroken;
    /// false once the budget is spent.
    fn push_kept(&mut self) -> bool {
        let Some(cache) = self.cache else {
            return true;
        };
        while let Some(kept) = cache.get(&self.recording.chunk_key(self.next_index())) {
            if !self.fits(kept.data.len()) || !self.add(kept) {
                return false;
            }
        }
        true
    }

    /// Adds the chunk stored as `value`: a large one as the cache holds it, or copied and
    /// kept there; a small one copied. False once the budget is spent.
    fn push(&mut self, value: &[u8]) -> Result<bool> {
        let stored = schema::decode_chunk(value, self.layout)?;
        if !self.fits(stored.data.len()) {
            return Ok(false);
        }
        let copy = || Kept {
            offset: stored.offset,
            data: Bytes::copy_from_slice(stored.data),
            committed_ms: stored.committed_ms,
        };
        let kept = match self.cache {
            Some(cache) if stored.data.len() >= CACHED_FROM_BYTES => {
                let chunk = self.recording.chunk_key(self.next_index());
                cache.get(&chunk).unwrap_or_else(|| {
                    let kept = copy();
                    cache.keep(chunk, kept.clone());
                    kept
                })
            }
            _ => copy(),
        };
        Ok(self.add(kept))
    }

    /// Whether a chunk of `length` bytes is within the budget (the first always is).
    fn fits(&self, length: usize) -> bool {
        self.chunks.is_empty() || self.bytes + length <= self.max_bytes
    }

    /// Adds `kept` as the next chunk; false once the budget is spent.
    fn add(&mut self, kept: Kept) -> bool {
        self.bytes += kept.data.len();
        self.chunks.push(Chunk {
            index: self.next_index(),
            offset: kept.offset,
            data: kept.data,
            committed_ms: kept.committed_ms,
        });
        self.bytes < self.max_bytes
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
