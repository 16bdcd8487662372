//! Reading a replay's chunks, from the live tape's in-memory tail or the store, and cutting
//! them into messages: seeking to a byte offset, whole chunks, coalesced catch-up, UTF-8
//! character boundaries.
use bytes::{Bytes, BytesMut};

use super::{ChunkMark, Piece, Replay, Source};
use crate::error::{Error, Result};
use crate::recorder::progress::Progress;
use crate::store::Chunk;

/// Chunks shorter than this are joined into one message (a copy, which costs less than
/// a message per token); longer ones go out as they are.
pub(super) const JOIN_BELOW_BYTES: usize = 16 * 1024;

impl Replay {
    /// Positions the replay at byte `offset` (at most the committed length).
    pub(super) async fn seek(&mut self, offset: u64, progress: Progress) -> Result<()> {
        self.pending_seek = None;
        self.ahead.clear();
        self.position = offset;
        if offset == progress.bytes {
            self.next_index = progress.chunks;
            return Ok(());
        }
        let index = match self.tail_chunks(0) {
            Some(tail) if tail.first().is_some_and(|c| c.offset <= offset) => tail
                .iter()
                .rev()
                .find(|c| c.offset <= offset)
                .map_or(0, |c| c.index),
            _ => match &self.source {
                Source::Sealed { sealed, .. } => sealed.locate(offset),
                _ => {
                    self.deck
                        .store()
                        .locate(self.key, self.generation, progress.chunks, offset)
                        .await?
                }
            },
        };
        self.next_index = index;
        let chunk = self.read_from(index, 1).await?;
        let first = chunk.first().ok_or_else(|| Error::Corrupt {
            detail: "located chunk is missing".into(),
        })?;
        if self.text && !is_char_boundary(&first.data, (offset - first.offset) as usize) {
            return Err(Error::OffsetInsideCharacter { offset });
        }
        Ok(())
    }

    fn tail_chunks(&self, from: u64) -> Option<Vec<Chunk>> {
        match &self.source {
            Source::Live { tape, .. } => tape.tail_from(from),
            Source::Finished { .. } | Source::Sealed { .. } | Source::Replicated { .. } => None,
        }
    }

    /// Committed chunks from `index` on: those read ahead by the last message when they
    /// start there, else from the live tail when it still holds them, else from the store (or
    /// the object store, for a sealed copy read there).
    pub(super) async fn read_from(&mut self, index: u64, max_bytes: usize) -> Result<Vec<Chunk>> {
        if self.ahead.first().is_some_and(|c| c.index == index) {
            return Ok(std::mem::take(&mut self.ahead));
        }
        if let Source::Sealed { sealed, .. } = &self.source {
            return sealed.read_chunks(index, max_bytes).await;
        }
        if let Some(chunks) = self.tail_chunks(index)
            && !chunks.is_empty()
        {
            return Ok(chunks);
        }
        self.deck
            .store()
            .read_chunks(self.key, self.generation, index, max_bytes)
            .await
    }

    /// The rest of `chunk` from the current position, as one message.
    pub(super) fn whole_chunk(&mut self, chunk: &Chunk) -> Result<Piece> {
        let rest = self.rest_of(chunk)?;
        self.position = chunk.end();
        self.next_index = chunk.index + 1;
        Ok(Piece {
            data: rest,
            end_offset: self.position,
            chunk: Some(ChunkMark {
                index: chunk.index,
                committed_ms: chunk.committed_ms,
            }),
        })
    }

    /// Joins chunks, from the current position, into one message of at most
    /// `max_bytes`, splitting a large chunk at a character boundary. Only small chunks are
    /// joined (copied): a chunk of [`JOIN_BELOW_BYTES`] or more goes out as a message of its
    /// own, as it is, and so does a lone chunk.
    pub(super) fn coalesce(&mut self, chunks: &[Chunk], max_bytes: usize) -> Result<Piece> {
        let from = self.next_index;
        let mut pending = chunks.iter().filter(|c| c.index >= from);
        let Some(first) = pending.next() else {
            return Ok(self.piece(Bytes::new()));
        };
        let rest = self.rest_of(first)?;
        if rest.len() > max_bytes {
            let cut = self.cut(&rest, max_bytes);
            self.position += cut as u64;
            return Ok(self.piece(rest.slice(..cut)));
        }
        self.position = first.end();
        self.next_index = first.index + 1;
        let joined = pending.take_while(|c| c.data.len() < JOIN_BELOW_BYTES);
        if rest.len() >= JOIN_BELOW_BYTES || joined.clone().next().is_none() {
            return Ok(self.piece(rest));
        }
        // Sized once: a catch-up read joins up to megabytes of chunks here.
        let wanted = rest.len() + joined.clone().map(|c| c.data.len()).sum::<usize>();
        let mut data = BytesMut::with_capacity(wanted.min(max_bytes));
        data.extend_from_slice(&rest);
        for chunk in joined {
            let room = max_bytes - data.len();
            if room == 0 {
                break;
            }
            if chunk.data.len() <= room {
                data.extend_from_slice(&chunk.data);
                self.position = chunk.end();
                self.next_index = chunk.index + 1;
            } else {
                let cut = self.cut(&chunk.data, room);
                data.extend_from_slice(&chunk.data[..cut]);
                self.position += cut as u64;
                break;
            }
        }
        Ok(self.piece(data.freeze()))
    }

    fn piece(&self, data: Bytes) -> Piece {
        Piece {
            data,
            end_offset: self.position,
            chunk: None,
        }
    }

    /// What of `chunk` is left from the current position.
    fn rest_of(&self, chunk: &Chunk) -> Result<Bytes> {
        let skip = (self.position - chunk.offset) as usize;
        if skip > chunk.data.len() || (self.text && !is_char_boundary(&chunk.data, skip)) {
            return Err(Error::OffsetInsideCharacter {
                offset: self.position,
            });
        }
        Ok(chunk.data.slice(skip..))
    }

    /// Where to cut `data` to keep at most `room` bytes: at a character boundary in a text
    /// replay.
    fn cut(&self, data: &[u8], room: usize) -> usize {
        if !self.text {
            return room;
        }
        (0..=room)
            .rev()
            .find(|&at| is_char_boundary(data, at))
            .unwrap_or(0)
    }
}

/// Whether byte `at` of UTF-8 text `data` starts a character (or is its end).
fn is_char_boundary(data: &[u8], at: usize) -> bool {
    match data.get(at) {
        None => at == data.len(),
        // Continuation bytes are 0b10xx_xxxx.
        Some(&byte) => (byte as i8) >= -0x40,
    }
}
