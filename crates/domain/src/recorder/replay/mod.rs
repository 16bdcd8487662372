//! `Replay`: one reader's walk through a recording, from a byte offset to its end. Catch-up is
//! read in messages of up to 64 KiB; once caught up it waits on the recording's committed
//! high-water mark, so new chunks are pushed without polling, with no gap and no duplicate. A
//! chunked replay sends one message per recorded chunk instead.
//!
//! Opening (finding the recording, seeking) is in `open`; reading chunks and cutting them into
//! messages in `read`.
#[cfg(test)]
mod large_chunks;
mod open;
mod read;
mod rendering;
#[cfg(test)]
mod shared_renderings;

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::watch;

use super::deck::Deck;
use super::progress::{Progress, Status};
use super::tape::{Following, Tape};
use crate::error::{Absence, Error, Result};
use crate::id::ConversationId;

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
        /// Counts this replay among the tape's readers (`None` once it is not counted).
        following: Option<Following>,
    },
    /// A finished recording; its committed state is fixed.
    Finished { progress: Progress },
    /// On a node of a cluster, a recording live in the store with no tape here (its producer
    /// is on another node): its committed state moves as entries are applied.
    Replicated {
        progress: Progress,
        applied: watch::Receiver<u64>,
    },
    /// A finished recording read from its sealed copy in the object store.
    Sealed {
        progress: Progress,
        sealed: Arc<crate::tier::Sealed>,
    },
}

/// A reader's position in one recording.
pub struct Replay {
    deck: Deck,
    /// The conversation, as the reader named it.
    id: ConversationId,
    key: u128,
    generation: u64,
    source: Source,
    /// Next chunk to read.
    next_index: u64,
    /// Chunks read with the last message but not sent in it, from `next_index` on (a large
    /// chunk is a message of its own): the next message starts with them.
    ahead: Vec<crate::store::Chunk>,
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
    /// The next message, or `None` once everything up to the recording's end has been sent.
    /// Waits while the recording is live and nothing new is committed.
    ///
    /// Fails with `OffsetOutOfRange` / `OffsetInsideCharacter` for a resume offset that turned
    /// out bad once the recording grew or ended, or a storage error.
    pub async fn next(&mut self) -> Result<Option<Piece>> {
        self.next_up_to(MAX_MESSAGE_BYTES).await
    }

    /// Stops counting this replay among its recording's readers: an operator watching (the
    /// console), not a reader of the response.
    pub fn stop_counting(&mut self) {
        if let Source::Live { following, .. } = &mut self.source {
            *following = None;
        }
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
                        let next = self.next_index;
                        self.ahead = chunks;
                        self.ahead.retain(|c| c.index >= next);
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
            Source::Finished { progress }
            | Source::Sealed { progress, .. }
            | Source::Replicated { progress, .. } => *progress,
        }
    }

    /// Waits until the recording may have changed: more committed, or its status. A reader
    /// that has nothing [`ready`](Self::next_ready) waits here, in a future of a few words
    /// (a caught-up reader waits long, and readers are many).
    pub async fn changed(&mut self) {
        if self.ended.is_none() {
            self.wait_for_change().await;
        }
    }

    async fn wait_for_change(&mut self) {
        match &mut self.source {
            Source::Live { progress, .. } => {
                // The sender lives in the tape this replay holds, so `changed` cannot fail.
                let _ = progress.changed().await;
            }
            Source::Replicated { progress, applied } => {
                // The store holds the sender, so `changed` cannot fail while it is open.
                if applied.changed().await.is_err() {
                    return;
                }
                let store = self.deck.store();
                // Boxed: a read from the store would make every waiting reader's future large.
                match Box::pin(store.progress(self.key, self.generation)).await {
                    Ok((status, chunks, bytes)) => {
                        *progress = Progress {
                            chunks,
                            bytes,
                            status,
                        }
                    }
                    // Superseded or deleted under this replay: reading says which.
                    Err(_) => progress.chunks = progress.chunks.max(self.next_index + 1),
                }
            }
            Source::Finished { .. } | Source::Sealed { .. } => {}
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
}
