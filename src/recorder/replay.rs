//! `Replay`: one reader's walk through a recording, from a byte offset to its end. Catch-up is
//! read in messages of up to 64 KiB; once caught up it waits on the recording's committed
//! high-water mark, so new chunks are pushed without polling, with no gap and no duplicate. A
//! chunked replay sends one message per recorded chunk instead.
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::sync::watch;

use super::registry::Recordings;
use super::status::{Progress, Status};
use super::tape::{Following, Tape};
use crate::error::{Absence, Error, Result};
use crate::id::ConversationId;
use crate::store::{Chunk, Lookup};

/// Largest text sent in one replay message, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// One message of a replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// The bytes; in a text replay, whole UTF-8 characters.
    pub data: Bytes,
    /// Byte offset just after `text`.
    pub end_offset: u64,
    /// In a chunked replay, the recorded chunk this is (the rest of, when the replay began
    /// inside it).
    pub chunk: Option<ChunkMark>,
}

impl Piece {
    /// The piece's text. A text replay opens only on a UTF-8 recording and cuts pieces only
    /// at character boundaries, so nothing is ever replaced here.
    pub fn into_text(self) -> String {
        match String::from_utf8(self.data.into()) {
            Ok(text) => text,
            Err(err) => String::from_utf8_lossy(err.as_bytes()).into_owned(),
        }
    }
}

/// Which recorded chunk a message of a chunked replay carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChunkMark {
    /// Its index in the recording, from 0.
    pub index: u64,
    /// When it was committed, in ms since the epoch; 0 for chunks stored before schema 3.
    pub committed_ms: u64,
}

/// Where a replay reads from.
enum Source {
    /// A recording still being produced; its committed state moves.
    Live {
        tape: Arc<Tape>,
        progress: watch::Receiver<Progress>,
        /// Counts this replay among the tape's readers.
        _following: Following,
    },
    /// A finished recording; its committed state is fixed.
    Finished { progress: Progress },
}

/// A reader's position in one recording.
pub struct Replay {
    recordings: Recordings,
    /// The conversation, as the reader named it.
    id: ConversationId,
    key: u128,
    generation: u64,
    source: Source,
    /// Next chunk to read.
    next_index: u64,
    /// Byte offset of the next byte to send; may fall inside chunk `next_index`.
    position: u64,
    /// A resume offset beyond what was committed when the replay opened.
    pending_seek: Option<u64>,
    /// How the recording ended, once the replay has sent all of it.
    ended: Option<Status>,
    /// One message per recorded chunk.
    chunked: bool,
    /// Offsets and cuts must fall on UTF-8 character boundaries (a text replay).
    text: bool,
}

impl Replay {
    pub(super) async fn open(
        recordings: Recordings,
        id: &ConversationId,
        offset: u64,
        text: bool,
    ) -> Result<Replay> {
        let (source, generation) = Self::find(&recordings, id).await?;
        let mut replay = Replay {
            recordings,
            id: id.clone(),
            key: id.key(),
            generation,
            source,
            next_index: 0,
            position: 0,
            pending_seek: (offset > 0).then_some(offset),
            ended: None,
            chunked: false,
            text,
        };
        // Seek now when the offset is already committed, so a bad offset fails the call itself.
        let progress = replay.progress();
        if offset > progress.bytes && !progress.status.is_live() {
            return Err(Error::OffsetOutOfRange {
                offset,
                len: progress.bytes,
            });
        }
        if offset > 0 && offset <= progress.bytes {
            replay
                .seek(offset, progress)
                .await
                .map_err(|err| replay.named(err))?;
        }
        Ok(replay)
    }

