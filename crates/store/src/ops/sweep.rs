//! `Sweep`: recordings whose retention has passed are deleted, a bounded number of chunks per
//! commit, and old tombstones forgotten.
use super::Applying;
use super::after::Done;
use crate::error::Result;

/// What one sweep commit deleted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SweepReport {
    /// Recordings deleted whole.
    pub recordings_deleted: u64,
    /// Chunks deleted, of those recordings and of ones left for a later commit.
    pub chunks_deleted: u64,
    /// Expired data is left for the next commit because this one reached its chunk budget.
    pub more: bool,
    /// Tombstones forgotten, their `--tombstone-retention` having passed.
    pub tombstones_forgotten: u64,
}

/// Deletes expired recordings, at most `max_chunks` chunks; answers with what it deleted.
pub(super) fn apply(
    cx: &mut Applying<'_, '_, '_>,
    max_chunks: u64,
    done: Done<SweepReport>,
) -> Result<()> {
    let tombstone_ms = cx.settings.tombstone_ms;
    match cx.tables.sweep_expired(max_chunks, tombstone_ms) {
        Ok(report) => {
            if report.chunks_deleted > 0 {
                cx.after.deletes_chunks();
            }
            if !report.more && report.chunks_deleted > 0 {
                // The last of the expired data: a full disk may have room again.
                cx.after.collected();
            }
            cx.after.answer(done, report);
            Ok(())
        }
        Err(err) => cx.after.abort(done, err),
    }
}
