//! A copy of each conversation's newest sealed copy under a fixed name (`newest/KEY`), so that
//! a reader finds it with one request instead of a listing and then a read: each costs a
//! millisecond or more, and a short recording is read whole with the first. The versioned
//! copies stay the record; this name is either a copy of the newest of them or absent, and a
//! reader that finds it absent lists them, as before.
//!
//! Order keeps it so:
//! - a seal takes the name away before it uploads, so that it never names a copy older than
//!   one uploaded, and names its own copy once the store has marked it, only if that copy is
//!   the newest listed; it lists again after, and takes the name away if by then another copy
//!   is the newest, or none is (another instance's seal, a delete or a collection racing it);
//! - a delete or a collection takes the name away before it removes a copy.
//!
//! A crash in between leaves the name absent, never wrong.
use super::{Tier, Version};
use crate::error::Result;

impl Tier {
    /// Names sealed copy `version` of conversation `key` as its newest, if it is.
    ///
    /// Fails with `ObjectStoreUnavailable`; the name is then absent or, if it could not be
    /// taken away either, names the copy that was the newest a moment before.
    pub async fn name_newest(&self, key: u128, version: Version) -> Result<()> {
        if self.newest_listed(key).await? != Some(version) {
            return Ok(());
        }
        let name = self.keys.newest(key);
        self.objects
            .copy(&self.keys.recording(key, version), &name)
            .await
            .map_err(super::unavailable)?;
        let still = self.newest_listed(key).await;
        if !matches!(still, Ok(Some(newest)) if newest == version) {
            self.delete(&name).await?;
        }
        still.map(drop)
    }

    /// Takes the name away, before a change that could make it untrue.
    ///
    /// Fails with `ObjectStoreUnavailable`.
    pub(super) async fn unname_newest(&self, key: u128) -> Result<()> {
        self.delete(&self.keys.newest(key)).await
    }

    /// The newest of conversation `key`'s sealed copies, as listed now.
    async fn newest_listed(&self, key: u128) -> Result<Option<Version>> {
        let listed = self.list(&self.keys.recordings_of(key)).await?;
        Ok(listed
            .iter()
            .filter_map(|meta| self.keys.version_of(&meta.location))
            .max())
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    const KEY: u128 = 0x5eed;

    fn version(finished_ms: u64) -> Version {
        Version {
            created_ms: 1,
            generation: 1,
            finished_ms,
        }
    }

    async fn put_copy(tier: &Tier, version: Version) -> Bytes {
        let bytes = Bytes::from(format!("copy ending at {}", version.finished_ms));
        tier.put(&tier.keys.recording(KEY, version), bytes.clone())
            .await
            .unwrap();
        bytes
    }

    async fn named(tier: &Tier) -> Option<Bytes> {
        tier.get(&tier.keys.newest(KEY)).await.unwrap()
    }

    #[tokio::test]
    async fn only_the_newest_listed_copy_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let tier = Tier::open(&format!("file://{}", dir.path().display())).unwrap();
        let older = put_copy(&tier, version(10)).await;
        tier.name_newest(KEY, version(10)).await.unwrap();
        assert_eq!(named(&tier).await, Some(older));

        // A newer copy is uploaded (the name goes first); the older one's seal, late, does
        // not name it again.
        tier.unname_newest(KEY).await.unwrap();
        let newer = put_copy(&tier, version(20)).await;
        tier.name_newest(KEY, version(10)).await.unwrap();
        assert_eq!(
            named(&tier).await,
            None,
            "an older copy was named the newest"
        );
        tier.name_newest(KEY, version(20)).await.unwrap();
        assert_eq!(named(&tier).await, Some(newer));
    }
}
