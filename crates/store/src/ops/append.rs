//! `Append`: one chunk of a live recording, from the producer session that holds it. The hot
//! path: one per token, so nothing here allocates beyond the chunk's stored form.
use super::Applying;
use super::after::{Done, refuse};
use crate::error::{Error, Result};
use crate::live::{Chunk, Live};
use crate::schema::ChunkLayout;

/// Stores `chunk` of `live` if `session` still holds it; it is published and acknowledged
/// (with the recording's committed length) after the commit.
pub(super) fn apply(
    cx: &mut Applying<'_, '_, '_>,
    live: Live,
    session: u64,
    mut chunk: Chunk,
    done: Done<u64>,
) -> Result<()> {
    if live.is_closed() {
        return refuse(done, live.ended_error());
    }
    if live.producer_session() != session {
        return refuse(done, Error::Fenced);
    }
    let t = &mut *cx.tables;
    live.touch(t.now);
    chunk.committed_ms = t.now;
    let layout = ChunkLayout::of(live.timed_chunks());
    let recording = (live.key(), live.generation());
    let stored = t.append_chunk(recording, layout, &chunk);
    cx.after.chunk(live, chunk, done);
    stored
}
