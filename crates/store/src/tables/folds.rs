//! The end of a transaction's work: the journal's chunks folded into `chunks` (those due,
//! a recording's last ones when it ends, or all of them), and the changed `recordings` rows
//! written back once, before the commit, with `live` kept naming the live ones.
use super::Tables;
use crate::database::DbHandle;
use crate::error::{Error, Result};
use crate::schema::encode_meta;

impl Tables<'_, '_> {
    pub(crate) fn flush_metas(&mut self) -> Result<()> {
        for (&key, cached) in &mut self.metas.rows {
            if !std::mem::take(&mut cached.dirty) {
                continue;
            }
            let live = cached
                .row
                .as_ref()
                .is_some_and(|meta| meta.status.is_live());
            if cached.listed_live != Some(live) {
                if live {
                    self.live
                        .open_mut()?
                        .insert(key, ())
                        .map_err(Error::storage)?;
                } else {
                    self.live.open_mut()?.remove(key).map_err(Error::storage)?;
                }
                cached.listed_live = Some(live);
            }
            match &cached.row {
                Some(meta) => {
                    let bytes = encode_meta(meta)?;
                    self.recordings
                        .open_mut()?
                        .insert(key, bytes.as_slice())
                        .map_err(Error::storage)?;
                }
                None => {
                    self.recordings
                        .open_mut()?
                        .remove(key)
                        .map_err(Error::storage)?;
                }
            }
        }
        Ok(())
    }

    /// Folds every recording's unfolded chunks into `chunks`.
    pub(crate) fn fold_everything(&mut self) -> Result<()> {
        self.delta.fold_everything(&mut self.chunks, self.index)
    }

    /// Folds the recordings that are due.
    pub(crate) fn fold_due(&mut self) -> Result<()> {
        self.delta.fold_due(&mut self.chunks, self.index)
    }

    /// Folds all of `key`'s unfolded chunks (its last run, when it ends).
    pub(crate) fn fold_recording(&mut self, key: u128) -> Result<()> {
        self.delta
            .fold(&mut self.chunks, self.index, key, true)
            .map(drop)
    }

    /// Finishes the transaction's work before its commit: the rows changed are written, and,
    /// when the commit is to be a checkpoint (which empties the log), every unfolded chunk is
    /// folded first. Returns whether it is to be one.
    pub(crate) fn finish(&mut self, db: &DbHandle) -> Result<bool> {
        let checkpoint = db.checkpoint_due(self.redo.len() as u64);
        if checkpoint {
            self.fold_everything()?;
        }
        self.flush_metas()?;
        Ok(checkpoint)
    }
}
