//! Delete and expiry in the object store. Any instance collects, on its sweeper's schedule,
//! whatever is due, whoever recorded it; two collectors racing do the same idempotent deletes
//! and write the same tombstone.
use bytes::Bytes;
use futures::StreamExt;

use super::{Remote, Tier, Version};
use crate::error::Result;
use crate::store::{Gone, Tombstone, schema};

/// What one collection did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Collected {
    /// Sealed copies deleted.
    pub copies: u64,
    /// Tombstones forgotten.
    pub tombstones: u64,
}

impl Tier {
    /// Deletes every sealed copy of conversation `key` and leaves a tombstone saying it was
    /// deleted at `now_ms`. Returns whether there was a copy.
    ///
    /// Fails with `ObjectStoreUnavailable`; deleting again is harmless.
    pub async fn delete_copies(&self, key: u128, now_ms: u64) -> Result<bool> {
        let Some(Remote::Sealed(newest)) = self.find(key, now_ms).await? else {
            return Ok(false);
        };
        let tombstone = newest
            .header
            .meta
            .tombstone(Gone::Deleted, now_ms, self.tombstone_ms);
        // The tombstone goes first: a reader finds a copy while one is left and the tombstone
        // after, never neither (which would read as "unknown").
        self.bury(key, &tombstone).await?;
        self.unname_newest(key).await?;
        for copy in self.list(&self.keys.recordings_of(key)).await? {
            self.delete(&copy.location).await?;
        }
        Ok(true)
    }

    /// Deletes sealed copy `version` of `key` (a copy that turned out to be no one's).
    ///
    /// Fails with `ObjectStoreUnavailable`.
    pub async fn delete_version(&self, key: u128, version: Version) -> Result<()> {
        self.delete(&self.keys.recording(key, version)).await
    }

    async fn bury(&self, key: u128, tombstone: &Tombstone) -> Result<()> {
        let bytes = schema::encode(tombstone, "a tombstone")?;
        self.put(
            &self.keys.forget(tombstone.forgotten_at_ms, key),
            Bytes::new(),
        )
        .await?;
        self.put(&self.keys.tombstone(key), Bytes::from(bytes))
            .await
    }

    /// Collects every copy whose expiry is at or before `now_ms` (a tombstone takes the place
    /// of a conversation's last copy), and forgets tombstones due.
    ///
    /// Fails with `ObjectStoreUnavailable`; what is left is collected next time.
    pub async fn collect_expired(&self, now_ms: u64) -> Result<Collected> {
        let mut collected = Collected::default();
        for (key, version, marker) in self
            .due(&self.keys.expiries(), now_ms, |keys, path| {
                let (at, key, version) = keys.parse_expiry(path)?;
                Some((at, (key, version)))
            })
            .await?
        {
            if self.collect_copy(key, version, now_ms).await? {
                collected.copies += 1;
            }
            self.delete(&marker).await?;
        }
        for (key, (), marker) in self
            .due(&self.keys.forgets(), now_ms, |keys, path| {
                let (at, key) = keys.parse_forget(path)?;
                Some((at, (key, ())))
            })
            .await?
        {
            if self.forget(key, now_ms).await? {
                collected.tombstones += 1;
            }
            self.delete(&marker).await?;
        }
        Ok(collected)
    }

    /// The markers under `prefix` due at `now_ms`, parsed by `parse` into `(due, what)`.
    async fn due<T>(
        &self,
        prefix: &object_store::path::Path,
        now_ms: u64,
        parse: impl Fn(&super::Keys, &object_store::path::Path) -> Option<(u64, (u128, T))>,
    ) -> Result<Vec<(u128, T, object_store::path::Path)>> {
        let mut listed = self.objects.list(Some(prefix));
        let mut due = Vec::new();
        while let Some(meta) = listed.next().await {
            let meta = meta.map_err(super::unavailable)?;
            match parse(&self.keys, &meta.location) {
                Some((at, (key, what))) if at <= now_ms => due.push((key, what, meta.location)),
                // Names sort by time in S3: nothing after this one is due (a local directory
                // lists in no order, so it is read to the end).
                Some(_) if self.lists_in_order() => break,
                _ => {}
            }
        }
        Ok(due)
    }

    /// Deletes copy `version` of `key`; when it was the conversation's last, leaves its
    /// tombstone. Returns whether the copy was there.
    async fn collect_copy(&self, key: u128, version: Version, now_ms: u64) -> Result<bool> {
        let path = self.keys.recording(key, version);
        // Not there: already collected (by a racing collector), or never written.
        let Some(sealed) = self.open_sealed(key, version).await? else {
            return Ok(false);
        };
        // The last copy's tombstone is written before the copy goes, so that a reader in
        // between, or a collector that stops in between, never leaves neither.
        let others = self.list(&self.keys.recordings_of(key)).await?;
        let last = others
            .iter()
            .all(|meta| self.keys.version_of(&meta.location) == Some(version));
        if last {
            let keep_ms = self.tombstone_ms;
            let tombstone = sealed.header.meta.tombstone(Gone::Expired, now_ms, keep_ms);
            self.bury(key, &tombstone).await?;
        }
        self.unname_newest(key).await?;
        self.delete(&path).await?;
        Ok(true)
    }

    /// Forgets `key`'s tombstone if it is due (a newer one is kept). Returns whether it went.
    async fn forget(&self, key: u128, now_ms: u64) -> Result<bool> {
        let path = self.keys.tombstone(key);
        let Some(bytes) = self.get(&path).await? else {
            return Ok(false);
        };
        let tombstone: Tombstone = schema::decode(&bytes, "tombstone in the object store")?;
        if tombstone.forgotten_at_ms > now_ms {
            return Ok(false);
        }
        self.delete(&path).await?;
        Ok(true)
    }
}
