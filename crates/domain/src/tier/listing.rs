//! Listing what the object store holds, a page of conversations at a time in key order: the
//! part of a List after an instance's own recordings, so that any instance lists what every
//! instance sealed.
use futures::{StreamExt, TryStreamExt};

use super::{Tier, Version};
use crate::error::Result;

/// Headers read at once while a page is assembled.
const PARALLEL_READS: usize = 16;

impl Tier {
    /// Up to `limit` conversations with a sealed copy, in key order after `after`, each with
    /// its newest version; and whether more may follow.
    ///
    /// Fails with `ObjectStoreUnavailable`.
    pub async fn list_keys(
        &self,
        after: Option<u128>,
        limit: usize,
    ) -> Result<(Vec<(u128, Version)>, bool)> {
        let prefix = self.keys.prefix().child("recordings");
        // Past every version of `after`: versions are digits and dashes, below '~'.
        let offset = after.map(|key| self.keys.recordings_of(key).child("~"));
        let mut listed = match &offset {
            Some(offset) => self.objects.list_with_offset(Some(&prefix), offset),
            None => self.objects.list(Some(&prefix)),
        };
        let mut found: Vec<(u128, Version)> = Vec::new();
        while let Some(meta) = listed.next().await {
            let meta = meta.map_err(super::unavailable)?;
            let Some((key, version)) = self.keys.parse_recording(&meta.location) else {
                continue;
            };
            if after.is_some_and(|after| key <= after) {
                continue;
            }
            match found.iter_mut().find(|(k, _)| *k == key) {
                Some((_, newest)) => *newest = (*newest).max(version),
                None => found.push((key, version)),
            }
            // S3 lists in name order: once a key past the page's last is seen, the page is
            // whole (a local directory is read to the end and sorted).
            if self.lists_in_order() && found.len() > limit {
                break;
            }
        }
        found.sort_unstable();
        let more = found.len() > limit;
        found.truncate(limit);
        Ok((found, more))
    }

    /// The sealed copies `versions` name, their headers read `PARALLEL_READS` at a time, in
    /// order; a copy collected meanwhile is left out.
    ///
    /// Fails with `ObjectStoreUnavailable`.
    pub async fn open_many(
        &self,
        versions: Vec<(u128, Version)>,
    ) -> Result<Vec<std::sync::Arc<super::Sealed>>> {
        let opened: Vec<_> = futures::stream::iter(versions)
            .map(|(key, version)| self.open_sealed(key, version))
            .buffered(PARALLEL_READS)
            .try_collect()
            .await?;
        Ok(opened.into_iter().flatten().collect())
    }
}
