//! The sweep within one write transaction: recordings whose expiry has passed are collected
//! oldest first within a budget of chunks, ones that forks still read are taken out of the
//! schedule instead, and tombstones whose time is up are forgotten.
use redb::ReadableTable;

use super::Tables;
use crate::error::{Error, Result};
use crate::ops::SweepReport;

/// Expired recordings looked at by one sweep commit, at most.
const MAX_DUE_PER_SWEEP: usize = 1024;

impl Tables<'_, '_> {
    /// Deletes tombstones whose time is up, at most [`MAX_DUE_PER_SWEEP`]; returns how many.
    fn forget_old_tombstones(&mut self) -> Result<u64> {
        let due = due_by(self.tombstone_expiry.open()?, self.now)?;
        for &(at, key) in &due {
            self.tombstone_expiry
                .open_mut()?
                .remove((at, key))
                .map_err(Error::storage)?;
            self.tombstones
                .open_mut()?
                .remove(key)
                .map_err(Error::storage)?;
        }
        Ok(due.len() as u64)
    }

    /// Deletes recordings whose expiry time has passed, oldest first, up to `max_chunks` folded
    /// chunks, leaving tombstones kept for `tombstone_ms`; and forgets old tombstones.
    pub(crate) fn sweep_expired(
        &mut self,
        max_chunks: u64,
        tombstone_ms: u64,
    ) -> Result<SweepReport> {
        let mut report = SweepReport::default();
        let due = due_by(self.expiry.open()?, self.now)?;
        for (expires, key) in due {
            if self.pinned(key)? {
                // Out of the schedule; deleted with its last fork (see `release_fork`).
                self.expiry
                    .open_mut()?
                    .remove((expires, key))
                    .map_err(Error::storage)?;
                let cached = self.cached(key)?;
                if let Some(meta) = cached.row.as_mut() {
                    meta.expires_at_ms = None;
                    cached.dirty = true;
                }
                continue;
            }
            let budget = max_chunks.saturating_sub(report.chunks_deleted);
            let (deleted, gone) = self.purge(key, budget, tombstone_ms)?;
            report.chunks_deleted += deleted;
            if !gone {
                report.more = true;
                break;
            }
            // Gone with its row already, unless the row disagreed with the schedule.
            self.expiry
                .open_mut()?
                .remove((expires, key))
                .map_err(Error::storage)?;
            report.recordings_deleted += 1;
        }
        report.tombstones_forgotten = self.forget_old_tombstones()?;
        Ok(report)
    }
}

/// The first [`MAX_DUE_PER_SWEEP`] entries of a `(time, conversation)` schedule due by `now`.
fn due_by(schedule: &redb::Table<'_, (u64, u128), ()>, now: u64) -> Result<Vec<(u64, u128)>> {
    schedule
        .range(..=(now, u128::MAX))
        .map_err(Error::storage)?
        .take(MAX_DUE_PER_SWEEP)
        .map(|entry| entry.map(|(k, _)| k.value()).map_err(Error::storage))
        .collect()
}
