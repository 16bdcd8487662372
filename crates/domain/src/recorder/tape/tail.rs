//! The most recent committed chunks of a live recording, kept in memory so that live readers
//! rarely touch the disk; older chunks are read from the store.
use std::collections::VecDeque;

use crate::store::Chunk;

/// Recent chunks kept in memory per live recording; older ones are read from the store.
const TAIL_MAX_CHUNKS: usize = 64;
/// Bytes of recent chunks kept in memory per live recording (the newest chunk is always kept).
const TAIL_MAX_BYTES: usize = 16 * 1024;

/// The most recent committed chunks of a live recording, and their total text length.
#[derive(Debug, Default)]
pub(super) struct Tail {
    chunks: VecDeque<Chunk>,
    bytes: usize,
}

impl Tail {
    /// The chunks from `index` on, or `None` when some of them have already left the tail.
    /// An empty tail holds everything from `index` on only if `index` is past the last
    /// committed chunk, which `committed_chunks` tells.
    pub(super) fn from(
        &self,
        index: u64,
        committed_chunks: impl FnOnce() -> u64,
    ) -> Option<Vec<Chunk>> {
        match self.chunks.front() {
            Some(first) if first.index <= index => {
                let skip = (index - first.index) as usize;
                Some(self.chunks.iter().skip(skip).cloned().collect())
            }
            Some(_) => None,
            None => (index >= committed_chunks()).then(Vec::new),
        }
    }

    /// Adds newly committed `chunks`, then drops the oldest beyond the limits (always keeping
    /// the newest).
    pub(super) fn push(&mut self, chunks: Vec<Chunk>) {
        for chunk in chunks {
            self.bytes += chunk.data.len();
            self.chunks.push_back(chunk);
        }
        while self.chunks.len() > 1
            && (self.chunks.len() > TAIL_MAX_CHUNKS || self.bytes > TAIL_MAX_BYTES)
        {
            if let Some(old) = self.chunks.pop_front() {
                self.bytes -= old.data.len();
            }
        }
    }
}
