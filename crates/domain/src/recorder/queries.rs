//! What the faces and the locator may ask of what is stored, through the recorder: rows and
//! streams rows of conversations, and the store's clock (so that nothing above the recorder
//! reaches the store); and what the object store holds of a conversation not (or no longer) local.
use super::Recorder;
use super::deck::Deck;
use crate::error::{Error, Result};
use crate::id::ConversationId;
use crate::store::{RecordingMeta, StreamRow};
use crate::tier::{Remote, Version};

impl Recorder {
    /// The stored rows of conversations `keys`, in order, in one read (`None` where there is
    /// none).
    ///
    /// Fails with a storage error.
    pub async fn metas(&self, keys: Vec<u128>) -> Result<Vec<Option<RecordingMeta>>> {
        self.deck.store().metas(keys).await
    }

    /// The Durable Streams row of conversation `id`, if its recording was made over HTTP.
    ///
    /// Fails with a storage error.
    pub async fn stream_row(&self, id: &ConversationId) -> Result<Option<StreamRow>> {
        self.deck.store().stream_row(id.key()).await
    }

    /// Whether the object store holds a sealed copy of conversation `key` (`false` without one,
    /// or when it does not answer).
    pub async fn in_object_store(&self, key: u128) -> bool {
        matches!(self.deck.remote(key).await, Ok(Some(Remote::Sealed(_))))
    }

    /// Now, in ms since the epoch, by the store's clock (injectable in tests).
    pub fn now_ms(&self) -> u64 {
        self.deck.store().clock().now_ms()
    }
}

impl Deck {
    /// What the object store holds of conversation `key`, which is not stored here; `None`
    /// without an object store.
    ///
    /// Fails with `ObjectStoreUnavailable` when the object store does not answer.
    pub(crate) async fn remote(&self, key: u128) -> Result<Option<Remote>> {
        match &self.tier {
            Some(tier) => tier.find(key, self.store.clock().now_ms()).await,
            None => Ok(None),
        }
    }

    /// What the object store holds of ended recording `meta` of `key` when its chunks left
    /// local disk (so that it is read from there): its sealed copy, or, once that was deleted
    /// or collected by any instance, its tombstone. `None` while its chunks are local.
    ///
    /// Fails with `ObjectStoreUnavailable` (also when the copy its mark names is missing and
    /// no tombstone says why), or a storage error.
    pub(crate) async fn sealed_elsewhere(
        &self,
        key: u128,
        meta: &RecordingMeta,
    ) -> Result<Option<Remote>> {
        let Some(tier) = &self.tier else {
            return Ok(None);
        };
        let Some(mark) = self.store.seal_mark(key).await? else {
            return Ok(None);
        };
        if mark.local || mark.generation != meta.generation {
            return Ok(None);
        }
        let version = Version {
            created_ms: meta.created_ms,
            generation: mark.generation,
            finished_ms: mark.finished_ms,
        };
        if let Some(sealed) = tier.open_sealed(key, version).await? {
            return Ok(Some(Remote::Sealed(sealed)));
        }
        match self.remote(key).await? {
            Some(remote) => Ok(Some(remote)),
            None => Err(Error::ObjectStoreUnavailable {
                detail: "the sealed copy of a recording whose chunks left local disk is missing"
                    .into(),
            }),
        }
    }
}
