//! `Finish`: a live recording ends; the first end wins, in the pipeline's queue order.
use super::Applying;
use super::after::Done;
use crate::error::Result;
use crate::live::Live;
use crate::status::Status;

/// When an end goes ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndIf {
    /// Whatever the producers do.
    Always,
    /// Only while this producer session holds the recording.
    Holds(u64),
    /// Only if this producer session is the last one and has let go.
    Detached(u64),
}

/// Ends `live` with `status` and `message` if `only` holds and it has not ended yet; answers
/// whether this op ended it.
pub(super) fn apply(
    cx: &mut Applying<'_, '_, '_>,
    live: Live,
    (status, message): (Status, Option<String>),
    only: EndIf,
    done: Done<bool>,
) -> Result<()> {
    let allowed = match only {
        EndIf::Always => true,
        EndIf::Holds(session) => live.producer_session() == session,
        EndIf::Detached(session) => live.detached_as(session),
    };
    if !allowed || !live.close() {
        // Answered after this batch is published, like the end that came first: the caller
        // then reads the recording's real end, not a state this batch is about to change.
        cx.after.answer(done, false);
        return Ok(());
    }
    let key = live.key();
    let t = &mut *cx.tables;
    let stored = t.appended(key).unwrap_or_else(|| live.committed());
    cx.after.end(live, status, message.clone());
    cx.after.answer(done, true);
    let retention = cx.settings.retention_ms;
    t.finish_meta(key, stored, status, message, retention)?;
    // Its last run: only live recordings keep chunks in memory.
    t.fold_recording(key)
}
