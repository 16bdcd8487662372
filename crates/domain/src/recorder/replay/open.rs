//! Opening a replay: finding the conversation's recording (its live tape, or its stored,
//! finished state) and seeking to the resume offset when it is already committed.
use super::{Replay, Source};
use crate::error::{Absence, Error, Result};
use crate::id::ConversationId;
use crate::recorder::deck::Deck;
use crate::recorder::progress::{Progress, Status};
use crate::store::{Gone, Lookup, Tombstone};
use crate::tier::{Remote, Sealed};

use std::sync::Arc;

impl Replay {
    pub(in crate::recorder) async fn open(
        deck: Deck,
        id: &ConversationId,
        offset: u64,
        text: bool,
    ) -> Result<Replay> {
        let (source, generation) = Self::find(&deck, id).await?;
        // A stream known only to the object store was not checked by the recorder (which
        // looks at local rows): its sealed copy carries its stream row.
        if text
            && let Source::Sealed { sealed, .. } = &source
            && let Some(row) = &sealed.header.stream_row
        {
            crate::recorder::text_stream(row)?;
        }
        let mut replay = Replay {
            deck,
            id: id.clone(),
            key: id.key(),
            generation,
            source,
            next_index: 0,
            ahead: Vec::new(),
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
    async fn find(deck: &Deck, id: &ConversationId) -> Result<(Source, u64)> {
        const RACE_WAIT: std::time::Duration = std::time::Duration::from_millis(100);
        let deadline = tokio::time::Instant::now() + RACE_WAIT;
        loop {
            // Enabled before looking, so that a change between the look and the wait wakes it.
            let changed = deck.changed();
            tokio::pin!(changed);
            changed.as_mut().enable();
            // On a node of a cluster, every reader follows the store, which every node changes
            // alike: tapes come and go with the lead.
            let tape = match deck.store().is_replicated() {
                true => None,
                false => deck.live(id.key()),
            };
            if let Some(tape) = tape {
                let generation = tape.generation();
                let progress = tape.subscribe();
                let source = Source::Live {
                    following: Some(tape.follow()),
                    tape,
                    progress,
                };
                return Ok((source, generation));
            }
            let not_found = |why| Error::RecordingNotFound {
                id: id.to_string(),
                why,
            };
            let meta = match deck.store().lookup(id.key()).await? {
                Lookup::Stored(meta) if meta.status == Status::Deleted => {
                    let at_ms = meta.updated_ms;
                    return Err(not_found(Absence::Deleted { at_ms }));
                }
                Lookup::Stored(meta) => meta,
                Lookup::Gone(tombstone) => return Err(not_found(absence_of(&tombstone))),
                Lookup::Unknown => match deck.remote(id.key()).await? {
                    Some(Remote::Sealed(sealed)) => return Ok(Self::sealed(sealed)),
                    Some(Remote::Gone(tombstone)) => {
                        return Err(not_found(absence_of(&tombstone)));
                    }
                    None => return Err(not_found(Absence::Unknown)),
                },
            };
            if !meta.status.is_live() {
                match deck.sealed_elsewhere(id.key(), &meta).await? {
                    Some(Remote::Sealed(sealed)) => return Ok(Self::sealed(sealed)),
                    Some(Remote::Gone(tombstone)) => {
                        return Err(not_found(absence_of(&tombstone)));
                    }
                    None => {}
                }
            }
            let store = deck.store();
            if meta.status.is_live() && store.is_replicated() {
                let applied = store.applied_changes();
                let (status, chunks, bytes) = store.progress(id.key(), meta.generation).await?;
                let progress = Progress {
                    chunks,
                    bytes,
                    status,
                };
                return Ok((Source::Replicated { progress, applied }, meta.generation));
            }
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

    /// A sealed copy, read from the object store.
    fn sealed(sealed: Arc<Sealed>) -> (Source, u64) {
        let meta = &sealed.header.meta;
        let progress = Progress {
            chunks: meta.chunk_count,
            bytes: meta.byte_len,
            status: meta.status,
        };
        let generation = meta.generation;
        (Source::Sealed { progress, sealed }, generation)
    }
}

/// Why a conversation whose recording left `tombstone` has none.
fn absence_of(tombstone: &Tombstone) -> Absence {
    match tombstone.gone {
        Gone::Deleted => Absence::Deleted {
            at_ms: tombstone.collected_ms,
        },
        Gone::Expired => Absence::Expired {
            finished_ms: tombstone.finished_ms,
            collected_ms: tombstone.collected_ms,
        },
    }
}
