//! `Delete`: an ended recording is marked deleted, due for collection now (its chunks go in
//! bounded `Purge` commits after it).
use super::Applying;
use super::after::Done;
use crate::error::Result;

/// Marks `key`'s recording deleted; answers whether there was one.
pub(super) fn apply(cx: &mut Applying<'_, '_, '_>, key: u128, done: Done<bool>) -> Result<()> {
    match cx.tables.mark_deleted(key) {
        Ok(existed) => {
            cx.after.answer(done, existed);
            Ok(())
        }
        Err(err) => cx.after.abort(done, err),
    }
}
