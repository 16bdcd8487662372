//! `Purge`: a bounded part of a deleted recording's chunks goes; the last one takes its row
//! and leaves a tombstone.
use super::Applying;
use super::after::Done;
use crate::error::Result;
use crate::status::Status;

/// Deletes up to `max_chunks` chunks of `key`'s recording if it is marked deleted; answers
/// whether it is gone (or was not marked deleted).
pub(super) fn apply(
    cx: &mut Applying<'_, '_, '_>,
    key: u128,
    max_chunks: u64,
    done: Done<bool>,
) -> Result<()> {
    let t = &mut *cx.tables;
    let purged = match t.meta(key) {
        Ok(Some(meta)) if meta.status == Status::Deleted => t
            .purge(key, max_chunks, cx.settings.tombstone_ms)
            .map(|(deleted, gone)| {
                if deleted > 0 {
                    cx.after.deletes_chunks();
                }
                gone
            }),
        Ok(_) => Ok(true),
        Err(err) => Err(err),
    };
    match purged {
        Ok(gone) => {
            cx.after.answer(done, gone);
            Ok(())
        }
        Err(err) => cx.after.abort(done, err),
    }
}
