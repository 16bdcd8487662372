//! `PutStreamRow`: a recording's `streams` row (its Durable Streams state) is written or
//! removed.
use super::Applying;
use super::after::Done;
use crate::error::Result;

/// Writes `row` as `key`'s `streams` row (removes it, with `None`); answers `true`.
pub(super) fn apply(
    cx: &mut Applying<'_, '_, '_>,
    key: u128,
    row: Option<Vec<u8>>,
    done: Done<bool>,
) -> Result<()> {
    match cx.tables.put_stream_row(key, row.as_deref()) {
        Ok(()) => {
            cx.after.answer(done, true);
            Ok(())
        }
        Err(err) => cx.after.abort(done, err),
    }
}
