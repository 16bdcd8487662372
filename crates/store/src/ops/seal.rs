//! `Seal`: an ended recording's verified copy in the object store is marked beside its row;
//! its local chunks may go in the same commit, or in a later one.
use super::Applying;
use super::after::Done;
use crate::error::Result;
use crate::seal_marks::Sealing;

/// Marks `key`'s recording (`generation`, ended at `finished_ms`) sealed, its chunks dropped
/// with `drop_local`; answers whether the copy is still the recording's.
pub(super) fn apply(
    cx: &mut Applying<'_, '_, '_>,
    key: u128,
    ended: (u64, u64),
    drop_local: bool,
    done: Done<Sealing>,
) -> Result<()> {
    match cx.tables.seal(key, ended, drop_local) {
        Ok(sealing) => {
            cx.after.answer(done, sealing);
            Ok(())
        }
        Err(err) => cx.after.abort(done, err),
    }
}