    /// The conversation's recording: its live tape, or its stored (finished) state.
    ///
    /// A tape is registered before its start is committed and unregistered after its end is,
    /// so a stored row that still says `recording` with no tape registered means this lookup
    /// raced a start or an end: look again once the registry changes. A row left `recording`
    /// for good (its failure could not be stored) is replayed as `interrupted` after
    /// `RACE_WAIT` rather than waited on forever.
    async fn find(recordings: &Recordings, id: &ConversationId) -> Result<(Source, u64)> {
        const RACE_WAIT: std::time::Duration = std::time::Duration::from_millis(100);
        let deadline = tokio::time::Instant::now() + RACE_WAIT;
        loop {
            // Enabled before looking, so that a change between the look and the wait wakes it.
            let changed = recordings.changed();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(tape) = recordings.live(id.key()) {
                let generation = tape.generation();
                let progress = tape.subscribe();
                let _following = tape.follow();
                let source = Source::Live {
                    tape,
                    progress,
                    _following,
                };
                return Ok((source, generation));
            }
            let not_found = |why| Error::RecordingNotFound {
                id: id.to_string(),
                why,
            };
            let meta = match recordings.store().lookup(id.key()).await? {
                Lookup::Stored(meta) if meta.status == Status::Deleted => {
                    let at_ms = meta.updated_ms;
                    return Err(not_found(Absence::Deleted { at_ms }));
                }
                Lookup::Stored(meta) => meta,
                Lookup::Gone(tombstone) => {
                    return Err(not_found(match tombstone.gone {
                        crate::store::Gone::Deleted => Absence::Deleted {
                            at_ms: tombstone.collected_ms,
                        },
                        crate::store::Gone::Expired => Absence::Expired {
                            finished_ms: tombstone.finished_ms,
                            collected_ms: tombstone.collected_ms,
                        },
                    }));
                }
                Lookup::Unknown => return Err(not_found(Absence::Unknown)),
            };
            if meta.status.is_live() && tokio::time::timeout_at(deadline, changed).await.is_ok() {
                continue;
            }
            let status = match meta.status {
                Status::Recording => Status::Interrupted,
                status => status,
            };
            let progress = Progress {
                chunks: meta.chunk_count,
                bytes: meta.byte_len,
                status,
            };
            return Ok((Source::Finished { progress }, meta.generation));
        }
    }

    /// The next message, or `None` once everything up to the recording's end has been sent.
    /// Waits while the recording is live and nothing new is committed.
    ///
    /// Fails with `OffsetOutOfRange` / `OffsetInsideCharacter` for a resume offset that turned
    /// out bad once the recording grew or ended, or a storage error.
    pub async fn next(&mut self) -> Result<Option<Piece>> {
        self.next_up_to(MAX_MESSAGE_BYTES).await
    }

    /// Makes this a chunked replay: each message is one recorded chunk (or the rest of the
    /// one the replay begins in), whatever its size.
    pub fn chunked(mut self) -> Self {
        self.chunked = true;
        self
    }

    /// As [`next`](Self::next), with messages of at most `max_bytes` (in a text replay,
    /// clamped to 4 bytes ..= [`MAX_MESSAGE_BYTES`], so that any UTF-8 character fits).
    pub async fn next_up_to(&mut self, max_bytes: usize) -> Result<Option<Piece>> {
        self.fetch(max_bytes, true).await
    }

    /// As [`next_up_to`](Self::next_up_to), without waiting: `None` also when the replay has
    /// caught up with a live recording ([`ending`](Self::ending) tells the two apart).
    ///
    /// Fails as [`next`](Self::next) does.
    pub async fn next_ready(&mut self, max_bytes: usize) -> Result<Option<Piece>> {
        self.fetch(max_bytes, false).await
    }

