//! Large chunks read from `chunks` lately, kept in memory: readers catching up on the same
//! recording (the tabs that reload one response) then take its bytes as they are, not copied
//! out of redb's pages again. A recording's chunks never change once committed, so an entry is
//! never stale; entries of deleted recordings are simply not asked for, and age out.
use bytes::Bytes;
use quick_cache::Weighter;
use quick_cache::sync::Cache;

/// Chunks at least this long are kept. A shorter one costs little to copy, and a catch-up read
/// joins (copies) it into a larger message anyway.
pub(crate) const CACHED_FROM_BYTES: usize = 4 * 1024;
/// Most bytes of chunks kept: several long responses' worth.
const BUDGET_BYTES: u64 = 64 * 1024 * 1024;

/// Which chunk. A recording is named by its conversation's key, its generation and when it
/// was created: a generation number is used again when a purged conversation is recorded
/// anew.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ChunkKey {
    pub(crate) key: u128,
    pub(crate) generation: u64,
    pub(crate) created_ms: u64,
    pub(crate) index: u64,
}

/// What is kept of a chunk: its offset, its bytes and when it was committed.
#[derive(Debug, Clone)]
pub(crate) struct Kept {
    pub(crate) offset: u64,
    pub(crate) data: Bytes,
    pub(crate) committed_ms: u64,
}

#[derive(Clone)]
struct ByLength;

impl Weighter<ChunkKey, Kept> for ByLength {
    fn weight(&self, _: &ChunkKey, kept: &Kept) -> u64 {
        kept.data.len() as u64
    }
}

/// The store's cache of large chunks read lately.
pub(crate) struct ReadCache {
    chunks: Cache<ChunkKey, Kept, ByLength>,
}

impl Default for ReadCache {
    fn default() -> Self {
        let items = (BUDGET_BYTES / CACHED_FROM_BYTES as u64) as usize;
        Self {
            chunks: Cache::with_weighter(items, BUDGET_BYTES, ByLength),
        }
    }
}

impl ReadCache {
    pub(crate) fn get(&self, chunk: &ChunkKey) -> Option<Kept> {
        self.chunks.get(chunk)
    }

    /// Keeps `kept` (a chunk of at least [`CACHED_FROM_BYTES`]).
    pub(crate) fn keep(&self, chunk: ChunkKey, kept: Kept) {
        self.chunks.insert(chunk, kept);
    }
}
