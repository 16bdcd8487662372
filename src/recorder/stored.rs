//! What the faces and the locator may ask of what is stored, through the recorder: rows of
//! conversations, and the store's clock (so that nothing above the recorder reaches the store).
use super::Recorder;
use crate::error::Result;
use crate::store::RecordingMeta;

impl Recorder {
    /// The stored rows of conversations `keys`, in order, in one read (`None` where there is
    /// none).
    ///
    /// Fails with a storage error.
    pub async fn metas(&self, keys: Vec<u128>) -> Result<Vec<Option<RecordingMeta>>> {
        self.deck.store().metas(keys).await
    }

    /// Now, in ms since the epoch, by the store's clock (injectable in tests).
    pub fn now_ms(&self) -> u64 {
        self.deck.store().clock().now_ms()
    }
}
