//! The `sealed` marks in a write transaction: a verified copy in the object store is marked
//! beside its row, and its local chunks may then go (the row stays, for Get, List and the GC
//! schedule).
use redb::ReadableTable;

use super::Tables;
use crate::error::{Error, Result};
use crate::seal_marks::{SealMark, Sealing};

impl Tables<'_, '_> {
    /// The seal mark of `key`'s recording, if it is sealed.
    pub(crate) fn seal_mark(&self, key: u128) -> Result<Option<SealMark>> {
        match self.sealed.open()?.get(key).map_err(Error::storage)? {
            Some(bytes) => Ok(Some(SealMark::decode(bytes.value())?)),
            None => Ok(None),
        }
    }

    /// Marks `key`'s recording sealed, if it is still the ended recording the copy was made
    /// of (same generation, same end); with `drop_local`, its chunks go from local disk
    /// (unless it can still be resumed).
    pub(crate) fn seal(
        &mut self,
        key: u128,
        (generation, finished_ms): (u64, u64),
        drop_local: bool,
    ) -> Result<Sealing> {
        let Some(meta) = self.meta(key)? else {
            return Ok(Sealing::Stale);
        };
        let same = meta.generation == generation && meta.finished_ms == Some(finished_ms);
        if !same || meta.status.is_live() || meta.status == crate::status::Status::Deleted {
            return Ok(Sealing::Stale);
        }
        let mark = match self.seal_mark(key)? {
            Some(mark) if mark.generation == generation && mark.finished_ms == finished_ms => mark,
            _ => SealMark {
                generation,
                finished_ms,
                sealed_ms: self.now,
                local: true,
            },
        };
        // A resumable recording (interrupted, failed) keeps its chunks: a producer may still
        // resume it, and appends need what came before on local disk.
        let drop_local = drop_local && !meta.status.is_resumable();
        let mark = SealMark {
            local: mark.local && !drop_local,
            ..mark
        };
        if !mark.local {
            self.chunks
                .open_mut()?
                .remove_range((key, 0)..=(key, u64::MAX))?;
            self.delta.forget(self.redo, self.index, key);
        }
        self.sealed
            .open_mut()?
            .insert(key, mark.encode()?.as_slice())
            .map_err(Error::storage)?;
        Ok(Sealing::Marked)
    }

    /// Removes `key`'s seal mark: its row changed, or went.
    pub(super) fn forget_seal(&mut self, key: u128) -> Result<()> {
        self.sealed
            .open_mut()?
            .remove(key)
            .map(drop)
            .map_err(Error::storage)
    }
}
