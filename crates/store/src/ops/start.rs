//! `Start`: a recording of a conversation begins (or an ended one is made live again), as the
//! recorder's admission decides on the writer thread; a fork is counted in its source's row in
//! the same commit.
use super::Applying;
use super::after::{Done, refuse};
use crate::error::{Absence, Error, Result};
use crate::id::ConversationId;
use crate::live::{Admission, Admit, Admitted};
use crate::schema::RecordingMeta;
use crate::status::Status;
use crate::stream_row::StreamRow;

/// Starts a recording of `id`, replacing the conversation's previous one in the same commit,
/// or reopens the previous one, as `admit` decides; answers once that is committed.
pub(super) fn apply(
    cx: &mut Applying<'_, '_, '_>,
    id: &ConversationId,
    retention_ms: Option<u64>,
    stream_row: Option<Vec<u8>>,
    admit: Admit,
    done: Done<()>,
) -> Result<()> {
    let t = &mut *cx.tables;
    let key = id.key();
    let previous = match t.meta(key) {
        Ok(previous) => previous,
        Err(err) => return cx.after.abort(done, err),
    };
    // A fork is counted in its source's row in this same commit; a source gone since the
    // fork was asked (deleted, replaced) refuses it before any change.
    let fork = match stream_row.as_deref().map(StreamRow::decode).transpose() {
        Ok(row) => row.and_then(|row| row.fork),
        Err(err) => return refuse(done, err),
    };
    if let Some(fork) = &fork {
        match t.fork_source_stands(fork) {
            Ok(true) => {}
            Ok(false) => {
                let id = uuid::Uuid::from_u128(fork.source).to_string();
                let why = Absence::Unknown;
                return refuse(done, Error::RecordingNotFound { id, why });
            }
            Err(err) => return cx.after.abort(done, err),
        }
    }
    let admission = Admission {
        previous: previous.as_ref(),
        now_ms: t.now,
    };
    // Decided before anything is deleted, so that a refused start deletes nothing.
    let Admitted {
        live,
        replaced,
        reopen,
    } = match admit(admission) {
        Ok(admitted) => admitted,
        Err(refusal) => return refuse(done, refusal),
    };
    let generation = live.generation();
    cx.after.touched(live);
    if let Some(old) = replaced {
        // Its readers see the chunks of it this batch committed, then its end.
        cx.after.end(old, Status::Superseded, None);
    }
    cx.after.answer(done, ());
    if reopen {
        return t.reopen_recording(key);
    }
    t.delete_recording(key)?;
    let mut meta = RecordingMeta::started(id, generation, t.now);
    meta.retention_ms = retention_ms;
    t.start_recording(key, meta)?;
    if let Some(row) = stream_row {
        t.put_stream_row(key, Some(&row))?;
    }
    match fork {
        Some(fork) => t.count_fork(fork.source),
        None => Ok(()),
    }
}
