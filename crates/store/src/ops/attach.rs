//! `Attach`: a new producer session takes over a live recording, after every op queued before
//! it; appends of older sessions are refused from then on.
use super::Applying;
use super::after::{Done, refuse};
use crate::error::{Error, Result};
use crate::live::{Live, Resumed};

/// Hands `live` to a new producer session unless `resume_from` is past what is committed;
/// answers with the session and what is committed before it.
pub(super) fn apply(
    cx: &mut Applying<'_, '_, '_>,
    live: Live,
    resume_from: u64,
    done: Done<Resumed>,
) -> Result<()> {
    if live.is_closed() {
        return refuse(done, live.ended_error());
    }
    let (chunks, bytes) = cx
        .tables
        .appended(live.key())
        .unwrap_or_else(|| live.committed());
    if resume_from > bytes {
        let refusal = Error::ResumePastEnd {
            id: live.name(),
            offset: resume_from,
            committed: bytes,
        };
        return refuse(done, refusal);
    }
    let session = live.attach_producer();
    cx.after.touched(live);
    let resumed = Resumed {
        session,
        chunks,
        bytes,
    };
    cx.after.answer(done, resumed);
    Ok(())
}
