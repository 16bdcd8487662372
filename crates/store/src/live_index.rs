//! The `live` table: the conversations whose latest recording is `recording`, so that start-up
//! finds the recordings a crash left live without reading every `recordings` row. The commit
//! pipeline keeps it beside the rows (see `tables::folds`); a file upgraded from schema 4, and
//! a cluster snapshot being installed (which does not carry it), fill it from the rows.
use redb::{ReadableTable, TableDefinition, WriteTransaction};

use crate::error::{Error, Result};
use crate::schema::{RECORDINGS, decode_meta};

/// conversation → nothing: its `recordings` row is `recording`.
pub(crate) const LIVE: TableDefinition<u128, ()> = TableDefinition::new("live");

/// Makes `live` hold exactly the conversations whose row in `recordings` is live, reading every
/// row; returns how many are. For files and snapshots that were written without it.
///
/// Fails with a storage error, or `Decode` for a row that does not decode.
pub(crate) fn rebuild(txn: &WriteTransaction) -> Result<u64> {
    txn.delete_table(LIVE).map_err(Error::storage)?;
    let mut live = txn.open_table(LIVE).map_err(Error::storage)?;
    let recordings = txn.open_table(RECORDINGS).map_err(Error::storage)?;
    let mut count = 0;
    for entry in recordings.iter().map_err(Error::storage)? {
        let (key, value) = entry.map_err(Error::storage)?;
        if decode_meta(value.value())?.status.is_live() {
            live.insert(key.value(), ()).map_err(Error::storage)?;
            count += 1;
        }
    }
    Ok(count)
}