    async fn fetch(&mut self, max_bytes: usize, wait: bool) -> Result<Option<Piece>> {
        // A gRPC message holds at most 64 KiB of text; a byte replay's caller sets its own.
        let max_bytes = match self.text {
            true => max_bytes.clamp(4, MAX_MESSAGE_BYTES),
            false => max_bytes.max(1),
        };
        loop {
            if self.ended.is_some() {
                return Ok(None);
            }
            let progress = self.progress();
            if let Some(offset) = self.pending_seek {
                if offset <= progress.bytes {
                    self.seek(offset, progress)
                        .await
                        .map_err(|err| self.named(err))?;
                } else if !progress.status.is_live() {
                    return self.end_early(progress, offset);
                }
            }
            if self.pending_seek.is_none() && self.next_index < progress.chunks {
                match self.read_from(self.next_index, max_bytes).await {
                    Ok(chunks) if !chunks.is_empty() => {
                        let piece = match self.chunked {
                            true => self.whole_chunk(&chunks[0])?,
                            false => self.coalesce(&chunks, max_bytes)?,
                        };
                        return Ok(Some(piece));
                    }
                    Ok(_) => {}
                    Err(Error::RecordingNotFound {
                        why: Absence::Deleted { .. },
                        ..
                    }) => {
                        self.ended = Some(Status::Deleted);
                        return Ok(None);
                    }
                    // The conversation was re-recorded under us: this recording is gone.
                    Err(Error::Superseded | Error::RecordingNotFound { .. }) => {
                        self.ended = Some(Status::Superseded);
                        return Ok(None);
                    }
                    Err(err) => return Err(err),
                }
            } else if !progress.status.is_live() {
                self.ended = Some(progress.status);
                return Ok(None);
            }
            if !wait {
                return Ok(None);
            }
            self.wait_for_change().await;
        }
    }

    /// How the recording ended; `None` until [`next`](Self::next) has returned `None`.
    pub fn ending(&self) -> Option<Status> {
        self.ended
    }

    /// Byte offset after the last byte sent (or the resume offset, before anything is sent).
    pub fn offset(&self) -> u64 {
        self.pending_seek.unwrap_or(self.position)
    }

    /// `err`, naming the conversation as the reader did (the store knows only its key).
    fn named(&self, err: Error) -> Error {
        match err {
            Error::RecordingNotFound { why, .. } => Error::RecordingNotFound {
                why,
                id: self.id.to_string(),
            },
            err => err,
        }
    }

    fn progress(&mut self) -> Progress {
        match &mut self.source {
            Source::Live { progress, .. } => *progress.borrow_and_update(),
            Source::Finished { progress } => *progress,
        }
    }

    async fn wait_for_change(&mut self) {
        if let Source::Live { progress, .. } = &mut self.source {
            // The sender lives in the tape this replay holds, so `changed` cannot fail.
            let _ = progress.changed().await;
        }
    }

    /// A resume offset beyond the end of the recording, found out once it ended.
    fn end_early(&mut self, progress: Progress, offset: u64) -> Result<Option<Piece>> {
        if progress.status == Status::Superseded {
            self.ended = Some(Status::Superseded);
            return Ok(None);
        }
        Err(Error::OffsetOutOfRange {
            offset,
            len: progress.bytes,
        })
    }

    /// Positions the replay at byte `offset` (at most the committed length).
    async fn seek(&mut self, offset: u64, progress: Progress) -> Result<()> {
        self.pending_seek = None;
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
            _ => {
                self.recordings
                    .store()
                    .locate(self.key, self.generation, progress.chunks, offset)
                    .await?
            }
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
            Source::Finished { .. } => None,
        }
    }

    /// Committed chunks from `index` on: from the live tail when it still holds them, else
    /// from the store.
    async fn read_from(&self, index: u64, max_bytes: usize) -> Result<Vec<Chunk>> {
        if let Some(chunks) = self.tail_chunks(index)
            && !chunks.is_empty()
        {
            return Ok(chunks);
        }
        self.recordings
            .store()
            .read_chunks(self.key, self.generation, index, max_bytes)
            .await
    }

    /// The rest of `chunk` from the current position, as one message.
    fn whole_chunk(&mut self, chunk: &Chunk) -> Result<Piece> {
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
    /// `max_bytes`, splitting a large chunk at a character boundary.
    fn coalesce(&mut self, chunks: &[Chunk], max_bytes: usize) -> Result<Piece> {
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
        let mut data = BytesMut::from(&rest[..]);
        for chunk in pending {
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
